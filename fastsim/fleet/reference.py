"""A slow, plain-Python reference of the fleet simulator (semantics: :mod:`fastsim.fleet.sim`).

A plain event loop over membership changes, arrivals and step boundaries that looks at every
candidate event, driving the serving reference's instances (:mod:`fastsim.sim.reference`: its
request and instance objects, its colocated step boundary, admission test and routing choice,
whose float operations are the kernels' in the same order). So the per-request times, rows and
statuses must agree with :func:`fastsim.fleet.simulate_fleet` bit for bit; the tests check the
kernel against it.
"""
from __future__ import annotations

import math

from ..sim.reference import (FINISHED, INF, REJECTED, UNFINISHED, Inst, Req, batch_boundary, choose_instance,
                             is_rejected, kv_floor)
from .schema import END_FAIL, WINDOW_COLUMNS

__all__ = ["simulate_fleet_reference", "window_counts_reference"]

_JOIN, _DRAIN, _FAIL = 0, 1, 2
_ARRIVAL, _BOUNDARY = 1, 2      # after the membership changes (0, 1, 2 in the event tuples' second place)


def simulate_fleet_reference(arrival_s, prompt_tokens, output_tokens, schedule, *, p, chunk_tokens,
                             max_batch, max_context_tokens, routing, horizon_s, stop_s):
    """Simulate a fleet in plain Python, for checking :func:`fastsim.fleet.simulate_fleet`.

    Parameters
    ----------
    arrival_s : sequence of float of length n
        Arrival times (s), ascending; those after ``horizon_s`` do not arrive.
    prompt_tokens, output_tokens : sequence of int of length n
        P >= 1 and O >= 1.
    schedule : FleetSchedule
        The lifetimes (``ready_s``, ``end_s`` and ``end_kind`` are used; ``provision_s`` only
        bills).
    p : ndarray(float64) of shape (N_PARAMS,)
        Step parameters of the instance type.
    chunk_tokens : int
        Prompt tokens per step.
    max_batch : int
        Cap on the admitted requests (0 = unlimited).
    max_context_tokens : int
        Requests with P + O above it are rejected.
    routing : {"least-loaded", "round-robin"}
    horizon_s : float
        End of the arrival window (s).
    stop_s : float
        End of the run (s): no event after it happens.

    Returns
    -------
    dict
        Per request (lists of length n): ``first``, ``finish`` (s, nan when not reached),
        ``instance`` (row, -1 when rejected or not arrived), ``status`` (``fastsim.sim``'s request
        codes), ``recomputed`` (times routed again after a failure), ``no_instance`` (rejected
        for want of a routable instance, at arrival or after a failure). Per lifetime (lists of
        length m): ``off_s`` (released: the end of its drain or its failure; nan if it still
        holds a row at ``stop_s`` or never joined) and ``recomputed_by_lifetime``.

    Notes
    -----
    No validation: give it what :func:`fastsim.fleet.simulate_fleet` accepts. A joining
    lifetime takes the lowest free row (rows are never short: the kernel retries with a larger
    pool when they are).
    """
    reqs = [Req(i, float(arrival_s[i]), int(prompt_tokens[i]), int(output_tokens[i])) for i in range(len(arrival_s))]
    for r in reqs:
        r.recomputed = 0
        r.no_instance = False
    n_arriving = sum(1 for r in reqs if r.arrival <= horizon_s)
    kvb = kv_floor(p)
    cap = max_batch or (1 << 62)

    def new_inst():
        return Inst("colocated", p, chunk_tokens, cap, kvb)
    holder = new_inst()         # for the admission test (every instance is the same)
    ready, end, kind = ([float(x) for x in schedule.ready_s], [float(x) for x in schedule.end_s],
                        [int(x) for x in schedule.end_kind])
    m = len(ready)
    events = [(ready[lf], _JOIN, lf) for lf in range(m)]
    events += [(end[lf], _FAIL if kind[lf] == END_FAIL else _DRAIN, lf) for lf in range(m) if end[lf] < INF]
    events = sorted(e for e in events if e[0] <= stop_s)
    rows = []                   # Inst, or None when free
    row_life = []
    draining = []
    off = [math.nan] * m
    recomp_life = [0] * m
    rr = 0                      # requests routed (round-robin counter), re-routed ones included

    def route(r, t):
        nonlocal rr
        pool = [i for i, x in enumerate(rows) if x is not None and not draining[i]]
        if not pool:
            r.status = REJECTED
            r.instance = -1
            r.no_instance = True
            return
        i = choose_instance(rows, pool, routing, rr)
        rr += 1
        r.instance = i
        inst = rows[i]
        inst.assigned.append(r)
        inst.queue.append(r)
        if inst.next_t == INF:
            inst.next_t = t

    def membership(t, ev, lf):
        if ev == _JOIN:
            i = rows.index(None) if None in rows else len(rows)
            if i == len(rows):
                rows.append(None)
                row_life.append(-1)
                draining.append(False)
            rows[i] = new_inst()
            row_life[i] = lf
            draining[i] = False
            return
        i = next(i for i, x in enumerate(rows) if x is not None and row_life[i] == lf)
        inst = rows[i]
        off[lf] = t
        if ev == _DRAIN:
            draining[i] = True
            if inst.next_t == INF:
                rows[i] = None
            return
        # a failure: what it holds is routed again from scratch, in arrival (index) order
        rows[i] = None
        held = sorted((r for r in inst.assigned if r.status == UNFINISHED), key=lambda r: r.idx)
        recomp_life[lf] += len(held)
        for r in held:
            r.prefilled = 0
            r.generated = 0
            r.first = math.nan
            r.recomputed += 1
            route(r, t)

    ia = 0
    ie = 0
    while True:
        cands = []
        if ie < len(events):
            cands.append((events[ie][0], events[ie][1] - 3, ie))      # before arrivals, in their order
        if ia < n_arriving:
            cands.append((reqs[ia].arrival, _ARRIVAL, ia))
        for i, x in enumerate(rows):
            if x is not None and x.next_t < INF:
                cands.append((x.next_t, _BOUNDARY, i))
        if not cands:
            break
        t, ev, j = min(cands)
        if not (t <= stop_s):
            break
        if ev < 0:
            ie += 1
            membership(t, events[j][1], events[j][2])
        elif ev == _ARRIVAL:
            r = reqs[j]
            ia += 1
            if is_rejected(r, max_context_tokens, holder):
                r.status = REJECTED
                continue
            route(r, t)
        else:
            batch_boundary(rows[j], t)
            if draining[j] and rows[j].next_t == INF:
                rows[j] = None          # drained: released at the end of its last step
                off[row_life[j]] = max(off[row_life[j]], t)
    for i, x in enumerate(rows):
        if x is not None:
            off[row_life[i]] = math.nan
    return dict(first=[r.first for r in reqs], finish=[r.finish for r in reqs],
                instance=[r.instance for r in reqs], status=[r.status for r in reqs],
                recomputed=[r.recomputed for r in reqs], no_instance=[r.no_instance for r in reqs],
                off_s=off, recomputed_by_lifetime=recomp_life)


