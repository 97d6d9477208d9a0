"""The token ledger of one step: where a forward pass's time goes (SPEC section 4; lecture 16 §1.2).

One forward pass of an instance is split into weight read, KV read, compute, all-reduce (and the
MoE all-to-all), kernel launch and, under a load, the M/D/1 wait (:func:`fastsim.formulas.md1_mean_wait_s`,
SPEC section 5). The first parts are :func:`fastsim.stepmodel.step_parts` (SPEC section 3); the
launches replace the planner's fixed per-step overhead (lecture 12's kernel counts). Here:
:class:`LedgerResult`, :func:`ledger` (one step), :func:`ledger_table` (a grid of steps at once),
:func:`memory_per_gpu` (the HBM check), the weight-read bound of lecture 16 exercise 3
(:func:`weight_read_lower_bound_s`, :func:`min_tp_for_tpot`), the checked scalar cost of exercise 2
and :func:`plot_ledger`. The lecture's figures and how close these come are in the docstring of
:mod:`fastsim.ledger`, which re-exports every name.
"""
from __future__ import annotations

import math
from numbers import Integral, Real
from typing import NamedTuple, Sequence

import numpy as np

from .catalog import GPU, Model, Precision, default_catalog
from .errors import FastsimInputError, require_positive, require_tp  # noqa: F401
from .formulas import _int_at_least, _positive, gemm_blend_s, md1_mean_wait_s
from .formulas import cost_usd_per_million_output_tokens as _array_cost
from .stepmodel import (P_ETA_BW, P_GPUS, P_HBM_BW, P_KV_BUDGET_TOKENS, P_KVPG, P_LAYERS, P_OVERHEAD_SEQ, P_CLASSES, P_PP, P_WDENSE, P_WEXP,
                        P_WBYTES, P_DP, StepConstants, decode_attn_flops, p2p_time, resolve_constants,
                        expert_share, kv_budget_tokens, layout_degrees, prefill_attn_flops, stage_layers, stage_params,
                        step_params, step_parts, class_compute, P_GEMM_Q)

__all__ = [
    "LedgerResult", "ledger", "ledger_table", "pipeline_round_s", "memory_per_gpu", "cost_usd_per_million_output_tokens",
    "weight_read_lower_bound_s", "min_tp_for_tpot", "plot_ledger",
    "KERNELS_PER_LAYER_EAGER", "KERNELS_PER_LAYER_FUSED", "LAUNCH_S_EAGER", "LAUNCH_S_GRAPHS", "BINDING",
]

#: Kernels per transformer layer in a decode step, unfused (lecture 12's graph count).
KERNELS_PER_LAYER_EAGER = 27
#: Kernels per layer after fusion (lecture 12).
KERNELS_PER_LAYER_FUSED = 12
#: Host cost of one kernel launch in eager mode (s).
LAUNCH_S_EAGER = 4e-6
#: Cost of one kernel launch replayed from a CUDA graph (s).
LAUNCH_S_GRAPHS = 1e-6
#: Names of the binding constraint, in tie-breaking order (index = code in ``binding_code``).
BINDING = ("memory", "compute", "communication", "launch")


class LedgerResult(NamedTuple):
    """One step of one instance, broken into its parts (all times in seconds).

    Attributes
    ----------
    weight_read_s, kv_read_s, compute_s, allreduce_s : float
        The four parts of SPEC §3 (:func:`fastsim.stepmodel.step_parts`); for a MoE model the
        weight read includes the routed experts the step touches.
    expert_read_s : float
        The part of ``weight_read_s`` that reads routed experts: ``E x (1 - (1 - k/E)^T)``
        distinct experts per MoE layer for T tokens (SPEC §10); 0 for a dense model.
    alltoall_s : float
        Expert-parallel dispatch and combine (two all-to-alls per MoE layer; 0 without EP).
    p2p_s : float
        Pipeline parallelism: the stage's send of its activations to the next stage
        (:func:`fastsim.stepmodel.p2p_time`; 0 on the last stage and without PP). Counted with
        the all-reduce and all-to-all as communication.
    host_s : float
        The engine's host time for the step's sequences: ``batch x overhead_per_seq_s``
        (:attr:`fastsim.stepmodel.StepConstants.overhead_per_seq_s`, step model v2; 0 under SPEC
        §3's constants).
    launch_s : float
        Total kernel-launch time of the step: ``layers x kernels_per_layer x launch time``.
    step_s : float
        ``max(weight_read_s + kv_read_s, compute_s) + allreduce_s + alltoall_s + p2p_s + launch_s
        + host_s``. Under :attr:`~fastsim.stepmodel.StepConstants.step_form` ``"classes"`` the
        roofline is ``max(weight_read_s, GEMM) + max(kv_read_s, attention)``
        (:func:`fastsim.stepmodel.class_compute`; ``compute_s`` is still GEMM + attention), and
        ``binding`` weighs the reads of the classes bound by bandwidth against the compute of
        those bound by compute.
    binding : str
        The largest of memory side (weight + KV; under the classes form the reads of the classes
        bound by bandwidth), compute (under the classes form that of the classes bound by
        compute), communication (all-reduce + all-to-all) and launch (with the host time): one of
        ``'memory'``, ``'compute'``, ``'communication'``, ``'launch'`` (ties go to the earlier).
    n_tokens : float
        Tokens processed in the step (decode: batch; prefill: batch x prompt tokens).
    tokens_per_s_per_gpu : float
        ``n_tokens / step_s / TP``: output tokens/s per GPU for decode, prompt tokens/s per GPU
        for prefill.
    utilization : float
        The share of the step rate the arrivals need, when an arrival rate was given (else NaN):
        a decode step advances ``batch`` requests by one token each, and a request needs
        ``output_tokens`` of them, so ``rate x output_tokens x step_s / batch``; a prefill step
        serves ``batch`` prompts, so ``rate x step_s / batch``. At or above 1 the load exceeds
        what the step can serve.
    queue_wait_s : float
        Prefill rows: M/D/1 mean wait in queue of a server taking ``batch`` prompts per step
        (batches arrive at ``rate / batch``; :func:`md1_mean_wait_s`), ``inf`` when utilization
        >= 1. Decode rows: NaN (a batched decode admits a waiting request at its next step,
        which is not an M/D/1 queue). NaN without an arrival rate.
    memory_per_gpu_bytes : float
        HBM one GPU needs for the step: all weights / TP plus the KV cache of the tokens held
        (decode: ``batch x context``; prefill: ``batch x prompt tokens``), see
        :func:`memory_per_gpu`.
    memory_limit_per_gpu_bytes : float
        HBM the engine may use per GPU: ``memory_utilization x HBM`` (0.9 by default).
    kv_budget_tokens : float
        Tokens of KV cache the instance can hold once the weights are in
        (:func:`fastsim.stepmodel.kv_budget_tokens`); <= 0 when the weights alone do not fit.
    fits : bool
        Whether the tokens held fit that budget (equivalently ``memory_per_gpu_bytes <=
        memory_limit_per_gpu_bytes``). When False the step's figures describe a setup that
        cannot run.
    """

    weight_read_s: float
    kv_read_s: float
    compute_s: float
    allreduce_s: float
    launch_s: float
    step_s: float
    binding: str
    n_tokens: float
    tokens_per_s_per_gpu: float
    utilization: float
    queue_wait_s: float
    memory_per_gpu_bytes: float
    memory_limit_per_gpu_bytes: float
    kv_budget_tokens: float
    fits: bool
    expert_read_s: float = 0.0
    alltoall_s: float = 0.0
    p2p_s: float = 0.0
    host_s: float = 0.0


