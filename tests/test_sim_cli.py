"""``fastsim simulate`` (arrival process, lengths, plot, --from-plan) and ``fastsim bench``."""
import json

import numpy as np
import pytest

from cliutil import run
from fastsim.workload import seeds_for, synthesize

PLAN = ["--gpu", "B200", "--precision", "FP8", "--instances", "2", "--chunk", "512"]




def simulate_json(capsys, *extra):
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", "--horizon", "40", "--format", "json", *PLAN, *extra)
    assert rc == 0, err
    return json.loads(out)["runs"]


def test_gamma_arrivals_and_cv(capsys):
    poisson = simulate_json(capsys)
    gamma = simulate_json(capsys, "--arrival", "gamma", "--cv", "3")
    expect = synthesize("chat", 20.0, 40.0, seeds_for(0, 1)[0], arrival="gamma", cv=3.0)
    assert gamma[0]["requests"] == expect.n != poisson[0]["requests"]
    # burstier arrivals at the same mean rate queue more
    assert gamma[0]["ttft_p99_s"] > poisson[0]["ttft_p99_s"]


@pytest.mark.parametrize("extra, field", [
    (["--arrival", "gamma"], "--cv"),
    (["--cv", "2"], "--cv"),
    (["--arrival", "gamma", "--cv", "0"], "--cv"),
    (["--lengths", "uniform"], "--lengths"),
])
def test_arrival_and_length_errors(capsys, extra, field):
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", "--horizon", "10", *PLAN, *extra)
    assert rc == 2
    assert field in err and "Traceback" not in err


def test_fixed_and_trace_lengths(capsys):
    fixed = simulate_json(capsys, "--lengths", "fixed")
    trace = simulate_json(capsys, "--lengths", "trace:azure-conv")
    lognormal = simulate_json(capsys)
    # same arrival draws (common random numbers), other lengths
    assert fixed[0]["requests"] == trace[0]["requests"] == lognormal[0]["requests"]
    assert len({fixed[0]["ttft_p50_s"], trace[0]["ttft_p50_s"], lognormal[0]["ttft_p50_s"]}) == 3


def test_plot_writes_png(capsys, tmp_path):
    out = tmp_path / "sim.png"
    rc, _, err = run(capsys, "simulate", "--scenario", "chat", "--horizon", "30", "--seeds", "2", *PLAN,
                     "--plot", str(out))
    assert rc == 0, err
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 10_000


def test_from_plan_reads_one_row_of_plan_json(capsys, tmp_path):
    rc, out, err = run(capsys, "plan", "--scenario", "chat", "--format", "json", "--no-verify")
    assert rc == 0, err
    plans = json.loads(out)["plans"]
    f = tmp_path / "plans.json"
    f.write_text(out)
    k = next(i for i, p in enumerate(plans) if p["mode"] == "colocated" and p["tp"] == 2)
    row = plans[k]
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", "--horizon", "40", "--format", "json",
                       "--from-plan", str(f), "--plan-index", str(k))
    assert rc == 0, err
    got = json.loads(out)["runs"]
    # plan flags beside --from-plan are refused by name (they used to be ignored)
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", "--from-plan", str(f), "--gpu", "H100")
    assert rc == 2 and "--gpu: got 'H100'; allowed: no value with --from-plan" in err
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", *PLAN, "--plan-index", "1")
    assert rc == 2 and "--plan-index" in err
    named = [a for a in PLAN]  # the same plan named on the command line must give the same run
    named[named.index("--instances") + 1] = str(row["instances"])
    named[named.index("--chunk") + 1] = str(row["chunk_tokens"])
    named[named.index("--gpu") + 1] = row["gpu"]
    named[named.index("--precision") + 1] = row["precision"]
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", "--horizon", "40", "--format", "json",
                       *named, "--tp", "2")
    assert rc == 0, err
    direct = json.loads(out)["runs"]
    assert f"TP{row['tp']}" in got[0]["plan"] and row["gpu"] in got[0]["plan"]
    assert got[0]["attainment"] == direct[0]["attainment"]
    assert got[0]["ttft_p90_s"] == direct[0]["ttft_p90_s"]
    rc, _, err = run(capsys, "simulate", "--scenario", "chat", "--from-plan", str(f), "--plan-index", "999")
    assert rc == 2 and "--plan-index" in err


def test_bench_quick_json_keys(capsys):
    rc, out, err = run(capsys, "bench", "--quick", "--format", "json")
    assert rc == 0, err
    res = json.loads(out)
    keys = {"threads", "horizon_s", "chat_requests", "chat_run_ms", "requests_per_s_per_core", "grid_runs",
            "grid_requests", "grid_s_1_thread", "grid_s_all_threads", "parallel_speedup",
            "grid_requests_per_s_per_core", "reference_requests", "reference_s", "reference_us_per_request",
            "kernel_us_per_request", "reference_ratio", "quick"}
    assert keys <= set(res)
    assert res["quick"] is True and res["grid_runs"] == 16
    for k in keys - {"quick"}:
        assert np.isfinite(res[k]) and res[k] > 0, k


def test_bench_quick_table(capsys):
    rc, out, err = run(capsys, "bench", "--quick")
    assert rc == 0, err
    assert "parallel speed-up" in out and "reference" in out
