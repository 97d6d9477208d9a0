"""The fleet simulator's kernel against its plain-Python reference, on instances joining, draining
and failing (hypothesis), and the semantics of each on hand-made cases.

The reference is :mod:`fastsim.fleet.reference` (it drives the serving reference's step boundary,
:mod:`fastsim.sim.reference`); the per-request results must agree bit for bit: first-token and
finish times, rows, statuses and recompute counts, and per lifetime the release times and the
requests a failure handed back; the per-window counts must be the reference's folded.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fastsim.catalog import default_catalog
from fastsim.fleet import END_DRAIN, END_FAIL, WINDOW_COLUMNS, FleetSchedule, simulate_fleet
from fastsim.fleet import sim as FS
from fastsim.fleet.reference import simulate_fleet_reference, window_counts_reference
from fastsim.sim import ColocatedPlan, RequestStatus
from fastsim.stepmodel import P_KV_BUDGET_TOKENS, P_SLIDE_FRAC, P_WINDOW, step_params

CAT = default_catalog()
P8 = step_params(CAT.model("llama-3.1-8b"), CAT.gpu("H100"), CAT.precision("BF16"), 1)
COL = {c: k for k, c in enumerate(WINDOW_COLUMNS)}
FINISHED, REJECTED, UNFINISHED = (int(RequestStatus.FINISHED), int(RequestStatus.REJECTED),
                                  int(RequestStatus.UNFINISHED))
INF = math.inf


def params(kv_tokens, window_tokens=0):
    """P8 with a KV budget (tokens) and optionally a sliding window over half its layers."""
    q = P8.copy()
    q[P_KV_BUDGET_TOKENS] = kv_tokens
    q[P_WINDOW] = window_tokens
    q[P_SLIDE_FRAC] = 0.5 if window_tokens else 0.0
    return q


def schedule(ready_s, end_s, end_kind, cold_s=0.0):
    ready = np.asarray(ready_s, dtype=np.float64)
    return FleetSchedule(np.maximum(ready - cold_s, 0.0), ready, np.asarray(end_s, dtype=np.float64),
                         np.asarray(end_kind, dtype=np.int8))


def run_both(arrival_s, prompt, output, sch, p, *, chunk=64, max_batch=0, routing="least-loaded",
             horizon_s=None, drain_s=1.0, window_s=0.1, max_context=131072, ttft_slo_s=0.05, tpot_slo_s=0.02):
    """The kernel and the reference on one case: ``(FleetRun, ring, reference dict, requests arrived)``."""
    a = np.asarray(arrival_s, dtype=np.float64)
    pr = np.asarray(prompt, dtype=np.int64)
    o = np.asarray(output, dtype=np.int64)
    horizon = float(a[-1]) if horizon_s is None else horizon_s
    keep = {}
    fr = simulate_fleet(ColocatedPlan(p, 1, chunk, max_batch), (a, pr, o), sch, ttft_slo_s=ttft_slo_s,
                        tpot_slo_s=tpot_slo_s, horizon_s=horizon, window_s=window_s, drain_s=drain_s,
                        max_context_tokens=max_context, routing=routing, _keep=keep)
    ref = simulate_fleet_reference(a, pr, o, sch, p=p, chunk_tokens=chunk, max_batch=max_batch,
                                   max_context_tokens=max_context, routing=routing, horizon_s=horizon,
                                   stop_s=horizon + drain_s)
    return fr, keep["ring"], ref, int(np.sum(a <= horizon))


def check_agree(fr, ring, ref, a, o, k, *, ttft_slo_s, tpot_slo_s, per_request=True, slots=None):
    """Kernel == reference, bit for bit, on the first ``k`` requests (those that arrived): per
    request (``per_request``: the ring holds request i in slot i, or in ``slots[i]``) and per
    lifetime and window."""
    if per_request:
        s = np.arange(k) if slots is None else slots
        np.testing.assert_array_equal(ring.first[s], np.array(ref["first"][:k], dtype=np.float64))
        np.testing.assert_array_equal(ring.finish[s], np.array(ref["finish"][:k], dtype=np.float64))
        np.testing.assert_array_equal(ring.inst[s], np.array(ref["instance"][:k]))
        np.testing.assert_array_equal(ring.status[s], np.array(ref["status"][:k]))
        np.testing.assert_array_equal(ring.recomp[s], np.array(ref["recomputed"][:k]))
    np.testing.assert_array_equal(fr.off_s, np.array(ref["off_s"], dtype=np.float64))
    np.testing.assert_array_equal(fr.recomputed_by_lifetime, np.array(ref["recomputed_by_lifetime"]))
    w = fr.counts.shape[0]
    counts = np.array(window_counts_reference(ref, a[:k], o[:k], window_s=fr.window_s, n_windows=w,
                                              ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s), dtype=np.int64)
    np.testing.assert_array_equal(fr.counts, counts)
    # every finished request is in one TTFT bin, those with O > 1 in one TPOT bin
    win = np.minimum((a[:k] / fr.window_s).astype(np.int64), w - 1)
    fin = np.array(ref["status"][:k]) == FINISHED
    np.testing.assert_array_equal(fr.ttft_hist.sum(axis=1), np.bincount(win[fin], minlength=w))
    np.testing.assert_array_equal(fr.tpot_hist.sum(axis=1), np.bincount(win[fin & (o[:k] > 1)], minlength=w))
    assert fr.n_requests == k
    met = counts[:, COL["met"]].sum()
    assert (math.isnan(fr.attainment) and k == 0) or fr.attainment == met / k


# ---------------------------------------------------------------- kernel == reference (hypothesis)

@st.composite
def fleet_case(draw):
    """A small workload, a few lifetimes with random ready / end times and kinds, an instance type
    with a small KV budget (queues form) and the run's settings."""
    n = draw(st.integers(1, 30))
    gap = st.one_of(st.just(0.0), st.sampled_from([0.001, 0.004, 0.02]), st.floats(0.0, 0.08))
    a = np.cumsum(np.array(draw(st.lists(gap, min_size=n, max_size=n)), dtype=np.float64))
    prompt = np.array(draw(st.lists(st.integers(1, 300), min_size=n, max_size=n)), dtype=np.int64)
    output = np.array(draw(st.lists(st.one_of(st.just(1), st.integers(1, 25)), min_size=n, max_size=n)),
                      dtype=np.int64)
    span = float(a[-1]) + 0.05
    # times on an arrival (ties with it), at 0, or anywhere in the run
    when = st.one_of(st.just(0.0), st.sampled_from(sorted(set(a.tolist()))), st.floats(0.0, span))
    m = draw(st.integers(1, 5))
    ready, end, kind = [], [], []
    for _ in range(m):
        r = draw(when)
        e = draw(st.one_of(st.just(INF), when, st.floats(0.0, 2.0 * span)))
        if not e > r:
            e = r + draw(st.sampled_from([0.001, 0.01, 0.1]))
        ready.append(r)
        end.append(e)
        kind.append(draw(st.sampled_from([END_DRAIN, END_FAIL])))
    return dict(
        a=a, prompt=prompt, output=output, ready=ready, end=end, kind=kind,
        cold_s=draw(st.sampled_from([0.0, 0.5])),
        kv=draw(st.floats(200.0, 3000.0)), window=draw(st.sampled_from([0, 0, 64])),
        chunk=draw(st.sampled_from([1, 7, 64, 256, 4096])), max_batch=draw(st.sampled_from([0, 1, 3])),
        routing=draw(st.sampled_from(["least-loaded", "round-robin"])),
        horizon_s=draw(st.one_of(st.just(None), st.sampled_from([0.01, 0.05]))),
        drain_s=draw(st.sampled_from([0.0, 0.01, 0.3, 3.0])),
        window_s=draw(st.sampled_from([0.02, 0.1, 10.0])),
        max_context=draw(st.sampled_from([131072, 250])),
        ties=draw(st.booleans()),
    )


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(case=fleet_case(), data=st.data())
def test_kernel_matches_reference_on_joins_drains_and_failures(case, data):
    c = case
    a, prompt, output = c["a"], c["prompt"], c["output"]
    horizon = float(a[-1]) + 0.01 if c["horizon_s"] is None else c["horizon_s"]
    p = params(c["kv"], c["window"])
    kw = dict(chunk=c["chunk"], max_batch=c["max_batch"], routing=c["routing"], horizon_s=horizon,
              drain_s=c["drain_s"], window_s=c["window_s"], max_context=c["max_context"])
    ready, end, kind = list(c["ready"]), list(c["end"]), c["kind"]
    if c["ties"]:
        # move some membership changes onto step boundaries (first-token and finish times) of
        # the run without them: at equal times a change comes before the boundary
        _, _, ref0, _ = run_both(a, prompt, output, schedule(ready, end, kind), p, **kw)
        bt = sorted({x for x in ref0["first"] + ref0["finish"] if not math.isnan(x)})
        if bt:
            for lf in range(len(ready)):
                if data.draw(st.booleans(), label=f"end {lf} on a boundary"):
                    end[lf] = data.draw(st.sampled_from(bt))
                if data.draw(st.booleans(), label=f"ready {lf} on a boundary"):
                    ready[lf] = data.draw(st.sampled_from(bt))
                if not end[lf] > ready[lf]:
                    end[lf] = ready[lf] + 0.003
    sch = schedule(ready, end, kind, c["cold_s"])
    fr, ring, ref, k = run_both(a, prompt, output, sch, p, **kw)
    check_agree(fr, ring, ref, a, output, k, ttft_slo_s=0.05, tpot_slo_s=0.02)
    cols = fr.counts.sum(axis=0)
    event(f"recomputed: {cols[COL['recomputed']] > 0}")
    event(f"rejected_no_instance: {cols[COL['rejected_no_instance']] > 0}")
    event(f"unfinished: {cols[COL['unfinished']] > 0}")
    event(f"drain still busy at its end_s: {bool(np.any(fr.off_s > np.asarray(end)))}")