# ----------------------------------------------------------------------------------------------
# validation and lookups (the integer and positive checks live in fastsim.formulas)


def _lookup(kind: str, value):
    cat = default_catalog()
    if kind == "model":
        return value if isinstance(value, Model) else cat.model(value)
    if kind == "gpu":
        return value if isinstance(value, GPU) else cat.gpu(value)
    return value if isinstance(value, Precision) else cat.precision(value)


def _real_at_least(field: str, value, low: float) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise FastsimInputError(field, value, f"a finite number >= {low:g}")
    v = float(value)
    if not math.isfinite(v) or v < low:
        raise FastsimInputError(field, value, f"a finite number >= {low:g}")
    return v


def _rate(value) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, Real) or not (math.isfinite(value) and value > 0):
        raise FastsimInputError("arrival_rate_req_per_s", value, "None or a finite number > 0 (req/s)")
    return float(value)


def _within_context(field: str, value: int, model: Model) -> int:
    """``value`` (tokens per sequence) or an error when it passes the model's context window."""
    if value > model.max_context_tokens:
        raise FastsimInputError(field, value, f"at most {model.max_context_tokens:,} tokens, the context "
                                              f"window of {model.name}")
    return value


# ----------------------------------------------------------------------------------------------
# small formulas (lecture section 7 exercises; the closed forms are in fastsim.formulas)


def cost_usd_per_million_output_tokens(gpus: int, price_usd_per_gpu_hour: float, rate_req_per_s: float,
                                       mean_output_tokens: float) -> float:
    """Cost per million output tokens (USD): ``GPUs x price / (rate x mean O x 3600) x 1e6``.

    Parameters
    ----------
    gpus : int
        GPUs paid for, >= 1.
    price_usd_per_gpu_hour : float
        Price of one GPU (USD/hour), > 0.
    rate_req_per_s : float
        Requests served per second, > 0.
    mean_output_tokens : float
        Mean output tokens per request, > 0.

    Returns
    -------
    float
        USD per million output tokens. Exercise 2: ``2 x 4 / (20 x 250 x 3600) x 1e6`` = 0.444.

    Raises
    ------
    FastsimInputError
        A non-positive or non-finite argument.

    Notes
    -----
    A scalar, checked front end of the canonical formula,
    :func:`fastsim.formulas.cost_usd_per_million_output_tokens` (which broadcasts over arrays and
    does not check). Source: SPEC §1 (cost per million output tokens, "integer cost" when ``gpus``
    counts whole instances), lecture 16 exercise 2.
    """
    n = _int_at_least("gpus", gpus, 1)
    price = _positive("price_usd_per_gpu_hour", price_usd_per_gpu_hour)
    rate = _positive("rate_req_per_s", rate_req_per_s)
    out = _positive("mean_output_tokens", mean_output_tokens)
    return float(_array_cost(n, price, rate, out))


