"""Numba kernels of the serving simulator (SPEC section 6); the semantics are in ``engine.py``.

Everything here only loops over preallocated arrays: no random numbers, no exceptions, a status
code per run. One run is :func:`_run_nb`; :func:`simulate_one` runs one and computes its
metrics (two kernel calls, which release the GIL): the engine calls it for a single run, and
from several Python threads for many (``fastsim.sim.engine._run_worker``), each run on its own
slices of the flattened arrays. No kernel here uses ``prange``, which costs numba several times
the compilation time (see ``fastsim._threads``); every kernel has one type signature per use
(the engine passes read-only inputs and Python scalars, never a literal constant to a kernel
that is not inlined), so a command compiles each once.

Reference counting: a helper inlined by numba (``inline="always"``) still increments and
decrements the reference count of every array it is passed, at every call, unless the call is
straight-line code (then numba prunes the pairs). The event loop of :func:`_run_nb` therefore
has its arrival path and its three boundary paths (colocated, prefill, decode) written out in
place, each running an instance's boundaries in one loop with its state in locals; the step
time comes from scalar-only helpers (:func:`_step_consts_nb` once per run, :func:`_step_s_nb`).
The colocated and decode paths also run quiet steps (decode only, no finish at the step's end,
the admission unchanged) in a tight loop with the step's terms of the batch size computed once:
at light load most steps are quiet (a lone 250-token decode is 250 of them), and the loop
performs the boundary's operations on that path in its order, so every value keeps its bits.

Per-instance state lives in one int64 table ``ist`` (columns ``I_*``) and one float64 table
``fst`` (columns ``F_*``), one row per instance. The wrapper fills the configuration columns
(``I_KIND`` .. ``I_N_LAYERS``); the kernel initialises the state columns, which double as outputs.

Each instance keeps its requests in one singly linked list (``nxt``) in assignment order, with
two cursors: ``I_PF_HEAD`` (first admitted request whose prompt is not finished) and
``I_WAIT_HEAD`` (first request not admitted). Decoding requests sit in a timing wheel keyed by
the step index of their last token: bucket ``finish_step & mask`` of the instance's slice of
``wheel`` heads a list linked through ``wnext``; with more buckets than the longest output, a
bucket only ever holds requests finishing at the same step. With the running sums
``I_N_DECODE`` and ``I_CTX_SUM`` a step costs O(1) plus O(1) per admission and finish; nothing
loops over the running batch.

Sliding windows (``window.py``; W tokens, S sliding layers of L, fraction f). A decode's context
grows by one token per step, and its excess over the window, ``max(ctx - W, 0)``, by one per step
once ``ctx >= W``. Beside ``I_CTX_SUM`` the kernel keeps ``I_N_PAST`` (decodes with ``ctx > W``)
and ``I_EX_SUM`` (the sum of their excesses): a step adds ``I_N_DECODE`` to the one and
``I_N_PAST`` to the other. A decode that starts at or below the window (``P + 1 <= W``) and
passes it before its last token (``P + O > W``) enters ``I_N_PAST`` at the end of step
``k + W - P`` (k: the step at whose end it got its first token, or the last step before its
admission on a decode instance), when its context goes from W to W + 1; a second wheel of the
same size, right after the finish wheel in ``wheel`` and linked through ``xnext``, keys it by
that step (``W - P <= O - 1``, so it fits as the finish does). A step reads
``float(ctx sum) - f x float(excess sum)`` tokens. Without a window W is ``NO_WINDOW`` and
f = 0.0: the excess stays 0, the window wheel empty, and every value is the windowless one.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..stepmodel import (P_ALPHA, P_DP, P_EP_BW, P_ETA_BW, P_ETA_C, P_ETA_NV, P_GPUS, P_HBM_BW, P_HIDDEN,
                         P_KFRAC, P_KVPG, P_LAYERS, P_MATMUL, P_N_A2A, P_N_AR, P_NET_BW, P_NVLINK,
                         P_OVERHEAD, P_PEAK, P_QDIM_DEC, P_QDIM_PF, P_SLIDE_FRAC, P_TOPK, P_TP, P_WDENSE,
                         P_WEXP, P_ETA_KV, P_REQ_OVERHEAD, P_OVERHEAD_SEQ, P_CLASSES,
                         P_GEMM_Q, gemm_blend_nb)
# The status codes are plain ints; if one changes, clear the numba cache (cache=True only
# watches this file).
from .records import (REQ_FINISHED, REQ_REJECTED, REQ_UNFINISHED, RUN_HETEROGENEOUS, RUN_OK,
                      RUN_TRANSFER_OVERFLOW)

# the contiguous outstanding-token copy of an instance the router must skip (above any real count)
_SKIP = np.int64(1) << np.int64(62)

KIND_COLOCATED = 0
KIND_PREFILL = 1
KIND_DECODE = 2

ROUTE_LEAST_LOADED = 0
ROUTE_ROUND_ROBIN = 1

# int64 columns of the per-instance table: configuration (set by the wrapper) ...
(I_KIND, I_TOKENS, I_MAX_ADMIT, I_KV_BUDGET, I_WHEEL_OFF, I_WHEEL_MASK,
 # the sliding window (``window.kv_window``: W tokens or NO_WINDOW, S sliding layers of L)
 I_WINDOW, I_SLIDE_L, I_N_LAYERS,
 # ... then state (set here; read back as outputs)
 I_TAIL, I_PF_HEAD, I_WAIT_HEAD, I_N_WAIT, I_N_ADMIT, I_RESERVED, I_N_DECODE, I_CTX_SUM,
 I_N_PAST, I_EX_SUM, I_ACTIVE, I_STEP, I_STEP_PF_TOKENS, I_STEP_N_FIN, I_STEP_FIRST, I_STEP_N,
 I_OUTSTANDING, I_KV_PEAK, I_BATCH_SUM, I_TOKENS_OUT,
 # 1 while the router must not send the instance new requests (a fleet's draining or released
 # instance, ``fastsim.fleet``); 0 (routable) after every reset
 I_UNROUTED) = range(30)
I_STATE0 = I_TAIL
N_ICOLS = 30

# float64 columns of the per-instance table: state, then the step-independent parts of the
# step time (set by the kernel from the instance's parameters; see _run_nb's colocated path)
(F_NEXT_T, F_STEP_START, F_BUSY, F_WDENSE, F_D_BW, F_MATMUL2, F_D_C, F_N_AR, F_AR_A, F_AR_B,
 F_D_NV, F_C2, F_C4, F_C4P, F_WEXP, F_KEEP, F_A2A_N2, F_A2A_A, F_A2A_B, F_D_EP,
 # the sliding fraction f of the KV read (0.0 without a window)
 F_SLIDE,
 # the time of the boundary at which the instance last went idle (nothing admitted)
 F_IDLE_T,
 # eta_kv x HBM B/s: the KV read's divisor (equal to F_D_BW under SPEC §3's constants)
 F_D_KV) = range(23)
N_FCOLS = 23

# int64 columns of the per-run table.
(R_WORK, R_N_REQ, R_INST_OFF, R_N_INST, R_N_ENTRY, R_WHEEL_OFF, R_WHEEL_LEN, R_SAMP_OFF,
 R_N_SAMP, R_ISAMP_OFF, R_ROUTING, R_MAX_TOTAL, R_MAX_PROMPT, R_OUT_OFF) = range(14)
N_RCOLS = 14
# float64 columns of the per-run table.
(RF_HORIZON, RF_DT, RF_MEAS_LO, RF_MEAS_HI, RF_TTFT_SLO, RF_TPOT_SLO, RF_OVER_FRAC,
 RF_OVER_MIN,
 # early stop (lecture policy): the sure misses that end the run (0: none), the TPOT check's lag (s)
 RF_STOP_AT, RF_STOP_LAG) = range(10)
N_RFCOLS = 10

# per-run metrics written by the kernel: float64 columns ...
# (M_STOP_T: the simulated time at which an early-stopped run ended, NaN for a whole run)
(M_ATTAIN, M_TTFT50, M_TTFT90, M_TTFT99, M_TPOT50, M_TPOT90, M_TPOT99, M_SLOPE, M_STOP_T) = range(9)
N_MFCOLS = 9
# ... and int64 columns (MI_SURE: the sure misses an early-stop check counted)
(MI_REJECTED, MI_FINISHED, MI_MEASURED, MI_OVERLOADED, MI_SURE) = range(5)
N_MICOLS = 5

# the early-stop row of a run (:func:`_run_nb`'s ``stop_io``): inputs (the count of sure misses
# that ends the run, 0 or NaN for none; the SLO; the measure window in seconds; the lag of the
# TPOT check), then outputs (the count reached, the time of the stop or NaN)
(S_AT, S_TTFT, S_TPOT, S_LO, S_HI, S_LAG, S_SURE, S_STOP_T) = range(8)
N_STOP = 8
NO_STOP = np.full(N_STOP, np.nan)

# input check of a workload by the check kernels: 0 = valid, else the first array at fault
(IN_OK, IN_ARRIVAL, IN_PROMPT, IN_OUTPUT) = range(4)


@njit(cache=True, inline="always")
def _check_one_nb(arrival, prompt, output, horizon, max_tokens):
    """Check one workload; returns ``(IN_* code, longest output)``.

    Accepts exactly what the engine's checks accept: arrival times non-decreasing in
    ``[0, horizon]`` (so finite: ``horizon`` is), token counts in ``[1, max_tokens]``. Loops
    without early exits, so that they vectorize.
    """
    n = arrival.shape[0]
    if n == 0:
        return IN_OK, 0
    ok = arrival[0] >= 0.0 and arrival[n - 1] <= horizon
    for r in range(1, n):
        ok &= arrival[r] >= arrival[r - 1]
    if not ok:
        return IN_ARRIVAL, 0
    lo = prompt[0]
    hi = lo
    for r in range(1, n):
        x = prompt[r]
        lo = min(lo, x)
        hi = max(hi, x)
    if lo < 1 or hi > max_tokens:
        return IN_PROMPT, 0
    lo = output[0]
    hi = lo
    for r in range(1, n):
        x = output[r]
        lo = min(lo, x)
        hi = max(hi, x)
    if lo < 1 or hi > max_tokens:
        return IN_OUTPUT, 0
    return IN_OK, hi


@njit(cache=True)
def check_one_nb(arrival, prompt, output, horizon, max_tokens, info):
    """One workload (read-only arrays): :func:`_check_one_nb` into ``info[0] = (code, longest output)``."""
    code, mo = _check_one_nb(arrival, prompt, output, horizon, max_tokens)
    info[0, 0] = code
    info[0, 1] = mo


@njit(cache=True, inline="always")
def _tr_pop_nb(tr_t, tr_r, size):
    """Remove the earliest transfer from the heap of ``size`` entries."""
    size -= 1
    if size > 0:
        t = tr_t[size]
        r = tr_r[size]
        j = 0
        while True:
            c = 2 * j + 1
            if c >= size:
                break
            ct = tr_t[c]
            cr = tr_r[c]
            if c + 1 < size:
                t2 = tr_t[c + 1]
                r2 = tr_r[c + 1]
                if t2 < ct or (t2 == ct and r2 < cr):
                    c += 1
                    ct = t2
                    cr = r2
            if t < ct or (t == ct and r < cr):
                break
            tr_t[j] = ct
            tr_r[j] = cr
            j = c
        tr_t[j] = t
        tr_r[j] = r


@njit(cache=True, inline="always")
def _enqueue_nb(ist, nxt, i, r):
    """Append request r to instance i's list as a waiting request."""
    nxt[r] = -1
    tail = ist[i, I_TAIL]
    if tail >= 0:
        nxt[tail] = r
    ist[i, I_TAIL] = r
    if ist[i, I_WAIT_HEAD] < 0:
        ist[i, I_WAIT_HEAD] = r
        if ist[i, I_PF_HEAD] < 0:
            ist[i, I_PF_HEAD] = r
    ist[i, I_N_WAIT] += 1


