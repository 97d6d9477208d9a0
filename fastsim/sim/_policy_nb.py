"""Numba kernel of the engine-policy simulator (semantics: :mod:`fastsim.sim.policy`).

One run is one colocated plan serving one workload under the ``vllm`` or ``sglang`` policy, with
optional prefix caching and speculative decoding. State lives in flat arrays: per request (tokens
known, computed, generated, own KV blocks, cache references, ...), per instance (a ring buffer
for the waiting queue, which takes preempted requests at its front; the running batch in
admission order; scalars) and, with prefix caching, per instance and prefix block (reference
count, owner and an LRU list of the entries no running request references). The kernel uses the
float operations of :mod:`fastsim.sim.reference_policy` in the same order, so both give the same
times to the bit. Nothing here raises: a run returns a status code.

Events. Instances share nothing but the arrivals (routing reads their loads and caches) and the
samples, so once an instance's boundary is the next event the kernel runs its following
boundaries in the same loop while they come strictly before the next arrival (an arrival goes
first at equal times) and at or before the next sample time and the horizon.

The fast decode set (windowless models without speculative decoding). A decode needs one token
and, with its blocks held for ``c`` computed tokens (``ceil(c / bt)``, which the kernel checks),
one more block exactly when ``c`` is a multiple of ``bt``. The longest prefix of the running
batch made of such decodes is kept as a set whose per-request state is frozen at joining and
advanced by a per-instance clock, counted in the steps in which the whole set runs: a member that
joined at clock ``c0`` with ``comp0`` computed tokens has ``comp0 + (clock - c0)`` at a later
clock, and as many more generated tokens. Running sums replace the loops over it: the set's size
(its tokens and decodes), its context ``sum(comp + 1)`` (+ size per step), and the members per
residue class ``(comp0 - c0) mod bt``, whose class ``-clock mod bt`` gives the blocks the step
needs. Finishes come from a timing wheel keyed by the clock of the step giving the last token
(a bucket may also hold later clocks, which stay). A step schedules the set in one piece when
all of it is sure to run: under ``vllm`` when its size fits in the token budget and its blocks in
the free ones (then nobody is preempted, as the set comes first in the batch, and the evictions
after its allocations are those of its final free count); under ``sglang`` in a decode step
whose blocks fit (no retraction); SGLang's prefill steps leave it alone (its clock stands still).
Otherwise (or for retraction) the set is written back to per-request state and the general code
runs; decodes rejoin at later boundaries, after a pause that doubles with consecutive failures.
A finishing member leaves a hole in the batch (its index is kept), so the others' indices do not
move; the holes are dropped once they are many (amortised O(1) per finish) or the set is empty.
Finishing members are released in batch order, as the general loop does.

Pure boundaries. While the set is all that runs, a boundary is completed, scheduled and composed
in one loop on local copies of the instance's state (a tight inner loop while nobody finishes,
nobody waits and the blocks fit, evicting as needed); a boundary whose schedule does not
qualify continues in the general code with its step completed.

SGLang's admission room (the free KV in tokens, free blocks x ``bt``, minus each running
request's ``float(min(O - g, clip)) x ratio``, in batch order, minus the pieces and admissions of
the step) only decides comparisons with a waiting request's needs. With no running output above
the clip the reservations sum to ``ratio x`` an exact integer (a running sum), so the room is
known to within the rounding of its operations; a comparison outside 9 times that bound is the
reference's, else (or with outputs over the clip) the room is computed by the reference's
operations in its order.

Step time: :func:`fastsim.stepmodel.step_time_nb`'s expression with its step-independent parts
computed once (the same values; exact shortcuts as in ``_kernels``). Helpers that take arrays cost
reference counts at each call, so frequent paths (finishes, evictions) are written out in place.
Prefix-cache tables are int32 and only the reference counts are filled at the start.
"""
from __future__ import annotations

# numba's cache=True watches only this file, not the kernels it calls in other files
# (fastsim.stepmodel.step_time_nb, fastsim.sim._kernels): when one of them changes, change this
# line so that a cache compiled before is not reused. Step model revision: 4 (kernel classes,
# StepConstants.step_form; the GEMM class's blend, StepConstants.gemm_blend_p).

import numpy as np
from numba import njit

from ..stepmodel import (P_ALPHA, P_DP, P_EP_BW, P_ETA_BW, P_ETA_C, P_ETA_NV, P_GPUS, P_HBM_BW, P_HIDDEN,
                         P_KFRAC, P_KVPG, P_LAYERS, P_MATMUL, P_N_A2A, P_N_AR, P_NVLINK, P_OVERHEAD, P_PEAK,
                         P_QDIM_DEC, P_QDIM_PF, P_TOPK, P_TP, P_WDENSE, P_WEXP, P_ETA_KV, P_REQ_OVERHEAD, P_OVERHEAD_SEQ, P_CLASSES, P_GEMM_Q,
                         step_time_nb)
from . import _kernels as K
from .records import REQ_FINISHED, REQ_REJECTED, REQ_UNFINISHED, RUN_OK

VLLM = 0
SGLANG = 1
TRTLLM = 2
ROUTE_LEAST_LOADED = 0
ROUTE_ROUND_ROBIN = 1
ROUTE_PREFIX_AWARE = 2

# int64 configuration row of a run (set by the wrapper)
(C_KIND, C_BUDGET, C_MAX_SEQS, C_BT, C_CACHING, C_BTH, C_GAMMA, C_CLIP, C_RETRACT, C_ROUTING, C_N_INST,
 C_MAX_CONTEXT, C_NB_TOTAL, C_SEED, C_ROUTE_ABS, C_WINDOW, C_SLIDE_L, C_N_LAYERS, C_N_BLOCK_IDS,
 C_PRIVATE, C_CHUNK_UNIT, C_WHOLE_CONTEXT, C_SPANS) = range(23)
N_CCOLS = 23
# float64 configuration row of a run
(CF_ALPHA, CF_RATIO_INIT, CF_RATIO_MIN, CF_RATIO_DECAY, CF_ROUTE_REL, CF_ROUTE_THR, CF_SLIDE) = range(7)
N_CFCOLS = 7

# int64 per-instance outputs
(O_STEPS, O_BATCH_SUM, O_TOKENS_OUT, O_KV_PEAK, O_PREEMPT, O_CACHED, O_SPEC_ROUNDS, O_SPEC_TOKENS,
 O_PROMPT_ADMITTED) = range(9)
N_OCOLS = 9

_M64_GOLD = np.uint64(0x9E3779B97F4A7C15)
_M64_STEP = np.uint64(0xD1B54A32D192ED03)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


@njit(cache=True, inline="always")
def _uniform_nb(seed, r, k):
    """The uniform in [0, 1) of request ``r``'s ``k``-th speculative round (splitmix64 finaliser)."""
    z = np.uint64(seed) + np.uint64(r + 1) * _M64_GOLD + np.uint64(k + 1) * _M64_STEP
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    z = z ^ (z >> np.uint64(31))
    return float(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True, inline="always")
def _held(c, w, s, lay):
    e = c - w
    return c - (s * e) // lay if e > 0 else c


@njit(cache=True, inline="always")
def _nb(c, w, s, lay, bt):
    return (_held(c, w, s, lay) + bt - 1) // bt


@njit(cache=True, inline="always")
def _evict_nb(i, e0, lhead, lnext, lprev, ltail, eref, eown, cfree, free, bpb):
    """Evict least recently released cache entries of instance ``i`` until the cached blocks fit the free ones.

    Inlined where it is called (no call, no reference counts on the arrays): it runs on hot paths.
    """
    while cfree[i] > free[i]:
        bid = lhead[i]
        lhead[i] = lnext[e0 + bid]
        if lhead[i] >= 0:
            lprev[e0 + lhead[i]] = -1
        else:
            ltail[i] = -1
        eref[e0 + bid] = -1
        eown[e0 + bid] = -1
        cfree[i] -= bpb


