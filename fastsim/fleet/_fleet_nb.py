"""Numba kernels of the fleet simulator (semantics: :mod:`fastsim.fleet.sim`).

The serving itself is the simulator's kernel, :func:`fastsim.sim._kernels._run_nb`, called with
``resume`` between membership changes; here are the two pieces a fleet adds: a failure
(:func:`fail_row_nb`) and the folding of finished requests into per-window metrics
(:func:`fold_nb`). Nothing here draws random numbers or raises.
"""
from __future__ import annotations

# numba's cache=True watches only this file, not the kernels it calls in other files
# (fastsim.stepmodel.step_time_nb, fastsim.sim._kernels): when one of them changes, change this
# line so that a cache compiled before is not reused. Step model revision: 4 (kernel classes,
# StepConstants.step_form; the GEMM class's blend, StepConstants.gemm_blend_p).

import numpy as np
from numba import njit

from ..sim._kernels import (F_NEXT_T, I_KV_BUDGET, I_N_LAYERS, I_OUTSTANDING, I_PF_HEAD, I_SLIDE_L,
                            I_UNROUTED, I_WHEEL_MASK, I_WHEEL_OFF, I_WINDOW, _enqueue_nb, _held_int_nb,
                            init_row_nb, route_routable_nb)
from ..sim.records import REQ_FINISHED, REQ_REJECTED, REQ_UNFINISHED

# per-window counts (schema.WINDOW_COLUMNS, same order)
(A_ARRIVED, A_REJ_CONTEXT, A_REJ_NO_INST, A_FINISHED, A_MET, A_MET_TTFT, A_MET_TPOT, A_UNFINISHED,
 A_RECOMPUTED, A_OUT_TOKENS, A_MET_TOKENS) = range(11)
N_ACOLS = 11


@njit(cache=True)
def fail_row_nb(b, t, pp, ist, fst, prompt, output, first, status, inst, nxt, done, wheel, wnext, xnext,
                gid, recomp, scratch, ring_mask, n_entry, routing, rr_io):
    """Instance b fails at time t: every request it holds is routed again from scratch.

    Collects the instance's decodes (its finish wheel) and its prefilling and waiting requests
    (from ``I_PF_HEAD``), resets the instance to empty and unroutable, then routes each request,
    in global index (``gid``) order, to a routable entry instance as a new request arriving at t
    (its progress, first token and KV gone; ``recomp`` counts it). With no routable instance it
    is rejected (``inst`` -1). Returns the number of requests handed back.
    """
    m = 0
    woff = ist[b, I_WHEEL_OFF]
    nbk = ist[b, I_WHEEL_MASK] + 1
    for j in range(woff, woff + nbk):
        r = wheel[j]
        while r >= 0:
            scratch[m] = gid[r]
            m += 1
            r = wnext[r]
    r = ist[b, I_PF_HEAD]
    while r >= 0:
        scratch[m] = gid[r]
        m += 1
        r = nxt[r]
    for j in range(woff, woff + 2 * nbk):
        wheel[j] = -1
    init_row_nb(b, pp, ist, fst)
    ist[b, I_UNROUTED] = 1
    n_r = 0
    for i in range(n_entry):
        if ist[i, I_UNROUTED] == 0:
            n_r += 1
    held = np.sort(scratch[:m])
    rr = rr_io[0]
    for j in range(m):
        r = held[j] & ring_mask
        done[r] = 0
        first[r] = np.nan
        wnext[r] = -1
        xnext[r] = -1
        recomp[r] += 1
        c = route_routable_nb(ist, n_entry, n_r, routing, rr)
        if c < 0:
            status[r] = REQ_REJECTED
            inst[r] = -1
            continue
        rr += 1
        inst[r] = c
        ist[c, I_OUTSTANDING] += prompt[r] + output[r]
        _enqueue_nb(ist, nxt, c, r)
        if fst[c, F_NEXT_T] == np.inf:
            fst[c, F_NEXT_T] = t
    rr_io[0] = rr
    return m


@njit(cache=True, nogil=True)
def fold_nb(lo_s, hi_s, ist, arrival, prompt, output, first, finish, status, recomp, max_total, window_s,
            acc, h_ttft, h_tpot, h_lo, h_per, ttft_slo, tpot_slo, final):
    """Fold the requests of slots ``[lo_s, hi_s)`` into the per-window metrics of their arrival window.

    A rejected request counts as rejected for the context (its P + O over ``max_total`` or its
    KV over the instance's budget, the simulator's own test) or else for want of a routable
    instance. TTFT and TPOT go to the log-binned histograms (``h_per`` bins per decade from
    ``10**h_lo`` s; out-of-range values to the end bins). Returns the number of requests still
    unfinished; when ``final`` is false nothing is folded if there is one (the caller's ring is
    too small), else they count as unfinished.
    """
    if not final:
        for s in range(lo_s, hi_s):
            if status[s] == REQ_UNFINISHED:
                return 1
    n_win = acc.shape[0]
    nb = h_ttft.shape[1]
    win = ist[0, I_WINDOW]
    sl = ist[0, I_SLIDE_L]
    nl = ist[0, I_N_LAYERS]
    kv = ist[0, I_KV_BUDGET]
    unfinished = 0
    for s in range(lo_s, hi_s):
        w = int(arrival[s] / window_s)
        if w >= n_win:
            w = n_win - 1
        acc[w, A_ARRIVED] += 1
        acc[w, A_RECOMPUTED] += recomp[s]
        st = status[s]
        p = prompt[s]
        o = output[s]
        if st == REQ_REJECTED:
            if p + o > max_total or _held_int_nb(p + o, win, sl, nl) > kv:
                acc[w, A_REJ_CONTEXT] += 1
            else:
                acc[w, A_REJ_NO_INST] += 1
        elif st == REQ_FINISHED:
            f = first[s]
            ttft = f - arrival[s]
            ok_t = ttft <= ttft_slo
            ok_p = True
            acc[w, A_FINISHED] += 1
            acc[w, A_OUT_TOKENS] += o
            x = int(np.floor((np.log10(ttft) - h_lo) * h_per)) if ttft > 0.0 else 0
            h_ttft[w, min(max(x, 0), nb - 1)] += 1
            if o > 1:
                tp = (finish[s] - f) / float(o - 1)
                ok_p = tp <= tpot_slo
                x = int(np.floor((np.log10(tp) - h_lo) * h_per)) if tp > 0.0 else 0
                h_tpot[w, min(max(x, 0), nb - 1)] += 1
            if ok_t:
                acc[w, A_MET_TTFT] += 1
            if ok_p:
                acc[w, A_MET_TPOT] += 1
            if ok_t and ok_p:
                acc[w, A_MET] += 1
                acc[w, A_MET_TOKENS] += o
        else:
            acc[w, A_UNFINISHED] += 1
            unfinished += 1
    return unfinished
