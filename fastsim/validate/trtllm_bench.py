"""The engine settings ``trtllm-bench throughput`` chooses for a dataset when none are given.

``trtllm-bench`` does not run TensorRT-LLM at the LLM API's defaults (max_num_tokens 8192,
max_batch_size 2048): unless ``--max_num_tokens`` / ``--max_batch_size`` are passed, it tunes both
to the dataset's input and output lengths and the KV cache the deployment holds
(NVIDIA/TensorRT-LLM ``tensorrt_llm/bench/build/tuning.py``, ``calc_engine_setting`` and
``finetune_setting``). The published perf-overview tables were measured that way, so an offline
TensorRT-LLM row that publishes neither setting is run with the tuned ones. The rule, as that
file states it:

- requests the KV cache holds at the target lengths: ``R = KV tokens / (ISL + OSL)``;
- ``raw_bs = min(R, 4096) / PP``; ``raw_token = min(raw_bs x (1 + ISL / OSL), 32768)``;
- max batch size: ``max(64, 32 x ceil(raw_bs / 32))`` below 256, ``128 x ceil(raw_bs / 128)``
  below 1024, else ``256 x ceil(raw_bs / 256)`` (the "optimistic" tuning);
- max num tokens: ``max(2048, 256 x ceil(raw_token / 256))`` below 4096, ``512 x ceil(raw_token /
  512)`` below 8192, else ``1024 x ceil(raw_token / 1024)``;
- with chunked prefill off (trtllm-bench's default, ``enable_chunked_prefill`` False), max num
  tokens is raised to at least the dataset's longest input plus the max batch size, so every
  prompt fits one step (``tensorrt_llm/bench/benchmark/utils/general.py``, ``get_settings``:
  ``max_num_tokens = max(max_num_tokens, max_isl + max_batch_size)``).

fastsim's KV tokens are its own memory model's (:data:`fastsim.stepmodel.P_KV_BUDGET_TOKENS`),
where trtllm-bench estimates its own from the parameter count and the card's memory; the two
differ by the engine's activation and runtime reserves, which fastsim's memory model does not
hold.
"""
from __future__ import annotations

import math

from ..errors import FastsimInputError, require_count, require_positive

__all__ = ["bench_settings", "MAX_BATCH_CAP", "MAX_TOKENS_CAP"]

#: trtllm-bench's caps on the tuned batch (before the PP split) and token budget (``finetune_setting``).
MAX_BATCH_CAP = 4096
MAX_TOKENS_CAP = 32768


def bench_settings(kv_tokens: float, input_len: int, output_len: int, pp: int = 1, *,
                   chunked_prefill: bool = False) -> tuple:
    """``(max_batch_size, max_num_tokens)`` as trtllm-bench tunes them (module docstring).

    Parameters
    ----------
    kv_tokens : float
        KV cache of one instance, in tokens (> 0).
    input_len, output_len : int
        The dataset's input and output lengths per request (tokens, >= 1).
    pp : int
        Pipeline-parallel stages (>= 1).
    chunked_prefill : bool
        Whether the run enables chunked prefill (trtllm-bench's default: off, and then max num
        tokens covers the longest input plus the max batch size).

    Returns
    -------
    tuple of (int, int)
        The tuned max batch size and max num tokens.

    Raises
    ------
    FastsimInputError
        A non-positive KV size, lengths or stage count below 1, or a KV cache that holds less than
        one request at these lengths (trtllm-bench refuses to run then: "The amount of KV cache
        memory is insufficient to run this model").
    """
    kv_tokens = require_positive("kv_tokens", kv_tokens)
    input_len = require_count("input_len", input_len, 1)
    output_len = require_count("output_len", output_len, 1)
    pp = require_count("pp", pp, 1)
    requests = kv_tokens / (input_len + output_len)
    if requests < 1.0:
        raise FastsimInputError("kv_tokens", kv_tokens, f"a KV cache holding at least one request of "
                                f"{input_len + output_len:,} tokens (trtllm-bench refuses to run with less)")
    raw_bs = min(requests, MAX_BATCH_CAP) / pp
    raw_token = min(raw_bs * (1.0 + input_len / output_len), MAX_TOKENS_CAP)
    if raw_bs < 256:
        max_bs = max(64, 32 * math.ceil(raw_bs / 32))
    elif raw_bs < 1024:
        max_bs = 128 * math.ceil(raw_bs / 128)
    else:
        max_bs = 256 * math.ceil(raw_bs / 256)
    if raw_token < 4096:
        max_token = max(2048, 256 * math.ceil(raw_token / 256))
    elif raw_token < 8192:
        max_token = 512 * math.ceil(raw_token / 512)
    else:
        max_token = 1024 * math.ceil(raw_token / 1024)
    if not chunked_prefill:
        max_token = max(max_token, input_len + max_bs)
    return int(max_bs), int(max_token)
