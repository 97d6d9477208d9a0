"""Verified planning and maximum sustainable rate (SPEC §7; lecture §2.3 lessons one to three)."""
import math

import numpy as np
import pytest

from fastsim.analytic import Demand, plan_for, screen
from fastsim.catalog import default_catalog
from fastsim.search import SLO, lone_request_check, max_sustainable_rate, repair, verify
from fastsim.workload import seeds_for, synthesize


@pytest.fixture(scope="module")
def cat():
    return default_catalog()


def _wls(scen, rate, horizon_s, n, seed=0):
    out = []
    for s in seeds_for(seed, n):
        w = synthesize(scen, rate, horizon_s, s)
        out.append((w.arrival_s, w.prompt_tokens, w.output_tokens))
    return out


@pytest.fixture(scope="module")
def chat_capacity(cat):
    s = cat.scenario("chat")
    plan = plan_for(s.model, Demand.from_scenario(s), gpu="B200", precision="FP8", tp=1, instances=2)
    return plan, max_sustainable_rate(plan, s, SLO(s.ttft_s, s.tpot_s), seeds=8, horizon_s=600.0)


def test_bisection_answer_inside_its_bracket(chat_capacity):
    plan, res = chat_capacity
    lo, hi = res.bracket
    assert lo <= res.rate_req_per_s <= hi          # the estimate is interpolated inside the bracket
    assert res.estimate_in_ci and res.ci95[0] <= res.rate_req_per_s <= res.ci95[1]
    assert lo < hi <= lo * 1.01 + 1e-12
    by_rate = {r: ok for r, _, _, ok in res.probes}
    assert by_rate[lo] is True and by_rate[hi] is False
    # every passing probe lies below every failing probe of the final bracket
    assert all(r <= lo for r, _, _, ok in res.probes if ok and r < hi)
    # the interval (interpolated between probes) overlaps the final bracket
    assert res.ci95[0] <= hi and res.ci95[1] >= lo and res.ci95[0] < res.ci95[1]
    # the analytic screen and the simulation agree within the lecture's spread (0.69 - 1.11)
    assert 0.6 < res.analytic_ratio < 1.4


def test_same_seed_same_rate_exactly(cat, chat_capacity):
    plan, res = chat_capacity
    s = cat.scenario("chat")
    again = max_sustainable_rate(plan, s, SLO(s.ttft_s, s.tpot_s), seeds=8, horizon_s=600.0)
    assert again.rate_req_per_s == res.rate_req_per_s
    assert again.probes == res.probes


def test_capacity_does_not_drop_when_an_instance_is_added(cat, chat_capacity):
    s = cat.scenario("chat")
    plan2, res2 = chat_capacity
    plan1 = plan2.with_instances(instances=1)
    plan3 = plan2.with_instances(instances=3)
    kw = dict(seeds=8, horizon_s=600.0, rel_tol=0.02)
    c1 = max_sustainable_rate(plan1, s, SLO(s.ttft_s, s.tpot_s), **kw).rate_req_per_s
    c3 = max_sustainable_rate(plan3, s, SLO(s.ttft_s, s.tpot_s), **kw).rate_req_per_s
    assert c1 <= res2.rate_req_per_s * 1.02 <= c3 * 1.04
    assert c1 < res2.rate_req_per_s < c3


def test_lesson_three_short_runs_call_an_overload_stable(cat):
    """Offline batch at 110% of its simulated capacity: 15 s look fine, 600 s expose the overload."""
    s = cat.scenario("offline-batch")
    plan = plan_for(s.model, Demand.from_scenario(s), gpu="B200", precision="FP8", tp=1, instances=2)
    slo = SLO(s.ttft_s, s.tpot_s)
    cap = max_sustainable_rate(plan, s, slo, seeds=8, horizon_s=600.0, rel_tol=0.02).rate_req_per_s
    rate = 1.10 * cap
    # 15 s of arrivals, drained to completion: judged on attainment alone, it passes
    short = verify(plan, _wls(s, rate, 15.0, 8), slo, horizon_s=15.0, drain_s=300.0)
    assert short.attainment >= 0.90
    long = verify(plan, _wls(s, rate, 600.0, 8), slo, horizon_s=600.0)
    assert long.overloaded and not long.passed


