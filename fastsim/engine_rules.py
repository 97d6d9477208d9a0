"""The start-up checks of vLLM and SGLang, as their sources state them.

An engine refuses to start with some settings: vLLM's scheduler configuration refuses a token
budget below the sequence cap, and its KV cache manager refuses a ``max_model_len`` whose blocks
do not fit the KV memory left after the weights. fastsim writes launch commands
(:mod:`fastsim.emit`) and simulates engine settings (``fastsim simulate`` / ``fastsim calibrate``
with ``--policy vllm|sglang``); both ask this module first, so that nothing fastsim writes or
simulates is a setting the engine itself would refuse.

:func:`vllm_refusal` and :func:`sglang_refusal` take the settings a launch command carries (and
the instance's KV capacity in tokens, as :func:`fastsim.stepmodel.kv_budget_tokens` counts it) and
return the engine's reason for refusing them, in its own words (paraphrased, the source cited), or
None. :func:`vllm_max_model_len` and :func:`sglang_context_length` give the longest context the KV
capacity holds, counted as the engine counts it (whole blocks, less the null block in vLLM; whole
pages in SGLang). :func:`check_engine_policy` raises a :class:`~fastsim.errors.FastsimInputError`
naming the command-line flags when a simulated engine policy breaks a rule.

Sources (the version each rule was read from)
---------------------------------------------
vLLM (``vllm-project/vllm``):

* ``vllm/config/scheduler.py``, ``SchedulerConfig.verify_max_model_len`` (commit ``01230b40``):
  "max_num_batched_tokens (B) must be greater than or equal to max_num_seqs (S)"; and, when
  chunked prefill is disabled, "max_num_batched_tokens (B) is smaller than max_model_len (L) ...
  Please increase max_num_batched_tokens or decrease max_model_len". Its fields
  ``max_num_batched_tokens`` and ``max_num_seqs`` are ``Field(ge=1)``.
* ``vllm/v1/core/kv_cache_utils.py``, ``check_enough_kv_cache_memory`` and
  ``_check_enough_kv_cache_memory`` (commit ``001cabc1``): "No available memory for the cache
  blocks" when nothing is left, and "To serve at least one request with the models's max seq len
  (L), (X GiB KV cache is needed, which is larger than the available KV cache memory (Y GiB) ...
  the estimated maximum model length is M". The memory one request needs is
  ``FullAttentionSpec.max_memory_usage_bytes`` (``vllm/v1/kv_cache_interface.py``, same commit):
  ``cdiv(max_model_len, block_size) x page_size_bytes``, whole blocks; the blocks the engine has are
  ``get_num_blocks``: ``available_memory // page_size // num_layers``. Later revisions of
  ``check_enough_kv_cache_memory`` subtract the one null block ``BlockPool`` holds back
  (``vllm/v1/core/block_pool.py``, ``BlockPool.__init__``: ``null_block =
  free_block_queue.popleft()``); the rule here counts it, so a command passes both.
* ``vllm/config/cache.py``, ``CacheDType`` (``--kv-cache-dtype``): ``auto``, ``bfloat16``,
  ``fp8``, ``fp8_e4m3``, ``fp8_e5m2``, ``fp8_inc``, ``fp8_ds_mla``; ``block_size`` 16 on CUDA.
* The engine generation (:func:`vllm_v0_engine`): vLLM v0.8.0 (March 2025) made the V1 engine the
  default (``vllm-project/vllm`` pull request 13726, "V1 is now enabled by default";
  ``VLLM_USE_V1=0`` kept V0 until V0's removal); every release before it runs the V0 engine
  (``vllm/engine/llm_engine.py``, ``vllm/core/scheduler.py``), whose scheduler, defaults and
  per-step host work are not V1's. Every rule of this module and fastsim's ``vllm`` policy are V1's.

SGLang (``sgl-project/sglang``):

* ``python/sglang/srt/server_args.py``, ``ServerArgs.check_server_args``: "chunked_prefill_size
  must be divisible by page_size" (when ``chunked_prefill_size > 0``); ``page_size`` 1 by default.
  ``--kv-cache-dtype`` choices include ``auto``, ``fp8_e4m3``, ``fp8_e5m2``.
* ``python/sglang/srt/configs/model_config.py``, ``ModelConfig._derive_context_length`` (commit
  ``001adf56``): a ``--context-length`` above the context derived from the model's config raises
  "User-specified context_length (C) is greater than the derived context_length (D)" unless
  ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1``.
* ``python/sglang/srt/model_executor/model_runner.py``, ``ModelRunner.init_memory_pool``: the KV
  pool is ``max_total_num_tokens // page_size x page_size`` tokens, and "Not enough memory. Please
  try to increase --mem-fraction-static." when it is <= 0. ``python/sglang/srt/managers/
  tp_worker.py``, ``TpModelWorker.__init__``: ``max_req_input_len = min(context_len - 1,
  max_total_num_tokens - 1)``: SGLang starts with a context longer than its pool but refuses every
  request past the pool, so a command states at most the pool (:func:`sglang_context_length`).
  SGLang has no rule between ``--chunked-prefill-size`` and ``--max-running-requests`` (its
  prefill and decode steps run apart).
"""
from __future__ import annotations

