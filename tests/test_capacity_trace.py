"""Maximum sustainable time scale of a real trace (`fastsim.search.max_sustainable_scale`, `capacity --trace`)."""
import json
import math

import numpy as np
import pytest

from fastsim.analytic import Demand, plan_for
from fastsim.catalog import default_catalog
from fastsim.errors import FastsimInputError
from fastsim.search import SLO, max_sustainable_rate, max_sustainable_scale, sim_plan
from fastsim.sim import simulate
from fastsim.workload import Workload, read_trace, seeds_for, synthesize

from cliutil import run

T = 300.0          # seconds of the synthetic traces and of the rate bisection's runs
SEEDS = 8


@pytest.fixture(scope="module")
def cat():
    return default_catalog()


@pytest.fixture(scope="module")
def chat(cat):
    """Chat on one B200 FP8 TP1 instance: about 14.8 req/s sustained (analytic 16.6)."""
    s = cat.scenario("chat")
    plan = plan_for(s.model, Demand.from_scenario(s), gpu="B200", precision="FP8", tp=1, instances=1)
    return s, plan, SLO(s.ttft_s, s.tpot_s)


@pytest.fixture(scope="module")
def rate_capacity(chat):
    s, plan, slo = chat
    return max_sustainable_rate(plan, s, slo, seeds=SEEDS, horizon_s=T, rel_tol=0.01)


@pytest.fixture(scope="module")
def poisson_search(chat, rate_capacity):
    """A Poisson trace at the rate bisection's capacity, 300 s long, searched on its time scale."""
    s, plan, slo = chat
    trace = synthesize(s, rate_capacity.rate_req_per_s, T, 12345)
    return trace, max_sustainable_scale(plan, trace, slo, rel_tol=0.01)


@pytest.fixture(scope="module")
def small(cat):
    """Llama-3.1-8B on one H100 FP8 TP1 instance, sized on azure-code's lengths."""
    m = cat.model("llama-3.1-8b")
    wl = read_trace("azure-code")
    d = Demand.from_lengths(wl.prompt_tokens, wl.output_tokens, rate_req_per_s=wl.mean_rate_req_per_s,
                            ttft_s=1.0, tpot_s=0.05, latency_quantile=0.9)
    return m, wl, plan_for(m, d, gpu="H100", precision="FP8", tp=1, instances=1, catalog=cat), SLO(1.0, 0.05)


def _simulate_replay(plan, model, wl, probe, slo, cat):
    """The probe's replay simulated on its own: arrivals / scale, the probe's requests and horizon."""
    k = probe.requests
    t = wl.arrival_s / probe.scale
    return simulate(sim_plan(plan, cat, model=model), t[:k], wl.prompt_tokens[:k], wl.output_tokens[:k],
                    horizon_s=probe.horizon_s, ttft_slo_s=slo.ttft_s, tpot_slo_s=slo.tpot_s,
                    max_context_tokens=model.max_context_tokens).metrics


def _same(probe, m):
    att = m.attainment if m.measured else 0.0
    return (probe.attainment == att and probe.measured == m.measured and probe.overloaded == m.overloaded
            and probe.rejected == m.rejected and probe.unfinished == m.unfinished
            and probe.requests == m.n_requests
            and (probe.ttft_p90_s == m.ttft_p90_s or (math.isnan(probe.ttft_p90_s) and math.isnan(m.ttft_p90_s)))
            and (probe.tpot_p90_s == m.tpot_p90_s or (math.isnan(probe.tpot_p90_s) and math.isnan(m.tpot_p90_s))))


# ---- the answer --------------------------------------------------------------------------------

def test_poisson_trace_lands_on_the_rate_bisections_capacity(rate_capacity, poisson_search):
    """A Poisson trace drawn at the capacity c found by the rate bisection sustains about scale 1 (c req/s).

    Tolerance: the trace is ONE realisation, the rate capacity pools 8 seeds. A single run's
    capacity spreads about sqrt(8) times as widely as the 8-seed estimate, whose 95% bootstrap
    half-width is the CI's; the trace's own request count n is Poisson (its equivalent rate
    n x s / duration carries a 95% relative error of 2 / sqrt(n)); plus each search's 1% bracket.
    Here: about 5.6% + 3% + 1% = 9.6%; ten trace seeds all landed within 5.3%.
    """
    trace, res = poisson_search
    c = rate_capacity.rate_req_per_s
    half = (rate_capacity.ci95[1] - rate_capacity.ci95[0]) / 2.0 / c
    tol = math.sqrt(SEEDS) * half + 2.0 / math.sqrt(trace.n) + 0.01
    assert 0.03 < tol < 0.15                       # a meaningful tolerance, not a blanket one
    assert abs(res.rate_req_per_s / c - 1.0) <= tol
    assert abs(res.scale - 1.0) <= tol + 2.0 / math.sqrt(trace.n)
    # the equivalent rate is the trace's own rate times the scale: n / (duration / s)
    assert res.native_rate_req_per_s == trace.n / trace.duration_s
    assert res.rate_req_per_s == pytest.approx(trace.n / (trace.duration_s / res.scale), rel=1e-12)
    lo, hi = res.bracket
    assert res.bracket_req_per_s == pytest.approx((lo * trace.n / T, hi * trace.n / T), rel=1e-12)
    # the analytic ratio is formed as the rate bisection forms it
    assert res.analytic_req_per_s == rate_capacity.analytic_req_per_s
    assert res.analytic_ratio == res.analytic_req_per_s / res.rate_req_per_s
    assert 0.6 < res.analytic_ratio < 1.4


