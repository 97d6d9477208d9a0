"""Closed forms every stage shares: cost, instance counts, the M/D/1 wait, speculative tokens, energy.

Small formulas with no model of a step behind them, each from one source, kept here so that the
step model, the analytic screen and the ledger all read them from below:

* :func:`cost_usd_per_million_output_tokens`: ``GPUs x price / (rate x mean O x 3600) x 1e6``
  (SPEC section 1, "cost per million output tokens"; lecture 16 exercise 2);
* :func:`instances_needed`: whole instances to carry a rate, ``ceil(rate / capacity)`` (SPEC
  section 5, "instances are whole"; lecture 16 exercise 6);
* :func:`md1_mean_wait_s`: the mean wait of an M/D/1 server, ``rho S / (2 (1 - rho))``
  (Pollaczek-Khinchine with deterministic service; SPEC section 5, prefill instance);
* :func:`speculative_tokens_per_round`: ``(1 - a^(gamma + 1)) / (1 - a)`` tokens per
  speculative-decoding round (Leviathan, Kalman, Matias, ICML 2023, eq. 1; SPEC section 4);
* :func:`joules_per_token`: board power over token throughput (SPEC section 4; lecture 16
  exercise 10);
* :func:`expected_max_std_normal`: the mean of the largest of ``n`` standard normal variates
  (Harter, Biometrika 48, 1961);
* :func:`ep_busiest_rank_factor`: the busiest expert-parallel rank's routed load over the mean,
  ``1 + z_G x cv x sqrt(G / E)`` (step model v2, docs/STEP_MODEL.md);
* :func:`decode_attn_flops`, :func:`prefill_attn_flops`: attention FLOPs of decode tokens and of
  a causal prefill chunk (SPEC §3);
* :func:`gemm_blend_s`: a GEMM's time as the p-norm of its memory and compute times (step model
  v2, docs/STEP_MODEL.md; ``p`` fitted to Vidur's H100 matmul profiles).

The array forms (cost, instances, wait) broadcast and do not validate; the scalar forms
(tokens per round, joules per token, the order statistic, the busiest rank) check their arguments and raise
:class:`fastsim.errors.FastsimInputError`.
"""
from __future__ import annotations

import functools
import math
from numbers import Integral, Real

import numpy as np
from numba import njit, vectorize

from .errors import FastsimInputError, require_positive

__all__ = ["cost_usd_per_million_output_tokens", "instances_needed", "md1_mean_wait_s",
           "speculative_tokens_per_round", "joules_per_token", "expected_max_std_normal", "ep_busiest_rank_factor",
           "decode_attn_flops", "prefill_attn_flops", "gemm_blend_s", "dispatch_copies", "MOE_DISPATCH"]

#: Largest count :func:`instances_needed` returns: every count up to it is exact in float64, and
#: it times any GPU count of an instance stays far inside int64 (no overflow, however large the rate).
_INSTANCES_CEILING = 2.0 ** 53


# ----------------------------------------------------------------------------------------------
# checks of the scalar forms (the ledger uses them too)


def _int_at_least(field: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (Integral, Real)):
        raise FastsimInputError(field, value, f"an integer >= {low}")
    if not math.isfinite(float(value)) or float(value) != int(value) or int(value) < low:
        raise FastsimInputError(field, value, f"an integer >= {low}")
    return int(value)


def _acceptance(value) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not (0.0 <= float(value) < 1.0):
        raise FastsimInputError("acceptance", value, "a probability in [0, 1)")
    return float(value)


def _positive(field: str, value) -> float:
    if not isinstance(value, Real):
        raise FastsimInputError(field, value, "a finite number > 0")
    return require_positive(field, value)


# ----------------------------------------------------------------------------------------------
# the closed forms


def cost_usd_per_million_output_tokens(gpus, price_usd_per_gpu_hour, rate_req_per_s, mean_output_tokens):
    """Cost per million output tokens (SPEC §1; lecture exercise 2).

    ``gpus x price / (rate x mean O x 3600) x 1e6``; broadcasts over arrays. Inputs are not
    validated (a zero rate gives inf).

    Parameters
    ----------
    gpus : int or array_like
        GPUs of the plan.
    price_usd_per_gpu_hour : float or array_like
        Price of one GPU (US dollars per hour).
    rate_req_per_s : float or array_like
        Request rate served (req/s): the target rate for the integer cost, the capacity for the
        efficiency cost.
    mean_output_tokens : float or array_like
        Mean output tokens per request.

    Returns
    -------
    ndarray(float64)
        US dollars per million output tokens, shape of the broadcast inputs (0-d for scalars).

    Examples
    --------
    >>> round(cost_usd_per_million_output_tokens(2, 4.0, 20, 250), 3)
    0.444
    """
    return np.asarray(gpus, dtype=np.float64) * price_usd_per_gpu_hour / (
        np.asarray(rate_req_per_s, dtype=np.float64) * mean_output_tokens * 3600.0) * 1e6