def window_counts_reference(ref, arrival_s, output_tokens, *, window_s, n_windows, ttft_slo_s, tpot_slo_s):
    """Per-window counts (:data:`fastsim.fleet.WINDOW_COLUMNS`) of a reference run's requests.

    Parameters
    ----------
    ref : dict
        What :func:`simulate_fleet_reference` returned.
    arrival_s, output_tokens : sequence
        The requests that arrived (the first ones of the run's; by arrival window).
    window_s : float
        Width of the windows (s); request i counts in window ``int(arrival_s[i] / window_s)``
        (the last one for later arrivals).
    n_windows : int
    ttft_slo_s, tpot_slo_s : float
        A finished request meets the TTFT SLO when ``first - arrival <= ttft_slo_s``, the TPOT
        SLO when ``O == 1`` or ``(finish - first) / (O - 1) <= tpot_slo_s``.

    Returns
    -------
    list of list of int
        ``n_windows`` rows of ``len(WINDOW_COLUMNS)`` counts.
    """
    c = {name: k for k, name in enumerate(WINDOW_COLUMNS)}
    out = [[0] * len(WINDOW_COLUMNS) for _ in range(n_windows)]
    for i, a in enumerate(arrival_s):
        a = float(a)
        row = out[min(int(a / window_s), n_windows - 1)]
        o = int(output_tokens[i])
        st = ref["status"][i]
        row[c["arrived"]] += 1
        row[c["recomputed"]] += ref["recomputed"][i]
        if st == REJECTED:
            row[c["rejected_no_instance"] if ref["no_instance"][i] else c["rejected_context"]] += 1
        elif st == FINISHED:
            f = ref["first"][i]
            ok_t = f - a <= ttft_slo_s
            ok_p = o == 1 or (ref["finish"][i] - f) / float(o - 1) <= tpot_slo_s
            row[c["finished"]] += 1
            row[c["met"]] += int(ok_t and ok_p)
            row[c["met_ttft"]] += int(ok_t)
            row[c["met_tpot"]] += int(ok_p)
            row[c["output_tokens"]] += o
            row[c["met_output_tokens"]] += o if ok_t and ok_p else 0
        else:
            row[c["unfinished"]] += 1
    return out
