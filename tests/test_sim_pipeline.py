"""Pipeline-parallel instances (PipelinePlan) in the serving simulator (semantics: ``fastsim.sim.pipeline``).

The kernel against the plain-Python reference bit for bit; one stage against the colocated
simulator bit for bit (the lecture policy and ``trtllm``); closed forms of a pipeline of stages of
constant time (fill, drain and the GPipe bubble, the slowest stage's period); TensorRT-LLM's two
batch caps; the refusals; batches that mix plan types.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastsim.catalog import default_catalog
from fastsim.errors import FastsimInputError
from fastsim.sim import ColocatedPlan, PipelinePlan, simulate, simulate_batch, simulate_drained
from fastsim.sim import pipeline as PL
from fastsim.sim import _pipeline_nb as PN
from fastsim.sim.inputs import _arrays, _check, _options
from fastsim.sim.policy import engine_policy
from fastsim.sim.records import REQ_FINISHED
from fastsim.sim.reference_pipeline import simulate_pipeline_reference
from fastsim.specdec import SpecDecoding
from fastsim.stepmodel import (P_KV_BUDGET_TOKENS, P_KVPG, P_LAYERS, P_MATMUL, P_N_A2A, P_N_AR, P_OVERHEAD,
                               P_P2P_LAT, P_P2P_S_PER_TOKEN, P_QDIM_DEC, P_QDIM_PF, P_SLIDE_FRAC, P_WDENSE, P_WEXP,
                               P_WINDOW, stage_params)

CAT = default_catalog()
H100, BF16 = CAT.gpu("H100"), CAT.precision("BF16")
BASES = ("llama-3.1-8b", "qwen3-30b-a3b", "gpt-oss-20b")      # dense, MoE, sliding window
KW = dict(ttft_slo_s=1.0, tpot_slo_s=0.1)


def _stages(model, S, kv, rng=None):
    """``stage_params`` rows of a model with one KV budget; with ``rng``, uneven stages (each row's
    matmul parameters and dense weights scaled by its own factor in [0.5, 2])."""
    rows = stage_params(CAT.model(model), H100, BF16, 1, pp=S)
    rows[:, P_KV_BUDGET_TOKENS] = kv
    if rng is not None:
        scale = rng.uniform(0.5, 2.0, size=S)
        rows[:, P_MATMUL] *= scale
        rows[:, P_WDENSE] *= scale
    return rows


def _constant(ds, kv=1e6):
    """Stages whose step time is exactly ``ds[s]`` whatever the batch: no FLOPs, no bytes, no
    communication, only the fixed overhead (``step_time`` = max(0, 0) + 0 + 0 + overhead)."""
    rows = _stages("llama-3.1-8b", len(ds), kv)
    for c in (P_MATMUL, P_WDENSE, P_WEXP, P_KVPG, P_QDIM_DEC, P_QDIM_PF, P_N_AR, P_N_A2A, P_P2P_LAT,
              P_P2P_S_PER_TOKEN):
        rows[:, c] = 0.0
    rows[:, P_OVERHEAD] = ds
    return rows


def _workload(rng, n, t_max, p_max=3000, o_max=80):
    arr = np.sort(rng.uniform(0.0, t_max, n))
    arr = np.sort(np.where(rng.random(n) < 0.3, np.floor(arr * 2.0) / 2.0, arr))     # ties at half seconds
    return arr, rng.integers(1, p_max + 1, n), rng.integers(1, o_max + 1, n)


def _counters(plan, pol, routing, w, horizon, dt=1.0, max_context=131072):
    """The kernel's per-instance counters (steps, batch_sum, tokens_out, kv_peak, prompt_admitted)."""
    opts = _options(horizon, 1.0, 0.1, max_context, routing, (0.2, 0.8), dt)
    work = _check([_arrays(w)], [w], opts[0])
    n_samp = int(np.ceil(horizon / dt))
    c, cf = PL._config(plan, pol, opts, routing, n_samp)
    rf = PL._option_row(opts)
    return PL._one(plan, work[0][0], c, cf, rf, n_samp, False)["iout"]


