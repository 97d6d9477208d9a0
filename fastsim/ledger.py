"""The token ledger and the optimization ladder (SPEC section 4; lecture section 1, script 01).

One forward pass of a tensor-parallel instance is broken into the parts a token pays for::

    weight read    matmul params x weight bytes / TP / (eta_bw x HBM bytes/s)
    KV read        kv_tokens x KV bytes per token per GPU / (eta_bw x HBM bytes/s)
    compute        (2 x matmul params x n_tokens + attention FLOPs) / TP / (eta_compute x peak)
    all-reduce     2 per layer, ring all-reduce of n_tokens x hidden x 2 bytes (alpha-beta)
    kernel launch  layers x kernels per layer x launch time
    step           max(weight read + KV read, compute) + all-reduce + kernel launch

(and, when an arrival rate is given, an M/D/1 queueing wait with the step as the server).

The first four parts come from :func:`fastsim.stepmodel.step_parts` (SPEC §3). The ledger differs
from the planner's step in one place only: the planner adds a fixed 1 ms per step (CUDA graphs
assumed), the ledger counts kernel launches instead (27 kernels per layer unfused, 12 fused;
4 us per launch eager, 1 us under CUDA graphs; the counts are the lecture's, measured with
CUDA-graph capture in its lecture 12).

How close fastsim comes to the lecture's printed figures (Llama-3.1-70B, 8 x H100, TP8, BF16,
context 4096); the first five are exact to the printed digits, all-reduce is not (see below):

=============================  =========  ==========  ===========================================
figure                         lecture    fastsim     why it differs
=============================  =========  ==========  ===========================================
weight read                    6.48 ms    6.483 ms    same formula
KV read, batch 1 / 64          0.06/4.01  0.063/4.006 same formula
compute, batch 1 / 64          0.03/2.02  0.031/2.019 same formula
2,048-token prefill compute    61.13 ms   61.13 ms    same formula
eager launch (80 x 27 x 4 us)  8.64 ms    8.64 ms     same count
all-reduce batch 1             0.98 ms    0.975 ms    alpha, eta fitted to it (SPEC §3)
all-reduce batch 64            2.08 ms    1.731 ms    the lecture's three all-reduce figures are
                                                      not on one alpha-beta line; fastsim fits
                                                      the batch-1 and prefill ones
all-reduce 2,048-token prefill 25.36 ms   25.53 ms    same fit, +0.7%
step, batch 1 fused + graphs   8.48 ms    8.48 ms     exact
step, batch 64                 13.53 ms   13.18 ms    -2.6%: the 0.35 ms all-reduce gap above
=============================  =========  ==========  ===========================================

The ladder's figures are compared in the docstring of :func:`ladder`.
"""
from __future__ import annotations

import math
from numbers import Integral, Real
from typing import NamedTuple, Sequence

import numpy as np

from .analytic import cost_usd_per_million_output_tokens as _analytic_cost
from .catalog import GPU, Model, Precision, default_catalog
from .errors import FastsimInputError, require_positive, require_tp  # noqa: F401
from .specdec import MTP, default_draft, mtp_model, spec_decoding
from .stepmodel import (P_ETA_BW, P_GPUS, P_HBM_BW, P_LAYERS, P_WDENSE, StepConstants, decode_attn_flops,
                        resolve_constants,
                        expert_share, kv_budget_tokens, layout_degrees, prefill_attn_flops, step_params, step_parts)

