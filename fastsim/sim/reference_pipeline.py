"""A slow, plain-Python reference of the pipeline-parallel simulator (semantics: :mod:`fastsim.sim.pipeline`).

Plain request and instance objects built on :mod:`fastsim.sim.reference` (its ``Req``, ``Inst``,
``is_rejected``, ``choose_instance`` and the held / excess rules of :mod:`fastsim.sim.window`), a
list of in-flight micro-batches per instance and an event loop that looks at every candidate event;
each launch loops over the instance's whole batch. It uses the float operations of the kernel
(:mod:`fastsim.sim._pipeline_nb`) in the same order, so per-request times agree bit for bit; the
tests check the kernel against it, and at one stage against the colocated references
(:mod:`fastsim.sim.reference` under the lecture policy, :mod:`fastsim.sim.reference_policy` under
``trtllm``).
"""
from __future__ import annotations

import math

from ..stepmodel import P_KV_BUDGET_TOKENS, P_LAYERS, P_QDIM_DEC, P_QDIM_PF, step_time
from .reference import FINISHED, INF, REJECTED, UNFINISHED, Inst, Req, choose_instance, is_rejected

__all__ = ["simulate_pipeline_reference"]


class PReq(Req):
    """A request: the lecture's counters (``prefilled``, ``generated``) and TensorRT-LLM's
    (``ntok`` known tokens, ``computed`` with KV, ``own`` KV blocks), and its micro-batch slot."""

    def __init__(self, idx, arrival, P, O):
        super().__init__(idx, arrival, P, O)
        self.inflight = False       # in a micro-batch that has not completed
        self.sched = 0              # prompt tokens (lecture) / tokens (trtllm) of it in that micro-batch
        self.dec = False            # a decode in that micro-batch
        self.ntok = P
        self.computed = 0
        self.own = 0
        self.admitted_once = False

    def rem(self):
        """TensorRT-LLM's outstanding tokens (``reference_policy.Req.rem``)."""
        return 0 if self.status == FINISHED else (self.ntok - self.computed) + (self.O - self.generated)


class MicroBatch:
    def __init__(self, members, start, end):
        self.members = members      # requests, in batch order
        self.start = start          # per stage (s)
        self.end = end
        self.done_t = end[-1]


class PInst(Inst):
    """One pipeline instance: the colocated instance's queue and batch, plus its stages."""

    def __init__(self, stages, policy, cfg):
        p = stages[0]
        lecture = policy == "lecture"
        kvb = int(math.floor(float(p[P_KV_BUDGET_TOKENS]))) if float(p[P_KV_BUDGET_TOKENS]) > 0 else 0
        super().__init__("colocated", p, cfg["chunk"] if lecture else 0,
                         (cfg["max_batch"] or (1 << 62)) if lecture else (1 << 62), kvb)
        self.stages = stages
        self.policy = policy
        self.cfg = cfg
        S = len(stages)
        self.S = S
        self.free = [0.0] * S           # when each stage finishes its last micro-batch
        self.sbusy = [0.0] * S
        self.ring = []                  # in-flight micro-batches, oldest first
        self.launch_t = INF
        bt = cfg.get("block_tokens", 1)
        self.bt = bt
        self.nb_total = kvb // bt
        self.free_blocks = self.nb_total
        self.resv = 0                   # blocks reserved by the running requests (trtllm)
        self.rem_sum = 0
        self.prompt_admitted = 0

    def nb(self, c):
        return (self.held(c) + self.bt - 1) // self.bt

    def outstanding(self):
        if self.policy == "lecture":
            return super().outstanding()
        return self.rem_sum

    def waiting(self):
        return len(self.queue)

    def kv_in_use(self):
        if self.policy == "lecture":
            return self.reserved()
        return (self.nb_total - self.free_blocks) * self.bt