def test_coding_agent_mean_lengths_pick_plans_that_fail(cat):
    """Lesson one: screening a P90 SLO with mean lengths selects plans that fail in simulation.

    Under the revised screen (SPEC §5: a chunk attends to its prompt's earlier chunks) even the
    mean-length screen no longer admits the lecture's single-GPU H200 plan; its three cheapest
    plans all fail as sized, and the P90 screen rejects configurations the mean screen admits.
    """
    s = cat.scenario("coding-agent")
    slo = SLO(s.ttft_s, s.tpot_s)
    mean_grid = screen(s.model, Demand.from_scenario(s, latency_quantile=None))
    wls = _wls(s, s.rate_req_per_s, 600.0, 4)
    top = mean_grid[mean_grid.feasible].head(3)
    results = [verify(p, wls, slo, horizon_s=600.0) for p in top.plan]
    assert all(not v.passed for v in results)
    assert max(v.attainment for v in results) < 0.75
    p90_grid = screen(s.model, Demand.from_scenario(s))
    rejected = 0
    for _, row in mean_grid[mean_grid.feasible & (mean_grid["mode"] == "colocated")].iterrows():
        same = p90_grid[(p90_grid.gpu == row.gpu) & (p90_grid.precision == row.precision) & (p90_grid.tp == row.tp)
                        & (p90_grid["mode"] == "colocated")]
        if not same.feasible.any():
            rejected += 1
            assert "TTFT" in same.reason.iloc[0]
    assert rejected >= 3


def test_coding_agent_cheapest_needs_a_repair_2_to_3(cat):
    """Lesson two (lecture: 2 -> 3 B200, $1.389 -> $2.083, 97% attainment)."""
    s = cat.scenario("coding-agent")
    d = Demand.from_scenario(s)
    grid = screen(s.model, d)
    best = grid[grid.feasible].iloc[0].plan
    assert (best.gpu, best.tp, best.instances) == ("B200", 1, 2)
    r = repair(best, _wls(s, s.rate_req_per_s, 600.0, 8), SLO(s.ttft_s, s.tpot_s), horizon_s=600.0,
               latency_prompt_tokens=d.latency_prompt_tokens, latency_output_tokens=d.latency_output_tokens)
    assert r.passed and r.repaired_from_instances == 2 and r.plan.instances == 3
    assert r.verification.attainment == pytest.approx(0.97, abs=0.02)


def test_unrepairable_plan_says_why(cat):
    s = cat.scenario("coding-agent")
    d = Demand.from_scenario(s)
    plan = plan_for(s.model, d, gpu="H200", precision="FP8", tp=1, instances=2, chunk_tokens=256)
    r = repair(plan, _wls(s, s.rate_req_per_s, 120.0, 2), SLO(s.ttft_s, s.tpot_s), horizon_s=120.0,
               latency_prompt_tokens=d.latency_prompt_tokens, latency_output_tokens=d.latency_output_tokens)
    assert not r.passed
    assert "no instance count can pass" in r.reason and "TTFT" in r.reason
    assert len(r.history) == 1  # nothing was added in vain


def test_disaggregated_tpot_failure_is_repaired_on_the_decode_side(cat):
    s = cat.scenario("chat")
    d = Demand.from_scenario(s, rate_req_per_s=40.0)
    plan = plan_for(s.model, d, gpu="H200", precision="FP8", mode="disaggregated", prefill_tp=1, decode_tp=1,
                    decode_instances=1)
    assert plan.decode_instances == 1 and plan.prefill_instances >= 5
    slo = SLO(s.ttft_s, s.tpot_s)
    wls = _wls(s, 40.0, 300.0, 2)
    v = verify(plan, wls, slo, horizon_s=300.0)
    assert not v.passed and v.tpot_p90_s > slo.tpot_s
    r = repair(plan, wls, slo, horizon_s=300.0, latency_prompt_tokens=d.latency_prompt_tokens,
               latency_output_tokens=d.latency_output_tokens)
    assert r.passed
    assert r.plan.prefill_instances == plan.prefill_instances
    assert r.plan.decode_instances > plan.decode_instances