def instances_needed(rate_req_per_s, capacity_req_per_s):
    """Whole instances to carry a rate: ``ceil(rate / capacity)`` (lecture exercise 6: 20 / 16.2 -> 2).

    A relative tolerance of 1e-9 keeps 20 / 10 from rounding up to 3; capacity <= 0 gives 0
    (infeasible). Counts saturate at 2**53 (a rate of 1e21 req/s gives 2**53, never an int64
    overflow); the screen calls a count above :data:`fastsim.analytic.MAX_INSTANCES` infeasible.

    Parameters
    ----------
    rate_req_per_s : float or array_like
        Rate to carry (req/s).
    capacity_req_per_s : float or array_like
        Capacity of one instance (req/s).

    Returns
    -------
    ndarray(int64)
        Instances (from 1 to 2**53 where capacity > 0, else 0), shape of the broadcast inputs
        (0-d for scalars).

    Notes
    -----
    Source: SPEC §5 ("instances are whole"); lecture 16 exercise 6.
    """
    cap = np.asarray(capacity_req_per_s, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        n = np.ceil(np.asarray(rate_req_per_s, dtype=np.float64) / cap * (1.0 - 1e-9))
    n = np.where((cap > 0) & ~np.isnan(n), np.clip(n, 1.0, _INSTANCES_CEILING), 0.0)
    return n.astype(np.int64)


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


def expected_max_std_normal(n: int) -> float:
    """The mean of the largest of ``n`` independent standard normal variates.

    ``E[max] = integral of x n phi(x) Phi(x)^(n - 1) dx``, by quadrature (scipy.integrate.quad).

    Parameters
    ----------
    n : int
        How many variates, >= 1.

    Returns
    -------
    float
        0 for 1 (exactly), 0.5642 for 2 (``1 / sqrt(pi)``), 1.0294 for 4, 1.4236 for 8, 1.7660 for 16.

    Raises
    ------
    FastsimInputError
        ``n`` not an integer >= 1.

    Notes
    -----
    Source: Harter, "Expected values of normal order statistics", Biometrika 48 (1961), 151-165
    (tabulated: 0.5642, 1.0294, 1.4236 for 2, 4, 8); Royston, Applied Statistics 31 (1982),
    algorithm AS 177, computes them.
    """
    return _expected_max(_int_at_least("n", n, 1))


@functools.lru_cache(maxsize=256)
def _expected_max(n: int) -> float:
    if n == 1:
        return 0.0
    from scipy import integrate, special, stats
    dens = (lambda x: x * n * math.exp(stats.norm.logpdf(x) + (n - 1) * special.log_ndtr(x)))
    return float(integrate.quad(dens, -12.0, 12.0, points=[0.0, 3.0], limit=200, epsabs=1e-12)[0])


#: How an expert-parallel MoE layer moves its tokens (:attr:`fastsim.stepmodel.StepConstants.moe_dispatch`;
#: :func:`dispatch_copies`).
MOE_DISPATCH = ("per_expert", "per_rank", "allgather")


def dispatch_copies(n_experts: int, experts_per_token: int, ep: int, rule: str = "per_expert") -> float:
    """Copies of a token's hidden state an expert-parallel MoE layer's dispatch moves (its combine the same).

    The all-to-all's volume (SPEC §10; :mod:`fastsim.stepmodel`) is ``(G-1)/G x n_tokens x copies / G``
    hidden states a rank receives, ``G`` the EP ranks:

    - ``"per_expert"`` (SPEC §10): one copy per routed expert, ``k``.
    - ``"per_rank"``: one copy per *rank* holding one of the token's experts, the expected number of
      distinct ranks among its ``k`` experts under uniform routing, ``sum over ranks of (1 - C(E - s, k)
      / C(E, k))`` for a rank of ``s`` experts (the ``k`` distinct experts are drawn without
      replacement; the ranks hold ``floor(E / G)`` or ``ceil(E / G)`` experts, ``E mod G`` of them the
      larger count), ``G x (1 - C(E - E/G, k) / C(E, k))`` where ``G`` divides ``E``. DeepEP's
      dispatch sends a token once to each rank that needs it and its combine reduces on the rank
      before sending back (deepseek-ai/DeepEP README; DeepSeek-V3 report,
      arXiv:2412.19437, §3.2, once per node across nodes). ``<= min(k, G)``.
    - ``"allgather"``: every rank receives every other rank's tokens (an AllGather before the
      experts, a ReduceScatter after), ``G`` copies whatever the routing. TensorRT-LLM's attention-DP
      MoE takes this path unless its EP degree exceeds ``k`` on an MNNVL (GB200 NVL72) domain or
      with DeepEP enabled (``tensorrt_llm/_torch/modules/fused_moe``, ``select_alltoall_method_type``:
      ``moe_ep_size <= top_k`` returns ``NotEnabled``); vLLM's ``naive`` all2all backend likewise
      broadcasts every token.

    Parameters
    ----------
    n_experts : int
        Routed experts ``E``, >= 1.
    experts_per_token : int
        Routed experts per token ``k``, 1 to ``n_experts``.
    ep : int
        Expert-parallel ranks ``G``, 1 to ``n_experts``.
    rule : str
        One of :data:`MOE_DISPATCH`.

    Returns
    -------
    float
        Copies per token, > 0. Qwen3-30B-A3B (``E`` = 128, ``k`` = 8) at ``G`` = 2: ``per_expert`` 8,
        ``per_rank`` 1.994, ``allgather`` 2.

    Raises
    ------
    FastsimInputError
        A count out of range, or an unknown ``rule``.
    """
    e = _int_at_least("n_experts", n_experts, 1)
    k = _int_at_least("experts_per_token", experts_per_token, 1)
    g = _int_at_least("ep", ep, 1)
    if k > e:
        raise FastsimInputError("experts_per_token", experts_per_token, f"at most n_experts ({e})")
    if g > e:
        raise FastsimInputError("ep", ep, f"at most n_experts ({e})")
    if rule not in MOE_DISPATCH:
        raise FastsimInputError("moe_dispatch", rule, "one of " + ", ".join(MOE_DISPATCH))
    if rule == "per_expert":
        return float(k)
    if rule == "allgather":
        return float(g)
    # ranks hold floor(E/G) or ceil(E/G) experts (E mod G of them the larger count); a rank of s experts
    # receives the token unless its k draws without replacement all avoid them: C(E - s, k) / C(E, k)
    lo, big = divmod(e, g)
    total = 0.0
    for size, ranks in ((lo, g - big), (lo + 1, big)):
        if ranks == 0:
            continue
        miss = 1.0
        for i in range(k):
            miss *= max(e - size - i, 0) / (e - i)
        total += ranks * (1.0 - miss)
    return total


def ep_busiest_rank_factor(n_experts: int, ep: int, expert_load_cv: float) -> float:
    """The busiest expert-parallel rank's routed tokens over the mean rank's (a step waits for it).

    ``1 + z_G x cv x sqrt(G / E)``: each of the ``E`` experts receives a step's routed tokens with
    coefficient of variation ``cv`` around the mean; a rank holds ``E / G`` of them, so its load,
    their sum, varies with ``cv x sqrt(G / E)`` around the mean rank's, and the largest of the
    ``G`` ranks' loads lies ``z_G`` = :func:`expected_max_std_normal` ``(G)`` of those above it (a
    normal approximation; measuring the ranks against their own mean, which the total fixes, leaves
    the maximum's excess unchanged). One rank (``G = 1``, tensor-sharded experts: every GPU computes
    a slice of every expert) or ``cv = 0`` (uniform routing, SPEC §10) gives exactly 1.0; an ``E``
    that ``G`` does not divide is taken at ``E / G`` experts a rank.

    Parameters
    ----------
    n_experts : int
        Routed experts ``E``, >= 1.
    ep : int
        Expert-parallel ranks ``G``, 1 to ``n_experts`` (1: the experts are tensor-sharded).
    expert_load_cv : float
        Coefficient of variation of an expert's routed tokens in a step, >= 0.

    Returns
    -------
    float
        >= 1. Qwen3-235B-A22B (``E`` = 128) at EP8 with ``cv`` = 1: ``1 + 1.4236 x sqrt(8 / 128)`` = 1.356.

    Raises
    ------
    FastsimInputError
        ``n_experts`` not a positive integer, ``ep`` not an integer from 1 to ``n_experts``,
        ``expert_load_cv`` negative or not finite.

    Notes
    -----
    Source: the routed load's imbalance across experts, which the DeepSeek-V3 technical report
    (arXiv:2412.19437, §3.4) answers in serving with redundant copies of the busiest experts; the
    order statistic from :func:`expected_max_std_normal`. docs/STEP_MODEL.md, ``moe_load_cv``.
    """
    e = _int_at_least("n_experts", n_experts, 1)
    g = _int_at_least("ep", ep, 1)
    if g > e:
        raise FastsimInputError("ep", ep, f"an integer from 1 to n_experts ({e}): a rank holds one expert at least")
    cv = float(expert_load_cv) if isinstance(expert_load_cv, Real) and not isinstance(expert_load_cv, bool) else -1.0
    if not (0.0 <= cv < math.inf):
        raise FastsimInputError("expert_load_cv", expert_load_cv, "a finite number >= 0")
    if g == 1 or cv == 0.0:
        return 1.0
    return 1.0 + _expected_max(g) * cv * math.sqrt(g / e)


def decode_attn_flops(layers, attn_dim, context_tokens):
    """Attention FLOPs of decode tokens: ``4 x layers x context x attn_dim`` summed over tokens (SPEC §3).

    Parameters
    ----------
    layers : float or ndarray(float64)
        Transformer layers.
    attn_dim : float or ndarray(float64)
        Attention width of decode tokens, :attr:`Model.attn_dim_decode` (q_dim = heads x head_dim
        for GQA; never the hidden size, SPEC §3 as revised).
    context_tokens : float or ndarray(float64)
        Context tokens attended to, summed over the decode tokens of the step (full-context
        equivalent: :meth:`Model.kv_tokens_held` for sliding-window models).

    Returns
    -------
    float or ndarray(float64)
        FLOPs (whole model, before the division by the GPUs), shape of the broadcast inputs.
    """
    return 4.0 * layers * attn_dim * context_tokens


def prefill_attn_flops(layers, attn_dim, chunk_tokens):
    """Causal attention FLOPs of a prefill chunk of c tokens: ``2 x layers x c^2 x attn_dim`` (SPEC §3).

    Parameters
    ----------
    layers : float or ndarray(float64)
        Transformer layers.
    attn_dim : float or ndarray(float64)
        Attention width of prefill tokens, :attr:`Model.attn_dim_prefill`.
    chunk_tokens : float or ndarray(float64)
        Prompt tokens in the chunk (c).

    Returns
    -------
    float or ndarray(float64)
        FLOPs (whole model, before the division by the GPUs), shape of the broadcast inputs.
    """
    return 2.0 * layers * attn_dim * chunk_tokens * chunk_tokens


def gemm_blend_s(memory_s, compute_s, blend_q):
    """The time of a GEMM from its memory and compute times: their p-norm, ``(m^p + c^p)^(1/p)`` (step model v2).

    The roofline (Williams, Waterman, Patterson, CACM 2009) takes the larger of the two; a real
    GEMM near the ridge reaches neither its bandwidth nor its compute peak, since tile and wave
    quantisation (a 128-row tile half filled, a last wave of thread blocks on few SMs) cost time in
    both at once. With ``p = 1 / blend_q`` the time is ``max x (1 + (min / max)^p)^(1/p)``: the
    roofline at ``blend_q = 0`` (p infinite), the sum of the two at ``blend_q = 1``. On Vidur's
    H100 matmul profiles (Llama-2-7B and 70B, CodeLlama-34B; 1 to 4,096 tokens, TP 1 to 8) the
    roofline's median error is 9.4%, 26% too slow at 1-16 tokens and 12% too fast at 129-512; the
    p-norm with ``p`` = 1.23 takes it to 6.8%, its mean within 5% in every band
    (:func:`fastsim.calibrate.fit_operations` with ``blend=True``).

    Parameters
    ----------
    memory_s, compute_s : float or ndarray(float64)
        Seconds (>= 0), broadcastable.
    blend_q : float or ndarray(float64)
        ``1 / p`` in [0, 1]: 0 is the roofline's max (SPEC §3), bit for bit.

    Returns
    -------
    float or ndarray(float64)
        Seconds, the broadcast shape. Not validated (nothing is raised).
    """
    return _gemm_blend_ufunc(memory_s, compute_s, blend_q)


def _gemm_blend(memory_s, compute_s, blend_q):
    # one scalar expression for numpy (a ufunc) and the kernels (fastsim.stepmodel.gemm_blend_nb),
    # so that both give the same bits (numpy's own vectorised power may differ in the last bit)
    hi = memory_s if memory_s >= compute_s else compute_s
    if blend_q == 0.0 or not hi > 0.0:
        return hi
    lo = compute_s if memory_s >= compute_s else memory_s
    return hi * (1.0 + (lo / hi) ** (1.0 / blend_q)) ** blend_q


_gemm_blend_ufunc = vectorize(["float64(float64, float64, float64)"], cache=True)(_gemm_blend)
#: :func:`gemm_blend_s` for numba kernels (scalars, inlined).
gemm_blend_nb = njit(cache=True, inline="always")(_gemm_blend)