def weight_read_lower_bound_s(model, gpu, precision, tp: int, constants: StepConstants = StepConstants()) -> float:
    """Lower bound on a decode step: the weight read alone (s).

    ``matmul params x weight bytes / TP / (eta_bw x HBM bytes/s)`` (SPEC §3). KV read,
    communication and overhead only add to it.

    Parameters
    ----------
    model, gpu, precision : str or catalog entry
    tp : int
        Tensor parallelism, a power of two from 1 to 64.
    constants : StepConstants

    Returns
    -------
    float
        Seconds. Exercise 3: 70B FP8 on one H100, ``69.5e9 / 2.68e12`` = 26 ms; TP4 about 6.5 ms.

    Raises
    ------
    FastsimInputError
        Unknown names, TP not a power of two.
    """
    m, g, pr = _lookup("model", model), _lookup("gpu", gpu), _lookup("precision", precision)
    tp = require_tp("tp", tp)
    constants = resolve_constants(constants, g, pr)
    return m.active_matmul_params * pr.weight_bytes / tp / (constants.eta_bw * g.hbm_bw_bytes_per_s)


def min_tp_for_tpot(model, gpu, precision, tpot_s: float,
                    constants: StepConstants = StepConstants()) -> int | None:
    """Smallest TP (power of two, 1..64) whose weight-read lower bound fits a TPOT target.

    Parameters
    ----------
    model, gpu, precision : str or catalog entry
    tpot_s : float
        TPOT target (s), > 0.
    constants : StepConstants

    Returns
    -------
    int or None
        The smallest TP with :func:`weight_read_lower_bound_s` <= ``tpot_s``; None when even TP 64
        cannot. This is a necessary condition only: KV read, all-reduce and overhead come on top.
        Exercise 3: Llama-3.1-70B, H100, FP8, 10 ms -> 4.

    Raises
    ------
    FastsimInputError
        Unknown names, or ``tpot_s`` not a positive number.

    Notes
    -----
    Source: lecture 16 exercise 3; SPEC §3 (weight read).
    """
    t = _positive("tpot_s", tpot_s)
    for tp in (1, 2, 4, 8, 16, 32, 64):
        if weight_read_lower_bound_s(model, gpu, precision, tp, constants) <= t:
            return tp
    return None


# ----------------------------------------------------------------------------------------------
# the ledger


def memory_per_gpu(model, gpu, precision, tp: int, kv_tokens, constants: StepConstants = StepConstants(),
                   *, layout: str = "tp"):
    """HBM one GPU of a TP instance needs: weights / TP + KV cache of ``kv_tokens`` tokens (bytes).

    Parameters
    ----------
    model, gpu, precision : str or catalog entry
    tp : int
        Tensor parallelism, a power of two from 1 to 64.
    kv_tokens : float or ndarray(float64)
        Tokens whose KV cache the instance holds (all sequences together), >= 0.
    constants : StepConstants
        ``memory_utilization`` is the fraction of HBM the engine may use.
    layout : str, default "tp"
        Instance layout, as in :func:`ledger`.

    Returns
    -------
    dict
        ``memory_per_gpu_bytes`` (``total params x weight bytes / TP + kv_tokens x KV bytes per
        token per GPU``; with a ``layout`` the dense weights are split by the attention TP, the
        routed experts by the GPUs, the KV by the data-parallel ranks, SPEC §10),
        ``memory_limit_per_gpu_bytes`` (``memory_utilization x HBM``),
        ``kv_budget_tokens`` (:func:`fastsim.stepmodel.kv_budget_tokens`) and ``fits``
        (``kv_tokens <= kv_budget_tokens``); arrays of the shape of ``kv_tokens``.

    Raises
    ------
    FastsimInputError
        Unknown names, a GPU count outside 1..4096, an unknown layout.

    Examples
    --------
    >>> m = memory_per_gpu('llama-3.1-405b', 'H100', 'BF16', 8, 0.0)
    >>> round(m['memory_per_gpu_bytes'] / 1e9, 1), bool(m['fits'])     # 811 GB / 8 > 72 GB
    (101.5, False)
    """
    m, g, pr = _lookup("model", model), _lookup("gpu", gpu), _lookup("precision", precision)
    tp = _gpu_count("tp", tp)
    dp, ep = layout_degrees(layout, tp)
    tp_attn = tp // dp
    held = np.asarray(kv_tokens, dtype=np.float64)
    wb = pr.weight_bytes
    routed = m.routed_expert_params
    share = expert_share(m, tp, ep)
    used = ((m.total_params - routed) * wb / tp_attn + routed * wb * share
            + held / dp * m.kv_bytes_per_token_per_gpu(pr.kv_bytes, tp_attn))
    constants = resolve_constants(constants, g, pr)
    budget = kv_budget_tokens(m, pr, g, tp, constants, dp=dp, ep=ep)
    return dict(memory_per_gpu_bytes=used,
                memory_limit_per_gpu_bytes=np.full_like(used, constants.memory_utilization * g.hbm_bytes),
                kv_budget_tokens=np.full_like(used, budget), fits=held <= budget)