def _compose_lecture(inst):
    """Admission, then the micro-batch: ``(members, n_tok, kv, (ctx, ex), pieces)`` or None."""
    while inst.queue and len(inst.admitted) < inst.max_admit:
        r = inst.queue[0]
        if inst.reserved() + inst.held(r.P + r.O) > inst.kv_budget:
            break
        inst.queue.pop(0)
        inst.admitted.append(r)
    inst.kv_peak = max(inst.kv_peak, inst.reserved())
    free = [r for r in inst.admitted if not r.inflight]
    decoders = [r for r in free if r.prefilled == r.P]
    ctx = sum(r.P + r.generated for r in decoders)
    ex = sum(inst.excess(r.P + r.generated) for r in decoders)
    f = inst.window[3]
    kvt, kex = ctx, ex
    pieces = []
    left = inst.tokens
    for r in free:
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
        pieces.append((r, x, hs))
        left -= x
    if not decoders and not pieces:
        return None
    for r in decoders:
        r.dec = True
        r.sched = 0
    for r, x, _ in pieces:
        r.dec = False
        r.sched = x
    on = set(id(r) for r in decoders) | set(id(r) for r, _, _ in pieces)
    members = [r for r in inst.admitted if id(r) in on]
    n_tok = len(decoders) + sum(x for _, x, _ in pieces)
    attn = []
    for row in inst.stages:
        lay, qdec, qpf = float(row[P_LAYERS]), float(row[P_QDIM_DEC]), float(row[P_QDIM_PF])
        a = 4.0 * lay * qdec * (float(ctx) - f * float(ex))
        for _, x, hs in pieces:
            a += 2.0 * lay * qpf * float(x) * float(x) + 4.0 * lay * qpf * float(x) * hs
        attn.append(a)
    return members, n_tok, float(kvt) - f * float(kex), attn


def _trt_chunk(inst, ext, budget):
    """TensorRT-LLM's context chunk (``reference_policy``): whole or nothing without chunking
    (None: the pass ends), else ``min(ext, budget)``, a chunk cut short rounded down to blocks."""
    if not inst.cfg["chunked_context"]:
        return ext if ext <= budget else None
    x = min(ext, budget)
    return x if x == ext else x // inst.bt * inst.bt


def _grow(inst, r, target):
    need = max(inst.nb(target) - r.own, 0)
    inst.free_blocks -= need
    r.own += need


def _compose_trtllm(inst):
    """TensorRT-LLM's capacity and micro-batch schedulers over the requests not in flight."""
    budget = inst.cfg["budget"]
    cap = inst.cfg["max_seqs"]              # requests of one micro-batch (max_batch_size)
    cap_all = cap * inst.S                  # running requests (max_batch_size x pp_size)
    stepped = []
    stop = False
    for r in inst.admitted:
        if r.inflight or not (r.generated >= 1 and r.computed == r.ntok - 1):
            continue
        if 1 > budget or len(stepped) == cap:
            stop = True
            break
        _grow(inst, r, r.computed + 1)
        r.sched, r.dec = 1, True
        stepped.append(r)
        budget -= 1
    if not stop:
        for r in inst.admitted:
            if r.inflight or (r.generated >= 1 and r.computed == r.ntok - 1):
                continue
            x = _trt_chunk(inst, r.ntok - r.computed, budget)
            if x is None:
                stop = True
                break
            if x == 0:
                continue
            if len(stepped) == cap:
                stop = True
                break
            _grow(inst, r, r.computed + x)
            r.sched, r.dec = x, False
            stepped.append(r)
            budget -= x
    while inst.queue and len(inst.admitted) < cap_all:
        r = inst.queue[0]
        R = inst.nb(r.P + r.O)
        if inst.resv + R > inst.nb_total:
            break
        x = 0
        if not stop:
            if len(stepped) == cap:
                stop = True
            else:
                x = _trt_chunk(inst, r.ntok, budget)
                if x is None:
                    stop = True
                    x = 0
        inst.resv += R
        inst.queue.pop(0)
        inst.admitted.append(r)
        if not r.admitted_once:
            r.admitted_once = True
            inst.prompt_admitted += r.P
        r.own = inst.nb(x)
        inst.free_blocks -= r.own
        if x > 0:
            r.sched, r.dec = x, False
            stepped.append(r)
        budget -= x
    inst.kv_peak = max(inst.kv_peak, inst.kv_in_use())
    if not stepped:
        return None
    on = set(id(r) for r in stepped)
    members = [r for r in inst.admitted if id(r) in on]
    f = inst.window[3]
    ctx = ex = nd = 0
    for r in members:
        if r.dec:
            c = r.computed + 1
            ctx += c
            ex += inst.excess(c)
            nd += 1
    g1 = float(0 + 1)
    kvt, kex = ctx, ex
    n_tok = nd
    pieces = []
    for r in members:
        if r.dec:
            continue
        x = r.sched
        s = r.computed
        e = inst.excess(s)
        hs = float(s) - f * float(e) if e > 0 else float(s)
        kvt += s
        kex += e
        pieces.append((x, hs))
        n_tok += x
    attn = []
    for row in inst.stages:
        lay, qdec, qpf = float(row[P_LAYERS]), float(row[P_QDIM_DEC]), float(row[P_QDIM_PF])
        a = 4.0 * lay * qdec * g1 * (float(ctx) - f * float(ex))
        for x, hs in pieces:
            a += 2.0 * lay * qpf * float(x) * float(x) + 4.0 * lay * qpf * float(x) * hs
        attn.append(a)
    return members, n_tok, float(kvt) - f * float(kex), attn