def test_lone_request_check_rejects_a_zero_chunk():
    """A colocated plan without a chunk is an input error, not an endless prefill loop."""
    from dataclasses import replace

    from fastsim.errors import FastsimInputError
    s = default_catalog().scenario("chat")
    plan = replace(plan_for(s.model, Demand.from_scenario(s), gpu="B200", precision="FP8", tp=1), chunk_tokens=0)
    with pytest.raises(FastsimInputError, match="chunk_tokens"):
        lone_request_check(plan, 1000.0, 250.0, SLO(s.ttft_s, s.tpot_s))


# ---- one estimator for the estimate, the bracket and the interval ------------------------------------

class _Run:
    """What a capacity search reads of one simulated run (the fields of SimMetrics it uses)."""

    def __init__(self, attainment, measured, slope, rate, overloaded=False):
        self.attainment, self.measured, self.overloaded = attainment, measured, overloaded
        self.queue_slope_req_per_s, self.arrival_rate_req_per_s = slope, rate


def _drive(bis, run):
    """Run a _Bisection to its end, each probe's seeds from ``run(rate, seed)``."""
    while True:
        nxt = bis.next_probe()
        if nxt is None:
            return bis.result()
        rate, seeds, _ = nxt
        bis.feed(rate, [run(rate, s) for s in seeds], seeds)


def _contradicted(rate, seed):
    """Passes between 12 and 14.2 req/s (seed 1 alone fails there), overloaded below 12, fails above 14.2."""
    if rate < 12.0:
        return _Run(0.99, 400, 0.5 * rate, rate, True)
    if rate < 14.2:
        return _Run(1.0 if seed == 0 else 0.85, 400, 0.0, rate)
    return _Run(0.8, 400, 0.0, rate)


def test_estimate_bracket_and_interval_are_one_estimator_on_the_same_probes():
    """The repro of `capacity --seeds 2 --horizon 60`: the interval's extra (lower) probes failed, the
    estimate (14.2, search probes only) lay outside its own interval (0 - 0). Now all three come from
    every probe: the smallest failing probe bounds the capacity."""
    from fastsim.search import _Bisection
    res = _drive(_Bisection(16.0, 2, 0.01, 40, 2000, 0, SLO(1.0, 0.05), 600.0, 16.0), _contradicted)
    boot = [p for p in res.probes if p[0] < 12.0]
    assert len(boot) == 3                      # the interval's probes, each 1 / 1.1 below the last
    assert res.rate_req_per_s == 0.0 and res.ci95 == (0.0, 0.0) and res.estimate_in_ci
    assert res.bracket == (0.0, min(p[0] for p in boot))
    # every passing probe lies above that bound: each contradicts the bracket, and is listed
    passed = [p for p in res.probes if p[3]]
    assert len(passed) >= 3 and res.contradicting_probes == passed
    # the probes contradict each other: no single answer, said rather than presented as 0
    assert res.unstable and not res.undetermined
    (f0, f1), (p0, p1) = res.conflict
    assert (f0, f1) == (min(p[0] for p in boot), max(p[0] for p in boot))
    assert (p0, p1) == (min(p[0] for p in passed), max(p[0] for p in passed))
    assert res.search_bracket[0] == max(p[0] for p in passed) and res.search_bracket[1] > res.search_bracket[0]
    assert math.isnan(res.simulated_ratio) and math.isnan(res.analytic_ratio)
    assert "flagged overloaded by the backlog-slope test" in res.unstable_detail
    assert f"the conservative end is below {res.bracket[1]:.3f} req/s" in res.unstable_detail
    d = res.to_dict()
    assert d["unstable"] is True and d["rate_req_per_s"] is None and d["estimate_in_ci"] is None
    assert d["ci95_req_per_s"] == [None, None] and d["bracket_req_per_s"] == [0.0, res.bracket[1]]
    assert d["unstable_reason"] == res.unstable_reason and res.unstable_reason.startswith("no stable answer at a 600-s")
    assert d["null_reasons"]["ci95_req_per_s"].startswith("not applicable: unstable")