def test_same_pass_fail_rule_as_the_rate_bisection(chat):
    """One seed of the rate bisection replays, at rate r, its base workload (drawn at R = 2 x the hint)
    with arrival times x R / r, cut at the horizon: the trace search at scale r / R cut at the same
    horizon. Every rate probe then gets the same verdict, and the two brackets overlap."""
    s, plan, slo = chat
    hint = 15.0
    R = 2.0 * hint
    rate = max_sustainable_rate(plan, s, slo, seeds=1, horizon_s=T, rel_tol=0.01, rate_hint_req_per_s=hint,
                                bootstrap=0)
    base = synthesize(s, R, T, seeds_for(0, 1)[0])
    for r, att, over, ok in rate.probes:
        (p,) = max_sustainable_scale(plan, base, slo, horizon_s=T, scale_hint=r / R, probes_per_round=1,
                                     max_probes=1).probes
        assert p.scale == r / R and p.horizon_s == T
        assert (p.passed, p.overloaded) == (ok, over)
        assert abs(p.attainment - att) <= 1.0 / p.measured     # arrivals x R / r and / (r / R) may differ by an ulp
    res = max_sustainable_scale(plan, base, slo, horizon_s=T, scale_hint=hint / R, rel_tol=0.01)
    lo, hi = (R * x for x in res.bracket)
    assert lo <= rate.bracket[1] and rate.bracket[0] <= hi


# ---- exactness -----------------------------------------------------------------------------------

def test_scale_one_reproduces_simulate_on_the_raw_trace(cat, small):
    m, wl, plan, slo = small
    (p,) = max_sustainable_scale(plan, wl, slo, scale_hint=1.0, probes_per_round=1, max_probes=1,
                                 catalog=cat, model=m).probes
    horizon = float(np.nextafter(wl.duration_s, np.inf))       # as `fastsim simulate --trace` replays
    ref = simulate(sim_plan(plan, cat, model=m), wl.arrival_s, wl.prompt_tokens, wl.output_tokens,
                   horizon_s=horizon, ttft_slo_s=slo.ttft_s, tpot_slo_s=slo.tpot_s,
                   max_context_tokens=m.max_context_tokens).metrics
    assert p.scale == 1.0 and p.horizon_s == horizon and p.requests == wl.n and p.excluded_requests == 0
    assert _same(p, ref)
    assert p.measured == 6102                  # azure-code's middle 60% (README)
    assert p.passed == (ref.attainment >= 0.9 and not ref.overloaded)


@pytest.mark.parametrize("horizon_s", [None, 900.0])
def test_every_probe_equals_simulate_of_its_replay(cat, small, horizon_s):
    """A round shares one horizon, its longest; shorter runs are read off at their own horizon."""
    m, wl, plan, slo = small
    res = max_sustainable_scale(plan, wl, slo, horizon_s=horizon_s, catalog=cat, model=m, rel_tol=0.02)
    rounds = {}
    for p in res.probes:
        rounds.setdefault(p.round, set()).add(p.horizon_s)
    assert any(len(h) > 1 for h in rounds.values())            # some runs were read off a longer one
    for p in res.probes:
        assert _same(p, _simulate_replay(plan, m, wl, p, slo, cat)), p


# ---- the bracket ---------------------------------------------------------------------------------

