"""The screen's length figures are those of the requests the simulator serves: prompt + output
within the model's context (defect: heavy-tailed prompts collapsed the analytic capacity)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from fastsim.analytic import Demand, plan_for, screen
from fastsim.catalog import LengthDist, Scenario, default_catalog
from fastsim.errors import FastsimInputError
from fastsim.workload import served_lengths

L = LengthDist


def _grid_moments(pd, od, c, n=4001):
    """E over a (z_P, z_O) grid of the truncated moments: an independent numeric integral."""
    z = np.linspace(-9, 9, n)
    w = np.exp(-0.5 * z * z)
    w /= w.sum()
    p = np.exp(pd.mu + pd.sigma * z)[:, None]
    o = np.exp(od.mu + od.sigma * z)[None, :]
    m = (p + o <= c) * (w[:, None] * w[None, :])
    f = m.sum()
    return f, (m * p).sum() / f, (m * o).sum() / f, (m * p * p).sum() / (m * p).sum()


@pytest.mark.parametrize("pd,od,c", [
    (L("lognormal", 1000, 0.8), L("lognormal", 250, 0.8), 4000.0),
    (L("lognormal", 8000, 1.2), L("lognormal", 400, 1.0), 32768.0),
    (L("lognormal", 1500, 1.5), L("lognormal", 3000, 1.5), 8192.0),
])
def test_served_lengths_match_a_numeric_integral(pd, od, c):
    s = served_lengths((pd, od), c)
    f, mp, mo, wp = _grid_moments(pd, od, c)
    assert s.binds
    assert s.served_fraction == pytest.approx(f, rel=2e-3)
    assert s.mean_prompt_tokens == pytest.approx(mp, rel=2e-3)
    assert s.mean_output_tokens == pytest.approx(mo, rel=2e-3)
    assert s.work_prompt_tokens == pytest.approx(wp, rel=5e-3)


def test_served_lengths_match_monte_carlo_on_the_heavy_tail():
    pd, od, c = L("lognormal", 1500, 3.0), L("lognormal", 300, 0.7), 131072.0
    s = served_lengths((pd, od), c)
    rng = np.random.default_rng(7)
    n = 4_000_000
    p = np.exp(pd.mu + pd.sigma * rng.standard_normal(n))
    o = np.exp(od.mu + od.sigma * rng.standard_normal(n))
    ok = p + o <= c
    assert s.served_fraction == pytest.approx(ok.mean(), abs=1e-4)
    assert s.mean_prompt_tokens == pytest.approx(p[ok].mean(), rel=2e-2)
    assert s.mean_output_tokens == pytest.approx(o[ok].mean(), rel=2e-3)
    assert s.work_prompt_tokens == pytest.approx((p[ok] ** 2).mean() / p[ok].mean(), rel=5e-2)
    # the untruncated work-weighted prompt (12 M tokens) is 380 x what is served (about 32 k)
    assert pd.work_mean / s.work_prompt_tokens > 300


def test_fixed_lengths_are_closed_forms():
    pd, od = L("lognormal", 2000, 1.0), L("fixed", 500)
    s = served_lengths((pd, od), 10000.0)
    from scipy.stats import lognorm
    dist = lognorm(s=pd.sigma, scale=math.exp(pd.mu))
    c = 9500.0
    assert s.served_fraction == pytest.approx(dist.cdf(c), rel=1e-12)
    assert s.mean_prompt_tokens == pytest.approx(dist.expect(lambda x: x, ub=c) / dist.cdf(c), rel=1e-8)
    assert s.mean_output_tokens == 500.0
    t = served_lengths((L("fixed", 100), L("fixed", 50)), 120.0)
    assert t.served_fraction == 0.0 and t.binds
    assert served_lengths((L("fixed", 100), L("fixed", 20)), 120.0).served_fraction == 1.0


def test_no_truncation_where_it_does_not_bind_is_bit_for_bit():
    pd, od = L("lognormal", 1000, 0.8), L("lognormal", 250, 0.8)
    for c in (math.inf, 1e9, 131072):      # 131,072: rejected share 4e-11, work moved 5e-7 (< 1e-6)
        s = served_lengths((pd, od), c)
        assert not s.binds and s.served_fraction == 1.0
        assert (s.mean_prompt_tokens, s.mean_output_tokens, s.work_prompt_tokens) == (1000.0, 250.0, pd.work_mean)
    chat = default_catalog().scenario("chat")
    d = Demand.from_scenario(chat)
    assert d.within_context(1e9) is d
    assert d.within_context(131072) is d
    assert d.within_context(math.inf) is d


@pytest.mark.parametrize("bad", [0, -5, float("nan"), "x", True])
def test_bad_context_is_refused(bad):
    with pytest.raises(FastsimInputError, match="max_context_tokens"):
        served_lengths("chat", bad)


def test_served_fraction_is_checked():
    with pytest.raises(FastsimInputError, match="served_fraction"):
        Demand(10, 1, 0.05, 100, 100, 100, 100, served_fraction=1.5)


def _sig3(sigma=3.0):
    return Scenario("s", "llama-3.1-8b", L("lognormal", 1500, sigma), L("lognormal", 300, 0.7), 1.0, 0.04, 20.0)


def test_sig3_screen_sizes_for_the_served_lengths():
    sc = _sig3()
    d = Demand.from_scenario(sc)
    t = d.within_context(131072)
    assert t.context_tokens == 131072 and 0.998 < t.served_fraction < 0.999
    assert t.served_rate_req_per_s == pytest.approx(20 * t.served_fraction)
    assert t.latency_prompt_tokens == d.latency_prompt_tokens      # the untruncated P90 (see within_context)
    assert t.within_context(131072) is t
    plan = plan_for(sc.model, d, gpu="H100", precision="FP8", tp=1)
    assert plan.instances == 1                                    # was 81 (capacity 0.2 req/s per instance)
    assert plan.capacity_req_per_s > 20
    df = screen(sc.model, d, options=__import__("fastsim").analytic.ScreenOptions(gpus=("H100",), precisions=("FP8",)))
    assert df.feasible.any()


def test_a_demand_that_serves_less_than_nine_tenths_is_infeasible():
    from fastsim.analytic import ScreenOptions
    d = Demand(1.0, 5.0, 0.1, 2000, 300, 4000, 600, served_fraction=0.85)
    df = screen("llama-3.1-8b", d, options=ScreenOptions(gpus=("H100",), precisions=("FP8",)))
    assert not df.feasible.any()
    assert "85.0% of the requests fit llama-3.1-8b's context" in df.reason.iloc[0]
    ok = screen("llama-3.1-8b", Demand(1.0, 5.0, 0.1, 2000, 300, 4000, 600, served_fraction=0.95),
                options=ScreenOptions(gpus=("H100",), precisions=("FP8",)))
    assert ok.feasible.any()


def test_sig3_simulated_utilisation_is_at_most_about_one_where_the_plan_passes():
    from fastsim.search import SLO, SeedWorkloads, verify
    from fastsim.workload import synthesize
    sc = _sig3()
    d = Demand.from_scenario(sc)
    plan = plan_for(sc.model, d, gpu="H100", precision="FP8", tp=1)

    def make(s):
        w = synthesize(sc, 20.0, 200.0, s)
        return w.arrival_s, w.prompt_tokens, w.output_tokens
    # the planner's workloads: seeds added while the Wilson bound cannot decide (a pass is sure)
    v = verify(plan, SeedWorkloads(make, 0, 1), SLO(1.0, 0.04), horizon_s=200.0)
    assert v.passed and v.attainment_ci95_lo >= 0.9
    accepted = (v.requests - v.rejected) / 200.0 / v.runs
    assert accepted / plan.capacity_req_per_s <= 1.05