@njit(cache=True, inline="always")
def _route_nb(ist, lo, hi, routing, rr):
    """Instance in [lo, hi) for a new request: fewest outstanding tokens (ties low) or round-robin."""
    if routing == ROUTE_ROUND_ROBIN:
        return lo + rr % (hi - lo)
    best = lo
    bo = ist[lo, I_OUTSTANDING]
    for i in range(lo + 1, hi):
        v = ist[i, I_OUTSTANDING]
        if v < bo:
            bo = v
            best = i
    return best


@njit(cache=True)
def route_routable_nb(ist, n_entry, n_routable, routing, rr):
    """Instance in ``[0, n_entry)`` for a new request among the routable ones (``I_UNROUTED`` 0).

    Fewest outstanding tokens (ties to the lowest index), or round-robin: the ``rr % n_routable``-th
    routable instance. -1 when none is routable. With every instance routable this is the
    choice :func:`_run_nb` makes inline.
    """
    if n_routable <= 0:
        return -1
    if routing == ROUTE_ROUND_ROBIN:
        k = rr % n_routable
        for i in range(n_entry):
            if ist[i, I_UNROUTED] == 0:
                if k == 0:
                    return i
                k -= 1
        return -1
    b = -1
    bo = 0
    for i in range(n_entry):
        if ist[i, I_UNROUTED] == 0:
            v = ist[i, I_OUTSTANDING]
            if b < 0 or v < bo:
                bo = v
                b = i
    return b


@njit(cache=True)
def _u(i):
    """``i`` (``>= 0``) as an unsigned index, with which numba indexes without the negative-index wrap.

    Scalars only, so a plain call (the compiler inlines it; no reference counting).
    """
    return np.uint64(i)


@njit(cache=True)
def _held_int_nb(c, w, s, lay):
    """KV of a sequence of ``c`` tokens in whole tokens: ``c - (s x max(c - w, 0)) // lay`` (``window.held_tokens``).

    Scalars only, so a plain call (no reference counting; the compiler inlines it), which
    compiles faster than numba's own inlining at its ten call sites.
    """
    e = c - w
    return c - (s * e) // lay if e > 0 else c


@njit(cache=True, inline="always")
def _record_nb(ist, wait_s, kv_s, sys_s, ms, in_sys, full):
    """Write sample ``ms``: per-instance waiting and reserved KV (``full`` only), number in system."""
    if full:
        ni = ist.shape[0]
        base = ms * ni
        for i in range(ni):
            wait_s[base + i] = ist[i, I_N_WAIT]
            kv_s[base + i] = ist[i, I_RESERVED]
    sys_s[ms] = in_sys


@njit(cache=True)
def _step_consts_nb(pp, fst, i):
    """The parts of instance i's step time that do not depend on the step, for the fast paths.

    From its step parameters and its ``F_*`` columns (set by :func:`init_row_nb`), by the
    expressions of ``step_time_nb``. Returns ``(c2, c4, c4p, parts)``: the attention FLOP factors
    (prefill x^2, decode context, prefill x context) and the tuple :func:`_step_s_nb` takes, with
    which it gives the instance's step times bit for bit.
    """
    g = pp[i, P_GPUS]
    dp = pp[i, P_DP]
    topk = pp[i, P_TOPK]
    kvpg = pp[i, P_KVPG]
    hid = pp[i, P_HIDDEN]
    overhead = pp[i, P_OVERHEAD]
    wdense = fst[i, F_WDENSE]
    wexp = fst[i, F_WEXP]
    keep = fst[i, F_KEEP]
    d_bw = fst[i, F_D_BW]
    matmul2 = fst[i, F_MATMUL2]
    d_c = fst[i, F_D_C]
    n_ar = fst[i, F_N_AR]
    ar_a = fst[i, F_AR_A]
    ar_b = fst[i, F_AR_B]
    d_nv = fst[i, F_D_NV]
    c2 = fst[i, F_C2]
    c4 = fst[i, F_C4]
    c4p = fst[i, F_C4P]
    a2a_n2 = fst[i, F_A2A_N2]
    a2a_a = fst[i, F_A2A_A]
    a2a_b = fst[i, F_A2A_B]
    d_ep = fst[i, F_D_EP]
    d_kv = fst[i, F_D_KV]
    ovh_seq = pp[i, P_OVERHEAD_SEQ]
    classes = pp[i, P_CLASSES] != 0.0
    gq = pp[i, P_GEMM_Q]
    # exact shortcuts of the step time, same bits: x / 1.0 == x; a dense model's
    # weight read is (wdense + 0.0) / d_bw == wdense / d_bw at every step; and with
    # ar_b == 0 and no all-to-all the communication is the same signed zero product
    # for every step (finite, nonzero divisors, the token terms keep hid's sign), so
    # it is computed once
    div_g = g != 1.0
    div_dp = dp != 1.0
    moe_w = wexp != 0.0
    weight_c = wdense / d_bw
    comm_fixed = (ar_b == 0.0 and a2a_n2 == 0.0 and d_nv != 0.0 and d_ep != 0.0
                  and abs(hid) < 1e280 and abs(topk) < 1e280 and g >= 1.0 and dp >= 1.0)
    comm_c = (n_ar * (ar_a + ar_b * (1.0 / dp * hid * 2.0) / d_nv)
              + a2a_n2 * (a2a_a + a2a_b * (1.0 * topk / g * hid * 2.0) / d_ep)) if comm_fixed else 0.0
    return c2, c4, c4p, (g, dp, topk, kvpg, hid, overhead, wdense, wexp, keep, d_bw, matmul2, d_c, n_ar, ar_a,
                         ar_b, d_nv, a2a_n2, a2a_a, a2a_b, d_ep, div_g, div_dp, moe_w, weight_c, comm_fixed, comm_c,
                         d_kv, ovh_seq, classes, gq)


@njit(cache=True)
def _roof_nb(weight_s, kv_s, mm, attn, g, div_g, d_c, classes, gq):
    """The roofline part of a step (s) from its reads and its FLOPs, in ``step_time_nb``'s operations.

    ``weight_s`` and ``kv_s`` are the reads' seconds, ``mm`` the GEMM FLOPs (``2 x P_MATMUL x
    n_tokens``) and ``attn`` the attention FLOPs, divided by ``g`` GPUs (when ``div_g``: an exact
    shortcut, ``x / 1.0 == x``) and ``d_c = eta_c x peak``. SPEC §3: ``max(weight + KV, (mm +
    attn) / g / d_c)``; with ``classes`` (``StepConstants.step_form``): ``max(weight, mm / g / d_c)
    + max(KV, attn / g / d_c)``, the GEMM class's max blended by ``gq`` (``P_GEMM_Q``:
    :func:`fastsim.stepmodel.gemm_blend_nb`; 0.0 is the max). Scalars only, so a plain call (no reference counting; the
    compiler inlines it).
    """
    if classes:
        gk = (mm / g if div_g else mm) / d_c
        ak = (attn / g if div_g else attn) / d_c
        return gemm_blend_nb(weight_s, gk, gq) + (kv_s if kv_s >= ak else ak)
    num = mm + attn
    comp_s = (num / g if div_g else num) / d_c
    aw = weight_s + kv_s
    return aw if aw >= comp_s else comp_s


@njit(cache=True, inline="always")
def _step_s_nb(n_tok, kvf, attn, n_seq, parts):
    """Step time (s) of ``n_tok`` new tokens of ``n_seq`` sequences reading ``kvf`` held KV tokens with ``attn`` attention FLOPs.

    ``step_time_nb``'s float operations in its order, from :func:`_step_consts_nb`'s ``parts``;
    scalars only (an inlined helper taking arrays would pay reference counting at every call).
    """
    (g, dp, topk, kvpg, hid, overhead, wdense, wexp, keep, d_bw, matmul2, d_c, n_ar, ar_a, ar_b, d_nv, a2a_n2,
     a2a_a, a2a_b, d_ep, div_g, div_dp, moe_w, weight_c, comm_fixed, comm_c, d_kv, ovh_seq, classes, gq) = parts
    if moe_w:
        weight_s = (wdense + wexp * (1.0 - keep ** n_tok)) / d_bw
    else:
        weight_s = weight_c
    kvb = kvf * kvpg
    kv_time = (kvb / dp if div_dp else kvb) / d_kv
    roof = _roof_nb(weight_s, kv_time, matmul2 * n_tok, attn, g, div_g, d_c, classes, gq)
    if comm_fixed:
        comm_s = comm_c
    else:
        comm_s = (n_ar * (ar_a + ar_b * (n_tok / dp * hid * 2.0) / d_nv)
                  + a2a_n2 * (a2a_a + a2a_b * (n_tok * topk / g * hid * 2.0) / d_ep))
    return roof + comm_s + overhead + ovh_seq * n_seq