# ---------------------------------------------------------------- the semantics on hand-made cases

def _burst(n, gap_s, t0=0.0, prompt=200, output=20):
    a = t0 + np.arange(n) * gap_s
    return a, np.full(n, prompt, np.int64), np.full(n, output, np.int64)


@pytest.mark.parametrize("routing", ["least-loaded", "round-robin"])
def test_a_drained_instance_gets_nothing_new_finishes_what_it_holds_and_is_released_after(routing):
    a, pr, o = _burst(30, 0.002)
    t_drain = 0.021
    sch = schedule([0.0, 0.0], [t_drain, INF], [END_DRAIN, END_DRAIN])
    fr, ring, ref, k = run_both(a, pr, o, sch, params(1500.0), routing=routing, drain_s=5.0)
    check_agree(fr, ring, ref, a, o, k, ttft_slo_s=0.05, tpot_slo_s=0.02)
    inst, fin = ring.inst[:k], ring.finish[:k]
    assert np.all(inst[a >= t_drain] == 1)                   # nothing routed to it after its drain
    on0 = inst == 0
    assert on0.sum() >= 2 and np.all(ring.status[:k][on0] == FINISHED)      # it finishes its requests
    assert fin[on0].max() > t_drain                          # ... busy past its drain
    assert fr.off_s[0] == fin[on0].max()                     # released at the end of its last step
    assert math.isnan(fr.off_s[1])                           # still up at the end
    assert fr.counts[:, COL["recomputed"]].sum() == 0 and fr.recomputed_by_lifetime[0] == 0
    assert fr.counts[:, COL["finished"]].sum() == k