import math
import re

from .errors import FastsimInputError

__all__ = ["VLLM_BLOCK_SIZE", "SGLANG_PAGE_SIZE", "VLLM_KV_CACHE_DTYPES", "SGLANG_KV_CACHE_DTYPES",
           "vllm_kv_blocks", "vllm_max_model_len", "sglang_context_length", "vllm_refusal", "sglang_refusal",
           "check_engine_policy", "vllm_v0_engine", "VLLM_V1_DEFAULT_RELEASE", "VLLM_V1_DEFAULT_MONTH",
           "ENGINE_RUNTIMES", "engine_runtime", "TRTLLM_PYTORCH_DEFAULT_RELEASE"]

#: vLLM's KV block on CUDA (tokens; ``CacheConfig.block_size`` default, ``vllm/config/cache.py``).
VLLM_BLOCK_SIZE = 16
#: SGLang's KV page (tokens; ``ServerArgs.page_size`` default).
SGLANG_PAGE_SIZE = 1
#: ``--kv-cache-dtype`` values vLLM accepts (``CacheDType``, ``vllm/config/cache.py``).
VLLM_KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla")
#: ``--kv-cache-dtype`` values of SGLang this module knows (``ServerArgs.kv_cache_dtype`` choices).
SGLANG_KV_CACHE_DTYPES = ("auto", "fp8_e4m3", "fp8_e5m2", "bf16", "bfloat16")

#: The first vLLM release whose default engine is V1 (v0.8.0; vllm-project/vllm pull request 13726).
VLLM_V1_DEFAULT_RELEASE = (0, 8)
#: Its month (year, month): a run dated only by its publication before it ran V0.
VLLM_V1_DEFAULT_MONTH = (2025, 3)

_SCHED = "vllm/config/scheduler.py SchedulerConfig.verify_max_model_len"
_KVCHK = "vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory"


_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")
_MONTH_NAMES = "|".join(sorted({m for n in _MONTHS for m in (n, n[:3], n[:4])}, key=len, reverse=True))
_USE_V1 = re.compile(r"VLLM_USE_V1\s*=\s*([01])")
_GENERATION = re.compile(r"(?<![\w.])V([01])(?![\w.])", re.IGNORECASE)
_VERSION = re.compile(r"(?<![\w.])v?(\d{1,2})\.(\d+)(?:\.\d+)?", re.IGNORECASE)
_MONTH_YEAR = re.compile(r"(?<![a-z])(" + _MONTH_NAMES + r")\.?,?\s+(?:\d{1,2},?\s+)?(\d{4})\b", re.IGNORECASE)
_ISO_MONTH = re.compile(r"\b(\d{4})-(\d{2})\b")


