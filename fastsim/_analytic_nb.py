"""Kernels of the analytic screen (SPEC section 5; speculative decoding and prefix caching, SPEC §4, §10).

Loops only; the API is in :mod:`fastsim.analytic`. The two row kernels are plain loops that
release the GIL; :func:`instances` runs the first on blocks of rows on numba's thread count
(:mod:`fastsim._threads`; a sweep's grids), which compiles much faster than a ``prange``.
"""
from __future__ import annotations

# numba's cache=True watches only this file, not the kernels it calls in other files
# (fastsim.stepmodel.step_time_nb, fastsim.sim._kernels): when one of them changes, change this
# line so that a cache compiled before is not reused. Step model revision: 4 (kernel classes,
# StepConstants.step_form; the GEMM class's blend, StepConstants.gemm_blend_p).

import math

import numpy as np
from numba import njit

from ._threads import run_row_blocks

from .stepmodel import (P_KV_BUDGET_TOKENS, P_KVPG, P_LAYERS, P_NET_BW, P_QDIM_DEC, P_QDIM_PF, P_REQ_OVERHEAD,
                        P_SLIDE_FRAC, P_WINDOW, step_time_nb)

# status codes of one configuration
OK = 0
NO_FIT = 1          # weights + one request's KV do not fit
TPOT_UNREACHABLE = 2  # even batch 1 misses 0.85 x TPOT
TTFT_UNREACHABLE = 3  # the P90 prompt cannot be prefilled within the TTFT target


@njit(cache=True, inline="always")
def _held_nb(p, tokens):
    """Full-context-equivalent KV tokens of a sequence of ``tokens`` (sliding layers keep the window; SPEC §10)."""
    w = p[P_WINDOW]
    if w > 0.0 and tokens > w:
        return tokens - p[P_SLIDE_FRAC] * (tokens - w)
    return tokens


@njit(cache=True, inline="always")
def _decode_step_nb(p, b, ctx_tokens, layers, hidden):
    kv = b * ctx_tokens
    return step_time_nb(p, b, kv, 4.0 * layers * p[P_QDIM_DEC] * kv, b)


@njit(cache=True, inline="always")
def _coloc_step_nb(p, b, c, ctx_tokens, layers, pc):
    """b decodes of context ``ctx_tokens`` plus a chunk of c tokens of a prompt of ``pc`` tokens.

    The step's sequences are the b decodes and the prompt's piece (b + 1). The chunk attends to
    the prompt's earlier chunks (SPEC §5, revised): on average
    ``2 x layers x c x pc x q_dim`` FLOPs and a read of ``pc / 2`` cached tokens of that prompt.
    """
    kv = b * ctx_tokens
    return step_time_nb(p, b + c, kv + _held_nb(p, pc / 2.0),
                        4.0 * layers * p[P_QDIM_DEC] * kv + 2.0 * layers * p[P_QDIM_PF] * c * pc, b + 1.0)


@njit(cache=True)
def _round_nb(p, pd, b, c, ctx_tokens, ctx_draft_tokens, layers, gamma, pc):
    """Time of one step (``gamma`` 0) or one speculative round of b decodes plus a chunk of c prompt tokens.

    ``gamma`` 0: :func:`_decode_step_nb` (c = 0) or :func:`_coloc_step_nb`. ``gamma`` > 0: ``gamma``
    draft decode steps of the b sequences plus one target verify step over ``b (gamma + 1) + c``
    tokens whose decode attention is ``4 x layers x q_dim x (b (gamma + 1)) x context`` (the float
    operations of :func:`fastsim.specdec.round_time_s` when c = 0); the chunk rides in the verify step,
    attending to the earlier chunks of a prompt of ``pc`` tokens as in :func:`_coloc_step_nb`.
    """
    if gamma > 0.0:
        kv = b * ctx_tokens
        n = b * (gamma + 1.0)
        attn = 4.0 * layers * p[P_QDIM_DEC] * (n * ctx_tokens)
        if c > 0.0:
            s = step_time_nb(p, n + c, kv + _held_nb(p, pc / 2.0), attn + 2.0 * layers * p[P_QDIM_PF] * c * pc, b + 1.0)
        else:
            s = step_time_nb(p, n, kv, attn, b)
        kvd = b * ctx_draft_tokens
        d = step_time_nb(pd, b, kvd, 4.0 * pd[P_LAYERS] * pd[P_QDIM_DEC] * kvd, b)
        return gamma * d + s
    if c > 0.0:
        return _coloc_step_nb(p, b, c, ctx_tokens, layers, pc)
    return _decode_step_nb(p, b, ctx_tokens, layers, 0.0)