def test_with_two_seeds_the_estimate_always_lies_in_its_interval():
    """Half of the resamples of 2 seeds are the full sample, so a shared estimator keeps it inside."""
    from fastsim.search import _Bisection
    rng = np.random.default_rng(11)
    for _ in range(25):
        caps = rng.uniform(5.0, 20.0, 2)
        flips = set(np.round(rng.uniform(2.0, 25.0, 3), 1))

        def run(rate, seed, caps=caps, flips=flips):
            bad = rate >= caps[seed] or round(rate, 1) in flips
            return _Run(0.8 if bad else 0.97, 300, 0.0, rate)
        res = _drive(_Bisection(float(rng.uniform(5, 20)), 2, 0.01, 40, 500, 3, SLO(1.0, 0.05), 600.0, 10.0), run)
        assert res.estimate_in_ci, (res.rate_req_per_s, res.ci95)
        assert res.bracket[0] <= res.rate_req_per_s <= res.bracket[1]


def test_a_probe_that_measured_nothing_has_no_verdict_and_ends_the_search():
    from fastsim.search import _Bisection

    def run(rate, seed):             # failing everywhere; nothing measured below 2 req/s
        return _Run(0.5, 0 if rate < 2.0 else 50, 0.0, rate)
    res = _drive(_Bisection(10.0, 2, 0.01, 40, 2000, 0, SLO(1.0, 0.05), 600.0, 10.0), run)
    rates = [p[0] for p in res.probes]
    assert rates == pytest.approx([10.0 / 1.25 ** k for k in range(9)])      # was: 40 probes down to 1.6e-3
    assert math.isnan(res.probes[-1][1]) and res.probe_measured[-1] == 0 and res.probe_measured[0] == 100
    assert res.rate_req_per_s == 0.0 and res.bracket == (0.0, rates[-2])
    assert res.contradicting_probes == [] and not res.unstable and res.conflict is None
    assert res.unstable_reason == "" and res.to_dict()["unstable"] is False
    (note,) = [n for n in res.notes if "stopped" in n]
    assert f"stopped at {rates[-1]:.4g} req/s" in note and f"below the smallest failing probe, {rates[-2]:.4g}" in note
    d = res.to_dict()
    assert d["probes"][-1]["attainment"] is None and d["probes"][-1]["measured"] == 0
    assert d["probes"][-1]["null_reasons"]["attainment"].startswith("not applicable")


def test_bracket_estimator_passes_over_probes_without_a_verdict():
    from fastsim.search import _bracket_capacities
    rates = np.array([1.0, 2.0, 3.0, 4.0])
    att = np.array([[np.nan, 0.95, 0.95, 0.5]])          # nothing measured at 1 req/s
    flat = np.zeros((1, 4))
    caps, lo, hi = _bracket_capacities(rates, att, flat, flat > 0, 0.9, bracket=True)
    assert lo[0] == 3.0 and hi[0] == 4.0 and caps[0] == pytest.approx(3.0 + (0.05 / 0.45))
    flagged = np.array([[True, False, False, False]])     # overloaded though unmeasured: a failure
    caps, lo, hi = _bracket_capacities(rates, att, flagged * 2.0, flagged, 0.9, bracket=True)
    assert (caps[0], lo[0], hi[0]) == (0.0, 0.0, 1.0)


def test_repro_seeds_2_horizon_60_estimate_inside_its_interval(cat):
    """`fastsim capacity --scenario chat --gpu B200 --precision FP8 --tp 1 --instances 1 --seeds 2
    --horizon 60` printed 14.198 req/s with a 95% interval of 0.000 - 0.000."""
    s = cat.scenario("chat")
    plan = plan_for(s.model, Demand.from_scenario(s), gpu="B200", precision="FP8", tp=1, instances=1)
    res = max_sustainable_rate(plan, s, SLO(s.ttft_s, s.tpot_s), seeds=2, horizon_s=60.0)
    assert res.estimate_in_ci and res.ci95[0] <= res.rate_req_per_s <= res.ci95[1]
    lo, hi = res.bracket
    assert lo <= res.rate_req_per_s <= hi
    # the probes below the search's bracket failed (overloaded at 60 s): they bound the answer now
    assert res.rate_req_per_s == 0.0 and res.ci95 == (0.0, 0.0)
    assert hi == min(p[0] for p in res.probes if not p[3]) == pytest.approx(9.862, abs=1e-3)
    assert any("understates the capacity" in n and "67.3 s" in n for n in res.notes)


# ---- the horizon ------------------------------------------------------------------------------------