@njit(cache=True)
def _step_nd_nb(n_tok, parts):
    """The terms of :func:`_step_s_nb` that depend on ``n_tok`` only: ``(weight_s, matmul2 x n_tok, comm_s)``.

    By its expressions, so a step time composed from them in its order has its bits. Scalars
    only, so a plain call (no reference counting).
    """
    (g, dp, topk, kvpg, hid, overhead, wdense, wexp, keep, d_bw, matmul2, d_c, n_ar, ar_a, ar_b, d_nv, a2a_n2,
     a2a_a, a2a_b, d_ep, div_g, div_dp, moe_w, weight_c, comm_fixed, comm_c, d_kv, ovh_seq, classes, gq) = parts
    if moe_w:
        weight_s = (wdense + wexp * (1.0 - keep ** n_tok)) / d_bw
    else:
        weight_s = weight_c
    if comm_fixed:
        comm_s = comm_c
    else:
        comm_s = (n_ar * (ar_a + ar_b * (n_tok / dp * hid * 2.0) / d_nv)
                  + a2a_n2 * (a2a_a + a2a_b * (n_tok * topk / g * hid * 2.0) / d_ep))
    return weight_s, matmul2 * n_tok, comm_s


@njit(cache=True)
def init_row_nb(i, pp, ist, fst):
    """Reset instance i's state columns (empty, idle) and set its step-independent float columns.

    The ``F_*`` parts of ``step_time_nb`` are computed by the same expressions, so the fast
    path's step times are the generic ones, bit for bit. Used once per instance per run (and by
    the fleet kernel when an instance joins).
    """
    for c in range(I_STATE0, N_ICOLS):
        ist[i, c] = 0
    ist[i, I_TAIL] = -1
    ist[i, I_PF_HEAD] = -1
    ist[i, I_WAIT_HEAD] = -1
    fst[i, F_NEXT_T] = np.inf
    fst[i, F_STEP_START] = 0.0
    fst[i, F_BUSY] = 0.0
    fst[i, F_IDLE_T] = 0.0
    # the step-independent parts of step_time_nb, by the same expressions (same values)
    tp = pp[i, P_TP]
    g = pp[i, P_GPUS]
    fst[i, F_D_BW] = pp[i, P_ETA_BW] * pp[i, P_HBM_BW]
    fst[i, F_D_KV] = pp[i, P_ETA_KV] * pp[i, P_HBM_BW]
    fst[i, F_WDENSE] = pp[i, P_WDENSE]
    fst[i, F_WEXP] = pp[i, P_WEXP]
    fst[i, F_KEEP] = 1.0 - pp[i, P_KFRAC]
    fst[i, F_MATMUL2] = 2.0 * pp[i, P_MATMUL]
    fst[i, F_D_C] = pp[i, P_ETA_C] * pp[i, P_PEAK]
    fst[i, F_N_AR] = pp[i, P_N_AR]
    fst[i, F_AR_A] = 2.0 * (tp - 1.0) * pp[i, P_ALPHA]
    fst[i, F_AR_B] = 2.0 * (tp - 1.0) / tp
    fst[i, F_D_NV] = pp[i, P_ETA_NV] * pp[i, P_NVLINK]
    fst[i, F_C2] = 2.0 * pp[i, P_LAYERS] * pp[i, P_QDIM_PF]
    fst[i, F_C4] = 4.0 * pp[i, P_LAYERS] * pp[i, P_QDIM_DEC]
    fst[i, F_C4P] = 4.0 * pp[i, P_LAYERS] * pp[i, P_QDIM_PF]
    fst[i, F_A2A_N2] = pp[i, P_N_A2A] * 2.0
    fst[i, F_A2A_A] = (g - 1.0) * pp[i, P_ALPHA]
    fst[i, F_A2A_B] = (g - 1.0) / g
    fst[i, F_D_EP] = pp[i, P_ETA_NV] * pp[i, P_EP_BW]
    fst[i, F_SLIDE] = pp[i, P_SLIDE_FRAC] if ist[i, I_SLIDE_L] > 0 else 0.0