__all__ = [
    "LedgerResult", "SpeculativeResult", "ledger", "ledger_table", "speculative_step", "ladder", "ladder_draft",
    "memory_per_gpu",
    "speculative_tokens_per_round", "joules_per_token", "cost_usd_per_million_output_tokens",
    "weight_read_lower_bound_s", "min_tp_for_tpot", "md1_mean_wait_s", "plot_ledger",
    "KERNELS_PER_LAYER_EAGER", "KERNELS_PER_LAYER_FUSED", "LAUNCH_S_EAGER", "LAUNCH_S_GRAPHS",
    "BINDING",
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
    launch_s : float
        Total kernel-launch time of the step: ``layers x kernels_per_layer x launch time``.
    step_s : float
        ``max(weight_read_s + kv_read_s, compute_s) + allreduce_s + alltoall_s + launch_s``.
    binding : str
        The largest of memory side (weight + KV), compute, communication (all-reduce +
        all-to-all) and launch: one of
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


class SpeculativeResult(NamedTuple):
    """One round of speculative decoding (see :func:`speculative_step`).

    Attributes
    ----------
    draft : LedgerResult
        One draft-model decode step (the round runs ``gamma`` of them).
    verify : LedgerResult
        The target model's verify step over ``gamma + 1`` tokens per sequence.
    round_s : float
        ``gamma x draft.step_s + verify.step_s`` (s).
    tokens_per_round : float
        Expected output tokens per sequence per round, :func:`speculative_tokens_per_round`.
    tokens_per_s_per_gpu : float
        ``batch x tokens_per_round / round_s / TP``.
    memory_per_gpu_bytes : float
        HBM per GPU of both models together: both models' weights / TP plus both KV caches of
        ``batch x context`` tokens.
    memory_limit_per_gpu_bytes : float
        ``memory_utilization x HBM``.
    fits : bool
        ``memory_per_gpu_bytes <= memory_limit_per_gpu_bytes``.
    """

    draft: LedgerResult
    verify: LedgerResult
    round_s: float
    tokens_per_round: float
    tokens_per_s_per_gpu: float
    memory_per_gpu_bytes: float
    memory_limit_per_gpu_bytes: float
    fits: bool


# ----------------------------------------------------------------------------------------------
# validation and lookups


def _lookup(kind: str, value):
    cat = default_catalog()
    if kind == "model":
        return value if isinstance(value, Model) else cat.model(value)
    if kind == "gpu":
        return value if isinstance(value, GPU) else cat.gpu(value)
    return value if isinstance(value, Precision) else cat.precision(value)


def _int_at_least(field: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (Integral, Real)):
        raise FastsimInputError(field, value, f"an integer >= {low}")
    if not math.isfinite(float(value)) or float(value) != int(value) or int(value) < low:
        raise FastsimInputError(field, value, f"an integer >= {low}")
    return int(value)


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


def _acceptance(value) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not (0.0 <= float(value) < 1.0):
        raise FastsimInputError("acceptance", value, "a probability in [0, 1)")
    return float(value)


def _within_context(field: str, value: int, model: Model) -> int:
    """``value`` (tokens per sequence) or an error when it passes the model's context window."""
    if value > model.max_context_tokens:
        raise FastsimInputError(field, value, f"at most {model.max_context_tokens:,} tokens, the context "
                                              f"window of {model.name}")
    return value


# ----------------------------------------------------------------------------------------------
# small formulas (lecture section 7 exercises)


def speculative_tokens_per_round(acceptance: float, gamma: int) -> float:
    """Expected tokens produced per sequence per speculative-decoding round.

    ``(1 - a^(gamma + 1)) / (1 - a)``: the accepted prefix of ``gamma`` drafted tokens plus the one
    token the verify step always yields, with each draft token accepted independently with
    probability ``a``.

    Parameters
    ----------
    acceptance : float
        Per-token acceptance probability ``a``, in [0, 1).
    gamma : int
        Draft tokens per round, >= 1.

    Returns
    -------
    float
        Tokens per round, in [1, gamma + 1). Exercise 9: ``a = 0.8, gamma = 4`` gives 3.36.

    Raises
    ------
    FastsimInputError
        ``acceptance`` outside [0, 1) or ``gamma`` not an integer >= 1.

    References
    ----------
    Leviathan, Kalman, Matias, "Fast Inference from Transformers via Speculative Decoding",
    ICML 2023, eq. (1); lecture 16 exercise 9; SPEC §4.
    """
    a = _acceptance(acceptance)
    g = _int_at_least("gamma", gamma, 1)
    return (1.0 - a ** (g + 1)) / (1.0 - a)


def joules_per_token(power_w: float, gpus: int, tokens_per_s_per_gpu: float) -> float:
    """Energy per output token (J): ``power x GPUs / (tokens/s per GPU x GPUs)``.

    Parameters
    ----------
    power_w : float
        Board power of one GPU (W), > 0.
    gpus : int
        GPUs drawing that power, >= 1.
    tokens_per_s_per_gpu : float
        Output tokens/s per GPU, > 0.

    Returns
    -------
    float
        Joules per token. Exercise 10: ``700 W x 8 / (1261 x 8)`` = 0.555 J.

    Raises
    ------
    FastsimInputError
        A non-positive or non-finite argument.

    Notes
    -----
    Board power at full load is assumed for every GPU; idle power and the host are not counted.
    Source: lecture 16 exercise 10; SPEC §4.
    """
    p = _positive("power_w", power_w)
    n = _int_at_least("gpus", gpus, 1)
    t = _positive("tokens_per_s_per_gpu", tokens_per_s_per_gpu)
    return p * n / (t * n)


def _positive(field: str, value) -> float:
    if not isinstance(value, Real):
        raise FastsimInputError(field, value, "a finite number > 0")
    return require_positive(field, value)


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
    :func:`fastsim.analytic.cost_usd_per_million_output_tokens` (which broadcasts over arrays and
    does not check). Source: SPEC §1 (cost per million output tokens, "integer cost" when ``gpus``
    counts whole instances), lecture 16 exercise 2.
    """
    n = _int_at_least("gpus", gpus, 1)
    price = _positive("price_usd_per_gpu_hour", price_usd_per_gpu_hour)
    rate = _positive("rate_req_per_s", rate_req_per_s)
    out = _positive("mean_output_tokens", mean_output_tokens)
    return float(_analytic_cost(n, price, rate, out))


def md1_mean_wait_s(arrival_rate_req_per_s, service_s):
    """Mean wait in queue of an M/D/1 server (Pollaczek-Khinchine with deterministic service).

    ``rho = lambda x S``; ``W = rho x S / (2 (1 - rho))`` for ``rho < 1``, ``inf`` otherwise.

    Parameters
    ----------
    arrival_rate_req_per_s : float or ndarray(float64)
        Poisson arrival rate lambda (1/s).
    service_s : float or ndarray(float64)
        Deterministic service time S (s); broadcast against the rate.

    Returns
    -------
    ndarray(float64) or float
        Mean time spent waiting before service starts (s), shape of the broadcast inputs (a numpy
        float64 scalar for scalar inputs); NaN where ``rho`` is NaN.

    Notes
    -----
    Inputs are not validated: nothing is raised (a negative input gives a meaningless wait).
    Source: SPEC §5 (prefill instance), lecture 16 §2.2 and its lecture 5 §4.
    """
    lam = np.asarray(arrival_rate_req_per_s, dtype=np.float64)
    s = np.asarray(service_s, dtype=np.float64)
    rho = lam * s
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(rho < 1.0, rho * s / (2.0 * (1.0 - rho)), np.inf)
    w = np.where(np.isnan(rho), np.nan, w)
    return w[()] if w.ndim == 0 else w


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
    request ``1 / batch`` of a step.
    """
    w, kv, comp, ar, a2a = step_parts(p, n_tokens, kv_tokens, attn_flops)
    p = np.asarray(p, dtype=np.float64)
    gpus = p[..., P_GPUS]
    expert = w - p[..., P_WDENSE] / (p[..., P_ETA_BW] * p[..., P_HBM_BW])
    launch = p[..., P_LAYERS] * kernels_per_layer * launch_s
    mem = w + kv
    comm = ar + a2a
    step = np.maximum(mem, comp) + comm + launch
    stacked = np.stack(np.broadcast_arrays(mem, comp, comm, launch), axis=-1)
    code = np.argmax(stacked, axis=-1)          # first maximum: ties go to the earlier name
    tps = n_tokens / step / gpus
    is_pf = np.asarray(prefill, dtype=np.float64) > 0
    b = np.asarray(batch, dtype=np.float64)
    util = rate * step * np.where(is_pf, 1.0, output_tokens) / b
    wait = np.where(is_pf, md1_mean_wait_s(rate / b, step), np.nan)
    return dict(weight_read_s=w, kv_read_s=kv, compute_s=comp, allreduce_s=ar, launch_s=launch,
                step_s=step, binding_code=code, n_tokens=n_tokens, tokens_per_s_per_gpu=tps,
                utilization=util, queue_wait_s=wait, expert_read_s=np.maximum(expert, 0.0), alltoall_s=a2a)


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
                 layout: str = "tp", output_tokens: float | None = None):
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

    Returns
    -------
    pandas.DataFrame
        One row per configuration: ``len(gpu) x len(precision) x len(tp) x len(batch) x
        (len(context_tokens) x decode values + prefill values)`` rows, where decode values is 1
        when 0 is among ``prefill_tokens`` (else 0) and prefill values the number of distinct
        non-zero ``prefill_tokens``. Columns: ``gpu``, ``precision`` (str), ``tp``, ``batch``,
        ``context_tokens``, ``prefill_tokens`` (int64), then the :class:`LedgerResult` fields
        (float64 seconds and bytes, ``binding`` str, ``fits`` bool).

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

    hw = [(g, pr, t) for g in gpus for pr in precs for t in tps]
    P = np.stack([step_params(m, g, pr, t, constants, dp=layout_degrees(layout, t)[0],
                              ep=layout_degrees(layout, t)[1]) for g, pr, t in hw])  # (h, N_PARAMS)
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
    }
    for k in LedgerResult._fields:
        if k == "binding":
            cols[k] = np.asarray(BINDING, dtype=object)[np.broadcast_to(d["binding_code"], (h, w)).ravel()]
        elif k == "fits":
            cols[k] = np.broadcast_to(np.asarray(d[k], dtype=bool), (h, w)).ravel()
        else:
            cols[k] = np.broadcast_to(np.asarray(d[k], dtype=np.float64), (h, w)).ravel()
    return pd.DataFrame(cols)