#: Each engine's runtimes, its default (the one a plan runs on) first: TensorRT-LLM's PyTorch backend
#: (``tensorrt_llm._torch``, the ``PyExecutor``) and its TensorRT-engine runtime (engines built by
#: ``trtllm-build``, run by the C++ executor, as Triton's ``tensorrtllm`` backend does). vLLM and SGLang
#: have one runtime each here (vLLM's V0 engine is refused, not a runtime: :func:`vllm_v0_engine`).
ENGINE_RUNTIMES = {"trtllm": ("pytorch", "tensorrt"), "vllm": ("",), "sglang": ("",)}
#: The first TensorRT-LLM release whose ``LLM`` API, ``trtllm-bench`` and ``trtllm-serve`` run the
#: PyTorch backend by default (1.0; the TensorRT engine's ``LLM`` moved to
#: ``tensorrt_llm._tensorrt_engine``); the backend itself is in every release from 0.17.
TRTLLM_PYTORCH_DEFAULT_RELEASE = (1, 0)


def engine_runtime(engine: str, engine_version: str) -> str:
    """The runtime a measurement of ``engine`` at ``engine_version`` ran on (:data:`ENGINE_RUNTIMES`).

    TensorRT-LLM: ``"pytorch"`` where the version names the PyTorch backend; ``"tensorrt"`` where it
    names the TensorRT engine (``TensorRT engine``, ``TensorRT-engine``, ``trtllm-build``) or Triton
    (whose ``tensorrtllm`` backend runs TensorRT engines); else by
    the first release ``X.Y`` in the text: below :data:`TRTLLM_PYTORCH_DEFAULT_RELEASE` (1.0)
    ``"tensorrt"``, from it on ``"pytorch"``; with no release either (not stated) the default,
    ``"pytorch"``. Other engines: ``""`` (one runtime).

    Parameters
    ----------
    engine : str
        ``trtllm``, ``vllm`` or ``sglang``.
    engine_version : str
        The version a measurement states (``"0.17 (TensorRT engine)"``, ``"0.14 (Triton)"``,
        ``"perf-overview (PyTorch backend)"``, ``"1.1.0"``).

    Returns
    -------
    str

    Raises
    ------
    FastsimInputError
        ``engine_version`` is not a string.
    """
    if not isinstance(engine_version, str):
        raise FastsimInputError("engine_version", engine_version, "a string (the version a run states)")
    if engine != "trtllm":
        return ""
    low = engine_version.lower()
    if "pytorch" in low:
        return "pytorch"
    if re.search(r"tensorrt[ _-]?engine|trtllm-build|triton", low):
        return "tensorrt"
    v = _VERSION.search(engine_version)
    if v and (int(v.group(1)), int(v.group(2))) < TRTLLM_PYTORCH_DEFAULT_RELEASE:
        return "tensorrt"
    return "pytorch"


def vllm_v0_engine(engine_version: str) -> bool | None:
    """Whether a vLLM run of this ``engine_version`` ran the V0 engine (True), V1 (False) or cannot be told (None).

    Parameters
    ----------
    engine_version : str
        The version a measurement states (``fastsim.validate.Measurement.engine_version``): a
        release (``"0.6.3.post2.dev308+gb489fc3c"``, ``"v0.19.0"``), a name that says the engine
        (``"inference-sim fork of vLLM V1"``), or a note dated by month (``"not stated (ROCm build,
        Oct 2024)"``).

    Returns
    -------
    bool or None
        In this order: ``VLLM_USE_V1=0`` / ``=1`` decides; else a ``V0`` / ``V1`` word (not a
        release such as ``v0.7.3``); else the first release ``X.Y`` in the text: below
        :data:`VLLM_V1_DEFAULT_RELEASE` (v0.8.0) V0, at or above it V1; else a month and year
        (``Oct 2024``, ``October 12, 2024``, ``2024-10``) before :data:`VLLM_V1_DEFAULT_MONTH`
        (March 2025, when v0.8.0 made V1 the default: vllm-project/vllm pull request 13726) V0,
        from it on V1; else None (nothing to tell by: the run is taken as the V1 engine
        fastsim models, which ``fastsim validate`` runs).

    Raises
    ------
    FastsimInputError
        ``engine_version`` is not a string.
    """
    if not isinstance(engine_version, str):
        raise FastsimInputError("engine_version", engine_version, "a string (the vLLM version a run states)")
    for rx in (_USE_V1, _GENERATION):
        g = rx.search(engine_version)
        if g:
            return g.group(1) == "0"
    v = _VERSION.search(engine_version)
    if v:
        return (int(v.group(1)), int(v.group(2))) < VLLM_V1_DEFAULT_RELEASE
    d = _MONTH_YEAR.search(engine_version)
    if d:
        month = next(i for i, n in enumerate(_MONTHS, 1) if n.startswith(d.group(1).lower()))
        return (int(d.group(2)), month) < VLLM_V1_DEFAULT_MONTH
    d = _ISO_MONTH.search(engine_version)
    if d and 1 <= int(d.group(2)) <= 12:
        return (int(d.group(1)), int(d.group(2))) < VLLM_V1_DEFAULT_MONTH
    return None