# error_model="numpy": no division-by-zero branch at each of the step time's divisions (about 4%
# of a colocated run); the wrapper (``engine._params``) refuses parameters that would divide by zero
@njit(cache=True, nogil=True, error_model="numpy")
def _run_nb(pp, ist, fst, arrival, prompt, output, first, finish, inst, dinst, status, nxt, done,
            wheel, wnext, xnext, tr_t, tr_r, wait_s, kv_s, sys_s, n_entry, routing, max_total,
            max_prompt, horizon, dt_sample, full, ia0, ia_end, rr_io, resume, stop_io):
    """Simulate one run; returns a ``RUN_*`` status code.

    Requests ``[ia0, ia_end)`` of the per-request arrays arrive; ``rr_io[0]`` is the
    round-robin counter (read and written back). With ``resume`` false the run starts from
    empty instances (every state column and every request's result initialised here); with
    ``resume`` true it continues from the state in the tables and arrays as a previous call left
    it (the caller initialised the results of the new requests), takes no samples and leaves the
    busy time uncorrected: :mod:`fastsim.fleet` runs a fleet as a sequence of such calls, between
    which instances join or leave. Instances whose ``I_UNROUTED`` is set get no new requests; a
    request with no routable instance is rejected (its ``inst`` stays -1).

    Instances ``[0, n_entry)`` receive arrivals (colocated or prefill); ``[n_entry, ni)`` are
    decode instances. At equal times: arrivals first (in index order), then KV-transfer
    completions (by request index), then instance step boundaries (lowest index first).

    Colocated fast path: colocated instances interact only through routing at arrivals, so
    after a boundary of one the kernel keeps running that instance's following boundaries
    while they fall strictly before the next arrival, at or before the next unrecorded sample
    time and the horizon. The same boundary code runs on the same state in the same order per
    instance, so every result is the one of the plain event loop, bit for bit.

    Early stop (``stop_io``, float64 of length ``N_STOP``: columns ``S_*``). With
    ``stop_io[S_AT] > 0`` the run counts, at each sample time ``now`` taken while events remain
    (not the samples after the horizon's last event), the measured requests (arriving in
    ``[S_LO, S_HI)`` s) that have surely missed the SLO whatever happens after ``now``, by the
    metrics' rule (:func:`_metrics_nb`): rejected; no first token by ``now`` although
    ``now - arrival > S_TTFT``, or a first token later than that (a cursor over the arrivals
    passes each request once its TTFT is decided); TTFT met but, judged once ``now - arrival >
    S_LAG`` (a second cursor), finished by ``now`` with TPOT > ``S_TPOT``, or not finished by
    ``now`` although ``(now - first) / (O - 1) > S_TPOT``. At the first sample time at which
    the count reaches ``stop_io[S_AT]`` the run ends: ``stop_io[S_STOP_T]`` is set to that time
    (NaN otherwise), the samples after it repeat the state at the stop and the busy time of a
    step in progress is counted up to it. ``stop_io[S_SURE]`` returns the count. The check
    only reads results, so a run that does not stop is bit for bit the run without the check
    (``S_AT`` <= 0 or NaN: no check).
    """
    n = ia_end
    ni = ist.shape[0]
    if not resume:
        for j in range(wheel.shape[0]):
            wheel[j] = -1
        for i in range(ni):
            init_row_nb(i, pp, ist, fst)
    n_routable = 0
    for i in range(n_entry):
        if ist[i, I_UNROUTED] == 0:
            n_routable += 1
    # arrival checks: the KV a request holds at its full P + O on the instances that keep it
    # (colocated or decode: the last row) and its prompt's on the entry instances (row 0)
    kv_last = ist[ni - 1, I_KV_BUDGET]
    win_last = ist[ni - 1, I_WINDOW]
    sl_last = ist[ni - 1, I_SLIDE_L]
    nl_last = ist[ni - 1, I_N_LAYERS]
    win_0 = ist[0, I_WINDOW]
    sl_0 = ist[0, I_SLIDE_L]
    nl_0 = ist[0, I_N_LAYERS]
    if not resume:
        for r in range(n):
            first[r] = np.nan
            finish[r] = np.nan
            inst[r] = -1
            dinst[r] = -1
            status[r] = REQ_UNFINISHED
            nxt[r] = -1
            done[r] = 0
            wnext[r] = -1
            xnext[r] = -1
    n_samp = sys_s.shape[0]
    ia = ia0
    ntr = 0
    ms = 0
    rr_e = rr_io[0]
    rr_d = 0
    in_sys = 0
    # colocated only: the instances are independent between arrivals and samples, so any
    # instance with a boundary before the next arrival and at or before the next sample may run
    # next; a cursor takes them in index order (one pass per arrival instead of a search over
    # every instance per boundary). Instances below the cursor have no boundary before both.
    colo = n_entry == ni
    for i in range(ni):
        if ist[i, I_KIND] != KIND_COLOCATED:
            colo = False
    # the fast paths' step constants, once per run: a run's entry instances (colocated or
    # prefill) are identical, and so are its decode instances (one plan's), which this checks
    for i in range(1, ni):
        j = 0 if i < n_entry else ni - 1
        for c in range(I_KIND, I_N_LAYERS + 1):
            if c != I_WHEEL_OFF and ist[i, c] != ist[j, c]:
                return RUN_HETEROGENEOUS
        for c in range(pp.shape[1]):
            if pp[i, c] != pp[j, c] and not (np.isnan(pp[i, c]) and np.isnan(pp[j, c])):
                return RUN_HETEROGENEOUS
    mask = ist[0, I_WHEEL_MASK]
    win = ist[0, I_WINDOW]
    slide = fst[0, F_SLIDE]
    windowed = ist[0, I_SLIDE_L] > 0
    cap = ist[0, I_MAX_ADMIT]
    budget = ist[0, I_KV_BUDGET]
    chunk = ist[0, I_TOKENS]
    # step_time_nb's parts that do not depend on the step: the first instance's (colocated or
    # prefill) and the last's (decode, in a disaggregated run)
    c2, c4, c4p, parts = _step_consts_nb(pp, fst, np.int64(0))
    _, d_c4, _, d_parts = _step_consts_nb(pp, fst, ni - 1)
    # the colocated quiet steps' constants (see the colocated fast path)
    c_g = parts[0]
    c_dp = parts[1]
    c_kvpg = parts[3]
    c_over = parts[5]
    c_dc = parts[11]
    c_divg = parts[20]
    c_divdp = parts[21]
    c_kv = parts[26]
    c_ovs = parts[27]
    c_cls = parts[28]
    c_gq = parts[29]
    # the decode step's per-step divisors (see the decode path's quiet steps)
    d_g = d_parts[0]
    d_dp = d_parts[1]
    d_kvpg = d_parts[3]
    d_over = d_parts[5]
    d_ovs = d_parts[27]
    d_cls = d_parts[28]
    d_gq = d_parts[29]
    d_kv = d_parts[26]
    d_dc = d_parts[11]
    d_divs = d_parts[20] or d_parts[21]
    # contiguous copies of every instance's next boundary time and outstanding tokens, kept
    # equal to the tables' (colocated runs read them at every arrival: a few cache lines instead
    # of one line per instance)
    ntc = np.empty(ni, np.float64)
    osc = np.empty(ni, np.int64)
    for i in range(ni):
        ntc[i] = fst[i, F_NEXT_T]
        # an instance the router must skip reads as "never least loaded"
        osc[i] = ist[i, I_OUTSTANDING] if ist[i, I_UNROUTED] == 0 else _SKIP
    # instances from n_scan on are neither routable nor busy, and stay so during this call (only
    # an arrival makes an instance busy, and only a routable one): the searches stop there (a
    # fleet's pool has rows for the instances of its busiest hour)
    n_scan = 0
    for i in range(ni):
        if ist[i, I_UNROUTED] == 0 or fst[i, F_NEXT_T] < np.inf:
            n_scan = i + 1
    n_route = n_scan if n_scan < n_entry else n_entry
    cs = 0
    # disaggregated runs (prefill entry instances, decode instances after them): the decode
    # instances are advanced lazily. Nothing but a KV transfer's delivery (routing, enqueueing) and
    # a sample reads their state, and nothing but a delivery changes it from outside, so their
    # boundaries wait until a delivery or a sample (or the end) needs them: then every decode
    # boundary strictly before the transfer and at or before the next sample and the horizon runs,
    # each instance's in one loop (see the decode path); the rest of the loop sees only the entry
    # instances. Each instance runs the same boundaries on the same state in the same order, so
    # every result is the plain event loop's, bit for bit.
    lazy = n_entry < ni
    for i in range(ni):
        if ist[i, I_KIND] != (KIND_PREFILL if i < n_entry else KIND_DECODE):
            lazy = False
    n_sel = n_scan if not lazy or n_scan < n_entry else n_entry
    # the decode instances' configuration (alike: checked above)
    d_mask = ist[ni - 1, I_WHEEL_MASK]
    d_win = ist[ni - 1, I_WINDOW]
    d_sl = ist[ni - 1, I_SLIDE_L]
    d_nl = ist[ni - 1, I_N_LAYERS]
    d_slide = fst[ni - 1, F_SLIDE]
    d_cap = ist[ni - 1, I_MAX_ADMIT]
    d_budget = ist[ni - 1, I_KV_BUDGET]
    # no request reaches the window (none longer than max_total is admitted) and no sliding
    # fraction: the window wheel stays empty and the excess 0, and the decode path skips them
    d_windowed = not (d_win >= max_total and d_slide == 0.0)
    # the next sample's time (infinite after the last) and the limit of the fast paths: the
    # earlier of it and the horizon
    t_samp = ms * dt_sample if ms < n_samp else np.inf
    lim_s = horizon if horizon < t_samp else t_samp
    # early stop: the threshold, the SLO and window it judges by, the two cursors, the count
    s_at = stop_io[S_AT]
    stopping = s_at > 0.0
    s_ttft = stop_io[S_TTFT]
    s_tpot = stop_io[S_TPOT]
    s_lo = stop_io[S_LO]
    s_hi = stop_io[S_HI]
    s_lag = stop_io[S_LAG]
    s_sure = 0
    s_c1 = ia0
    s_c2 = ia0
    ms_chk = ms
    t_end = horizon
    while True:
        ta = arrival[_u(ia)] if ia < n else np.inf
        tt = tr_t[0] if ntr > 0 else np.inf
        ti = np.inf
        ii = -1
        if colo:
            lim0 = lim_s
            while cs < n_scan:
                x = ntc[_u(cs)]
                if x < ta and x <= lim0:
                    ti = x
                    ii = cs
                    break
                cs += 1
            if ii < 0 and ta <= lim0:
                # no boundary before the arrival (nor before the next sample, which is not
                # before the arrival): the arrival is next, without a search
                ti = ta
                cs = 0
        if ii < 0 and ti == np.inf:
            cs = 0
            for i in range(n_sel):
                x = ntc[_u(i)]
                if x < ti:
                    ti = x
                    ii = i
        if ta <= tt and ta <= ti:
            ev = 0
            t = ta
        elif tt <= ti:
            ev = 1
            t = tt
        else:
            ev = 2
            t = ti
        if lazy and (ev == 1 or lim_s < t):
            # a delivery, or a sample or the end, comes next: the decode boundaries strictly
            # before the transfer and at or before the limit are due first (the earliest
            # transfer a later entry boundary pushes is not before ``t``)
            td = np.inf
            jd = -1
            for i in range(n_entry, n_scan):
                x = ntc[_u(i)]
                if x < tt and x <= lim_s:
                    jd = i
                    break
                if x < td:
                    td = x
            if jd >= 0:
                ev = 2
                ii = jd
                t = ntc[_u(jd)]
            elif lim_s < t and td < t:
                # none due, but a decode boundary after the next sample comes before the
                # event: the samples before it, then it
                if not (td <= horizon):
                    break
                while t_samp < td:
                    if full:
                        for i in range(ni):
                            wait_s[ms * ni + i] = ist[i, I_N_WAIT]
                            kv_s[ms * ni + i] = ist[i, I_RESERVED]
                    sys_s[ms] = in_sys
                    ms += 1
                    t_samp = ms * dt_sample if ms < n_samp else np.inf
                    lim_s = horizon if horizon < t_samp else t_samp
                continue
        if not (t <= horizon):
            break
        # samples at grid times strictly before this event see the state after earlier events
        while t_samp < t:
            # _record_nb, written out
            if full:
                for i in range(ni):
                    wait_s[ms * ni + i] = ist[i, I_N_WAIT]
                    kv_s[ms * ni + i] = ist[i, I_RESERVED]
            sys_s[ms] = in_sys
            ms += 1
            t_samp = ms * dt_sample if ms < n_samp else np.inf
            lim_s = horizon if horizon < t_samp else t_samp
        if stopping and ms > ms_chk:
            # the requests surely missed by each sample time not yet checked, in order (the
            # state now is the state at the last sample, and decides the earlier ones too: a
            # first token or a finish later than the sample time was not there at it)
            while ms_chk < ms:
                s_now = ms_chk * dt_sample
                ms_chk += 1
                while s_c1 < n and s_now - arrival[_u(s_c1)] > s_ttft:
                    s_a = arrival[_u(s_c1)]
                    if s_a >= s_lo and s_a < s_hi:
                        if status[_u(s_c1)] == REQ_REJECTED or not (first[_u(s_c1)] - s_a <= s_ttft):
                            s_sure += 1
                    s_c1 += 1
                while s_c2 < s_c1 and s_now - arrival[_u(s_c2)] > s_lag:
                    s_a = arrival[_u(s_c2)]
                    s_o = output[_u(s_c2)]
                    if s_a >= s_lo and s_a < s_hi and s_o > 1 and status[_u(s_c2)] != REQ_REJECTED:
                        s_f = first[_u(s_c2)]
                        if s_f - s_a <= s_ttft:
                            if status[_u(s_c2)] == REQ_FINISHED and finish[_u(s_c2)] <= s_now:
                                if not ((finish[_u(s_c2)] - s_f) / float(s_o - 1) <= s_tpot):
                                    s_sure += 1
                            elif (s_now - s_f) / float(s_o - 1) > s_tpot:
                                s_sure += 1
                    s_c2 += 1
                if s_sure >= s_at:
                    t_end = s_now
                    break
            if t_end < horizon:
                break

        if ev == 0:
            r = ia
            ia += 1
            p = prompt[_u(r)]
            o = output[_u(r)]
            if (p + o > max_total or _held_int_nb(p + o, win_last, sl_last, nl_last) > kv_last
                    or _held_int_nb(p, win_0, sl_0, nl_0) > max_prompt):
                status[_u(r)] = REQ_REJECTED
                continue
            # _route_nb and _enqueue_nb, written out: an inlined helper taking arrays costs
            # reference counting at every call
            if colo and routing != ROUTE_ROUND_ROBIN:
                # least loaded over the contiguous copies (unroutable instances read _SKIP)
                if n_routable == 0:
                    status[_u(r)] = REQ_REJECTED
                    continue
                # the least count first (a branch-free minimum the compiler vectorizes), then
                # the first instance holding it: the lowest index among equals, as a scan that
                # keeps the first strictly smaller count picks
                bo = osc[0]
                for i in range(1, n_route):
                    v = osc[_u(i)]
                    bo = v if v < bo else bo
                b = 0
                while osc[_u(b)] != bo:
                    b += 1
            elif n_routable == n_entry:
                if routing == ROUTE_ROUND_ROBIN:
                    b = rr_e % n_entry
                else:
                    b = 0
                    bo = ist[0, I_OUTSTANDING]
                    for i in range(1, n_entry):
                        v = ist[i, I_OUTSTANDING]
                        if v < bo:
                            bo = v
                            b = i
            else:
                # some instances take no new requests (a fleet's, between membership changes)
                b = route_routable_nb(ist, n_entry, n_routable, routing, rr_e)
                if b < 0:
                    status[_u(r)] = REQ_REJECTED
                    continue
            rr_e += 1
            inst[_u(r)] = b
            if ist[b, I_KIND] == KIND_PREFILL:
                ist[b, I_OUTSTANDING] += p
            else:
                ist[b, I_OUTSTANDING] += p + o
                osc[_u(b)] += p + o
            nxt[_u(r)] = -1
            tail = ist[b, I_TAIL]
            if tail >= 0:
                nxt[_u(tail)] = r
            ist[b, I_TAIL] = r
            if ist[b, I_WAIT_HEAD] < 0:
                ist[b, I_WAIT_HEAD] = r
                if ist[b, I_PF_HEAD] < 0:
                    ist[b, I_PF_HEAD] = r
            ist[b, I_N_WAIT] += 1
            in_sys += 1
            if fst[b, F_NEXT_T] == np.inf:
                fst[b, F_NEXT_T] = t
                ntc[_u(b)] = t
        elif ev == 1:
            r = tr_r[0]
            _tr_pop_nb(tr_t, tr_r, ntr)
            ntr -= 1
            first[r] = t
            ist[inst[r], I_TOKENS_OUT] += 1
            o = output[r]
            if o == 1:
                finish[r] = t
                status[r] = REQ_FINISHED
                in_sys -= 1
                continue
            b = _route_nb(ist, n_entry, ni, routing, rr_d)
            rr_d += 1
            dinst[r] = b
            ist[b, I_OUTSTANDING] += o - 1
            _enqueue_nb(ist, nxt, b, r)
            if fst[b, F_NEXT_T] == np.inf:
                fst[b, F_NEXT_T] = t
                ntc[_u(b)] = t
        else:
            kind = ist[ii, I_KIND]
            if kind == KIND_PREFILL:
                # prefill fast path: this boundary and the instance's next ones strictly before
                # the next arrival (which may join its queue) and at or before the next sample;
                # _prefill_boundary_nb written out with the state in locals (same operations, so
                # the same bits; the transfers it pushes go to the heap, ordered by time then
                # request whatever the order of the pushes)
                lim = lim_s
                win = ist[ii, I_WINDOW]
                sl = ist[ii, I_SLIDE_L]
                nl = ist[ii, I_N_LAYERS]
                slide = fst[ii, F_SLIDE]
                kvpg = pp[ii, P_KVPG]
                bw = pp[ii, P_NET_BW]
                limit = ist[ii, I_TOKENS]
                cap_tr = tr_t.shape[0]
                active = ist[ii, I_ACTIVE]
                first_r = ist[ii, I_STEP_FIRST]
                cnt = ist[ii, I_STEP_N]
                tot = ist[ii, I_STEP_PF_TOKENS]
                outstanding = ist[ii, I_OUTSTANDING]
                reserved = ist[ii, I_RESERVED]
                wait_head = ist[ii, I_WAIT_HEAD]
                n_wait = ist[ii, I_N_WAIT]
                kv_peak = ist[ii, I_KV_PEAK]
                step = ist[ii, I_STEP]
                batch_sum = ist[ii, I_BATCH_SUM]
                busy = fst[ii, F_BUSY]
                start = fst[ii, F_STEP_START]
                tb = t
                while True:
                    if active != 0:
                        r = first_r
                        for _ in range(cnt):
                            if ntr >= cap_tr:
                                return RUN_TRANSFER_OVERFLOW
                            p = prompt[r]
                            hp = float(p)
                            e = p - win
                            if e > 0:
                                hp = float(p) - slide * float(e)
                            # _tr_push_nb, written out
                            tx = tb + hp * kvpg / bw
                            j = ntr
                            while j > 0:
                                parent = (j - 1) >> 1
                                pt = tr_t[parent]
                                if pt < tx or (pt == tx and tr_r[parent] < r):
                                    break
                                tr_t[j] = pt
                                tr_r[j] = tr_r[parent]
                                j = parent
                            tr_t[j] = tx
                            tr_r[j] = r
                            ntr += 1
                            r = nxt[r]
                        outstanding -= tot
                        reserved = 0
                        active = 0
                    r = wait_head
                    if r < 0:
                        fst[ii, F_IDLE_T] = tb
                        tb = np.inf
                        break
                    attn = c4p * 0.0
                    tot = 0
                    held = 0
                    cnt = 0
                    first_r = r
                    while r >= 0:
                        x = prompt[r]
                        if cnt > 0 and tot + x > limit:
                            break
                        xf = float(x)
                        attn += c2 * xf * xf + c4p * xf * 0.0
                        tot += x
                        held += _held_int_nb(x, win, sl, nl)
                        cnt += 1
                        r = nxt[r]
                    wait_head = r
                    if r < 0:
                        # the queue is empty: forget the tail, whose request will join a decode
                        # list (``nxt`` is shared), so that the next arrival does not link from it
                        ist[ii, I_TAIL] = -1
                    n_wait -= cnt
                    reserved = held
                    if held > kv_peak:
                        kv_peak = held
                    dt_step = _step_s_nb(float(tot), 0.0, attn, float(cnt), parts)
                    step += 1
                    active = 1
                    batch_sum += cnt
                    start = tb
                    busy += dt_step
                    tb = tb + dt_step
                    if not (tb < ta and tb <= lim):
                        break
                ist[ii, I_ACTIVE] = active
                ist[ii, I_STEP_FIRST] = first_r
                ist[ii, I_STEP_N] = cnt
                ist[ii, I_STEP_PF_TOKENS] = tot
                ist[ii, I_OUTSTANDING] = outstanding
                ist[ii, I_RESERVED] = reserved
                ist[ii, I_WAIT_HEAD] = wait_head
                ist[ii, I_N_WAIT] = n_wait
                ist[ii, I_KV_PEAK] = kv_peak
                ist[ii, I_STEP] = step
                ist[ii, I_BATCH_SUM] = batch_sum
                fst[ii, F_BUSY] = busy
                fst[ii, F_STEP_START] = start
                fst[ii, F_NEXT_T] = tb
                ntc[_u(ii)] = tb
            elif kind == KIND_DECODE:
                # a decode instance's next boundaries too, while nothing can reach it before them:
                # new work comes only by KV transfers, the earliest of which is the heap's or one
                # an entry boundary (not before the earliest) will push, and arrivals wake entry
                # instances; strictly before those and at or before the next sample (the same
                # boundaries in the same order per instance: the plain loop's results). Advanced
                # lazily (a disaggregated run: see ``lazy``), every due decode instance in turn,
                # in index order (they are independent until the next delivery or sample); the
                # selection made sure the next transfer is the earliest one
                if lazy:
                    bound = tt
                else:
                    bound = ta if ta < tt else tt
                    for i in range(n_entry):
                        x = ntc[_u(i)]
                        if x < bound:
                            bound = x
                lim = lim_s
                n_done = 0
                while True:
                    # _batch_boundary_nb for a decode instance (no prompt pieces), written out with
                    # the state in locals: the same operations, the same bits
                    woff = ist[ii, I_WHEEL_OFF]
                    wait_head = ist[ii, I_WAIT_HEAD]
                    n_wait = ist[ii, I_N_WAIT]
                    n_admit = ist[ii, I_N_ADMIT]
                    reserved = ist[ii, I_RESERVED]
                    nd = ist[ii, I_N_DECODE]
                    ctx = ist[ii, I_CTX_SUM]
                    npast = ist[ii, I_N_PAST]
                    ex = ist[ii, I_EX_SUM]
                    active = ist[ii, I_ACTIVE]
                    step = ist[ii, I_STEP]
                    outstanding = ist[ii, I_OUTSTANDING]
                    kv_peak = ist[ii, I_KV_PEAK]
                    batch_sum = ist[ii, I_BATCH_SUM]
                    tokens_out = ist[ii, I_TOKENS_OUT]
                    busy = fst[ii, F_BUSY]
                    start = fst[ii, F_STEP_START]
                    tb = ntc[_u(ii)]
                    # the batch whose _step_nd_nb terms (and host time) are in w_s, m2n, comm_s, seq_s
                    nd_c = -1
                    w_s = 0.0
                    m2n = 0.0
                    comm_s = 0.0
                    seq_s = 0.0
                    while True:
                        if active != 0:
                            outstanding -= 0 + nd
                            tokens_out += nd
                            ctx += nd
                            if d_windowed:
                                bk = woff + d_mask + 1 + (step & d_mask)
                                r = wheel[_u(bk)]
                                if r >= 0:
                                    wheel[_u(bk)] = -1
                                    while r >= 0:
                                        npast += 1
                                        r = xnext[_u(r)]
                                ex += npast
                            bk = woff + (step & d_mask)
                            r = wheel[_u(bk)]
                            if r >= 0:
                                wheel[_u(bk)] = -1
                                while r >= 0:
                                    finish[_u(r)] = tb
                                    status[_u(r)] = REQ_FINISHED
                                    po = prompt[_u(r)] + output[_u(r)]
                                    ctx -= po
                                    if po > d_win:
                                        npast -= 1
                                        ex -= po - d_win
                                    reserved -= _held_int_nb(po, d_win, d_sl, d_nl)
                                    nd -= 1
                                    n_admit -= 1
                                    n_done += 1
                                    r = wnext[_u(r)]
                            active = 0
                        r = wait_head
                        if r >= 0:
                            while r >= 0 and n_admit < d_cap:
                                need = _held_int_nb(prompt[_u(r)] + output[_u(r)], d_win, d_sl, d_nl)
                                if reserved + need > d_budget:
                                    break
                                reserved += need
                                n_admit += 1
                                n_wait -= 1
                                # arrives with its first token: tokens 2..O in steps step+1 .. step+O-1
                                o = output[_u(r)]
                                bk = woff + ((step + o - 1) & d_mask)
                                wnext[_u(r)] = wheel[_u(bk)]
                                wheel[_u(bk)] = r
                                nd += 1
                                c1 = prompt[_u(r)] + 1
                                ctx += c1
                                if c1 > d_win:
                                    npast += 1
                                    ex += c1 - d_win
                                elif c1 + o - 1 > d_win:
                                    bk = woff + d_mask + 1 + ((step + d_win - prompt[_u(r)]) & d_mask)
                                    xnext[_u(r)] = wheel[_u(bk)]
                                    wheel[_u(bk)] = r
                                r = nxt[_u(r)]
                            wait_head = r
                            if reserved > kv_peak:
                                kv_peak = reserved
                        if n_admit == 0:
                            fst[ii, F_IDLE_T] = tb
                            tb = np.inf
                            break
                        # _step_s_nb's float operations in its order, its terms of the batch size
                        # (_step_nd_nb) computed when the batch changes, the divisions by the GPU
                        # and DP counts made even when they are 1 (x / 1.0 is x): the same bits.
                        # Without a window float(ctx) - 0.0 * 0.0 is float(ctx)
                        if nd != nd_c:
                            w_s, m2n, comm_s = _step_nd_nb(float(nd + 0), d_parts)
                            seq_s = d_ovs * float(nd + 0)
                            nd_c = nd
                        if d_windowed:
                            kvf = float(ctx) - d_slide * float(ex)
                        else:
                            kvf = float(ctx)
                        kv_time = kvf * d_kvpg / d_dp / d_kv
                        dt_step = _roof_nb(w_s, kv_time, m2n, d_c4 * kvf, d_g, True, d_dc, d_cls, d_gq) + comm_s + d_over + seq_s
                        step += 1
                        active = 1
                        batch_sum += nd + 0
                        start = tb
                        busy += dt_step
                        tb = tb + dt_step
                        if not (tb < bound and tb <= lim):
                            break
                        # quiet steps: while no request finishes (nor passes the window) at a
                        # step's end the batch stays, and so does a blocked admission (only a
                        # finish unblocks it; nothing is delivered during the run), so a boundary
                        # completes the step and starts the next, whose time depends only on the
                        # context. Three copies of the loop: with a window; without, with and
                        # without the divisions by the GPU and DP counts; each a loop, so a branch
                        # the compiler keeps
                        q_end = False
                        if d_windowed:
                            while (wheel[_u(woff + (step & d_mask))] < 0
                                   and wheel[_u(woff + d_mask + 1 + (step & d_mask))] < 0):
                                outstanding -= 0 + nd
                                tokens_out += nd
                                ctx += nd
                                ex += npast
                                kvf = float(ctx) - d_slide * float(ex)
                                kv_time = kvf * d_kvpg / d_dp / d_kv
                                dt_step = _roof_nb(w_s, kv_time, m2n, d_c4 * kvf, d_g, True, d_dc, d_cls, d_gq) + comm_s + d_over + seq_s
                                step += 1
                                batch_sum += nd + 0
                                start = tb
                                busy += dt_step
                                tb = tb + dt_step
                                if not (tb < bound and tb <= lim):
                                    q_end = True
                                    break
                        elif d_divs:
                            while wheel[_u(woff + (step & d_mask))] < 0:
                                outstanding -= 0 + nd
                                tokens_out += nd
                                ctx += nd
                                kvf = float(ctx)
                                kv_time = kvf * d_kvpg / d_dp / d_kv
                                dt_step = _roof_nb(w_s, kv_time, m2n, d_c4 * kvf, d_g, True, d_dc, d_cls, d_gq) + comm_s + d_over + seq_s
                                step += 1
                                batch_sum += nd + 0
                                start = tb
                                busy += dt_step
                                tb = tb + dt_step
                                if not (tb < bound and tb <= lim):
                                    q_end = True
                                    break
                        else:
                            while wheel[_u(woff + (step & d_mask))] < 0:
                                outstanding -= 0 + nd
                                tokens_out += nd
                                ctx += nd
                                kvf = float(ctx)
                                kv_time = kvf * d_kvpg / d_kv
                                dt_step = _roof_nb(w_s, kv_time, m2n, d_c4 * kvf, 1.0, False, d_dc, d_cls, d_gq) + comm_s + d_over + seq_s
                                step += 1
                                batch_sum += nd + 0
                                start = tb
                                busy += dt_step
                                tb = tb + dt_step
                                if not (tb < bound and tb <= lim):
                                    q_end = True
                                    break
                        if q_end:
                            break
                    ist[ii, I_WAIT_HEAD] = wait_head
                    ist[ii, I_N_WAIT] = n_wait
                    ist[ii, I_N_ADMIT] = n_admit
                    ist[ii, I_RESERVED] = reserved
                    ist[ii, I_N_DECODE] = nd
                    ist[ii, I_CTX_SUM] = ctx
                    ist[ii, I_N_PAST] = npast
                    ist[ii, I_EX_SUM] = ex
                    ist[ii, I_ACTIVE] = active
                    ist[ii, I_STEP] = step
                    ist[ii, I_STEP_PF_TOKENS] = 0
                    ist[ii, I_STEP_N_FIN] = 0
                    ist[ii, I_OUTSTANDING] = outstanding
                    ist[ii, I_KV_PEAK] = kv_peak
                    ist[ii, I_BATCH_SUM] = batch_sum
                    ist[ii, I_TOKENS_OUT] = tokens_out
                    fst[ii, F_BUSY] = busy
                    fst[ii, F_STEP_START] = start
                    fst[ii, F_NEXT_T] = tb
                    ntc[_u(ii)] = tb
                    if not lazy:
                        break
                    # the next due decode instance
                    jd = -1
                    for i in range(ii + 1, n_scan):
                        x = ntc[_u(i)]
                        if x < bound and x <= lim:
                            jd = i
                            break
                    if jd < 0:
                        break
                    ii = jd
                in_sys -= n_done
            else:
                # colocated fast path (see the docstring): this boundary and the instance's next
                # ones while nothing else can happen before them, in one loop, with the
                # instance's state in locals. It does exactly what _batch_boundary_nb does at
                # each boundary (complete the step, admit, compose and start the next), for every
                # boundary strictly before ``ta`` and at or before ``lim``; the float operations
                # are the boundary's, in the same order (the step time as in step_time_nb, its
                # step-independent parts from the F_WDENSE .. F_D_EP columns: the same values),
                # so the results are bit for bit those of the generic boundary. Without a window
                # (``windowed`` false) it skips the window wheel and the excess, which stay empty
                # and 0, and composes without the window's terms: the generic boundary's
                # ``float(ctx) - 0.0 * 0.0`` is ``float(ctx)``, the same bits. Request and wheel
                # indices, never negative here, go through _u: numba indexes with an unsigned
                # index without the negative-index wrap (three instructions an access)
                lim = lim_s
                # the instances with a boundary before the arrival and at or before the next
                # sample, in index order: the main loop's cursor, continued here (the next
                # event is one of their boundaries while any remains; no sample or arrival
                # comes between, so ``ta`` and ``lim`` hold)
                while True:
                    woff = ist[ii, I_WHEEL_OFF]
                    pf_head = ist[ii, I_PF_HEAD]
                    wait_head = ist[ii, I_WAIT_HEAD]
                    n_wait = ist[ii, I_N_WAIT]
                    n_admit = ist[ii, I_N_ADMIT]
                    reserved = ist[ii, I_RESERVED]
                    nd = ist[ii, I_N_DECODE]
                    ctx = ist[ii, I_CTX_SUM]
                    npast = ist[ii, I_N_PAST]
                    ex = ist[ii, I_EX_SUM]
                    active = ist[ii, I_ACTIVE]
                    step = ist[ii, I_STEP]
                    pf_tokens = ist[ii, I_STEP_PF_TOKENS]
                    nfin = ist[ii, I_STEP_N_FIN]
                    outstanding = ist[ii, I_OUTSTANDING]
                    kv_peak = ist[ii, I_KV_PEAK]
                    batch_sum = ist[ii, I_BATCH_SUM]
                    tokens_out = ist[ii, I_TOKENS_OUT]
                    busy = fst[ii, F_BUSY]
                    start = fst[ii, F_STEP_START]
                    tb = fst[ii, F_NEXT_T]
                    n_done = 0
                    while True:
                        if active != 0:
                            # complete the step ending at tb
                            gen = nd + nfin
                            outstanding -= pf_tokens + gen
                            tokens_out += gen
                            ctx += nd
                            if windowed:
                                bk = woff + mask + 1 + (step & mask)
                                r = wheel[_u(bk)]
                                if r >= 0:
                                    wheel[_u(bk)] = -1
                                    while r >= 0:
                                        npast += 1
                                        r = xnext[_u(r)]
                                ex += npast
                            bk = woff + (step & mask)
                            r = wheel[_u(bk)]
                            if r >= 0:
                                wheel[_u(bk)] = -1
                                while r >= 0:
                                    finish[_u(r)] = tb
                                    status[_u(r)] = REQ_FINISHED
                                    po = prompt[_u(r)] + output[_u(r)]
                                    ctx -= po
                                    if po > win:
                                        npast -= 1
                                        ex -= po - win
                                    # the run's instances are alike: row 0's window layers
                                    reserved -= _held_int_nb(po, win, sl_0, nl_0)
                                    nd -= 1
                                    n_admit -= 1
                                    n_done += 1
                                    r = wnext[_u(r)]
                            r = pf_head
                            for _ in range(nfin):
                                first[_u(r)] = tb
                                o = output[_u(r)]
                                if o == 1:
                                    finish[_u(r)] = tb
                                    status[_u(r)] = REQ_FINISHED
                                    reserved -= _held_int_nb(prompt[_u(r)] + 1, win, sl_0, nl_0)
                                    n_admit -= 1
                                    n_done += 1
                                else:
                                    bk = woff + ((step + o - 1) & mask)
                                    wnext[_u(r)] = wheel[_u(bk)]
                                    wheel[_u(bk)] = r
                                    nd += 1
                                    c1 = prompt[_u(r)] + 1
                                    ctx += c1
                                    if c1 > win:
                                        npast += 1
                                        ex += c1 - win
                                    elif c1 + o - 1 > win:
                                        bk = woff + mask + 1 + ((step + win - prompt[_u(r)]) & mask)
                                        xnext[_u(r)] = wheel[_u(bk)]
                                        wheel[_u(bk)] = r
                                r = nxt[_u(r)]
                            pf_head = r
                            active = 0
                        # admission: strict FCFS while the KV reservation and the batch cap allow
                        r = wait_head
                        if r >= 0:
                            while r >= 0 and n_admit < cap:
                                need = _held_int_nb(prompt[_u(r)] + output[_u(r)], win, sl_0, nl_0)
                                if reserved + need > budget:
                                    break
                                reserved += need
                                n_admit += 1
                                n_wait -= 1
                                r = nxt[_u(r)]
                            wait_head = r
                            if reserved > kv_peak:
                                kv_peak = reserved
                        if n_admit == 0:
                            fst[ii, F_IDLE_T] = tb
                            tb = np.inf
                            break
                        # compose: every decode + up to ``chunk`` prompt tokens, FCFS. Two copies
                        # of the same loop, with and without a window (each a loop, so a branch the
                        # compiler keeps: the windowless chain of float operations is the one
                        # without the window's terms, which lengthen it)
                        pf_tokens = 0
                        nfin = 0
                        pieces = 0
                        left = chunk
                        r = pf_head
                        if windowed:
                            attn = c4 * (float(ctx) - slide * float(ex))
                            kvt = ctx
                            kex = ex
                            while left > 0 and r != wait_head:
                                s = done[_u(r)]
                                rem = prompt[_u(r)] - s
                                px = rem if rem < left else left
                                kvt += s
                                hs = float(s)
                                e = s - win
                                if e > 0:
                                    kex += e
                                    hs = float(s) - slide * float(e)
                                xf = float(px)
                                attn += c2 * xf * xf + c4p * xf * hs
                                done[_u(r)] = s + px
                                pf_tokens += px
                                left -= px
                                pieces += 1
                                if px == rem:
                                    nfin += 1
                                    r = nxt[_u(r)]
                                else:
                                    break
                            kvf = float(kvt) - slide * float(kex)
                        else:
                            attn = c4 * float(ctx)
                            kvt = ctx
                            while left > 0 and r != wait_head:
                                s = done[_u(r)]
                                rem = prompt[_u(r)] - s
                                px = rem if rem < left else left
                                kvt += s
                                xf = float(px)
                                attn += c2 * xf * xf + c4p * xf * float(s)
                                done[_u(r)] = s + px
                                pf_tokens += px
                                left -= px
                                pieces += 1
                                if px == rem:
                                    nfin += 1
                                    r = nxt[_u(r)]
                                else:
                                    break
                            kvf = float(kvt)
                        dt_step = _step_s_nb(float(nd + pf_tokens), kvf, attn, float(nd + pieces), parts)
                        step += 1
                        active = 1
                        batch_sum += nd + pieces
                        start = tb
                        busy += dt_step
                        tb = tb + dt_step
                        if not (tb < ta and tb <= lim):
                            break
                        # quiet steps (decode only): a step without prompt pieces has every
                        # admitted request decoding and the admission stopped at the queue's head
                        # (empty, or blocked by the batch cap or the KV budget, which only a finish
                        # frees). While no request finishes at a step's end, the next boundary
                        # completes the step (no first token, no finish), admits nothing and
                        # composes the same batch with no pieces: a decode step whose time
                        # depends only on the context. The boundary's operations on that path,
                        # in its order (``0 + nd``, ``c4 * float(ctx)``, then _step_s_nb's float
                        # operations written out, its terms of the batch size from _step_nd_nb
                        # once, as the decode path's quiet steps do): the same bits. Without a
                        # window only; the boundary above takes the step whose end a finish reaches
                        if pieces == 0 and not windowed and wheel[_u(woff + (step & mask))] < 0:
                            q_end = False
                            w_s, m2n, comm_s = _step_nd_nb(float(nd + 0), parts)
                            seq_s = c_ovs * float(nd + 0)
                            while wheel[_u(woff + (step & mask))] < 0:
                                outstanding -= 0 + nd
                                tokens_out += nd
                                ctx += nd
                                kvf = float(ctx)
                                kvb = kvf * c_kvpg
                                kv_time = (kvb / c_dp if c_divdp else kvb) / c_kv
                                dt_step = (_roof_nb(w_s, kv_time, m2n, c4 * kvf, c_g, c_divg, c_dc, c_cls, c_gq) + comm_s
                                           + c_over + seq_s)
                                step += 1
                                batch_sum += nd + 0
                                start = tb
                                busy += dt_step
                                tb = tb + dt_step
                                if not (tb < ta and tb <= lim):
                                    q_end = True
                                    break
                            if q_end:
                                break
                    ist[ii, I_PF_HEAD] = pf_head
                    ist[ii, I_WAIT_HEAD] = wait_head
                    ist[ii, I_N_WAIT] = n_wait
                    ist[ii, I_N_ADMIT] = n_admit
                    ist[ii, I_RESERVED] = reserved
                    ist[ii, I_N_DECODE] = nd
                    ist[ii, I_CTX_SUM] = ctx
                    ist[ii, I_N_PAST] = npast
                    ist[ii, I_EX_SUM] = ex
                    ist[ii, I_ACTIVE] = active
                    ist[ii, I_STEP] = step
                    ist[ii, I_STEP_PF_TOKENS] = pf_tokens
                    ist[ii, I_STEP_N_FIN] = nfin
                    ist[ii, I_OUTSTANDING] = outstanding
                    ist[ii, I_KV_PEAK] = kv_peak
                    ist[ii, I_BATCH_SUM] = batch_sum
                    ist[ii, I_TOKENS_OUT] = tokens_out
                    fst[ii, F_BUSY] = busy
                    fst[ii, F_STEP_START] = start
                    fst[ii, F_NEXT_T] = tb
                    ntc[ii] = tb
                    osc[ii] = outstanding if ist[ii, I_UNROUTED] == 0 else _SKIP
                    in_sys -= n_done
                    ii = -1
                    while cs < n_scan:
                        x = ntc[_u(cs)]
                        if x < ta and x <= lim:
                            ii = cs
                            break
                        cs += 1
                    if ii < 0:
                        break

    rr_io[0] = rr_e
    stop_io[S_SURE] = s_sure
    stop_io[S_STOP_T] = t_end if t_end < horizon else np.nan
    if resume:
        return RUN_OK
    while ms < n_samp:
        _record_nb(ist, wait_s, kv_s, sys_s, ms, in_sys, full)
        ms += 1
    for i in range(ni):
        if ist[i, I_ACTIVE] != 0:
            fst[i, F_BUSY] -= fst[i, F_NEXT_T] - t_end
    return RUN_OK