def test_horizon_floor_of_chat_on_b200(cat):
    from fastsim.search import horizon_floor
    s = cat.scenario("chat")
    plan = plan_for(s.model, Demand.from_scenario(s), gpu="B200", precision="FP8", tp=1, instances=2)
    f = horizon_floor(plan, 1000.0, 250.0, SLO(1.0, 0.05))
    assert f.lone_s == pytest.approx(3.009, abs=1e-3)
    assert f.slo_pace_s == pytest.approx(1.0 + 249 * 0.05)
    assert f.min_horizon_s == pytest.approx(f.lone_s / (0.2 + 0.1 * 0.6))
    assert f.full_horizon_s == pytest.approx(f.slo_pace_s / 0.2)
    assert f.note(70.0) == "" and "understates" in f.note(60.0)
    assert math.isinf(horizon_floor(plan, 1000.0, 250.0, SLO(1.0, 0.05), measure_window=(0.2, 1.0)).full_horizon_s)


@pytest.mark.parametrize("horizon", [0.5, 10.0])
def test_a_horizon_too_short_to_measure_the_plan_is_refused(cat, horizon):
    """At 0.5 s every probe showed attainment 0 (nothing measured finished) and the answer was 'below
    0.005 req/s'; at 10 s, 2.99 req/s (600 s: 30.8)."""
    from fastsim.errors import FastsimInputError
    s = cat.scenario("chat")
    plan = plan_for(s.model, Demand.from_scenario(s), gpu="B200", precision="FP8", tp=1, instances=2)
    with pytest.raises(FastsimInputError) as exc:
        max_sustainable_rate(plan, s, SLO(s.ttft_s, s.tpot_s), seeds=2, horizon_s=horizon)
    assert exc.value.field == "horizon_s" and exc.value.value == horizon
    assert "at least 11.6 s" in exc.value.allowed and "3.01 s alone" in exc.value.allowed


def test_a_short_horizon_says_it_understates(cat):
    s = cat.scenario("chat")
    plan = plan_for(s.model, Demand.from_scenario(s), gpu="B200", precision="FP8", tp=1, instances=2)
    res = max_sustainable_rate(plan, s, SLO(s.ttft_s, s.tpot_s), seeds=2, horizon_s=20.0)
    assert 0 < res.rate_req_per_s < 0.5 * 30.8          # understated, as the note says
    (note,) = [n for n in res.notes if "understates" in n]
    assert "a horizon of 20 s" in note and "13.5 s within its targets" in note and "at least 67.3 s" in note
    assert res.to_dict()["notes"] == list(res.notes)


def test_no_measured_request_gives_no_capacity(cat):
    """A first probe too slow for the horizon to measure anything: undetermined, not a rate of about 0."""
    s = cat.scenario("chat")
    plan = plan_for(s.model, Demand.from_scenario(s), gpu="B200", precision="FP8", tp=1, instances=1)
    res = max_sustainable_rate(plan, s, SLO(s.ttft_s, s.tpot_s), seeds=2, horizon_s=60.0, rate_hint_req_per_s=1e-3)
    assert res.undetermined and math.isnan(res.rate_req_per_s) and len(res.probes) == 1
    assert math.isnan(res.probes[0][1]) and res.probe_measured == (0,)
    assert any(n.startswith("undetermined: no probe measured a request") and "60-s horizon" in n for n in res.notes)
    d = res.to_dict()
    assert d["rate_req_per_s"] is None and d["undetermined"] is True
    assert d["null_reasons"]["rate_req_per_s"].startswith("not applicable: undetermined")


# ---- inputs: SLO, hints, rates, instance counts ------------------------------------------------------

@pytest.mark.parametrize("args, field, value", [
    ((1.0, 0.05, 1.5), "SLO.attainment", 1.5), ((1.0, 0.05, float("nan")), "SLO.attainment", None),
    ((1.0, 0.05, -0.2), "SLO.attainment", -0.2), ((1.0, 0.05, 0.0), "SLO.attainment", 0.0),
    ((0.0, 0.05), "SLO.ttft_s", 0.0), ((float("inf"), 0.05), "SLO.ttft_s", float("inf")),
    ((1.0, -0.05), "SLO.tpot_s", -0.05), ((1.0, float("nan")), "SLO.tpot_s", None), (("1", 0.05), "SLO.ttft_s", "1"),
    ((True, 0.05), "SLO.ttft_s", True),
])
def test_slo_refuses_bad_fields_by_name(args, field, value):
    from fastsim.errors import FastsimInputError
    with pytest.raises(FastsimInputError) as exc:
        SLO(*args)
    assert exc.value.field == field
    if value is not None:
        assert exc.value.value == value
    assert ("(0, 1]" if field == "SLO.attainment" else "a finite number of seconds > 0") in exc.value.allowed


