"""A slow, plain-Python reference of the engine-policy simulator (semantics: :mod:`fastsim.sim.policy`).

Plain request and instance objects, lists and dicts; every step loops over the running batch and
every prefix lookup walks the request's blocks, as the kernel does, with the same float operations
in the same order, so per-request times must agree bit for bit. The tests check
:mod:`fastsim.sim._policy_nb` against it.
"""
from __future__ import annotations

import math
from collections import OrderedDict

from ..stepmodel import P_KV_BUDGET_TOKENS, P_LAYERS, P_QDIM_DEC, P_QDIM_PF, step_time
from .window import held_tokens, kv_window

__all__ = ["simulate_policy_reference"]

INF = math.inf
UNFINISHED, FINISHED, REJECTED = 0, 1, 2
VLLM, SGLANG, TRTLLM = 0, 1, 2
M64 = (1 << 64) - 1


def _mix(z):
    """splitmix64's finaliser on a 64-bit integer (Steele, Lea, Flood, OOPSLA 2014)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def accept_uniform(seed, r, k):
    """The uniform in [0, 1) that decides request ``r``'s ``k``-th speculative round."""
    z = (seed + (r + 1) * 0x9E3779B97F4A7C15 + (k + 1) * 0xD1B54A32D192ED03) & M64
    return float(_mix(z) >> 11) * (1.0 / 9007199254740992.0)


def accepted_drafts(u, alpha, gamma):
    """Draft tokens accepted: the largest k <= gamma with u < alpha^k (alpha^k by repeated products)."""
    k = 0
    thr = alpha
    while k < gamma and u < thr:
        k += 1
        thr *= alpha
    return k


class Req:
    def __init__(self, idx, arrival, P, O, blocks):
        self.idx, self.arrival, self.P, self.O = idx, arrival, P, O
        self.blocks = blocks        # dense prefix-block ids
        self.ntok = P               # tokens known: P + generated (not counting the last at finish)
        self.computed = 0           # tokens whose KV is in the cache
        self.g = 0                  # output tokens generated
        self.own = 0                # KV blocks allocated by this request
        self.h = 0                  # leading cache entries it hit at its last admission
        self.nref = 0               # cache entries it references (its hits and the entries it made)
        self.nxt_blk = 0            # next prompt block to consider for insertion
        self.sched = 0              # tokens scheduled in the running step
        self.dec = False            # decodes in the running step
        self.rounds = 0             # speculative rounds so far
        self.first = math.nan
        self.finish = math.nan
        self.instance = -1
        self.status = UNFINISHED
        self.admitted_once = False
        self.cached = 0             # prompt tokens served from the cache at its first admission
        self.preempted = 0

    def rem(self):
        return 0 if self.status == FINISHED else (self.ntok - self.computed) + (self.O - self.g)


class Inst:
    def __init__(self, p, cfg):
        self.p = p
        self.window = kv_window(p)
        self.nb_total = cfg["nb_total"]
        self.free = self.nb_total
        self.cached_free = 0
        self.entries = {}           # id -> [ref, owner]
        self.lru = OrderedDict()    # ids with ref 0, least recently released first
        self.waiting = []
        self.running = []
        self.stepped = []           # requests in the running step, in schedule order
        self.active = False
        self.next_t = INF
        self.ratio = cfg["ratio_init"]
        self.rem = 0
        self.unfinished = 0
        self.steps = 0
        self.busy = 0.0
        self.batch_sum = 0
        self.tokens_out = 0
        self.kv_peak = 0
        self.preemptions = 0
        self.cached_tokens = 0
        self.spec_rounds = 0
        self.spec_tokens = 0

    def used_tokens(self, bt):
        return (self.nb_total - self.free) * bt


