"""A slow, plain-Python reference of the serving simulator (semantics: :mod:`fastsim.sim.engine`).

Plain request objects, lists and a simple event loop that looks at every candidate event; each
step loops over the whole running batch. Under a sliding window (:mod:`fastsim.sim.window`) it
sums each running decode's context and its excess over the window afresh at every step, where
the kernels keep both sums running. It uses the same float operations in the same order
as the kernels, so per-request times must agree bit for bit. The tests check the kernels
against it, and ``fastsim bench`` reports how much faster the kernels are. The step boundary of
a colocated or decode instance, the admission test and the routing choice are module functions,
which the fleet's reference (:mod:`fastsim.fleet.reference`) drives as well.
"""
from __future__ import annotations

import math

from ..stepmodel import P_KV_BUDGET_TOKENS, P_KVPG, P_LAYERS, P_NET_BW, P_QDIM_DEC, P_QDIM_PF, step_time
from .window import held_tokens, kv_window

__all__ = ["simulate_reference"]

INF = math.inf
UNFINISHED, FINISHED, REJECTED = 0, 1, 2


class Req:
    def __init__(self, idx, arrival, P, O):
        self.idx, self.arrival, self.P, self.O = idx, arrival, P, O
        self.prefilled = 0          # prompt tokens prefilled (by finished steps)
        self.generated = 0          # output tokens generated (by finished steps)
        self.first = math.nan
        self.finish = math.nan
        self.instance = -1
        self.decode_instance = -1
        self.status = UNFINISHED


class Inst:
    def __init__(self, kind, p, tokens, max_admit, kv_budget):
        self.kind, self.p, self.tokens, self.max_admit, self.kv_budget = kind, p, tokens, max_admit, kv_budget
        self.window = kv_window(p)      # (W, S, L, f)
        self.assigned = []          # every request ever routed here
        self.queue = []             # waiting, FCFS
        self.admitted = []          # admitted and unfinished, in admission order
        self.active = False
        self.next_t = INF
        self.decoders = []          # composition of the running step
        self.pieces = []
        self.steps = 0
        self.busy = 0.0
        self.batch_sum = 0
        self.tokens_out = 0
        self.kv_peak = 0

    def held(self, c):
        """KV of a sequence of c tokens, whole tokens (memory)."""
        return held_tokens(c, self.window)

    def excess(self, c):
        """Tokens of a sequence of c tokens past the window (0 without one)."""
        return max(c - self.window[0], 0)

    def reserved(self):
        if self.kind == "prefill":
            return sum(self.held(r.P) for r, _ in self.pieces) if self.active else 0
        return sum(self.held(r.P + r.O) for r in self.admitted)

    def outstanding(self):
        if self.kind == "colocated":
            return sum((r.P - r.prefilled) + (r.O - r.generated) for r in self.assigned if r.status != FINISHED)
        if self.kind == "prefill":
            return sum(r.P for r in self.assigned if r.prefilled < r.P)
        return sum(r.O - r.generated for r in self.assigned if r.status != FINISHED)


def kv_floor(p):
    v = float(p[P_KV_BUDGET_TOKENS])
    return int(math.floor(v)) if v > 0 else 0


def is_rejected(r, max_context, holder, prompt_holder=None):
    """Whether request r is rejected at arrival: P + O over the context, its held KV over a whole
    budget of ``holder`` (the instance that keeps it), or its prompt's over ``prompt_holder``'s
    (SPEC section 6)."""
    if r.P + r.O > max_context or holder.held(r.P + r.O) > holder.kv_budget:
        return True
    return prompt_holder is not None and prompt_holder.held(r.P) > prompt_holder.kv_budget


def choose_instance(insts, pool, routing, rr):
    """Index (an element of ``pool``) of the instance a new request goes to.

    Parameters
    ----------
    insts : list of Inst
    pool : list of int
        Candidate instances, ascending.
    routing : {"least-loaded", "round-robin"}
    rr : int
        Requests routed so far over this pool (the round-robin counter).

    Returns
    -------
    int
        Round-robin: ``pool[rr % len(pool)]``; least-loaded: the one with the fewest
        outstanding tokens, ties to the first.
    """
    if routing == "round-robin":
        return pool[rr % len(pool)]
    loads = [insts[i].outstanding() for i in pool]
    return pool[loads.index(min(loads))]