def test_slo_keeps_good_fields_and_checks_replace():
    import dataclasses

    from fastsim.errors import FastsimInputError
    slo = SLO(1, 0.05, attainment=1)
    assert (slo.ttft_s, slo.tpot_s, slo.attainment) == (1.0, 0.05, 1.0) and isinstance(slo.ttft_s, float)
    assert SLO(np.float64(2.0), 0.1) == SLO(2.0, 0.1)
    with pytest.raises(FastsimInputError, match="^SLO.attainment: got 2"):
        dataclasses.replace(slo, attainment=2)


@pytest.fixture(scope="module")
def chat1(cat):
    s = cat.scenario("chat")
    return s, plan_for(s.model, Demand.from_scenario(s), gpu="B200", precision="FP8", tp=1, instances=1)


@pytest.mark.parametrize("kw, field, says", [
    (dict(rate_hint_req_per_s=0.0), "rate_hint_req_per_s", "a finite number > 0"),
    (dict(rate_hint_req_per_s=float("nan")), "rate_hint_req_per_s", "a finite number > 0"),
    (dict(rate_hint_req_per_s=1e308), "rate_hint_req_per_s", "at most 5e+07 req/s"),
    (dict(rate_hint_req_per_s=1e7, horizon_s=60.0), "rate_hint_req_per_s", "at most 416667 req/s at a horizon of 60 s"),
    (dict(seed=-1), "seed", "an integer >= 0"),
])
def test_one_plan_search_refuses_hints_and_seeds_by_name(chat1, kw, field, says):
    from fastsim.errors import FastsimInputError
    s, plan = chat1
    with pytest.raises(FastsimInputError) as exc:
        max_sustainable_rate(plan, s, SLO(1.0, 0.05), **{"seeds": 2, "horizon_s": 60.0, **kw})
    assert exc.value.field == field and says in exc.value.allowed


def test_rate_bound_is_the_workload_limit_per_second():
    from fastsim.search import MAX_RATE_REQ_PER_S, check_rate_hint
    from fastsim.workload import MAX_REQUESTS
    assert MAX_RATE_REQ_PER_S == MAX_REQUESTS / 1.0
    assert check_rate_hint("r", MAX_RATE_REQ_PER_S) == MAX_RATE_REQ_PER_S
    assert check_rate_hint("r", 1000.0, 600.0) == 1000.0


@pytest.mark.parametrize("counts, field", [
    (dict(instances=100_000), "plan.instances"), (dict(instances=4097), "plan.instances"),
])
def test_a_plan_past_the_instance_limit_is_refused_before_simulating(chat1, counts, field):
    import dataclasses

    from fastsim.errors import FastsimInputError
    from fastsim.analytic import MAX_INSTANCES
    s, plan = chat1
    big = dataclasses.replace(plan, **counts)
    with pytest.raises(FastsimInputError) as exc:
        max_sustainable_rate(big, s, SLO(1.0, 0.05), seeds=2, horizon_s=10.0)
    assert exc.value.field == field and exc.value.value == counts["instances"]
    assert f"from 1 to {MAX_INSTANCES:,}" in exc.value.allowed and MAX_INSTANCES == 4096


def test_a_disaggregated_plan_past_the_limit_names_its_side(cat):
    import dataclasses

    from fastsim.errors import FastsimInputError
    from fastsim.search import check_plan_instances
    s = cat.scenario("chat")
    plan = plan_for(s.model, Demand.from_scenario(s), gpu="H100", precision="FP8", mode="disaggregated",
                    prefill_tp=1, decode_tp=1, prefill_instances=2, decode_instances=2)
    check_plan_instances(plan)
    with pytest.raises(FastsimInputError) as exc:
        max_sustainable_rate(dataclasses.replace(plan, decode_instances=5000, instances=5000), s, SLO(1.0, 0.05),
                             seeds=2, horizon_s=60.0)
    assert exc.value.field == "plan.decode_instances" and exc.value.value == 5000
    with pytest.raises(FastsimInputError) as exc:
        check_plan_instances(dataclasses.replace(plan, prefill_instances=5000), {"prefill_instances": "--p"})
    assert exc.value.field == "--p"