@njit(cache=True)
def _max_b_nb(p, pd, c, ctx_tokens, ctx_draft_tokens, layers, gamma, limit_s, b_cap, pc):
    """Largest integer b in [1, b_cap] with round(b, c) <= limit_s (the round is monotone in b); 0 if none."""
    if b_cap < 1:
        return 0
    if _round_nb(p, pd, 1.0, c, ctx_tokens, ctx_draft_tokens, layers, gamma, pc) > limit_s:
        return 0
    lo = 1
    hi = b_cap
    while lo < hi:
        mid = (lo + hi + 1) // 2
        s = _round_nb(p, pd, float(mid), c, ctx_tokens, ctx_draft_tokens, layers, gamma, pc)
        if s <= limit_s:
            lo = mid
        else:
            hi = mid - 1
    return lo


@njit(cache=True)
def _instance_row_nb(p, pd, d, chunk_i, max_batch_i, chunks, gamma, tokens_per_round, hit, i,
                     out_status, out_dec_cap, out_dec_b, out_dec_step,
                     out_pre_cap, out_pre_rho, out_pre_s,
                     out_col_status, out_col_cap, out_col_b, out_col_c, out_col_step):
    """One row of :func:`instances_nb` / :func:`instances_spec_nb`; writes slot ``i`` of the ``out_*`` arrays.

    ``gamma`` 0, ``tokens_per_round`` 1 and ``hit`` 0 give the plain screen with the same float
    operations as before speculation and prefix caching existed (every added factor is an exact 1.0
    or 0.0 there).
    """
    L = p[P_LAYERS]
    h = p[P_QDIM_PF]
    kv_tok = p[P_KV_BUDGET_TOKENS]
    kvpg = p[P_KVPG]
    net_bw = p[P_NET_BW]
    mean_p = d[0]
    mean_o = d[1]
    lat_p = d[2]
    lat_o = d[3]
    # the TTFT the engine's schedule may take: the target less the request's time outside it
    # (StepConstants.request_overhead_s; x - 0.0 == x, so SPEC §3's constants give the same bits)
    ttft = d[4] - p[P_REQ_OVERHEAD]
    tpot = d[5]
    margin = d[6]
    tail = d[7]
    # the work-weighted prompt length E[P^2] / E[P] stands for P in throughput (SPEC §5)
    work_p = d[8]
    # queueing-aware colocated screen: the chunk slot's M/G/1 wait bounds the rate
    queueing = d[9] != 0.0
    # prompt tokens computed per request: the prefix cache serves the fraction hit of them
    new_mean_p = (1.0 - hit) * mean_p
    new_lat_p = (1.0 - hit) * lat_p
    # KV held and read per sequence: the full-context equivalent (sliding windows, SPEC §10)
    ctx = _held_nb(p, mean_p + mean_o / 2.0)
    ctx_d = _held_nb(pd, mean_p + mean_o / 2.0)
    out_dec_cap[i] = 0.0
    out_dec_b[i] = 0
    out_dec_step[i] = np.nan
    out_pre_cap[i] = 0.0
    out_pre_rho[i] = 0.0
    out_pre_s[i] = np.nan
    out_col_cap[i] = 0.0
    out_col_b[i] = 0
    out_col_c[i] = 0
    out_col_step[i] = np.nan
    # a verify step writes gamma + 1 tokens of KV before the rejected ones are dropped
    held_lat = _held_nb(p, lat_p + lat_o + gamma)
    if kv_tok < held_lat:
        out_status[i] = NO_FIT
        out_col_status[i] = NO_FIT
        return
    out_status[i] = OK
    step_limit = margin * tpot
    # a round yields tokens_per_round tokens per sequence: its time per token must meet the limit
    round_limit = step_limit * tokens_per_round
    # KV reserved for P + O at their P90 lengths (SPEC §5: lesson one applies to memory too)
    b_cap = int(math.floor(kv_tok / held_lat))
    if max_batch_i > 0 and max_batch_i < b_cap:
        b_cap = max_batch_i
    # decode instance
    b = _max_b_nb(p, pd, 0.0, ctx, ctx_d, L, gamma, round_limit, b_cap, 0.0)
    if b > 0:
        s = _round_nb(p, pd, float(b), 0.0, ctx, ctx_d, L, gamma, 0.0)
        out_dec_b[i] = b
        out_dec_step[i] = s
        out_dec_cap[i] = b * tokens_per_round / (s * mean_o)
    # prefill instance: M/D/1, P90 TTFT ~ S + tail W, W = rho S_b / (2 (1 - rho)). Prefix hits: the
    # cached tokens' matmuls and their own causal attention are skipped; their KV is read and the
    # new tokens attend over it: 2 L d (P^2 - (hP)^2) attention FLOPs
    s_lat = step_time_nb(p, new_lat_p, _held_nb(p, hit * lat_p),
                         2.0 * L * h * lat_p * lat_p * (1.0 - hit * hit), 1.0)
    s_mean = step_time_nb(p, new_mean_p, _held_nb(p, hit * mean_p),
                          2.0 * L * h * mean_p * work_p * (1.0 - hit * hit), 1.0)
    transfer = lat_p * kvpg / net_bw
    a = ttft - s_lat - transfer
    out_pre_s[i] = s_lat
    if a > 0.0:
        rho = a / (a + tail * s_mean / 2.0)
        out_pre_rho[i] = rho
        out_pre_cap[i] = rho / s_mean
    # colocated instance: b decodes + a chunk of c prompt tokens per step (per round); the chunk
    # attends to its prompt's earlier chunks, of P90 length for the latency limits and of the
    # work-weighted length for throughput; with prefix hits the new tokens follow the cached
    # fraction hit, so their average context is P (1 + hit) / 2
    pc_lat = lat_p * (1.0 + hit)
    pc_thr = work_p * (1.0 + hit)
    best = 0.0
    status = TPOT_UNREACHABLE
    nc = chunks.shape[0] if chunk_i <= 0.0 else 1
    for j in range(nc):
        c = chunks[j] if chunk_i <= 0.0 else chunk_i
        ttft_limit = ttft / 2.0 / math.ceil(new_lat_p / c)
        limit = min(round_limit, ttft_limit)
        bb = _max_b_nb(p, pd, c, ctx, ctx_d, L, gamma, limit, b_cap, pc_lat)
        if bb == 0:
            if ttft_limit < round_limit and status == TPOT_UNREACHABLE:
                if _round_nb(p, pd, 1.0, c, ctx, ctx_d, L, gamma, pc_lat) <= round_limit:
                    status = TTFT_UNREACHABLE
            continue
        b_star = c * mean_o / (tokens_per_round * new_mean_p)
        for cand in (math.floor(b_star), math.ceil(b_star)):
            bc = int(min(max(cand, 1.0), bb))
            s = _round_nb(p, pd, float(bc), c, ctx, ctx_d, L, gamma, pc_thr)
            thr = min(bc * tokens_per_round / mean_o, c / new_mean_p) / s
            if queueing:
                # M/G/1 chunk slot: S = P / c steps of s; P90 TTFT ~ ceil(P90 / c) s + tail W,
                # W = lam E[S^2] / (2 (1 - lam E[S])), so lam <= a / (tail E[S^2] / 2 + a E[S])
                a_q = ttft - math.ceil(new_lat_p / c) * s
                es = new_mean_p / c * s
                es2 = (1.0 - hit) * (1.0 - hit) * mean_p * work_p / (c * c) * s * s
                lam = a_q / (tail * es2 / 2.0 + a_q * es) if a_q > 0.0 else 0.0
                if lam < thr:
                    thr = lam
            if thr > best:
                best = thr
                status = OK
                out_col_cap[i] = thr
                out_col_b[i] = bc
                out_col_c[i] = int(c)
                out_col_step[i] = s
    out_col_status[i] = status


