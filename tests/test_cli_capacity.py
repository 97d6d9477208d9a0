"""`fastsim capacity` on the command line."""
import json

import numpy as np
import pytest

from fastsim.cli import main


def test_capacity_json_and_plot(capsys, tmp_path):
    png = tmp_path / "cap.png"
    rc = main(["capacity", "--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--tp", "1",
               "--instances", "1", "--seeds", "4", "--horizon", "300", "--tol", "0.02", "--format", "json",
               "--plot", str(png)])
    assert rc == 0
    res = json.loads(capsys.readouterr().out)
    lo, hi = res["bracket_req_per_s"]
    assert lo <= res["rate_req_per_s"] <= hi <= lo * 1.02 + 1e-9
    assert res["ci95_req_per_s"][0] <= hi and res["ci95_req_per_s"][1] >= lo
    assert res["analytic_ratio"] == res["analytic_req_per_s"] / res["rate_req_per_s"]
    assert png.stat().st_size > 10_000


def test_capacity_from_plan_json(capsys, tmp_path):
    assert main(["plan", "--scenario", "chat", "--no-verify", "--format", "json", "--top-k", "1"]) == 0
    f = tmp_path / "plans.json"
    f.write_text(capsys.readouterr().out)
    rc = main(["capacity", "--scenario", "chat", "--from-plan", str(f), "--seeds", "2", "--horizon", "120",
               "--tol", "0.05"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "B200 FP8 colocated, 2 instances of TP1 (2 GPUs)" in out and "max sustainable rate" in out


def _rc(argv):
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def test_capacity_bad_input(capsys):
    rc = _rc(["capacity", "--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--tol", "0"])
    assert rc == 2
    assert "--tol" in capsys.readouterr().err
    rc = _rc(["capacity", "--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--tol", "2"])
    assert rc == 2
    assert "--tol: got 2.0; allowed: a fraction in (0, 1)" in capsys.readouterr().err
    rc = _rc(["capacity", "--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--tp", "1",
              "--layout", "tp+ep"])                # a dense model, even at one GPU where EP would change nothing
    assert rc == 2 and "--layout: got 'tp+ep'; allowed: tp: llama-3.1-70b is dense" in capsys.readouterr().err
    rc = _rc(["capacity", "--scenario", "chat", "--precision", "FP8"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--gpu" in err and len(err.strip().splitlines()) == 1


def test_from_plan_keeps_the_plans_targets_and_model(capsys, tmp_path):
    assert main(["plan", "--scenario", "low-latency-8b", "--tpot", "0.02", "--no-verify", "--format", "json",
                 "--top-k", "1"]) == 0
    f = tmp_path / "p.json"
    f.write_text(capsys.readouterr().out)
    assert main(["simulate", "--scenario", "low-latency-8b", "--from-plan", str(f), "--horizon", "60"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert "llama-3.1-8b" in head and "TPOT <= 20 ms" in head


def test_capacity_takes_arrival_options(capsys):
    rc = _rc(["capacity", "--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--instances", "1",
              "--arrival", "gamma", "--cv", "3", "--seeds", "2", "--horizon", "300", "--tol", "0.05",
              "--format", "json"])
    assert rc == 0
    bursty = json.loads(capsys.readouterr().out)["rate_req_per_s"]
    rc = _rc(["capacity", "--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--instances", "1",
              "--seeds", "2", "--horizon", "300", "--tol", "0.05", "--format", "json"])
    poisson = json.loads(capsys.readouterr().out)["rate_req_per_s"]
    assert bursty < poisson


CHAT1 = ["capacity", "--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--tp", "1", "--instances", "1"]


def _run(capsys, argv):
    rc = _rc(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_repro_contradicting_probes_give_no_stable_answer(capsys):
    """`--seeds 2 --horizon 60` printed 'max sustainable rate: below 9.862 req/s ... 95% CI across seeds
    0.000 - 0.000 ... simulated / analytic = 0.00': the interval's lower probes (9.86 - 11.9 req/s) were
    flagged overloaded by a noisy backlog slope while 13.1 - 14.2 passed. The probes contradict each
    other, so the result says there is no stable answer instead of presenting 0 as one."""
    rc, out, err = _run(capsys, CHAT1 + ["--seeds", "2", "--horizon", "60", "--tol", "0.02", "--format", "json"])
    assert rc == 0, err
    d = json.loads(out)
    assert d["unstable"] is True and d["contradicting_probes"] == 3
    assert d["rate_req_per_s"] is None and d["ci95_req_per_s"] == [None, None]
    assert d["estimate_in_ci"] is None and d["simulated_ratio"] is None and d["analytic_ratio"] is None
    for k in ("rate_req_per_s", "ci95_req_per_s", "estimate_in_ci", "simulated_ratio", "analytic_ratio"):
        assert d["null_reasons"][k].startswith("not applicable: unstable"), k
    assert d["bracket_req_per_s"][0] == 0.0 and d["bracket_req_per_s"][1] == pytest.approx(9.862, abs=1e-3)
    assert d["search_bracket_req_per_s"] == pytest.approx([14.152, 14.357], abs=1e-3)
    assert d["unstable_reason"].startswith("no stable answer at a 60-s horizon and 2 seeds: probes at "
                                           "9.862-11.933 req/s fail while 13.126-14.152 pass")
    assert any("understates the capacity" in n for n in d["notes"])
    rc, out, _ = _run(capsys, CHAT1 + ["--seeds", "2", "--horizon", "60", "--tol", "0.02"])
    (line,) = [ln for ln in out.splitlines() if ln.startswith("max sustainable rate")]
    assert line.startswith("max sustainable rate: no stable answer at --horizon 60 s and --seeds 2: probes at "
                           "9.862-11.933 req/s fail while 13.126-14.152 pass (the failing ones flagged overloaded")
    assert ("the conservative end is below 9.862 req/s, the search's bracket is [14.152, 14.357]; a longer "
            "--horizon (or more --seeds) steadies it; 95% CI across seeds n/a") in line
    assert "0.000 - 0.000" not in out and "= 0.00" not in out


def test_estimate_in_ci_is_null_without_an_interval_or_an_estimate():
    """JSON said "estimate_in_ci": true where both the interval and the estimate were null."""
    from fastsim.search import CapacityResult
    nan = float("nan")
    undetermined = CapacityResult(nan, (nan, nan), (nan, nan), [(5.0, nan, False, False)], np.zeros((1, 2)),
                                  10.0, 2, 600.0)
    d = undetermined.to_dict()
    assert undetermined.estimate_in_ci is None and d["estimate_in_ci"] is None
    assert d["null_reasons"]["estimate_in_ci"].startswith("not applicable: undetermined")
    one_seed = CapacityResult(9.5, (9.0, 10.0), (nan, nan), [(9.0, 0.95, False, True), (10.0, 0.8, False, False)],
                              np.zeros((2, 1)), 10.0, 1, 600.0)
    d = one_seed.to_dict()
    assert d["estimate_in_ci"] is None and d["null_reasons"]["estimate_in_ci"].startswith("not applicable: one seed")
    assert d["unstable"] is False and d["unstable_reason"] is None


def _result(probes, rate, bracket, ci, seeds=4):
    from fastsim.search import CapacityResult
    return CapacityResult(rate, bracket, ci, probes, np.zeros((len(probes), seeds)), 20.0, seeds, 600.0)


def test_contradiction_note_says_how_many_it_does_not_list():
    from fastsim.cli import _capacity_notes
    probes = [(14.0, 0.95, False, True), (14.2, 0.85, False, False)] + [(r, 0.99, True, False)
                                                                        for r in (12.0, 11.0, 10.0, 9.0, 8.0)]
    (note,) = _capacity_notes(_result(probes, 14.1, (14.0, 14.2), (13.9, 14.2)))
    assert note.startswith("5 probes contradict the bracket 14.000 - 14.200 (failed at 12.000 req/s, failed at "
                           "11.000 req/s, failed at 10.000 req/s, and 2 more not listed)")
    (note,) = _capacity_notes(_result(probes[:5], 14.1, (14.0, 14.2), (13.9, 14.2)))
    assert "(failed at 12.000 req/s, failed at 11.000 req/s, failed at 10.000 req/s)" in note
    assert "not listed" not in note


def test_estimate_outside_its_interval_note_does_not_blame_skew():
    from fastsim.cli import _capacity_notes
    probes = [(14.0, 0.95, False, True), (14.2, 0.85, False, False)]
    (note,) = _capacity_notes(_result(probes, 14.1, (14.0, 14.2), (13.0, 13.5)))
    assert "skewed" not in note and "same estimator on the same probes" in note and "4 seeds" in note


def test_undetermined_result_is_said_not_printed_as_zero(capsys):
    rc, out, err = _run(capsys, CHAT1 + ["--seeds", "2", "--horizon", "60", "--rate", "0.001"])
    assert rc == 0, err
    assert "max sustainable rate: undetermined (no probe measured a request in 2 seeds x 60 s" in out
    assert "note: undetermined: no probe measured a request" in out


@pytest.mark.parametrize("extra, says", [
    (["--horizon", "0.5"], "--horizon: got 0.5; allowed: a horizon of at least 11.6 s for this plan and workload"),
    (["--horizon", "10"], "--horizon: got 10.0; allowed: a horizon of at least 11.6 s"),
    (["--rate", "1e308"], "--rate: got 1e+308; allowed: a finite rate > 0 of at most 5e+07 req/s"),
    (["--rate", "1e7", "--horizon", "60"], "--rate: got 10000000.0; allowed: a finite rate > 0 of at most 416667 "
                                           "req/s at a horizon of 60 s"),
])
def test_capacity_refuses_horizons_and_rates_by_flag(capsys, extra, says):
    rc, out, err = _run(capsys, CHAT1 + ["--seeds", "2"] + extra)
    assert rc == 2 and out == ""
    assert err.startswith("fastsim capacity: error: " + says) and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, flag", [
    (["--instances", "100000"], "--instances"),
    (["--mode", "disaggregated", "--prefill-tp", "1", "--decode-tp", "1", "--prefill-instances", "1",
      "--decode-instances", "5000"], "--decode-instances"),
    (["--mode", "disaggregated", "--prefill-tp", "1", "--decode-tp", "1", "--prefill-instances", "4097",
      "--decode-instances", "1"], "--prefill-instances"),
])
def test_capacity_refuses_instance_counts_past_the_limit(capsys, argv, flag):
    """`--instances 100000` died with a numpy MemoryError traceback (48.8 GiB)."""
    rc, out, err = _run(capsys, ["capacity", "--scenario", "chat", "--gpu", "B200", "--precision", "FP8",
                                 "--seeds", "2", "--horizon", "10"] + argv)
    assert rc == 2 and out == "" and "Traceback" not in err
    assert err.startswith(f"fastsim capacity: error: {flag}: got ") and "4,096" in err


def test_a_short_horizon_notes_that_it_understates(capsys):
    """--horizon 20 gave 7.84 req/s on 2 instances (30.8 at 600 s) with only a note that it might overstate."""
    rc, out, err = _run(capsys, ["capacity", "--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--tp", "1",
                                 "--instances", "2", "--seeds", "2", "--horizon", "20"])
    assert rc == 0, err
    assert ("note: a horizon of 20 s understates the capacity: a mean request (1,000 + 250 tokens) may take 13.5 s "
            "within its targets") in out
    assert "a horizon of at least 67.3 s measures the plan" in out


def test_a_probe_that_measured_nothing_prints_no_verdict(capsys):
    """Its attainment is NaN: the row says so instead of 'nan ... FAIL'."""
    from fastsim.cli import _ProbeProgress
    live = _ProbeProgress(True)
    live.start(3.0, 2)
    live.done(3.0, float("nan"), False, False)
    live.start(4.0, 2)
    live.done(4.0, 0.95, False, True)
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].split() == ["1", "3.000", "n/a", "no", "no", "verdict", "(no", "request", "measured)"]
    assert rows[1].split() == ["2", "4.000", "0.950", "no", "pass"]
