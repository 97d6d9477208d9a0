"""Numba kernel of the pipeline-parallel simulator (semantics: :mod:`fastsim.sim.pipeline`).

One run is one :class:`fastsim.sim.PipelinePlan` serving one workload under the lecture or the
``trtllm`` policy. A plain event loop: at each event it scans the instances for the earliest
micro-batch completion (the oldest of the instance's ring of at most S in-flight micro-batches)
and launch opportunity. A ``trtllm`` launch loops over the instance's admitted requests (its
passes stop at the token budget and the batch cap, in admission order). A lecture launch takes
every ready decode (admitted, prompt done, not in flight), so those are kept as a list with their
context sums (integers: the order of a sum does not change it) that the launch takes whole, and it
loops only over the requests still in prefill, in admission order, for the prompt pieces; a
completion puts its decodes back on the list. State lives
in flat arrays: per request (prompt tokens prefilled or computed, tokens generated, known tokens,
KV blocks, micro-batch slot and links of the waiting queue, the admitted list and the micro-batch
member list), per instance (scalars in ``ist``, the stages' free times and busy time, the ring's
completion times, members and per-stage start and end times). The float operations are those of
:mod:`fastsim.sim.reference_pipeline`, in the same order, so both give the same times to the bit;
the step time is :func:`fastsim.stepmodel.step_time_nb` of each stage's row. Nothing here raises:
a run returns a status code (0: ok).
"""
from __future__ import annotations

# numba's cache=True watches only this file, not the kernels it calls in other files
# (fastsim.stepmodel.step_time_nb, fastsim.sim._kernels): when one of them changes, change this
# line so that a cache compiled before is not reused. Step model revision: 4 (kernel classes,
# StepConstants.step_form; the GEMM class's blend, StepConstants.gemm_blend_p).

import numpy as np
from numba import njit

from ..stepmodel import P_LAYERS, P_QDIM_DEC, P_QDIM_PF, step_time_nb
from .records import REQ_FINISHED, REQ_REJECTED, REQ_UNFINISHED, RUN_OK

LECTURE = 0
TRTLLM = 1
ROUTE_LEAST_LOADED = 0
ROUTE_ROUND_ROBIN = 1
#: Run status: the KV blocks a micro-batch needed were not free (the reservation rule broke: a bug).
RUN_BLOCKS = 5

# int64 configuration row of a run (set by the wrapper)
(C_POLICY, C_N_INST, C_CHUNK, C_MAX_ADMIT, C_BUDGET, C_MB_CAP, C_CAP_ALL, C_KV_BUDGET, C_BT, C_CHUNKED,
 C_WINDOW, C_SLIDE_L, C_N_LAYERS, C_ROUTING, C_MAX_CONTEXT, C_N_SAMP) = range(16)
N_CCOLS = 16
# float64 configuration row
(CF_SLIDE, CF_HORIZON, CF_DT) = range(3)
N_CFCOLS = 3
# per-instance integer outputs
(O_STEPS, O_BATCH_SUM, O_TOKENS_OUT, O_KV_PEAK, O_PROMPT_ADMITTED) = range(5)
N_OCOLS = 5

# per-instance integer state (columns of ``ist``): the waiting queue, the admitted list (trtllm; the
# lecture's: its requests still in prefill), reservations, the ring's head and count, and the
# lecture's ready decodes (admitted, prompt done, not in flight: a list and its context sums)
(S_QHEAD, S_QTAIL, S_NWAIT, S_AHEAD, S_ATAIL, S_NADM, S_RESERVED, S_RESV, S_FREE, S_OUTST, S_RHEAD,
 S_RN, S_DHEAD, S_DTAIL, S_DN, S_DCTX, S_DEX) = range(17)
N_SCOLS = 17


@njit(cache=True)
def _held(c, w, s, lay):
    """KV of ``c`` tokens in whole tokens (``window.held_tokens``)."""
    e = c - w
    return c - (s * e) // lay if e > 0 else c


@njit(cache=True)
def _chunk(ext, budget, chunked, bt):
    """TensorRT-LLM's context chunk: -1 ends the pass (a whole context that does not fit)."""
    if chunked == 0:
        return ext if ext <= budget else -1
    x = min(ext, budget)
    return x if x == ext else x // bt * bt


@njit(cache=True, inline="always")
def _admit_head(ist, i, r, qnext, aprev, anext):
    """Move request ``r``, the head of instance ``i``'s waiting queue, to the tail of its admitted list."""
    nq = qnext[r]
    ist[i, S_QHEAD] = nq
    if nq < 0:
        ist[i, S_QTAIL] = -1
    ist[i, S_NWAIT] -= 1
    tl_ = ist[i, S_ATAIL]
    aprev[r] = tl_
    anext[r] = -1
    if tl_ >= 0:
        anext[tl_] = r
    else:
        ist[i, S_AHEAD] = r
    ist[i, S_ATAIL] = r
    ist[i, S_NADM] += 1


