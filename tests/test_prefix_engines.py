"""Prefix caching as each engine does it: generated tokens cached, hits at the engine's block or page.

Each test checks a rule as the engine's source states it (cited in the test's docstring) on a
workload small enough to work the figure out by hand; every run is also checked against the
pure-Python reference, bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastsim.catalog import LengthDist, default_catalog
from fastsim.errors import FastsimInputError
from fastsim.sim import ColocatedPlan, simulate
from fastsim.sim.policy import ENGINE_BLOCK_TOKENS, engine_policy, policy_defaults
from fastsim.stepmodel import step_params
from fastsim.workload import PrefixBlocks, Workload, prefix_reuse_bound, synthesize
from test_sim_policy import _with_kv, check_policy_against_reference

CAT = default_catalog()
P8 = step_params(CAT.model("llama-3.1-8b"), CAT.gpu("H100"), CAT.precision("BF16"), 1)


def two_turns(bt, P1=100, O1=50, u2=20, O2=10, t2=30.0):
    """A chat of two turns: turn 2's prompt is turn 1's prompt, its answer and a new message.

    Rows span the output at ``bt`` tokens per block: turn 1 lists the blocks of its first
    P1 + O1 - 1 tokens, turn 2 repeats every full one of them and adds its own.
    """
    P2 = P1 + O1 + u2
    nb1 = -(-(P1 + O1 - 1) // bt)
    kept = (P1 + O1 - 1) // bt
    nb2 = -(-(P2 + O2 - 1) // bt)
    rows = [list(range(nb1)), list(range(kept)) + list(range(10_000, 10_000 + nb2 - kept))]
    return (np.array([0.0, t2]), np.array([P1, P2]), np.array([O1, O2]),
            PrefixBlocks.from_lists(bt, rows, spans_output=True))


def run(name, bt_rows, kv_tokens=1e5, **kw):
    arr, P, O, pre = two_turns(bt_rows, **kw)
    res, _ = check_policy_against_reference(_with_kv(P8, kv_tokens), 1, arr, P, O, engine_policy(name),
                                            horizon=60.0, prefix=pre)
    return res


def test_vllm_next_turn_hits_the_previous_prompt_and_answer_block_by_block():
    """vLLM V1 caches every full block a request computed, its generated tokens included.

    ``KVCacheManager.allocate_slots`` (``vllm/v1/core/kv_cache_manager.py``) caches the full
    blocks of ``min(num_computed_tokens + num_new_tokens, request.num_tokens)`` tokens, and
    ``get_request_block_hasher`` (``vllm/v1/core/kv_cache_utils.py``) chains the hashes over
    all of a request's tokens ("the block is completed with generated tokens"). Turn 1 computes
    KV for P1 + O1 - 1 = 149 tokens (its last token is sampled, never fed back): 9 full 16-token
    blocks, 144 tokens, which turn 2's prompt of 170 tokens starts with.
    """
    res = run("vllm", 16)
    assert res.cached_tokens.tolist() == [0, 144]
    # the prompt-only rule would have served turn 1's 6 full prompt blocks (96 tokens) only
    assert res.metrics.cached_prompt_tokens == 144


def test_sglang_next_turn_hits_every_token_at_page_size_one():
    """SGLang's radix cache inserts the finished request's prompt and output, page aligned.

    ``RadixCache.cache_finished_req`` (``python/sglang/srt/mem_cache/radix_cache.py``) inserts
    ``(origin_input_ids + output_ids)[:-1]`` cut to a multiple of ``page_size``, and
    ``match_prefix`` matches page-aligned keys; ``ServerArgs.page_size`` is 1 by default
    (``python/sglang/srt/server_args.py``). So turn 2 hits all 149 tokens turn 1 computed; with
    16-token ids the same run hits 144 (hits count in the ids' block, which is why the command
    line draws SGLang's ids at its page size).
    """
    assert policy_defaults("sglang", 80e9).block_tokens == ENGINE_BLOCK_TOKENS["sglang"] == 1
    assert run("sglang", 1).cached_tokens.tolist() == [0, 149]
    assert run("sglang", 16).cached_tokens.tolist() == [0, 144]
    # hits are capped at P - 1 (SGLang computes at least one token: ``max_prefix_len = input_len - 1``)
    res = run("sglang", 1, P1=100, O1=50, u2=1, O2=3)
    assert res.cached_tokens.tolist() == [0, 149]       # P2 = 151, cap 150


def test_an_answer_still_being_generated_is_not_hit():
    """Turn 2 sent before turn 1's answer is done (an open-loop client) hits turn 1's prompt only.

    A chat sends its next turn after the answer, so only this case could tell when an engine
    caches generated blocks: fastsim caches them at the request's finish (SGLang's rule,
    ``RadixCache.cache_finished_req``); vLLM caches them as they are computed, which fastsim does
    not model (module docstring of ``fastsim.sim.policy``). Turn 1's full prompt blocks are in the
    cache from its prefill on: 6 of 16 tokens (96) under vLLM, all 100 tokens at SGLang's page of 1.
    """
    for name, bt, want in (("vllm", 16, 96), ("sglang", 1, 100)):
        res = run(name, bt, O1=4000, t2=0.5)
        assert res.finish_s[0] > 0.5
        assert res.cached_tokens.tolist() == [0, want], name


def _preemption_case(name, spans):
    """Two long decodes that do not fit together: the later one is preempted (vllm) or retracted (sglang).

    vLLM: 300 blocks of 16 tokens; prompts of 64, outputs of 2,500 and 4,000 (161 and 254 blocks
    alone); at 150 blocks each the first needs another and the second is preempted after some
    2,300 generated tokens. SGLang (page 1): 4,800 tokens; outputs of 3,000 and, 5 s later (once
    the new-token ratio has decayed enough to admit it), 2,000; the second is retracted. Rows
    span the output (``spans``) or cover the prompts only; ids are private to each request.
    """
    bt, kv, arr, O = (16, 300 * 16.0, [0.0, 0.0], [2500, 4000]) if name == "vllm" else \
        (1, 4800.0, [0.0, 5.0], [3000, 2000])
    P = [64, 64]
    rows = [list(range(k * 100_000, k * 100_000 + (-(-(p + o - 1) // bt) if spans else -(-p // bt))))
            for k, (p, o) in enumerate(zip(P, O))]
    pol = engine_policy(name, block_tokens=bt, max_num_batched_tokens=8192, max_num_seqs=8)
    res, _ = check_policy_against_reference(_with_kv(P8, kv), 1, np.array(arr), np.array(P), np.array(O), pol,
                                            horizon=200.0, prefix=PrefixBlocks.from_lists(bt, rows, spans))
    assert res.preemptions.tolist() == [0, 1]
    return res


def test_vllm_preemption_keeps_the_generated_blocks_sglang_retraction_drops_them():
    """A preempted request takes its generated blocks back under vLLM, not under SGLang.

    vLLM caches full blocks as they are computed (``KVCacheManager.allocate_slots``), and
    ``KVCacheManager.free`` at the preemption (``Scheduler._preempt_request``,
    ``vllm/v1/core/sched/scheduler.py``) returns them to the free queue still hashed, last block
    first "so that the tail blocks are evicted first", so the recompute hits what survived of
    its prompt and answer. SGLang's ``ScheduleBatch.release_req`` calls
    ``release_kv_cache(req, tree_cache, is_insert=False)`` for a retracted request
    (``python/sglang/srt/managers/schedule_batch.py``, ``retract_decode``): its decoded tokens
    are freed, not inserted. Rows that span the output therefore shorten vLLM's recompute (some
    2,200 tokens fewer) and change nothing for SGLang.
    """
    v_on, v_off = _preemption_case("vllm", True), _preemption_case("vllm", False)
    assert v_on.finish_s[0] == v_off.finish_s[0]
    assert v_off.finish_s[1] - v_on.finish_s[1] > 0.01
    s_on, s_off = _preemption_case("sglang", True), _preemption_case("sglang", False)
    np.testing.assert_array_equal(s_on.finish_s, s_off.finish_s)
    np.testing.assert_array_equal(s_on.first_token_s, s_off.first_token_s)


def test_synthetic_sessions_carry_the_answer_into_the_next_prompt():
    """``synthesize(session_turns=2)``: turn 2's prompt is P1 + O1 + u and hits turn 1's prompt and answer.

    Fixed lengths (P 300, O 100) and sessions 60 s apart at 0.05 req/s (3 slots), far apart
    enough that every answer is done when its next turn arrives: under vLLM each turn 2 hits
    16 x floor(399 / 16) = 384 tokens; under SGLang with ids at its page size, all 399.
    """
    d = (LengthDist("fixed", 300.0, 0.0), LengthDist("fixed", 100.0, 0.0))
    for name, want in (("vllm", 384), ("sglang", 399)):
        w = synthesize(d, 0.05, 600.0, 1, session_turns=2, session_gap_s=60.0,
                       prefix_block_tokens=ENGINE_BLOCK_TOKENS[name])
        second = w.prompt_tokens == 300 + 100 + 300
        assert second.sum() >= 5 and set(w.prompt_tokens.tolist()) == {300, 700}
        res, _ = check_policy_against_reference(_with_kv(P8, 2e5), 1, w.arrival_s, w.prompt_tokens,
                                                w.output_tokens, engine_policy(name), horizon=w.horizon_s + 60.0,
                                                prefix=w.prefix)
        assert np.all(res.cached_tokens[second] == want), name
        assert np.all(res.cached_tokens[~second] == 0)
        # the unbounded-cache bound counts the same hits
        assert prefix_reuse_bound(w) == want * int(second.sum()) / int(w.prompt_tokens.sum())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), name=st.sampled_from(["vllm", "sglang", "trtllm"]),
       turns=st.integers(2, 4), routing=st.sampled_from(["least-loaded", "prefix-aware"]))
def test_sessions_kernel_matches_reference_under_pressure(seed, name, turns, routing):
    """Multi-turn sessions on a tight KV budget (preemptions, retractions, evictions): kernel == reference."""
    rng = np.random.default_rng(seed)
    d = (LengthDist("lognormal", float(rng.uniform(20, 200)), 0.8), LengthDist("lognormal", float(rng.uniform(5, 80)), 0.8))
    w = synthesize(d, float(rng.uniform(0.5, 4.0)), 20.0, int(rng.integers(0, 1000)), session_turns=turns,
                   shared_prefix_tokens=int(rng.integers(0, 100)), session_gap_s=float(rng.uniform(0.5, 5.0)),
                   prefix_block_tokens=int(rng.choice([1, 4, 16, 32])) if name != "trtllm" else 32)
    if w.n == 0:
        return
    top = int((w.prompt_tokens + w.output_tokens).max())
    bt = {"vllm": 16, "sglang": 1, "trtllm": 32}[name]
    if w.prefix.block_tokens % bt:
        bt = 1
    pol = engine_policy(name, block_tokens=bt, max_num_batched_tokens=int(rng.integers(64, 2048)),
                        max_num_seqs=int(rng.integers(2, 32)), prefix_caching=True)
    kv = float(rng.integers(top + 64, top * 3 + 128))
    check_policy_against_reference(_with_kv(P8, kv), int(rng.integers(1, 3)), w.arrival_s, w.prompt_tokens,
                                   w.output_tokens, pol, horizon=40.0, routing=routing, prefix=w.prefix)


def test_rows_that_span_the_output_are_bounded_by_the_tokens_with_kv():
    """A row spanning the output lists at most ceil((P + O - 1) / block_tokens) blocks (the last token has no KV)."""
    ok = Workload("x", [0.0], [10], [7], prefix=PrefixBlocks.from_lists(4, [[1, 2, 3, 4]], spans_output=True))
    assert ok.prefix.spans_output is True
    with pytest.raises(FastsimInputError) as e:
        Workload("x", [0.0], [10], [7], prefix=PrefixBlocks.from_lists(4, [[1, 2, 3, 4, 5]], spans_output=True))
    assert e.value.field == "Workload.prefix.offsets (request 0)" and "(10 + 7 - 1) / 4) = 4" in e.value.allowed
    with pytest.raises(FastsimInputError) as e:
        Workload("x", [0.0], [10], [7], prefix=PrefixBlocks.from_lists(4, [[1, 2, 3, 4]]))
    assert "spans_output=True" in e.value.allowed
    with pytest.raises(FastsimInputError) as e:
        Workload("x", [0.0], [10], [7], prefix=PrefixBlocks(4, [0, 1], [1], "yes"))
    assert e.value.field == "Workload.prefix.spans_output"
    # the simulator applies the same bound to what it is given directly
    with pytest.raises(FastsimInputError, match="request 0"):
        simulate(ColocatedPlan(P8, 1, 64), np.zeros(1), np.array([10]), np.array([7]), horizon_s=10.0,
                 ttft_slo_s=1.0, tpot_slo_s=0.1, policy="vllm",
                 prefix=PrefixBlocks(4, np.array([0, 5]), np.arange(5), True))


def test_derived_workloads_keep_spans_output():
    w = synthesize("chat", 2.0, 30.0, 0, session_turns=3)
    assert w.prefix.spans_output
    assert w.rescaled(4.0).prefix.spans_output
    from fastsim.workload import all_at_once, synthesize_from_trace
    assert all_at_once(w).prefix.spans_output
    assert synthesize_from_trace(w, 1.0, 10.0, 0).prefix.spans_output


def test_a_released_request_loses_its_tail_blocks_first():
    """Eviction takes a finished request's last blocks first, so its head stays to be hit.

    vLLM's ``KVCacheManager.free`` (``vllm/v1/core/kv_cache_manager.py``) frees a request's blocks
    "in reverse order so that the tail blocks are evicted first when caching is enabled", and the
    free queue evicts from its head; SGLang's ``RadixCache.evict`` evicts leaves, the ends of the
    cached sequences, first. 20 blocks of 16 tokens: A (160-token prompt, 10 blocks) finishes and
    leaves them cached; C (128 + 49 tokens with KV, 12 blocks of its own ids) needs 2 of them, A's
    last two; B, A's prompt and 80 more tokens, then hits A's first 8 blocks (128 tokens).
    """
    rows = [list(range(10)), list(range(100, 108)), list(range(10)) + list(range(200, 205))]
    arr, P, O = np.array([0.0, 1.0, 5.0]), np.array([160, 128, 240]), np.array([1, 50, 5])
    for name in ("vllm", "sglang"):
        pol = engine_policy(name, block_tokens=16, max_num_batched_tokens=4096, max_num_seqs=8)
        res, _ = check_policy_against_reference(_with_kv(P8, 20 * 16.0), 1, arr, P, O, pol, horizon=30.0,
                                                prefix=PrefixBlocks.from_lists(16, rows))
        assert res.finish_s[1] < 5.0
        assert res.cached_tokens.tolist() == [0, 0, 128], name


def test_sglang_admission_room_counts_tokens_at_any_page_size():
    """SGLang's admission room is in tokens: free pages times ``page_size``.

    ``PrefillAdder`` (``python/sglang/srt/managers/schedule_policy.py``) starts ``rem_total_tokens``
    from the allocator's ``available_size()`` (tokens) and takes off each request's
    ``extend_input_len + min(max_new_tokens, 4096)``. At ``page_size`` 16, 20 free pages are 320
    tokens: a request of 128 + 50 tokens is admitted at once (compared with 20 it never would be).
    """
    pol = engine_policy("sglang", block_tokens=16, max_num_batched_tokens=4096, max_num_seqs=8)
    res, _ = check_policy_against_reference(_with_kv(P8, 20 * 16.0), 1, np.zeros(1), np.array([128]), np.array([50]),
                                            pol, horizon=10.0)
    assert res.first_token_s[0] < 0.1 and res.finish_s[0] < 1.0


@pytest.mark.parametrize("policy, per_turn", [("vllm", 384), ("sglang", 399)])
def test_simulate_session_turns_hit_in_the_engines_units(capsys, policy, per_turn):
    """``simulate --session-turns``: ids at the engine's block (vLLM 16 tokens) or page (SGLang 1 token).

    Fixed lengths 300 / 100, sessions of 2 turns 20 s apart at 0.5 req/s on one instance: every
    second turn (prompt 300 + 100 + 300) hits what its first turn computed, 16 x floor(399 / 16)
    = 384 tokens under vLLM (``KVCacheManager.allocate_slots`` caches full blocks) and all 399
    under SGLang (``RadixCache.cache_finished_req`` at ``page_size`` 1).
    """
    import json
    from cliutil import run as cli
    from fastsim.workload import seeds_for
    rc, out, err = cli(capsys, "simulate", "--format", "json", "--scenario", "chat", "--model", "llama-3.1-8b",
                       "--gpu", "H100", "--precision", "FP8", "--tp", "1", "--instances", "1", "--policy", policy,
                       "--session-turns", "2", "--session-gap", "20", "--rate", "0.5", "--lengths", "fixed:300,100",
                       "--horizon", "300")
    assert rc == 0, err
    doc = json.loads(out)
    d = (LengthDist("fixed", 300.0, 0.0), LengthDist("fixed", 100.0, 0.0))
    w = synthesize(d, 0.5, 300.0, seeds_for(0, 1)[0], session_turns=2, session_gap_s=20.0)
    second = int((w.prompt_tokens == 700).sum())
    assert second > 20 and doc["runs"][0]["requests"] == w.n
    assert doc["runs"][0]["cached_prompt_tokens"] == per_turn * second
    bt = ENGINE_BLOCK_TOKENS[policy]
    assert any(n.startswith(f"prefix cache: ids of {bt}-token blocks over each request's prompt and answer")
               for n in doc["notes"])