def test_bracket_invariants(poisson_search):
    trace, res = poisson_search
    lo, hi = res.bracket
    by_scale = {p.scale: p for p in res.probes}
    assert by_scale[lo].passed and not by_scale[hi].passed
    assert 0 < lo < hi <= lo * (1 + res.rel_tol)
    assert lo <= res.scale <= hi
    assert not any(lo < p.scale < hi for p in res.probes)
    # hi is the smallest failing scale, lo the largest passing one below it; on this Poisson trace
    # pass / fail is monotone in the scale
    assert hi == min(p.scale for p in res.probes if not p.passed)
    assert all(p.passed for p in res.probes if p.scale <= lo)
    assert not any(p.passed for p in res.probes if p.scale >= hi)
    # rounds of at most probes_per_round scales, ascending; once bracketed, each round splits the bracket
    rounds = sorted({p.round for p in res.probes})
    assert rounds == list(range(len(rounds))) and len(rounds) > 1
    b_lo, b_hi = 0.0, math.inf
    for r in rounds:
        ps = [p.scale for p in res.probes if p.round == r]
        assert 1 <= len(ps) <= res.probes_per_round and ps == sorted(ps)
        if b_lo > 0 and math.isfinite(b_hi):
            assert all(b_lo < x < b_hi for x in ps)
            assert np.allclose(np.diff([b_lo] + ps + [b_hi]), (b_hi - b_lo) / (len(ps) + 1))
        done = [p for p in res.probes if p.round <= r]
        fails = [p.scale for p in done if not p.passed]
        b_hi = min(fails) if fails else math.inf
        passes = [p.scale for p in done if p.passed and p.scale < b_hi]
        b_lo = max(passes) if passes else 0.0
    assert (b_lo, b_hi) == (lo, hi)
    # each probe replays the whole trace over its span at that scale
    for p in res.probes:
        assert p.requests == trace.n and p.excluded_requests == 0
        assert p.horizon_s == float(np.nextafter(trace.duration_s / p.scale, np.inf))
    assert res.horizon_s == float(np.nextafter(T / res.scale, np.inf)) and res.excluded_requests == 0
    assert any("one realisation" in n and "no seeds" in n for n in res.notes)


def test_requests_past_the_horizon_are_counted_not_dropped(chat):
    s, plan, slo = chat
    trace = synthesize(s, 14.0, T, 7)
    res = max_sustainable_scale(plan, trace, slo, horizon_s=100.0, rel_tol=0.02)
    for p in res.probes:
        assert p.horizon_s == min(100.0, float(np.nextafter(T / p.scale, np.inf)))
        kept = int(np.count_nonzero(trace.arrival_s / p.scale <= p.horizon_s))
        assert p.requests == kept and p.excluded_requests == trace.n - kept
    assert any(p.excluded_requests > 0 for p in res.probes)
    assert res.horizon_limit_s == 100.0
    assert res.horizon_s == min(100.0, float(np.nextafter(T / res.scale, np.inf)))
    assert res.excluded_requests == int(np.count_nonzero(trace.arrival_s / res.scale > res.horizon_s))
    assert res.excluded_requests > 0
    (note,) = [n for n in res.notes if "cuts the replay" in n]
    assert "a horizon of 100 s" in note and f"{res.excluded_requests:,} requests would arrive after it" in note
    d = res.to_dict()
    assert d["horizon_limit_s"] == 100.0 and d["excluded_requests"] == res.excluded_requests
    assert [q["excluded_requests"] for q in d["probes"]] == [p.excluded_requests for p in res.probes]


def test_every_probe_failing_reports_zero_and_says_why(chat):
    s, plan, _ = chat
    trace = synthesize(s, 10.0, 60.0, 3)
    res = max_sustainable_scale(plan, trace, SLO(1e-4, 0.05), min_scale=0.5, scale_hint=1.0)
    assert res.scale == 0.0 and res.rate_req_per_s == 0.0
    assert res.bracket == (0.0, min(p.scale for p in res.probes)) and min(p.scale for p in res.probes) == 0.5
    assert not any(p.passed for p in res.probes)
    assert any("every probe failed, down to scale 0.5" in n and "min_scale" in n for n in res.notes)
    d = res.to_dict()
    json.dumps(d, allow_nan=False)
    assert d["horizon_s"] is None and d["excluded_requests"] is None and d["analytic_ratio"] is None
    assert d["null_reasons"]["horizon_s"].startswith("not applicable")
    assert d["null_reasons"]["analytic_ratio"].startswith("infinite")