@njit(cache=True, inline="always")
def _take_hits_nb(i, r, h, e0, boff, bids, eref, lprev, lnext, lhead, ltail, cfree, free, bpb):
    """Reference request ``r``'s ``h`` leading cache entries on instance ``i`` at its admission; an entry
    nobody referenced leaves the LRU list and its blocks leave the free KV. Inlined where it is called.
    """
    for j in range(h):
        bid = bids[boff[r] + j]
        if eref[e0 + bid] == 0:
            pv = lprev[e0 + bid]
            nx = lnext[e0 + bid]
            if pv >= 0:
                lnext[e0 + pv] = nx
            else:
                lhead[i] = nx
            if nx >= 0:
                lprev[e0 + nx] = pv
            else:
                ltail[i] = pv
            cfree[i] -= bpb
            free[i] -= bpb
        eref[e0 + bid] += 1


@njit(cache=True, inline="always")
def _cache_rest_nb(r, e0, b0, upto, nxb, bids, eref, eown, own, nref, bpb):
    """Make request ``r``'s listed blocks ``nxb[r] .. upto - 1`` cache entries (those not cached yet).

    The blocks that hold generated tokens (rows that span the output): at the request's finish,
    and under ``vllm`` at its preemption. Inlined where it is called.
    """
    while nxb[r] < upto:
        bid = bids[b0 + nxb[r]]
        if eref[e0 + bid] < 0:
            eref[e0 + bid] = 1
            eown[e0 + bid] = r
            own[r] -= bpb
            nref[r] += 1
        nxb[r] += 1


