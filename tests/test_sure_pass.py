"""A pass is statistically sure, at the SLO percentile asked for, on the arrivals asked for.

- the 95% Wilson score interval of the pooled attainment (GuideLLM's goodput search judges each
  probe by it: ``src/guidellm/benchmark/profiles/goodput.py``) decides a verification; seeds are
  added while it holds the target, up to 4 x the seeds asked for (``fastsim.search.confidence``);
- a plan whose own simulated capacity's 95% interval lies below its target rate does not pass, in
  ``plan --headroom`` and in a sweep with ``--capacity``;
- ``--slo-percentile P`` judges TTFT and TPOT at P (attainment target P / 100, P-th percentile
  lengths in the screen) in plan, simulate, capacity, sweep and fleet; 90 is the old behaviour;
- ``plan --arrival gamma --cv X`` verifies on the arrivals ``simulate`` and ``capacity`` draw.
"""
import dataclasses
import json
import math

import numpy as np
import pytest

from cliutil import run
from fastsim.analytic import Demand, plan_for
from fastsim.catalog import default_catalog
from fastsim.errors import FastsimInputError
from fastsim.planner import plan_deployment
from fastsim.search import (MAX_SEED_FACTOR, SLO, SeedWorkloads, attainment_verdict, capacity_refutation,
                            next_seed_count, verify, wilson_interval)
from fastsim.search.verify import _quantile
from fastsim.workload import seeds_for, synthesize

Z = 1.959963984540054       # scipy.stats.norm.ppf(0.975)


# ---------------------------------------------------------------------------- the Wilson bound


def _score_roots(k, n, z):
    """The Wilson interval as the two roots of the score test's boundary (Wilson 1927):
    (p_hat - p)^2 = z^2 p (1 - p) / n, i.e. (1 + z^2/n) p^2 - (2 p_hat + z^2/n) p + p_hat^2 = 0."""
    ph = k / n
    a, b, c = 1.0 + z * z / n, -(2.0 * ph + z * z / n), ph * ph
    disc = math.sqrt(b * b - 4.0 * a * c)
    return (-b - disc) / (2.0 * a), (-b + disc) / (2.0 * a)


@pytest.mark.parametrize("k,n", [(90, 100), (9030, 10000), (51714, 57334), (1, 3), (7, 7), (0, 12)])
def test_wilson_interval_is_the_score_test_closed_form(k, n):
    lo, hi = wilson_interval(k, n)
    rlo, rhi = _score_roots(k, n, Z)
    assert lo == pytest.approx(max(rlo, 0.0), abs=1e-12) and hi == pytest.approx(min(rhi, 1.0), abs=1e-12)


def test_wilson_interval_exact_values():
    # 90 of 100 at 95%: the textbook interval [0.8256, 0.9448]
    lo, hi = wilson_interval(90, 100)
    assert (round(lo, 4), round(hi, 4)) == (0.8256, 0.9448)
    # every trial a success: [n / (n + z^2), 1]; none: [0, z^2 / (n + z^2)]
    assert wilson_interval(50, 50) == (pytest.approx(50 / (50 + Z * Z), abs=1e-15), 1.0)
    assert wilson_interval(0, 50) == (0.0, pytest.approx(Z * Z / (50 + Z * Z), abs=1e-15))
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(FastsimInputError) as e:
        wilson_interval(11, 10)
    assert e.value.field == "successes"
    with pytest.raises(FastsimInputError):
        wilson_interval(1, -1)


def test_a_point_estimate_above_the_target_is_not_a_sure_pass():
    # 0.903 of 10,000: the point clears 0.9, the bound does not (0.8971)
    verdict, lo, hi = attainment_verdict(9030, 10000, 0.9)
    assert verdict == "undecided" and lo < 0.9 <= 0.903 <= hi
    assert attainment_verdict(9200, 10000, 0.9)[0] == "pass"        # lo 0.9145
    assert attainment_verdict(8800, 10000, 0.9)[0] == "fail"        # hi 0.8862
    assert attainment_verdict(0, 0, 0.9)[0] == "fail"               # nothing measured