def _ref(plan, pol, w, horizon, routing, dt=1.0, max_context=131072):
    kw = dict(stages=plan.stages, n_instances=plan.n_instances, horizon=horizon, dt=dt, max_context=max_context,
              routing=routing)
    if pol is None:
        kw.update(chunk=plan.chunk_tokens, max_batch=plan.max_batch)
    else:
        kw.update(policy="trtllm", budget=pol.max_num_batched_tokens, max_seqs=pol.max_num_seqs,
                  block_tokens=pol.block_tokens, chunked_context=pol.chunked_context)
    return simulate_pipeline_reference(*w, **kw)


def _check_ref(res, ref):
    np.testing.assert_array_equal(res.first_token_s, np.array(ref["first"], dtype=float))
    np.testing.assert_array_equal(res.finish_s, np.array(ref["finish"], dtype=float))
    np.testing.assert_array_equal(res.instance, ref["instance"])
    np.testing.assert_array_equal(res.status, ref["status"])
    np.testing.assert_array_equal(res.queue_len, np.array(ref["wait"]).reshape(res.queue_len.shape))
    np.testing.assert_array_equal(res.kv_tokens, np.array(ref["kv"]).reshape(res.kv_tokens.shape))
    np.testing.assert_array_equal(res.in_system, ref["in_system"])
    np.testing.assert_array_equal(res.busy_s, ref["busy"])
    np.testing.assert_array_equal(res.metrics.kv_peak_tokens, ref["kv_peak"])


def _same_result(a, b):
    """Two SimResults agree on every array and every metric, to the bit."""
    for f in a._fields:
        x, y = getattr(a, f), getattr(b, f)
        if f == "metrics":
            for g in x._fields:
                u, v = getattr(x, g), getattr(y, g)
                if u is None or v is None:
                    assert u is None and v is None, g
                else:
                    np.testing.assert_array_equal(u, v, err_msg=g)
        elif x is None or y is None:
            assert x is None and y is None, f
        else:
            np.testing.assert_array_equal(x, y, err_msg=f)


def _policy(rng):
    bt = int(rng.choice([1, 16, 32]))
    return engine_policy("trtllm", max_num_batched_tokens=int(rng.integers(bt, 4096)),
                         max_num_seqs=int(rng.integers(1, 7)), block_tokens=bt, chunked_context=bool(rng.random() < 0.5))


# ---------------------------------------------------------------- the kernel against the reference

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), S=st.integers(1, 4), trt=st.booleans(),
       routing=st.sampled_from(["least-loaded", "round-robin"]), base=st.sampled_from(BASES))
def test_kernel_matches_reference(seed, S, trt, routing, base):
    rng = np.random.default_rng(seed)
    n_inst = int(rng.integers(1, 4))
    rows = _stages(base, S, float(rng.integers(2000, 40000)), rng)
    pol = _policy(rng) if trt else None
    plan = PipelinePlan(rows, n_inst, int(rng.integers(16, 1024)), 0 if trt else int(rng.integers(0, 6)))
    # busy instances: up to 120 requests in 5 s, a horizon that leaves some unfinished
    w = _workload(rng, int(rng.integers(1, 120)), 5.0, p_max=2000, o_max=200)
    horizon = 8.0
    max_context = int(rng.choice([2500, 131072]))
    res = simulate(plan, *w, horizon_s=horizon, routing=routing, policy=pol or "lecture",
                   max_context_tokens=max_context, **KW)
    ref = _ref(plan, pol, w, horizon, routing, max_context=max_context)
    _check_ref(res, ref)
    io = _counters(plan, pol, routing, w, horizon, max_context=max_context)
    for _ in (0,):
        np.testing.assert_array_equal(io[:, PN.O_STEPS], ref["steps"])
        np.testing.assert_array_equal(io[:, PN.O_BATCH_SUM], ref["batch_sum"])
        np.testing.assert_array_equal(io[:, PN.O_TOKENS_OUT], ref["tokens_out"])
        np.testing.assert_array_equal(io[:, PN.O_KV_PEAK], ref["kv_peak"])
        np.testing.assert_array_equal(io[:, PN.O_PROMPT_ADMITTED], ref["prompt_admitted"])
    assert res.metrics.throughput_tokens_per_s == sum(ref["tokens_out"]) / horizon
    assert res.metrics.policy == ("trtllm" if trt else "lecture")


