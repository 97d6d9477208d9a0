"""fastsim.engine_rules: each start-up rule against its statement in the engine's source.

vLLM (vllm-project/vllm):

* ``vllm/config/scheduler.py`` ``SchedulerConfig.verify_max_model_len`` (commit 01230b40):
  ``if self.max_num_batched_tokens < self.max_num_seqs: raise ValueError("max_num_batched_tokens
  (B) must be greater than or equal to max_num_seqs (S).")``, and ``if self.max_num_batched_tokens
  < max_model_len and not self.enable_chunked_prefill: raise ValueError(...)``; the fields are
  ``Field(ge=1)``.
* ``vllm/v1/core/kv_cache_utils.py`` ``check_enough_kv_cache_memory`` /
  ``_check_enough_kv_cache_memory`` (commit 001cabc1): ``needed_memory > available_memory`` raises
  "To serve at least one request with the models's max seq len ...", where
  ``FullAttentionSpec.max_memory_usage_bytes`` (``vllm/v1/kv_cache_interface.py``) is
  ``cdiv(max_model_len, block_size) * page_size_bytes`` and ``get_num_blocks`` is
  ``available_memory // page_size // num_layers``; later revisions subtract the null block
  ``BlockPool.__init__`` (``vllm/v1/core/block_pool.py``) holds back.
* ``vllm/config/cache.py`` ``CacheDType``.

SGLang (sgl-project/sglang):

* ``python/sglang/srt/server_args.py`` ``ServerArgs.check_server_args``: ``assert
  self.chunked_prefill_size % self.page_size == 0, "chunked_prefill_size must be divisible by
  page_size"`` when ``chunked_prefill_size > 0``.
* ``python/sglang/srt/configs/model_config.py`` ``ModelConfig._derive_context_length`` (commit
  001adf56): ``context_length > derived_context_len`` raises "User-specified context_length ... is
  greater than the derived context_length ..." unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN.
* ``python/sglang/srt/model_executor/model_runner.py`` ``ModelRunner.init_memory_pool``:
  ``max_total_num_tokens // page_size * page_size``; "Not enough memory. Please try to increase
  --mem-fraction-static." when it is <= 0.
"""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from fastsim.engine_rules import (SGLANG_KV_CACHE_DTYPES, VLLM_BLOCK_SIZE, VLLM_KV_CACHE_DTYPES, check_engine_policy,
                                  sglang_context_length, sglang_refusal, vllm_kv_blocks, vllm_max_model_len,
                                  vllm_refusal)
from fastsim.errors import FastsimInputError
from fastsim.sim.policy import EnginePolicy


# --- vLLM SchedulerConfig.verify_max_model_len -------------------------------------------------

@given(st.integers(1, 100_000), st.integers(1, 100_000))
def test_vllm_budget_against_the_sequence_cap(budget, seqs):
    """``max_num_batched_tokens < max_num_seqs`` raises, whatever else is set (scheduler.py)."""
    why = vllm_refusal(max_num_seqs=seqs, max_num_batched_tokens=budget)
    assert (why is not None) == (budget < seqs)
    if why:
        assert f"max_num_batched_tokens ({budget}) must be greater than or equal to max_num_seqs ({seqs})" in why
        assert "vllm/config/scheduler.py SchedulerConfig.verify_max_model_len" in why


def test_vllm_budget_against_max_model_len_without_chunked_prefill():
    """Without chunked prefill the budget must reach max_model_len; with it, it need not (scheduler.py)."""
    why = vllm_refusal(max_num_seqs=8, max_num_batched_tokens=2048, max_model_len=4096, enable_chunked_prefill=False)
    assert "max_num_batched_tokens (2048) is smaller than max_model_len (4096)" in why
    assert vllm_refusal(max_num_seqs=8, max_num_batched_tokens=4096, max_model_len=4096,
                        enable_chunked_prefill=False) is None
    assert vllm_refusal(max_num_seqs=8, max_num_batched_tokens=2048, max_model_len=4096) is None


@pytest.mark.parametrize("field", ["max_num_seqs", "max_num_batched_tokens", "max_model_len"])
def test_vllm_settings_at_least_one(field):
    """``Field(ge=1)`` of SchedulerConfig."""
    assert "must be >= 1" in vllm_refusal(**{field: 0})


# --- vLLM check_enough_kv_cache_memory, at block granularity ---------------------------------------