@njit(cache=True)
def _release_nb(i, r, e0, caching, boff, bids, nxb, hh, eown, eref, lprev, lnext, lhead, ltail, cfree, free,
                own, nref, bpb, private, bth, prompt, comp, keep_out):
    """Drop request ``r``'s cache references (an entry nobody references joins the LRU tail, the request's last
    block first) and free its blocks.

    For the rare paths (preemption, retraction): a call costs reference counts on every array it is
    passed, so the finishes, which are frequent, have this code written out in place. With private
    blocks, the request's computed full prompt blocks become cache entries here, at its preemption;
    with ``keep_out`` (vllm, rows that span the output) so do its computed full blocks of
    generated tokens.
    """
    if caching:
        b0 = boff[r]
        if keep_out:
            _cache_rest_nb(r, e0, b0, min(boff[r + 1] - b0, comp[r] // bth), nxb, bids, eref, eown, own, nref, bpb)
        if private:
            nfull = min(min(boff[r + 1] - b0, prompt[r] // bth), comp[r] // bth)
            _cache_rest_nb(r, e0, b0, nfull, nxb, bids, eref, eown, own, nref, bpb)
        for j in range(nxb[r] - 1, -1, -1):
            bid = bids[b0 + j]
            if j < hh[r] or eown[e0 + bid] == r:
                if j >= hh[r]:
                    eown[e0 + bid] = -1
                eref[e0 + bid] -= 1
                if eref[e0 + bid] == 0:
                    lprev[e0 + bid] = ltail[i]
                    lnext[e0 + bid] = -1
                    if ltail[i] >= 0:
                        lnext[e0 + ltail[i]] = bid
                    else:
                        lhead[i] = bid
                    ltail[i] = bid
                    cfree[i] += bpb
                    free[i] += bpb
    free[i] += own[r]
    own[r] = 0
    nref[r] = 0


@njit(cache=True)
def _materialise_nb(i, r0, rbuf, nF, hol, nrun, fc, ctxF, cnt, cb0, bt, wheel, wb0, wmask, fc0, finc, comp, gen,
                    ntok, own, sched):
    """Write back the per-request state of instance i's fast decodes, empty the fast set, drop the holes."""
    c = fc[i]
    fend = nF[i] + hol[i]
    k2 = 0
    for k in range(nrun[i] + hol[i]):
        r = rbuf[r0 + k]
        if r < 0:
            continue
        if k < fend:
            d = c - fc0[r]
            own[r] += (comp[r] + d + bt - 1) // bt - (comp[r] + bt - 1) // bt
            comp[r] += d
            gen[r] += d
            ntok[r] += d
            sched[r] = 0
            wheel[wb0 + (finc[r] & wmask)] = -1
        rbuf[r0 + k2] = r
        k2 += 1
    for j in range(bt):
        cnt[cb0 + j] = 0
    ctxF[i] = 0
    nF[i] = 0
    hol[i] = 0


@njit(cache=True)
def _run_policy_nb(p, pd, cfg, cf, arrival, prompt, output, boff, bids, first, finish, inst_out, status,
                   cached_out, preempt_out, busy, iout, wait_s, kv_s, sys_s, horizon, dt, full):
    n = arrival.shape[0]
    kind = cfg[C_KIND]
    B = cfg[C_BUDGET]
    S = cfg[C_MAX_SEQS]
    bt = cfg[C_BT]
    caching = cfg[C_CACHING] != 0
    private = cfg[C_PRIVATE] != 0
    # rows that span the output: their blocks past the prompt's full ones become cache entries at
    # the finish (and under vllm at a preemption), and every listed block can be hit
    spans = cfg[C_SPANS] != 0
    bth = cfg[C_BTH]
    bpb = bth // bt if bth > 0 else 0
    gamma = cfg[C_GAMMA]
    clip = cfg[C_CLIP]
    rsteps = cfg[C_RETRACT]
    routing = cfg[C_ROUTING]
    ni = cfg[C_N_INST]
    max_ctx = cfg[C_MAX_CONTEXT]
    nbt = cfg[C_NB_TOTAL]
    seed = cfg[C_SEED]
    r_abs = cfg[C_ROUTE_ABS]
    W = cfg[C_WINDOW]
    SL = cfg[C_SLIDE_L]
    NL = cfg[C_N_LAYERS]
    H = cfg[C_N_BLOCK_IDS] if caching else 0
    keep_out = spans and kind == VLLM
    # trtllm: chunks cut short are rounded down to this many tokens; contexts run whole (no chunking)
    unit = cfg[C_CHUNK_UNIT]
    whole = cfg[C_WHOLE_CONTEXT] != 0
    alpha = cf[CF_ALPHA]
    r_rel = cf[CF_ROUTE_REL]
    r_thr = cf[CF_ROUTE_THR]
    f = cf[CF_SLIDE]
    lay = p[P_LAYERS]
    qdec = p[P_QDIM_DEC]
    qpf = p[P_QDIM_PF]
    ld = pd[P_LAYERS]
    qd = pd[P_QDIM_DEC]
    g1 = float(gamma + 1)
    per = gamma + 1
    # the fast decode set (module docstring): windowless, without speculation
    fastok = gamma == 0 and SL == 0
    # step-time constants: the factors of the reference's products, grouped as it groups them
    c4g = 4.0 * lay * qdec * g1
    c2p = 2.0 * lay * qpf
    c4p = 4.0 * lay * qpf
    # step_time_nb's step-independent parts, by the same expressions (same values)
    tp = p[P_TP]
    g = p[P_GPUS]
    dp = p[P_DP]
    topk = p[P_TOPK]
    kvpg = p[P_KVPG]
    hid = p[P_HIDDEN]
    overhead = p[P_OVERHEAD]
    ovh_seq = p[P_OVERHEAD_SEQ]
    classes = p[P_CLASSES] != 0.0       # a roofline per kernel class (StepConstants.step_form)
    gq = p[P_GEMM_Q]                    # the GEMM class's blend (StepConstants.gemm_blend_p)
    d_bw = p[P_ETA_BW] * p[P_HBM_BW]
    d_kv = p[P_ETA_KV] * p[P_HBM_BW]     # the KV read's divisor (d_bw's value under SPEC §3's constants)
    wdense = p[P_WDENSE]
    wexp = p[P_WEXP]
    keep = 1.0 - p[P_KFRAC]
    matmul2 = 2.0 * p[P_MATMUL]
    d_c = p[P_ETA_C] * p[P_PEAK]
    n_ar = p[P_N_AR]
    ar_a = 2.0 * (tp - 1.0) * p[P_ALPHA]
    ar_b = 2.0 * (tp - 1.0) / tp
    d_nv = p[P_ETA_NV] * p[P_NVLINK]
    a2a_n2 = p[P_N_A2A] * 2.0
    a2a_a = (g - 1.0) * p[P_ALPHA]
    a2a_b = (g - 1.0) / g
    d_ep = p[P_ETA_NV] * p[P_EP_BW]
    # exact shortcuts (as in _kernels' colocated path): x / 1.0 == x; a dense model's weight read
    # is (wdense + 0.0) / d_bw == wdense / d_bw; with ar_b == 0 and no all-to-all the
    # communication is the same signed zero product at every step (n_tokens >= 1), computed once
    div_g = g != 1.0
    div_dp = dp != 1.0
    moe_w = wexp != 0.0
    weight_c = wdense / d_bw
    comm_fixed = (ar_b == 0.0 and a2a_n2 == 0.0 and d_nv != 0.0 and d_ep != 0.0
                  and abs(hid) < 1e280 and abs(topk) < 1e280 and g >= 1.0 and dp >= 1.0)
    comm_c = (n_ar * (ar_a + ar_b * (1.0 / dp * hid * 2.0) / d_nv)
              + a2a_n2 * (a2a_a + a2a_b * (1.0 * topk / g * hid * 2.0) / d_ep)) if comm_fixed else 0.0
    # per request
    ntok = np.empty(n, np.int64)
    comp = np.zeros(n, np.int64)
    gen = np.zeros(n, np.int64)
    own = np.zeros(n, np.int64)
    hh = np.zeros(n, np.int64)
    nref = np.zeros(n, np.int64)
    nxb = np.zeros(n, np.int64)
    sched = np.zeros(n, np.int64)
    dec = np.zeros(n, np.bool_)
    once = np.zeros(n, np.bool_)
    rounds = np.zeros(n, np.int64)
    fc0 = np.zeros(n, np.int64)      # fast set: the instance's fast clock when the request joined
    finc = np.zeros(n, np.int64)     # fast set: the clock of the step that gives its last token
    fkey = np.zeros(n, np.int64)     # fast set: its residue class, (computed - clock) mod bt
    fpos = np.zeros(n, np.int64)     # fast set: its index in the running batch (holes included)
    wnext = np.full(n, -1, np.int64)  # fast set: next request of its wheel bucket
    rsvr = np.zeros(n if kind == TRTLLM else 1, np.int64)   # trtllm: the blocks a request reserved
    maxo = 1
    for r in range(n):
        ntok[r] = prompt[r]
        first[r] = np.nan
        finish[r] = np.nan
        inst_out[r] = -1
        status[r] = REQ_UNFINISHED
        cached_out[r] = 0
        preempt_out[r] = 0
        if output[r] > maxo:
            maxo = output[r]
    # per instance
    qcap = n + 1
    qbuf = np.empty(ni * qcap, np.int64)
    qhead = np.zeros(ni, np.int64)
    qlen = np.zeros(ni, np.int64)
    scap = min(S, n) + 1
    # the running batch: the fast set (with holes where members finished) then the others
    rcap = 2 * scap + 16
    rbuf = np.empty(ni * rcap, np.int64)
    dueb = np.empty(scap, np.int64)
    nrun = np.zeros(ni, np.int64)
    free = np.full(ni, nbt, np.int64)
    cfree = np.zeros(ni, np.int64)
    ratio = np.full(ni, cf[CF_RATIO_INIT], np.float64)
    rem = np.zeros(ni, np.int64)
    unf = np.zeros(ni, np.int64)
    active = np.zeros(ni, np.bool_)
    next_t = np.full(ni, np.inf, np.float64)
    for i in range(ni):
        busy[i] = 0.0
        for c in range(N_OCOLS):
            iout[i, c] = 0
    # fast decode set per instance: size, clock, context sum, scheduled in the running step,
    # the residue class that needs a block at the current clock, failures, next step to join
    nF = np.zeros(ni, np.int64)
    hol = np.zeros(ni, np.int64)     # holes in the fast set's part of the batch (0 when it is empty)
    # SGLang's admission room: the running requests' output tokens left (exact) and how many of
    # them can exceed the clip (then the room is summed request by request)
    mog = np.zeros(ni, np.int64)
    nbig = np.zeros(ni, np.int64)
    advb = np.empty(scap, np.float64)
    fc = np.zeros(ni, np.int64)
    ctxF = np.zeros(ni, np.int64)
    fsched = np.zeros(ni, np.bool_)
    cidx = np.zeros(ni, np.int64)
    fails = np.zeros(ni, np.int64)
    jnext = np.zeros(ni, np.int64)
    wsz = 1
    while wsz <= maxo and wsz < 8192:
        wsz *= 2
    wmask = wsz - 1
    wheel = np.full(ni * wsz if fastok else 1, -1, np.int64)
    cnt = np.zeros(ni * bt if fastok else 1, np.int64)
    # prefix cache: per instance and block id
    ecap = max(H, 1)
    # (int32, and only the reference counts filled: with many block ids these tables are large,
    # and an owner or LRU link is only read after it was written)
    eref = np.full(ni * ecap, -1, np.int32)      # -1: not cached
    eown = np.empty(ni * ecap, np.int32)
    lprev = np.empty(ni * ecap, np.int32)
    lnext = np.empty(ni * ecap, np.int32)
    lhead = np.full(ni, -1, np.int64)
    ltail = np.full(ni, -1, np.int64)

    n_samp = sys_s.shape[0]
    ms = 0
    in_sys = 0
    ia = 0
    rr = 0
    while True:
        # next event: the arrival first at equal times, then the lowest instance index
        t = np.inf
        ev = -1
        if ia < n:
            t = arrival[ia]
        for i in range(ni):
            if next_t[i] < t:
                t = next_t[i]
                ev = i
        if not (t <= horizon):
            break
        while ms < n_samp and ms * dt < t:
            sys_s[ms] = in_sys
            if full:
                for i in range(ni):
                    wait_s[ms * ni + i] = qlen[i]
                    kv_s[ms * ni + i] = (nbt - free[i]) * bt
            ms += 1
        if ev < 0:
            r = ia
            ia += 1
            P = prompt[r]
            O = output[r]
            if P + O > max_ctx or _nb(P + O + gamma, W, SL, NL, bt) > nbt or (whole and P > B):
                status[r] = REQ_REJECTED
                continue
            # routing
            if routing == ROUTE_ROUND_ROBIN:
                best = rr % ni
            else:
                best = 0
                for i in range(1, ni):
                    if rem[i] < rem[best]:
                        best = i
                if routing == ROUTE_PREFIX_AWARE:
                    lo = unf[0]
                    hi = unf[0]
                    for i in range(1, ni):
                        lo = min(lo, unf[i])
                        hi = max(hi, unf[i])
                    if not (hi - lo > r_abs and float(hi) > r_rel * float(lo)):
                        m = 0
                        cand = -1
                        b0 = boff[r]
                        nbl = boff[r + 1] - b0
                        cap = 0
                        if caching:
                            cap = min(nbl if spans else min(nbl, P // bth), (ntok[r] - 1) // bth)
                        for i in range(ni):
                            hcount = 0
                            while hcount < cap and eref[i * ecap + bids[b0 + hcount]] >= 0:
                                hcount += 1
                            if hcount > m or (hcount == m and m > 0 and rem[i] < rem[cand]):
                                m = hcount
                                cand = i
                        if m > 0 and float(m * bth) > r_thr * float(P):
                            best = cand
            rr += 1
            inst_out[r] = best
            qbuf[best * qcap + (qhead[best] + qlen[best]) % qcap] = r
            qlen[best] += 1
            rem[best] += P + O
            unf[best] += 1
            in_sys += 1
            if next_t[best] == np.inf:
                next_t[best] = t
            continue
        # ---- step boundaries of instance i: this one and the next ones before the next arrival
        # and sample (nothing else reads or writes its state; see the module docstring) ----
        i = ev
        e0 = i * ecap
        r0 = i * rcap
        wb0 = i * wsz
        cb0 = i * bt
        ta = arrival[ia] if ia < n else np.inf
        lim = ms * dt if ms < n_samp else np.inf
        if horizon < lim:
            lim = horizon
        while True:
            skipc = False
            if fastok and active[i] and fsched[i] and nrun[i] == nF[i]:
                # pure boundaries: the fast set is all that runs. Each boundary is what the general
                # code below does, in locals: complete the step (one token each; finishing members
                # from the wheel bucket, in batch order), then, while nobody waits and the set
                # fits (budget under vllm, blocks), schedule it in one piece (evicting as needed;
                # SGLang: a decode step, the ratio decays) and compose the step. A boundary whose
                # schedule does not qualify goes on in the general code with its step completed.
                c = fc[i]
                nf = nF[i]
                ctx = ctxF[i]
                ci = cidx[i]
                fr = free[i]
                cfr = cfree[i]
                rt = ratio[i]
                bz = busy[i]
                peak = iout[i, O_KV_PEAK]
                n_pure = 0
                tok_d = 0
                rem_d = 0
                bsum_d = 0
                stop = False
                nf_st = -1
                weight_s = 0.0
                comm_s = 0.0
                mm = 0.0
                seq_d = 0.0
                while True:
                    if qlen[i] == 0 and not (kind != SGLANG and nf > B):
                        # the common case in a tight loop: nobody finishes (checked before the
                        # step is completed), nobody waits, the blocks fit
                        if nf != nf_st:
                            nf_st = nf
                            ntf = float(nf)
                            if moe_w:
                                weight_s = (wdense + wexp * (1.0 - keep ** ntf)) / d_bw
                            else:
                                weight_s = weight_c
                            if comm_fixed:
                                comm_s = comm_c
                            else:
                                comm_s = (n_ar * (ar_a + ar_b * (ntf / dp * hid * 2.0) / d_nv)
                                          + a2a_n2 * (a2a_a + a2a_b * (ntf * topk / g * hid * 2.0) / d_ep))
                            mm = matmul2 * ntf
                            seq_d = ovh_seq * ntf
                        while True:
                            if wheel[wb0 + (c & wmask)] >= 0:
                                break
                            ci2 = ci - 1 if ci > 0 else bt - 1
                            needf = cnt[cb0 + ci2]
                            if needf > fr:
                                break
                            tok_d += nf
                            rem_d += nf
                            c += 1
                            ci = ci2
                            ctx += nf
                            fr -= needf
                            while cfr > fr:
                                bid = lhead[i]
                                lhead[i] = lnext[e0 + bid]
                                if lhead[i] >= 0:
                                    lprev[e0 + lhead[i]] = -1
                                else:
                                    ltail[i] = -1
                                eref[e0 + bid] = -1
                                eown[e0 + bid] = -1
                                cfr -= bpb
                            if kind == SGLANG:
                                rt = max(rt - cf[CF_RATIO_DECAY], cf[CF_RATIO_MIN])
                            used = (nbt - fr) * bt
                            if used > peak:
                                peak = used
                            kvf = float(ctx) - f * 0.0
                            attn = c4g * kvf
                            kvb = kvf * kvpg
                            kv_time = (kvb / dp if div_dp else kvb) / d_kv
                            roof = K._roof_nb(weight_s, kv_time, mm, attn, g, div_g, d_c, classes, gq)
                            d = roof + comm_s + overhead + seq_d
                            n_pure += 1
                            bsum_d += nf
                            t = t + d
                            bz += d
                            if not (t < ta and t <= lim):
                                stop = True
                                break
                        if stop:
                            break
                    # a boundary with finishes (or whose schedule may not qualify)
                    tok_d += nf
                    bk = wb0 + (c & wmask)
                    r = wheel[bk]
                    ndue = 0
                    if r >= 0:
                        hd = -1
                        while r >= 0:
                            nx = wnext[r]
                            if finc[r] == c:
                                a2 = ndue
                                while a2 > 0 and fpos[dueb[a2 - 1]] > fpos[r]:
                                    dueb[a2] = dueb[a2 - 1]
                                    a2 -= 1
                                dueb[a2] = r
                                ndue += 1
                            else:
                                wnext[r] = hd
                                hd = r
                            r = nx
                        wheel[bk] = hd
                    rem_d += nf + ndue
                    if ndue > 0:
                        for a2 in range(ndue):
                            r = dueb[a2]
                            if output[r] > clip:
                                nbig[i] -= 1
                            d = c - fc0[r]
                            cn = comp[r] + d + 1
                            own[r] += (cn + bt - 1) // bt - (comp[r] + bt - 1) // bt
                            ctx -= cn
                            cnt[cb0 + fkey[r]] -= 1
                            ntok[r] += d
                            comp[r] = cn
                            gen[r] = output[r]
                            finish[r] = t
                            status[r] = REQ_FINISHED
                            rbuf[r0 + fpos[r]] = -1
                            in_sys -= 1
                            unf[i] -= 1
                            if caching:
                                b0 = boff[r]
                                if spans:
                                    _cache_rest_nb(r, e0, b0, min(boff[r + 1] - b0, comp[r] // bth), nxb, bids, eref,
                                                   eown, own, nref, bpb)
                                for j in range(nxb[r] - 1, -1, -1):
                                    bid = bids[b0 + j]
                                    if j < hh[r] or eown[e0 + bid] == r:
                                        if j >= hh[r]:
                                            eown[e0 + bid] = -1
                                        eref[e0 + bid] -= 1
                                        if eref[e0 + bid] == 0:
                                            lprev[e0 + bid] = ltail[i]
                                            lnext[e0 + bid] = -1
                                            if ltail[i] >= 0:
                                                lnext[e0 + ltail[i]] = bid
                                            else:
                                                lhead[i] = bid
                                            ltail[i] = bid
                                            cfr += bpb
                                            fr += bpb
                            fr += own[r]
                            own[r] = 0
                            nref[r] = 0
                        nf -= ndue
                        hol[i] += ndue
                        nrun[i] -= ndue
                        if nf == 0 or (hol[i] > 16 and 2 * hol[i] > nf):
                            k2 = 0
                            for k in range(nf + hol[i]):
                                r = rbuf[r0 + k]
                                if r >= 0:
                                    fpos[r] = k2
                                    rbuf[r0 + k2] = r
                                    k2 += 1
                            hol[i] = 0
                    ctx += nf
                    c += 1
                    ci = ci - 1 if ci > 0 else bt - 1
                    needf = cnt[cb0 + ci]
                    if nf == 0 or qlen[i] > 0 or (kind != SGLANG and nf > B) or needf > fr:
                        skipc = True
                        break
                    fr -= needf
                    while cfr > fr:
                        bid = lhead[i]
                        lhead[i] = lnext[e0 + bid]
                        if lhead[i] >= 0:
                            lprev[e0 + lhead[i]] = -1
                        else:
                            ltail[i] = -1
                        eref[e0 + bid] = -1
                        eown[e0 + bid] = -1
                        cfr -= bpb
                    if kind == SGLANG:
                        rt = max(rt - cf[CF_RATIO_DECAY], cf[CF_RATIO_MIN])
                    used = (nbt - fr) * bt
                    if used > peak:
                        peak = used
                    if nf != nf_st:
                        nf_st = nf
                        ntf = float(nf)
                        if moe_w:
                            weight_s = (wdense + wexp * (1.0 - keep ** ntf)) / d_bw
                        else:
                            weight_s = weight_c
                        if comm_fixed:
                            comm_s = comm_c
                        else:
                            comm_s = (n_ar * (ar_a + ar_b * (ntf / dp * hid * 2.0) / d_nv)
                                      + a2a_n2 * (a2a_a + a2a_b * (ntf * topk / g * hid * 2.0) / d_ep))
                        mm = matmul2 * ntf
                        seq_d = ovh_seq * ntf
                    kvf = float(ctx) - f * 0.0
                    attn = c4g * kvf
                    kvb = kvf * kvpg
                    kv_time = (kvb / dp if div_dp else kvb) / d_kv
                    roof = K._roof_nb(weight_s, kv_time, mm, attn, g, div_g, d_c, classes, gq)
                    d = roof + comm_s + overhead + seq_d
                    n_pure += 1
                    bsum_d += nf
                    t = t + d
                    bz += d
                    if not (t < ta and t <= lim):
                        stop = True
                        break
                iout[i, O_TOKENS_OUT] += tok_d
                rem[i] -= rem_d
                mog[i] -= tok_d
                iout[i, O_STEPS] += n_pure
                iout[i, O_BATCH_SUM] += bsum_d
                iout[i, O_KV_PEAK] = peak
                fc[i] = c
                cidx[i] = ci
                ctxF[i] = ctx
                nF[i] = nf
                free[i] = fr
                cfree[i] = cfr
                ratio[i] = rt
                busy[i] = bz
                next_t[i] = t
                if n_pure > 0:
                    fails[i] = 0
                if skipc:
                    fsched[i] = False
                if stop:
                    break
            if active[i] and not skipc:
                # the others start after the fast set and its holes (finishing members turn into
                # holes, so that index does not move)
                kst = nF[i] + hol[i]
                kend = nrun[i] + hol[i]
                if fsched[i]:
                    # the fast set's step: one token each; finishes from the wheel bucket
                    fsched[i] = False
                    c = fc[i]
                    nf = nF[i]
                    iout[i, O_TOKENS_OUT] += nf
                    bk = wb0 + (c & wmask)
                    r = wheel[bk]
                    ndue = 0
                    if r >= 0:
                        hd = -1
                        while r >= 0:
                            nx = wnext[r]
                            if finc[r] == c:
                                # in batch order (as the general loop releases them)
                                a = ndue
                                while a > 0 and fpos[dueb[a - 1]] > fpos[r]:
                                    dueb[a] = dueb[a - 1]
                                    a -= 1
                                dueb[a] = r
                                ndue += 1
                            else:
                                wnext[r] = hd
                                hd = r
                            r = nx
                        wheel[bk] = hd
                    rem[i] -= nf + ndue
                    mog[i] -= nf
                    for a in range(ndue):
                        r = dueb[a]
                        if output[r] > clip:
                            nbig[i] -= 1
                        d = c - fc0[r]
                        cn = comp[r] + d + 1
                        own[r] += (cn + bt - 1) // bt - (comp[r] + bt - 1) // bt
                        ctxF[i] -= cn
                        cnt[cb0 + fkey[r]] -= 1
                        ntok[r] += d
                        comp[r] = cn
                        gen[r] = output[r]
                        finish[r] = t
                        status[r] = REQ_FINISHED
                        rbuf[r0 + fpos[r]] = -1
                        in_sys -= 1
                        unf[i] -= 1
                        if caching:
                            b0 = boff[r]
                            if spans:
                                _cache_rest_nb(r, e0, b0, min(boff[r + 1] - b0, comp[r] // bth), nxb, bids, eref,
                                               eown, own, nref, bpb)
                            for j in range(nxb[r] - 1, -1, -1):
                                bid = bids[b0 + j]
                                if j < hh[r] or eown[e0 + bid] == r:
                                    if j >= hh[r]:
                                        eown[e0 + bid] = -1
                                    eref[e0 + bid] -= 1
                                    if eref[e0 + bid] == 0:
                                        lprev[e0 + bid] = ltail[i]
                                        lnext[e0 + bid] = -1
                                        if ltail[i] >= 0:
                                            lnext[e0 + ltail[i]] = bid
                                        else:
                                            lhead[i] = bid
                                        ltail[i] = bid
                                        cfree[i] += bpb
                                        free[i] += bpb
                        free[i] += own[r]
                        own[r] = 0
                        nref[r] = 0
                    nF[i] -= ndue
                    hol[i] += ndue
                    ctxF[i] += nF[i]
                    fc[i] = c + 1
                    cidx[i] = cidx[i] - 1 if cidx[i] > 0 else bt - 1
                k2 = kst
                for k in range(kst, kend):
                    r = rbuf[r0 + k]
                    x = sched[r]
                    if x > 0:
                        rem[i] -= (ntok[r] - comp[r]) + (output[r] - gen[r])
                        fin = False
                        if dec[r] and gamma > 0:
                            u = _uniform_nb(seed, r, rounds[r])
                            rounds[r] += 1
                            kacc = 0
                            thr = alpha
                            while kacc < gamma and u < thr:
                                kacc += 1
                                thr *= alpha
                            a = min(1 + kacc, output[r] - gen[r])
                            mog[i] -= a
                            iout[i, O_SPEC_ROUNDS] += 1
                            iout[i, O_SPEC_TOKENS] += a
                            comp[r] += a
                            gen[r] += a
                            iout[i, O_TOKENS_OUT] += a
                            if gen[r] == output[r]:
                                fin = True
                            else:
                                ntok[r] += a
                        else:
                            comp[r] += x
                            if comp[r] == ntok[r]:
                                gen[r] += 1
                                mog[i] -= 1
                                iout[i, O_TOKENS_OUT] += 1
                                if gen[r] == 1:
                                    first[r] = t
                                if gen[r] == output[r]:
                                    fin = True
                                else:
                                    ntok[r] += 1
                        if not fin:
                            rem[i] += (ntok[r] - comp[r]) + (output[r] - gen[r])
                        if caching and not private:
                            b0 = boff[r]
                            nfull = min(boff[r + 1] - b0, prompt[r] // bth)
                            while nxb[r] < nfull and (nxb[r] + 1) * bth <= comp[r]:
                                bid = bids[b0 + nxb[r]]
                                if eref[e0 + bid] < 0:
                                    eref[e0 + bid] = 1
                                    eown[e0 + bid] = r
                                    own[r] -= bpb
                                    nref[r] += 1
                                nxb[r] += 1
                        sched[r] = 0
                        if fin:
                            finish[r] = t
                            status[r] = REQ_FINISHED
                            if output[r] > clip:
                                nbig[i] -= 1
                            in_sys -= 1
                            unf[i] -= 1
                            if caching:
                                b0 = boff[r]
                                if spans:
                                    _cache_rest_nb(r, e0, b0, min(boff[r + 1] - b0, comp[r] // bth), nxb, bids, eref,
                                                   eown, own, nref, bpb)
                                for j in range(nxb[r] - 1, -1, -1):
                                    bid = bids[b0 + j]
                                    if j < hh[r] or eown[e0 + bid] == r:
                                        if j >= hh[r]:
                                            eown[e0 + bid] = -1
                                        eref[e0 + bid] -= 1
                                        if eref[e0 + bid] == 0:
                                            lprev[e0 + bid] = ltail[i]
                                            lnext[e0 + bid] = -1
                                            if ltail[i] >= 0:
                                                lnext[e0 + ltail[i]] = bid
                                            else:
                                                lhead[i] = bid
                                            ltail[i] = bid
                                            cfree[i] += bpb
                                            free[i] += bpb
                            free[i] += own[r]
                            own[r] = 0
                            nref[r] = 0
                            continue
                    rbuf[r0 + k2] = r
                    k2 += 1
                nrun[i] = nF[i] + (k2 - kst)
                if hol[i] > 0 and (nF[i] == 0 or (hol[i] > 16 and 2 * hol[i] > nF[i])):
                    # drop the holes (amortised: at least max(17, nF / 2) finishes since the last time)
                    fend = nF[i] + hol[i]
                    k2 = 0
                    for k in range(nrun[i] + hol[i]):
                        r = rbuf[r0 + k]
                        if r >= 0:
                            if k < fend:
                                fpos[r] = k2
                            rbuf[r0 + k2] = r
                            k2 += 1
                    hol[i] = 0
            # ---- decodes right after the fast set join it ----
            if fastok and nF[i] < nrun[i] and iout[i, O_STEPS] >= jnext[i]:
                while nF[i] < nrun[i]:
                    r = rbuf[r0 + nF[i] + hol[i]]
                    if not (gen[r] >= 1 and comp[r] == ntok[r] - 1):
                        break
                    if caching and not private and nxb[r] < min(boff[r + 1] - boff[r], prompt[r] // bth):
                        break
                    if own[r] + nref[r] * bpb != (comp[r] + bt - 1) // bt:
                        break
                    c = fc[i]
                    fc0[r] = c
                    fe = c + output[r] - gen[r] - 1
                    finc[r] = fe
                    bk = wb0 + (fe & wmask)
                    wnext[r] = wheel[bk]
                    wheel[bk] = r
                    key = (comp[r] - c) % bt
                    if key < 0:
                        key += bt
                    fkey[r] = key
                    fpos[r] = nF[i] + hol[i]
                    cnt[cb0 + key] += 1
                    ctxF[i] += comp[r] + 1
                    nF[i] += 1
            # ---- schedule the next step ----
            nsch = 0
            for attempt in range(2):
                if kind == VLLM:
                    budget = B
                    preempted = False
                    k = 0
                    if nF[i] > 0:
                        nf = nF[i]
                        needf = cnt[cb0 + cidx[i]]
                        if nf <= B and needf <= free[i]:
                            # the fast set in one piece: all of it fits in the budget and the blocks,
                            # so nobody is preempted and its evictions are those of the final free
                            free[i] -= needf
                            _evict_nb(i, e0, lhead, lnext, lprev, ltail, eref, eown, cfree, free, bpb)
                            fsched[i] = True
                            nsch = nf
                            budget = B - nf
                            k = nf + hol[i]
                            fails[i] = 0
                        else:
                            _materialise_nb(i, r0, rbuf, nF, hol, nrun, fc, ctxF, cnt, cb0, bt, wheel, wb0, wmask, fc0,
                                            finc, comp, gen, ntok, own, sched)
                            fails[i] += 1
                            jnext[i] = iout[i, O_STEPS] + (1 << min(fails[i], 8))
                    while k < nrun[i] + hol[i] and budget > 0:
                        r = rbuf[r0 + k]
                        isdec = gen[r] >= 1 and comp[r] == ntok[r] - 1
                        if isdec:
                            x = per
                            if x > budget:
                                break
                        else:
                            x = min(ntok[r] - comp[r], budget)
                        need = _nb(comp[r] + x, W, SL, NL, bt) - nref[r] * bpb - own[r]
                        if need < 0:
                            need = 0
                        ok = True
                        while need > free[i]:
                            v = rbuf[r0 + nrun[i] + hol[i] - 1]
                            nrun[i] -= 1
                            # preempt v to the front of the queue (recompute)
                            rem[i] -= (ntok[v] - comp[v]) + (output[v] - gen[v])
                            mog[i] -= output[v] - gen[v]
                            if output[v] > clip:
                                nbig[i] -= 1
                            _release_nb(i, v, e0, caching, boff, bids, nxb, hh, eown, eref, lprev, lnext,
                                        lhead, ltail, cfree, free, own, nref, bpb, private, bth, prompt, comp,
                                        keep_out)
                            comp[v] = 0
                            hh[v] = 0
                            nxb[v] = 0
                            preempt_out[v] += 1
                            iout[i, O_PREEMPT] += 1
                            rem[i] += (ntok[v] - comp[v]) + (output[v] - gen[v])
                            qhead[i] = (qhead[i] - 1 + qcap) % qcap
                            qbuf[i * qcap + qhead[i]] = v
                            qlen[i] += 1
                            preempted = True
                            if v == r:
                                ok = False
                                break
                        if not ok:
                            break
                        free[i] -= need
                        own[r] += need
                        _evict_nb(i, e0, lhead, lnext, lprev, ltail, eref, eown, cfree, free, bpb)
                        sched[r] = x
                        dec[r] = isdec
                        nsch += 1
                        budget -= x
                        k += 1
                    if not preempted or nsch == 0:
                        while qlen[i] > 0 and budget > 0 and nrun[i] < S:
                            r = qbuf[i * qcap + qhead[i]]
                            P = prompt[r]
                            # prefix hits
                            h = 0
                            if caching:
                                b0 = boff[r]
                                nl = boff[r + 1] - b0
                                cap = min(nl if spans else min(nl, P // bth), (ntok[r] - 1) // bth)
                                while h < cap and eref[e0 + bids[b0 + h]] >= 0:
                                    h += 1
                            evb = 0
                            for j in range(h):
                                if eref[e0 + bids[boff[r] + j]] == 0:
                                    evb += bpb
                            x = min(ntok[r] - h * bth, budget)
                            need = _nb(h * bth + x, W, SL, NL, bt) - h * bpb
                            if need + evb > free[i]:
                                break
                            # admit r
                            rem[i] -= (ntok[r] - comp[r]) + (output[r] - gen[r])
                            _take_hits_nb(i, r, h, e0, boff, bids, eref, lprev, lnext, lhead, ltail, cfree, free, bpb)
                            hh[r] = h
                            nref[r] = h
                            nxb[r] = h
                            comp[r] = h * bth
                            if not once[r]:
                                once[r] = True
                                cached_out[r] = h * bth
                                iout[i, O_CACHED] += h * bth
                                iout[i, O_PROMPT_ADMITTED] += P
                            free[i] -= need
                            own[r] = need
                            _evict_nb(i, e0, lhead, lnext, lprev, ltail, eref, eown, cfree, free, bpb)
                            rem[i] += (ntok[r] - comp[r]) + (output[r] - gen[r])
                            qhead[i] = (qhead[i] + 1) % qcap
                            qlen[i] -= 1
                            rbuf[r0 + nrun[i] + hol[i]] = r
                            nrun[i] += 1
                            mog[i] += output[r] - gen[r]
                            if output[r] > clip:
                                nbig[i] += 1
                            sched[r] = x
                            dec[r] = False
                            nsch += 1
                            budget -= x
                elif kind == TRTLLM:
                    # TensorRT-LLM (GUARANTEED_NO_EVICT capacity scheduler, then the micro-batch
                    # scheduler): the decodes first, in batch order, while max_num_tokens lasts; then
                    # the contexts (running ones, then admissions) first come first served, a chunk
                    # cut short rounded down to a multiple of ``unit``; admission reserves the
                    # blocks of P + O + gamma and never preempts
                    budget = B
                    k = 0
                    tstop = False
                    if nF[i] > 0:
                        nf = nF[i]
                        needf = cnt[cb0 + cidx[i]]
                        if nf <= B and needf <= free[i]:
                            free[i] -= needf
                            _evict_nb(i, e0, lhead, lnext, lprev, ltail, eref, eown, cfree, free, bpb)
                            fsched[i] = True
                            nsch = nf
                            budget = B - nf
                            k = nf + hol[i]
                            fails[i] = 0
                        else:
                            _materialise_nb(i, r0, rbuf, nF, hol, nrun, fc, ctxF, cnt, cb0, bt, wheel, wb0, wmask, fc0,
                                            finc, comp, gen, ntok, own, sched)
                            fails[i] += 1
                            jnext[i] = iout[i, O_STEPS] + (1 << min(fails[i], 8))
                    kst = k
                    for k in range(kst, nrun[i] + hol[i]):
                        r = rbuf[r0 + k]
                        if not (gen[r] >= 1 and comp[r] == ntok[r] - 1):
                            continue
                        if per > budget:
                            tstop = True
                            break
                        need = _nb(comp[r] + per, W, SL, NL, bt) - nref[r] * bpb - own[r]
                        if need < 0:
                            need = 0
                        if need > free[i]:
                            # never under the reservation (a request holds at most its reserved blocks)
                            tstop = True
                            break
                        free[i] -= need
                        own[r] += need
                        _evict_nb(i, e0, lhead, lnext, lprev, ltail, eref, eown, cfree, free, bpb)
                        sched[r] = per
                        dec[r] = True
                        nsch += 1
                        budget -= per
                    if not tstop:
                        for k in range(kst, nrun[i] + hol[i]):
                            r = rbuf[r0 + k]
                            if gen[r] >= 1 and comp[r] == ntok[r] - 1:
                                continue
                            ext = ntok[r] - comp[r]
                            if whole:
                                if ext > budget:
                                    tstop = True
                                    break
                                x = ext
                            else:
                                x = min(ext, budget)
                                if x < ext:
                                    x = x // unit * unit
                            if x == 0:
                                continue
                            need = _nb(comp[r] + x, W, SL, NL, bt) - nref[r] * bpb - own[r]
                            if need < 0:
                                need = 0
                            if need > free[i]:
                                tstop = True
                                break
                            free[i] -= need
                            own[r] += need
                            _evict_nb(i, e0, lhead, lnext, lprev, ltail, eref, eown, cfree, free, bpb)
                            sched[r] = x
                            dec[r] = False
                            nsch += 1
                            budget -= x
                    if qlen[i] > 0 and nrun[i] < S:
                        # the blocks reserved by the running requests (their P + O + gamma)
                        resv = 0
                        for k in range(nrun[i] + hol[i]):
                            r = rbuf[r0 + k]
                            if r >= 0:
                                resv += rsvr[r]
                        while qlen[i] > 0 and nrun[i] < S:
                            r = qbuf[i * qcap + qhead[i]]
                            P = prompt[r]
                            R = _nb(P + output[r] + gamma, W, SL, NL, bt)
                            if resv + R > nbt:
                                break
                            h = 0
                            if caching:
                                b0 = boff[r]
                                nl = boff[r + 1] - b0
                                cap = min(nl if spans else min(nl, P // bth), (ntok[r] - 1) // bth)
                                while h < cap and eref[e0 + bids[b0 + h]] >= 0:
                                    h += 1
                            ext = ntok[r] - h * bth
                            x = 0
                            if not tstop:
                                if whole:
                                    if ext > budget:
                                        tstop = True
                                    else:
                                        x = ext
                                else:
                                    x = min(ext, budget)
                                    if x < ext:
                                        x = x // unit * unit
                            need = _nb(h * bth + x, W, SL, NL, bt) - h * bpb
                            resv += R
                            rsvr[r] = R
                            rem[i] -= (ntok[r] - comp[r]) + (output[r] - gen[r])
                            _take_hits_nb(i, r, h, e0, boff, bids, eref, lprev, lnext, lhead, ltail, cfree, free, bpb)
                            hh[r] = h
                            nref[r] = h
                            nxb[r] = h
                            comp[r] = h * bth
                            if not once[r]:
                                once[r] = True
                                cached_out[r] = h * bth
                                iout[i, O_CACHED] += h * bth
                                iout[i, O_PROMPT_ADMITTED] += P
                            free[i] -= need
                            own[r] = need
                            _evict_nb(i, e0, lhead, lnext, lprev, ltail, eref, eown, cfree, free, bpb)
                            rem[i] += (ntok[r] - comp[r]) + (output[r] - gen[r])
                            qhead[i] = (qhead[i] + 1) % qcap
                            qlen[i] -= 1
                            rbuf[r0 + nrun[i] + hol[i]] = r
                            nrun[i] += 1
                            mog[i] += output[r] - gen[r]
                            if output[r] > clip:
                                nbig[i] += 1
                            sched[r] = x
                            dec[r] = False
                            if x > 0:
                                nsch += 1
                                budget -= x
                else:
                    # SGLang: a prefill step when possible, else a decode step
                    budget = B
                    free0 = free[i]
                    nrun0 = nrun[i]
                    mog0 = mog[i]
                    xsum = 0
                    npcs = 0
                    # the fast set holds decodes only: the prefill pass starts after it
                    for k in range(nF[i] + hol[i], nrun[i] + hol[i]):
                        if budget == 0:
                            break
                        r = rbuf[r0 + k]
                        isdec = gen[r] >= 1 and comp[r] == ntok[r] - 1
                        if not isdec:
                            x = min(ntok[r] - comp[r], budget)
                            need = _nb(comp[r] + x, W, SL, NL, bt) - nref[r] * bpb - own[r]
                            if need < 0:
                                need = 0
                            if need > free[i]:
                                break
                            free[i] -= need
                            own[r] += need
                            _evict_nb(i, e0, lhead, lnext, lprev, ltail, eref, eown, cfree, free, bpb)
                            sched[r] = x
                            dec[r] = False
                            nsch += 1
                            budget -= x
                            xsum += x
                            npcs += 1
                    have_rt = False
                    apx = False
                    rem_total = 0.0
                    rt_a = 0.0
                    bnd = 0.0
                    err_n = 0
                    nadm = 0
                    while qlen[i] > 0 and budget > 0 and nrun[i] < S:
                        r = qbuf[i * qcap + qhead[i]]
                        P = prompt[r]
                        h = 0
                        if caching:
                            b0 = boff[r]
                            nl = boff[r + 1] - b0
                            cap = min(nl if spans else min(nl, P // bth), (ntok[r] - 1) // bth)
                            while h < cap and eref[e0 + bids[b0 + h]] >= 0:
                                h += 1
                        ext = ntok[r] - h * bth
                        evb = 0
                        for j in range(h):
                            if eref[e0 + bids[boff[r] + j]] == 0:
                                evb += bpb
                        resv = min(output[r] - gen[r], clip)
                        lhs = float(ext + resv) + float(evb * bt)
                        if not have_rt:
                            # the admission room ``rem_total`` of the reference (the free KV at the
                            # start of the step, minus each running request's reservation
                            # ``float(min(O - g, clip)) x ratio`` in batch order, minus the pieces
                            # scheduled above, minus the admissions so far) decides only this
                            # comparison. When no running request's output exceeds the clip, the
                            # reservations sum to ratio x (an exact integer), so the room is known
                            # to within the rounding of its n operations, each at most 2^-53 of the
                            # largest magnitude ``bnd``: a comparison outside 9 times that margin
                            # is the reference's; else (or with outputs over the clip) the room is
                            # computed by the reference's operations, in its order
                            exact = False
                            if not apx:
                                if nbig[i] == 0:
                                    apx = True
                                    rt_a = float(free0 * bt) - ratio[i] * float(mog0) - float(xsum)
                                    bnd = float(free0 * bt) + ratio[i] * float(mog0) + float(xsum)
                                    err_n = nrun0 + npcs + 8
                                else:
                                    exact = True
                            if apx:
                                margin = float(err_n) * bnd * 1e-15
                                if lhs > rt_a + margin:
                                    break
                                if not (lhs < rt_a - margin):
                                    exact = True
                            if exact:
                                have_rt = True
                                apx = False
                                rem_total = float(free0 * bt)
                                c = fc[i]
                                fend = nF[i] + hol[i]
                                for k in range(nrun0 + hol[i]):
                                    r2 = rbuf[r0 + k]
                                    if r2 < 0:
                                        continue
                                    gg = gen[r2] + (c - fc0[r2]) if k < fend else gen[r2]
                                    rem_total -= float(min(output[r2] - gg, clip)) * ratio[i]
                                for k in range(fend, nrun0 + hol[i]):
                                    r2 = rbuf[r0 + k]
                                    if sched[r2] > 0:
                                        rem_total -= float(sched[r2])
                                for k in range(nadm):
                                    rem_total -= advb[k]
                        if have_rt and lhs > rem_total:
                            break
                        x = min(ext, budget)
                        need = _nb(h * bth + x, W, SL, NL, bt) - h * bpb
                        if need + evb > free[i]:
                            break
                        rem[i] -= (ntok[r] - comp[r]) + (output[r] - gen[r])
                        _take_hits_nb(i, r, h, e0, boff, bids, eref, lprev, lnext, lhead, ltail, cfree, free, bpb)
                        hh[r] = h
                        nref[r] = h
                        nxb[r] = h
                        comp[r] = h * bth
                        if not once[r]:
                            once[r] = True
                            cached_out[r] = h * bth
                            iout[i, O_CACHED] += h * bth
                            iout[i, O_PROMPT_ADMITTED] += P
                        free[i] -= need
                        own[r] = need
                        _evict_nb(i, e0, lhead, lnext, lprev, ltail, eref, eown, cfree, free, bpb)
                        rem[i] += (ntok[r] - comp[r]) + (output[r] - gen[r])
                        qhead[i] = (qhead[i] + 1) % qcap
                        qlen[i] -= 1
                        rbuf[r0 + nrun[i] + hol[i]] = r
                        nrun[i] += 1
                        mog[i] += output[r] - gen[r]
                        if output[r] > clip:
                            nbig[i] += 1
                        sched[r] = x
                        dec[r] = False
                        nsch += 1
                        budget -= x
                        if have_rt:
                            rem_total -= lhs
                        else:
                            rt_a -= lhs
                            bnd += lhs
                            err_n += 1
                            advb[nadm] = lhs
                            nadm += 1
                        if x < ext:
                            break
                    if nsch == 0:
                        nd = nF[i]
                        tneed = cnt[cb0 + cidx[i]] if nF[i] > 0 else 0
                        for k in range(nF[i] + hol[i], nrun[i] + hol[i]):
                            r = rbuf[r0 + k]
                            if gen[r] >= 1 and comp[r] == ntok[r] - 1:
                                nd += 1
                                need = _nb(comp[r] + per, W, SL, NL, bt) - nref[r] * bpb - own[r]
                                if need > 0:
                                    tneed += need
                        if nd > 0:
                            if tneed > free[i]:
                                if nF[i] > 0:
                                    _materialise_nb(i, r0, rbuf, nF, hol, nrun, fc, ctxF, cnt, cb0, bt, wheel, wb0,
                                                    wmask, fc0, finc, comp, gen, ntok, own, sched)
                                    fails[i] += 1
                                    jnext[i] = iout[i, O_STEPS] + (1 << min(fails[i], 8))
                                first_iter = True
                                while nrun[i] > 1:
                                    ndd = 0
                                    for k in range(nrun[i]):
                                        r = rbuf[r0 + k]
                                        if gen[r] >= 1 and comp[r] == ntok[r] - 1:
                                            ndd += 1
                                    if not (first_iter or free[i] * bt < ndd * rsteps * per):
                                        break
                                    first_iter = False
                                    kv_ = 0
                                    for k in range(nrun[i]):
                                        r = rbuf[r0 + k]
                                        v = rbuf[r0 + kv_]
                                        if gen[r] < gen[v] or (gen[r] == gen[v] and prompt[r] >= prompt[v]):
                                            kv_ = k
                                    v = rbuf[r0 + kv_]
                                    for k in range(kv_, nrun[i] - 1):
                                        rbuf[r0 + k] = rbuf[r0 + k + 1]
                                    nrun[i] -= 1
                                    # retract v to the back of the queue (recompute)
                                    rem[i] -= (ntok[v] - comp[v]) + (output[v] - gen[v])
                                    mog[i] -= output[v] - gen[v]
                                    if output[v] > clip:
                                        nbig[i] -= 1
                                    _release_nb(i, v, e0, caching, boff, bids, nxb, hh, eown, eref, lprev, lnext,
                                                lhead, ltail, cfree, free, own, nref, bpb, private, bth, prompt,
                                                comp, False)
                                    comp[v] = 0
                                    hh[v] = 0
                                    nxb[v] = 0
                                    preempt_out[v] += 1
                                    iout[i, O_PREEMPT] += 1
                                    rem[i] += (ntok[v] - comp[v]) + (output[v] - gen[v])
                                    qbuf[i * qcap + (qhead[i] + qlen[i]) % qcap] = v
                                    qlen[i] += 1
                                tot_dec = 0
                                tot_max = 0
                                for k in range(nrun[i]):
                                    r = rbuf[r0 + k]
                                    tot_dec += gen[r]
                                    tot_max += output[r]
                                ratio[i] = min(1.0, float(tot_dec + rsteps * nrun[i]) / float(tot_max))
                            else:
                                ratio[i] = max(ratio[i] - cf[CF_RATIO_DECAY], cf[CF_RATIO_MIN])
                            if nF[i] > 0:
                                # the fast set's decodes in one piece (their blocks fit: no retraction)
                                free[i] -= cnt[cb0 + cidx[i]]
                                _evict_nb(i, e0, lhead, lnext, lprev, ltail, eref, eown, cfree, free, bpb)
                                fsched[i] = True
                                nsch += nF[i]
                                fails[i] = 0
                            for k in range(nF[i] + hol[i], nrun[i] + hol[i]):
                                r = rbuf[r0 + k]
                                if gen[r] >= 1 and comp[r] == ntok[r] - 1:
                                    need = _nb(comp[r] + per, W, SL, NL, bt) - nref[r] * bpb - own[r]
                                    if need < 0:
                                        need = 0
                                    free[i] -= need
                                    own[r] += need
                                    _evict_nb(i, e0, lhead, lnext, lprev, ltail, eref, eown, cfree, free, bpb)
                                    sched[r] = per
                                    dec[r] = True
                                    nsch += 1
                if nsch > 0 or (qlen[i] == 0 and nrun[i] == 0):
                    break
            used = (nbt - free[i]) * bt
            if used > iout[i, O_KV_PEAK]:
                iout[i, O_KV_PEAK] = used
            if nsch == 0:
                active[i] = False
                next_t[i] = np.inf
                break
            # ---- step time ----
            ctx = 0
            ex = 0
            nd = 0
            if fsched[i]:
                ctx = ctxF[i]
                nd = nF[i]
            for k in range(nF[i] + hol[i], nrun[i] + hol[i]):
                r = rbuf[r0 + k]
                if sched[r] > 0 and dec[r]:
                    c = comp[r] + 1
                    ctx += c
                    e = c - W
                    if e > 0:
                        ex += e
                    nd += 1
            attn = c4g * (float(ctx) - f * float(ex))
            kvt = ctx
            kex = ex
            n_tok = nd * per
            for k in range(nF[i] + hol[i], nrun[i] + hol[i]):
                r = rbuf[r0 + k]
                x = sched[r]
                if x > 0 and not dec[r]:
                    s = comp[r]
                    e = s - W
                    if e > 0:
                        hs = float(s) - f * float(e)
                        kex += e
                    else:
                        hs = float(s)
                    kvt += s
                    xf = float(x)
                    attn += c2p * xf * xf + c4p * xf * hs
                    n_tok += x
            # step_time_nb(p, float(n_tok), float(kvt) - f * float(kex), attn, float(nsch)), same operations
            ntf = float(n_tok)
            kvf = float(kvt) - f * float(kex)
            if moe_w:
                weight_s = (wdense + wexp * (1.0 - keep ** ntf)) / d_bw
            else:
                weight_s = weight_c
            kvb = kvf * kvpg
            kv_time = (kvb / dp if div_dp else kvb) / d_kv
            roof = K._roof_nb(weight_s, kv_time, matmul2 * ntf, attn, g, div_g, d_c, classes, gq)
            if comm_fixed:
                comm_s = comm_c
            else:
                comm_s = (n_ar * (ar_a + ar_b * (ntf / dp * hid * 2.0) / d_nv)
                          + a2a_n2 * (a2a_a + a2a_b * (ntf * topk / g * hid * 2.0) / d_ep))
            d = roof + comm_s + overhead + ovh_seq * float(nsch)
            if gamma > 0 and nd > 0:
                dd = step_time_nb(pd, float(nd), float(ctx), 4.0 * ld * qd * float(ctx), float(nd))
                d = d + float(gamma) * dd
            iout[i, O_STEPS] += 1
            iout[i, O_BATCH_SUM] += nsch
            active[i] = True
            t = t + d
            next_t[i] = t
            busy[i] += d
            if not (t < ta and t <= lim):
                break
    while ms < n_samp:
        sys_s[ms] = in_sys
        if full:
            for i in range(ni):
                wait_s[ms * ni + i] = qlen[i]
                kv_s[ms * ni + i] = (nbt - free[i]) * bt
        ms += 1
    for i in range(ni):
        if active[i]:
            busy[i] -= next_t[i] - horizon
    return RUN_OK


@njit(cache=True, nogil=True)
def policy_one_nb(p, pd, cfg, cf, arrival, prompt, output, boff, bids, first, finish, inst_out, status,
                  cached_out, preempt_out, busy, iout, wait_s, kv_s, sys_s, buf_a, buf_b, rf, mf, mi, full):
    """One run and its metrics, without the GIL; returns the run's ``RUN_*`` code.

    ``fastsim.sim.policy`` calls it for a single run and, from worker threads, for each run of a
    batch: every input read-only, every output its own array, so it has one type signature.
    """
    code = _run_policy_nb(p, pd, cfg, cf, arrival, prompt, output, boff, bids, first, finish, inst_out,
                          status, cached_out, preempt_out, busy, iout, wait_s, kv_s, sys_s,
                          rf[K.RF_HORIZON], rf[K.RF_DT], full)
    if code == RUN_OK:
        c_req = p[P_REQ_OVERHEAD]
        if c_req != 0.0:
            K.client_times_nb(first, finish, c_req)
        K._metrics_nb(arrival, output, first, finish, status, sys_s, buf_a, buf_b, rf, mf, mi)
    return code