def test_reference_covers_the_rules():
    """A fixed case that exercises what the random ones should: rejections, admission limits, ties,
    several micro-batches in flight on uneven stages, both routings; kernel == reference."""
    rng = np.random.default_rng(5)
    w = _workload(rng, 80, 20.0)
    for pol in (None, engine_policy("trtllm", max_num_seqs=3, block_tokens=16, chunked_context=True,
                                    max_num_batched_tokens=512)):
        for routing in ("least-loaded", "round-robin"):
            plan = PipelinePlan(_stages("llama-3.1-8b", 3, 9000.0, rng), 2, 256, 0 if pol else 4)
            res = simulate(plan, *w, horizon_s=30.0, routing=routing, policy=pol or "lecture",
                           max_context_tokens=2500, **KW)
            ref = _ref(plan, pol, w, 30.0, routing, max_context=2500)
            _check_ref(res, ref)
            m = res.metrics
            assert m.rejected > 0 and m.finished > 0 and max(ref["steps"]) > 0
            assert np.max(res.queue_len) > 0                  # the admission limits bound
            assert np.all(np.array(ref["batch_sum"]) > np.array(ref["steps"]))   # batches of several


# ---------------------------------------------------------------- one stage is the colocated instance

@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), routing=st.sampled_from(["least-loaded", "round-robin"]),
       base=st.sampled_from(BASES))
def test_one_stage_is_the_lecture_colocated_run(seed, routing, base):
    """S = 1: the pipeline kernel and its reference give the lecture colocated results bit for bit."""
    rng = np.random.default_rng(seed)
    rows = _stages(base, 1, float(rng.integers(2000, 40000)))
    n_inst, chunk, mb = int(rng.integers(1, 4)), int(rng.integers(16, 1024)), int(rng.integers(0, 6))
    w = _workload(rng, int(rng.integers(1, 120)), 5.0, p_max=2000, o_max=200)
    kw = dict(horizon_s=8.0, routing=routing, **KW)
    pp = simulate(PipelinePlan(rows, n_inst, chunk, mb), *w, **kw)
    co = simulate(ColocatedPlan(rows[0], n_inst, chunk, mb), *w, **kw)
    _same_result(pp, co)
    ref = _ref(PipelinePlan(rows, n_inst, chunk, mb), None, w, 8.0, routing)
    _check_ref(co, ref)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), routing=st.sampled_from(["least-loaded", "round-robin"]),
       base=st.sampled_from(BASES))
def test_one_stage_is_the_trtllm_colocated_run(seed, routing, base):
    """S = 1 under trtllm: both caps are the colocated policy's, so the runs agree bit for bit."""
    rng = np.random.default_rng(seed)
    rows = _stages(base, 1, float(rng.integers(2000, 40000)))
    pol = _policy(rng)
    n_inst = int(rng.integers(1, 4))
    w = _workload(rng, int(rng.integers(1, 120)), 5.0, p_max=2000, o_max=200)
    kw = dict(horizon_s=8.0, routing=routing, policy=pol, **KW)
    pp = simulate(PipelinePlan(rows, n_inst, 64), *w, **kw)
    co = simulate(ColocatedPlan(rows[0], n_inst, 64), *w, **kw)
    _same_result(pp, co)
    _check_ref(co, _ref(PipelinePlan(rows, n_inst, 64), pol, w, 8.0, routing))


# ---------------------------------------------------------------- closed forms

D = 1.0 / 64.0      # a stage time of a power of two: every sum below is exact


@pytest.mark.parametrize("pol", [None, engine_policy("trtllm")])
@pytest.mark.parametrize("S", [1, 2, 3, 4])
@pytest.mark.parametrize("O", [1, 7])
def test_lone_request_crosses_every_stage_per_token(S, O, pol):
    """One request, its prompt in one chunk: TTFT = S d, E2E = O S d; each stage busy O d."""
    plan = PipelinePlan(_constant([D] * S), 1, 512)
    r = simulate(plan, [0.0], [300], [O], horizon_s=10.0, policy=pol or "lecture", **KW)
    assert r.first_token_s[0] == S * D
    assert r.finish_s[0] == O * S * D
    assert r.busy_s[0] == O * D
    assert r.metrics.mean_batch[0] == 1.0


