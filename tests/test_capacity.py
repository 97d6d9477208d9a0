"""Verified planning and maximum sustainable rate (SPEC §7; lecture §2.3 lessons one to three)."""
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