def test_a_drained_idle_instance_is_released_at_its_end():
    a, pr, o = _burst(3, 0.001, prompt=50, output=2)
    sch = schedule([0.0, 0.0], [0.5, INF], [END_DRAIN, END_DRAIN])
    fr, ring, ref, k = run_both(a, pr, o, sch, params(1500.0), drain_s=1.0)
    check_agree(fr, ring, ref, a, o, k, ttft_slo_s=0.05, tpot_slo_s=0.02)
    assert np.nanmax(ring.finish[:k]) < 0.5 and fr.off_s[0] == 0.5


@pytest.mark.parametrize("routing", ["least-loaded", "round-robin"])
def test_a_failure_recomputes_what_the_instance_held_on_the_others(routing):
    a, pr, o = _burst(30, 0.002)
    t_fail = 0.0213
    p = params(1500.0)
    up = schedule([0.0, 0.0], [INF, INF], [END_DRAIN, END_DRAIN])
    fr0, ring0, _, k = run_both(a, pr, o, up, p, routing=routing, drain_s=5.0)
    # what instance 0 held at the failure in the run without it (the runs agree until then)
    held = (ring0.inst[:k] == 0) & (a < t_fail) & ~(ring0.finish[:k] <= t_fail)
    assert held.sum() >= 2
    sch = schedule([0.0, 0.0], [t_fail, INF], [END_FAIL, END_DRAIN])
    fr, ring, ref, k = run_both(a, pr, o, sch, p, routing=routing, drain_s=5.0)
    check_agree(fr, ring, ref, a, o, k, ttft_slo_s=0.05, tpot_slo_s=0.02)
    np.testing.assert_array_equal(ring.recomp[:k], held.astype(np.int64))
    assert fr.counts[:, COL["recomputed"]].sum() == held.sum() == fr.recomputed_by_lifetime[0]
    assert fr.off_s[0] == t_fail and math.isnan(fr.off_s[1])
    assert np.all(ring.inst[:k][held] == 1) and np.all(ring.inst[:k][a >= t_fail] == 1)
    # served from scratch after the failure (the tokens streamed before it are discarded)
    assert np.all(ring.first[:k][held] > t_fail)
    assert np.all(ring.status[:k] == FINISHED)
    done_before = (ring0.inst[:k] == 0) & (ring0.finish[:k] <= t_fail)
    np.testing.assert_array_equal(ring.finish[:k][done_before], ring0.finish[:k][done_before])