def start_batch_step(inst, t):
    """Admission, composition and step time at a boundary of a colocated or decode instance.

    Parameters
    ----------
    inst : Inst
        A ``"colocated"`` or ``"decode"`` instance; its step (``decoders``, ``pieces``,
        ``next_t``) and counters are updated in place.
    t : float
        Time of the boundary (s).
    """
    while inst.queue and len(inst.admitted) < inst.max_admit:
        r = inst.queue[0]
        if inst.reserved() + inst.held(r.P + r.O) > inst.kv_budget:
            break
        inst.queue.pop(0)
        inst.admitted.append(r)
    inst.kv_peak = max(inst.kv_peak, inst.reserved())
    if not inst.admitted:
        inst.active = False
        inst.next_t = INF
        return
    lay, qdec, qpf = float(inst.p[P_LAYERS]), float(inst.p[P_QDIM_DEC]), float(inst.p[P_QDIM_PF])
    f = inst.window[3]
    inst.decoders = [r for r in inst.admitted if r.prefilled == r.P]
    ctx = sum(r.P + r.generated for r in inst.decoders)
    ex = sum(inst.excess(r.P + r.generated) for r in inst.decoders)
    attn = 4.0 * lay * qdec * (float(ctx) - f * float(ex))
    kvt, kex = ctx, ex
    inst.pieces = []
    left = inst.tokens if inst.kind == "colocated" else 0
    for r in inst.admitted:
        if left == 0:
            break
        if r.prefilled == r.P:
            continue
        x = min(r.P - r.prefilled, left)
        s = r.prefilled
        e = inst.excess(s)
        hs = float(s) - f * float(e) if e > 0 else float(s)
        kvt += s
        kex += e
        attn += 2.0 * lay * qpf * float(x) * float(x) + 4.0 * lay * qpf * float(x) * hs
        inst.pieces.append((r, x))
        left -= x
    n_tok = len(inst.decoders) + sum(x for _, x in inst.pieces)
    d = float(step_time(inst.p, float(n_tok), float(kvt) - f * float(kex), attn,
                            float(len(inst.decoders) + len(inst.pieces))))
    inst.steps += 1
    inst.active = True
    inst.next_t = t + d
    inst.busy += d
    inst.batch_sum += len(inst.decoders) + len(inst.pieces)


def batch_boundary(inst, t):
    """Step boundary of a colocated or decode instance: complete the running step, start the next.

    Parameters
    ----------
    inst : Inst
        A ``"colocated"`` or ``"decode"`` instance (updated in place; the requests its step
        finishes get their first-token / finish times and status).
    t : float
        Time of the boundary (s).
    """
    if inst.active:
        for r in inst.decoders:
            r.generated += 1
            inst.tokens_out += 1
        for r, x in inst.pieces:
            r.prefilled += x
            if r.prefilled == r.P:
                r.generated = 1
                r.first = t
                inst.tokens_out += 1
        for r in list(inst.admitted):
            if r.generated == r.O:
                r.finish = t
                r.status = FINISHED
                inst.admitted.remove(r)
    start_batch_step(inst, t)