# ----------------------------------------------------------------------------------------------
# speculative decoding and the ladder


def speculative_step(model, draft_model, gpu, precision, tp: int, *, batch: int = 1,
                     context_tokens: int = 4096, acceptance: float = 0.8, gamma: int = 4,
                     kernels_per_layer: int = KERNELS_PER_LAYER_FUSED, launch_s: float = LAUNCH_S_GRAPHS,
                     constants: StepConstants = StepConstants()) -> SpeculativeResult:
    """Ledger of one speculative-decoding round (SPEC §4, lecture 16 exercise 9).

    A round is ``gamma`` decode steps of the draft model (same precision, same TP group, batch
    ``b``, KV of ``b x context``) plus one verify step of the target over ``gamma + 1`` tokens per
    sequence: ``n_tokens = b (gamma + 1)``, KV read of ``b x context``, attention of
    ``b (gamma + 1)`` tokens at ``context``. It yields ``b x`` :func:`speculative_tokens_per_round`
    tokens. The context growth within a round (at most ``gamma`` tokens) is neglected.

    Parameters
    ----------
    model, draft_model : str or Model
        Target and draft models. ``draft_model`` ``"mtp"`` is a one-layer multi-token-prediction
        / EAGLE-style head of the target (:func:`fastsim.specdec.mtp_model`): its step is one
        decoder layer of the target plus the output head, and its memory is that layer and the
        ``2 hidden x hidden`` projection (the embedding and output head are the target's own).
        The projection's read is not added to the draft step (under 10% of it for DeepSeek-V3).
    gpu, precision : str or catalog entry
    tp : int
        Tensor parallelism shared by both models (power of two, 1..64).
    batch, context_tokens : int
        As in :func:`ledger`.
    acceptance : float, default 0.8
        Per-token acceptance probability, in [0, 1).
    gamma : int, default 4
        Draft tokens per round, >= 1.
    kernels_per_layer, launch_s, constants
        As in :func:`ledger`, for both models.

    Returns
    -------
    SpeculativeResult
        With the memory check of both models on the same GPUs (``fits``).

    Raises
    ------
    FastsimInputError
        As :func:`ledger`, and for ``acceptance`` outside [0, 1) or ``gamma`` < 1.

    References
    ----------
    Leviathan, Kalman, Matias, "Fast Inference from Transformers via Speculative Decoding",
    ICML 2023.
    """
    tpr = speculative_tokens_per_round(acceptance, gamma)
    g_ = int(gamma)
    m = _lookup("model", model)
    mtp = _is_mtp(draft_model)
    d = mtp_model(m) if mtp else _lookup("model", draft_model)
    gp, pr = _lookup("gpu", gpu), _lookup("precision", precision)
    tp = require_tp("tp", tp)
    b = _int_at_least("batch", batch, 1)
    ctx = _within_context("context_tokens", _int_at_least("context_tokens", context_tokens, 0), m)
    kpl, ls = _check_launch(kernels_per_layer, launch_s)
    draft = ledger(d, gp, pr, tp, batch=b, context_tokens=ctx, kernels_per_layer=kpl, launch_s=ls,
                   constants=constants)
    if mtp:
        # the head shares the target's embedding and output head (no memory of its own) and adds
        # the 2 hidden x hidden projection of DeepSeek-V3 §2.2 (fastsim.specdec.mtp_model)
        shared = d.vocab * d.hidden * (1 if d.tied_embeddings else 2)
        extra = (2.0 * d.hidden * d.hidden - shared) * pr.weight_bytes / tp
        draft = draft._replace(memory_per_gpu_bytes=draft.memory_per_gpu_bytes + extra)
    p = step_params(m, gp, pr, tp, constants)
    n = float(b * (g_ + 1))
    held = float(b * m.kv_tokens_held(ctx))
    verify = _result(_core(p, n, held, decode_attn_flops(m.layers, m.attn_dim_decode, n * m.kv_tokens_held(ctx)),
                           kpl, ls, math.nan)
                     | memory_per_gpu(m, gp, pr, tp, held, constants))
    round_s = g_ * draft.step_s + verify.step_s
    used = verify.memory_per_gpu_bytes + draft.memory_per_gpu_bytes    # both models, both caches
    limit = verify.memory_limit_per_gpu_bytes
    return SpeculativeResult(draft=draft, verify=verify, round_s=round_s, tokens_per_round=tpr,
                             tokens_per_s_per_gpu=b * tpr / round_s / tp, memory_per_gpu_bytes=used,
                             memory_limit_per_gpu_bytes=limit, fits=bool(used <= limit))


