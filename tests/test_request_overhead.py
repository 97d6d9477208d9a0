"""The per-request time outside the GPU schedule (StepConstants.request_overhead_s, step model v2):
every request's TTFT and E2E as its client sees them, never its TPOT, never the schedule."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fastsim.catalog import default_catalog
from fastsim.errors import FastsimInputError
from fastsim.sim import ColocatedPlan, DisaggregatedPlan, PipelinePlan, simulate
from fastsim.stepmodel import P_REQ_OVERHEAD, StepConstants, stage_params, step_params

CAT = default_catalog()
M, G, PR = CAT.model("llama-3.1-8b"), CAT.gpu("H100"), CAT.precision("FP8")
C_S = 0.025


def _workload(n=300, rate=12.0, seed=3):
    rng = np.random.default_rng(seed)
    a = np.cumsum(rng.exponential(1.0 / rate, n))
    return a, rng.integers(50, 3000, n), rng.integers(2, 400, n)


def _plans(k):
    return {
        "lecture": (ColocatedPlan(step_params(M, G, PR, 1, k), 2, 2048), "lecture"),
        "vllm": (ColocatedPlan(step_params(M, G, PR, 1, k), 2, 2048), "vllm"),
        "sglang": (ColocatedPlan(step_params(M, G, PR, 1, k), 2, 2048), "sglang"),
        "trtllm": (ColocatedPlan(step_params(M, G, PR, 1, k), 2, 2048), "trtllm"),
        "disaggregated": (DisaggregatedPlan(step_params(M, G, PR, 1, k), 1, step_params(M, G, PR, 1, k), 2), "lecture"),
        "pipeline": (PipelinePlan(stage_params(M, G, PR, 1, k, pp=2), 2, 2048), "lecture"),
        "pipeline-trtllm": (PipelinePlan(stage_params(M, G, PR, 1, k, pp=2), 2, 2048), "trtllm"),
    }


@pytest.mark.parametrize("name", list(_plans(StepConstants())))
def test_the_client_sees_each_request_the_overhead_later(name):
    a, p, o = _workload()
    kw = dict(horizon_s=40.0, ttft_slo_s=0.06, tpot_slo_s=0.5)
    plan0, pol = _plans(StepConstants())[name]
    plan1, _ = _plans(StepConstants(request_overhead_s=C_S))[name]
    r0 = simulate(plan0, a, p, o, policy=pol, **kw)
    r1 = simulate(plan1, a, p, o, policy=pol, **kw)
    # the schedule is the same: the statuses, and every time shifted by exactly the overhead
    assert np.array_equal(r0.status, r1.status) and np.array_equal(r0.instance, r1.instance)
    f0, f1 = r0.first_token_s, r1.first_token_s
    assert np.array_equal(np.isnan(f0), np.isnan(f1)) and np.array_equal(f1[~np.isnan(f0)], f0[~np.isnan(f0)] + C_S)
    e0, e1 = r0.finish_s, r1.finish_s
    assert np.array_equal(e1[~np.isnan(e0)], e0[~np.isnan(e0)] + C_S)
    m0, m1 = r0.metrics, r1.metrics
    for q in ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s"):
        assert getattr(m1, q) == pytest.approx(getattr(m0, q) + C_S, rel=1e-12)
    for q in ("tpot_p50_s", "tpot_p90_s", "tpot_p99_s"):
        assert getattr(m1, q) == pytest.approx(getattr(m0, q), rel=1e-12)
    assert np.array_equal(r0.busy_s, r1.busy_s)
    # attainment counts the client's TTFT: the overhead run at the SLO is the plain run at the SLO less it
    r2 = simulate(plan0, a, p, o, policy=pol, **(kw | dict(ttft_slo_s=0.06 - C_S)))
    assert m1.attainment == pytest.approx(r2.metrics.attainment, abs=1.0 / a.size)
    assert m1.attainment < m0.attainment


def test_an_overhead_past_the_ttft_target_makes_the_screen_refuse():
    from fastsim.analytic import Demand, ScreenOptions, instance_table
    d = Demand(rate_req_per_s=1.0, ttft_s=0.05, tpot_s=0.05, mean_prompt_tokens=500, mean_output_tokens=100,
               latency_prompt_tokens=800, latency_output_tokens=200)
    opts = dict(gpus=("H100",), precisions=("FP8",), tps=(1,))
    base = instance_table(M, d, options=ScreenOptions(**opts))
    slow = instance_table(M, d, options=ScreenOptions(**opts, constants=StepConstants(request_overhead_s=0.06)))
    cap = [c for c in base.columns if c.startswith("colocated") and "capacity" in c][0]
    assert base[cap].iloc[0] > 0
    assert not slow[cap].iloc[0] > 0


def test_the_overhead_is_checked_and_carried_in_calibration_files(tmp_path):
    from fastsim.constants import Calibration, CalibrationEntry, load_calibration
    with pytest.raises(FastsimInputError, match="request_overhead_s"):
        StepConstants(request_overhead_s=-1e-3)
    assert step_params(M, G, PR, 1, StepConstants(request_overhead_s=0.012))[P_REQ_OVERHEAD] == 0.012
    assert step_params(M, G, PR, 1)[P_REQ_OVERHEAD] == 0.0
    k = replace(StepConstants(), request_overhead_s=0.0075)
    cal = Calibration((CalibrationEntry("*", "*", k, ("request_overhead_s",)),), engine="trtllm")
    path = tmp_path / "c.toml"
    cal.write(path)
    assert "request_overhead_s = 0.0075" in path.read_text(encoding="utf-8")
    back = load_calibration(path)
    assert back.step_constants("H100", "FP8", 1).request_overhead_s == 0.0075
    assert "request_overhead_s" not in Calibration((CalibrationEntry("*", "*", StepConstants()),)).to_toml()