def simulate_policy_reference(arrival, prompt, output, blk_off, blk_ids, *, p, n_instances, cfg, horizon, dt,
                              max_context, routing, p_draft=None):
    """Simulate a colocated plan under an engine policy in plain Python (for checking the kernel).

    Parameters
    ----------
    arrival : sequence of float of length n
        Arrival times (s), ascending.
    prompt, output : sequence of int of length n
        Prompt tokens P >= 1 and output tokens O >= 1.
    blk_off : sequence of int of length n + 1; blk_ids : sequence of int
        Prefix blocks of each request, dense ids ``0 .. H - 1`` (empty without prefixes).
    p : ndarray(float64) of shape (N_PARAMS,)
        Step parameters of one instance.
    n_instances : int
    cfg : dict
        The policy configuration, :func:`fastsim.sim.policy._cfg_dict` of the kernel's row.
    horizon, dt : float
    max_context : int
    routing : {"least-loaded", "round-robin", "prefix-aware"}
    p_draft : ndarray(float64) of shape (N_PARAMS,), optional
        The draft model's step parameters (speculative decoding).

    Returns
    -------
    dict
        Per-request lists (``first``, ``finish``, ``instance``, ``status``, ``cached``,
        ``preempted``), samples (``wait``, ``kv``, ``in_system``) and per-instance lists.
    """
    n = len(arrival)
    reqs = []
    for i in range(n):
        reqs.append(Req(i, float(arrival[i]), int(prompt[i]), int(output[i]),
                        [int(x) for x in blk_ids[int(blk_off[i]):int(blk_off[i + 1])]]))
    kind, B, S, bt = cfg["kind"], cfg["budget"], cfg["max_seqs"], cfg["block_tokens"]
    caching, bth = cfg["caching"], cfg["prefix_block_tokens"]
    private = cfg.get("private", False)
    # rows that span the output: every listed block can be hit; the blocks past the prompt's full
    # ones become cache entries at the finish and, under vllm, at a preemption
    spans = cfg.get("spans_output", False)
    unit, whole = cfg.get("chunk_unit", 0), cfg.get("whole_context", False)
    bpb = bth // bt if bth > 0 else 0
    gamma, alpha, seed = cfg["gamma"], cfg["alpha"], cfg["seed"]
    insts = [Inst(p, cfg) for _ in range(n_instances)]
    window = insts[0].window
    lay, qdec, qpf = float(p[P_LAYERS]), float(p[P_QDIM_DEC]), float(p[P_QDIM_PF])
    f = window[3]

    def nb(c):
        return (held_tokens(c, window) + bt - 1) // bt

    def excess(c):
        return max(c - window[0], 0)

    def nfull(r):
        return min(len(r.blocks), r.P // bth) if caching else 0

    def nlisted(r):
        return len(r.blocks) if spans else nfull(r)

    def hits(inst, r):
        cap = min(nlisted(r), (r.ntok - 1) // bth) if caching else 0
        h = 0
        while h < cap and r.blocks[h] in inst.entries:
            h += 1
        return h

    def evict(inst):
        while inst.cached_free > inst.free:
            bid, _ = inst.lru.popitem(last=False)
            del inst.entries[bid]
            inst.cached_free -= bpb

    def unref(inst, bid):
        e = inst.entries[bid]
        e[0] -= 1
        if e[0] == 0:
            inst.lru[bid] = None
            inst.cached_free += bpb
            inst.free += bpb

    def release(inst, r):
        # last block first: the tail joins the LRU list before the head, so it is evicted first
        for j in reversed(range(r.nxt_blk)):
            bid = r.blocks[j]
            if j < r.h:
                unref(inst, bid)
            else:
                e = inst.entries.get(bid)
                if e is not None and e[1] == r.idx:
                    e[1] = -1
                    unref(inst, bid)
        inst.free += r.own
        r.own = 0
        r.nref = 0

    def preempt(inst, r, front):
        inst.rem -= r.rem()
        if private:
            # private blocks become cache entries when their request is preempted
            make_entries(inst, r, min(nfull(r), r.computed // bth))
        if caching and spans and kind == VLLM:
            # vLLM caches every full block it computed, generated tokens included
            make_entries(inst, r, min(len(r.blocks), r.computed // bth))
        release(inst, r)
        r.computed = 0
        r.h = 0
        r.nxt_blk = 0
        r.preempted += 1
        inst.preemptions += 1
        inst.rem += r.rem()
        if front:
            inst.waiting.insert(0, r)
        else:
            inst.waiting.append(r)

    def take_hits(inst, r, h):
        for j in range(h):
            bid = r.blocks[j]
            e = inst.entries[bid]
            if e[0] == 0:
                del inst.lru[bid]
                inst.cached_free -= bpb
                inst.free -= bpb
            e[0] += 1

    def make_entries(inst, r, upto):
        while r.nxt_blk < upto:
            bid = r.blocks[r.nxt_blk]
            if bid not in inst.entries:
                inst.entries[bid] = [1, r.idx]
                r.own -= bpb
                r.nref += 1
            r.nxt_blk += 1

    def evictable(inst, r, h):
        return bpb * sum(1 for j in range(h) if inst.entries[r.blocks[j]][0] == 0)

    def admit(inst, r, h, x):
        inst.rem -= r.rem()
        take_hits(inst, r, h)
        r.h = h
        r.nref = h
        r.nxt_blk = h
        r.computed = h * bth
        if not r.admitted_once:
            r.admitted_once = True
            r.cached = h * bth
            inst.cached_tokens += h * bth
        need = nb(r.computed + x) - h * bpb
        inst.free -= need
        r.own = need
        evict(inst)
        inst.rem += r.rem()
        inst.waiting.pop(0)
        inst.running.append(r)
        r.sched = x
        r.dec = False
        inst.stepped.append(r)

    def is_decoder(r):
        return r.g >= 1 and r.computed == r.ntok - 1

    def want(r):
        return gamma + 1 if is_decoder(r) else r.ntok - r.computed

    def grow(inst, r, target):
        need = nb(target) - r.nref * bpb - r.own
        return max(need, 0)

    def schedule_vllm(inst):
        budget = B
        preempted = False
        k = 0
        while k < len(inst.running) and budget > 0:
            r = inst.running[k]
            dec = is_decoder(r)
            if dec:
                x = gamma + 1
                if x > budget:
                    break
            else:
                x = min(r.ntok - r.computed, budget)
            need = grow(inst, r, r.computed + x)
            ok = True
            while need > inst.free:
                v = inst.running.pop()
                preempt(inst, v, True)
                preempted = True
                if v is r:
                    ok = False
                    break
            if not ok:
                break
            inst.free -= need
            r.own += need
            evict(inst)
            r.sched = x
            r.dec = dec
            inst.stepped.append(r)
            budget -= x
            k += 1
        if not preempted or not inst.stepped:
            while inst.waiting and budget > 0 and len(inst.running) < S:
                r = inst.waiting[0]
                h = hits(inst, r)
                x = min(r.ntok - h * bth, budget)
                need = nb(h * bth + x) - h * bpb
                if need + evictable(inst, r, h) > inst.free:
                    break
                admit(inst, r, h, x)
                budget -= x

    def trt_chunk(ext, budget):
        """TensorRT-LLM's context chunk: whole or nothing without chunking (None: the pass ends)."""
        if whole:
            return ext if ext <= budget else None
        x = min(ext, budget)
        return x if x == ext else x // unit * unit

    def schedule_trtllm(inst):
        # GUARANTEED_NO_EVICT: the running stay; the micro-batch takes the decodes, then the contexts
        budget = B
        stop = False
        for r in inst.running:
            if not is_decoder(r):
                continue
            if gamma + 1 > budget:
                stop = True
                break
            need = grow(inst, r, r.computed + gamma + 1)
            assert need <= inst.free        # the reservation holds: a request's blocks fit
            inst.free -= need
            r.own += need
            evict(inst)
            r.sched = gamma + 1
            r.dec = True
            inst.stepped.append(r)
            budget -= gamma + 1
        if not stop:
            for r in inst.running:
                if is_decoder(r):
                    continue
                x = trt_chunk(r.ntok - r.computed, budget)
                if x is None:
                    stop = True
                    break
                if x == 0:
                    continue
                need = grow(inst, r, r.computed + x)
                assert need <= inst.free
                inst.free -= need
                r.own += need
                evict(inst)
                r.sched = x
                r.dec = False
                inst.stepped.append(r)
                budget -= x
        resv = sum(nb(r.P + r.O + gamma) for r in inst.running)
        while inst.waiting and len(inst.running) < S:
            r = inst.waiting[0]
            R = nb(r.P + r.O + gamma)
            if resv + R > inst.nb_total:
                break
            h = hits(inst, r)
            x = 0
            if not stop:
                x = trt_chunk(r.ntok - h * bth, budget)
                if x is None:
                    stop = True
                    x = 0
            resv += R
            admit(inst, r, h, x)
            if x == 0:
                inst.stepped.pop()      # admitted, no tokens in this iteration
            budget -= x
        # the step in batch (admission) order, as the kernel runs and completes it
        on = set(id(r) for r in inst.stepped)
        inst.stepped = [r for r in inst.running if id(r) in on]

    def schedule_sglang(inst):
        # a prefill step when a chunked prompt is in progress or the queue head can be admitted
        budget = B
        # SGLang counts its admission room in tokens (``PrefillAdder.rem_total_tokens``): free pages x page size
        rem_total = float(inst.free * bt)
        for r in inst.running:
            rem_total -= float(min(r.O - r.g, cfg["clip"])) * inst.ratio
        for r in inst.running:
            if budget == 0:
                break
            if not is_decoder(r):
                x = min(r.ntok - r.computed, budget)
                need = grow(inst, r, r.computed + x)
                if need > inst.free:
                    break
                inst.free -= need
                r.own += need
                evict(inst)
                r.sched = x
                r.dec = False
                inst.stepped.append(r)
                budget -= x
                rem_total -= float(x)
        while inst.waiting and budget > 0 and len(inst.running) < S:
            r = inst.waiting[0]
            h = hits(inst, r)
            ext = r.ntok - h * bth
            ev = evictable(inst, r, h)
            if float(ext + min(r.O - r.g, cfg["clip"])) + float(ev * bt) > rem_total:
                break
            x = min(ext, budget)
            need = nb(h * bth + x) - h * bpb
            if need + ev > inst.free:
                break
            admit(inst, r, h, x)
            budget -= x
            rem_total -= float(ext + min(r.O - r.g, cfg["clip"])) + float(ev * bt)
            if x < ext:
                break
        if inst.stepped:
            return
        decs = [r for r in inst.running if is_decoder(r)]
        if not decs:
            return
        per = gamma + 1
        if sum(grow(inst, r, r.computed + per) for r in decs) > inst.free:
            # retract (SGLang ``retract_decode``): the fewest output tokens first, then the longest
            # prompt, then the latest in the batch, until 20 steps of the rest fit, at least one
            first_iter = True
            while len(inst.running) > 1:
                nd = sum(1 for r in inst.running if is_decoder(r))
                if not (first_iter or inst.free * bt < nd * cfg["retract_steps"] * per):
                    break
                first_iter = False
                v = inst.running[0]
                for r in inst.running:
                    if r.g < v.g or (r.g == v.g and r.P >= v.P):
                        v = r
                inst.running.remove(v)
                preempt(inst, v, False)
            tot_dec = sum(r.g for r in inst.running)
            tot_max = sum(r.O for r in inst.running)
            inst.ratio = min(1.0, float(tot_dec + cfg["retract_steps"] * len(inst.running)) / float(tot_max))
            decs = [r for r in inst.running if is_decoder(r)]
        else:
            inst.ratio = max(inst.ratio - cfg["ratio_decay"], cfg["ratio_min"])
        for r in decs:
            need = grow(inst, r, r.computed + per)
            inst.free -= need
            r.own += need
            evict(inst)
            r.sched = per
            r.dec = True
            inst.stepped.append(r)

    def start_step(inst, t):
        inst.stepped = []
        for _ in range(2):      # a second pass when a preemption left nothing to run
            if kind == VLLM:
                schedule_vllm(inst)
            elif kind == TRTLLM:
                schedule_trtllm(inst)
            else:
                schedule_sglang(inst)
            if inst.stepped or not (inst.waiting or inst.running):
                break
        # the block ledger balances: running requests' blocks + referenced entries + free = all
        held = sum(r.own for r in inst.running) + bpb * sum(1 for e in inst.entries.values() if e[0] > 0)
        assert held == inst.nb_total - inst.free and 0 <= inst.cached_free <= inst.free
        assert inst.cached_free == bpb * sum(1 for e in inst.entries.values() if e[0] == 0)
        inst.kv_peak = max(inst.kv_peak, inst.used_tokens(bt))
        if not inst.stepped:
            inst.active = False
            inst.next_t = INF
            return
        n_tok = 0
        ctx = 0
        ex = 0
        nd = 0
        for r in inst.stepped:
            if r.dec:
                c = r.computed + 1
                ctx += c
                ex += excess(c)
                nd += 1
        g1 = float(gamma + 1)
        attn = 4.0 * lay * qdec * g1 * (float(ctx) - f * float(ex))
        kvt, kex = ctx, ex
        n_tok = nd * (gamma + 1)
        for r in inst.stepped:
            if r.dec:
                continue
            x = r.sched
            s = r.computed
            e = excess(s)
            hs = float(s) - f * float(e) if e > 0 else float(s)
            kvt += s
            kex += e
            attn += 2.0 * lay * qpf * float(x) * float(x) + 4.0 * lay * qpf * float(x) * hs
            n_tok += x
        d = float(step_time(inst.p, float(n_tok), float(kvt) - f * float(kex), attn, float(len(inst.stepped))))
        if gamma > 0 and nd > 0:
            ld, qd = float(p_draft[P_LAYERS]), float(p_draft[P_QDIM_DEC])
            dd = float(step_time(p_draft, float(nd), float(ctx), 4.0 * ld * qd * float(ctx), float(nd)))
            d = d + float(gamma) * dd
        inst.steps += 1
        inst.active = True
        inst.next_t = t + d
        inst.busy += d
        inst.batch_sum += len(inst.stepped)

    def complete(inst, t):
        for r in inst.stepped:
            inst.rem -= r.rem()
            if r.dec and gamma > 0:
                u = accept_uniform(seed, r.idx, r.rounds)
                r.rounds += 1
                a = 1 + accepted_drafts(u, alpha, gamma)
                a = min(a, r.O - r.g)
                inst.spec_rounds += 1
                inst.spec_tokens += a
                r.computed += a
                r.g += a
                inst.tokens_out += a
                if r.g == r.O:
                    r.finish = t
                    r.status = FINISHED
                else:
                    r.ntok += a
            else:
                r.computed += r.sched
                if r.computed == r.ntok:
                    r.g += 1
                    inst.tokens_out += 1
                    if r.g == 1:
                        r.first = t
                    if r.g == r.O:
                        r.finish = t
                        r.status = FINISHED
                    else:
                        r.ntok += 1
            inst.rem += r.rem()
            # full prompt blocks computed by this request become cache entries
            if not private:
                make_entries(inst, r, min(nfull(r), r.computed // bth) if caching else 0)
            if r.status == FINISHED:
                if caching and spans:
                    # the finished request's full blocks of generated tokens become cache entries
                    make_entries(inst, r, min(len(r.blocks), r.computed // bth))
                release(inst, r)
                inst.running.remove(r)
                inst.unfinished -= 1
        inst.stepped = []

    def boundary(i, t):
        inst = insts[i]
        if inst.active:
            complete(inst, t)
        start_step(inst, t)

    rr = [0]

    def route(r):
        if routing == "round-robin":
            i = rr[0] % n_instances
            rr[0] += 1
            return i
        rr[0] += 1
        loads = [x.rem for x in insts]
        best = loads.index(min(loads))
        if routing == "prefix-aware":
            cnt = [x.unfinished for x in insts]
            lo, hi = min(cnt), max(cnt)
            if not (hi - lo > cfg["route_abs"] and float(hi) > cfg["route_rel"] * float(lo)):
                hs = [hits(x, r) for x in insts]
                m = max(hs)
                if m > 0 and float(m * bth) > cfg["route_cache_thr"] * float(r.P):
                    cand = [k for k in range(n_instances) if hs[k] == m]
                    lc = [loads[k] for k in cand]
                    best = cand[lc.index(min(lc))]
        return best

    n_samp = max(1, int(math.ceil(horizon / dt)))
    samples_wait, samples_kv, samples_sys = [], [], []
    ia = 0

    def record():
        samples_wait.append([len(x.waiting) for x in insts])
        samples_kv.append([x.used_tokens(bt) for x in insts])
        samples_sys.append(sum(1 for r in reqs[:ia] if r.status == UNFINISHED))

    nbt = insts[0].nb_total
    while True:
        cands = []
        if ia < n:
            cands.append((reqs[ia].arrival, 0, ia))
        for i, inst in enumerate(insts):
            if inst.next_t < INF:
                cands.append((inst.next_t, 2, i))
        if not cands:
            break
        t, kd, j = min(cands)
        if not (t <= horizon):
            break
        while len(samples_sys) < n_samp and len(samples_sys) * dt < t:
            record()
        if kd == 0:
            r = reqs[j]
            ia += 1
            if r.P + r.O > max_context or nb(r.P + r.O + gamma) > nbt or (whole and r.P > B):
                r.status = REJECTED
                continue
            i = route(r)
            r.instance = i
            insts[i].waiting.append(r)
            insts[i].rem += r.rem()
            insts[i].unfinished += 1
            if insts[i].next_t == INF:
                insts[i].next_t = t
        else:
            boundary(j, t)
    while len(samples_sys) < n_samp:
        record()
    for inst in insts:
        if inst.active:
            inst.busy -= inst.next_t - horizon
    return dict(
        first=[r.first for r in reqs], finish=[r.finish for r in reqs], instance=[r.instance for r in reqs],
        status=[r.status for r in reqs], cached=[r.cached for r in reqs], preempted=[r.preempted for r in reqs],
        wait=samples_wait, kv=samples_kv, in_system=samples_sys,
        busy=[x.busy for x in insts], steps=[x.steps for x in insts], batch_sum=[x.batch_sum for x in insts],
        tokens_out=[x.tokens_out for x in insts], kv_peak=[x.kv_peak for x in insts],
        preemptions=[x.preemptions for x in insts], cached_tokens=[x.cached_tokens for x in insts],
        spec_rounds=[x.spec_rounds for x in insts], spec_tokens=[x.spec_tokens for x in insts],
    )


def kv_blocks_total(p, block_tokens):
    """Whole KV blocks of an instance: ``floor(p[P_KV_BUDGET_TOKENS]) // block_tokens``."""
    v = float(p[P_KV_BUDGET_TOKENS])
    return (int(math.floor(v)) if v > 0 else 0) // block_tokens