@njit(cache=True, nogil=True)
def instances_nb(params, pidx, demand, didx, chunk, max_batch, chunks,
                       out_status, out_dec_cap, out_dec_b, out_dec_step,
                       out_pre_cap, out_pre_rho, out_pre_s,
                       out_col_status, out_col_cap, out_col_b, out_col_c, out_col_step):
    """Decode, prefill and colocated capacities of one instance per row (SPEC §5), per-row demand.

    The analytic screen calls it with one demand for every row; a sweep varies the demand (scenario,
    SLOs), the chunk size and the batch cap from row to row. No speculative decoding and no prefix
    cache (:func:`instances_spec_nb` has both).

    Parameters
    ----------
    params : float64[m, N_PARAMS]
        Unique step-parameter rows (:func:`fastsim.stepmodel.step_params`).
    pidx : int64[n]
        Row of ``params`` of each instance row.
    demand : float64[k, 10]
        Unique demands: mean P, mean O, latency P, latency O, TTFT s, TPOT s, tpot_margin, ttft_tail,
        work-weighted P (E[P^2] / E[P]), and 1.0 for the queueing-aware colocated screen (else 0.0).
    didx : int64[n]
        Row of ``demand`` of each instance row.
    chunk : float64[n]
        Chunk tokens of a colocated instance; 0 searches ``chunks`` for the best.
    max_batch : int64[n]
        Cap on the decode batch (requests); 0 = only the KV budget limits it.
    chunks : float64[c]
        Chunk sizes tried when ``chunk`` is 0.
    out_* : preallocated float64 / int64 [n]
        ``status`` / ``col_status`` codes (OK, NO_FIT, TPOT_UNREACHABLE, TTFT_UNREACHABLE), decode capacity
        (req/s), batch and step (s), prefill capacity, utilisation and step, colocated capacity, batch,
        chunk and step; each iteration writes its own slot only.

    Returns
    -------
    None
        Results are written into the ``out_*`` arrays. Inputs are not validated (the callers,
        :func:`fastsim.analytic.instance_table` and :mod:`fastsim.sweep`, do that); the kernel
        raises nothing and reports infeasibility through the status codes.
    """
    n = pidx.shape[0]
    for i in range(n):
        p = params[pidx[i]]
        _instance_row_nb(p, p, demand[didx[i]], chunk[i], max_batch[i], chunks, 0.0, 1.0, 0.0, i,
                         out_status, out_dec_cap, out_dec_b, out_dec_step, out_pre_cap, out_pre_rho, out_pre_s,
                         out_col_status, out_col_cap, out_col_b, out_col_c, out_col_step)