def _core(p, n_tokens, kv_tokens, attn_flops, kernels_per_layer, launch_s, rate, batch=1.0, prefill=0.0,
          output_tokens=math.nan):
    """Vectorized ledger arithmetic; every argument broadcasts (arrays of float64).

    ``batch`` and ``prefill`` (prompt tokens; 0 for decode) say what one step serves, for the load
    terms: a decode request needs ``output_tokens`` steps of a batch of ``batch``, a prefill
    request ``1 / batch`` of a step. ``batch`` is also the step's sequences, the ones its host time
    (``P_OVERHEAD_SEQ``) is charged for.
    """
    w, kv, comp, ar, a2a = step_parts(p, n_tokens, kv_tokens, attn_flops)
    p = np.asarray(p, dtype=np.float64)
    gpus = p[..., P_GPUS]
    expert = w - p[..., P_WDENSE] / (p[..., P_ETA_BW] * p[..., P_HBM_BW])
    launch = p[..., P_LAYERS] * kernels_per_layer * launch_s
    # the engine's host time per sequence (step model v2; 0 under SPEC §3): the step's sequences
    # are its decodes, or the prompts of a prefill row
    host = p[..., P_OVERHEAD_SEQ] * np.asarray(batch, dtype=np.float64)
    mem = w + kv
    roof = np.maximum(mem, comp)
    side_mem, side_comp = mem, comp      # the two sides the binding weighs
    classes = p[..., P_CLASSES] != 0.0
    if np.any(classes):
        # a roofline per kernel class (StepConstants.step_form "classes"): the binding weighs the
        # bandwidth-bound classes' reads against the compute-bound classes' compute
        gemm, attn = class_compute(p, n_tokens, attn_flops)
        w_mem, kv_mem = w >= gemm, kv >= attn
        gb = gemm_blend_s(w, gemm, p[..., P_GEMM_Q])     # max(w, gemm) unless StepConstants.gemm_blend_p
        roof = np.where(classes, gb + np.maximum(kv, attn), roof)
        side_mem = np.where(classes, np.where(w_mem, gb, 0.0) + np.where(kv_mem, kv, 0.0), mem)
        side_comp = np.where(classes, np.where(w_mem, 0.0, gb) + np.where(kv_mem, 0.0, attn), comp)
    p2p = p2p_time(p, n_tokens)
    comm = ar + a2a + p2p
    step = roof + comm + launch + host
    stacked = np.stack(np.broadcast_arrays(side_mem, side_comp, comm, launch + host), axis=-1)
    code = np.argmax(stacked, axis=-1)          # first maximum: ties go to the earlier name
    tps = n_tokens / step / gpus
    is_pf = np.asarray(prefill, dtype=np.float64) > 0
    b = np.asarray(batch, dtype=np.float64)
    util = rate * step * np.where(is_pf, 1.0, output_tokens) / b
    wait = np.where(is_pf, md1_mean_wait_s(rate / b, step), np.nan)
    return dict(weight_read_s=w, kv_read_s=kv, compute_s=comp, allreduce_s=ar, launch_s=launch,
                step_s=step, binding_code=code, n_tokens=n_tokens, tokens_per_s_per_gpu=tps,
                utilization=util, queue_wait_s=wait, expert_read_s=np.maximum(expert, 0.0), alltoall_s=a2a, p2p_s=p2p,
                host_s=np.broadcast_to(host, np.shape(step)).copy())


def _causal_pairs(m: Model, tokens):
    """Query-key pairs of causal attention over ``tokens``, per layer averaged over the layers.

    A full layer has ``T^2 / 2`` (SPEC §3 counts ``2 x layers x T^2 x d`` FLOPs = 4 d per pair); a
    sliding layer of window W has ``T^2 / 2`` up to W and ``W^2 / 2 + (T - W) W`` past it.
    """
    t = np.asarray(tokens, dtype=np.float64)
    full = t * t / 2.0
    if m.sliding_window <= 0:
        return full
    w = float(m.sliding_window)
    slide = np.where(t > w, w * w / 2.0 + (t - w) * w, full)
    return (1.0 - m.sliding_fraction) * full + m.sliding_fraction * slide


def _work(m: Model, batch, context, prefill):
    """(n_tokens, kv_tokens, attention FLOPs, tokens held) of decode (prefill == 0) or prefill rows.

    Tokens held: the KV cache the step needs in memory, ``batch x context`` for decode and the
    ``batch x prompt`` tokens a prefill writes, both as full-context equivalents
    (:meth:`Model.kv_tokens_held`: a sliding layer keeps only its window). Attention uses the
    model's attention widths (q_dim for GQA, SPEC §3; MLA's, SPEC §10), never the hidden size."""
    batch = np.asarray(batch, dtype=np.float64)
    context = np.asarray(context, dtype=np.float64)
    prefill = np.asarray(prefill, dtype=np.float64)
    is_pf = prefill > 0
    n = np.where(is_pf, batch * prefill, batch)
    ctx_held = m.kv_tokens_held(context)
    kv = np.where(is_pf, 0.0, batch * ctx_held)
    if m.sliding_window > 0:
        pf_attn = 4.0 * m.layers * m.attn_dim_prefill * _causal_pairs(m, prefill)
    else:
        pf_attn = prefill_attn_flops(m.layers, m.attn_dim_prefill, prefill)
    attn = np.where(is_pf, batch * pf_attn, decode_attn_flops(m.layers, m.attn_dim_decode, batch * ctx_held))
    return n, kv, attn, np.where(is_pf, batch * m.kv_tokens_held(prefill), kv)


def _result(d, i=()) -> LedgerResult:
    f = {k: float(np.asarray(v)[i]) for k, v in d.items() if k not in ("binding_code", "fits")}
    return LedgerResult(binding=BINDING[int(np.asarray(d["binding_code"])[i])],
                        fits=bool(np.asarray(d["fits"])[i]), **f)


def _check_launch(kernels_per_layer, launch_s):
    return (_int_at_least("kernels_per_layer", kernels_per_layer, 0),
            _real_at_least("launch_s", launch_s, 0.0))