@njit(cache=True, inline="always")
def _select_nb(x, lo, hi, k):
    """Move the k-th smallest of ``x[lo:hi]`` to ``x[k]``, smaller ones before it, larger after.

    Iterative quickselect (median-of-three pivot, Hoare partition); no NaN in ``x``.
    """
    while hi - lo > 1:
        mid = (lo + hi - 1) >> 1
        a = x[lo]
        b = x[mid]
        c = x[hi - 1]
        if a < b:
            if b < c:
                piv = b
            elif a < c:
                piv = c
            else:
                piv = a
        else:
            if a < c:
                piv = a
            elif b < c:
                piv = c
            else:
                piv = b
        i = lo
        j = hi - 1
        while i <= j:
            while x[i] < piv:
                i += 1
            while x[j] > piv:
                j -= 1
            if i <= j:
                tmp = x[i]
                x[i] = x[j]
                x[j] = tmp
                i += 1
                j -= 1
        # now x[lo:j+1] <= piv <= x[i:hi], and x[j+1:i] == piv
        if k <= j:
            hi = j + 1
        elif k >= i:
            lo = i
        else:
            return


# Buckets of the radix pass of _percentiles_nb (and one more for +inf); below _RADIX_MIN
# values, plain selection.
_N_BUCKETS = 2048
_RADIX_MIN = 1024
_KEY_INF = 0x7FF0000000000000     # bit pattern of +inf, the order key of +inf


