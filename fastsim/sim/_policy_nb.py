"""Numba kernel of the engine-policy simulator (semantics: :mod:`fastsim.sim.policy`).

One run is one colocated plan serving one workload under the ``vllm`` or ``sglang`` policy, with
optional prefix caching and speculative decoding. State lives in flat arrays: per request (tokens
known, computed, generated, own KV blocks, cache references, ...), per instance (a ring buffer
for the waiting queue, which takes preempted requests at its front; the running batch in
admission order, compacted as requests finish; scalars in the ``S_*`` columns) and, with prefix
caching, per instance and prefix block (reference count, owner and an LRU list of the entries no
running request references). Every step loops over the running batch, as the engines' schedulers
do. The kernel uses the float operations of :mod:`fastsim.sim.reference_policy` in the same
order, so both give the same times to the bit. Nothing here raises: a run returns a status code.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..stepmodel import P_LAYERS, P_QDIM_DEC, P_QDIM_PF, step_time_nb
from . import _kernels as K
from .records import REQ_FINISHED, REQ_REJECTED, REQ_UNFINISHED, RUN_OK, RUN_SCRATCH_OVERFLOW

VLLM = 0
SGLANG = 1
ROUTE_LEAST_LOADED = 0
ROUTE_ROUND_ROBIN = 1
ROUTE_PREFIX_AWARE = 2

# int64 configuration row of a run (set by the wrapper)
(C_KIND, C_BUDGET, C_MAX_SEQS, C_BT, C_CACHING, C_BTH, C_GAMMA, C_CLIP, C_RETRACT, C_ROUTING, C_N_INST,
 C_MAX_CONTEXT, C_NB_TOTAL, C_SEED, C_ROUTE_ABS, C_WINDOW, C_SLIDE_L, C_N_LAYERS, C_N_BLOCK_IDS) = range(19)
N_CCOLS = 19
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


@njit(cache=True)
def _run_policy_nb(p, pd, cfg, cf, arrival, prompt, output, boff, bids, first, finish, inst_out, status,
                   cached_out, preempt_out, busy, iout, wait_s, kv_s, sys_s, horizon, dt, full):
    n = arrival.shape[0]
    kind = cfg[C_KIND]
    B = cfg[C_BUDGET]
    S = cfg[C_MAX_SEQS]
    bt = cfg[C_BT]
    caching = cfg[C_CACHING] != 0
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
    for r in range(n):
        ntok[r] = prompt[r]
        first[r] = np.nan
        finish[r] = np.nan
        inst_out[r] = -1
        status[r] = REQ_UNFINISHED
        cached_out[r] = 0
        preempt_out[r] = 0
    # per instance
    qcap = n + 1
    qbuf = np.empty(ni * qcap, np.int64)
    qhead = np.zeros(ni, np.int64)
    qlen = np.zeros(ni, np.int64)
    scap = min(S, n) + 1
    rbuf = np.empty(ni * scap, np.int64)
    nrun = np.zeros(ni, np.int64)
    free = np.full(ni, nbt, np.int64)
    cfree = np.zeros(ni, np.int64)
    ratio = np.full(ni, cf[CF_RATIO_INIT], np.float64)
    rem = np.zeros(ni, np.int64)
    unf = np.zeros(ni, np.int64)
    active = np.zeros(ni, np.bool_)
    next_t = np.full(ni, np.inf, np.float64)
    nstep = np.zeros(ni, np.int64)
    for i in range(ni):
        busy[i] = 0.0
        for c in range(N_OCOLS):
            iout[i, c] = 0
    # prefix cache: per instance and block id
    ecap = max(H, 1)
    eref = np.full(ni * ecap, -1, np.int64)      # -1: not cached
    eown = np.full(ni * ecap, -1, np.int64)
    lprev = np.full(ni * ecap, -1, np.int64)
    lnext = np.full(ni * ecap, -1, np.int64)
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
            if P + O > max_ctx or _nb(P + O + gamma, W, SL, NL, bt) > nbt:
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
                            cap = min(min(nbl, P // bth), (ntok[r] - 1) // bth)
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
        # ---- step boundary of instance i ----
        i = ev
        e0 = i * ecap
        r0 = i * scap
        if active[i]:
            k2 = 0
            for k in range(nrun[i]):
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
                            iout[i, O_TOKENS_OUT] += 1
                            if gen[r] == 1:
                                first[r] = t
                            if gen[r] == output[r]:
                                fin = True
                            else:
                                ntok[r] += 1
                    if not fin:
                        rem[i] += (ntok[r] - comp[r]) + (output[r] - gen[r])
                    if caching:
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
                        in_sys -= 1
                        unf[i] -= 1
                        # release
                        if caching:
                            b0 = boff[r]
                            for j in range(nxb[r]):
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
            nrun[i] = k2
        # ---- schedule the next step ----
        nsch = 0
        for attempt in range(2):
            if kind == VLLM:
                budget = B
                preempted = False
                k = 0
                while k < nrun[i] and budget > 0:
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
                        v = rbuf[r0 + nrun[i] - 1]
                        nrun[i] -= 1
                        # preempt v to the front of the queue (recompute)
                        rem[i] -= (ntok[v] - comp[v]) + (output[v] - gen[v])
                        if caching:
                            b0 = boff[v]
                            for j in range(nxb[v]):
                                bid = bids[b0 + j]
                                if j < hh[v] or eown[e0 + bid] == v:
                                    if j >= hh[v]:
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
                        free[i] += own[v]
                        own[v] = 0
                        nref[v] = 0
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
                            cap = min(min(boff[r + 1] - b0, P // bth), (ntok[r] - 1) // bth)
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
                        rem[i] += (ntok[r] - comp[r]) + (output[r] - gen[r])
                        qhead[i] = (qhead[i] + 1) % qcap
                        qlen[i] -= 1
                        rbuf[r0 + nrun[i]] = r
                        nrun[i] += 1
                        sched[r] = x
                        dec[r] = False
                        nsch += 1
                        budget -= x
            else:
                # SGLang: a prefill step when possible, else a decode step
                budget = B
                rem_total = float(free[i])
                for k in range(nrun[i]):
                    r = rbuf[r0 + k]
                    rem_total -= float(min(output[r] - gen[r], clip)) * ratio[i]
                for k in range(nrun[i]):
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
                        sched[r] = x
                        dec[r] = False
                        nsch += 1
                        budget -= x
                        rem_total -= float(x)
                while qlen[i] > 0 and budget > 0 and nrun[i] < S:
                    r = qbuf[i * qcap + qhead[i]]
                    P = prompt[r]
                    h = 0
                    if caching:
                        b0 = boff[r]
                        cap = min(min(boff[r + 1] - b0, P // bth), (ntok[r] - 1) // bth)
                        while h < cap and eref[e0 + bids[b0 + h]] >= 0:
                            h += 1
                    ext = ntok[r] - h * bth
                    evb = 0
                    for j in range(h):
                        if eref[e0 + bids[boff[r] + j]] == 0:
                            evb += bpb
                    resv = min(output[r] - gen[r], clip)
                    if float(ext + resv) + float(evb) > rem_total:
                        break
                    x = min(ext, budget)
                    need = _nb(h * bth + x, W, SL, NL, bt) - h * bpb
                    if need + evb > free[i]:
                        break
                    rem[i] -= (ntok[r] - comp[r]) + (output[r] - gen[r])
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
                    rem[i] += (ntok[r] - comp[r]) + (output[r] - gen[r])
                    qhead[i] = (qhead[i] + 1) % qcap
                    qlen[i] -= 1
                    rbuf[r0 + nrun[i]] = r
                    nrun[i] += 1
                    sched[r] = x
                    dec[r] = False
                    nsch += 1
                    budget -= x
                    rem_total -= float(ext + resv) + float(evb)
                    if x < ext:
                        break
                if nsch == 0:
                    nd = 0
                    tneed = 0
                    for k in range(nrun[i]):
                        r = rbuf[r0 + k]
                        if gen[r] >= 1 and comp[r] == ntok[r] - 1:
                            nd += 1
                            need = _nb(comp[r] + per, W, SL, NL, bt) - nref[r] * bpb - own[r]
                            if need > 0:
                                tneed += need
                    if nd > 0:
                        if tneed > free[i]:
                            first_iter = True
                            while nrun[i] > 1:
                                ndd = 0
                                for k in range(nrun[i]):
                                    r = rbuf[r0 + k]
                                    if gen[r] >= 1 and comp[r] == ntok[r] - 1:
                                        ndd += 1
                                if not (first_iter or free[i] < ndd * rsteps * per):
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
                                if caching:
                                    b0 = boff[v]
                                    for j in range(nxb[v]):
                                        bid = bids[b0 + j]
                                        if j < hh[v] or eown[e0 + bid] == v:
                                            if j >= hh[v]:
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
                                free[i] += own[v]
                                own[v] = 0
                                nref[v] = 0
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
                        for k in range(nrun[i]):
                            r = rbuf[r0 + k]
                            if gen[r] >= 1 and comp[r] == ntok[r] - 1:
                                need = _nb(comp[r] + per, W, SL, NL, bt) - nref[r] * bpb - own[r]
                                if need < 0:
                                    need = 0
                                free[i] -= need
                                own[r] += need
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
            continue
        # ---- step time ----
        ctx = 0
        ex = 0
        nd = 0
        for k in range(nrun[i]):
            r = rbuf[r0 + k]
            if sched[r] > 0 and dec[r]:
                c = comp[r] + 1
                ctx += c
                e = c - W
                if e > 0:
                    ex += e
                nd += 1
        attn = 4.0 * lay * qdec * g1 * (float(ctx) - f * float(ex))
        kvt = ctx
        kex = ex
        n_tok = nd * per
        for k in range(nrun[i]):
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
                attn += 2.0 * lay * qpf * float(x) * float(x) + 4.0 * lay * qpf * float(x) * hs
                n_tok += x
        d = step_time_nb(p, float(n_tok), float(kvt) - f * float(kex), attn)
        if gamma > 0 and nd > 0:
            dd = step_time_nb(pd, float(nd), float(ctx), 4.0 * ld * qd * float(ctx))
            d = d + float(gamma) * dd
        iout[i, O_STEPS] += 1
        iout[i, O_BATCH_SUM] += nsch
        active[i] = True
        next_t[i] = t + d
        busy[i] += d
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


@njit(cache=True)
def policy_one_nb(p, pd, cfg, cf, arrival, prompt, output, boff, bids, first, finish, inst_out, status,
                  cached_out, preempt_out, busy, iout, wait_s, kv_s, sys_s, buf_a, buf_b, rf, mf, mi, full):
    """One run and its metrics; returns the run's ``RUN_*`` code (see :func:`policy_runs_nb`)."""
    code = _run_policy_nb(p, pd, cfg, cf, arrival, prompt, output, boff, bids, first, finish, inst_out,
                          status, cached_out, preempt_out, busy, iout, wait_s, kv_s, sys_s,
                          rf[K.RF_HORIZON], rf[K.RF_DT], full)
    if code == RUN_OK:
        K._metrics_nb(arrival, output, first, finish, status, sys_s, buf_a, buf_b, rf, mf, mi)
    return code