def test_the_seed_rule_doubles_up_to_four_times_the_seeds_asked():
    assert MAX_SEED_FACTOR == 4
    assert [next_seed_count(n, 4, False) for n in (4, 8, 16)] == [8, 16, 0]
    assert next_seed_count(8, 8, True) == 0                          # decided: no more
    assert next_seed_count(1, 1, False, can_add=False) == 0          # a trace: none to add
    assert next_seed_count(3, 3, False) == 6 and next_seed_count(6, 3, False) == 12


def _coding_agent_at_40():
    """The sweep's coding-agent point on B200 FP8 TP1 x 19 at 40 req/s, and its 16 workloads (the
    sweep's seeds: fastsim.sweep.tasks._workload_seed)."""
    from fastsim.sweep.tasks import _workload_seed
    cat = default_catalog()
    sc = cat.scenario("coding-agent")
    d = Demand.from_scenario(sc, rate_req_per_s=40.0)
    plan = plan_for(sc.model, d, gpu="B200", precision="FP8", tp=1, instances=19, chunk_tokens=512, catalog=cat)
    kids = seeds_for(_workload_seed(0, "coding-agent"), 16)
    wls = [(w.arrival_s, w.prompt_tokens, w.output_tokens) for w in (synthesize(sc, 40.0, 600.0, k) for k in kids)]
    return sc, plan, wls


def test_the_plan_that_passed_on_four_seeds_is_undecided_there_and_fails_on_eight():
    sc, plan, wls = _coding_agent_at_40()
    slo = SLO(sc.ttft_s, sc.tpot_s)
    v4 = verify(plan, wls[:4], slo, horizon_s=600.0)
    # the point estimate the sweep used to pass it on
    assert v4.attainment == pytest.approx(0.90200, abs=5e-5) and v4.attainment >= 0.9
    assert not v4.passed and not v4.decided
    assert v4.attainment_ci95_lo < 0.9 <= v4.attainment_ci95_hi
    assert "not surely >= 0.9" in v4.reason and "no seeds to add" in v4.reason
    v8 = verify(plan, wls[:8], slo, horizon_s=600.0)
    assert v8.decided and not v8.passed and v8.attainment_ci95_hi < 0.9


def test_the_sweep_adds_seeds_to_the_undecided_point_and_fails_it():
    from fastsim.sweep import run_sweep
    _, plan, wls = _coding_agent_at_40()
    df = run_sweep({"scenario": ["coding-agent"], "rate_req_per_s": [40], "gpu": ["B200"], "precision": ["FP8"],
                    "tp": [1], "mode": ["colocated"]}, verify="all", seeds=4, capacity=True)
    r = df.iloc[0]
    assert int(r.instances) == 19 and int(r.chunk_tokens) == 512
    # undecided at 4 seeds: doubled to 8, where the interval lies below the target
    assert int(r.sim_runs) == 8 and not r.sim_passed
    v8 = verify(plan, wls[:8], SLO(2.0, 0.05), horizon_s=600.0)
    assert r.sim_attainment == v8.attainment and r.sim_attainment_ci95_hi == v8.attainment_ci95_hi
    assert r.sim_reason == v8.reason
    # and its own capacity interval lies below 40 req/s as well
    assert r.sim_capacity_ci95_hi_req_per_s < 40.0


def test_verify_adds_seeds_from_a_seed_workloads_and_pools_them_with_the_first():
    sc, plan, wls = _coding_agent_at_40()
    kids = seeds_for(7, 16)
    made = []

    def make(kid):
        made.append(kid)
        w = synthesize(sc, 40.0, 600.0, kid)
        return w.arrival_s, w.prompt_tokens, w.output_tokens
    pool = SeedWorkloads(make, 7, 2)
    v = verify(plan, pool, SLO(sc.ttft_s, sc.tpot_s), horizon_s=600.0)
    fixed = verify(plan, pool.first(v.runs), SLO(sc.ttft_s, sc.tpot_s), horizon_s=600.0)
    # the seeds it ran are the first children of the root, each drawn once, the result that of a
    # verification on them as a fixed set
    assert v.runs in (2, 4, 8) and v.runs_asked == 2 and len(made) == v.runs
    assert [m.spawn_key for m in made] == [k.spawn_key for k in kids[:v.runs]]
    assert (v.attainment, v.measured, v.passed) == (fixed.attainment, fixed.measured, fixed.passed)
    assert v.decided or v.runs == 8


# ---------------------------------------------------------------------------- a capacity that refutes a pass


