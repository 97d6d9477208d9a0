"""Engine policies (vllm, sglang), prefix caching and speculative decoding in the simulator.

The kernel must agree with the pure-Python reference bit for bit under every policy; the
engine-level figures come from the cases that motivated the policies (SPEC §10).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastsim.catalog import default_catalog
from fastsim.errors import FastsimInputError
from fastsim.sim import ColocatedPlan, DisaggregatedPlan, simulate, simulate_batch
from fastsim.sim.policy import _config_rows, cfg_dict, engine_policy, policy_defaults, prefix_for_run
from fastsim.sim.reference_policy import accept_uniform, accepted_drafts, simulate_policy_reference
from fastsim.stepmodel import P_KV_BUDGET_TOKENS, P_SLIDE_FRAC, P_WINDOW, step_params

CAT = default_catalog()
P8 = step_params(CAT.model("llama-3.1-8b"), CAT.gpu("H100"), CAT.precision("BF16"), 1)
P70 = step_params(CAT.model("llama-3.1-70b"), CAT.gpu("H100"), CAT.precision("FP8"), 8)
D8 = step_params(CAT.model("llama-3.1-8b"), CAT.gpu("H100"), CAT.precision("FP8"), 8)


class Blocks:
    """A minimal prefix-block holder (block_tokens, offsets, ids, spans_output)."""

    def __init__(self, block_tokens, offsets, ids, spans_output=False):
        self.block_tokens, self.offsets, self.ids = block_tokens, np.asarray(offsets), np.asarray(ids)
        self.spans_output = spans_output


def _with_kv(p, kv_tokens, window=0, slide=0.0):
    q = np.array(p, dtype=np.float64)
    q[P_KV_BUDGET_TOKENS] = kv_tokens
    q[P_WINDOW] = window
    q[P_SLIDE_FRAC] = slide
    return q


def check_policy_against_reference(p, n_instances, arr, P, O, pol, *, horizon, routing="least-loaded",
                                   prefix=None, spec=None, p_draft=None, seed=0, max_context=131072):
    """Kernel and reference agree on every per-request value, sample and per-instance count."""
    plan = ColocatedPlan(p, n_instances, 64)
    res = simulate(plan, arr, P, O, horizon_s=horizon, ttft_slo_s=1.0, tpot_slo_s=0.1, policy=pol,
                   routing=routing, prefix=prefix, spec=spec, p_draft=p_draft, spec_seed=seed,
                   max_context_tokens=max_context)
    off, ids, bth, nid, private, spans = prefix_for_run(prefix, np.asarray(P, dtype=np.int64), pol, plan.p,
                                                        np.asarray(O, dtype=np.int64))
    c, cf = _config_rows(pol, plan.p, n_instances, max_context, 0, bth, nid, spec, seed, private, spans)
    ref = simulate_policy_reference(arr, P, O, off, ids, p=plan.p, n_instances=n_instances, cfg=cfg_dict(c, cf),
                                    horizon=horizon, dt=1.0, max_context=max_context, routing=routing,
                                    p_draft=p_draft)
    np.testing.assert_array_equal(res.first_token_s, np.array(ref["first"], dtype=float))
    np.testing.assert_array_equal(res.finish_s, np.array(ref["finish"], dtype=float))
    np.testing.assert_array_equal(res.instance, ref["instance"])
    np.testing.assert_array_equal(res.status, ref["status"])
    np.testing.assert_array_equal(res.cached_tokens, ref["cached"])
    np.testing.assert_array_equal(res.preemptions, ref["preempted"])
    np.testing.assert_array_equal(res.queue_len, np.array(ref["wait"]).reshape(res.queue_len.shape))
    np.testing.assert_array_equal(res.kv_tokens, np.array(ref["kv"]).reshape(res.kv_tokens.shape))
    np.testing.assert_array_equal(res.in_system, ref["in_system"])
    np.testing.assert_array_equal(res.busy_s, ref["busy"])
    m = res.metrics
    assert m.preemptions == sum(ref["preemptions"])
    assert m.cached_prompt_tokens == sum(ref["cached_tokens"])
    np.testing.assert_array_equal(m.kv_peak_tokens, ref["kv_peak"])
    assert m.throughput_tokens_per_s == sum(ref["tokens_out"]) / horizon
    return res, ref


def _session_blocks(rng, n, P, bth, n_roots, O=None):
    """Prefix ids that share leading blocks: each request extends one of a few chains.

    With ``O`` the rows span the output (the blocks of each request's first P + O - 1 tokens), so a
    request's prompt blocks can be another's generated ones, as a chat's next turn holds its
    previous answer.
    """
    chains = [[] for _ in range(n_roots)]
    nxt = 0
    off = [0]
    ids = []
    for i in range(n):
        nb = -(-(int(P[i]) + (int(O[i]) - 1 if O is not None else 0)) // bth)
        ch = chains[int(rng.integers(n_roots))]
        while len(ch) < nb:
            ch.append(nxt)
            nxt += 1
        ids.extend(ch[:nb])
        off.append(len(ids))
    return Blocks(bth, off, ids, spans_output=O is not None)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), name=st.sampled_from(["vllm", "sglang"]),
       caching=st.booleans(), spec=st.booleans(), routing=st.sampled_from(["least-loaded", "round-robin",
                                                                           "prefix-aware"]),
       window=st.booleans())
def test_kernel_matches_reference(seed, name, caching, spec, routing, window):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    horizon = float(rng.uniform(2.0, 30.0))
    arr = np.sort(rng.uniform(0.0, horizon, n))
    if rng.random() < 0.3:
        arr[: n // 2] = arr[0]          # simultaneous arrivals
    bth = int(rng.choice([16, 32, 64]))
    P = rng.integers(1, 6 * bth, n)
    O = rng.integers(1, 80, n)
    kv = float(rng.integers(int(P.max() + O.max()) + 40, 3000))
    win = window and not caching
    p = _with_kv(P8, kv, window=int(rng.integers(8, 200)) if win else 0, slide=0.5 if win else 0.0)
    bt = 16 if name == "vllm" else 1
    if rng.random() < 0.5:
        bt = int(rng.choice([1, 2, 4, 8, 16]))
    pol = engine_policy(name, max_num_batched_tokens=int(rng.integers(8, 400)),
                        max_num_seqs=int(rng.integers(1, 40)), block_tokens=bt, prefix_caching=caching)
    prefix = None
    if caching or rng.random() < 0.5:
        # half the time the rows span the output (a later prompt holds an earlier answer)
        prefix = _session_blocks(rng, n, P, bth, int(rng.integers(1, 4)), O if rng.random() < 0.5 else None)
    sp = None
    pd = None
    if spec:
        from fastsim.specdec import SpecDecoding
        sp = SpecDecoding(int(rng.integers(1, 5)), float(rng.uniform(0.0, 0.95)), "llama-3.1-8b")
        pd = P8
    check_policy_against_reference(p, int(rng.integers(1, 4)), arr, P, O, pol, horizon=horizon, routing=routing,
                                   prefix=prefix, spec=sp, p_draft=pd, seed=int(rng.integers(0, 2**63)))


def test_preemption_and_recompute_agree_with_reference():
    """A KV budget far below the load forces preemptions under vllm and retractions under sglang."""
    rng = np.random.default_rng(7)
    n = 200
    arr = np.sort(rng.uniform(0, 20, n))
    P = rng.integers(100, 1500, n)
    O = rng.integers(50, 600, n)
    for name in ("vllm", "sglang"):
        pol = engine_policy(name, max_num_batched_tokens=1024, max_num_seqs=256)
        res, ref = check_policy_against_reference(_with_kv(P8, 6000.0), 2, arr, P, O, pol, horizon=60.0)
        # SGLang reserves output KV at admission, so it retracts far less often than vLLM preempts
        assert res.metrics.preemptions > (20 if name == "vllm" else 0), name
        # a preempted request still finishes; its first token comes once
        done = res.status == 1
        assert np.all(res.finish_s[done] >= res.first_token_s[done])


# the case: 450 requests of 1,000 / 5,000 tokens at once, 299,584 KV tokens
KV_450 = 299_584.0


def _burst_450(policy):
    n = 450
    arr = np.zeros(n)
    P = np.full(n, 1000)
    O = np.full(n, 5000)
    plan = ColocatedPlan(_with_kv(P8, KV_450), 1, 8192)
    return simulate(plan, arr, P, O, horizon_s=120.0, ttft_slo_s=600.0, tpot_slo_s=1.0, policy=policy,
                    max_context_tokens=8192, measure_window=(0.0, 1.0))


def test_burst_450_vllm_fills_the_blocks_and_preempts():
    lec = _burst_450("lecture")
    vl = _burst_450("vllm")
    # the lecture's rule reserves 6,000 tokens each: at most 49 resident
    assert int(lec.metrics.kv_peak_tokens[0]) == 49 * 6000
    # vLLM allocates blocks as tokens arrive: the KV in use reaches the whole block budget
    # within one request's blocks, and requests are preempted when blocks run out
    blocks = int(KV_450) // 16
    assert int(vl.metrics.kv_peak_tokens[0]) >= (blocks - math.ceil(6000 / 16)) * 16
    assert vl.metrics.preemptions > 0
    assert vl.metrics.throughput_tokens_per_s > lec.metrics.throughput_tokens_per_s


def test_sglang_burst_retracts_and_beats_the_lecture_rule():
    lec = _burst_450("lecture")
    sg = _burst_450("sglang")
    assert sg.metrics.throughput_tokens_per_s > lec.metrics.throughput_tokens_per_s
    assert int(sg.metrics.kv_peak_tokens[0]) > 49 * 6000


def test_vllm_budget_shared_by_decodes_and_chunks():
    """One request of P = 10,000 with a 2,048-token budget: ceil(10000 / 2048) = 5 prefill steps."""
    plan = ColocatedPlan(_with_kv(P8, 1e6), 1, 64)
    pol = engine_policy("vllm", max_num_batched_tokens=2048)
    res = simulate(plan, np.zeros(1), np.array([10000]), np.array([3]), horizon_s=60.0, ttft_slo_s=1.0,
                   tpot_slo_s=0.1, policy=pol)
    from fastsim.stepmodel import step_time
    from fastsim.stepmodel import P_LAYERS, P_QDIM_PF
    lay, q = float(plan.p[P_LAYERS]), float(plan.p[P_QDIM_PF])
    t = 0.0
    s = 0
    for x in (2048, 2048, 2048, 2048, 1808):
        attn = 4.0 * lay * q * 1.0 * (0.0 - 0.0 * 0.0) + 2.0 * lay * q * x * x + 4.0 * lay * q * x * float(s)
        t = t + float(step_time(plan.p, float(x), float(s) - 0.0 * 0.0, attn, 1.0))
        s += x
    assert res.first_token_s[0] == t
    assert res.metrics.mean_batch[0] == 1.0


def test_defaults_follow_the_engines():
    v = policy_defaults("vllm", 80e9)
    assert (v.max_num_batched_tokens, v.max_num_seqs, v.block_tokens) == (8192, 1024, 16)
    v = policy_defaults("vllm", 48e9)
    assert (v.max_num_batched_tokens, v.max_num_seqs) == (2048, 256)
    s = policy_defaults("sglang", 80e9, kv_budget_tokens=400_000, context_tokens=131072)
    assert (s.max_num_batched_tokens, s.block_tokens, s.max_num_seqs) == (8192, 1, 2048)
    assert policy_defaults("sglang", 192e9).max_num_batched_tokens == 16384
    assert policy_defaults("sglang", 24e9).max_num_batched_tokens == 2048


def test_bad_policy_input_names_the_field():
    plan = ColocatedPlan(P8, 1, 64)
    kw = dict(horizon_s=10.0, ttft_slo_s=1.0, tpot_slo_s=0.1)
    a, p, o = np.zeros(1), np.array([10]), np.array([5])
    with pytest.raises(FastsimInputError, match="policy"):
        simulate(plan, a, p, o, policy="tgi", **kw)
    with pytest.raises(FastsimInputError, match="routing"):
        simulate(plan, a, p, o, routing="prefix-aware", **kw)
    with pytest.raises(FastsimInputError, match="max_num_seqs"):
        engine_policy("vllm", max_num_seqs=0)
    with pytest.raises(FastsimInputError, match="disaggregated"):
        simulate(DisaggregatedPlan(P8, 1, P8, 1), a, p, o, policy="vllm", **kw)
    with pytest.raises(FastsimInputError, match="sliding-window"):
        simulate(ColocatedPlan(_with_kv(P8, 5000.0, window=128, slide=0.5), 1, 64), a, p, o, policy="vllm",
                 prefix=Blocks(16, [0, 0], []), **kw) if False else simulate(
            ColocatedPlan(_with_kv(P8, 5000.0, window=128, slide=0.5), 1, 64), a, np.array([40]), o,
            policy="vllm", prefix=Blocks(16, [0, 2], [3, 4]), **kw)


def test_batch_equals_single_runs():
    rng = np.random.default_rng(3)
    works = []
    for k in range(3):
        n = 80
        arr = np.sort(rng.uniform(0, 30, n))
        works.append((arr, rng.integers(10, 2000, n), rng.integers(1, 300, n)))
    plan = ColocatedPlan(_with_kv(P8, 8000.0), 2, 64)
    kw = dict(horizon_s=40.0, ttft_slo_s=1.0, tpot_slo_s=0.05, policy="vllm")
    batch = simulate_batch([plan], works, **kw)
    for w, m in zip(works, batch):
        one = simulate(plan, *w, **kw).metrics
        assert m.attainment == one.attainment or (math.isnan(m.attainment) and math.isnan(one.attainment))
        assert m.ttft_p90_s == one.ttft_p90_s
        assert m.preemptions == one.preemptions
        assert m.throughput_tokens_per_s == one.throughput_tokens_per_s
        np.testing.assert_array_equal(m.utilisation, one.utilisation)


# --- speculative decoding -------------------------------------------------------------------

def test_acceptance_draws_match_the_closed_form():
    """Mean tokens per round over many rounds: (1 - a^(g+1)) / (1 - a) within 1%."""
    for alpha, gamma in ((0.8, 4), (0.6, 3), (0.0, 2), (0.9, 5)):
        seed = 12345
        tot = 0
        m = 40000
        for r in range(200):
            for k in range(m // 200):
                tot += 1 + accepted_drafts(accept_uniform(seed, r, k), alpha, gamma)
        want = (1 - alpha ** (gamma + 1)) / (1 - alpha)
        assert abs(tot / m - want) / want < 0.01, (alpha, gamma, tot / m, want)


def _spec_run(alpha, gamma=4, n=64, O=200):
    from fastsim.specdec import SpecDecoding
    plan = ColocatedPlan(_with_kv(P70, 2e6), 1, 64)
    arr = np.zeros(n)
    P = np.full(n, 1000)
    Ov = np.full(n, O)
    spec = SpecDecoding(gamma, alpha, "llama-3.1-8b") if alpha is not None else None
    return simulate(plan, arr, P, Ov, horizon_s=200.0, ttft_slo_s=100.0, tpot_slo_s=1.0, policy="vllm",
                    spec=spec, p_draft=D8 if spec else None, spec_seed=99, measure_window=(0.0, 1.0))


def test_spec_alpha_zero_costs_exactly_draft_plus_verify():
    """alpha = 0: one token per round, and a decode step costs gamma draft steps + the wider verify step."""
    from fastsim.stepmodel import P_LAYERS, P_QDIM_DEC, step_time
    p, d = _with_kv(P70, 2e6), D8
    lay, q = float(p[P_LAYERS]), float(p[P_QDIM_DEC])
    ctx = 64 * 1001         # 64 decodes at context 1001 (prompt 1000 + their first token)
    plain = float(step_time(p, 64.0, float(ctx), 4.0 * lay * q * 1.0 * float(ctx), 64.0))
    verify = float(step_time(p, float(64 * 5), float(ctx), 4.0 * lay * q * 5.0 * float(ctx), 64.0))
    draft = float(step_time(d, 64.0, float(ctx), 4.0 * float(d[P_LAYERS]) * float(d[P_QDIM_DEC]) * float(ctx), 64.0))
    # a budget that prefills all 64 prompts in one step: then one decode step of all 64
    kw = dict(horizon_s=200.0, ttft_slo_s=100.0, tpot_slo_s=1.0,
              policy=engine_policy("vllm", max_num_batched_tokens=1 << 20))
    args = (ColocatedPlan(p, 1, 64), np.zeros(64), np.full(64, 1000), np.full(64, 2))
    base = simulate(*args, **kw)
    sp = simulate(*args, spec=_spec_decoding(4, 0.0), p_draft=d, **kw)
    assert sp.metrics.spec_tokens_per_round == 1.0
    # (t + d) - t recovers d to within rounding of t
    np.testing.assert_allclose(base.finish_s - base.first_token_s, plain, rtol=1e-9)
    np.testing.assert_allclose(sp.finish_s - sp.first_token_s, verify + 4.0 * draft, rtol=1e-9)
    assert verify + 4.0 * draft > plain


def _spec_decoding(g, a):
    from fastsim.specdec import SpecDecoding
    return SpecDecoding(g, a, "llama-3.1-8b")


def test_spec_tpot_falls_as_alpha_rises():
    tp = [float(np.nanmedian(_spec_run(a).tpot_s)) for a in (0.0, 0.5, 0.8, 0.95)]
    assert tp[0] > tp[1] > tp[2] > tp[3]
    r = _spec_run(0.8)
    want = (1 - 0.8 ** 5) / (1 - 0.8)
    assert abs(r.metrics.spec_tokens_per_round - want) / want < 0.03


def test_spec_matches_the_ledger_level_5_round():
    """The simulator's decode round and the ladder's level-5 round are the same formula."""
    from fastsim.ledger import speculative_step
    led = speculative_step("llama-3.1-70b", "llama-3.1-8b", "H100", "FP8", 8, batch=64, context_tokens=4096,
                           acceptance=0.8, gamma=4)
    from fastsim.stepmodel import P_LAYERS, P_OVERHEAD
    # the same setting: the ladder's launch overhead (12 kernels x 1 us per layer) as the step overhead
    p = _with_kv(P70, 2e6)
    p[P_OVERHEAD] = p[P_LAYERS] * 12 * 1e-6
    d = np.array(D8)
    d[P_OVERHEAD] = d[P_LAYERS] * 12 * 1e-6
    n = 64
    # 64 requests whose decodes run at context 4096: prompts of 4095, outputs of 2 (one round)
    res = simulate(ColocatedPlan(p, 1, 64), np.zeros(n), np.full(n, 4095), np.full(n, 2), horizon_s=100.0,
                   ttft_slo_s=100.0, tpot_slo_s=1.0, policy=engine_policy("vllm", max_num_batched_tokens=1 << 20),
                   spec=_spec_decoding(4, 0.8), p_draft=d, measure_window=(0.0, 1.0))
    round_s = res.finish_s[0] - res.first_token_s[0]
    assert round_s == pytest.approx(led.round_s, rel=1e-9)


def test_preempted_request_takes_its_own_prompt_back_from_the_cache():
    """Without prefix ids a workload gets private blocks: preemption under vllm then recomputes less.

    Coding-agent prompts (8,000 tokens) on one H200 FP8 TP1 instance of Llama-3.1-70B at 1 req/s:
    the KV fills, requests are preempted, and with the cache on they take their prompts back.
    """
    from fastsim.workload import synthesize
    w = synthesize("coding-agent", 1.0, 300.0, 0)
    p = step_params(CAT.model("llama-3.1-70b"), CAT.gpu("H200"), CAT.precision("FP8"), 1)
    plan = ColocatedPlan(p, 1, 512)
    kw = dict(horizon_s=300.0, ttft_slo_s=2.0, tpot_slo_s=0.05)
    on = simulate(plan, w.arrival_s, w.prompt_tokens, w.output_tokens, policy="vllm", **kw).metrics
    off = simulate(plan, w.arrival_s, w.prompt_tokens, w.output_tokens,
                   policy=engine_policy("vllm", prefix_caching=False), **kw).metrics
    assert on.preemptions > 0 and off.preemptions > 0
    assert on.throughput_tokens_per_s > 1.5 * off.throughput_tokens_per_s
    assert on.cached_prompt_tokens == 0          # re-hits of a request's own blocks are not prefix hits


def test_more_engine_input_errors_name_the_field():
    plan = ColocatedPlan(P8, 1, 64)
    kw = dict(horizon_s=10.0, ttft_slo_s=1.0, tpot_slo_s=0.1)
    a, p, o = np.zeros(1), np.array([10]), np.array([5])
    with pytest.raises(FastsimInputError, match="prefix"):
        simulate(plan, a, p, o, policy="vllm", prefix=[1, 2, 3], **kw)
    with pytest.raises(FastsimInputError, match="request 0"):
        simulate(plan, a, p, o, policy="vllm", prefix=Blocks(4, [0, 5], [1, 2, 3, 4, 5]), **kw)
    with pytest.raises(FastsimInputError, match="p_draft"):
        simulate(plan, a, p, o, policy="vllm", p_draft=P8, **kw)
    with pytest.raises(FastsimInputError, match="prefix"):
        simulate(plan, a, p, o, prefix=Blocks(16, [0, 0], []), **kw)          # lecture has no cache
    with pytest.raises(FastsimInputError, match="max_num_batched_tokens"):
        simulate(plan, a, p, o, policy=engine_policy("vllm", max_num_batched_tokens=3), spec=_spec_decoding(4, 0.5),
                 p_draft=D8, **kw)
    with pytest.raises(FastsimInputError, match="prefix_caching"):
        engine_policy("vllm", prefix_caching="no")
    with pytest.raises(FastsimInputError, match="gpu_memory_bytes"):
        engine_policy("sglang", float("nan"))
