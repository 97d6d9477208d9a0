"""Kernels of the analytic screen (SPEC section 5). Loops only; the API is in :mod:`fastsim.analytic`."""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from .stepmodel import step_time_nb

# status codes of one configuration
OK = 0
NO_FIT = 1          # weights + one request's KV do not fit
TPOT_UNREACHABLE = 2  # even batch 1 misses 0.85 x TPOT
TTFT_UNREACHABLE = 3  # the P90 prompt cannot be prefilled within the TTFT target


@njit(cache=True)
def _decode_step_nb(p, b, ctx_tokens, layers, hidden):
    kv = b * ctx_tokens
    return step_time_nb(p, b, kv, 4.0 * layers * hidden * kv)


@njit(cache=True)
def _coloc_step_nb(p, b, c, ctx_tokens, layers, hidden):
    kv = b * ctx_tokens
    return step_time_nb(p, b + c, kv, 4.0 * layers * hidden * kv + 2.0 * layers * hidden * c * c)


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


@njit(cache=True)
def screen_grid_nb(params, layers, hidden, kv_budget_tokens, kvpg, net_bw,
                   demand, chunks,
                   out_status, out_dec_cap, out_dec_b, out_dec_step,
                   out_pre_cap, out_pre_rho, out_pre_s,
                   out_col_status, out_col_cap, out_col_b, out_col_c, out_col_step):
    """Per-configuration decode, prefill and colocated capacities (SPEC §5).

    params : float64[n, N_PARAMS]; layers, hidden, kv_budget_tokens, kvpg, net_bw : float64[n]
    demand : float64[8] = mean P, mean O, latency P, latency O, TTFT s, TPOT s, tpot_margin, ttft_tail
    chunks : float64[k] chunk sizes for colocated instances
    Outputs float64/int64[n]; each iteration writes its own slot only.
    """
    n = params.shape[0]
    mean_p = demand[0]
    mean_o = demand[1]
    lat_p = demand[2]
    lat_o = demand[3]
    ttft = demand[4]
    tpot = demand[5]
    margin = demand[6]
    tail = demand[7]
    ctx = mean_p + mean_o / 2.0
    for i in range(n):
        p = params[i]
        L = layers[i]
        h = hidden[i]
        kv_tok = kv_budget_tokens[i]
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
        if kv_tok < lat_p + lat_o:
            out_status[i] = NO_FIT
            out_col_status[i] = NO_FIT
            continue
        out_status[i] = OK
        step_limit = margin * tpot
        b_cap = int(math.floor(kv_tok / (mean_p + mean_o)))
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
        transfer = lat_p * kvpg[i] / net_bw[i]
        a = ttft - s_lat - transfer
        out_pre_s[i] = s_lat
        if a > 0.0:
            rho = a / (a + tail * s_mean / 2.0)
            out_pre_rho[i] = rho
            out_pre_cap[i] = rho / s_mean
        # colocated instance: b decodes + a chunk of c prompt tokens per step
        best = 0.0
        status = TPOT_UNREACHABLE
        for j in range(chunks.shape[0]):
            c = chunks[j]
            # a step must meet margin x TPOT, and ceil(P/c) steps must fit in half the TTFT
            ttft_limit = ttft / 2.0 / math.ceil(lat_p / c)
            limit = min(step_limit, ttft_limit)
            bb = _max_b_nb(p, c, ctx, L, h, limit, b_cap)
            if bb == 0:
                if ttft_limit < step_limit and status == TPOT_UNREACHABLE:
                    if _coloc_step_nb(p, 1.0, c, ctx, L, h) <= step_limit:
                        status = TTFT_UNREACHABLE
                continue
            # throughput min(b/O, c/P)/step rises with b up to b* = c O / P, then falls
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