# ---- errors ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, field", [
    (dict(rel_tol=1.5), "rel_tol"), (dict(rel_tol=0.0), "rel_tol"), (dict(horizon_s=0.0), "horizon_s"),
    (dict(scale_hint=-1.0), "scale_hint"), (dict(probes_per_round=0), "probes_per_round"),
    (dict(max_probes=2.5), "max_probes"), (dict(min_scale=1e-12), "min_scale"),
    (dict(min_scale=2.0, scale_hint=1.0), "scale_hint"),
    (dict(scale_hint=1e308), "scale_hint"), (dict(scale_hint=float("inf")), "scale_hint"),
    (dict(horizon_s=5.0), "horizon_s"),
])
def test_errors_name_the_field(chat, kwargs, field):
    s, plan, slo = chat
    trace = synthesize(s, 10.0, 30.0, 1)
    with pytest.raises(FastsimInputError) as exc:
        max_sustainable_scale(plan, trace, slo, **kwargs)
    assert exc.value.field == field


def test_a_trace_without_a_rate_is_refused(chat):
    s, plan, slo = chat
    one = Workload("one", np.array([0.0]), np.array([100]), np.array([10]))
    with pytest.raises(FastsimInputError) as exc:
        max_sustainable_scale(plan, one, slo)
    assert exc.value.field == "trace"


# ---- command line ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def trace_csv(tmp_path_factory, chat):
    """A 300-s Poisson trace at 14 req/s in the Azure CSV format (numeric timestamps in seconds)."""
    s, _, _ = chat
    wl = synthesize(s, 14.0, T, 11)
    path = tmp_path_factory.mktemp("traces") / "poisson.csv"
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    lines += [f"{a!r},{p},{o}" for a, p, o in zip(wl.arrival_s.tolist(), wl.prompt_tokens.tolist(),
                                                   wl.output_tokens.tolist())]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


PLAN = ("--model", "llama-3.1-70b", "--ttft", "1", "--tpot", "0.05", "--gpu", "B200", "--precision", "FP8",
        "--tp", "1", "--instances", "1")


def test_cli_json(capsys, trace_csv):
    rc, out, err = run(capsys, "capacity", "--trace", trace_csv, *PLAN, "--tol", "0.02", "--format", "json")
    assert rc == 0, err
    d = json.loads(out)
    assert {"scale", "bracket_scale", "rate_req_per_s", "bracket_req_per_s", "native_rate_req_per_s", "trace",
            "requests", "trace_duration_s", "horizon_s", "horizon_limit_s", "excluded_requests", "probes",
            "analytic_req_per_s", "analytic_scale", "analytic_ratio", "simulated_ratio", "estimate_method",
            "ci_method", "plan", "analytic_feasible", "notes", "null_reasons"} <= set(d)
    wl = read_trace(trace_csv)
    assert d["requests"] == wl.n and d["trace"] == "poisson"
    assert d["native_rate_req_per_s"] == pytest.approx(wl.n / wl.duration_s)
    lo, hi = d["bracket_scale"]
    assert lo <= d["scale"] <= hi <= lo * 1.02 + 1e-12
    assert d["rate_req_per_s"] == pytest.approx(d["scale"] * wl.n / wl.duration_s)
    assert 12.0 < d["rate_req_per_s"] < 17.5          # the chat instance's capacity, about 14.8 req/s
    assert d["horizon_limit_s"] is None and "horizon_limit_s" in d["null_reasons"]
    assert d["analytic_ratio"] == pytest.approx(d["analytic_req_per_s"] / d["rate_req_per_s"])
    assert {"scale", "rate_req_per_s", "horizon_s", "requests", "excluded_requests", "measured", "attainment",
            "overloaded", "passed", "round"} <= set(d["probes"][0])
    assert any("one realisation" in n for n in d["notes"])
    assert "note: " in err                             # notes on stderr beside JSON


def test_cli_table_csv_and_flags_that_do_not_apply(capsys, trace_csv):
    rc, out, err = run(capsys, "capacity", "--trace", trace_csv, *PLAN, "--tol", "0.05", "--seeds", "4",
                       "--horizon", "120", "--rate", "20")
    assert rc == 0, err
    assert "max sustainable scale:" in out and "req/s" in out and "excluded" in out
    assert "note: a trace replays its own arrivals once per probe: --seeds does not apply" in out
    assert "a horizon of 120 s cuts the replay" in out
    rc, out, err = run(capsys, "capacity", "--trace", trace_csv, *PLAN, "--tol", "0.05", "--rate", "20",
                       "--format", "csv")
    assert rc == 0, err
    import csv
    import io
    (row,) = list(csv.DictReader(io.StringIO(out)))
    probes = json.loads(row["probes"])
    wl = read_trace(trace_csv)
    # --rate centres the first round: its middle probe replays at 20 req/s
    assert any(p["round"] == 0 and p["rate_req_per_s"] == pytest.approx(20.0) for p in probes)
    assert float(row["scale"]) > 0 and any("one realisation" in n for n in json.loads(row["notes"]))
    assert float(row["native_rate_req_per_s"]) == pytest.approx(wl.n / wl.duration_s)