@njit(cache=True, inline="always")
def _gather_nb(x, n, ranks, hist):
    """Move the values of ``x[:n]`` whose order ranks include ``ranks`` to the front of ``x``.

    One radix pass over order-preserving integer keys of the values (their float64 bit
    patterns, negatives flipped; keys rise with the value, so buckets of key ranges are
    buckets of value ranges), then a pass that moves every value of the buckets holding the
    wanted ranks to ``x[:f]``. Rewrites ``ranks`` (ascending) as ranks within ``x[:f]``;
    returns ``f``. ``hist`` (int64, ``_N_BUCKETS + 1``) is scratch.
    """
    u = x[:n].view(np.int64)
    flip = np.int64(0x7FFFFFFFFFFFFFFF)
    kmin = np.int64(_KEY_INF)
    kmax = np.int64(-0x7FFFFFFFFFFFFFFF) - 1
    for m in range(n):
        k = u[m]
        if k < 0:
            k ^= flip
        if k < kmin:
            kmin = k
        if k < _KEY_INF and k > kmax:
            kmax = k
    if kmax < kmin:
        kmax = kmin     # nothing finite: all in bucket 0
    s = 0 if kmin >= 0 else 1    # no overflow of kmax - kmin
    while (kmax >> s) - (kmin >> s) >= _N_BUCKETS:
        s += 1
    k0 = kmin >> s
    for c in range(_N_BUCKETS + 1):
        hist[c] = 0
    for m in range(n):
        k = u[m]
        if k < 0:
            k ^= flip
        c = _N_BUCKETS if k > kmax else (k >> s) - k0
        hist[c] += 1
    # buckets of the ranks (ascending), with the number of values before them
    nr = ranks.shape[0]
    bucket = np.empty(nr, np.int64)
    before = np.empty(nr, np.int64)
    j = 0
    acc = 0
    for c in range(_N_BUCKETS + 1):
        nxt_acc = acc + hist[c]
        while j < nr and ranks[j] < nxt_acc:
            bucket[j] = c
            before[j] = acc
            j += 1
        if j == nr:
            break
        acc = nxt_acc
    # rank within the gathered values = values of earlier wanted buckets + rank in the bucket
    kept = 0
    for j in range(nr):
        if j == 0 or bucket[j] != bucket[j - 1]:
            c = bucket[j]
            cnt = hist[c]
            hist[c] = -1 - kept     # mark: a wanted bucket
            kept += cnt
        ranks[j] = -1 - hist[bucket[j]] + ranks[j] - before[j]
    f = 0
    for m in range(n):
        k = u[m]
        if k < 0:
            k ^= flip
        c = _N_BUCKETS if k > kmax else (k >> s) - k0
        if hist[c] < 0:
            v = x[m]
            x[m] = x[f]
            x[f] = v
            f += 1
    return f