def simulate_reference(mode, arrival, prompt, output, *, horizon, dt, max_context, routing,
                       p=None, n_instances=0, chunk=0, max_batch=0,
                       p_prefill=None, n_prefill=0, p_decode=None, n_decode=0, prefill_budget=0,
                       decode_max_batch=0):
    """Simulate one plan in plain Python (SPEC section 6), for checking the kernels.

    Parameters
    ----------
    mode : {"colocated", "disaggregated"}
    arrival : sequence of float of length n
        Arrival times (s), ascending.
    prompt, output : sequence of int of length n
        Prompt tokens P >= 1 and output tokens O >= 1.
    horizon : float
        Simulated seconds.
    dt : float
        Step of the sampling grid (s).
    max_context : int
        Requests with P + O above it are rejected (raw tokens; the KV budgets are checked
        against the KV a request holds, :func:`fastsim.sim.window.held_tokens`).
    routing : {"least-loaded", "round-robin"}
    p, n_instances, chunk, max_batch
        Colocated: step parameters (float64 of shape (N_PARAMS,)), instance count, chunk tokens,
        batch cap (0 = unlimited).
    p_prefill, n_prefill, p_decode, n_decode, prefill_budget, decode_max_batch
        Disaggregated: the same for prefill and decode instances.

    Returns
    -------
    dict
        ``first``, ``finish`` (float, nan when not reached), ``instance``, ``decode_instance``,
        ``status``: lists of length n; ``wait``, ``kv``: lists of m lists of n_instances ints;
        ``in_system``: list of m ints; ``busy`` (s), ``steps``, ``batch_sum``, ``tokens_out``,
        ``kv_peak``: lists of n_instances.

    Notes
    -----
    No validation: give it what :func:`fastsim.sim.simulate` accepts. Cost grows with the batch
    size per step (it loops over every running request), roughly 1e3 times the kernels'.
    """
    reqs = [Req(i, float(arrival[i]), int(prompt[i]), int(output[i])) for i in range(len(arrival))]
    big = 1 << 62
    if mode == "colocated":
        kvb = kv_floor(p)
        insts = [Inst("colocated", p, chunk, max_batch or big, kvb) for _ in range(n_instances)]
        entry = list(range(n_instances))
        decode = []
        holder, prompt_holder = insts[0], None
    else:
        kp, kd = kv_floor(p_prefill), kv_floor(p_decode)
        insts = [Inst("prefill", p_prefill, min(prefill_budget, kp), big, kp) for _ in range(n_prefill)]
        insts += [Inst("decode", p_decode, 0, decode_max_batch or big, kd) for _ in range(n_decode)]
        entry = list(range(n_prefill))
        decode = list(range(n_prefill, n_prefill + n_decode))
        holder, prompt_holder = insts[-1], insts[0]

    transfers = []      # (time, request index)
    rr = {"entry": 0, "decode": 0}
    n_samp = max(1, int(math.ceil(horizon / dt)))
    samples_wait, samples_kv, samples_sys = [], [], []

    def in_system():
        return sum(1 for r in reqs[:ia] if r.status == UNFINISHED)

    def record():
        samples_wait.append([len(x.queue) for x in insts])
        samples_kv.append([x.reserved() for x in insts])
        samples_sys.append(in_system())

    def route(pool, counter):
        i = choose_instance(insts, pool, routing, rr[counter])
        rr[counter] += 1
        return i

    def start_prefill(inst, t):
        inst.pieces = []
        if not inst.queue:
            inst.active = False
            inst.next_t = INF
            return
        lay, qpf = float(inst.p[P_LAYERS]), float(inst.p[P_QDIM_PF])
        attn = 4.0 * lay * qpf * float(0)
        tot = 0
        while inst.queue:
            r = inst.queue[0]
            if inst.pieces and tot + r.P > inst.tokens:
                break
            inst.queue.pop(0)
            attn += 2.0 * lay * qpf * float(r.P) * float(r.P) + 4.0 * lay * qpf * float(r.P) * float(0)
            tot += r.P
            inst.pieces.append((r, r.P))
        inst.kv_peak = max(inst.kv_peak, sum(inst.held(r.P) for r, _ in inst.pieces))
        d = float(step_time(inst.p, float(tot), 0.0, attn, float(len(inst.pieces))))
        inst.steps += 1
        inst.active = True
        inst.next_t = t + d
        inst.busy += d
        inst.batch_sum += len(inst.pieces)

    def boundary(i, t):
        inst = insts[i]
        if inst.kind == "prefill":
            for r, _ in inst.pieces:
                r.prefilled = r.P
                r.generated = 1
                e = inst.excess(r.P)
                hp = float(r.P) - inst.window[3] * float(e) if e > 0 else float(r.P)
                transfers.append((t + hp * float(inst.p[P_KVPG]) / float(inst.p[P_NET_BW]), r.idx))
            inst.active = False
            start_prefill(inst, t)
            return
        batch_boundary(inst, t)

    ia = 0
    while True:
        cands = []
        if ia < len(reqs):
            cands.append((reqs[ia].arrival, 0, ia))
        if transfers:
            tt, r = min(transfers)
            cands.append((tt, 1, r))
        for i, inst in enumerate(insts):
            if inst.next_t < INF:
                cands.append((inst.next_t, 2, i))
        if not cands:
            break
        t, kind, j = min(cands)
        if not (t <= horizon):
            break
        while len(samples_sys) < n_samp and len(samples_sys) * dt < t:
            record()
        if kind == 0:
            r = reqs[j]
            ia += 1
            if is_rejected(r, max_context, holder, prompt_holder):
                r.status = REJECTED
                continue
            i = route(entry, "entry")
            r.instance = i
            insts[i].assigned.append(r)
            insts[i].queue.append(r)
            if insts[i].next_t == INF:
                insts[i].next_t = t
        elif kind == 1:
            transfers.remove((t, j))
            r = reqs[j]
            r.first = t
            insts[r.instance].tokens_out += 1
            if r.O == 1:
                r.finish = t
                r.status = FINISHED
                continue
            i = route(decode, "decode")
            r.decode_instance = i
            insts[i].assigned.append(r)
            insts[i].queue.append(r)
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
        first=[r.first for r in reqs], finish=[r.finish for r in reqs],
        instance=[r.instance for r in reqs], decode_instance=[r.decode_instance for r in reqs],
        status=[r.status for r in reqs], wait=samples_wait, kv=samples_kv, in_system=samples_sys,
        busy=[x.busy for x in insts], steps=[x.steps for x in insts], batch_sum=[x.batch_sum for x in insts],
        tokens_out=[x.tokens_out for x in insts], kv_peak=[x.kv_peak for x in insts],
    )
