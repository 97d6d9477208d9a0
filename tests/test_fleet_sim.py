"""The fleet simulator against the serving simulator, the profile workloads and its own bookkeeping.

The reference-based checks of joining, draining and failing instances are in
``test_fleet_reference.py``; here: an all-up fleet is ``simulate`` bit for bit, the streamed
profile arrivals are ``synthesize_profile``'s, a small ring or pool gives the same answer as a
large one, the per-window metrics add up, and bad input is refused naming the field.
"""
import math

import numpy as np
import pytest

from fastsim import bench as B
from fastsim import workload as W
from fastsim.catalog import default_catalog
from fastsim.errors import FastsimInputError
from fastsim.fleet import (END_DRAIN, END_FAIL, WINDOW_COLUMNS, FleetSchedule, ProfileArrivals, profile_chunks,
                           simulate_fleet, window_percentile)
from fastsim.fleet import sim as FS
from fastsim.sim import ColocatedPlan, DisaggregatedPlan, simulate

CHAT = default_catalog().scenario("chat")
KW = dict(ttft_slo_s=CHAT.ttft_s, tpot_slo_s=CHAT.tpot_s)
PLAN = B.standard_plan()
COL = {c: k for k, c in enumerate(WINDOW_COLUMNS)}


def all_up(n, kind=END_DRAIN):
    return FleetSchedule(np.zeros(n), np.zeros(n), np.full(n, np.inf), np.full(n, kind, np.int8))


@pytest.fixture(scope="module")
def chat():
    return W.synthesize("chat", 24.0, 300.0, seed=5)


