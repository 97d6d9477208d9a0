"""Every simulator path against its pure-Python reference, bit for bit, for one parameter vector.

``reference_tests(p, stages)`` returns four hypothesis tests (colocated, disaggregated, the engine
policies, the pipeline) for the step parameters ``p`` and a function ``stages(S)`` giving the rows
of an S-stage pipeline; a test module binds them to ``test_*`` names, so that a step-model term
(a host time per sequence, a step form) is checked on every path with the same draws.
"""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastsim.sim import ColocatedPlan, DisaggregatedPlan, PipelinePlan, simulate
from fastsim.sim.policy import engine_policy
from fastsim.stepmodel import P_KV_BUDGET_TOKENS

from reference_sim import check_against_reference, simulate_reference
from test_sim_pipeline import _check_ref, _ref
from test_sim_policy import check_policy_against_reference


@st.composite
def small_workload(draw):
    """Up to 25 requests: ``(arrival, prompt, output, horizon)``, ties and bursts included."""
    n = draw(st.integers(1, 25))
    gap = st.one_of(st.just(0.0), st.sampled_from([0.001, 0.004, 0.02]), st.floats(0.0, 0.08))
    arrival = np.cumsum(np.array(draw(st.lists(gap, min_size=n, max_size=n)), dtype=np.float64))
    prompt = np.array(draw(st.lists(st.integers(1, 300), min_size=n, max_size=n)), dtype=np.int64)
    output = np.array(draw(st.lists(st.integers(1, 25), min_size=n, max_size=n)), dtype=np.int64)
    horizon = float(arrival[-1]) + draw(st.sampled_from([0.05, 0.3, 3.0]))
    return arrival, prompt, output, horizon


def with_budget(p, kv):
    """A copy of ``p`` with a KV budget of ``kv`` tokens."""
    q = p.copy()
    q[P_KV_BUDGET_TOKENS] = kv
    return q


def reference_tests(p, stages):
    """The four kernel-against-reference tests for parameters ``p`` and pipeline rows ``stages(S)``."""
    many = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    few = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

    @many
    @given(w=small_workload(), n_inst=st.integers(1, 3), chunk=st.sampled_from([1, 7, 64, 4096]),
           kv=st.floats(40.0, 3000.0), routing=st.sampled_from(["least-loaded", "round-robin"]))
    def colocated(w, n_inst, chunk, kv, routing):
        arrival, prompt, output, horizon = w
        q = with_budget(p, kv)
        res = simulate(ColocatedPlan(q, n_inst, chunk), arrival, prompt, output, horizon_s=horizon, ttft_slo_s=0.5,
                       tpot_slo_s=0.02, routing=routing, sample_dt_s=0.07)
        ref = simulate_reference("colocated", arrival, prompt, output, horizon=horizon, dt=0.07, max_context=131072,
                                 routing=routing, p=q, n_instances=n_inst, chunk=chunk, max_batch=0)
        check_against_reference(res, ref, np.full(n_inst, np.floor(kv)))

    @many
    @given(w=small_workload(), n_pf=st.integers(1, 2), n_dec=st.integers(1, 3),
           budget=st.sampled_from([1, 300, 8192]), kv=st.floats(40.0, 3000.0))
    def disaggregated(w, n_pf, n_dec, budget, kv):
        arrival, prompt, output, horizon = w
        pp, pd = with_budget(p, kv), with_budget(p, kv)
        res = simulate(DisaggregatedPlan(pp, n_pf, pd, n_dec, budget, 0), arrival, prompt, output, horizon_s=horizon,
                       ttft_slo_s=0.5, tpot_slo_s=0.02, sample_dt_s=0.07)
        ref = simulate_reference("disaggregated", arrival, prompt, output, horizon=horizon, dt=0.07,
                                 max_context=131072, routing="least-loaded", p_prefill=pp, n_prefill=n_pf,
                                 p_decode=pd, n_decode=n_dec, prefill_budget=budget, decode_max_batch=0)
        check_against_reference(res, ref, np.array([np.floor(kv)] * (n_pf + n_dec)))

    @few
    @given(seed=st.integers(0, 2**31 - 1), name=st.sampled_from(["vllm", "sglang", "trtllm"]))
    def policy(seed, name):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(1, 60))
        arr = np.sort(rng.uniform(0.0, 3.0, n))
        P, O = rng.integers(1, 2000, n), rng.integers(1, 60, n)
        check_policy_against_reference(with_budget(p, float(rng.integers(3000, 60000))), int(rng.integers(1, 3)),
                                       arr, P, O, engine_policy(name), horizon=5.0)

    @few
    @given(seed=st.integers(0, 2**31 - 1), S=st.integers(1, 3), trt=st.booleans())
    def pipeline(seed, S, trt):
        rng = np.random.default_rng(seed)
        rows = stages(S)
        rows[:, P_KV_BUDGET_TOKENS] = float(rng.integers(2000, 40000))
        pol = engine_policy("trtllm", max_num_batched_tokens=int(rng.integers(64, 4096)),
                            max_num_seqs=int(rng.integers(1, 7)), block_tokens=16) if trt else None
        plan = PipelinePlan(rows, int(rng.integers(1, 3)), int(rng.integers(16, 1024)),
                            0 if trt else int(rng.integers(0, 6)))
        n = int(rng.integers(1, 80))
        w = (np.sort(rng.uniform(0.0, 4.0, n)), rng.integers(1, 2000, n), rng.integers(1, 100, n))
        res = simulate(plan, *w, horizon_s=6.0, routing="least-loaded", policy=pol or "lecture", ttft_slo_s=1.0,
                       tpot_slo_s=0.1, sample_dt_s=1.0)
        _check_ref(res, _ref(plan, pol, w, 6.0, "least-loaded"))

    return colocated, disaggregated, policy, pipeline