_LADDER = (
    # level, change, batch, precision, kernels per layer, launch s, speculative
    (0, "naive eager", 1, "BF16", KERNELS_PER_LAYER_EAGER, LAUNCH_S_EAGER, False),
    (1, "+ CUDA Graphs", 1, "BF16", KERNELS_PER_LAYER_EAGER, LAUNCH_S_GRAPHS, False),
    (2, "+ fusion", 1, "BF16", KERNELS_PER_LAYER_FUSED, LAUNCH_S_GRAPHS, False),
    (3, "+ batching", 64, "BF16", KERNELS_PER_LAYER_FUSED, LAUNCH_S_GRAPHS, False),
    (4, "+ FP8 weights and KV", 64, "FP8", KERNELS_PER_LAYER_FUSED, LAUNCH_S_GRAPHS, False),
    (5, "+ speculative decoding", 64, "FP8", KERNELS_PER_LAYER_FUSED, LAUNCH_S_GRAPHS, True),
    (5, "speculative decoding at batch 1 (control)", 1, "FP8", KERNELS_PER_LAYER_FUSED, LAUNCH_S_GRAPHS, True),
)
_CONTROL_ROW = len(_LADDER) - 1


def _is_mtp(draft) -> bool:
    return isinstance(draft, str) and draft.strip().lower() == MTP