@pytest.mark.parametrize("routing", ["least-loaded", "round-robin"])
def test_all_up_fleet_is_simulate_bit_for_bit(chat, routing):
    plan = ColocatedPlan(PLAN.p, 2, PLAN.chunk_tokens, PLAN.max_batch)
    r = simulate(plan, chat.arrival_s, chat.prompt_tokens, chat.output_tokens, horizon_s=300.0, routing=routing, **KW)
    keep = {}
    fr = simulate_fleet(plan, chat, all_up(2), horizon_s=300.0, drain_s=0.0, routing=routing, _keep=keep, **KW)
    rg = keep["ring"]
    n = chat.arrival_s.shape[0]
    assert np.array_equal(rg.first[:n], r.first_token_s, equal_nan=True)
    assert np.array_equal(rg.finish[:n], r.finish_s, equal_nan=True)
    assert np.array_equal(rg.inst[:n], r.instance)
    assert np.array_equal(rg.status[:n], r.status)
    # the per-window counts are the per-request results folded
    c = fr.counts.sum(axis=0)
    assert c[COL["arrived"]] == n == fr.n_requests
    assert c[COL["finished"]] == int(np.sum(r.status == 1))
    assert c[COL["unfinished"]] == int(np.sum(r.status == 0))
    ttft = r.first_token_s - r.arrival_s
    o = r.output_tokens
    tpot = np.where(o > 1, (r.finish_s - r.first_token_s) / np.maximum(o - 1, 1), 0.0)
    met = (r.status == 1) & (ttft <= CHAT.ttft_s) & (tpot <= CHAT.tpot_s)
    assert c[COL["met"]] == int(met.sum())
    assert c[COL["output_tokens"]] == int(o[r.status == 1].sum())
    assert fr.attainment == pytest.approx(met.sum() / n, abs=0)
    win = np.minimum((r.arrival_s // fr.window_s).astype(int), fr.counts.shape[0] - 1)
    assert np.array_equal(fr.counts[:, COL["met"]], np.bincount(win[met], minlength=fr.counts.shape[0]))


def test_two_instances_up_at_zero_of_three_lifetimes_later_joins_route_only_when_ready(chat):
    # instance 1 joins at 100 s: before it, everything goes to instance 0
    sch = FleetSchedule(np.array([0.0, 80.0]), np.array([0.0, 100.0]), np.array([np.inf, np.inf]),
                        np.zeros(2, np.int8))
    keep = {}
    simulate_fleet(PLAN, chat, sch, horizon_s=300.0, _keep=keep, **KW)
    rg = keep["ring"]
    n = chat.arrival_s.shape[0]
    before = chat.arrival_s < 100.0
    assert np.all(rg.inst[:n][before] == 0)
    assert np.any(rg.inst[:n][~before] == 1)


def test_streamed_profile_is_synthesize_profile_bit_for_bit():
    prof = W.read_rate_profile("m-mid")
    for arrival, cv in (("poisson", 1.0), ("gamma", 2.0)):
        pa = ProfileArrivals("chat", prof, seed=11, rate_scale=0.5, horizon_s=9000.0, arrival=arrival, cv=cv)
        ref = W.synthesize_profile("chat", prof, 11, rate_scale=0.5, horizon_s=9000.0, arrival=arrival, cv=cv)
        parts = list(profile_chunks(pa, chunk_blocks=1))
        assert len(parts) > 2
        for k, name in enumerate(("arrival_s", "prompt_tokens", "output_tokens")):
            assert np.array_equal(np.concatenate([p[k] for p in parts]), getattr(ref, name))


def test_streamed_profile_fleet_equals_the_same_arrays_in_memory():
    prof = W.read_rate_profile("m-small")
    pa = ProfileArrivals("chat", prof, seed=2, rate_scale=0.2, horizon_s=1800.0)
    w = W.synthesize_profile("chat", prof, 2, rate_scale=0.2, horizon_s=1800.0)
    sch = all_up(2)
    a = simulate_fleet(PLAN, pa, sch, window_s=300.0, **KW)
    b = simulate_fleet(PLAN, w, sch, window_s=300.0, **KW)
    assert np.array_equal(a.counts, b.counts)
    assert np.array_equal(a.ttft_hist, b.ttft_hist)
    assert a.horizon_s == b.horizon_s == 1800.0


def test_a_small_ring_and_a_small_pool_give_the_same_answer(chat, monkeypatch):
    # a drain and a failure, and a third lifetime joining while the first still drains
    sch = FleetSchedule(np.array([0.0, 0.0, 90.0]), np.array([0.0, 0.0, 120.0]),
                        np.array([120.0, 200.0, np.inf]), np.array([END_DRAIN, END_FAIL, END_DRAIN], np.int8))
    big = simulate_fleet(PLAN, chat, sch, horizon_s=300.0, window_s=30.0, **KW)
    monkeypatch.setattr(FS, "_HALF0", 1024)
    monkeypatch.setattr(FS, "_max_concurrent", lambda ready, end: 0)     # start from a pool of 4 rows ...
    small = simulate_fleet(PLAN, chat, sch, horizon_s=300.0, window_s=30.0, **KW)
    assert chat.arrival_s.shape[0] > 2 * 1024      # the ring wrapped
    assert np.array_equal(big.counts, small.counts)
    assert np.array_equal(big.tpot_hist, small.tpot_hist)
    assert np.array_equal(big.off_s, small.off_s, equal_nan=True)
    assert np.array_equal(big.recomputed_by_lifetime, small.recomputed_by_lifetime)
    assert big.recomputed_by_lifetime[1] > 0 and big.recomputed_by_lifetime[0] == 0
    assert big.counts[:, COL["recomputed"]].sum() == big.recomputed_by_lifetime.sum()
    # lifetime 0 drained from 120 s and was released once empty; 1 failed at 200 s; 2 still up
    assert big.off_s[0] >= 120.0 and big.off_s[1] == 200.0 and math.isnan(big.off_s[2])


def test_pool_grows_when_lifetimes_overlap_through_drains(chat, monkeypatch):
    # ten short lifetimes, each draining while the next joins: more rows in use than at any
    # time between ready and end
    starts = np.arange(10) * 25.0
    sch = FleetSchedule(starts, starts, starts + 25.0, np.zeros(10, np.int8))
    monkeypatch.setattr(FS, "_max_concurrent", lambda ready, end: -3)     # a pool of one row to start
    pools = []
    run = FS._run

    def counting(plan, chunks, ev, m, pool, *a, **k):
        pools.append(pool)
        return run(plan, chunks, ev, m, pool, *a, **k)

    monkeypatch.setattr(FS, "_run", counting)
    r = simulate_fleet(PLAN, chat, sch, horizon_s=250.0, **KW)
    assert pools[0] == 1 and len(pools) > 1          # it ran out of rows and grew
    assert np.all(r.off_s >= sch.end_s)
    assert np.all(np.diff(r.off_s) > 0)
    assert r.counts[:, COL["rejected_no_instance"]].sum() == 0    # always an instance ready


def test_no_instance_means_not_served_and_counted(chat):
    sch = FleetSchedule(np.array([0.0]), np.array([150.0]), np.array([np.inf]), np.zeros(1, np.int8))
    r = simulate_fleet(PLAN, chat, sch, horizon_s=300.0, window_s=150.0, **KW)
    early = int(np.sum(chat.arrival_s < 150.0))
    assert r.counts[0, COL["rejected_no_instance"]] == early == r.counts[0, COL["arrived"]]
    assert r.counts[0, COL["met"]] == 0
    assert r.counts[1, COL["rejected_no_instance"]] == 0


def test_window_percentile_reads_the_bin_edge_above():
    edges = FS.HIST_LO_S * 10.0 ** (np.arange(FS.HIST_BINS + 1) / FS.HIST_BINS_PER_DECADE)
    x = np.array([0.010, 0.020, 0.030, 0.5, 0.9, 0.95, 1.2, 2.0, 3.0, 4.0])
    b = np.floor((np.log10(x) - math.log10(FS.HIST_LO_S)) * FS.HIST_BINS_PER_DECADE).astype(int)
    h = np.bincount(b, minlength=FS.HIST_BINS)[None, :]
    p90 = window_percentile(h, edges, 90.0)[0]
    assert 3.0 <= p90 <= 3.0 * 10 ** (1 / FS.HIST_BINS_PER_DECADE)
    assert math.isnan(window_percentile(np.zeros((1, FS.HIST_BINS), np.int64), edges, 90.0)[0])
    with pytest.raises(FastsimInputError, match="q"):
        window_percentile(h, edges, 0.0)


@pytest.mark.parametrize("kw, field", [
    (dict(schedule=FleetSchedule([0.0], [-1.0], [np.inf], [0])), "ready_s"),
    (dict(schedule=FleetSchedule([0.0], [5.0], [5.0], [0])), "end_s"),
    (dict(schedule=FleetSchedule([0.0], [0.0], [9.0], [7])), "end_kind"),
    (dict(schedule=FleetSchedule([0.0, 1.0], [0.0], [9.0], [0])), "ready_s"),
    (dict(schedule=(0.0, 0.0, 1.0, 0)), "schedule"),
    (dict(window_s=0.0), "window_s"),
    (dict(drain_s=-1.0), "drain_s"),
    (dict(routing="random"), "routing"),
    (dict(ttft_slo_s=0.0), "ttft_slo_s"),
])
def test_bad_input_names_the_field(chat, kw, field):
    args = dict(schedule=all_up(1), **KW)
    args.update(kw)
    with pytest.raises(FastsimInputError, match=field):
        simulate_fleet(PLAN, chat, **args)


def test_a_disaggregated_plan_is_refused(chat):
    p = PLAN.p
    with pytest.raises(FastsimInputError, match="ColocatedPlan"):
        simulate_fleet(DisaggregatedPlan(p, 1, p, 1), chat, all_up(1), **KW)