@njit(cache=True, nogil=True)
def instances_spec_nb(params, pidx, dpidx, demand, didx, chunk, max_batch, chunks, gamma, tokens_per_round, hit,
                      out_status, out_dec_cap, out_dec_b, out_dec_step,
                      out_pre_cap, out_pre_rho, out_pre_s,
                      out_col_status, out_col_cap, out_col_b, out_col_c, out_col_step):
    """:func:`instances_nb` with speculative decoding and a prefix-cache hit fraction per row.

    A row with ``gamma > 0`` decodes in rounds (:func:`fastsim.specdec.round_time_s`): ``gamma``
    draft steps plus one verify step over ``gamma + 1`` tokens per sequence, yielding
    ``tokens_per_round`` tokens per sequence; the TPOT check applies to ``round / tokens_per_round``,
    the TTFT check of a colocated instance to whole rounds (a prefill chunk rides in the verify
    step), and the decode throughput is ``b x tokens_per_round / (round x mean O)``. The row's
    target parameters carry the KV budget left beside the draft
    (:func:`fastsim.specdec.spec_step_params`). A prefix-cache hit fraction ``hit`` removes that
    fraction of every prompt's tokens from the prefill compute (prefill step, chunk count and the
    prompt side of the chunk balance); the cached tokens' KV is still read and attended.

    Parameters
    ----------
    params : float64[m, N_PARAMS]
        Step-parameter rows of targets and drafts.
    pidx, dpidx : int64[n]
        Row of ``params`` of each instance row's target and draft (any row when ``gamma`` is 0).
    demand, didx, chunk, max_batch, chunks
        As in :func:`instances_nb`.
    gamma : float64[n]
        Draft tokens per round (0: no speculation).
    tokens_per_round : float64[n]
        Expected tokens per sequence per round (1 when ``gamma`` is 0).
    hit : float64[n]
        Fraction of prompt tokens served from the prefix cache, in [0, 1).
    out_* : preallocated float64 / int64 [n]
        As in :func:`instances_nb`; ``out_dec_step`` and ``out_col_step`` hold the round time.

    Returns
    -------
    None
        Results are written into the ``out_*`` arrays; inputs are not validated (the caller,
        :func:`fastsim.analytic.instance_table`, does that) and nothing is raised.
    """
    n = pidx.shape[0]
    for i in range(n):
        _instance_row_nb(params[pidx[i]], params[dpidx[i]], demand[didx[i]], chunk[i], max_batch[i], chunks,
                         gamma[i], tokens_per_round[i], hit[i], i,
                         out_status, out_dec_cap, out_dec_b, out_dec_step, out_pre_cap, out_pre_rho, out_pre_s,
                         out_col_status, out_col_cap, out_col_b, out_col_c, out_col_step)


# positions of the per-row arguments of instances_nb (the others are tables)
_ROW_ARGS = frozenset((1, 3, 4, 5) + tuple(range(7, 19)))


def instances(*args) -> None:
    """:func:`instances_nb` (same arguments) on blocks of rows, one block per thread.

    For large grids (a sweep's); a few thousand rows or fewer run on the calling thread.

    Returns
    -------
    None
        The results are written into the ``out_*`` arrays.
    """
    run_row_blocks(instances_nb, args, _ROW_ARGS, args[1].shape[0])