def test_a_failure_with_no_other_instance_rejects_what_it_held():
    a, pr, o = _burst(12, 0.002)
    t_fail = 0.0111
    sch = schedule([0.0], [t_fail], [END_FAIL])
    fr, ring, ref, k = run_both(a, pr, o, sch, params(1500.0), drain_s=1.0)
    check_agree(fr, ring, ref, a, o, k, ttft_slo_s=0.05, tpot_slo_s=0.02)
    st_ = ring.status[:k]
    held = ring.recomp[:k] == 1
    assert held.sum() >= 2 and np.all(st_[held] == REJECTED) and np.all(ring.inst[:k][held] == -1)
    assert np.all(np.isnan(ring.first[:k][held]))
    assert np.all(st_[a >= t_fail] == REJECTED)
    c = fr.counts.sum(axis=0)
    assert c[COL["recomputed"]] == held.sum() == fr.recomputed_by_lifetime[0]
    assert c[COL["rejected_no_instance"]] == held.sum() + np.sum(a >= t_fail)
    assert c[COL["rejected_context"]] == 0
    assert c[COL["finished"]] == np.sum(st_ == FINISHED) == k - c[COL["rejected_no_instance"]]
    assert fr.off_s[0] == t_fail


@pytest.mark.parametrize("routing", ["least-loaded", "round-robin"])
def test_requests_before_any_instance_is_ready_are_not_served(routing):
    a, pr, o = _burst(10, 0.01)
    t_join = float(a[4])                 # the join comes before an arrival at the same time
    sch = schedule([t_join], [INF], [END_DRAIN], cold_s=0.3)
    fr, ring, ref, k = run_both(a, pr, o, sch, params(1500.0), routing=routing, drain_s=5.0)
    check_agree(fr, ring, ref, a, o, k, ttft_slo_s=0.05, tpot_slo_s=0.02)
    before = a < t_join
    assert np.all(ring.status[:k][before] == REJECTED) and np.all(ring.inst[:k][before] == -1)
    assert np.all(ring.status[:k][~before] == FINISHED) and np.all(ring.inst[:k][~before] == 0)
    c = fr.counts.sum(axis=0)
    assert c[COL["rejected_no_instance"]] == before.sum() == 4
    assert c[COL["rejected_context"]] == 0 and c[COL["recomputed"]] == 0