def test_cli_errors_name_the_flag(capsys, trace_csv):
    rc, _, err = run(capsys, "capacity", "--trace", trace_csv, *PLAN, "--tol", "2")
    assert rc == 2 and "--tol" in err and len(err.strip().splitlines()) == 1
    rc, _, err = run(capsys, "capacity", "--trace", trace_csv, *PLAN, "--rate", "1e-9")
    assert rc == 2 and "--rate" in err
    rc, _, err = run(capsys, "capacity", "--trace", trace_csv, "--ttft", "1", "--tpot", "0.05", "--gpu", "B200",
                     "--precision", "FP8")
    assert rc == 2 and "--model" in err
    rc, _, err = run(capsys, "capacity", "--trace", trace_csv, *PLAN, "--horizon", "0")
    assert rc == 2 and "--horizon" in err


def test_readme_example_prints_what_the_readme_says(capsys):
    from pathlib import Path
    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())
    cmd = ("fastsim capacity --trace azure-conv --model llama-3.1-8b --ttft 1 --tpot 0.05 --gpu H100 "
           "--precision FP8 --instances 1")
    assert cmd in readme
    rc, out, err = run(capsys, *cmd.split()[1:], "--format", "json")
    assert rc == 0, err
    d = json.loads(out)
    lo, hi = d["bracket_scale"]
    said = (f"scale {d['scale']:.2f}, i.e. {d['rate_req_per_s']:.1f} req/s (bracket {lo:.2f} - {hi:.2f}; "
            f"azure-conv's own rate is {d['native_rate_req_per_s']:.2f} req/s), against an analytic "
            f"{d['analytic_req_per_s']:.1f} req/s (analytic / simulated {d['analytic_ratio']:.2f})")
    assert said in readme


def test_huge_scales_and_short_horizons_are_refused_with_the_bound(chat):
    """`capacity --trace ... --rate 1e308` printed 300-digit req/s ('every probe failed, down to scale 3.755e+303')."""
    s, plan, slo = chat
    trace = synthesize(s, 10.0, 300.0, 1)
    with pytest.raises(FastsimInputError) as exc:
        max_sustainable_scale(plan, trace, slo, scale_hint=1e308)
    assert exc.value.field == "scale_hint" and "a scale > 0 of at most" in exc.value.allowed
    bound = float(exc.value.allowed.split("at most ")[1].split(":")[0])
    from fastsim.search import horizon_floor
    floor = horizon_floor(plan, trace.prompt_tokens.mean(), trace.output_tokens.mean(), slo)
    assert floor.min_horizon_s == pytest.approx(11.6, abs=0.1)
    assert bound == pytest.approx(trace.duration_s / floor.min_horizon_s, rel=1e-5)    # a replay that short, no less
    with pytest.raises(FastsimInputError) as exc:
        max_sustainable_scale(plan, trace, slo, horizon_s=5.0)
    assert exc.value.field == "horizon_s" and f"at least {floor.min_horizon_s:.3g} s" in exc.value.allowed


def test_trace_search_refuses_a_plan_past_the_instance_limit(chat):
    import dataclasses
    s, plan, slo = chat
    trace = synthesize(s, 10.0, 60.0, 1)
    with pytest.raises(FastsimInputError) as exc:
        max_sustainable_scale(dataclasses.replace(plan, instances=100_000), trace, slo)
    assert exc.value.field == "plan.instances" and exc.value.value == 100_000


@pytest.mark.parametrize("extra, says", [
    (("--rate", "1e308"), "--rate: got 1e+308; allowed: a finite rate > 0 of at most 5e+07 req/s"),
    (("--rate", "1e5"), "--rate: got 100000.0; allowed: at most 1966.37 req/s for azure-conv"),
    (("--horizon", "5"), "--horizon: got 5.0; allowed: a horizon of at least 9.85 s"),
    (("--instances", "100000"), "--instances: got 100000"),
])
def test_cli_trace_refuses_huge_rates_short_horizons_and_counts(capsys, extra, says):
    argv = ["capacity", "--trace", "azure-conv", "--model", "llama-3.1-70b", "--ttft", "1", "--tpot", "0.05",
            "--gpu", "B200", "--precision", "FP8"]
    argv += [] if "--instances" in extra else ["--instances", "1"]
    rc, out, err = run(capsys, *argv, *extra)
    assert rc == 2 and "Traceback" not in err
    assert err.startswith("fastsim capacity: error: " + says), err
