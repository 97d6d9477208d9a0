"""Kernels of the analytic screen (SPEC section 5). Loops only; the API is in :mod:`fastsim.analytic`."""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from .stepmodel import (P_KV_BUDGET_TOKENS, P_KVPG, P_LAYERS, P_NET_BW, P_QDIM_DEC, P_QDIM_PF, P_SLIDE_FRAC,
                        P_WINDOW, step_time_nb)

# status codes of one configuration
OK = 0
NO_FIT = 1          # weights + one request's KV do not fit
TPOT_UNREACHABLE = 2  # even batch 1 misses 0.85 x TPOT
TTFT_UNREACHABLE = 3  # the P90 prompt cannot be prefilled within the TTFT target


@njit(cache=True)
def _held_nb(p, tokens):
    """Full-context-equivalent KV tokens of a sequence of ``tokens`` (sliding layers keep the window; SPEC §10)."""
    w = p[P_WINDOW]
    if w > 0.0 and tokens > w:
        return tokens - p[P_SLIDE_FRAC] * (tokens - w)
    return tokens


@njit(cache=True)
def _decode_step_nb(p, b, ctx_tokens, layers, hidden):
    kv = b * ctx_tokens
    return step_time_nb(p, b, kv, 4.0 * layers * p[P_QDIM_DEC] * kv)


@njit(cache=True)
def _coloc_step_nb(p, b, c, ctx_tokens, layers, hidden):
    kv = b * ctx_tokens
    return step_time_nb(p, b + c, kv, 4.0 * layers * p[P_QDIM_DEC] * kv + 2.0 * layers * p[P_QDIM_PF] * c * c)


@njit(cache=True)
def _max_b_nb(p, c, ctx_tokens, layers, hidden, step_limit_s, b_cap):
    """Largest integer b in [1, b_cap] with step(b, c) <= step_limit_s (step is monotone in b); 0 if none."""
    if b_cap < 1:
        return 0
    if c > 0:
        if _coloc_step_nb(p, 1.0, c, ctx_tokens, layers, hidden) > step_limit_s:
            return 0
    elif _decode_step_nb(p, 1.0, ctx_tokens, layers, hidden) > step_limit_s:
        return 0
    lo = 1
    hi = b_cap
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if c > 0:
            s = _coloc_step_nb(p, float(mid), c, ctx_tokens, layers, hidden)
        else:
            s = _decode_step_nb(p, float(mid), ctx_tokens, layers, hidden)
        if s <= step_limit_s:
            lo = mid
        else:
            hi = mid - 1
    return lo


@njit(cache=True, parallel=True)
def instances_nb(params, pidx, demand, didx, chunk, max_batch, chunks,
                       out_status, out_dec_cap, out_dec_b, out_dec_step,
                       out_pre_cap, out_pre_rho, out_pre_s,
                       out_col_status, out_col_cap, out_col_b, out_col_c, out_col_step):
    """Decode, prefill and colocated capacities of one instance per row (SPEC §5), per-row demand.

    The analytic screen calls it with one demand for every row; a sweep varies the demand (scenario,
    SLOs), the chunk size and the batch cap from row to row.

    Parameters
    ----------
    params : float64[m, N_PARAMS]
        Unique step-parameter rows (:func:`fastsim.stepmodel.step_params`).
    pidx : int64[n]
        Row of ``params`` of each instance row.
    demand : float64[k, 8]
        Unique demands: mean P, mean O, latency P, latency O, TTFT s, TPOT s, tpot_margin, ttft_tail.
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
    for i in prange(n):
        p = params[pidx[i]]
        L = p[P_LAYERS]
        h = p[P_QDIM_PF]
        kv_tok = p[P_KV_BUDGET_TOKENS]
        kvpg = p[P_KVPG]
        net_bw = p[P_NET_BW]
        d = demand[didx[i]]
        mean_p = d[0]
        mean_o = d[1]
        lat_p = d[2]
        lat_o = d[3]
        ttft = d[4]
        tpot = d[5]
        margin = d[6]
        tail = d[7]
        # KV held and read per sequence: the full-context equivalent (sliding windows, SPEC §10)
        ctx = _held_nb(p, mean_p + mean_o / 2.0)
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
        if kv_tok < _held_nb(p, lat_p + lat_o):
            out_status[i] = NO_FIT
            out_col_status[i] = NO_FIT
            continue
        out_status[i] = OK
        step_limit = margin * tpot
        b_cap = int(math.floor(kv_tok / _held_nb(p, mean_p + mean_o)))
        if max_batch[i] > 0 and max_batch[i] < b_cap:
            b_cap = max_batch[i]
        # decode instance
        b = _max_b_nb(p, 0.0, ctx, L, h, step_limit, b_cap)
        if b > 0:
            s = _decode_step_nb(p, float(b), ctx, L, h)
            out_dec_b[i] = b
            out_dec_step[i] = s
            out_dec_cap[i] = b / (s * mean_o)
        # prefill instance: M/D/1, P90 TTFT ~ S + tail W, W = rho S_b / (2 (1 - rho))
        s_lat = step_time_nb(p, lat_p, 0.0, 2.0 * L * h * lat_p * lat_p)
        s_mean = step_time_nb(p, mean_p, 0.0, 2.0 * L * h * mean_p * mean_p)
        transfer = lat_p * kvpg / net_bw
        a = ttft - s_lat - transfer
        out_pre_s[i] = s_lat
        if a > 0.0:
            rho = a / (a + tail * s_mean / 2.0)
            out_pre_rho[i] = rho
            out_pre_cap[i] = rho / s_mean
        # colocated instance: b decodes + a chunk of c prompt tokens per step
        best = 0.0
        status = TPOT_UNREACHABLE
        nc = chunks.shape[0] if chunk[i] <= 0.0 else 1
        for j in range(nc):
            c = chunks[j] if chunk[i] <= 0.0 else chunk[i]
            ttft_limit = ttft / 2.0 / math.ceil(lat_p / c)
            limit = min(step_limit, ttft_limit)
            bb = _max_b_nb(p, c, ctx, L, h, limit, b_cap)
            if bb == 0:
                if ttft_limit < step_limit and status == TPOT_UNREACHABLE:
                    if _coloc_step_nb(p, 1.0, c, ctx, L, h) <= step_limit:
                        status = TTFT_UNREACHABLE
                continue
            b_star = c * mean_o / mean_p
            for cand in (math.floor(b_star), math.ceil(b_star)):
                bc = int(min(max(cand, 1.0), bb))
                s = _coloc_step_nb(p, float(bc), c, ctx, L, h)
                thr = min(bc / mean_o, c / mean_p) / s
                if thr > best:
                    best = thr
                    status = OK
                    out_col_cap[i] = thr
                    out_col_b[i] = bc
                    out_col_c[i] = int(c)
                    out_col_step[i] = s
        out_col_status[i] = status