def ledger(model, gpu, precision, tp: int, *, batch: int = 1, context_tokens: int = 4096,
           prefill_tokens: int = 0, kernels_per_layer: int = KERNELS_PER_LAYER_FUSED,
           launch_s: float = LAUNCH_S_GRAPHS, constants: StepConstants = StepConstants(),
           arrival_rate_req_per_s: float | None = None, layout: str = "tp",
           output_tokens: float | None = None) -> LedgerResult:
    """The token ledger of one step: where the time goes (SPEC §4, lecture 16 §1.2).

    Decode (``prefill_tokens == 0``): ``n_tokens = batch``, ``kv_tokens = batch x context``,
    attention ``4 x layers x hidden x (batch x context)`` FLOPs.
    Prefill (``prefill_tokens = T > 0``): ``batch`` prompts of ``T`` tokens, ``n_tokens = batch x
    T``, no KV read, causal attention ``batch x 2 x layers x T^2 x hidden`` FLOPs
    (``context_tokens`` is not used).

    Parameters
    ----------
    model, gpu, precision : str or catalog entry
        Names are looked up in :func:`fastsim.catalog.default_catalog` (case-insensitive); a model
        may also be a path to a Hugging Face ``config.json``.
    tp : int
        Tensor parallelism, a power of two from 1 to 64.
    batch : int, default 1
        Sequences in the step, >= 1.
    context_tokens : int, default 4096
        Cached tokens per sequence (decode), from 0 to the model's ``max_context_tokens``.
    prefill_tokens : int, default 0
        Prompt tokens per sequence for a prefill step (at most ``max_context_tokens``); 0 for
        decode.
    kernels_per_layer : int, default 12
        Kernel launches per layer (27 unfused, 12 fused; lecture 12).
    launch_s : float, default 1e-6
        Time per launch (4e-6 eager, 1e-6 under CUDA graphs).
    constants : StepConstants
        Efficiencies and all-reduce constants; ``overhead_s`` is not used (launches replace it).
    arrival_rate_req_per_s : float, optional
        When given, the load terms. A decode step advances ``batch`` requests by one token, and a
        request needs ``output_tokens`` tokens: ``utilization = rate x output_tokens x step_s /
        batch``, and no queue wait (NaN: a batched decode is not an M/D/1 server). A prefill step
        serves ``batch`` prompts: ``utilization = rate x step_s / batch`` and the M/D/1 wait
        ``rho S / (2 (1 - rho))`` with ``S = step_s`` (SPEC §5; Poisson arrivals, steady state,
        ``inf`` when rho >= 1).

    layout : str, default "tp"
        Instance layout (:data:`fastsim.stepmodel.LAYOUTS`): ``tp``, ``tp+ep`` (experts
        expert-parallel over the ``tp`` GPUs) or ``dp+ep`` (data-parallel attention, one rank
        per GPU; DeepSeek-V3's layout). ``tp`` is then the instance's GPU count, any integer from
        1 to 4096 (EP144 is 18 nodes of 8).
    output_tokens : float, optional
        Mean output tokens per request (>= 1); required with ``arrival_rate_req_per_s`` for a
        decode step.

    Returns
    -------
    LedgerResult
        Seconds per part, the step, the binding constraint, per-GPU token throughput and the
        memory check (``fits``): a step whose weights and KV cache do not fit in HBM is still
        timed, and flagged.

    Raises
    ------
    FastsimInputError
        ``batch`` < 1, ``context_tokens`` or ``prefill_tokens`` < 0, not integers or past the
        model's context window, an unknown
        model/GPU/precision, TP not a power of two, a precision the GPU has no peak for,
        ``kernels_per_layer`` < 0, ``launch_s`` < 0, a non-positive arrival rate, or an arrival
        rate for a decode step without ``output_tokens`` >= 1.

    Examples
    --------
    >>> r = ledger('llama-3.1-70b', 'H100', 'BF16', 8)      # batch 1, fused, CUDA graphs
    >>> round(r.step_s * 1e3, 2), r.binding
    (8.48, 'memory')
    """
    m, g, pr = _lookup("model", model), _lookup("gpu", gpu), _lookup("precision", precision)
    tp = _gpu_count("tp", tp)
    dp, ep = layout_degrees(layout, tp)
    b = _int_at_least("batch", batch, 1)
    ctx = _within_context("context_tokens", _int_at_least("context_tokens", context_tokens, 0), m)
    pf = _within_context("prefill_tokens", _int_at_least("prefill_tokens", prefill_tokens, 0), m)
    kpl, ls = _check_launch(kernels_per_layer, launch_s)
    rate = _rate(arrival_rate_req_per_s)
    out_tokens = _output_tokens(output_tokens, rate, decode=pf == 0)
    p = step_params(m, g, pr, tp, constants, dp=dp, ep=ep)
    n, kv, attn, held = _work(m, b, ctx, pf)
    return _result(_core(p, n, kv, attn, kpl, ls, rate, b, pf, out_tokens)
                   | memory_per_gpu(m, g, pr, tp, held, constants, layout=layout))


def _output_tokens(value, rate: float, decode: bool) -> float:
    """Mean output tokens per request for the decode load term (NaN when not needed and not given)."""
    if value is None:
        if decode and not math.isnan(rate):
            raise FastsimInputError("output_tokens", None, "the mean output tokens per request (>= 1), needed with "
                                    "an arrival rate for decode steps: a request takes that many decode steps")
        return math.nan
    return _real_at_least("output_tokens", value, 1.0)


def _gpu_count(field: str, value) -> int:
    """GPUs of an instance: an integer from 1 to 4096 (powers of two and whole nodes alike)."""
    if isinstance(value, bool) or not isinstance(value, (Integral, float)) or int(value) != value \
            or not 1 <= int(value) <= 4096:
        raise FastsimInputError(field, value, "an integer from 1 to 4096 (GPUs of the instance)")
    return int(value)