@pytest.mark.parametrize("S", [2, 3, 4])
@pytest.mark.parametrize("M", [None, 1, 2, 5, 13])
def test_offline_prefill_fills_and_drains_the_pipeline(S, M):
    """M prompts of one chunk each (O = 1) at t = 0 are M micro-batches, one per stage time:
    request k finishes at (k + S) d, the makespan is (M + S - 1) d and each stage is busy M d, so
    the bubble fraction is (S - 1) / (M + S - 1) (GPipe, Huang et al. 2019, section 2.2)."""
    M = S if M is None else M
    c = 128
    plan = PipelinePlan(_constant([D] * S), 1, c)
    r = simulate(plan, np.zeros(M), np.full(M, c), np.ones(M, int), horizon_s=10.0, **KW)
    np.testing.assert_array_equal(r.finish_s, (np.arange(M) + S) * D)
    makespan = float(r.finish_s.max())
    assert makespan == (M + S - 1) * D
    assert r.busy_s[0] == M * D
    assert 1 - Fraction(float(r.busy_s[0])) / Fraction(makespan) == Fraction(S - 1, M + S - 1)


@pytest.mark.parametrize("S", [2, 3, 4])
@pytest.mark.parametrize("O", [2, 9])
def test_S_decoding_requests_keep_the_pipeline_full(S, O):
    """S requests at t = 0 (one chunk each) fill the S slots and stay one per micro-batch: request k
    gets its first token at (k + S) d and one more every S d (TPOT = S d); the pipeline emits one
    token per stage time (throughput 1 / d in steady state), S O micro-batches in all, and its
    bubble is (S - 1) / (S O + S - 1): the formula with M = S O micro-batches."""
    c = 64
    plan = PipelinePlan(_constant([D] * S), 1, c)
    r = simulate(plan, np.zeros(S), np.full(S, c), np.full(S, O), horizon_s=10.0, **KW)
    k = np.arange(S)
    np.testing.assert_array_equal(r.first_token_s, (k + S) * D)
    np.testing.assert_array_equal(r.finish_s, (k + S * O) * D)
    np.testing.assert_array_equal(r.tpot_s, np.full(S, S * D))
    makespan = float(r.finish_s.max())
    assert makespan == (S * O + S - 1) * D
    assert r.busy_s[0] == S * O * D                       # one stage time per token
    assert r.metrics.mean_batch[0] == 1.0
    assert 1 - Fraction(float(r.busy_s[0])) / Fraction(makespan) == Fraction(S - 1, S * O + S - 1)


def test_fewer_requests_than_stages_leave_the_pipeline_idle():
    """M = 2 decoding requests on S = 4 stages: each still waits a full round trip S d per token,
    so the instance emits M tokens per S d: half its stages idle in steady state."""
    S, M, O = 4, 2, 6
    plan = PipelinePlan(_constant([D] * S), 1, 64)
    r = simulate(plan, np.zeros(M), np.full(M, 64), np.full(M, O), horizon_s=10.0, **KW)
    np.testing.assert_array_equal(r.finish_s, (np.arange(M) + S * O) * D)
    assert r.busy_s[0] == M * O * D
    assert Fraction(float(r.busy_s[0])) / Fraction(float(r.finish_s.max()) - (M - 1) * D) == Fraction(M, S)


@pytest.mark.parametrize("ds", [[1 / 64, 1 / 16, 1 / 32], [1 / 16, 1 / 64, 1 / 64], [1 / 64, 1 / 64, 1 / 16, 1 / 32],
                                [1 / 32, 1 / 64], [1 / 64, 1 / 128, 1 / 8]])