def test_a_sure_attainment_that_its_own_capacity_contradicts_does_not_pass():
    # coding-agent at 40 req/s, TPOT 30 ms, on B200 FP8 TP2 x 11: 0.914 on 4 seeds, surely above 0.9,
    # while its capacity search (warm-started, interpolating: fastsim.search) finds a 95% interval of
    # 37.40-39.32 req/s, below the target: no pass
    from fastsim.sweep import run_sweep
    df = run_sweep({"scenario": ["coding-agent"], "rate_req_per_s": [40], "gpu": ["B200"], "precision": ["FP8"],
                    "tp": [2], "mode": ["colocated"], "tpot_s": [0.03]}, verify="all", seeds=4, capacity=True)
    r = df.iloc[0]
    assert int(r.instances) == 11 and int(r.sim_runs) == 4
    assert r.sim_attainment_ci95_lo >= 0.9 and r.sim_attainment == pytest.approx(0.9139, abs=1e-4)
    assert r.sim_capacity_ci95_hi_req_per_s < 40.0 and not r.sim_passed
    assert r.sim_reason == capacity_refutation((r.sim_capacity_ci95_lo_req_per_s, r.sim_capacity_ci95_hi_req_per_s),
                                               40.0)
    assert r.sim_reason.startswith("its simulated capacity's 95% interval, 37.40-39.32 req/s")


def test_capacity_refutation_names_the_interval():
    why = capacity_refutation((36.49, 39.35), 40.0)
    assert "36.49-39.35 req/s" in why and "below the target 40 req/s" in why
    assert capacity_refutation((36.49, 40.5), 40.0) == ""
    assert capacity_refutation((math.nan, math.nan), 40.0) == "" and capacity_refutation(None, 40.0) == ""


def _below_the_rate(monkeypatch, lo, hi):
    """Make every capacity search report the 95% interval (lo, hi) (its other figures its own)."""
    import fastsim.search as S
    real = S.max_sustainable_rates

    def fake(*a, **kw):
        return [dataclasses.replace(r, ci95=(lo, hi)) for r in real(*a, **kw)]
    monkeypatch.setattr(S, "max_sustainable_rates", fake)


def test_plan_headroom_does_not_pass_a_plan_its_capacity_contradicts(capsys, monkeypatch):
    argv = ["plan", "--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--tp", "1", "--mode", "colocated",
            "--seeds", "2", "--horizon", "300", "--top-k", "1", "--headroom", "--format", "json"]
    rc, out, _ = run(capsys, *argv)
    assert rc == 0
    p = json.loads(out)["plans"][0]
    assert p["verification"]["passed"] and p["simulated_capacity_ci95_req_per_s"][1] >= 20.0
    _below_the_rate(monkeypatch, 17.5, 19.5)
    rc, out, _ = run(capsys, *argv)
    doc = json.loads(out)
    q = doc["plans"][0]
    assert rc == 0 and (q["gpus"], q["verification"]["attainment"]) == (p["gpus"], p["verification"]["attainment"])
    assert not q["verification"]["passed"]
    why = "its simulated capacity's 95% interval, 17.50-19.50 req/s, lies below the target 20 req/s"
    assert q["verification"]["fail_reason"] == why
    assert any(n == f"plan 1 fails verification: {why}" for n in doc["notes"])


def test_a_sweep_point_its_capacity_contradicts_does_not_pass(monkeypatch):
    from fastsim.sweep import run_sweep
    axes = {"scenario": ["chat"], "gpu": ["B200"], "precision": ["FP8"], "tp": [1], "mode": ["colocated"]}
    kw = dict(verify="all", seeds=2, horizon_s=300.0, capacity=True)
    r = run_sweep(axes, **kw).iloc[0]
    assert r.sim_passed and r.sim_reason == ""
    _below_the_rate(monkeypatch, 15.0, 18.0)
    q = run_sweep(axes, **kw).iloc[0]
    assert q.sim_attainment == r.sim_attainment and not q.sim_passed
    assert q.sim_reason == "its simulated capacity's 95% interval, 15.00-18.00 req/s, lies below the target 20 req/s"


# ---------------------------------------------------------------------------- --slo-percentile