def ladder_draft(model, draft_model=None, catalog=None) -> str:
    """The draft of the ladder's level 5, chosen and checked as ``fastsim plan`` / ``simulate`` do.

    Parameters
    ----------
    model : str or Model
        The target.
    draft_model : str, Model or None
        None picks :func:`fastsim.specdec.default_draft` (the smallest catalog model of the
        target's family with its vocabulary and at most a quarter of its parameters, else
        ``"mtp"``); ``"mtp"``; a catalog name, ``config.json`` path or :class:`Model`, which
        must have the target's vocabulary size, not be the target and be smaller than it.
    catalog : Catalog, optional
        Where drafts are looked up; defaults to the built-in catalog.

    Returns
    -------
    str or Model
        ``"mtp"``, a catalog model name, or ``draft_model`` itself when it is a Model or a path.

    Raises
    ------
    FastsimInputError
        An unknown draft, or one that :func:`fastsim.specdec.spec_decoding` refuses (another
        vocabulary, the target itself, not smaller than the target), field ``draft_model``.
    """
    cat = catalog or default_catalog()
    m = model if isinstance(model, Model) else cat.model(model)
    if draft_model is None:
        return default_draft(m, cat)
    if _is_mtp(draft_model):
        return MTP
    if isinstance(draft_model, Model):
        d = draft_model
        if d.vocab != m.vocab:
            why = (f"a model with {m.name}'s vocabulary of {m.vocab:,} tokens (the draft proposes token ids the target "
                   f"scores; {d.name} has {d.vocab:,}), or 'mtp'")
        elif d.name == m.name:
            why = f"a model other than the target {m.name}, or 'mtp'"
        elif d.total_params >= m.total_params:
            why = (f"a model smaller than the target {m.name} ({m.total_params / 1e9:.1f}B parameters; {d.name} has "
                   f"{d.total_params / 1e9:.1f}B), or 'mtp'")
        else:
            return d
        raise FastsimInputError("draft_model", d.name, why)
    try:
        name = spec_decoding(1, 0.5, draft_model, m, catalog=cat).draft
    except FastsimInputError as exc:
        if exc.field == "draft":
            raise FastsimInputError("draft_model", exc.value, exc.allowed) from None
        raise
    return name