def test_the_search_stops_at_the_largest_rate_it_may_draw():
    """A plan that passes everywhere: the search stops at the workload limit's rate, says so, and reports
    'at least' (a rate search never draws more than fastsim.workload.MAX_REQUESTS per seed)."""
    from fastsim.search import _Bisection, _max_probe_rate
    from fastsim.workload import MAX_REQUESTS
    cap = _max_probe_rate(600.0)
    assert cap == pytest.approx(MAX_REQUESTS / 600.0) and cap * 600.0 <= MAX_REQUESTS
    res = _drive(_Bisection(0.9 * cap, 2, 0.01, 40, 0, 0, SLO(1.0, 0.05), 600.0, 10.0, max_rate=cap),
                 lambda rate, seed: _Run(0.99, 300, 0.0, rate))
    assert [p[0] for p in res.probes] == [0.9 * cap, cap]
    assert res.bracket == (cap, math.inf) and res.rate_req_per_s == cap
    assert any("the capacity lies above it" in n for n in res.notes)


def test_an_interval_whose_lower_end_is_censored_is_not_reported_as_0():
    """`capacity --seeds 16 --horizon 60` (and 4 x 70 s) printed '95% CI across seeds 0.000 - 14.918' for a
    stable estimate of 14.56: over 2.5% of the resamples passed at no probe below their smallest failing one,
    so their capacity lies below the lowest probe, not at 0."""
    from fastsim.cli import _capacity_summary
    from fastsim.search import CapacityResult
    probes = [(9.862, 0.99, False, True), (14.5, 0.95, False, True), (14.8, 0.8, False, False)]
    res = CapacityResult(14.6, (14.5, 14.8), (0.0, 14.9), probes, np.zeros((3, 16)), 16.4, 16, 60.0,
                         search_bracket=(14.5, 14.8))
    assert res.ci_censored and not res.unstable and res.estimate_in_ci is True
    d = res.to_dict()
    assert d["ci95_req_per_s"] == [None, 14.9] and d["rate_req_per_s"] == 14.6
    assert d["null_reasons"]["ci95_req_per_s"].startswith("not applicable: the lower end is censored")
    assert "9.862 req/s" in d["null_reasons"]["ci95_req_per_s"]
    line = _capacity_summary(res)
    assert "95% CI across seeds below 9.862 - 14.900 (the lower end is censored" in line and "0.000" not in line
    stable = CapacityResult(14.6, (14.5, 14.8), (14.4, 14.9), probes, np.zeros((3, 16)), 16.4, 16, 60.0)
    assert not stable.ci_censored and stable.to_dict()["ci95_req_per_s"] == [14.4, 14.9]


def test_plot_of_an_unstable_result_draws_no_capacity(monkeypatch, tmp_path):
    """The plot drew 'capacity 0.00 req/s' and a 0 - 0 interval for contradicting probes."""
    from fastsim import plots
    from fastsim.search import _Bisection
    res = _drive(_Bisection(16.0, 2, 0.01, 40, 2000, 0, SLO(1.0, 0.05), 600.0, 16.0), _contradicted)
    assert res.unstable
    made = []
    real = plots._figure

    def spy(*a, **k):
        fig, ax = real(*a, **k)
        made.append(ax)
        return fig, ax
    monkeypatch.setattr(plots, "_figure", spy)
    plots.plot_capacity(res, str(tmp_path / "c.png"), title="t")
    ax = made[0]
    labels = [h.get_label() for h in ax.get_legend().legend_handles] if hasattr(ax.get_legend(), "legend_handles") \
        else [t.get_text() for t in ax.get_legend().get_texts()]
    assert not any(str(x).startswith("capacity") or "95% CI" in str(x) for x in labels), labels
    assert ax.get_title().endswith("no stable answer: the probes contradict each other")
