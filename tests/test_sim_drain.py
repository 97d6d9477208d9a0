"""Runs that drain (offline batches, finite online runs) and the figures benchmark clients report."""
from __future__ import annotations

import numpy as np
import pytest

from fastsim.analytic import Demand, plan_for
from fastsim.catalog import default_catalog
from fastsim.errors import FastsimInputError
from fastsim.search import sim_plan
from fastsim.sim import benchmark_figures, simulate, simulate_drained
from fastsim.sim.records import REQ_FINISHED
from fastsim.search.verify import _lone_times

CAT = default_catalog()


def _analytic_plan(model="llama-3.1-8b", gpu="H100", precision="FP8"):
    return plan_for(model, Demand.from_scenario(CAT.scenario("chat")), gpu=gpu, precision=precision, tp=1,
                    instances=1, catalog=CAT)


def _plan(**kw):
    return sim_plan(_analytic_plan(**kw), CAT)


@pytest.mark.parametrize("policy", ["lecture", "vllm"])
def test_an_offline_batch_drains_and_matches_the_plain_run(policy):
    n = 200
    a, p, o = np.zeros(n), np.full(n, 512), np.full(n, 300)
    plan = _plan()
    r = simulate_drained(plan, a, p, o, policy=policy)
    assert (r.status == REQ_FINISHED).all()
    f = benchmark_figures(r)
    assert f.finished == n and f.rejected == 0 and f.output_tokens == n * 300
    assert f.makespan_s == pytest.approx(r.finish_s.max())
    assert f.output_tokens_per_s == pytest.approx(n * 300 / r.finish_s.max(), rel=1e-12)
    # the drained run is the simulator's run at the horizon it found, bit for bit
    plain = simulate(plan, a, p, o, horizon_s=_horizon_of(r), ttft_slo_s=1.0, tpot_slo_s=0.05,
                     measure_window=(0.0, 1.0), sample_dt_s=_horizon_of(r) / 10_000, policy=policy)
    np.testing.assert_array_equal(plain.finish_s, r.finish_s)
    np.testing.assert_array_equal(plain.first_token_s, r.first_token_s)


def _horizon_of(r):
    # the grid spans the horizon in steps of horizon / 1e4 (the first sample at 0)
    dt = float(r.sample_t_s[1] - r.sample_t_s[0])
    return dt * 10_000


def test_a_lone_request_is_its_steps():
    """One request alone (lecture scheduler): TTFT is its prefill steps and each decode step reads a
    context one token longer, so TPOT is the step at the mean context P + O / 2 where the step is
    linear in the context (SPEC §3, §6; ``search.verify._lone_times`` prices both)."""
    aplan = _analytic_plan()
    plan = sim_plan(aplan, CAT)
    P, O = 1000, 51
    r = simulate_drained(plan, np.zeros(1), np.array([P]), np.array([O]))
    f = benchmark_figures(r)
    lone_ttft_s, lone_tpot_s = _lone_times(aplan, P, O, CAT)
    ttft = r.first_token_s[0]
    decode = r.finish_s[0] - r.first_token_s[0]
    assert ttft == pytest.approx(lone_ttft_s, rel=1e-9)
    assert decode / (O - 1) == pytest.approx(lone_tpot_s, rel=1e-3)
    assert f.ttft_s["mean"] == pytest.approx(ttft) and f.ttft_s["p99"] == pytest.approx(ttft)
    assert f.tpot_s["mean"] == pytest.approx(decode / (O - 1))
    assert f.itl_mean_s == pytest.approx(f.tpot_s["mean"])            # one request: the same gaps
    assert f.e2e_s["mean"] == pytest.approx(r.finish_s[0])
    assert f.output_tokens_per_s == pytest.approx(O / r.finish_s[0])


def test_itl_is_token_weighted_and_tpot_request_weighted():
    plan = _plan()
    a = np.array([0.0, 0.0])
    r = simulate_drained(plan, a, np.array([100, 100]), np.array([2, 401]))
    f = benchmark_figures(r)
    d = r.finish_s - r.first_token_s
    assert f.itl_mean_s == pytest.approx(d.sum() / (1 + 400))
    assert f.tpot_s["mean"] == pytest.approx(np.mean([d[0] / 1, d[1] / 400]))


def test_output_of_one_token_has_no_tpot():
    r = simulate_drained(_plan(), np.zeros(3), np.full(3, 64), np.ones(3, np.int64))
    f = benchmark_figures(r)
    assert f.finished == 3 and np.isnan(f.tpot_s["mean"]) and np.isnan(f.itl_mean_s)
    assert f.to_dict()["tpot_s"]["mean"] is None


def test_a_rejected_request_is_counted_not_measured():
    r = simulate_drained(_plan(), np.zeros(2), np.array([100, 200_000]), np.array([10, 10]))
    f = benchmark_figures(r)
    assert (f.finished, f.rejected, f.output_tokens) == (1, 1, 10)


@pytest.mark.parametrize("key", ["horizon_s", "measure_window", "sample_dt_s"])
def test_a_drained_run_sets_its_own_horizon_and_window(key):
    with pytest.raises(FastsimInputError, match=key):
        simulate_drained(_plan(), np.zeros(1), np.array([10]), np.array([10]), **{key: 1.0})


def test_a_run_that_cannot_drain_names_the_limit():
    with pytest.raises(FastsimInputError, match=r"max_horizon_s.*still unfinished"):
        simulate_drained(_plan(), np.zeros(50), np.full(50, 4000), np.full(50, 4000), max_horizon_s=5.0)


@pytest.mark.parametrize("metric, stat, match", [
    ("itl_s", "p90", "per-token times"), ("output_tokens_per_s", "mean", "total"),
    ("goodput", "mean", "metric"), ("ttft_s", "p75", "stat"),
])
def test_figures_refuse_what_they_do_not_hold(metric, stat, match):
    f = benchmark_figures(simulate_drained(_plan(), np.zeros(2), np.full(2, 10), np.full(2, 10)))
    with pytest.raises(FastsimInputError, match=match):
        f.value(metric, stat)


def test_figures_by_name():
    f = benchmark_figures(simulate_drained(_plan(), np.zeros(4), np.full(4, 100), np.full(4, 20)))
    assert f.value("ttft_s", "p90") == f.ttft_s["p90"]
    assert f.value("itl_s", "mean") == f.itl_mean_s
    assert f.value("output_tokens_per_s", "total") == f.output_tokens_per_s
