"""`fastsim capacity` on the command line."""
import json

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