def test_at_one_time_joins_then_drains_then_failures_then_arrivals():
    # lifetimes 0 and 2 up at 0 (rows 0 and 1); at t lifetime 0 fails while lifetime 1 joins and
    # lifetime 2 drains, and a request arrives: the join comes first and takes row 2 (row 0 is
    # still lifetime 0's), the drain before the failure, so what lifetime 0 held goes to row 2
    # alone, as does the arrival at t; lifetime 3, joining later, takes the freed row 0
    a, pr, o = _burst(8, 0.002)
    t = float(a[-1])
    a = np.append(a, t + 0.002)
    pr, o = np.append(pr, 200), np.append(o, 20)
    sch = schedule([0.0, t, 0.0, t + 0.001], [t, INF, t, INF], [END_FAIL, END_DRAIN, END_DRAIN, END_DRAIN])
    fr, ring, ref, k = run_both(a, pr, o, sch, params(1500.0), drain_s=5.0)
    check_agree(fr, ring, ref, a, o, k, ttft_slo_s=0.05, tpot_slo_s=0.02)
    inst = ring.inst[:k]
    held = ring.recomp[:k] == 1
    assert held.sum() >= 2 and np.all(inst[held] == 2)
    assert np.all(inst[:7][~held[:7]] != 0) and np.any(inst[:7] == 1)
    assert inst[7] == 2 and inst[8] == 0
    assert fr.off_s[0] == t and fr.off_s[2] > t            # lifetime 2 finishes its own
    assert math.isnan(fr.off_s[1]) and math.isnan(fr.off_s[3])


def test_lingering_drains_grow_the_pool_and_rows_are_reused():
    # each lifetime drains while busy, so more rows are held than lifetimes overlap (the kernel
    # retries with a larger pool); a failure with nothing routable rejects, and frees its row
    m = 10
    ready = np.arange(m) * 0.002
    kind = np.full(m, END_DRAIN)
    kind[7] = END_FAIL
    a = ready + 0.0005
    pr, o = np.full(m, 200, np.int64), np.full(m, 25, np.int64)
    sch = schedule(ready, ready + 0.0015, kind)
    fr, ring, ref, k = run_both(a, pr, o, sch, params(3000.0), drain_s=1.0)
    check_agree(fr, ring, ref, a, o, k, ttft_slo_s=0.05, tpot_slo_s=0.02)
    np.testing.assert_array_equal(ring.inst[:k], [0, 1, 2, 3, 4, 5, 6, -1, 7, 8])
    assert np.all(fr.off_s[kind == END_DRAIN] > (ready + 0.0015)[kind == END_DRAIN])