def test_the_percentile_quantile_is_numpys_linear_one():
    rng = np.random.default_rng(3)
    a = rng.lognormal(0.0, 1.0, 1001)
    for q in (0.5, 0.9, 0.95, 0.99, 0.999):
        assert _quantile(a, q) == pytest.approx(float(np.quantile(a, q)), rel=1e-14)
    assert _quantile(np.array([1.0, np.inf]), 0.99) == math.inf


def test_demand_and_slo_at_a_percentile():
    sc = default_catalog().scenario("chat")
    d90, d99 = Demand.from_scenario(sc), Demand.from_scenario(sc, latency_quantile=0.99, slo_percentile=99.0)
    assert d90.slo_percentile == 90.0 and d90.slo_attainment == 0.9
    assert d99.slo_attainment == 0.99 and d99.latency_prompt_tokens == sc.prompt.quantile(0.99)
    assert SLO(1.0, 0.05, d99.slo_attainment).percentile == 99.0
    assert SLO(1.0, 0.05).percentile == 90.0
    for bad in (49.9, 100.0, True, "90"):
        with pytest.raises(FastsimInputError) as e:
            Demand.from_scenario(sc, slo_percentile=bad)
        assert e.value.field == "slo_percentile"


def test_slo_percentile_90_is_the_default_bit_for_bit(capsys):
    argv = ["plan", "--scenario", "chat", "--gpu", "B200", "--seeds", "2", "--horizon", "300", "--top-k", "3",
            "--format", "json"]
    rc, a, _ = run(capsys, *argv)
    rc2, b, _ = run(capsys, *argv, "--slo-percentile", "90")
    assert rc == rc2 == 0 and a == b and "slo_percentile" not in a


def test_plan_at_p99_judges_at_p99(capsys):
    sc = default_catalog().scenario("chat")
    rc, out, _ = run(capsys, "plan", "--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--tp", "1",
                     "--mode", "colocated", "--seeds", "2", "--horizon", "300", "--top-k", "1",
                     "--slo-percentile", "99", "--format", "json")
    assert rc == 0
    p = json.loads(out)["plans"][0]
    assert p["slo_percentile"] == 99.0
    v = p["verification"]
    assert v["passed"] and v["attainment_ci95_lo"] >= 0.99
    # the same plan, verified by hand at P99: same attainment and TTFT / TPOT at the 99th percentile
    d = Demand.from_scenario(sc, latency_quantile=0.99, slo_percentile=99.0)
    plan = plan_for(sc.model, d, gpu="B200", precision="FP8", tp=1, instances=p["instances"],
                    chunk_tokens=p["chunk_tokens"])
    wl = [(w.arrival_s, w.prompt_tokens, w.output_tokens) for w in (synthesize(sc, 20.0, 300.0, k)
                                                                     for k in seeds_for(0, v["runs"]))]
    mine = verify(plan, wl, SLO(sc.ttft_s, sc.tpot_s, 0.99), horizon_s=300.0)
    assert (mine.attainment, mine.ttft_at_percentile_s, mine.tpot_at_percentile_s) == (
        v["attainment"], v["ttft_at_percentile_s"], v["tpot_at_percentile_s"])
    assert mine.ttft_at_percentile_s > mine.ttft_p90_s
    # at P99 the screen checks latency with the P99 lengths
    rc, out, _ = run(capsys, "plan", "--scenario", "chat", "--no-verify", "--slo-percentile", "99")
    head = out.splitlines()[0]
    assert (f"P99 TTFT <= 1 s, P99 TPOT <= 50 ms; prompt mean 1,000 / P99 {sc.prompt.quantile(0.99):,.0f}" in head)


@pytest.mark.parametrize("argv", [
    ["plan", "--scenario", "chat", "--no-verify"],
    ["simulate", "--scenario", "chat", "--gpu", "H100", "--precision", "FP8", "--tp", "2"],
    ["capacity", "--scenario", "chat", "--gpu", "H100", "--precision", "FP8", "--tp", "2"],
    ["sweep", "--axis", "gpu=B200"],
    ["fleet", "--profile", "m-small", "--gpu", "H100", "--precision", "FP8"],
])
@pytest.mark.parametrize("bad", ["49.9", "100", "nan", "p90"])
def test_slo_percentile_out_of_range_is_refused_naming_the_flag(capsys, argv, bad):
    rc, out, err = run(capsys, *argv, "--slo-percentile", bad)
    assert rc == 2 and "--slo-percentile" in err and "from 50 to 99.9" in err and not out