def _whole(x) -> int:
    if isinstance(x, bool):
        raise FastsimInputError("kv_tokens", x, "a number of tokens")
    v = float(x)
    if not math.isfinite(v):
        raise FastsimInputError("kv_tokens", x, "a finite number of tokens")
    return int(math.floor(v))


def vllm_kv_blocks(kv_tokens: float, block_size: int = VLLM_BLOCK_SIZE) -> int:
    """KV blocks vLLM can hand to requests: whole blocks of the KV memory, less the null block.

    Parameters
    ----------
    kv_tokens : float
        Tokens of KV the instance (one data-parallel rank) holds, as
        :func:`fastsim.stepmodel.kv_budget_tokens` counts them; <= 0 when nothing is left.
    block_size : int
        Tokens per block (vLLM's 16 on CUDA).

    Returns
    -------
    int
        ``max(floor(kv_tokens / block_size) - 1, 0)``: ``get_num_blocks``
        (``vllm/v1/core/kv_cache_utils.py``, available memory // page size) less the null block
        ``BlockPool.__init__`` holds back (``vllm/v1/core/block_pool.py``).

    Raises
    ------
    FastsimInputError
        ``kv_tokens`` not a finite number.
    """
    return max(_whole(kv_tokens) // int(block_size) - 1, 0)


def vllm_max_model_len(kv_tokens: float, block_size: int = VLLM_BLOCK_SIZE) -> int:
    """The longest ``--max-model-len`` vLLM starts with on this KV capacity, a whole number of blocks.

    Parameters
    ----------
    kv_tokens : float
        KV tokens of one engine (a data-parallel rank), as in :func:`vllm_kv_blocks`.
    block_size : int
        Tokens per block.

    Returns
    -------
    int
        ``vllm_kv_blocks(kv_tokens) x block_size`` (0: none fits). One request of this length needs
        ``cdiv(L, block_size)`` blocks (``FullAttentionSpec.max_memory_usage_bytes``,
        ``vllm/v1/kv_cache_interface.py``), which ``check_enough_kv_cache_memory`` requires to fit.

    Raises
    ------
    FastsimInputError
        ``kv_tokens`` not a finite number.
    """
    return vllm_kv_blocks(kv_tokens, block_size) * int(block_size)


def sglang_context_length(kv_tokens: float, page_size: int = SGLANG_PAGE_SIZE) -> int:
    """The longest context SGLang serves on this KV capacity: its pool, whole pages.

    Parameters
    ----------
    kv_tokens : float
        KV tokens of the instance, as :func:`fastsim.stepmodel.kv_budget_tokens` counts them.
    page_size : int
        Tokens per page (SGLang's 1 by default).

    Returns
    -------
    int
        ``floor(kv_tokens) // page_size x page_size`` (``max_total_num_tokens`` of
        ``ModelRunner.init_memory_pool``, ``python/sglang/srt/model_executor/model_runner.py``),
        at least 0. SGLang refuses a request whose input reaches it (``max_req_input_len``,
        ``TpModelWorker.__init__``).

    Raises
    ------
    FastsimInputError
        ``kv_tokens`` not a finite number.
    """
    return max(_whole(kv_tokens) // int(page_size) * int(page_size), 0)


def vllm_refusal(*, max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None,
                 max_model_len: int | None = None, enable_chunked_prefill: bool = True,
                 kv_tokens: float | None = None, kv_cache_dtype: str | None = None,
                 block_size: int = VLLM_BLOCK_SIZE) -> str | None:
    """Why vLLM would refuse to start with these settings, or None.

    Parameters
    ----------
    max_num_seqs, max_num_batched_tokens : int, optional
        ``--max-num-seqs`` and ``--max-num-batched-tokens`` of one engine (a data-parallel rank);
        None: not set (the other rules still apply).
    max_model_len : int, optional
        ``--max-model-len``.
    enable_chunked_prefill : bool
        Chunked prefill on (vLLM V1's default and what fastsim writes).
    kv_tokens : float, optional
        KV tokens of the engine (:func:`fastsim.stepmodel.kv_budget_tokens` of the instance,
        divided over its data-parallel ranks); None: the KV rule is not checked.
    kv_cache_dtype : str, optional
        ``--kv-cache-dtype``.
    block_size : int
        Tokens per KV block (16).

    Returns
    -------
    str or None
        The first rule broken, worded as vLLM's error and naming its source (module docstring):
        a setting below 1 (``SchedulerConfig`` fields, ``ge=1``); the budget below
        ``max_num_seqs``, or below ``max_model_len`` without chunked prefill
        (``SchedulerConfig.verify_max_model_len``); no KV block left, or ``max_model_len`` past
        the blocks the engine can allocate (``check_enough_kv_cache_memory``); an unknown
        ``kv_cache_dtype`` (``CacheDType``).

    Raises
    ------
    FastsimInputError
        ``kv_tokens`` not a finite number.
    """
    for name, v in (("max_num_seqs", max_num_seqs), ("max_num_batched_tokens", max_num_batched_tokens),
                    ("max_model_len", max_model_len)):
        if v is not None and int(v) < 1:
            return f"{name} ({v}) must be >= 1 (vllm/config/scheduler.py SchedulerConfig, Field ge=1)"
    if kv_cache_dtype is not None and kv_cache_dtype not in VLLM_KV_CACHE_DTYPES:
        return (f"--kv-cache-dtype {kv_cache_dtype} is not one of {', '.join(VLLM_KV_CACHE_DTYPES)} "
                "(vllm/config/cache.py CacheDType)")
    if max_num_batched_tokens is not None:
        if max_model_len is not None and not enable_chunked_prefill and max_num_batched_tokens < max_model_len:
            return (f"max_num_batched_tokens ({max_num_batched_tokens}) is smaller than max_model_len "
                    f"({max_model_len}) without chunked prefill: increase max_num_batched_tokens or decrease "
                    f"max_model_len ({_SCHED})")
        if max_num_seqs is not None and max_num_batched_tokens < max_num_seqs:
            return (f"max_num_batched_tokens ({max_num_batched_tokens}) must be greater than or equal to "
                    f"max_num_seqs ({max_num_seqs}) ({_SCHED})")
    if kv_tokens is not None:
        blocks = vllm_kv_blocks(kv_tokens, block_size)
        if blocks < 1:
            return ("no available memory for the cache blocks: the weights leave no whole KV block of "
                    f"{block_size} tokens beside the null block; increase gpu_memory_utilization ({_KVCHK})")
        if max_model_len is not None:
            need = -(-int(max_model_len) // int(block_size))
            if need > blocks:
                return (f"to serve at least one request with the model's max seq len ({max_model_len}), "
                        f"{need:,} KV blocks of {block_size} tokens are needed, more than the {blocks:,} the "
                        f"engine can allocate; the estimated maximum model length is "
                        f"{blocks * int(block_size):,}: decrease max_model_len ({_KVCHK})")
    return None


def sglang_refusal(*, max_running_requests: int | None = None, chunked_prefill_size: int | None = None,
                   context_length: int | None = None, model_context_length: int | None = None,
                   kv_tokens: float | None = None, kv_cache_dtype: str | None = None,
                   page_size: int = SGLANG_PAGE_SIZE) -> str | None:
    """Why SGLang would refuse to start with these settings, or None.

    Parameters
    ----------
    max_running_requests, chunked_prefill_size : int, optional
        ``--max-running-requests`` and ``--chunked-prefill-size``.
    context_length : int, optional
        ``--context-length``.
    model_context_length : int, optional
        The context derived from the model's config (``max_position_embeddings`` and what
        extends it); None: that rule is not checked.
    kv_tokens : float, optional
        KV tokens of the instance; None: the KV rule is not checked.
    kv_cache_dtype : str, optional
        ``--kv-cache-dtype``.
    page_size : int
        Tokens per KV page (1).

    Returns
    -------
    str or None
        The first rule broken, worded as SGLang's error and naming its source (module docstring):
        a setting below 1; ``chunked_prefill_size`` not a multiple of ``page_size``
        (``ServerArgs.check_server_args``); ``context_length`` above the model's
        (``ModelConfig._derive_context_length``); an empty KV pool
        (``ModelRunner.init_memory_pool``); an unknown ``kv_cache_dtype``.

    Raises
    ------
    FastsimInputError
        ``kv_tokens`` not a finite number.
    """
    for name, v in (("max_running_requests", max_running_requests), ("context_length", context_length)):
        if v is not None and int(v) < 1:
            return f"{name} ({v}) must be >= 1 (python/sglang/srt/server_args.py ServerArgs)"
    if kv_cache_dtype is not None and kv_cache_dtype not in SGLANG_KV_CACHE_DTYPES:
        return (f"--kv-cache-dtype {kv_cache_dtype} is not one of {', '.join(SGLANG_KV_CACHE_DTYPES)} "
                "(python/sglang/srt/server_args.py ServerArgs.kv_cache_dtype)")
    if chunked_prefill_size is not None and chunked_prefill_size > 0 and chunked_prefill_size % int(page_size):
        return (f"chunked_prefill_size ({chunked_prefill_size}) must be divisible by page_size ({page_size}) "
                "(python/sglang/srt/server_args.py ServerArgs.check_server_args)")
    if context_length is not None and model_context_length is not None and context_length > model_context_length:
        return (f"user-specified context_length ({context_length}) is greater than the derived context_length "
                f"({model_context_length}); SGLang refuses it unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 "
                "(python/sglang/srt/configs/model_config.py ModelConfig._derive_context_length)")
    if kv_tokens is not None and sglang_context_length(kv_tokens, page_size) <= 0:
        return ("not enough memory: the KV pool is empty; increase --mem-fraction-static "
                "(python/sglang/srt/model_executor/model_runner.py ModelRunner.init_memory_pool)")
    return None


def check_engine_policy(policy, flags: dict, given: dict | None = None) -> None:
    """Refuse a simulated engine policy whose settings the engine would refuse to start with.

    Parameters
    ----------
    policy : fastsim.sim.policy.EnginePolicy
        The settings simulated (the engine's defaults with the flags' overrides): ``name``,
        ``max_num_batched_tokens``, ``max_num_seqs``.
    flags : dict
        ``{field: flag}``: the command-line flag of each setting, e.g.
        ``{"max_num_batched_tokens": "--max-num-batched-tokens"}``.
    given : dict, optional
        ``{field: value}`` of the parsed command line (``vars(args)``): a field whose value is
        None was not given, and the error names it as the engine's default. None: every field in
        ``flags`` counts as given.

    Returns
    -------
    None

    Raises
    ------
    FastsimInputError
        Field: the flags of the settings that break the rule (``--max-num-batched-tokens /
        --max-num-seqs``); value: their values; allowed: the engine's reason
        (:func:`vllm_refusal`). vLLM: ``max_num_batched_tokens < max_num_seqs``
        (``SchedulerConfig.verify_max_model_len``, ``vllm/config/scheduler.py``). SGLang's
        ``chunked_prefill_size`` and ``max_running_requests`` have no such rule, so an SGLang
        policy passes.
    """
    if policy.name != "vllm":
        return
    why = vllm_refusal(max_num_seqs=int(policy.max_num_seqs),
                       max_num_batched_tokens=int(policy.max_num_batched_tokens))
    if why is None:
        return
    names = []
    for field in ("max_num_batched_tokens", "max_num_seqs"):
        flag = flags.get(field, field)
        names.append(flag if given is None or given.get(field) is not None else f"{flag} (vLLM's default)")
    raise FastsimInputError(" / ".join(names), f"{policy.max_num_batched_tokens} / {policy.max_num_seqs}",
                            f"settings vLLM starts with: {why}")