@given(st.floats(0, 2e6, allow_nan=False), st.integers(1, 2_000_000))
def test_vllm_max_model_len_against_the_kv_blocks(kv_tokens, max_model_len):
    """Refused iff cdiv(max_model_len, 16) blocks exceed floor(kv / 16) less the null block."""
    blocks = int(kv_tokens) // 16 - 1
    why = vllm_refusal(max_model_len=max_model_len, kv_tokens=kv_tokens)
    if blocks < 1:
        assert "no available memory for the cache blocks" in why
    else:
        need = -(-max_model_len // 16)
        assert (why is not None) == (need > blocks)
        if why:
            assert f"max seq len ({max_model_len})" in why and "kv_cache_utils.py check_enough_kv_cache_memory" in why
            assert f"estimated maximum model length is {blocks * 16:,}" in why


def test_vllm_longest_model_len_is_whole_blocks():
    # 8,827 KV tokens (Llama-3.1-70B FP8 on one H100): 551 blocks, 550 usable beside the null block
    assert vllm_kv_blocks(8827.475) == 550 and vllm_max_model_len(8827.475) == 550 * VLLM_BLOCK_SIZE == 8800
    assert vllm_refusal(max_model_len=8800, kv_tokens=8827.475) is None
    assert vllm_refusal(max_model_len=8801, kv_tokens=8827.475) is not None    # a 551st block: refused
    assert vllm_refusal(max_model_len=8827, kv_tokens=8827.475) is not None    # the old emitted value
    assert vllm_max_model_len(31) == 0 and vllm_kv_blocks(-5.0) == 0
    with pytest.raises(FastsimInputError):
        vllm_kv_blocks(float("nan"))


def test_vllm_kv_cache_dtype():
    """``--kv-cache-dtype`` takes CacheDType's values (vllm/config/cache.py)."""
    for v in ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16"):
        assert v in VLLM_KV_CACHE_DTYPES and vllm_refusal(kv_cache_dtype=v) is None
    assert "CacheDType" in vllm_refusal(kv_cache_dtype="fp8_e4m3fn")


# --- SGLang --------------------------------------------------------------------------------------

@given(st.integers(1, 100_000), st.sampled_from([1, 16, 64]))
def test_sglang_chunk_divisible_by_page(chunk, page):
    """``chunked_prefill_size % page_size == 0`` (ServerArgs.check_server_args)."""
    why = sglang_refusal(chunked_prefill_size=chunk, page_size=page)
    assert (why is not None) == (chunk % page != 0)
    if why:
        assert "must be divisible by page_size" in why and "check_server_args" in why


def test_sglang_context_length_against_the_model():
    """A context above the derived one is refused (ModelConfig._derive_context_length)."""
    why = sglang_refusal(context_length=131073, model_context_length=131072)
    assert "greater than the derived context_length (131072)" in why
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN" in why
    assert sglang_refusal(context_length=131072, model_context_length=131072) is None


def test_sglang_kv_pool():
    """The pool is whole pages; an empty one is "Not enough memory" (ModelRunner.init_memory_pool)."""
    assert sglang_context_length(8827.475) == 8827 and sglang_context_length(8827.475, page_size=64) == 8768
    assert "increase --mem-fraction-static" in sglang_refusal(kv_tokens=0.5)
    assert sglang_refusal(kv_tokens=1.0) is None
    # no rule ties SGLang's running-request cap to its chunk (prefill and decode steps run apart)
    assert sglang_refusal(max_running_requests=4096, chunked_prefill_size=64) is None
    assert "fp8_e4m3" in SGLANG_KV_CACHE_DTYPES and "kv_cache_dtype" in sglang_refusal(kv_cache_dtype="fp8")


# --- the policy check of simulate / calibrate ------------------------------------------------------

FLAGS = {"max_num_batched_tokens": "--max-num-batched-tokens", "max_num_seqs": "--max-num-seqs"}


def test_check_engine_policy_names_the_flags():
    pol = EnginePolicy("vllm", 100, 256, 16)
    with pytest.raises(FastsimInputError) as exc:
        check_engine_policy(pol, FLAGS, given={"max_num_batched_tokens": 100, "max_num_seqs": 256})
    assert exc.value.field == "--max-num-batched-tokens / --max-num-seqs"
    assert exc.value.value == "100 / 256"
    assert "must be greater than or equal to max_num_seqs (256)" in exc.value.allowed
    with pytest.raises(FastsimInputError) as exc:             # the cap left at vLLM's default
        check_engine_policy(EnginePolicy("vllm", 100, 1024, 16), FLAGS, given={"max_num_batched_tokens": 100})
    assert exc.value.field == "--max-num-batched-tokens / --max-num-seqs (vLLM's default)"
    check_engine_policy(EnginePolicy("vllm", 256, 256, 16), FLAGS)            # equal: vLLM starts
    check_engine_policy(EnginePolicy("sglang", 100, 256, 1), FLAGS)           # SGLang has no such rule