def test_uneven_stages_run_at_the_slowest_stages_period(ds):
    """Identical micro-batches through stages of times d_s: the k-th completes at sum(d) + k max(d)
    (a flow shop of identical jobs, whose period is its bottleneck's), whichever stage is slowest;
    at most S in flight is enough (S >= sum(d) / max(d))."""
    M, c = 12, 64
    S = len(ds)
    plan = PipelinePlan(_constant(ds), 1, c)
    r = simulate(plan, np.zeros(M), np.full(M, c), np.ones(M, int), horizon_s=10.0, **KW)
    np.testing.assert_array_equal(r.finish_s, sum(ds) + np.arange(M) * max(ds))
    b = 0.0
    for d in ds:
        b += M * d
    assert r.busy_s[0] == b / float(S)                    # the mean of the stages' busy times


def test_trtllm_caps_the_micro_batch_and_the_running_requests():
    """max_batch_size = 2 on S = 2 stages: the capacity scheduler runs 2 x 2 = 4 requests (in flight
    included), a micro-batch holds 2. Eight requests (P = 32, O = 3) at t = 0 go in pairs:
    (0, 1) in micro-batches at 0, 2d, 4d; (2, 3) at d, 3d, 5d; (4, 5) once (0, 1) finish at 6d;
    (6, 7) once (2, 3) finish at 7d."""
    S, n = 2, 8
    plan = PipelinePlan(_constant([D] * S), 1, 64)
    pol = engine_policy("trtllm", max_num_seqs=2)
    r = simulate(plan, np.zeros(n), np.full(n, 32), np.full(n, 3), horizon_s=10.0, policy=pol, **KW)
    np.testing.assert_array_equal(r.first_token_s, np.array([2, 2, 3, 3, 8, 8, 9, 9]) * D)
    np.testing.assert_array_equal(r.finish_s, np.array([6, 6, 7, 7, 12, 12, 13, 13]) * D)
    assert r.metrics.mean_batch[0] == 2.0
    # with room for all in one micro-batch, the eight run together in every other slot
    r8 = simulate(plan, np.zeros(n), np.full(n, 32), np.full(n, 3), horizon_s=10.0,
                  policy=engine_policy("trtllm", max_num_seqs=8), **KW)
    np.testing.assert_array_equal(r8.finish_s, np.full(n, 3 * S * D))


def test_lecture_reserves_for_the_whole_instance():
    """The KV budget is the instance's (every stage holds every sequence's layers): with room for
    two reservations, requests run two at a time whatever the stages."""
    S, P, O = 3, 100, 4
    plan = PipelinePlan(_constant([D] * S, kv=2 * (P + O)), 1, P)       # one prompt per micro-batch
    r = simulate(plan, np.zeros(4), np.full(4, P), np.full(4, O), horizon_s=10.0, **KW)
    assert int(r.metrics.kv_peak_tokens[0]) == 2 * (P + O)
    # requests 0 and 1 (launched at 0 and d) finish at O S d and O S d + d; then 2 and 3
    np.testing.assert_array_equal(r.finish_s[:2], np.array([O * S, O * S + 1]) * D)
    assert r.first_token_s[2] >= r.finish_s[0]


# ---------------------------------------------------------------- refusals

@pytest.mark.parametrize("kw, field", [
    (dict(policy="vllm"), "policy"), (dict(policy="sglang"), "policy"),
    (dict(policy=engine_policy("vllm")), "policy"),
    (dict(policy=engine_policy("trtllm", prefix_caching=True)), "prefix_caching"),
    (dict(policy="trtllm", spec=SpecDecoding(2, 0.7, "mtp")), "spec"),
    (dict(spec=SpecDecoding(2, 0.7, "mtp")), "spec"),
    (dict(policy="trtllm", p_draft=np.ones(33)), "p_draft"),
    (dict(prefix=object()), "prefix"),
    (dict(routing="prefix-aware", policy="trtllm"), "routing"),
])
def test_refusals_name_the_field(kw, field):
    plan = PipelinePlan(_constant([D] * 2), 1, 64)
    with pytest.raises(FastsimInputError) as e:
        simulate(plan, [0.0], [10], [2], horizon_s=5.0, **KW, **kw)
    assert e.value.field == field
    if field == "policy":
        assert "lecture or trtllm" in str(e.value) and "not simulated" in str(e.value)
    if field == "prefix":
        return
    with pytest.raises(FastsimInputError) as e:
        simulate_batch([plan], [([0.0], [10], [2])], horizon_s=5.0, **KW, **kw)
    assert e.value.field == field