def _as_list(field: str, value) -> list:
    if isinstance(value, (str, bytes, Model, GPU, Precision)) or not isinstance(value, (Sequence, np.ndarray)):
        return [value]
    out = list(value)
    if not out:
        raise FastsimInputError(field, value, "a value or a non-empty sequence of values")
    return out


def ledger_table(model, gpu, precision, tp, *, batch=(1,), context_tokens=(4096,), prefill_tokens=(0,),
                 kernels_per_layer: int = KERNELS_PER_LAYER_FUSED, launch_s: float = LAUNCH_S_GRAPHS,
                 constants: StepConstants = StepConstants(), arrival_rate_req_per_s: float | None = None,
                 layout: str = "tp", output_tokens: float | None = None, pp: int = 1):
    """The ledger over a grid of configurations, computed at once (numpy broadcasting).

    Every argument among ``gpu``, ``precision``, ``tp``, ``batch``, ``context_tokens`` and
    ``prefill_tokens`` may be one value or a sequence; the table is their Cartesian product, in
    that nesting order (the last varies fastest), except that a prefill step does not depend on
    the context: each prefill row appears once per batch, after that batch's decode rows, with
    ``context_tokens`` 0. Rows agree with :func:`ledger` to the last bit.

    Parameters
    ----------
    model : str or Model
    gpu, precision : str or catalog entry, or sequences of them
    tp : int or sequence of int
    batch, context_tokens, prefill_tokens : int or sequence of int
    kernels_per_layer, launch_s, constants, arrival_rate_req_per_s, layout, output_tokens
        As in :func:`ledger` (one value for the whole table).
    pp : int, default 1
        Pipeline stages (one value for the table). With ``pp > 1``, ``tp`` is the GPUs of one
        stage and every configuration gives one row per stage
        (:func:`fastsim.stepmodel.stage_params`): the step of one micro-batch of ``batch / m``
        sequences, ``m = min(batch, pp)`` micro-batches (the engines split the running batch into
        up to ``pp`` micro-batches, vLLM's virtual engines), through that stage's layers, its send
        to the next stage in ``p2p_s``; the KV held is every sequence's (each stage holds the KV of
        all of them for its layers), and ``tokens_per_s_per_gpu`` is the instance's per-GPU rate
        were that stage the bottleneck (``n_tokens / step_s / (tp x pp)``). The pipeline's round is
        in :func:`pipeline_round_s`.

    Returns
    -------
    pandas.DataFrame
        One row per configuration: ``len(gpu) x len(precision) x len(tp) x len(batch) x
        (len(context_tokens) x decode values + prefill values)`` rows, where decode values is 1
        when 0 is among ``prefill_tokens`` (else 0) and prefill values the number of distinct
        non-zero ``prefill_tokens``. Columns: ``gpu``, ``precision`` (str), ``tp``, ``batch``,
        ``context_tokens``, ``prefill_tokens``, ``pp``, ``stage`` (int64), then the
        :class:`LedgerResult` fields (float64 seconds and bytes, ``binding`` str, ``fits`` bool);
        with ``pp > 1`` each configuration's rows are its stages in order.

    Raises
    ------
    FastsimInputError
        As :func:`ledger`, for any element, or an empty sequence.
    """
    import pandas as pd

    m = _lookup("model", model)
    gpus = [_lookup("gpu", x) for x in _as_list("gpu", gpu)]
    precs = [_lookup("precision", x) for x in _as_list("precision", precision)]
    tps = [_gpu_count("tp", x) for x in _as_list("tp", tp)]
    bs = np.array([_int_at_least("batch", x, 1) for x in _as_list("batch", batch)], dtype=np.float64)
    cs = np.array([_within_context("context_tokens", _int_at_least("context_tokens", x, 0), m)
                   for x in _as_list("context_tokens", context_tokens)], dtype=np.float64)
    ps = np.array([_within_context("prefill_tokens", _int_at_least("prefill_tokens", x, 0), m)
                   for x in _as_list("prefill_tokens", prefill_tokens)], dtype=np.float64)
    kpl, ls = _check_launch(kernels_per_layer, launch_s)
    rate = _rate(arrival_rate_req_per_s)
    out_tokens = _output_tokens(output_tokens, rate, decode=bool((ps == 0).any()))

    pp = _int_at_least("pp", pp, 1)
    hw = [(g, pr, t) for g in gpus for pr in precs for t in tps]
    if pp == 1:
        P = np.stack([step_params(m, g, pr, t, constants, dp=layout_degrees(layout, t)[0],
                                  ep=layout_degrees(layout, t)[1]) for g, pr, t in hw])  # (h, N_PARAMS)
    else:
        return _stage_table(m, hw, bs, cs, ps, pp, kpl, ls, rate, out_tokens, constants, layout)
    B, C, F = np.meshgrid(bs, cs, ps, indexing="ij")
    B, C, F = B.ravel(), C.ravel(), F.ravel()
    C = np.where(F > 0, 0.0, C)                  # a prefill step reads no cached context
    keys = np.stack([B, C, F], axis=1)
    _, first = np.unique(keys, axis=0, return_index=True)
    batch_index = np.arange(B.size) // (cs.size * ps.size)
    keep = first[np.lexsort((first, F[first] > 0, batch_index[first]))]         # per batch: decode, prefill
    B, C, F = B[keep], C[keep], F[keep]                                          # (w,)
    n, kv, attn, held = _work(m, B, C, F)
    Pb = P[:, None, :]                                                           # (h, 1, N)
    d = _core(Pb, n[None, :], kv[None, :], attn[None, :], kpl, ls, rate, B[None, :], F[None, :], out_tokens)
    mem = [memory_per_gpu(m, g, pr, t, held, constants, layout=layout) for g, pr, t in hw]
    d |= {k: np.stack([x[k] for x in mem]) for k in mem[0]}                      # (h, w)
    h, w = len(hw), B.size
    cols = {
        "gpu": np.repeat([x[0].name for x in hw], w),
        "precision": np.repeat([x[1].name for x in hw], w),
        "tp": np.repeat(np.array([x[2] for x in hw], dtype=np.int64), w),
        "batch": np.tile(B.astype(np.int64), h),
        "context_tokens": np.tile(C.astype(np.int64), h),
        "prefill_tokens": np.tile(F.astype(np.int64), h),
        "pp": np.ones(h * w, dtype=np.int64),
        "stage": np.zeros(h * w, dtype=np.int64),
    }
    return _frame(cols, d, h, w)