@pytest.mark.parametrize("routing", ["least-loaded", "round-robin"])
def test_a_ring_half_closed_early_at_a_tie_keeps_every_request_once(monkeypatch, routing):
    # a small ring (2 halves of 1024 slots) and two arrivals at one time across the end of the
    # second half: the half is closed one slot early (both in the next call); its unused slot is
    # not folded (no request counted twice or out of nowhere), and a failure after it re-routes
    # the requests it held (global index g in slot g & mask) as the reference does
    monkeypatch.setattr(FS, "_HALF0", 1024)
    n = 2600
    a = np.arange(n) * 0.004
    a[2048] = a[2047]
    rng = np.random.default_rng(3)
    pr, o = rng.integers(1, 300, n), rng.integers(1, 25, n)
    sch = schedule([0.0, 0.0, 9.0], [INF, 9.5, INF], [END_DRAIN, END_FAIL, END_DRAIN])
    fr, ring, ref, k = run_both(a, pr, o, sch, params(3000.0), routing=routing, window_s=1.0)
    assert k == n and fr.counts[:, COL["arrived"]].sum() == n
    assert fr.recomputed_by_lifetime[1] > 0
    check_agree(fr, ring, ref, a, o, k, ttft_slo_s=0.05, tpot_slo_s=0.02, per_request=False)


def test_arrivals_at_one_time_that_overflow_a_half_after_a_membership_change_are_served(monkeypatch):
    # a join between the 1023rd and the 1024th arrival leaves one free slot in the ring's first
    # half, and the next two arrivals are at one time: they go together to the second half
    monkeypatch.setattr(FS, "_HALF0", 1024)
    n = 1100
    a = np.arange(n) * 0.004
    a[1024] = a[1023]
    t_join = float(a[1022]) + 0.001
    rng = np.random.default_rng(4)
    pr, o = rng.integers(1, 300, n), rng.integers(1, 25, n)
    sch = schedule([0.0, t_join], [INF, INF], [END_DRAIN, END_DRAIN])
    fr, ring, ref, k = run_both(a, pr, o, sch, params(3000.0), window_s=1.0)
    assert fr.counts[:, COL["arrived"]].sum() == n
    check_agree(fr, ring, ref, a, o, k, ttft_slo_s=0.05, tpot_slo_s=0.02, per_request=False)


def test_arrivals_at_one_time_across_two_chunks_at_a_half_end_come_before_the_boundaries(monkeypatch):
    # the workload in two chunks, the first ending with the ring's first half, and the last
    # arrival of one and the first of the other at one time, a step boundary of the instance
    # (the first token of the request before): both arrive before that boundary, which admits
    # both and prefills them in one step; the kernel keeps them together in the next half
    monkeypatch.setattr(FS, "_HALF0", 1024)
    n = 1100
    a = np.arange(n) * 0.05
    rng = np.random.default_rng(5)
    pr, o = rng.integers(1, 300, n), rng.integers(2, 25, n)
    p = params(3000.0)
    sch = schedule([0.0], [INF], [END_DRAIN])
    ref0 = simulate_fleet_reference(a[:1023], pr[:1023], o[:1023], sch, p=p, chunk_tokens=4096, max_batch=0,
                                    max_context_tokens=131072, routing="least-loaded", horizon_s=float(a[1022]),
                                    stop_s=float(a[1022]) + 1.0)
    t_b = ref0["first"][1022]
    assert t_b > a[1022]
    a[1023] = a[1024] = t_b
    a[1025:] = t_b + 0.05 * np.arange(1, n - 1024)
    source = FS._workload_source

    def two_chunks(workload):
        chunks, horizon, max_out, n_req = source(workload)

        def split():
            for c in chunks():
                yield tuple(x[:1024] for x in c)
                yield tuple(x[1024:] for x in c)
        return split, horizon, max_out, n_req

    monkeypatch.setattr(FS, "_workload_source", two_chunks)
    fr, ring, ref, k = run_both(a, pr, o, sch, p, chunk=4096, window_s=1.0)
    assert ref["first"][1023] == ref["first"][1024]
    slots = np.where(np.arange(n) < 1023, np.arange(n), np.arange(n) + 1)     # the first half closed at 1023
    check_agree(fr, ring, ref, a, o, k, ttft_slo_s=0.05, tpot_slo_s=0.02, slots=slots)