def test_simulate_at_p95_shows_and_judges_the_p95(capsys):
    rc, out, _ = run(capsys, "simulate", "--scenario", "chat", "--gpu", "H100", "--precision", "FP8", "--tp", "2",
                     "--instances", "2", "--seeds", "2", "--horizon", "300", "--slo-percentile", "95",
                     "--format", "json")
    assert rc == 0
    runs = json.loads(out)["runs"]
    assert [r["seed_index"] for r in runs] == [0, 1, "all"]
    for r in runs[:2]:
        lo, hi = wilson_interval(round(r["attainment"] * r["measured"]), r["measured"])
        assert (r["attainment_ci95_lo"], r["attainment_ci95_hi"]) == pytest.approx((lo, hi), abs=1e-12)
        assert r["passed"] == (lo >= 0.95 and not r["overloaded"])
        assert r["slo_percentile"] == 95.0 and r["ttft_p90_s"] <= r["ttft_at_percentile_s"] <= r["ttft_p99_s"]
    pooled = runs[2]
    assert pooled["slo_percentile"] == 95.0 and pooled["passed"] == (pooled["attainment_ci95_lo"] >= 0.95
                                                                     and not pooled["overloaded"])
    rc, out, _ = run(capsys, "simulate", "--scenario", "chat", "--gpu", "H100", "--precision", "FP8", "--tp", "2",
                     "--instances", "2", "--seeds", "1", "--horizon", "300", "--slo-percentile", "95")
    lines = out.splitlines()
    assert "P95 TTFT <= 1 s, P95 TPOT <= 50 ms" in lines[0]
    assert "TTFT P95 s" in lines[1] and "TPOT P95 ms" in lines[1]


def test_capacity_at_p99_is_the_search_at_attainment_099(capsys):
    from fastsim.search import max_sustainable_rate
    argv = ["capacity", "--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--tp", "1", "--instances",
            "1", "--seeds", "2", "--horizon", "300", "--tol", "0.05", "--format", "json"]
    rc, out, _ = run(capsys, *argv, "--slo-percentile", "99")
    assert rc == 0
    got = json.loads(out)
    cat = default_catalog()
    sc = cat.scenario("chat")
    d = Demand.from_scenario(sc, latency_quantile=0.99, slo_percentile=99.0)
    plan = plan_for(sc.model, d, gpu="B200", precision="FP8", tp=1, instances=1, catalog=cat)
    want = max_sustainable_rate(plan, sc, SLO(sc.ttft_s, sc.tpot_s, 0.99), seeds=2, horizon_s=300.0, rel_tol=0.05,
                                catalog=cat)
    rec = got["capacity"] if "capacity" in got else got
    assert rec["rate_req_per_s"] == want.rate_req_per_s
    rc, out90, _ = run(capsys, *argv)
    rec90 = json.loads(out90)
    rec90 = rec90["capacity"] if "capacity" in rec90 else rec90
    assert rec90["rate_req_per_s"] > rec["rate_req_per_s"]          # a P99 SLO is harder to hold


def test_sweep_at_p99_judges_each_point_at_099():
    from fastsim.sweep import run_sweep
    from fastsim.sweep.grid import SweepSettings
    axes = {"scenario": ["chat"], "gpu": ["B200"], "precision": ["FP8"], "tp": [1], "mode": ["colocated"]}
    d90 = run_sweep(axes, verify="all", seeds=2, horizon_s=300.0).iloc[0]
    d99 = run_sweep(axes, verify="all", seeds=2, horizon_s=300.0, slo_percentile=99.0).iloc[0]
    assert d99.sim_passed == (d99.sim_attainment_ci95_lo >= 0.99 and not d99.sim_overloaded)
    # the screen's chunk of the P99 prompt within TTFT / 2 sizes no fewer instances
    assert d99.instances >= d90.instances
    with pytest.raises(FastsimInputError) as e:
        SweepSettings(slo_percentile=100.0)
    assert e.value.field == "slo_percentile"