@njit(cache=True)
def _percentiles_nb(x, n, out, col, hist):
    """Linear-interpolation P50, P90, P99 of ``x[:n]`` (may hold +inf) into ``out[col:col+3]``.

    Same arithmetic as numpy's linear method; nan when ``n == 0``. Reorders ``x[:n]``. The
    order statistics are exact: from ``_RADIX_MIN`` values on, :func:`_gather_nb` first moves
    the few values that can be them to the front, then selection runs there.
    """
    if n == 0:
        for j in range(3):
            out[col + j] = np.nan
        return
    # ranks lo and hi of P50, P90, P99 (ascending)
    ranks = np.empty(6, np.int64)
    for j in range(3):
        q = 50 if j == 0 else (90 if j == 1 else 99)
        pos = q / 100.0 * (n - 1)
        lo = int(np.floor(pos))
        ranks[2 * j] = lo
        ranks[2 * j + 1] = lo + 1 if lo + 1 < n else n - 1
    f = n
    if n >= _RADIX_MIN:
        f = _gather_nb(x, n, ranks, hist)
    start = 0
    for j in range(3):
        q = 50 if j == 0 else (90 if j == 1 else 99)
        pos = q / 100.0 * (n - 1)
        lo = int(np.floor(pos))
        frac = pos - lo
        kl = ranks[2 * j]
        kh = ranks[2 * j + 1]
        _select_nb(x, start, f, kl)
        a = x[kl]
        b = a
        if kh > kl:
            # the smallest of the elements after rank lo
            b = x[kh]
            for m in range(kh + 1, f):
                if x[m] < b:
                    b = x[m]
        start = kl
        if frac == 0.0 or a == b:
            out[col + j] = a
        elif np.isinf(b):
            out[col + j] = np.inf
        else:
            out[col + j] = a + (b - a) * frac