def ladder(model="llama-3.1-70b", gpu="H100", tp: int = 8, context_tokens: int = 4096,
           price_usd_per_gpu_hour: float | None = None, power_w: float | None = None,
           draft_model=None, acceptance: float = 0.8, gamma: int = 4,
           constants: StepConstants = StepConstants(), catalog=None):
    """The optimization ladder: levels 0-5 of SPEC §4 and a batch-1 control row of level 5.

    ====  ============================  =====  =========  =============
    lvl   change                        batch  precision  launch
    ====  ============================  =====  =========  =============
    0     naive eager                   1      BF16       27 x 4 us
    1     + CUDA Graphs                 1      BF16       27 x 1 us
    2     + fusion                      1      BF16       12 x 1 us
    3     + batching                    64     BF16       12 x 1 us
    4     + FP8 weights and KV          64     FP8        12 x 1 us
    5     + speculative decoding        64     FP8        12 x 1 us
    5     control: level 5 at batch 1   1      FP8        12 x 1 us     (``control`` True)
    ====  ============================  =====  =========  =============

    Levels 0-4 are decode steps of :func:`ledger`; level 5 is a round of
    :func:`speculative_step` (``step_s`` is then the round time and ``tokens_per_step`` the
    expected tokens per sequence per round, 3.36 at ``a = 0.8, gamma = 4``).

    How close fastsim comes (70B, 8 x H100, TP8, context 4096, $2/GPU-hour, 700 W):

    =======================  ==========  ========  ==========================================
    figure                   lecture     fastsim   why it differs
    =======================  ==========  ========  ==========================================
    level 0 tokens/s/GPU     7.7 (a)     7.73      exact (16.16 ms step)
    level 2 tokens/s/GPU     15          14.7      exact step (8.48 ms); the lecture rounds
    level 3 tokens/s/GPU     591         607       +2.7%: step 13.18 ms vs 13.53 ms, all the
                                                   gap is the batch-64 all-reduce (1.73 vs
                                                   2.08 ms, SPEC §3). The overlapped step
                                                   max(weight + KV, compute) + all-reduce +
                                                   launch lands within 5% (so does it with
                                                   the planner's 1 ms overhead in place of
                                                   launches: 13.22 ms, 605, +2.4%); summing
                                                   compute instead of overlapping it gives
                                                   15.20 ms and 526 (-11%), outside 5%
    level 4 tokens/s/GPU     (none)      1,008     step 7.94 ms (weights and KV halve)
    level 5 tokens/s/GPU     1,261       1,393     +10%, from the same all-reduce gap: for
                                                   the verify step's 320 tokens (64 x 5)
                                                   fastsim's all-reduce gives 4.80 ms
                                                   where a line through the lecture's batch-1
                                                   and batch-64 figures gives 6.55 ms; with
                                                   that value level 5 reads 1,277 (+1.3%).
                                                   Round: 4 x 2.07 ms draft + 11.01 ms verify
    level 5 / level 0        163x        180x      +10%, from level 5 (level 0 is exact);
                                                   165x with the lecture's all-reduce line
    J/token at level 5       0.56        0.50      -10%, from level 5 (700 x 8 / (1393 x 8));
                                                   0.548 with the lecture's all-reduce line
    =======================  ==========  ========  ==========================================

    (a) implied by 1,261 / 163.

    Parameters
    ----------
    model, gpu : str or catalog entry
        Target model and GPU.
    tp : int, default 8
        Tensor parallelism (GPUs of the one instance), power of two.
    context_tokens : int, default 4096
        Cached tokens per sequence.
    price_usd_per_gpu_hour : float, optional
        Defaults to the GPU's catalog price.
    power_w : float, optional
        Defaults to the GPU's catalog board power.
    draft_model : str or Model, optional
        Draft model of level 5 (same precision, same TP group), chosen and checked by
        :func:`ladder_draft` as ``fastsim plan`` and ``simulate`` choose theirs: by default the
        smallest catalog model of the target's family with its vocabulary (Llama-3.1-70B and
        -405B: ``llama-3.1-8b``; Qwen3-235B-A22B: ``qwen3-30b-a3b``; gpt-oss-120b:
        ``gpt-oss-20b``), else ``"mtp"``, a one-layer multi-token-prediction head of the target
        (DeepSeek-V3); ``"mtp"`` may be named.
    acceptance : float, default 0.8
        Per-token acceptance probability of the draft, in [0, 1).
    gamma : int, default 4
        Draft tokens per round, >= 1.
    constants : StepConstants
    catalog : Catalog, optional
        Where the default draft is looked for (and draft names resolved); defaults to the
        built-in catalog.

    Returns
    -------
    pandas.DataFrame
        Seven rows. Columns: ``level`` (int64), ``control`` (bool: True only on the last row, the
        batch-1 control of level 5, so ``(level, control)`` names a row), ``change`` (str),
        ``draft`` (str: the draft model's name on the level-5 rows, ``"mtp"`` for the head, empty
        on levels 0-4),
        ``batch`` (int64), ``precision`` (str), ``kernels_per_layer`` (int64), ``launch_us``
        (float64, per launch), ``step_s`` (float64, s; a whole round at level 5),
        ``tokens_per_step`` (float64), ``tokens_per_s_per_gpu``, ``usd_per_million_tokens``
        (price x GPUs / tokens per hour x 1e6), ``joules_per_token`` (power x GPUs / tokens per
        s), ``speedup_vs_level0`` (float64), ``memory_per_gpu_bytes``,
        ``memory_limit_per_gpu_bytes`` (float64: weights / TP + KV of batch x context per GPU,
        both models at level 5, against ``memory_utilization x HBM``) and ``fits`` (bool). Rows
        that do not fit are computed all the same; their figures describe a setup that cannot
        run.

    Raises
    ------
    FastsimInputError
        Unknown names, TP not a power of two, ``context_tokens`` < 0 or past the model's context
        window, a GPU without an FP8 peak (levels 4 and 5 run in FP8), non-positive price or
        power, ``acceptance`` outside [0, 1), ``gamma`` < 1, a draft :func:`ladder_draft` refuses
        (another vocabulary: the draft proposes token ids the target scores).

    Notes
    -----
    Sources: SPEC §4; lecture 16 §1.3 and exercises 1, 9, 10; Leviathan et al. 2023 for the
    speculative round.
    """
    import pandas as pd

    cat = catalog or default_catalog()
    m = model if isinstance(model, Model) else cat.model(model)
    g = gpu if isinstance(gpu, GPU) else cat.gpu(gpu)
    choice = ladder_draft(m, draft_model, cat)
    d = choice if isinstance(choice, Model) else (MTP if choice == MTP else cat.model(choice))
    draft_name = MTP if choice == MTP else (choice if isinstance(choice, str) else d.name)
    tp = require_tp("tp", tp)
    ctx = _within_context("context_tokens", _int_at_least("context_tokens", context_tokens, 0), m)
    if d != MTP:
        _within_context("context_tokens", ctx, d)
    for prec in dict.fromkeys(row[3] for row in _LADDER):
        pr = _lookup("precision", prec)
        if pr.flops_key not in g.peak_flops_per_s:
            levels = ", ".join(str(lv) for lv in dict.fromkeys(row[0] for row in _LADDER if row[3] == prec))
            with_it = [x.name for x in default_catalog().gpus.values() if pr.flops_key in x.peak_flops_per_s]
            levels = " and ".join(levels.rsplit(", ", 1))
            peaks = ", ".join(k.upper() for k in g.peak_flops_per_s)
            raise FastsimInputError("gpu", g.name, f"a GPU with a peak for {pr.name}: the ladder's levels {levels} "
                                    f"run in {pr.name} and {g.name} has a peak for {peaks} only"
                                    + (f" (catalog GPUs that have one: {', '.join(with_it)})" if with_it else ""))
    price = g.price_usd_per_hour if price_usd_per_gpu_hour is None else _positive("price_usd_per_gpu_hour",
                                                                                    price_usd_per_gpu_hour)
    power = g.power_w if power_w is None else _positive("power_w", power_w)
    speculative_tokens_per_round(acceptance, gamma)      # validates before any work
    rows = []
    for i, (level, change, b, prec, kpl, ls, spec) in enumerate(_LADDER):
        pr = _lookup("precision", prec)
        if spec:
            r = speculative_step(m, d, g, pr, tp, batch=b, context_tokens=ctx, acceptance=acceptance,
                                 gamma=gamma, kernels_per_layer=kpl, launch_s=ls, constants=constants)
            step, per_step, tps = r.round_s, r.tokens_per_round, r.tokens_per_s_per_gpu
        else:
            r = ledger(m, g, pr, tp, batch=b, context_tokens=ctx, kernels_per_layer=kpl, launch_s=ls,
                       constants=constants)
            step, per_step, tps = r.step_s, 1.0, r.tokens_per_s_per_gpu
        # the cost formula of SPEC §1 with the instance's tokens/s as the rate, one token each
        rows.append(dict(level=level, control=i == _CONTROL_ROW, change=change, draft=draft_name if spec else "",
                         batch=b, precision=pr.name,
                         kernels_per_layer=kpl, launch_us=ls * 1e6, step_s=step, tokens_per_step=per_step,
                         tokens_per_s_per_gpu=tps,
                         usd_per_million_tokens=float(_analytic_cost(tp, price, tps * tp, 1.0)),
                         joules_per_token=joules_per_token(power, tp, tps),
                         memory_per_gpu_bytes=float(r.memory_per_gpu_bytes),
                         memory_limit_per_gpu_bytes=float(r.memory_limit_per_gpu_bytes), fits=bool(r.fits)))
    df = pd.DataFrame(rows)
    df.insert(df.columns.get_loc("joules_per_token") + 1, "speedup_vs_level0",
              df["tokens_per_s_per_gpu"] / df["tokens_per_s_per_gpu"].iloc[0])
    return df


# ----------------------------------------------------------------------------------------------
# plot


_PLOT_PARTS = (("weight_read_s", "weight read"), ("kv_read_s", "KV read"),
               ("compute_excess_s", "compute beyond memory"), ("allreduce_s", "all-reduce"),
               ("launch_s", "kernel launch"))


def plot_ledger(results, path, labels: Sequence[str] | None = None, title: str = "Token ledger"):
    """Stacked bars of the step parts per configuration, saved as a figure (matplotlib Agg canvas).

    Each bar stacks weight read, KV read, the part of compute not hidden under the memory side
    (``max(0, compute - weight - KV)``), all-reduce and kernel launch, so its height is the step
    time in ms. A tick marks the full compute time of each bar.

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
    df = df.assign(compute_excess_s=np.maximum(0.0, df["compute_s"] - df["weight_read_s"] - df["kv_read_s"]))

    x = np.arange(len(df))
    # A Figure on its own Agg canvas: no pyplot, so the caller's backend and figures are untouched.
    fig = Figure(figsize=(max(5.0, 0.8 * len(df) + 2.0), 4.0))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    bottom = np.zeros(len(df))
    for col, name in _PLOT_PARTS:
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