def _frame(cols, d, h, w):
    import pandas as pd
    for k in LedgerResult._fields:
        if k == "binding":
            cols[k] = np.asarray(BINDING, dtype=object)[np.broadcast_to(d["binding_code"], (h, w)).ravel()]
        elif k == "fits":
            cols[k] = np.broadcast_to(np.asarray(d[k], dtype=bool), (h, w)).ravel()
        else:
            cols[k] = np.broadcast_to(np.asarray(d[k], dtype=np.float64), (h, w)).ravel()
    return pd.DataFrame(cols)


def _grid_keys(bs, cs, ps):
    """The (batch, context, prefill) rows of a ledger table, per batch decode rows then prefill rows."""
    B, C, F = np.meshgrid(bs, cs, ps, indexing="ij")
    B, C, F = B.ravel(), C.ravel(), F.ravel()
    C = np.where(F > 0, 0.0, C)
    keys = np.stack([B, C, F], axis=1)
    _, first = np.unique(keys, axis=0, return_index=True)
    batch_index = np.arange(B.size) // (cs.size * ps.size)
    keep = first[np.lexsort((first, F[first] > 0, batch_index[first]))]
    return B[keep], C[keep], F[keep]


def _stage_table(m, hw, bs, cs, ps, pp, kpl, ls, rate, out_tokens, constants, layout):
    """:func:`ledger_table` with ``pp > 1``: one row per stage of each configuration."""
    B, C, F = _grid_keys(bs, cs, ps)
    w = B.size
    micro = np.minimum(B, float(pp))                 # micro-batches in flight: one per sequence when fewer
    n, kv, attn, held = _work(m, B / micro, C, F)
    _, _, _, held_all = _work(m, B, C, F)
    parts, names = [], []
    for g, pr, t in hw:
        dp, ep = layout_degrees(layout, t)
        S = stage_params(m, g, pr, t, constants, pp=pp, dp=dp, ep=ep)
        served = m.served_precision(pr)
        u = resolve_constants(constants, g, served).memory_utilization
        emb_per_gpu = m.vocab * m.hidden * served.weight_bytes / (t // dp)
        for s in range(pp):
            row = S[s]
            frac = row[P_LAYERS] / m.layers            # attention FLOPs are linear in the layers
            # the load a stage carries: each micro-batch of B / m sequences passes it once per round
            d = _core(row, n, kv, attn * frac, kpl, ls, rate, B / micro, F, out_tokens)
            d["tokens_per_s_per_gpu"] = d["tokens_per_s_per_gpu"] / pp
            used = (row[P_WDENSE] + row[P_WEXP] + (emb_per_gpu if s == 0 else 0.0)
                    + held_all / row[P_DP] * row[P_KVPG])
            budget = float(row[P_KV_BUDGET_TOKENS])
            d |= dict(memory_per_gpu_bytes=used, memory_limit_per_gpu_bytes=np.full(w, u * g.hbm_bytes),
                      kv_budget_tokens=np.full(w, budget), fits=held_all <= budget)
            parts.append({k: np.broadcast_to(np.asarray(v), (w,)) for k, v in d.items()})
            names.append((g.name, pr.name, t, s))
    h = len(parts)
    d = {k: np.stack([x[k] for x in parts]) for k in parts[0]}
    cols = {
        "gpu": np.repeat([x[0] for x in names], w),
        "precision": np.repeat([x[1] for x in names], w),
        "tp": np.repeat(np.array([x[2] for x in names], dtype=np.int64), w),
        "batch": np.tile(B.astype(np.int64), h),
        "context_tokens": np.tile(C.astype(np.int64), h),
        "prefill_tokens": np.tile(F.astype(np.int64), h),
        "pp": np.full(h * w, pp, dtype=np.int64),
        "stage": np.repeat(np.array([x[3] for x in names], dtype=np.int64), w),
    }
    return _frame(cols, d, h, w)


def pipeline_round_s(df):
    """Steady-state pipeline figures of a :func:`ledger_table` with stages: one row per configuration.

    With ``m = min(batch, S)`` micro-batches in flight through ``S`` stages, every sequence gets
    one token per round of ``max(m x slowest stage step, sum of the stage steps)``: the slowest
    stage runs each micro-batch once per round, and a micro-batch cannot come back sooner than it
    crosses the pipeline (GPipe, Huang et al. 2019; PipeDream, Narayanan et al. 2019: in steady
    state the slowest stage sets the period). ``m = S`` equal stages give ``S x`` the stage step.

    Parameters
    ----------
    df : pandas.DataFrame
        From :func:`ledger_table` (any ``pp``; ``pp = 1`` rows give their own step).

    Returns
    -------
    pandas.DataFrame
        Columns ``gpu``, ``precision``, ``tp``, ``pp``, ``batch``, ``context_tokens``,
        ``prefill_tokens``, ``slowest_stage`` (int), ``round_s`` (above), ``latency_s`` (sum of
        the stages' ``step_s``: a lone micro-batch through the pipeline), ``tokens_per_s_per_gpu``
        (``batch x tokens per sequence / round_s / (tp x pp)``; a prefill row's tokens are its
        prompts').
    """
    import pandas as pd
    keys = ["gpu", "precision", "tp", "pp", "batch", "context_tokens", "prefill_tokens"]
    out = []
    for k, g in df.groupby(keys, sort=False):
        i = int(np.argmax(g["step_s"].to_numpy()))
        slow = float(g["step_s"].iloc[i])
        pp = int(k[3])
        lat = float(g["step_s"].sum())
        round_s = max(min(float(k[4]), pp) * slow, lat) if pp > 1 else slow
        tokens = float(k[4]) * (float(k[6]) if k[6] else 1.0)
        out.append(dict(zip(keys, k)) | dict(slowest_stage=int(g["stage"].iloc[i]), round_s=round_s,
                                             latency_s=lat,
                                             tokens_per_s_per_gpu=tokens / round_s / (int(k[2]) * pp)))
    return pd.DataFrame(out)


# ----------------------------------------------------------------------------------------------
# plot


_PLOT_PARTS = (("weight_read_s", "weight read"), ("kv_read_s", "KV read"),
               ("compute_excess_s", "compute beyond memory"), ("allreduce_s", "all-reduce"),
               ("alltoall_s", "all-to-all"), ("p2p_s", "stage send"), ("launch_s", "kernel launch"),
               ("host_s", "host time"))
#: Parts drawn only where some bar has them (a dense model has no all-to-all, PP 1 no stage send,
#: SPEC §3's constants no host time): no empty legend entries.
_PLOT_OPTIONAL = ("alltoall_s", "p2p_s", "host_s")


def plot_ledger(results, path, labels: Sequence[str] | None = None, title: str = "Token ledger"):
    """Stacked bars of the step parts per configuration, saved as a figure (matplotlib Agg canvas).

    Each bar stacks weight read, KV read, the part of the roofline above them (under SPEC §3's
    form the compute not hidden under the memory side, ``max(0, compute - weight - KV)``; under
    the kernel classes', ``max(weight, GEMM) + max(KV, attention) - weight - KV``), all-reduce, all-to-all and the stage send (where some bar
    has them), kernel launch and the host time of the step's sequences (where a calibration sets
    it), so its height is the step time in ms. A tick marks the full compute time of each bar.

    Parameters
    ----------
    results : LedgerResult, sequence of LedgerResult, or pandas.DataFrame
        A DataFrame from :func:`ledger_table` (one bar per row).
    path : str or path-like
        Output file; its extension picks the format (.png, .pdf, .svg, ...; see
        :func:`fastsim.plots.check_plot_path`).
    labels : sequence of str, optional
        One label per bar; by default the index (or, for a ledger table, ``b<batch> c<context>``
        for decode and ``b<batch> prefill <tokens>`` for prefill).
    title : str

    Returns
    -------
    str
        The path written.

    Raises
    ------
    FastsimInputError
        No results, labels of the wrong length, or a path that cannot be written.
    """
    import pandas as pd

    from .plots import check_plot_path

    check_plot_path(path, "file", field="path")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if isinstance(results, LedgerResult):
        results = [results]
    if isinstance(results, pd.DataFrame):
        df = results.reset_index(drop=True)
        if labels is None and {"batch", "context_tokens", "prefill_tokens"} <= set(df.columns):
            labels = [f"b{b} c{c}" if f == 0 else f"b{b} prefill {f}" for b, c, f in
                      zip(df["batch"], df["context_tokens"], df["prefill_tokens"])]
    else:
        df = pd.DataFrame([r._asdict() for r in results])
    if len(df) == 0:
        raise FastsimInputError("results", results, "at least one ledger result")
    if labels is None:
        labels = [str(i) for i in range(len(df))]
    if len(labels) != len(df):
        raise FastsimInputError("labels", labels, f"{len(df)} labels, one per result")
    # the roofline above the reads, whatever the step form: the step less every other part
    rest = df["weight_read_s"] + df["kv_read_s"] + df["launch_s"]
    for col in ("allreduce_s", "alltoall_s", "p2p_s", "host_s"):
        if col in df:
            rest = rest + df[col]
    df = df.assign(compute_excess_s=np.maximum(0.0, df["step_s"] - rest))

    x = np.arange(len(df))
    # A Figure on its own Agg canvas: no pyplot, so the caller's backend and figures are untouched.
    fig = Figure(figsize=(max(5.0, 0.8 * len(df) + 2.0), 4.0))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    bottom = np.zeros(len(df))
    for col, name in _PLOT_PARTS:
        if col in _PLOT_OPTIONAL and not (col in df and bool((df[col] > 0).any())):
            continue
        h = df[col].to_numpy(dtype=np.float64) * 1e3
        ax.bar(x, h, bottom=bottom, label=name)
        bottom += h
    ax.scatter(x, df["compute_s"].to_numpy() * 1e3, marker="_", s=300, color="black", label="compute (total)")
    ax.set_xticks(x, labels, rotation=30, ha="right")
    ax.set_ylabel("time per step (ms)")
    ax.set_title(title)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return str(path)