@njit(cache=True, nogil=True)
def client_times_nb(first, finish, overhead_s):
    """Add a request's time outside the GPU schedule to its first-token and finish times, in place.

    Step model v2's ``StepConstants.request_overhead_s`` (the engine's API server: HTTP,
    tokenisation, streaming): what the client sees is the engine's time plus it; NaN (not reached)
    stays NaN. Nothing is checked (a kernel).

    Parameters
    ----------
    first, finish : float64[:] of shape (n,)
        A run's first-token and finish times (s), written in place.
    overhead_s : float64
        Seconds added to each.
    """
    for r in range(first.shape[0]):
        first[r] += overhead_s
        finish[r] += overhead_s


@njit(cache=True, nogil=True)
def _metrics_nb(arrival, output, first, finish, status, sys_s, buf_a, buf_b, rf, mf, mi):
    """Per-run metrics (``M_*`` / ``MI_*`` columns) from the per-request results of one run.

    The definitions are the engine's (measured window, +inf for unreached events, attainment,
    percentiles, least-squares slope of the number in system over the second half).
    ``buf_a`` / ``buf_b`` (float64, at least the run's length) hold TTFT and TPOT values.
    """
    n = arrival.shape[0]
    horizon = rf[RF_HORIZON]
    lo_t = rf[RF_MEAS_LO] * horizon
    hi_t = rf[RF_MEAS_HI] * horizon
    ttft_slo = rf[RF_TTFT_SLO]
    tpot_slo = rf[RF_TPOT_SLO]
    rejected = 0
    finished = 0
    nm = 0
    nt = 0
    ok = 0
    for r in range(n):
        st = status[r]
        fin = st == REQ_FINISHED
        if st == REQ_REJECTED:
            rejected += 1
        elif fin:
            finished += 1
        a = arrival[r]
        if a >= lo_t and a < hi_t:
            f = first[r]
            ttft = f - a
            if np.isnan(ttft):
                ttft = np.inf
            buf_a[nm] = ttft
            nm += 1
            good = fin and ttft <= ttft_slo
            o = output[r]
            if o > 1:
                if fin:
                    tp = (finish[r] - f) / float(o - 1)
                else:
                    tp = np.inf
                buf_b[nt] = tp
                nt += 1
                good = good and tp <= tpot_slo
            if good:
                ok += 1
    mf[M_ATTAIN] = ok / nm if nm > 0 else np.nan
    hist = np.empty(_N_BUCKETS + 1, np.int64)
    # int64 arguments, never literal constants: a literal is a type, so a compilation, of its own
    _percentiles_nb(buf_a, np.int64(nm), mf, np.int64(M_TTFT50), hist)
    _percentiles_nb(buf_b, np.int64(nt), mf, np.int64(M_TPOT50), hist)
    # overload: least-squares slope of the number in system over samples at t >= horizon / 2
    dt = rf[RF_DT]
    ns = sys_s.shape[0]
    cnt = 0
    st_sum = 0.0
    sy_sum = 0.0
    for k in range(ns):
        tk = k * dt
        if tk >= 0.5 * horizon:
            cnt += 1
            st_sum += tk
            sy_sum += float(sys_s[k])
    slope = 0.0
    if cnt >= 3:
        tm = st_sum / cnt
        ym = sy_sum / cnt
        num = 0.0
        den = 0.0
        for k in range(ns):
            tk = k * dt
            if tk >= 0.5 * horizon:
                tc = tk - tm
                num += tc * (float(sys_s[k]) - ym)
                den += tc * tc
        slope = num / den
    mf[M_SLOPE] = slope
    rate = (n - rejected) / horizon
    over = slope > rf[RF_OVER_FRAC] * rate and slope * 0.5 * horizon >= rf[RF_OVER_MIN]
    mi[MI_REJECTED] = rejected
    mi[MI_FINISHED] = finished
    mi[MI_MEASURED] = nm
    mi[MI_OVERLOADED] = 1 if over else 0


def simulate_one(pp, ist, fst, arrival, prompt, output, first, finish, inst, dinst, status, nxt,
                 done, wheel, wnext, xnext, tr_t, tr_r, wait_s, kv_s, sys_s, buf_a, buf_b, ri, rf, mf,
                 mi, full):
    """One run and its metrics: :func:`_run_nb`, then :func:`_metrics_nb`; returns the run's ``RUN_*`` code.

    The engine calls it for a single run, and for each of many from its worker threads
    (``fastsim.sim.engine._run_worker``); both kernels release the GIL. A Python function, not a
    kernel calling the two: numba would compile that kernel as well, optimising both kernels'
    code once more (about 2 s of a first run's compilation). Every argument has one type (the
    scalars are passed as Python ``int`` / ``float`` / ``bool``), so each kernel compiles once.

    Parameters
    ----------
    pp : float64[:, N_PARAMS]; ist : int64[:, N_ICOLS]; fst : float64[:, N_FCOLS]
        The run's instances: step parameters and state tables.
    arrival : float64[:]; prompt, output : int64[:] (read-only)
        The run's requests (checked by :func:`check_one_nb`).
    first, finish : float64[:]; inst, dinst : int32[:]; status : int8[:]
        Per-request results.
    nxt, done, wnext, xnext, tr_r : int32[:]; tr_t : float64[:]; buf_a, buf_b : float64[:]
        Working arrays, one slot per request (``tr_t`` / ``tr_r`` only for disaggregated plans).
    wheel : int32[:]
        Timing-wheel buckets: at each colocated or decode instance's ``I_WHEEL_OFF``, its finish
        wheel then its window wheel, ``I_WHEEL_MASK + 1`` buckets each (a power of two >= the
        longest output).
    wait_s, kv_s : int64[:]
        ``full``: samples ``(n_samp, n_inst)``, row-major; else empty.
    sys_s : int64[:]
        Samples of the number in system.
    ri : int64[N_RCOLS]; rf : float64[N_RFCOLS]
        The run's rows of the run tables (``R_*`` and ``RF_*`` columns).
    mf : float64[N_MFCOLS]; mi : int64[N_MICOLS]
        Output: the run's metrics.
    full : bool
        Keep the per-instance samples.

    Early stop: with ``rf[RF_STOP_AT] > 0`` the run ends once that many of its measured requests
    have surely missed the SLO (:func:`_run_nb`, ``stop_io``). The metrics of a run that stopped
    are those of what it simulated (every request unfinished at the stop a miss: its attainment
    is a lower bound), ``mf[M_STOP_T]`` the time it stopped, and it reads as overloaded, its
    backlog slope the whole accepted rate (every accepted request stays); ``mi[MI_SURE]`` holds
    the count of sure misses (0 without a check).
    """
    horizon = float(rf[RF_HORIZON])
    stop = np.empty(N_STOP)
    stop[S_AT] = rf[RF_STOP_AT]
    # the client sees every first token (and finish) the request's overhead later (P_REQ_OVERHEAD): a
    # TTFT past the SLO is then one past the SLO less it, in the engine's own times
    c_req = float(pp[0, P_REQ_OVERHEAD])
    stop[S_TTFT] = rf[RF_TTFT_SLO] - c_req if c_req != 0.0 else rf[RF_TTFT_SLO]
    stop[S_TPOT] = rf[RF_TPOT_SLO]
    stop[S_LO] = rf[RF_MEAS_LO] * horizon         # the measure window as _metrics_nb computes it
    stop[S_HI] = rf[RF_MEAS_HI] * horizon
    stop[S_LAG] = rf[RF_STOP_LAG]
    code = _run_nb(pp, ist, fst, arrival, prompt, output, first, finish, inst, dinst, status, nxt,
                   done, wheel, wnext, xnext, tr_t, tr_r, wait_s, kv_s, sys_s, int(ri[R_N_ENTRY]),
                   int(ri[R_ROUTING]), int(ri[R_MAX_TOTAL]), int(ri[R_MAX_PROMPT]), horizon,
                   float(rf[RF_DT]), full, 0, arrival.shape[0], np.zeros(1, np.int64), False, stop)
    if code == RUN_OK:
        if c_req != 0.0:
            client_times_nb(first, finish, c_req)
        _metrics_nb(arrival, output, first, finish, status, sys_s, buf_a, buf_b, rf, mf, mi)
        t_stop = float(stop[S_STOP_T])
        mf[M_STOP_T] = t_stop
        mi[MI_SURE] = int(stop[S_SURE]) if stop[S_AT] > 0 else 0
        if t_stop == t_stop:        # stopped: overloaded, every accepted request in the backlog
            mf[M_SLOPE] = (arrival.shape[0] - mi[MI_REJECTED]) / horizon
            mi[MI_OVERLOADED] = 1
    return code
