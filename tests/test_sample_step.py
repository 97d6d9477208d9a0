"""The simulator's automatic sampling step (``sample_dt_s=None``): horizons above 1e7 s run."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fastsim.catalog import default_catalog
from fastsim.errors import FastsimInputError
from fastsim.sim import ColocatedPlan, DisaggregatedPlan, simulate, simulate_batch
from fastsim.sim.engine import MAX_SAMPLES, auto_sample_dt
from fastsim.stepmodel import step_params

CAT = default_catalog()
P8 = step_params(CAT.model("llama-3.1-8b"), CAT.gpu("H100"), CAT.precision("BF16"), 1)
KW = dict(ttft_slo_s=1.0, tpot_slo_s=0.1)


def _work(seed, rate, horizon):
    g = np.random.default_rng(seed)
    n = int(rate * horizon * 1.5 + 20)
    a = np.cumsum(g.exponential(1.0 / rate, n))
    a = a[a < horizon]
    m = a.shape[0]
    return a, g.integers(50, 2000, m).astype(np.int64), g.integers(1, 400, m).astype(np.int64)


def _same(x, y, name="result"):
    if isinstance(x, list):
        assert len(x) == len(y), name
        for k, (u, v) in enumerate(zip(x, y)):
            _same(u, v, f"{name}[{k}]")
    elif hasattr(x, "_fields"):
        assert type(x) is type(y), name
        for f in x._fields:
            _same(getattr(x, f), getattr(y, f), f"{name}.{f}")
    elif isinstance(x, np.ndarray):
        np.testing.assert_array_equal(x, y, err_msg=name)
        assert x.dtype == y.dtype, name
    else:
        assert x == y or (x != x and y != y), name


@pytest.mark.parametrize("horizon, dt", [
    (0.5, 1.0), (10.0, 1.0), (1e7, 1.0), (1e7 + 1.0, 2.0), (2e7, 2.0), (2e7 + 1.0, 5.0), (5e7, 5.0),
    (5e7 + 1.0, 10.0), (1e8, 10.0), (1.5e8, 20.0), (3e8, 50.0), (1e9, 100.0), (2.5e13, 5e6),
])
def test_auto_step_is_the_smallest_1_2_5_step_within_1e7_samples(horizon, dt):
    assert auto_sample_dt(horizon) == dt
    assert math.ceil(horizon / dt) <= MAX_SAMPLES
    series = [m * 10.0 ** k for k in range(8) for m in (1.0, 2.0, 5.0)]
    assert dt in series
    for s in series[:series.index(dt)]:      # every smaller step of the series gives too many samples
        assert horizon / s > MAX_SAMPLES


def test_auto_step_refuses_a_bad_horizon():
    with pytest.raises(FastsimInputError) as e:
        auto_sample_dt(0.0)
    assert e.value.field == "horizon_s"


def test_horizon_of_2e7_s_runs_with_a_2_s_step():
    h = 2e7
    a, P, O = _work(1, 1e-4, h)
    assert a.shape[0] > 100
    r = simulate(ColocatedPlan(P8, 1, 64), a, P, O, horizon_s=h, **KW)
    assert r.sample_t_s.shape == (10_000_000,)
    assert r.sample_t_s[1] - r.sample_t_s[0] == 2.0 and r.sample_t_s[-1] == h - 2.0
    assert r.queue_len.shape == r.kv_tokens.shape == (10_000_000, 1)
    assert r.in_system.shape == (10_000_000,)
    m = r.metrics
    assert m.n_requests == a.shape[0] and not m.overloaded and m.attainment == 1.0
    # the same run with the step given explicitly is the same run
    r2 = simulate(ColocatedPlan(P8, 1, 64), a, P, O, horizon_s=h, sample_dt_s=2.0, **KW)
    _same(r2, r)


def test_batch_of_3e7_s_runs_with_a_5_s_step():
    h = 3e7
    works = [_work(s, 5e-5, h) for s in (2, 3)]
    plans = [ColocatedPlan(P8, 1, 64), DisaggregatedPlan(P8, 1, P8, 1)]
    ms = simulate_batch(plans, works, horizon_s=h, **KW)
    assert [m.n_requests for m in ms] == [w[0].shape[0] for w in works]
    rs = simulate_batch(plans[:1], works[:1], horizon_s=h, full=True, **KW)
    assert rs[0].sample_t_s.shape == (6_000_000,) and rs[0].sample_t_s[1] == 5.0
    _same(rs[0].metrics, ms[0])


@pytest.mark.parametrize("dt", [1.0, 1.99])
def test_explicit_step_too_small_names_the_field(dt):
    a, P, O = _work(1, 1e-4, 2e7)
    with pytest.raises(FastsimInputError) as e:
        simulate(ColocatedPlan(P8, 1, 64), a, P, O, horizon_s=2e7, sample_dt_s=dt, **KW)
    assert e.value.field == "sample_dt_s"
    assert "1e7 samples" in str(e.value) and "None" in str(e.value)


@pytest.mark.parametrize("horizon, rate", [(300.0, 8.0), (1e7, 2e-5)])
def test_horizons_up_to_1e7_s_are_unchanged(horizon, rate):
    """The default step is the former fixed 1 s up to 1e7 s: the same results, bit for bit."""
    a, P, O = _work(4, rate, horizon)
    for plan in (ColocatedPlan(P8, 2, 256), DisaggregatedPlan(P8, 1, P8, 1)):
        auto = simulate(plan, a, P, O, horizon_s=horizon, **KW)
        old = simulate(plan, a, P, O, horizon_s=horizon, sample_dt_s=1.0, **KW)
        assert auto.sample_t_s.shape == (int(math.ceil(horizon)),)
        _same(auto, old)
    ms = simulate_batch([ColocatedPlan(P8, 1, 256)], [(a, P, O)], horizon_s=horizon, **KW)
    _same(ms, simulate_batch([ColocatedPlan(P8, 1, 256)], [(a, P, O)], horizon_s=horizon, sample_dt_s=1.0, **KW))


def test_engine_policy_run_of_2e7_s_takes_the_automatic_step():
    h = 2e7
    a, P, O = _work(5, 5e-5, h)
    plan = ColocatedPlan(P8, 1, 64)
    r = simulate(plan, a, P, O, horizon_s=h, policy="vllm", **KW)
    assert r.sample_t_s.shape == (10_000_000,) and r.sample_t_s[1] == 2.0
    assert r.metrics.n_requests == a.shape[0] and not r.metrics.overloaded
    _same(r, simulate(plan, a, P, O, horizon_s=h, policy="vllm", sample_dt_s=2.0, **KW))