@njit(cache=True, parallel=True)
def policy_runs_nb(pp, pdd, cfg, cf, rf, w_of, a_all, p_all, o_all, w_req0, boff_all, w_boff0, bids_all,
                   out_off, first, finish, inst_out, status, cached_out, preempt_out, i_off, busy, iout,
                   sys_off, sys_s, met_f, met_i, run_status):
    """Many runs on all threads, metrics only (no per-instance samples); each writes its own slots.

    Parameters
    ----------
    pp, pdd : float64[:, N_PARAMS]
        Per run: the instance's and the draft model's step parameters.
    cfg : int64[:, N_CCOLS]; cf : float64[:, N_CFCOLS]; rf : float64[:, N_RFCOLS]
        Per run: configuration rows and the metric options (``fastsim.sim._kernels`` ``RF_*``).
    w_of : int64[:]
        Workload of each run.
    a_all, p_all, o_all : float64[:], int64[:], int64[:]
        All workloads' requests, concatenated; workload w starts at ``w_req0[w]`` (length W + 1).
    boff_all, w_boff0, bids_all : int64[:]
        Prefix blocks: workload w's offsets are ``boff_all[w_boff0[w] : w_boff0[w] + n_w + 1]``
        (into ``bids_all``).
    out_off, i_off, sys_off : int64[:]
        Per run: offsets of its per-request outputs, its instances and its samples.
    first, finish : float64[:]; inst_out, preempt_out : int32[:]; status : int8[:]; cached_out : int64[:]
        Per-request outputs of all runs.
    busy : float64[:]; iout : int64[:, N_OCOLS]
        Per-instance outputs of all runs.
    sys_s : int64[:]
        Samples of the number in system of all runs.
    met_f, met_i, run_status
        Per-run metrics and status codes.
    """
    R = cfg.shape[0]
    for k in prange(R):
        w = w_of[k]
        a0 = w_req0[w]
        n = w_req0[w + 1] - a0
        b0 = w_boff0[w]
        o0 = out_off[k]
        i0 = i_off[k]
        ni = cfg[k, C_N_INST]
        s0 = sys_off[k]
        s1 = sys_off[k + 1]
        buf_a = np.empty(max(n, 1), np.float64)
        buf_b = np.empty(max(n, 1), np.float64)
        run_status[k] = policy_one_nb(
            pp[k], pdd[k], cfg[k], cf[k], a_all[a0:a0 + n], p_all[a0:a0 + n], o_all[a0:a0 + n],
            boff_all[b0:b0 + n + 1], bids_all, first[o0:o0 + n], finish[o0:o0 + n], inst_out[o0:o0 + n],
            status[o0:o0 + n], cached_out[o0:o0 + n], preempt_out[o0:o0 + n], busy[i0:i0 + ni],
            iout[i0:i0 + ni], np.empty(0, np.int64), np.empty(0, np.int64), sys_s[s0:s1], buf_a, buf_b,
            rf[k], met_f[k], met_i[k], False)