def test_fleet_slo_percentile_sets_the_attainment_target(capsys):
    base = ["fleet", "--profile", "m-small", "--gpu", "H100", "--precision", "FP8", "--tp", "2", "--days", "0.25",
            "--capacity", "1=8", "--capacity", "2=16", "--no-spares", "--format", "json"]
    rc, out, err = run(capsys, *base, "--slo-percentile", "99")
    assert rc == 0, err
    assert json.loads(out)["settings"]["attainment_target"] == 0.99
    rc, out, _ = run(capsys, *base)
    assert json.loads(out)["settings"]["attainment_target"] == 0.9
    rc, _, err = run(capsys, *base, "--slo-percentile", "99", "--attainment", "0.9")
    assert rc == 2 and "--attainment" in err and "0.99" in err
    rc, _, err = run(capsys, *base, "--slo-percentile", "99", "--attainment", "0.99")
    assert rc == 0


# ---------------------------------------------------------------------------- plan --arrival gamma


def test_plan_verifies_on_gamma_arrivals(capsys):
    argv = ["plan", "--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--tp", "1", "--mode", "colocated",
            "--seeds", "2", "--horizon", "300", "--top-k", "1", "--format", "json"]
    rc, out, _ = run(capsys, *argv, "--arrival", "gamma", "--cv", "3")
    assert rc == 0
    p = json.loads(out)["plans"][0]
    v = p["verification"]
    sc = default_catalog().scenario("chat")
    d = Demand.from_scenario(sc)
    plan = plan_for(sc.model, d, gpu="B200", precision="FP8", tp=1, instances=p["instances"],
                    chunk_tokens=p["chunk_tokens"])
    wl = [(w.arrival_s, w.prompt_tokens, w.output_tokens)
          for w in (synthesize(sc, 20.0, 300.0, k, arrival="gamma", cv=3.0) for k in seeds_for(0, v["runs"]))]
    mine = verify(plan, wl, SLO(sc.ttft_s, sc.tpot_s), horizon_s=300.0)
    assert (mine.attainment, mine.ttft_p90_s) == (v["attainment"], v["ttft_p90_s"])
    # burstier than Poisson: the same plan's tail is longer
    rc, out, _ = run(capsys, *argv)
    poisson = json.loads(out)["plans"][0]
    if poisson["instances"] == p["instances"]:
        assert poisson["verification"]["ttft_p90_s"] < v["ttft_p90_s"]
    else:
        assert poisson["instances"] < p["instances"]
    rc, _, err = run(capsys, *argv, "--arrival", "gamma")
    assert rc == 2 and "--cv" in err
    rc, _, err = run(capsys, *argv, "--cv", "2")
    assert rc == 2 and "--cv" in err and "Poisson" in err


def test_plan_arrival_gamma_is_refused_with_a_trace(capsys):
    rc, _, err = run(capsys, "plan", "--trace", "azure-conv", "--model", "llama-3.1-8b", "--ttft", "1", "--tpot",
                     "0.05", "--arrival", "gamma", "--cv", "2")
    assert rc == 2 and "--arrival" in err and "trace" in err
    with pytest.raises(FastsimInputError) as e:
        plan_deployment("llama-3.1-8b", Demand.from_scenario(default_catalog().scenario("chat")), "chat",
                        arrival="gamma", cv=0.0)
    assert e.value.field == "cv"


def test_from_plan_carries_the_slo_percentile(capsys, tmp_path):
    rc, out, _ = run(capsys, "plan", "--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--tp", "1",
                     "--mode", "colocated", "--top-k", "1", "--seeds", "2", "--horizon", "300", "--slo-percentile",
                     "99", "--format", "json")
    assert rc == 0
    f = tmp_path / "plans.json"
    f.write_text(out)
    sim = ["simulate", "--scenario", "chat", "--from-plan", str(f), "--horizon", "300", "--format", "json"]
    rc, out, _ = run(capsys, *sim)
    assert rc == 0 and json.loads(out)["runs"][0]["slo_percentile"] == 99.0
    rc, out, _ = run(capsys, *sim, "--slo-percentile", "95")          # given on the command line: it applies
    assert rc == 0 and json.loads(out)["runs"][0]["slo_percentile"] == 95.0
    rc, out, _ = run(capsys, "fleet", "--profile", "m-small", "--from-plan", str(f), "--days", "0.1", "--capacity",
                     "1=8", "--no-spares", "--format", "json")
    assert rc == 0 and json.loads(out)["settings"]["attainment_target"] == 0.99
