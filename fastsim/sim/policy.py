"""Engine policies of the serving simulator: how vLLM, SGLang and TensorRT-LLM schedule a colocated instance.

The lecture's policy (:mod:`fastsim.sim.engine`) reserves a request's whole ``P + O`` of KV at
admission, puts a prefill chunk on top of the running decodes and never preempts. The engines
people deploy do otherwise (SPEC §10). This module simulates three of them on colocated plans, with
optional prefix caching and speculative decoding. The kernel (``_policy_nb.py``) and the
reference (``reference_policy.py``) implement exactly the rules below, bit for bit.

Semantics
---------
Requests, arrivals and routing are as in :mod:`fastsim.sim.engine` unless said here. A request
knows ``ntok`` tokens (``P`` plus the tokens generated so far) of which ``computed`` have their KV
in the cache; it is a *decode* when it has generated at least one token and only its last token
lacks KV (``computed = ntok - 1``), else it is in *prefill* (a new prompt, or a preempted request
recomputing its prompt and the tokens it had generated). Running a prefill piece of ``x`` tokens
adds ``x`` to ``computed``; when ``computed`` reaches ``ntok`` the step samples a token (the first
one gives the TTFT). KV lives in blocks of ``block_tokens`` tokens (vLLM 16, SGLang 1, TensorRT-LLM
32); a request holds ``ceil(hold(computed + x) / block_tokens)`` blocks for a step of ``x`` tokens
(``hold``: the sliding-window rule of ``window.py``), allocated as its tokens arrive (under
``trtllm`` the blocks of its whole ``P + O`` are also reserved at admission, see below).
An instance has ``floor(P_KV_BUDGET_TOKENS) // block_tokens`` blocks.

Rejection at arrival: ``P + O > max_context_tokens``, or the blocks of ``P + O + gamma`` tokens
exceed the instance's (so every accepted request can run alone); under ``trtllm`` without chunked
context also ``P > max_num_tokens`` (its prompt never fits in one iteration).

``vllm`` (vLLM V1 ``Scheduler.schedule``, ``vllm/v1/core/sched/scheduler.py``). One token budget
``max_num_batched_tokens`` per step shared by decodes and prefill chunks. First the running
requests, in admission order, while the budget lasts: a decode takes 1 token (``gamma + 1`` with
speculative decoding; if the budget is smaller the pass stops), a prefill ``min(remaining, budget)``
tokens. When its blocks cannot be had, the newest running request (the last admitted) is
preempted: its blocks are freed, ``computed`` drops to 0 and it goes to the FRONT of the waiting
queue (recompute); if it was the request being scheduled, the pass stops. Then, only if nobody was
preempted in this step, waiting requests are admitted FCFS while the budget lasts and fewer than
``max_num_seqs`` run: the head takes its prefix-cache hits and ``min(ntok - hit, budget)`` tokens
if its new blocks (plus the cached blocks it revives) are free, else admission stops (the head
blocks the queue). A step that would run nothing after a preemption is scheduled again at once.

``sglang`` (SGLang ``Scheduler.get_next_batch_to_run``, ``PrefillAdder``, ``retract_decode``,
``python/sglang/srt/managers/``). Prefill steps take priority (SGLang's default, without
``--enable-mixed-chunk``): a decode step runs only when no prefill step can be formed. A prefill step continues the prompt being chunked and
admits waiting requests FCFS within ``chunked_prefill_size`` tokens (the last one chunked, then
stop), fewer than ``max_running_requests`` running, and an admission budget: the free KV in tokens
(free pages x ``page_size``, as ``PrefillAdder.rem_total_tokens`` counts it) minus,
for each running request, ``min(O - generated, 4096) x new_token_ratio``; a new request needs its
uncached prompt plus ``min(O - generated, 4096)`` (the client's ``max_tokens`` is taken to be the
request's real output length, the most optimistic reading). Without a prefill step, every decode
runs one token (``gamma + 1`` with speculation); when their KV does not fit, requests are
retracted, fewest generated tokens first (ties: the longest prompt, then the latest admitted),
until the rest have room for 20 more steps (free tokens >= 20 x decodes; at least one, never the
last), to the BACK of the queue, and ``new_token_ratio = min(1, (generated + 20 x running) / sum of O)`` over the rest;
else the ratio decays by ``(0.7 - 0.098) / 600`` per decode step down to 0.098 (SGLang's
``init_new_token_ratio = 0.7``, ``min_new_token_ratio_factor = 0.14``, 600 decay steps).

``trtllm`` (TensorRT-LLM's PyTorch backend: the ``GUARANTEED_NO_EVICT`` capacity scheduler,
``GuaranteedNoEvictScheduler::impl`` in ``cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp``,
then the inflight-batching ``MicroBatchScheduler::operator()`` in ``microBatchScheduler.cpp``;
``BindCapacityScheduler`` and ``BindMicroBatchScheduler`` in
``tensorrt_llm/_torch/pyexecutor/scheduler/scheduler.py`` bind them for the PyTorch executor).
Capacity: the running requests stay (a request once admitted had room to run to completion, and is
never evicted or preempted); waiting requests are admitted FCFS while fewer than
``max_batch_size`` run and the blocks of their whole ``P + O + gamma`` fit in the instance's blocks
less those reserved by the running requests (the head blocks the queue). Admission does not wait
for a token budget: a request may be admitted and get no tokens in that iteration. Micro-batch,
one ``max_num_tokens`` budget per iteration: first the decodes (generation requests) in admission
order, ``gamma + 1`` tokens each, and the pass stops at the first that does not fit; then the
contexts (running ones in admission order, then the ones admitted now), first come first served:
with chunked context a context takes ``min(remaining, budget)`` tokens, a chunk cut short rounded
down to a multiple of ``block_tokens`` (``FIRST_COME_FIRST_SERVED`` in ``setCtxRequestsChunkSize``;
``create_py_executor`` in ``tensorrt_llm/_torch/pyexecutor/py_executor_creator.py`` makes
``tokens_per_block`` the chunk unit and FCFS the default) and a chunk of 0 skipped; without it a context runs whole or,
when it does not fit, ends the pass. New requests join the running batch at any iteration
(inflight batching). Not modelled: the reservation does not deduct reused prefix blocks, and the
KV pool is the plan's (``KvCacheConfig.free_gpu_memory_fraction = 0.9`` takes 90% of the memory
left after the weights, fastsim's budget is ``StepConstants.memory_utilization`` = 0.9 of HBM less
the weights: about 0.1 x the weights smaller).

Prefix caching (vLLM automatic prefix caching; SGLang RadixAttention; TensorRT-LLM block reuse). Requests carry prefix block
ids (:class:`fastsim.workload.PrefixBlocks`: Mooncake's ``hash_ids``, one per 512 tokens of the prompt, or a
synthetic system prompt and multi-turn sessions, whose rows span the output). A full prompt block
computed by a request becomes a cache entry of its instance (unless one with that id exists),
referenced by it; with rows that span the output, so do its full blocks of generated tokens, at
its finish and, under ``vllm``, at its preemption (vLLM caches every full block it computes, the
generated ones included: ``KVCacheManager.allocate_slots`` caches ``min(num_computed_tokens +
num_new_tokens, request.num_tokens)`` tokens' full blocks, ``vllm/v1/core/kv_cache_manager.py``,
whose hashes ``get_request_block_hasher`` chains over all the request's tokens,
``vllm/v1/core/kv_cache_utils.py``; SGLang inserts ``(origin_input_ids + output_ids)[:-1]``, page
aligned, at the finish, ``RadixCache.cache_finished_req`` in
``python/sglang/srt/mem_cache/radix_cache.py``, and a retracted request keeps only its cached
prompt, ``ScheduleBatch.retract_decode``). At admission a request hits the longest run of its
leading full blocks found in the cache (at most ``ntok - 1`` tokens: one token is always computed;
a preempted request's generated blocks count), references them and skips their prefill (the
chunk's attention over them is still computed and their KV still read). Hits match at the ids'
block size, which must be a multiple of the engine's KV block; the command line draws synthetic
ids at the engine's own block (vLLM 16 tokens, SGLang's page of 1 token, TensorRT-LLM 32), so hits
count in its units. Entries nobody references stay cached in the free KV, in an LRU list; an
allocation that needs their blocks evicts the least recently released first. A request that
finishes or is preempted drops its references last block first, so its tail is evicted before its
head and a later request keeps the longest prefix (vLLM's ``KVCacheManager.free`` frees "in
reverse order so that the tail blocks are evicted first"; SGLang's ``RadixCache.evict`` evicts
leaves first). Counted: the prompt tokens each request took from
the cache at its first admission. Block ids must identify the whole prefix up to the block (as
Mooncake's do). A workload without block ids gets private ones (256-token blocks, no two requests
sharing one), which become cache entries when their request is preempted: it then takes its own
prompt back from the cache if the blocks were not evicted meanwhile, as in the engines (not counted
as hits; blocks of finished requests, which nobody could hit, are not kept). Not modelled: a
request's generated blocks are not hit by another request while it still runs under ``vllm``
(which caches them as they are computed): only a later request that holds the answer in its
prompt could, and a chat sends its next turn after the answer; prefixes within a block; a trace's
outputs (its ids cover the prompts). Prefix caching with a sliding-window model is refused.

Routing ``prefix-aware`` (SGLang router ``cache_aware``, its defaults ``balance_abs_threshold = 64``,
``balance_rel_threshold = 1.5``, ``cache_threshold = 0.3``): with ``u_i`` the unfinished requests
routed to instance i, if ``max u - min u > 64`` and ``max u > 1.5 x min u`` the request goes to the
least-loaded instance (fewest outstanding tokens); otherwise to the instance with the most leading
blocks cached (ties: fewest outstanding tokens, then the lowest index) when those blocks cover more
than 30% of the prompt, else to the least-loaded one. Outstanding tokens of a request:
``(ntok - computed) + (O - generated)``.

Speculative decoding (draft model or MTP head, :mod:`fastsim.specdec`). Each decode step verifies
``gamma + 1`` tokens per decode (its last token and ``gamma`` drafts) and yields ``1 + k`` tokens,
``k`` the drafts accepted, capped by the tokens left: ``k`` is the largest ``j <= gamma`` with
``u < alpha^j``, ``u`` a uniform of request ``r``'s ``m``-th round from a counter-based generator
(splitmix64 of ``seed``, ``r`` and ``m``), so runs at different rates share the draws (common
random numbers). The step time adds ``gamma`` draft steps of the decodes:
``step_time(p_draft, decodes, C, 4 L_d H_d C, decodes)`` (C the decodes' context; the draft's own window is
ignored); the verify step counts ``gamma + 1`` tokens and ``(gamma + 1) x`` the attention of each
decode. Each decode needs KV for ``gamma + 1`` more tokens.

Step time: :func:`fastsim.stepmodel.step_time_nb` with the lecture's composition (see
:mod:`fastsim.sim.engine`), plus the speculative terms above.

Samples and outputs: ``queue_len`` counts waiting requests (preempted ones included),
``kv_tokens`` the KV in use (blocks of running requests and of referenced entries, times
``block_tokens``; cached entries nobody references are free memory). Metrics as the engine's, plus
preemptions, cache hits and speculative tokens per round (:class:`fastsim.sim.SimMetrics`).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .._threads import num_threads, run_jobs
from ..errors import FastsimInputError
from ..stepmodel import N_PARAMS, P_KV_BUDGET_TOKENS
from . import _kernels as K
from . import _policy_nb as PK
from .inputs import ColocatedPlan, _option_row, _readonly
from .records import SimMetrics
from .window import NO_WINDOW, kv_window

__all__ = ["POLICIES", "ROUTINGS", "EnginePolicy", "engine_policy", "policy_defaults"]

#: Policy names: the lecture's (:mod:`fastsim.sim.engine`) and the engines'.
POLICIES = ("lecture", "vllm", "sglang", "trtllm")
#: The engine policies (every name of :data:`POLICIES` but the lecture's).
ENGINES = ("vllm", "sglang", "trtllm")
#: Tokens per KV block (page) of each engine by default, the granularity of its prefix-cache hits:
#: vLLM ``CacheConfig.block_size`` 16 (``vllm/config/cache.py``); SGLang ``ServerArgs.page_size``
#: 1 (``python/sglang/srt/server_args.py``; its radix cache matches page-aligned keys,
#: ``RadixCache.match_prefix`` in ``python/sglang/srt/mem_cache/radix_cache.py``); TensorRT-LLM
#: ``KvCacheConfig.tokens_per_block`` 32 (``tensorrt_llm/llmapi/llm_args.py``).
ENGINE_BLOCK_TOKENS = {"vllm": 16, "sglang": 1, "trtllm": 32}
#: Routing rules of the engine-policy simulator.
ROUTINGS = {"least-loaded": PK.ROUTE_LEAST_LOADED, "round-robin": PK.ROUTE_ROUND_ROBIN,
            "prefix-aware": PK.ROUTE_PREFIX_AWARE}

_GIB = 1024 ** 3


class EnginePolicy(NamedTuple):
    """An engine's scheduler settings (module docstring for the rules).

    Attributes
    ----------
    name : {"vllm", "sglang", "trtllm"}
    max_num_batched_tokens : int
        Tokens per step: vLLM's shared budget ``max_num_batched_tokens``; SGLang's
        ``chunked_prefill_size`` (prefill steps only); TensorRT-LLM's ``max_num_tokens``.
    max_num_seqs : int
        Most running requests, the batch cap (vLLM ``max_num_seqs``; SGLang
        ``max_running_requests``; TensorRT-LLM ``max_batch_size``).
    block_tokens : int
        Tokens per KV block (vLLM ``block_size`` 16; SGLang ``page_size`` 1; TensorRT-LLM
        ``KvCacheConfig.tokens_per_block`` 32).
    prefix_caching : bool
        Automatic prefix caching (on by default in vLLM V1 and SGLang; TensorRT-LLM's block reuse,
        off under trtllm-bench).
    source : str
        Where the defaults come from.
    chunked_context : bool
        TensorRT-LLM only: chunked context (``enable_chunked_prefill``; off by default, as in
        trtllm-bench). vLLM and SGLang always chunk (True).
    """

    name: str
    max_num_batched_tokens: int
    max_num_seqs: int
    block_tokens: int
    prefix_caching: bool = True
    source: str = ""
    chunked_context: bool = True


def policy_defaults(name: str, gpu_memory_bytes: float, *, kv_budget_tokens: float = 0.0,
                    context_tokens: int = 131072) -> EnginePolicy:
    """The engine's default scheduler settings on a GPU of this memory (as the engines pick them).

    Parameters
    ----------
    name : {"vllm", "sglang", "trtllm"}
    gpu_memory_bytes : float
        HBM of one GPU (bytes; TensorRT-LLM's defaults do not depend on it).
    kv_budget_tokens : float
        KV tokens of one instance (SGLang sizes ``max_running_requests`` from it).
    context_tokens : int
        The model's context length (SGLang's ``context_len``).

    Returns
    -------
    EnginePolicy

    Raises
    ------
    FastsimInputError
        An unknown name.

    Notes
    -----
    vLLM (``EngineArgs.get_batch_defaults``, ``vllm/engine/arg_utils.py``, OpenAI-compatible
    server): on a GPU of at least 70 GiB, ``max_num_batched_tokens = 8192`` and
    ``max_num_seqs = 1024``; below, 2048 and 256 (vLLM also puts the A100 in the smaller class);
    ``block_size = 16``. SGLang (``ServerArgs``, ``python/sglang/srt/server_args.py``):
    ``chunked_prefill_size`` 2048 below 35 GiB, 8192 below 160 GiB, else 16384; ``page_size = 1``;
    ``max_running_requests = min(max(int(kv_tokens / context_len x 512), 2048), 4096)``
    (``ModelRunner.init_memory_pool``). TensorRT-LLM, PyTorch backend (the one the published
    perf-overview tables use; ``BaseLlmArgs`` and ``KvCacheConfig`` in
    ``tensorrt_llm/llmapi/llm_args.py``): ``max_batch_size = 2048``, ``max_num_tokens = 8192``,
    ``tokens_per_block = 32``, capacity policy ``GUARANTEED_NO_EVICT``; chunked context and KV
    block reuse off, as trtllm-bench runs it (``throughput_command`` in
    ``tensorrt_llm/bench/benchmark/throughput.py``: ``--enable_chunked_context`` defaults to off,
    ``--scheduler_policy guaranteed_no_evict``; ``ExecutorSettingsConfig.get_kvcache_config`` in
    ``tensorrt_llm/bench/dataclasses/configuration.py`` sets ``enable_block_reuse=False``).
    trtllm-bench tunes ``max_batch_size`` and ``max_num_tokens`` to the dataset unless they are
    given; these are the LLM API's defaults. The TensorRT backend reads the two from the built
    engine instead.
    """
    gib = float(gpu_memory_bytes) / _GIB
    if name == "vllm":
        big = gib >= 70.0
        return EnginePolicy("vllm", 8192 if big else 2048, 1024 if big else 256, ENGINE_BLOCK_TOKENS["vllm"], True,
                            "vLLM V1 defaults (EngineArgs.get_batch_defaults, OpenAI server; block_size 16)")
    if name == "sglang":
        chunk = 2048 if gib < 35.0 else (8192 if gib < 160.0 else 16384)
        kv = max(float(kv_budget_tokens), 0.0)
        seqs = min(max(int(kv / max(int(context_tokens), 1) * 512), 2048), 4096)
        return EnginePolicy("sglang", chunk, seqs, ENGINE_BLOCK_TOKENS["sglang"], True,
                            "SGLang defaults (ServerArgs chunked_prefill_size by GPU memory; page_size 1; "
                            "max_running_requests from the KV pool)")
    if name == "trtllm":
        return EnginePolicy("trtllm", 8192, 2048, ENGINE_BLOCK_TOKENS["trtllm"], False,
                            "TensorRT-LLM PyTorch-backend defaults (BaseLlmArgs max_num_tokens 8192, max_batch_size "
                            "2048; KvCacheConfig tokens_per_block 32; GUARANTEED_NO_EVICT; chunked context and "
                            "block reuse off as in trtllm-bench)", False)
    raise FastsimInputError("policy", name, "vllm, sglang or trtllm (lecture has no engine settings)")


def engine_policy(name: str, gpu_memory_bytes: float = 80e9, *, max_num_batched_tokens: int | None = None,
                  max_num_seqs: int | None = None, block_tokens: int | None = None,
                  prefix_caching: bool | None = None, kv_budget_tokens: float = 0.0,
                  context_tokens: int = 131072, chunked_context: bool | None = None) -> EnginePolicy:
    """An engine policy: the engine's defaults (:func:`policy_defaults`) with the user's overrides.

    Parameters
    ----------
    name : {"vllm", "sglang", "trtllm"}
    gpu_memory_bytes : float
        HBM of one GPU (bytes), which picks the defaults.
    max_num_batched_tokens, max_num_seqs, block_tokens : int, optional
        Overrides, each >= 1 (TensorRT-LLM: ``max_num_tokens``, ``max_batch_size``,
        ``tokens_per_block``).
    prefix_caching : bool, optional
        Override (vLLM and SGLang default to on, TensorRT-LLM to off).
    kv_budget_tokens, context_tokens
        As in :func:`policy_defaults`.
    chunked_context : bool, optional
        TensorRT-LLM's ``enable_chunked_prefill`` (default off); refused for the other engines,
        which always chunk.

    Returns
    -------
    EnginePolicy

    Raises
    ------
    FastsimInputError
        An unknown name, an override that is not an integer >= 1, or ``chunked_context`` for
        vLLM or SGLang.
    """
    g = float(gpu_memory_bytes) if isinstance(gpu_memory_bytes, (int, float, np.integer, np.floating)) else math.nan
    if isinstance(gpu_memory_bytes, bool) or not (math.isfinite(g) and g > 0):
        raise FastsimInputError("gpu_memory_bytes", gpu_memory_bytes, "a finite number of bytes > 0")
    if prefix_caching is not None and not isinstance(prefix_caching, (bool, np.bool_)):
        raise FastsimInputError("prefix_caching", prefix_caching, "True, False or None (the engine's default)")
    pol = policy_defaults(name, gpu_memory_bytes, kv_budget_tokens=kv_budget_tokens, context_tokens=context_tokens)
    rep = {}
    for field, v in (("max_num_batched_tokens", max_num_batched_tokens), ("max_num_seqs", max_num_seqs),
                     ("block_tokens", block_tokens)):
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise FastsimInputError(field, v, "an integer >= 1")
            rep[field] = int(v)
    if prefix_caching is not None:
        rep["prefix_caching"] = bool(prefix_caching)
    if chunked_context is not None:
        if not isinstance(chunked_context, (bool, np.bool_)):
            raise FastsimInputError("chunked_context", chunked_context, "True, False or None (the engine's default)")
        if pol.name != "trtllm":
            raise FastsimInputError("chunked_context", chunked_context, f"None for {pol.name} (it always chunks; "
                                    "chunked context is a TensorRT-LLM setting)")
        rep["chunked_context"] = bool(chunked_context)
    if rep:
        pol = pol._replace(**rep, source=pol.source + "; overridden: " + ", ".join(f"{k}={v}" for k, v in rep.items()))
    return pol


def _check_policy(policy) -> EnginePolicy:
    if isinstance(policy, str):
        return engine_policy(policy)
    if not isinstance(policy, EnginePolicy):
        raise FastsimInputError("policy", policy, "lecture, vllm, sglang, trtllm or an EnginePolicy")
    if policy.name not in ENGINES:
        raise FastsimInputError("policy.name", policy.name, "vllm, sglang or trtllm")
    if policy.name != "trtllm" and not policy.chunked_context:
        raise FastsimInputError("policy.chunked_context", False, f"True for {policy.name} (it always chunks)")
    if policy.name == "trtllm" and policy.chunked_context and policy.max_num_batched_tokens < policy.block_tokens:
        raise FastsimInputError("policy.max_num_batched_tokens", policy.max_num_batched_tokens,
                                f">= block_tokens = {policy.block_tokens} with chunked context (a chunk cut short is "
                                "a whole number of blocks)")
    for field in ("max_num_batched_tokens", "max_num_seqs", "block_tokens"):
        v = getattr(policy, field)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise FastsimInputError(f"policy.{field}", v, "an integer >= 1")
    return policy


#: Block size of the private prefix ids given to a workload without prefix blocks (tokens): a
#: preempted request can then take its own prompt back from the cache, in whole blocks of this size.
PRIVATE_BLOCK_TOKENS = 256


def _prefix_arrays(prefix, prompt: np.ndarray, field: str = "prefix", output: np.ndarray | None = None):
    """``(offsets, dense ids, block_tokens, distinct ids, spans output)`` of a workload's prefix blocks (or none).

    A row that spans the output (``prefix.spans_output``) may list the blocks of the request's first
    ``P + O - 1`` tokens (``output`` is then needed), else those of its prompt.
    """
    n = prompt.shape[0]
    if prefix is None:
        return np.zeros(n + 1, np.int64), np.zeros(0, np.int64), 0, 0, False
    try:
        off = np.ascontiguousarray(prefix.offsets, dtype=np.int64)
        ids = np.asarray(prefix.ids, dtype=np.int64)
        bt = prefix.block_tokens
        spans = getattr(prefix, "spans_output", False)
    except (AttributeError, TypeError, ValueError):
        raise FastsimInputError(field, type(prefix).__name__, "a fastsim.workload.PrefixBlocks (block_tokens, "
                                "offsets, ids) or None") from None
    if not isinstance(spans, (bool, np.bool_)):
        raise FastsimInputError(f"{field}.spans_output", spans, "True or False")
    spans = bool(spans)
    if spans and output is None:
        raise FastsimInputError(f"{field}.spans_output", True, "False here (no output lengths to bound the rows)")
    if isinstance(bt, bool) or not isinstance(bt, (int, np.integer)) or bt < 1:
        raise FastsimInputError(f"{field}.block_tokens", bt, "an integer >= 1")
    if off.shape != (n + 1,):
        raise FastsimInputError(f"{field}.offsets", f"shape {off.shape}", f"shape ({n + 1},) (one more than requests)")
    if n and (off[0] != 0 or np.any(np.diff(off) < 0) or off[-1] != ids.shape[0]):
        raise FastsimInputError(f"{field}.offsets", "not a CSR of the ids", "0, non-decreasing, ending at len(ids)")
    if ids.size and ids.min() < 0:
        raise FastsimInputError(f"{field}.ids", int(ids.min()), "ids >= 0")
    if spans:
        most = -(-(prompt + np.asarray(output, dtype=np.int64) - 1) // int(bt))
        what = "ceil((P + O - 1) / {bt}) = {m} blocks for its {p}-token prompt and {o}-token output"
    else:
        most = -(-prompt // int(bt))
        what = "ceil(P / {bt}) = {m} blocks for its {p}-token prompt"
    over = np.flatnonzero(np.diff(off) > most)
    if over.size:
        i = int(over[0])
        o_i = int(output[i]) if output is not None else 0
        raise FastsimInputError(f"{field} (request {i})", f"{int(off[i + 1] - off[i])} blocks",
                                "at most " + what.format(bt=int(bt), m=int(most[i]), p=int(prompt[i]), o=o_i)
                                + " (are these the blocks of another workload?)")
    top = int(ids.max()) + 1 if ids.size else 0
    if top <= 2 * ids.size + 1024:
        # ids already nearly dense (Mooncake's count up from 0): used as they are, no sort
        return off, np.ascontiguousarray(ids), int(bt), top, spans
    uniq, dense = np.unique(ids, return_inverse=True)
    return off, np.ascontiguousarray(dense.astype(np.int64)), int(bt), int(uniq.shape[0]), spans


def _private_prefix(prompt: np.ndarray):
    """Prefix blocks that no two requests share (``PRIVATE_BLOCK_TOKENS`` each, full blocks only).

    Without prefix ids a request can still take its OWN prompt back from the cache after a
    preemption, as vLLM and SGLang do (the blocks stay cached until evicted); these ids model that.
    """
    nb = prompt // PRIVATE_BLOCK_TOKENS
    off = np.zeros(prompt.shape[0] + 1, np.int64)
    np.cumsum(nb, out=off[1:])
    return off, np.arange(int(off[-1]), dtype=np.int64), PRIVATE_BLOCK_TOKENS, int(off[-1]), True, False


def prefix_for_run(prefix, prompt: np.ndarray, pol: EnginePolicy, p: np.ndarray, output: np.ndarray | None = None):
    """The prefix arrays a run uses: the workload's blocks, or private ones (:func:`_private_prefix`).

    Private blocks only with prefix caching on, no sliding window (whose cached blocks are not
    modelled: there a preempted request recomputes its whole prompt) and a policy that preempts
    (not ``trtllm``). ``output`` (the requests' output tokens) bounds rows that span the output.

    Returns
    -------
    tuple
        ``(offsets, dense ids, block tokens, distinct ids, private, spans output)``.
    """
    if prefix is None and pol.prefix_caching and pol.name != "trtllm" and kv_window(p)[0] == NO_WINDOW:
        return _private_prefix(prompt)
    off, ids, bt, nid, spans = _prefix_arrays(prefix, prompt, output=output)
    return off, ids, bt, nid, False, spans


def _config_rows(pol: EnginePolicy, p: np.ndarray, n_instances: int, max_context: int, routing: int,
                 prefix_block_tokens: int, n_ids: int, spec, seed: int, private: bool = False,
                 spans_output: bool = False):
    """The kernel's int64 and float64 configuration rows of one run."""
    w, s, lay, f = kv_window(p)
    bt = int(pol.block_tokens)
    caching = bool(pol.prefix_caching) and prefix_block_tokens > 0 and n_ids > 0
    if caching and w != NO_WINDOW:
        raise FastsimInputError("prefix_caching", True, "False for a sliding-window model (its cached blocks "
                                "are not modelled): --no-prefix-caching")
    if caching and prefix_block_tokens % bt != 0:
        raise FastsimInputError("policy.block_tokens", bt,
                                f"a divisor of the prefix block size ({prefix_block_tokens} tokens)")
    kvb = float(p[P_KV_BUDGET_TOKENS])
    nb_total = (int(math.floor(kvb)) if kvb > 0 else 0) // bt
    gamma = int(spec.gamma) if spec is not None else 0
    alpha = float(spec.alpha) if spec is not None else 0.0
    c = np.zeros(PK.N_CCOLS, np.int64)
    c[PK.C_KIND] = {"vllm": PK.VLLM, "sglang": PK.SGLANG, "trtllm": PK.TRTLLM}[pol.name]
    c[PK.C_BUDGET] = pol.max_num_batched_tokens
    c[PK.C_MAX_SEQS] = pol.max_num_seqs
    c[PK.C_BT] = bt
    c[PK.C_CACHING] = 1 if caching else 0
    c[PK.C_BTH] = prefix_block_tokens if caching else 0
    c[PK.C_GAMMA] = gamma
    c[PK.C_CLIP] = 4096
    c[PK.C_RETRACT] = 20
    c[PK.C_ROUTING] = routing
    c[PK.C_N_INST] = n_instances
    c[PK.C_MAX_CONTEXT] = max_context
    c[PK.C_NB_TOTAL] = nb_total
    c[PK.C_SEED] = np.int64(np.uint64(seed & 0xFFFFFFFFFFFFFFFF).view(np.int64))
    c[PK.C_ROUTE_ABS] = 64
    c[PK.C_WINDOW] = w
    c[PK.C_SLIDE_L] = s
    c[PK.C_N_LAYERS] = lay
    c[PK.C_N_BLOCK_IDS] = n_ids
    c[PK.C_PRIVATE] = 1 if private else 0
    trt = pol.name == "trtllm"
    c[PK.C_CHUNK_UNIT] = bt if trt and pol.chunked_context else 0
    c[PK.C_WHOLE_CONTEXT] = 1 if trt and not pol.chunked_context else 0
    c[PK.C_SPANS] = 1 if caching and spans_output else 0
    cf = np.zeros(PK.N_CFCOLS, np.float64)
    cf[PK.CF_ALPHA] = alpha
    cf[PK.CF_RATIO_INIT] = 0.7
    cf[PK.CF_RATIO_MIN] = 0.7 * 0.14
    cf[PK.CF_RATIO_DECAY] = (0.7 - 0.7 * 0.14) / 600.0
    cf[PK.CF_ROUTE_REL] = 1.5
    cf[PK.CF_ROUTE_THR] = 0.3
    cf[PK.CF_SLIDE] = f
    return c, cf


def cfg_dict(c: np.ndarray, cf: np.ndarray) -> dict:
    """The configuration rows as the reference simulator's dict (tests)."""
    return dict(kind=int(c[PK.C_KIND]), budget=int(c[PK.C_BUDGET]), max_seqs=int(c[PK.C_MAX_SEQS]),
                block_tokens=int(c[PK.C_BT]), caching=bool(c[PK.C_CACHING]),
                prefix_block_tokens=int(c[PK.C_BTH]), gamma=int(c[PK.C_GAMMA]), alpha=float(cf[PK.CF_ALPHA]),
                seed=int(np.int64(c[PK.C_SEED]).view(np.uint64)), clip=int(c[PK.C_CLIP]),
                retract_steps=int(c[PK.C_RETRACT]), ratio_init=float(cf[PK.CF_RATIO_INIT]),
                ratio_min=float(cf[PK.CF_RATIO_MIN]), ratio_decay=float(cf[PK.CF_RATIO_DECAY]),
                route_abs=int(c[PK.C_ROUTE_ABS]), route_rel=float(cf[PK.CF_ROUTE_REL]),
                route_cache_thr=float(cf[PK.CF_ROUTE_THR]), nb_total=int(c[PK.C_NB_TOTAL]),
                private=bool(c[PK.C_PRIVATE]), chunk_unit=int(c[PK.C_CHUNK_UNIT]),
                whole_context=bool(c[PK.C_WHOLE_CONTEXT]), spans_output=bool(c[PK.C_SPANS]))


def _spec_check(spec, p_draft):
    if spec is None:
        if p_draft is not None:
            raise FastsimInputError("p_draft", "given", "None without spec (a draft needs spec=SpecDecoding)")
        return None, np.zeros(N_PARAMS)
    g = getattr(spec, "gamma", None)
    a = getattr(spec, "alpha", None)
    if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or g < 1:
        raise FastsimInputError("spec.gamma", g, "an integer >= 1 (draft tokens per round)")
    if a is None or not (0.0 <= float(a) < 1.0):
        raise FastsimInputError("spec.alpha", a, "a per-token acceptance probability in [0, 1)")
    if p_draft is None:
        raise FastsimInputError("p_draft", None, "the draft model's step parameters (fastsim.specdec.spec_step_params)")
    pd = np.ascontiguousarray(np.asarray(p_draft, dtype=np.float64))
    if pd.shape != (N_PARAMS,) or not np.all(np.isfinite(pd[:P_KV_BUDGET_TOKENS])):
        raise FastsimInputError("p_draft", f"shape {pd.shape}", f"a finite float array of shape ({N_PARAMS},)")
    return spec, pd


def run_policy(plans, works, prefixes, opts, *, policy, routing: str, spec=None, p_draft=None, spec_seed: int = 0,
               full: bool):
    """Run colocated plans under an engine policy (called by :func:`fastsim.sim.simulate` and ``simulate_batch``).

    ``plans`` and ``works`` are aligned lists (one run each; ``works`` are checked array triples),
    ``prefixes`` the matching :class:`fastsim.workload.PrefixBlocks` or None, ``opts`` the options
    normalised by :func:`fastsim.sim.inputs._options`. Returns a list of ``(metrics, per-request
    dict, per-instance dict, samples)``.
    """
    horizon_s, _, _, max_context, _, _, dt = opts
    if routing not in ROUTINGS:
        raise FastsimInputError("routing", routing, " or ".join(ROUTINGS))
    pol = _check_policy(policy)
    spec, pd = _spec_check(spec, p_draft)
    if spec is not None and pol.max_num_batched_tokens < spec.gamma + 1:
        raise FastsimInputError("max_num_batched_tokens", pol.max_num_batched_tokens,
                                f">= gamma + 1 = {spec.gamma + 1} (a decode verifies gamma + 1 tokens per step)")
    R = len(plans)
    n_samp = max(1, int(math.ceil(horizon_s / dt)))
    rf = _option_row(opts)
    rows = []
    for pl, w, pre in zip(plans, works, prefixes):
        if not isinstance(pl, ColocatedPlan):
            raise FastsimInputError("policy", pol.name, "lecture for a disaggregated plan (the vllm, sglang and "
                                    "trtllm policies model colocated instances)")
        if pl.max_batch:
            # the plan's cap is the lecture scheduler's; an engine's is its own setting, which applies
            raise FastsimInputError("plan.max_batch", pl.max_batch, f"0 under the {pol.name} policy (its batch cap "
                                    f"is max_num_seqs, now {pol.max_num_seqs}: engine_policy(..., max_num_seqs=N), "
                                    "--max-num-seqs on the command line)")
        off, ids, bth, nid, private, spans = prefix_for_run(pre, w[1], pol, pl.p, w[2])
        c, cf = _config_rows(pol, pl.p, pl.n_instances, max_context, ROUTINGS[routing], bth, nid, spec, spec_seed,
                             private, spans)
        rows.append((pl, w, off, ids, c, cf))
    if R == 1 or full:
        return pol, spec, [_policy_run(*r[:6], pd, rf, n_samp, full) for r in rows], n_samp
    # many runs, metrics only: one kernel call per run from worker threads (the kernel releases the
    # GIL), the longest runs first; the same kernel and types as a single run, so nothing else compiles
    results = [None] * R

    def job(k):
        results[k] = _policy_run(*rows[k][:6], pd, rf, n_samp, False)

    run_jobs(job, sorted(range(R), key=lambda k: -rows[k][1][0].shape[0]), min(num_threads(), R))
    return pol, spec, results, n_samp


def _policy_run(pl, w, off, ids, c, cf, pd, rf, n_samp: int, full: bool):
    """One engine-policy run (:func:`PK.policy_one_nb`): the result tuple of :func:`run_policy`.

    The inputs go to the kernel as read-only views and the outputs are new arrays, so every run,
    single or one of many, calls it with the same types: it compiles once.
    """
    ro = _readonly      # the kernel's inputs as read-only views
    n = w[0].shape[0]
    ni = pl.n_instances
    first = np.empty(n, np.float64)
    finish = np.empty(n, np.float64)
    inst = np.empty(n, np.int32)
    status = np.empty(n, np.int8)
    cached = np.empty(n, np.int64)
    pre_ = np.empty(n, np.int32)
    busy = np.empty(ni, np.float64)
    iout = np.empty((ni, PK.N_OCOLS), np.int64)
    wait_s = np.empty(n_samp * ni if full else 0, np.int64)
    kv_s = np.empty(n_samp * ni if full else 0, np.int64)
    sys_s = np.empty(n_samp, np.int64)
    mf = np.empty(K.N_MFCOLS, np.float64)
    mi = np.empty(K.N_MICOLS, np.int64)
    code = PK.policy_one_nb(ro(pl.p), ro(pd), c, cf, ro(w[0]), ro(w[1]), ro(w[2]), ro(off), ro(ids), first, finish,
                            inst, status, cached, pre_, busy, iout, wait_s, kv_s, sys_s, np.empty(max(n, 1)),
                            np.empty(max(n, 1)), rf, mf, mi, bool(full))
    if code != 0:
        raise RuntimeError(f"engine-policy kernel failed with status {code}; this is a bug in fastsim")
    return (mf, mi, busy, iout, dict(first=first, finish=finish, inst=inst, status=status, cached=cached,
                                     preempted=pre_),
            (wait_s.reshape(n_samp, ni) if full else None, kv_s.reshape(n_samp, ni) if full else None, sys_s),
            bool(c[PK.C_CACHING]))


def policy_metrics(pol, spec, res, n: int, horizon_s: float):
    """The :class:`SimMetrics` of one engine-policy run from the kernel's rows."""
    f, mi, busy, iout, _, _, caching = res
    steps = iout[:, PK.O_STEPS]
    mean_batch = iout[:, PK.O_BATCH_SUM] / np.maximum(steps, 1)
    mean_batch = np.where(steps == 0, np.nan, mean_batch)
    rej, fin, meas, over = (int(x) for x in mi[:K.MI_SURE])
    thr = float(iout[:, PK.O_TOKENS_OUT].sum()) / horizon_s
    cached = iout[:, PK.O_CACHED]
    adm = iout[:, PK.O_PROMPT_ADMITTED]
    hit = float(cached.sum()) / float(adm.sum()) if caching and adm.sum() > 0 else float("nan")
    with np.errstate(divide="ignore", invalid="ignore"):
        hit_i = np.where(adm > 0, cached / np.maximum(adm, 1), np.nan) if caching else None
    rounds = int(iout[:, PK.O_SPEC_ROUNDS].sum())
    tpr = float(iout[:, PK.O_SPEC_TOKENS].sum()) / rounds if spec is not None and rounds > 0 else float("nan")
    return SimMetrics(float(f[K.M_ATTAIN]), float(f[K.M_TTFT50]), float(f[K.M_TTFT90]), float(f[K.M_TTFT99]),
                      float(f[K.M_TPOT50]), float(f[K.M_TPOT90]), float(f[K.M_TPOT99]), thr, rej, n - rej - fin, fin,
                      meas, n, over != 0, float(f[K.M_SLOPE]), float(n - rej) / horizon_s, busy / horizon_s,
                      mean_batch, iout[:, PK.O_KV_PEAK].copy(), pol.name, int(iout[:, PK.O_PREEMPT].sum()),
                      int(cached.sum()), int(adm.sum()), hit, hit_i, tpr)
