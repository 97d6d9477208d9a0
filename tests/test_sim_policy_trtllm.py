"""The trtllm engine policy (TensorRT-LLM's GUARANTEED_NO_EVICT scheduler) and the batch cap under every policy.

Closed forms where the rules give one (reservation waves, chunk sizes, a lone request equal to
vLLM's), the kernel against the plain-Python reference bit for bit, the defaults against the
values cited from TensorRT-LLM's source, and the command line.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cliutil import run
from fastsim.errors import FastsimInputError
from fastsim.sim import ColocatedPlan, simulate
from fastsim.sim.policy import POLICIES, engine_policy, policy_defaults
from fastsim.sim.records import REQ_FINISHED, REQ_REJECTED
from fastsim.stepmodel import P_LAYERS, P_QDIM_PF, step_time
from test_sim_policy import P8, _session_blocks, _with_kv, check_policy_against_reference


def _run(pol, p, arr, P, O, *, horizon=600.0, n_instances=1, max_batch=0):
    plan = ColocatedPlan(p, n_instances, 64, max_batch)
    return simulate(plan, np.asarray(arr, float), np.asarray(P), np.asarray(O), horizon_s=horizon,
                    ttft_slo_s=1.0, tpot_slo_s=0.1, policy=pol, measure_window=(0.0, 1.0))


def _prefill_times(p, chunks):
    """Finish time of a lone request's prefill steps of these chunk sizes (the step model's terms)."""
    lay, q = float(p[P_LAYERS]), float(p[P_QDIM_PF])
    t = 0.0
    s = 0
    for x in chunks:
        attn = 4.0 * lay * q * 1.0 * (0.0 - 0.0 * 0.0) + 2.0 * lay * q * x * x + 4.0 * lay * q * x * float(s)
        t = t + float(step_time(p, float(x), float(s) - 0.0 * 0.0, attn, 1.0))
        s += x
    return t


def test_defaults_are_tensorrt_llms():
    """BaseLlmArgs / KvCacheConfig (llm_args.py) and trtllm-bench's throughput defaults."""
    t = policy_defaults("trtllm", 80e9)
    assert (t.name, t.max_num_batched_tokens, t.max_num_seqs, t.block_tokens) == ("trtllm", 8192, 2048, 32)
    assert t.prefix_caching is False and t.chunked_context is False
    # the GPU does not pick TensorRT-LLM's defaults
    assert policy_defaults("trtllm", 24e9) == t
    assert "trtllm" in POLICIES
    # vLLM and SGLang always chunk
    assert policy_defaults("vllm", 80e9).chunked_context and policy_defaults("sglang", 80e9).chunked_context