def test_trtllm_refuses_the_plans_batch_cap_and_mismatched_windows():
    with pytest.raises(FastsimInputError) as e:
        simulate(PipelinePlan(_constant([D] * 2), 1, 64, 4), [0.0], [10], [2], horizon_s=5.0, policy="trtllm", **KW)
    assert e.value.field == "plan.max_batch"
    rows = _stages("gpt-oss-20b", 2, 1e5)
    rows[1, P_WINDOW] = 256.0
    with pytest.raises(FastsimInputError) as e:
        simulate(PipelinePlan(rows, 1, 64), [0.0], [10], [2], horizon_s=5.0, **KW)
    assert e.value.field == "stages[1][P_WINDOW]"
    rows = _stages("gpt-oss-20b", 2, 1e5)
    rows[1, P_SLIDE_FRAC] = 0.25
    with pytest.raises(FastsimInputError) as e:
        simulate(PipelinePlan(rows, 1, 64), [0.0], [10], [2], horizon_s=5.0, **KW)
    assert e.value.field == "stages[1][P_SLIDE_FRAC]"


# ---------------------------------------------------------------- batches, early stop, drained runs

@pytest.mark.parametrize("policy", ["lecture", "trtllm"])
def test_batch_mixes_plan_types_in_run_order(policy):
    rng = np.random.default_rng(3)
    ws = [_workload(rng, 40, 20.0) for _ in range(3)]
    rows = _stages("llama-3.1-8b", 2, 20000.0)
    plans = [PipelinePlan(rows, 2, 256), ColocatedPlan(_stages("llama-3.1-8b", 1, 20000.0)[0], 2, 256),
             PipelinePlan(_stages("llama-3.1-8b", 3, 20000.0), 1, 128)]
    kw = dict(horizon_s=25.0, policy=policy, **KW)
    res = simulate_batch(plans, ws, full=True, **kw)
    for pl, w, r in zip(plans, ws, res):
        _same_result(r, simulate(pl, *w, **kw))
    ms = simulate_batch(plans, ws, **kw)
    for m, r in zip(ms, res):
        assert m.attainment == r.metrics.attainment and m.ttft_p90_s == r.metrics.ttft_p90_s
        np.testing.assert_array_equal(m.utilisation, r.metrics.utilisation)


def test_pipeline_runs_ignore_the_early_stop():
    """stop_after_misses: the colocated run stops, the pipeline run simulates its whole horizon
    (stopped_at_s NaN, the whole run's metrics)."""
    rng = np.random.default_rng(4)
    w = _workload(rng, 200, 20.0, p_max=6000, o_max=300)
    rows = _stages("llama-3.1-8b", 2, 5000.0)
    plans = [PipelinePlan(rows, 1, 256), ColocatedPlan(_stages("llama-3.1-8b", 1, 5000.0)[0], 1, 256)]
    kw = dict(horizon_s=25.0, ttft_slo_s=0.05, tpot_slo_s=0.001)
    ms = simulate_batch(plans, [w, w], stop_after_misses=1, **kw)
    assert np.isnan(ms[0].stopped_at_s) and ms[0].sure_misses == 0
    assert not np.isnan(ms[1].stopped_at_s)
    whole = simulate(plans[0], *w, **kw).metrics
    assert ms[0].attainment == whole.attainment and ms[0].finished == whole.finished
    # per-run SLOs reach the pipeline run's metrics
    m2 = simulate_batch(plans, [w, w], horizon_s=25.0, ttft_slo_s=[100.0, 0.05], tpot_slo_s=[100.0, 0.001])
    lenient = simulate(plans[0], *w, horizon_s=25.0, ttft_slo_s=100.0, tpot_slo_s=100.0).metrics
    assert m2[0].attainment == lenient.attainment > whole.attainment


def test_drained_pipeline_run_finishes_everything():
    plan = PipelinePlan(_stages("llama-3.1-8b", 2, 1e5), 1, 512)
    n = 50
    res = simulate_drained(plan, np.zeros(n), np.full(n, 500), np.full(n, 40))
    assert np.all(res.status == REQ_FINISHED)
    assert res.metrics.finished == n and res.metrics.throughput_tokens_per_s > 0