@njit(cache=True, nogil=True)
def pipeline_run_nb(stages, cfg, cf, arrival, prompt, output, first, finish, inst_out, status, busy, sbusy,
                    iout, wait_s, kv_s, sys_s, full):
    """One pipeline-parallel run; returns its status (0 = ok).

    Parameters
    ----------
    stages : float64[S, N_PARAMS] (read-only)
        The stage vectors of every instance.
    cfg : int64[N_CCOLS]; cf : float64[N_CFCOLS]
        The run's configuration (``C_*``, ``CF_*``).
    arrival : float64[n]; prompt, output : int64[n] (read-only)
        The requests.
    first, finish : float64[n]; inst_out : int32[n]; status : int8[n]
        Per-request results.
    busy : float64[n_inst]; sbusy : float64[n_inst, S]; iout : int64[n_inst, N_OCOLS]
        Per-instance results: busy time (mean over the stages), per-stage busy time, counters.
    wait_s, kv_s : int64[n_samp * n_inst]
        ``full``: samples, row-major; else empty.
    sys_s : int64[n_samp]
        Samples of the number in system.
    full : bool
        Keep the per-instance samples.

    Returns
    -------
    int
        ``RUN_OK`` (0), or ``RUN_BLOCKS`` when a micro-batch needed KV blocks that were not free
        (the trtllm reservation rule broken: a bug in fastsim, never bad input).
    """
    n = arrival.shape[0]
    S = stages.shape[0]
    ni = cfg[C_N_INST]
    pol = cfg[C_POLICY]
    chunk = cfg[C_CHUNK]
    max_admit = cfg[C_MAX_ADMIT]
    budget0 = cfg[C_BUDGET]
    cap = cfg[C_MB_CAP]
    cap_all = cfg[C_CAP_ALL]
    kvb = cfg[C_KV_BUDGET]
    bt = cfg[C_BT]
    chunked = cfg[C_CHUNKED]
    W = cfg[C_WINDOW]
    sl = cfg[C_SLIDE_L]
    lay_w = cfg[C_N_LAYERS]
    routing = cfg[C_ROUTING]
    max_ctx = cfg[C_MAX_CONTEXT]
    n_samp = cfg[C_N_SAMP]
    f = cf[CF_SLIDE]
    horizon = cf[CF_HORIZON]
    dt = cf[CF_DT]
    nb_total = kvb // bt
    lecture = pol == LECTURE

    # attention FLOP factors per stage, by the reference's expressions
    c4 = np.empty(S)
    c2 = np.empty(S)
    c4p = np.empty(S)
    for s in range(S):
        lay = stages[s, P_LAYERS]
        c4[s] = 4.0 * lay * stages[s, P_QDIM_DEC]
        c2[s] = 2.0 * lay * stages[s, P_QDIM_PF]
        c4p[s] = 4.0 * lay * stages[s, P_QDIM_PF]

    # per request
    pf = np.zeros(n, np.int64)          # lecture: prompt tokens prefilled; trtllm: tokens computed
    gen = np.zeros(n, np.int64)
    ntok = np.empty(n, np.int64)
    own = np.zeros(n, np.int64)
    sched = np.zeros(n, np.int64)
    dec = np.zeros(n, np.int8)
    infl = np.zeros(n, np.int8)
    mark = np.zeros(n, np.int8)
    qnext = np.full(n, -1, np.int64)
    anext = np.full(n, -1, np.int64)
    aprev = np.full(n, -1, np.int64)
    mnext = np.full(n, -1, np.int64)
    px = np.empty(max(n, 1), np.int64)
    phs = np.empty(max(n, 1), np.float64)
    for r in range(n):
        first[r] = np.nan
        finish[r] = np.nan
        inst_out[r] = -1
        status[r] = REQ_UNFINISHED
        ntok[r] = prompt[r]
    # per instance
    ist = np.zeros((ni, N_SCOLS), np.int64)
    for i in range(ni):
        ist[i, S_QHEAD] = -1
        ist[i, S_QTAIL] = -1
        ist[i, S_AHEAD] = -1
        ist[i, S_ATAIL] = -1
        ist[i, S_DHEAD] = -1
        ist[i, S_DTAIL] = -1
        ist[i, S_FREE] = nb_total
        busy[i] = 0.0
        for c in range(iout.shape[1]):
            iout[i, c] = 0
        for s in range(S):
            sbusy[i, s] = 0.0
    launch_t = np.full(ni, np.inf)
    free_s = np.zeros((ni, S))
    done_t = np.zeros((ni, S))
    mhead = np.full((ni, S), -1, np.int64)
    mstart = np.zeros((ni, S, S))
    mend = np.zeros((ni, S, S))
    dstage = np.empty(S)

    ia = 0
    rr = 0
    ms = 0
    in_sys = 0
    code = RUN_OK
    while True:
        bt_ev = np.inf
        bi = -1
        bsub = 0
        for i in range(ni):
            if ist[i, S_RN] > 0:
                tc = done_t[i, ist[i, S_RHEAD]]
                if tc < bt_ev:
                    bt_ev = tc
                    bi = i
                    bsub = 0
            tl = launch_t[i]
            if tl < bt_ev:
                bt_ev = tl
                bi = i
                bsub = 1
        is_arr = False
        if ia < n and arrival[ia] <= bt_ev:
            t = arrival[ia]
            is_arr = True
        elif bi >= 0:
            t = bt_ev
        else:
            break
        if not (t <= horizon):
            break
        while ms < n_samp and ms * dt < t:
            if full:
                for i in range(ni):
                    wait_s[ms * ni + i] = ist[i, S_NWAIT]
                    kv_s[ms * ni + i] = ist[i, S_RESERVED] if lecture else (nb_total - ist[i, S_FREE]) * bt
            sys_s[ms] = in_sys
            ms += 1
        if is_arr:
            r = ia
            ia += 1
            P = prompt[r]
            O = output[r]
            if lecture:
                rej = P + O > max_ctx or _held(P + O, W, sl, lay_w) > kvb
            else:
                rej = (P + O > max_ctx or (_held(P + O, W, sl, lay_w) + bt - 1) // bt > nb_total
                       or (chunked == 0 and P > budget0))
            if rej:
                status[r] = REQ_REJECTED
                continue
            if routing == ROUTE_ROUND_ROBIN:
                i = rr % ni
            else:
                i = 0
                bo = ist[0, S_OUTST]
                for k in range(1, ni):
                    if ist[k, S_OUTST] < bo:
                        bo = ist[k, S_OUTST]
                        i = k
            rr += 1
            inst_out[r] = i
            tail = ist[i, S_QTAIL]
            if tail >= 0:
                qnext[tail] = r
            else:
                ist[i, S_QHEAD] = r
            ist[i, S_QTAIL] = r
            ist[i, S_NWAIT] += 1
            ist[i, S_OUTST] += P + O
            in_sys += 1
            if ist[i, S_RN] < S:
                launch_t[i] = max(t, free_s[i, 0])
            continue
        i = bi
        if bsub == 0:
            # the oldest micro-batch completes: its tokens, as the lecture's step boundary applies them
            slot = ist[i, S_RHEAD]
            ist[i, S_RHEAD] = (slot + 1) % S
            ist[i, S_RN] -= 1
            r = mhead[i, slot]
            while r >= 0:
                nx = mnext[r]
                infl[r] = 0
                done = False
                if lecture:
                    if dec[r] == 1:
                        gen[r] += 1
                        iout[i, O_TOKENS_OUT] += 1
                        ist[i, S_OUTST] -= 1
                    else:
                        pf[r] += sched[r]
                        ist[i, S_OUTST] -= sched[r]
                        if pf[r] == prompt[r]:
                            gen[r] = 1
                            first[r] = t
                            iout[i, O_TOKENS_OUT] += 1
                            ist[i, S_OUTST] -= 1
                            # its prompt is done: it leaves the list of requests in prefill
                            pa = aprev[r]
                            pb = anext[r]
                            if pa >= 0:
                                anext[pa] = pb
                            else:
                                ist[i, S_AHEAD] = pb
                            if pb >= 0:
                                aprev[pb] = pa
                            else:
                                ist[i, S_ATAIL] = pa
                    done = gen[r] == output[r]
                    if not done and pf[r] == prompt[r]:
                        # a ready decode again (the next launch takes every one)
                        dec[r] = 1
                        mnext[r] = -1
                        dt_ = ist[i, S_DTAIL]
                        if dt_ >= 0:
                            mnext[dt_] = r
                        else:
                            ist[i, S_DHEAD] = r
                        ist[i, S_DTAIL] = r
                        ist[i, S_DN] += 1
                        c = prompt[r] + gen[r]
                        ist[i, S_DCTX] += c
                        e = c - W
                        if e > 0:
                            ist[i, S_DEX] += e
                else:
                    ist[i, S_OUTST] -= (ntok[r] - pf[r]) + (output[r] - gen[r])
                    pf[r] += sched[r]
                    if pf[r] == ntok[r]:
                        gen[r] += 1
                        iout[i, O_TOKENS_OUT] += 1
                        if gen[r] == 1:
                            first[r] = t
                        if gen[r] == output[r]:
                            done = True
                        else:
                            ntok[r] += 1
                    if not done:
                        ist[i, S_OUTST] += (ntok[r] - pf[r]) + (output[r] - gen[r])
                if done:
                    finish[r] = t
                    status[r] = REQ_FINISHED
                    in_sys -= 1
                    if not lecture:
                        pa = aprev[r]
                        pb = anext[r]
                        if pa >= 0:
                            anext[pa] = pb
                        else:
                            ist[i, S_AHEAD] = pb
                        if pb >= 0:
                            aprev[pb] = pa
                        else:
                            ist[i, S_ATAIL] = pa
                    ist[i, S_NADM] -= 1
                    P = prompt[r]
                    O = output[r]
                    if lecture:
                        ist[i, S_RESERVED] -= _held(P + O, W, sl, lay_w)
                    else:
                        ist[i, S_FREE] += own[r]
                        own[r] = 0
                        ist[i, S_RESV] -= (_held(P + O, W, sl, lay_w) + bt - 1) // bt
                r = nx
            launch_t[i] = max(t, free_s[i, 0])
            continue
        # a launch opportunity: admission and the micro-batch over the requests not in flight
        ctx = 0
        ex = 0
        kvt = 0
        kex = 0
        nd = 0
        npc = 0
        n_tok = 0
        cnt = 0
        mh = -1
        mt = -1
        if lecture:
            while ist[i, S_QHEAD] >= 0 and ist[i, S_NADM] < max_admit:
                r = ist[i, S_QHEAD]
                h = _held(prompt[r] + output[r], W, sl, lay_w)
                if ist[i, S_RESERVED] + h > kvb:
                    break
                _admit_head(ist, i, r, qnext, aprev, anext)
                ist[i, S_RESERVED] += h
            if ist[i, S_RESERVED] > iout[i, O_KV_PEAK]:
                iout[i, O_KV_PEAK] = ist[i, S_RESERVED]
            # every ready decode (already linked as the head of the member list), then prompt
            # pieces FCFS over the requests in prefill not in flight
            mh = ist[i, S_DHEAD]
            mt = ist[i, S_DTAIL]
            nd = ist[i, S_DN]
            ctx = ist[i, S_DCTX]
            ex = ist[i, S_DEX]
            left = chunk
            r = ist[i, S_AHEAD]
            while r >= 0 and left > 0:
                if infl[r] == 0:
                    P = prompt[r]
                    x = min(P - pf[r], left)
                    s0 = pf[r]
                    e = s0 - W
                    if e > 0:
                        phs[npc] = float(s0) - f * float(e)
                        kex += e
                    else:
                        phs[npc] = float(s0)
                    kvt += s0
                    px[npc] = x
                    npc += 1
                    n_tok += x
                    left -= x
                    dec[r] = 0
                    sched[r] = x
                    mark[r] = 1
                    mnext[r] = -1
                    if mt >= 0:
                        mnext[mt] = r
                    else:
                        mh = r
                    mt = r
                r = anext[r]
            cnt = nd + npc
            n_tok += nd
            if cnt > 0:
                ist[i, S_DHEAD] = -1
                ist[i, S_DTAIL] = -1
                ist[i, S_DN] = 0
                ist[i, S_DCTX] = 0
                ist[i, S_DEX] = 0
        else:
            budget = budget0
            stop = False
            r = ist[i, S_AHEAD]
            while r >= 0:
                if infl[r] == 0 and gen[r] >= 1 and pf[r] == ntok[r] - 1:
                    if 1 > budget or cnt == cap:
                        stop = True
                        break
                    need = (_held(pf[r] + 1, W, sl, lay_w) + bt - 1) // bt - own[r]
                    if need > 0:
                        ist[i, S_FREE] -= need
                        own[r] += need
                    sched[r] = 1
                    dec[r] = 1
                    mark[r] = 1
                    budget -= 1
                    cnt += 1
                r = anext[r]
            if not stop:
                r = ist[i, S_AHEAD]
                while r >= 0:
                    if infl[r] == 0 and not (gen[r] >= 1 and pf[r] == ntok[r] - 1):
                        x = _chunk(ntok[r] - pf[r], budget, chunked, bt)
                        if x < 0:
                            stop = True
                            break
                        if x > 0:
                            if cnt == cap:
                                stop = True
                                break
                            need = (_held(pf[r] + x, W, sl, lay_w) + bt - 1) // bt - own[r]
                            if need > 0:
                                ist[i, S_FREE] -= need
                                own[r] += need
                            sched[r] = x
                            dec[r] = 0
                            mark[r] = 1
                            budget -= x
                            cnt += 1
                    r = anext[r]
            while ist[i, S_QHEAD] >= 0 and ist[i, S_NADM] < cap_all:
                r = ist[i, S_QHEAD]
                R = (_held(prompt[r] + output[r], W, sl, lay_w) + bt - 1) // bt
                if ist[i, S_RESV] + R > nb_total:
                    break
                x = 0
                if not stop:
                    if cnt == cap:
                        stop = True
                    else:
                        x = _chunk(ntok[r], budget, chunked, bt)
                        if x < 0:
                            stop = True
                            x = 0
                ist[i, S_RESV] += R
                _admit_head(ist, i, r, qnext, aprev, anext)
                iout[i, O_PROMPT_ADMITTED] += prompt[r]
                own[r] = (_held(x, W, sl, lay_w) + bt - 1) // bt
                ist[i, S_FREE] -= own[r]
                if x > 0:
                    sched[r] = x
                    dec[r] = 0
                    mark[r] = 1
                    cnt += 1
                budget -= x
            if ist[i, S_FREE] < 0:
                code = RUN_BLOCKS
            used = (nb_total - ist[i, S_FREE]) * bt
            if used > iout[i, O_KV_PEAK]:
                iout[i, O_KV_PEAK] = used
            # the micro-batch in batch order: the decodes' sums, the contexts' pieces
            r = ist[i, S_AHEAD]
            while r >= 0 and cnt > 0:
                if mark[r] == 1:
                    mnext[r] = -1
                    if mt >= 0:
                        mnext[mt] = r
                    else:
                        mh = r
                    mt = r
                    if dec[r] == 1:
                        c = pf[r] + 1
                        ctx += c
                        e = c - W
                        if e > 0:
                            ex += e
                        nd += 1
                    else:
                        x = sched[r]
                        s0 = pf[r]
                        e = s0 - W
                        if e > 0:
                            phs[npc] = float(s0) - f * float(e)
                            kex += e
                        else:
                            phs[npc] = float(s0)
                        kvt += s0
                        px[npc] = x
                        npc += 1
                        n_tok += x
                r = anext[r]
            n_tok += nd
        if cnt == 0:
            launch_t[i] = np.inf
            continue
        # the members (linked in batch order above) go in flight
        r = mh
        while r >= 0:
            mark[r] = 0
            infl[r] = 1
            r = mnext[r]
        kvt += ctx
        kex += ex
        kvf = float(kvt) - f * float(kex)
        xc = float(ctx) - f * float(ex)
        g1 = 1.0
        for s in range(S):
            if lecture:
                a = c4[s] * xc
            else:
                a = c4[s] * g1 * xc
            for k in range(npc):
                xf = float(px[k])
                a += c2[s] * xf * xf + c4p[s] * xf * phs[k]
            dstage[s] = step_time_nb(stages[s], float(n_tok), kvf, a, float(cnt))
        slot = (ist[i, S_RHEAD] + ist[i, S_RN]) % S
        ist[i, S_RN] += 1
        prev = t
        for s in range(S):
            d = dstage[s]
            st = prev if s == 0 else max(prev, free_s[i, s])
            en = st + d
            free_s[i, s] = en
            if st <= horizon:
                sbusy[i, s] += d
            mstart[i, slot, s] = st
            mend[i, slot, s] = en
            prev = en
        done_t[i, slot] = prev
        mhead[i, slot] = mh
        iout[i, O_STEPS] += 1
        iout[i, O_BATCH_SUM] += cnt
        launch_t[i] = free_s[i, 0] if ist[i, S_RN] < S else np.inf
    while ms < n_samp:
        if full:
            for i in range(ni):
                wait_s[ms * ni + i] = ist[i, S_NWAIT]
                kv_s[ms * ni + i] = ist[i, S_RESERVED] if lecture else (nb_total - ist[i, S_FREE]) * bt
        sys_s[ms] = in_sys
        ms += 1
    for i in range(ni):
        for k in range(ist[i, S_RN]):
            slot = (ist[i, S_RHEAD] + k) % S
            for s in range(S):
                if mstart[i, slot, s] <= horizon and horizon < mend[i, slot, s]:
                    sbusy[i, s] -= mend[i, slot, s] - horizon
        b = 0.0
        for s in range(S):
            b += sbusy[i, s]
        busy[i] = b / float(S)
    return code