def test_reservation_runs_at_most_k_and_never_preempts():
    """KV of exactly k requests' P + O blocks: waves of k, none preempted; vLLM fills the same blocks."""
    n, k, P, O, bt = 12, 3, 300, 200, 32
    blocks = -(-(P + O) // bt)
    p = _with_kv(P8, float(k * blocks * bt))
    pol = engine_policy("trtllm", block_tokens=bt)
    r = _run(pol, p, np.zeros(n), np.full(n, P), np.full(n, O))
    assert np.all(r.status == REQ_FINISHED) and r.metrics.preemptions == 0
    fin = np.sort(r.finish_s)
    waves = fin.reshape(n // k, k)
    assert np.all(waves == waves[:, :1])                      # k finish together, wave after wave
    assert np.all(np.diff(waves[:, 0]) > 0)
    order = np.argsort(r.finish_s, kind="stable")
    first = r.first_token_s[order].reshape(n // k, k)
    assert np.all(first[1:].min(axis=1) > waves[:-1, 0])       # the next wave starts after the last ends
    assert int(r.metrics.kv_peak_tokens[0]) <= k * blocks * bt
    # vLLM allocates as tokens arrive: more run at once, and they preempt
    v = _run(engine_policy("vllm", block_tokens=bt), p, np.zeros(n), np.full(n, P), np.full(n, O))
    assert v.metrics.preemptions > 0


def test_a_lone_request_times_as_under_vllm():
    """Nothing else differs (one request, its prompt within one budget): the same TTFT and finish."""
    p = _with_kv(P8, 1e6)
    for P in (1, 100, 4000):
        t = _run(engine_policy("trtllm"), p, [0.0], [P], [50])
        v = _run(engine_policy("vllm", block_tokens=32), p, [0.0], [P], [50])
        assert t.first_token_s[0] == v.first_token_s[0] and t.finish_s[0] == v.finish_s[0]
    # chunked context with a budget of whole blocks: vLLM's chunks exactly
    t = _run(engine_policy("trtllm", max_num_batched_tokens=2048, chunked_context=True), p, [0.0], [10000], [3])
    v = _run(engine_policy("vllm", max_num_batched_tokens=2048), p, [0.0], [10000], [3])
    assert t.first_token_s[0] == v.first_token_s[0] == _prefill_times(p, (2048, 2048, 2048, 2048, 1808))
    assert t.finish_s[0] == v.finish_s[0]


def test_max_num_tokens_bounds_each_step_in_whole_blocks():
    """A 1,000-token budget and 32-token blocks: chunks of 992 (cut short: whole blocks), then the rest."""
    p = _with_kv(P8, 1e6)
    pol = engine_policy("trtllm", max_num_batched_tokens=1000, chunked_context=True)
    r = _run(pol, p, [0.0], [5000], [2])
    assert r.first_token_s[0] == _prefill_times(p, (992, 992, 992, 992, 992, 40))
    assert r.metrics.mean_batch[0] == 1.0
    # without chunked context a context runs whole: a prompt over the budget is refused at arrival
    r = _run(engine_policy("trtllm", max_num_batched_tokens=1000), p, [0.0, 0.0], [1000, 1001], [2, 2])
    assert list(r.status) == [REQ_FINISHED, REQ_REJECTED]
    assert r.first_token_s[0] == _prefill_times(p, (1000,))


def test_decodes_come_before_contexts():
    """A decode and a context in one budget: the decode's token first, the context gets the rest in whole blocks."""
    p = _with_kv(P8, 1e6)
    pol = engine_policy("trtllm", max_num_batched_tokens=64, chunked_context=True, block_tokens=16)
    r = _run(pol, p, [0.0, 0.0], [10, 300], [40, 2])
    # step 1: request 0 whole (10), request 1 cut from 54 to 48; then request 0 decodes one token a
    # step and request 1 is cut from 63 to 48: 48 x 5, then its last 60 in step 6, its last token in
    # step 7. Request 0 runs steps 1-40: 7 steps of two requests and 33 of one
    assert r.metrics.preemptions == 0 and np.all(r.status == REQ_FINISHED)
    assert r.metrics.mean_batch[0] == 47 / 40
    # vLLM gives request 1 the whole rest of the budget (54, 63, 63, 63, 57): prefill in steps 1-5
    v = _run(engine_policy("vllm", max_num_batched_tokens=64), p, [0.0, 0.0], [10, 300], [40, 2])
    assert v.metrics.mean_batch[0] == 46 / 40 and v.first_token_s[1] < r.first_token_s[1]


@pytest.mark.parametrize("name", ["lecture", "vllm", "sglang", "trtllm"])
def test_the_batch_cap_applies_under_every_policy(name):
    """Six identical requests at t = 0, ample KV, a cap of 2: the j-th to start waits for j - 1 to finish."""
    p = _with_kv(P8, 1e6)
    n, cap = 6, 2
    if name == "lecture":
        r = _run("lecture", p, np.zeros(n), np.full(n, 100), np.full(n, 20), max_batch=cap)
    else:
        r = _run(engine_policy(name, max_num_seqs=cap), p, np.zeros(n), np.full(n, 100), np.full(n, 20))
    fin = np.sort(r.finish_s)
    first = np.sort(r.first_token_s)
    assert np.all(r.status == REQ_FINISHED)
    # at most `cap` in service: a request starts (its first token) only after all but cap - 1 before it ended
    assert np.all(first[cap:] > fin[:-cap])
    assert np.nanmax(r.metrics.mean_batch) <= cap
    # and without the cap they overlap
    if name == "lecture":
        u = _run("lecture", p, np.zeros(n), np.full(n, 100), np.full(n, 20))
    else:
        u = _run(engine_policy(name), p, np.zeros(n), np.full(n, 100), np.full(n, 20))
    assert not np.all(np.sort(u.first_token_s)[cap:] > np.sort(u.finish_s)[:-cap])


@pytest.mark.parametrize("name", ["vllm", "sglang", "trtllm"])
def test_a_plans_batch_cap_under_an_engine_policy_is_refused(name):
    p = _with_kv(P8, 1e6)
    with pytest.raises(FastsimInputError) as e:
        _run(name, p, [0.0], [10], [10], max_batch=4)
    assert e.value.field == "plan.max_batch"


def test_settings_that_would_be_ignored_are_refused():
    with pytest.raises(FastsimInputError) as e:
        engine_policy("vllm", chunked_context=False)
    assert e.value.field == "chunked_context"
    with pytest.raises(FastsimInputError) as e:
        engine_policy("trtllm", chunked_context="yes")
    assert e.value.field == "chunked_context"
    pol = engine_policy("trtllm", max_num_batched_tokens=16, chunked_context=True)      # < 32-token blocks
    with pytest.raises(FastsimInputError) as e:
        _run(pol, _with_kv(P8, 1e5), [0.0], [10], [10])
    assert e.value.field == "policy.max_num_batched_tokens"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), chunked=st.booleans(), caching=st.booleans(), spec=st.booleans(),
       routing=st.sampled_from(["least-loaded", "round-robin", "prefix-aware"]), window=st.booleans())
def test_kernel_matches_reference(seed, chunked, caching, spec, routing, window):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    horizon = float(rng.uniform(2.0, 30.0))
    arr = np.sort(rng.uniform(0.0, horizon, n))
    if rng.random() < 0.3:
        arr[: n // 2] = arr[0]          # simultaneous arrivals (an offline batch)
    bth = int(rng.choice([32, 64]))
    P = rng.integers(1, 6 * bth, n)
    O = rng.integers(1, 80, n)
    kv = float(rng.integers(int(P.max() + O.max()) + 40, 3000))
    win = window and not caching
    p = _with_kv(P8, kv, window=int(rng.integers(8, 200)) if win else 0, slide=0.5 if win else 0.0)
    bt = int(rng.choice([1, 2, 4, 8, 16, 32]))
    pol = engine_policy("trtllm", max_num_batched_tokens=int(rng.integers(max(bt, 8), 400)),
                        max_num_seqs=int(rng.integers(1, 40)), block_tokens=bt, prefix_caching=caching,
                        chunked_context=chunked)
    prefix = None
    if caching or rng.random() < 0.5:
        prefix = _session_blocks(rng, n, P, bth, int(rng.integers(1, 4)), O if rng.random() < 0.5 else None)
    sp = pd = None
    if spec:
        from fastsim.specdec import SpecDecoding
        sp = SpecDecoding(int(rng.integers(1, 5)), float(rng.uniform(0.0, 0.95)), "llama-3.1-8b")
        pd = P8
    res, _ = check_policy_against_reference(p, int(rng.integers(1, 4)), arr, P, O, pol, horizon=horizon,
                                            routing=routing, prefix=prefix, spec=sp, p_draft=pd,
                                            seed=int(rng.integers(0, 2**63)))
    assert res.metrics.preemptions == 0


PLAN = ["--gpu", "B200", "--precision", "FP8", "--instances", "1"]


def test_simulate_policy_trtllm_on_the_command_line(capsys):
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", "--horizon", "30", "--format", "json", *PLAN,
                       "--policy", "trtllm", "--max-num-seqs", "16", "--max-num-batched-tokens", "16384")
    assert rc == 0, err
    d = json.loads(out)
    r = d["runs"][0]
    assert r["policy"] == "trtllm" and r["preemptions"] == 0
    assert any("policy trtllm (GUARANTEED_NO_EVICT): max_num_tokens 16384" in n and "max_batch_size 16" in n
               for n in d["notes"])


def test_command_line_refusals_under_trtllm(capsys):
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", "--horizon", "10", *PLAN, "--policy", "trtllm",
                       "--routing", "prefix-aware")
    assert rc == 2 and "--routing" in err
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", "--horizon", "10", *PLAN, "--policy", "nosuch")
    assert rc == 2 and "trtllm" in err