def _launch(inst, t, horizon):
    comp = _compose_lecture(inst) if inst.policy == "lecture" else _compose_trtllm(inst)
    if comp is None:
        inst.launch_t = INF
        return
    members, n_tok, kv, attn = comp
    start, end = [], []
    prev = t
    for s, row in enumerate(inst.stages):
        d = float(step_time(row, float(n_tok), kv, attn[s], float(len(members))))
        st = prev if s == 0 else max(prev, inst.free[s])
        en = st + d
        inst.free[s] = en
        if st <= horizon:
            inst.sbusy[s] += d
        start.append(st)
        end.append(en)
        prev = en
    for r in members:
        r.inflight = True
    inst.ring.append(MicroBatch(members, start, end))
    inst.steps += 1
    inst.batch_sum += len(members)
    inst.launch_t = inst.free[0] if len(inst.ring) < inst.S else INF


def _complete_lecture(inst, mb, t):
    for r in mb.members:
        r.inflight = False
        if r.dec:
            r.generated += 1
            inst.tokens_out += 1
        else:
            r.prefilled += r.sched
            if r.prefilled == r.P:
                r.generated = 1
                r.first = t
                inst.tokens_out += 1
        if r.generated == r.O:
            r.finish = t
            r.status = FINISHED
            inst.admitted.remove(r)


def _complete_trtllm(inst, mb, t):
    for r in mb.members:
        r.inflight = False
        inst.rem_sum -= r.rem()
        r.computed += r.sched
        if r.computed == r.ntok:
            r.generated += 1
            inst.tokens_out += 1
            if r.generated == 1:
                r.first = t
            if r.generated == r.O:
                r.finish = t
                r.status = FINISHED
            else:
                r.ntok += 1
        inst.rem_sum += r.rem()
        if r.status == FINISHED:
            inst.free_blocks += r.own
            r.own = 0
            inst.resv -= inst.nb(r.P + r.O)
            inst.admitted.remove(r)


def simulate_pipeline_reference(arrival, prompt, output, *, stages, n_instances, horizon, dt, max_context,
                                routing, policy="lecture", chunk=0, max_batch=0, budget=0, max_seqs=0,
                                block_tokens=32, chunked_context=False):
    """Simulate a pipeline-parallel plan in plain Python (semantics: :mod:`fastsim.sim.pipeline`).

    Parameters
    ----------
    arrival : sequence of float of length n
        Arrival times (s), ascending.
    prompt, output : sequence of int of length n
        Prompt tokens P >= 1 and output tokens O >= 1.
    stages : ndarray(float64) of shape (S, N_PARAMS)
        The stage vectors of one instance (:attr:`fastsim.sim.PipelinePlan.stages`).
    n_instances : int
    horizon, dt : float
        Simulated seconds and the sampling step (s).
    max_context : int
    routing : {"least-loaded", "round-robin"}
    policy : {"lecture", "trtllm"}
    chunk, max_batch : int
        Lecture: prompt tokens per micro-batch and the cap on admitted requests (0: none).
    budget, max_seqs, block_tokens, chunked_context
        trtllm: ``max_num_tokens``, ``max_batch_size``, ``tokens_per_block`` and chunked context.

    Returns
    -------
    dict
        ``first``, ``finish``, ``instance``, ``status`` (lists of length n); ``wait``, ``kv``
        (lists of m lists of n_instances ints) and ``in_system`` (m ints); per instance ``busy``
        (the mean over its stages of their busy time, s), ``stage_busy`` (lists of S), ``steps``,
        ``batch_sum``, ``tokens_out``, ``kv_peak``, ``prompt_admitted``.

    Notes
    -----
    No validation: give it what :func:`fastsim.sim.simulate` accepts for a
    :class:`fastsim.sim.PipelinePlan`.
    """
    reqs = [PReq(i, float(arrival[i]), int(prompt[i]), int(output[i])) for i in range(len(arrival))]
    cfg = dict(chunk=chunk, max_batch=max_batch, budget=budget, max_seqs=max_seqs, block_tokens=block_tokens,
               chunked_context=chunked_context)
    if policy == "lecture":
        cfg["block_tokens"] = 1
    insts = [PInst(stages, policy, cfg) for _ in range(n_instances)]
    S = insts[0].S
    n_samp = max(1, int(math.ceil(horizon / dt)))
    samples_wait, samples_kv, samples_sys = [], [], []
    rr = 0
    ia = 0

    def record():
        samples_wait.append([x.waiting() for x in insts])
        samples_kv.append([x.kv_in_use() for x in insts])
        samples_sys.append(sum(1 for r in reqs[:ia] if r.status == UNFINISHED))

    def rejected(r):
        if policy == "lecture":
            return is_rejected(r, max_context, insts[0])
        x = insts[0]
        return r.P + r.O > max_context or x.nb(r.P + r.O) > x.nb_total or (not chunked_context and r.P > budget)

    while True:
        cands = []
        if ia < len(reqs):
            cands.append((reqs[ia].arrival, 0, ia, 0))
        for i, inst in enumerate(insts):
            if inst.ring:
                cands.append((inst.ring[0].done_t, 1, i, 0))
            if inst.launch_t < INF:
                cands.append((inst.launch_t, 1, i, 1))
        if not cands:
            break
        t, kind, j, sub = min(cands)
        if not (t <= horizon):
            break
        while len(samples_sys) < n_samp and len(samples_sys) * dt < t:
            record()
        if kind == 0:
            r = reqs[j]
            ia += 1
            if rejected(r):
                r.status = REJECTED
                continue
            i = choose_instance(insts, list(range(n_instances)), routing, rr)
            rr += 1
            r.instance = i
            inst = insts[i]
            inst.assigned.append(r)
            inst.queue.append(r)
            inst.rem_sum += r.rem()
            if len(inst.ring) < S:
                inst.launch_t = max(t, inst.free[0])
        elif sub == 0:
            inst = insts[j]
            mb = inst.ring.pop(0)
            if policy == "lecture":
                _complete_lecture(inst, mb, t)
            else:
                _complete_trtllm(inst, mb, t)
            inst.launch_t = max(t, inst.free[0])
        else:
            _launch(insts[j], t, horizon)
    while len(samples_sys) < n_samp:
        record()
    busy = []
    for inst in insts:
        for mb in inst.ring:
            for s in range(S):
                if mb.start[s] <= horizon < mb.end[s]:
                    inst.sbusy[s] -= mb.end[s] - horizon
        b = 0.0
        for s in range(S):
            b += inst.sbusy[s]
        busy.append(b / float(S))
    return dict(
        first=[r.first for r in reqs], finish=[r.finish for r in reqs], instance=[r.instance for r in reqs],
        status=[r.status for r in reqs], wait=samples_wait, kv=samples_kv, in_system=samples_sys,
        busy=busy, stage_busy=[list(x.sbusy) for x in insts], steps=[x.steps for x in insts],
        batch_sum=[x.batch_sum for x in insts], tokens_out=[x.tokens_out for x in insts],
        kv_peak=[x.kv_peak for x in insts], prompt_admitted=[x.prompt_admitted for x in insts],
    )
