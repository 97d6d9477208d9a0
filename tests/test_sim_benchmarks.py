"""The benchmarks people run, as workloads and as ``fastsim simulate`` runs that drain; means beside percentiles."""
import json

import numpy as np
import pytest

from cliutil import run
from fastsim.analytic import Demand, plan_for
from fastsim.catalog import default_catalog
from fastsim.errors import FastsimInputError
from fastsim.search import sim_plan
from fastsim.search.verify import _lone_times
from fastsim.sim import benchmark_figures, measured_means, simulate, simulate_drained
from fastsim.sim.records import REQ_FINISHED
from fastsim.workload import (MAX_REQUESTS, Workload, all_at_once, offline_requests, online_requests, read_trace,
                              seeds_for, synthesize, synthesize_from_trace)

CAT = default_catalog()
PLAN = ["--gpu", "H100", "--precision", "FP8", "--instances", "1"]
SCEN = ["--scenario", "chat", "--model", "llama-3.1-8b"]


def _aplan(chunk=None):
    return plan_for("llama-3.1-8b", Demand.from_scenario(CAT.scenario("chat")), gpu="H100", precision="FP8", tp=1,
                    instances=1, catalog=CAT, chunk_tokens=chunk)


def sim_json(capsys, *argv):
    rc, out, err = run(capsys, "simulate", *argv, "--format", "json")
    assert rc == 0, err
    return json.loads(out)


# ---- workloads ----------------------------------------------------------------------------------

def test_online_requests_are_the_first_n_of_the_horizon_draw():
    """Common random numbers: request i of a finite run is request i of synthesize on that seed."""
    s = seeds_for(3, 2)[1]
    w = online_requests(700, 4.0, "chat", s)
    h = synthesize("chat", 4.0, 400.0, s)
    assert h.n > 700 and w.n == 700
    np.testing.assert_array_equal(w.arrival_s, h.arrival_s[:700])
    np.testing.assert_array_equal(w.prompt_tokens, h.prompt_tokens[:700])
    np.testing.assert_array_equal(w.output_tokens, h.output_tokens[:700])
    assert w.horizon_s == w.arrival_s[-1]
    g = online_requests(300, 4.0, "chat", s, arrival="gamma", cv=3.0)
    np.testing.assert_array_equal(g.arrival_s, synthesize("chat", 4.0, 400.0, s, arrival="gamma", cv=3.0).arrival_s[:300])


def test_offline_requests_at_zero_with_the_same_lengths():
    off = offline_requests(500, "chat", 7)
    on = online_requests(500, 2.0, "chat", 7)
    assert off.n == 500 and not off.arrival_s.any() and off.duration_s == 0.0
    np.testing.assert_array_equal(off.prompt_tokens, on.prompt_tokens)
    np.testing.assert_array_equal(off.output_tokens, on.output_tokens)
    fixed = offline_requests(3, (1024, 128))
    assert fixed.prompt_tokens.tolist() == [1024] * 3 and fixed.output_tokens.tolist() == [128] * 3
    # resampled (P, O) pairs of a trace, as synthesize_from_trace resamples them
    tr = read_trace("azure-code")
    r = offline_requests(400, tr, 5)
    ref = synthesize_from_trace(tr, 2.0, 1000.0, 5)
    np.testing.assert_array_equal(r.prompt_tokens, ref.prompt_tokens[:400])
    np.testing.assert_array_equal(r.output_tokens, ref.output_tokens[:400])


def test_all_at_once_keeps_the_requests():
    tr = read_trace("mooncake-conv")
    b = all_at_once(tr)
    assert b.n == tr.n and not b.arrival_s.any()
    np.testing.assert_array_equal(b.prompt_tokens, tr.prompt_tokens)
    np.testing.assert_array_equal(b.prefix.ids, tr.prefix.ids)


@pytest.mark.parametrize("call, field", [
    (lambda: offline_requests(0, (10, 10)), "n_requests"),
    (lambda: offline_requests(MAX_REQUESTS + 1, (10, 10)), "n_requests"),
    (lambda: offline_requests(True, (10, 10)), "n_requests"),
    (lambda: offline_requests(5, (0, 10)), "prompt_tokens"),
    (lambda: offline_requests(5, (10, 0)), "output_tokens"),
    (lambda: offline_requests(5, (1.5, 2.5)), "lengths"),
    (lambda: offline_requests(5, 42), "lengths"),
    (lambda: online_requests(5, 0.0, (10, 10)), "rate_req_per_s"),
    (lambda: online_requests(5, 1.0, (10, 10), arrival="poisson", cv=2.0), "cv"),
    (lambda: all_at_once(Workload("e", np.zeros(0), np.zeros(0), np.zeros(0))), "workload"),
])
def test_workload_errors(call, field):
    with pytest.raises(FastsimInputError) as e:
        call()
    assert e.value.field == field


# ---- means of a horizon run ------------------------------------------------------------------------

def test_measured_means_are_over_the_kernels_measured_requests():
    plan = sim_plan(_aplan(), CAT)
    w = synthesize("chat", 8.0, 120.0, 1, )
    r = simulate(plan, w.arrival_s, w.prompt_tokens, w.output_tokens, horizon_s=120.0, ttft_slo_s=1.0,
                 tpot_slo_s=0.05)
    m = (w.arrival_s >= 24.0) & (w.arrival_s < 96.0)
    assert m.sum() == r.metrics.measured
    assert (r.status[m] == REQ_FINISHED).all()
    got = measured_means(r, 120.0)
    ttft = r.ttft_s[m]
    assert got["ttft_mean_s"] == pytest.approx(ttft.mean(), rel=1e-12)
    # the kernel's percentile and numpy's agree on the same requests, so the mean is over them
    assert np.percentile(ttft, 90) == pytest.approx(r.metrics.ttft_p90_s, rel=1e-12)
    o = w.output_tokens[m]
    d = (r.finish_s - r.first_token_s)[m]
    assert got["tpot_mean_s"] == pytest.approx(np.mean(d[o > 1] / (o[o > 1] - 1)), rel=1e-12)
    assert got["itl_mean_s"] == pytest.approx(d[o > 1].sum() / (o[o > 1] - 1).sum(), rel=1e-12)
    e2e = (r.finish_s - w.arrival_s)[m]
    assert got["e2e_mean_s"] == pytest.approx(e2e.mean(), rel=1e-12)
    assert got["e2e_p99_s"] == pytest.approx(np.percentile(e2e, 99), rel=1e-12)


def test_a_measured_request_that_never_finished_makes_the_mean_infinite():
    plan = sim_plan(_aplan(), CAT)
    a = np.array([0.0, 5.0, 6.0])
    p, o = np.array([100, 100, 100]), np.array([10, 5000, 1])
    r = simulate(plan, a, p, o, horizon_s=10.0, ttft_slo_s=1.0, tpot_slo_s=0.05, measure_window=(0.0, 1.0))
    assert not np.isfinite(r.finish_s[1]) and np.isfinite(r.first_token_s).all()
    got = measured_means(r, 10.0, (0.0, 1.0))
    assert got["ttft_mean_s"] == pytest.approx(np.mean(r.first_token_s - a), rel=1e-12)   # every first token came
    assert got["e2e_mean_s"] == np.inf and got["tpot_mean_s"] == np.inf and got["itl_mean_s"] == np.inf
    # E2E sorted: [e, e', inf]; P50 sits on e', P90 interpolates towards the unfinished request's +inf
    e = np.sort((r.finish_s - a)[[0, 2]])
    assert got["e2e_p50_s"] == e[1] and got["e2e_p90_s"] == np.inf


# ---- simulate: offline ---------------------------------------------------------------------------------

def test_offline_run_is_the_api_run_and_its_throughput_is_tokens_over_makespan(capsys):
    doc = sim_json(capsys, *SCEN, *PLAN, "--requests", "300", "--offline", "--lengths", "fixed:512,200",
                   "--chunk", "512")
    (rec,) = doc["runs"]
    plan = sim_plan(_aplan(chunk=512), CAT)
    w = offline_requests(300, (512, 200), seeds_for(0, 1)[0])
    r = simulate_drained(plan, w.arrival_s, w.prompt_tokens, w.output_tokens, ttft_slo_s=1.0,
                         tpot_slo_s=0.05, max_context_tokens=131072)
    f = benchmark_figures(r)
    assert rec["benchmark"] == "offline" and rec["drained"] is True and rec["rate_req_per_s"] is None
    assert rec["finished"] == rec["requests"] == 300 and rec["unfinished"] == 0
    assert rec["output_tokens"] == 300 * 200
    assert rec["makespan_s"] == pytest.approx(r.finish_s.max(), rel=1e-12)
    assert rec["output_tokens_per_s"] == pytest.approx(300 * 200 / r.finish_s.max(), rel=1e-12)
    assert rec["throughput_tokens_per_s"] == rec["output_tokens_per_s"]
    for k in ("ttft", "tpot", "e2e"):
        for s in ("mean", "p50", "p90", "p99"):
            assert rec[f"{k}_{s}_s"] == pytest.approx(getattr(f, f"{k}_s")[s], rel=1e-12)
    assert rec["itl_mean_s"] == pytest.approx(f.itl_mean_s, rel=1e-12)
    assert "rate_req_per_s" in rec["null_reasons"]


def test_one_offline_request_is_its_lone_steps(capsys):
    """One request alone: TTFT is its prefill, TPOT its decode steps (SPEC §3; search.verify._lone_times)."""
    (rec,) = sim_json(capsys, *SCEN, *PLAN, "--requests", "1", "--offline", "--lengths", "fixed:1000,51")["runs"]
    ttft, tpot = _lone_times(_aplan(), 1000, 51, CAT)
    assert rec["ttft_mean_s"] == pytest.approx(ttft, rel=1e-9) == rec["ttft_p99_s"]
    assert rec["tpot_mean_s"] == pytest.approx(tpot, rel=1e-3)
    assert rec["itl_mean_s"] == pytest.approx(rec["tpot_mean_s"], rel=1e-12)
    assert rec["e2e_mean_s"] == pytest.approx(rec["makespan_s"], rel=1e-12)
    assert rec["output_tokens_per_s"] == pytest.approx(51 / rec["makespan_s"], rel=1e-12)


def test_offline_table_lists_the_benchmark_figures(capsys):
    rc, out, err = run(capsys, "simulate", *SCEN, *PLAN, "--requests", "40", "--offline", "--lengths", "fixed:128,64")
    assert rc == 0, err
    lines = out.splitlines()
    assert "offline benchmark, 40 requests" in lines[0]
    head = lines[1]
    for col in ("makespan s", "output tokens/s", "TTFT mean s", "TPOT mean ms", "ITL mean ms", "E2E mean s"):
        assert col in head
    assert lines[3].split()[:4] == ["0", "40", "40", "0"]
    assert "TPOT = (last token - first token) / (O - 1), the first token excluded" in " ".join(out.split())


# ---- simulate: finite online run, trace that drains, offline burst ------------------------------------------

def test_online_run_drains_with_every_request_measured(capsys):
    runs = sim_json(capsys, *SCEN, *PLAN, "--requests", "400", "--rate", "6", "--seeds", "2")["runs"]
    assert [r["seed_index"] for r in runs] == [0, 1, "all"]
    plan = sim_plan(_aplan(), CAT)
    for s, rec in zip(seeds_for(0, 2), runs):
        w = online_requests(400, 6.0, "chat", s)
        r = simulate_drained(plan, w.arrival_s, w.prompt_tokens, w.output_tokens, max_context_tokens=131072)
        f = benchmark_figures(r)
        assert rec["benchmark"] == "online" and rec["rate_req_per_s"] == 6.0
        assert rec["measured"] == rec["finished"] == 400 and rec["unfinished"] == 0
        assert rec["ttft_mean_s"] == pytest.approx(f.ttft_s["mean"], rel=1e-12)
        assert rec["makespan_s"] == pytest.approx(r.finish_s.max() - w.arrival_s[0], rel=1e-12)
    pooled = runs[2]
    assert pooled["finished"] == 800
    assert pooled["output_tokens_per_s"] == pytest.approx((runs[0]["output_tokens_per_s"]
                                                           + runs[1]["output_tokens_per_s"]) / 2)


def _trace(path, times, p=300, o=40):
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    + "".join(f"{t},{p + i},{o + i % 7}\n" for i, t in enumerate(times)))
    return str(path)


def test_a_trace_at_one_instant_is_an_offline_burst(capsys, tmp_path):
    burst = _trace(tmp_path / "burst.csv", [5.0] * 60)
    spread = _trace(tmp_path / "spread.csv", [i * 0.5 for i in range(60)])
    args = ("--model", "llama-3.1-8b", "--ttft", "1", "--tpot", "0.05", *PLAN, "--chunk", "512")
    doc = sim_json(capsys, "--trace", burst, *args)
    (a,) = doc["runs"]
    assert a["benchmark"] == "offline" and a["finished"] == 60
    assert any("an offline burst" in n for n in doc["notes"])
    (b,) = sim_json(capsys, "--trace", spread, *args, "--offline")["runs"]
    for k in ("makespan_s", "output_tokens_per_s", "ttft_mean_s", "tpot_p90_s", "e2e_p99_s"):
        assert a[k] == b[k]
    tr = read_trace(burst)
    r = simulate_drained(sim_plan(_aplan(chunk=512), CAT), np.zeros(60), tr.prompt_tokens, tr.output_tokens,
                         max_context_tokens=131072)
    assert a["output_tokens_per_s"] == pytest.approx(benchmark_figures(r).output_tokens_per_s, rel=1e-12)


@pytest.mark.parametrize("cmd", ["plan", "capacity"])
def test_a_trace_at_one_instant_has_no_rate_to_plan_or_search_for(capsys, tmp_path, cmd):
    """``vllm bench serve --request-rate inf`` sends every request at once: plan and capacity say so in one line."""
    burst = _trace(tmp_path / "burst.csv", [5.0] * 30)
    rc, out, err = run(capsys, cmd, "--trace", burst, "--model", "llama-3.1-8b", "--ttft", "1", "--tpot", "0.05",
                       "--gpu", "H100", "--precision", "FP8")
    assert rc == 2 and err.count("\n") == 1
    assert f"error: --trace: got '{burst}'; allowed: a trace whose requests arrive over a span of time (its 30 " \
           "requests all arrive at one instant: an offline burst" in err
    assert "rate_req_per_s" not in err and "simulate --trace FILE --instances N" in err


def test_a_trace_replay_that_drains_finishes_every_request(capsys, tmp_path):
    # 100 requests in 10 s on one instance: the plain replay stops at the last arrival with some unfinished
    trace = _trace(tmp_path / "t.csv", [i * 0.1 for i in range(100)], p=2000, o=400)
    args = ("--trace", trace, "--model", "llama-3.1-8b", "--ttft", "1", "--tpot", "0.05", *PLAN)
    (plain,) = sim_json(capsys, *args)["runs"]
    (drained,) = sim_json(capsys, *args, "--drain")["runs"]
    assert plain["unfinished"] > 0 and plain["drained"] is False
    assert drained["unfinished"] == 0 and drained["finished"] == drained["measured"] == 100
    assert drained["benchmark"] == "trace"
    assert drained["rate_req_per_s"] == pytest.approx(100 / 9.9)
    assert drained["makespan_s"] > 9.9


# ---- means beside the percentiles of a horizon run ------------------------------------------------------

def test_horizon_run_prints_means_in_every_format(capsys):
    argv = (*SCEN, *PLAN, "--rate", "8", "--horizon", "120")
    (rec,) = sim_json(capsys, *argv)["runs"]
    w = synthesize("chat", 8.0, 120.0, seeds_for(0, 1)[0])
    r = simulate(sim_plan(_aplan(), CAT), w.arrival_s, w.prompt_tokens, w.output_tokens, horizon_s=120.0,
                 ttft_slo_s=1.0, tpot_slo_s=0.05, max_context_tokens=131072)
    means = measured_means(r, 120.0)
    for k, v in means.items():
        assert rec[k] == pytest.approx(v, rel=1e-12)
    assert rec["drained"] is False and "makespan_s" not in rec
    rc, out, _ = run(capsys, "simulate", *argv)
    lines = out.splitlines()
    cols = lines[1].split("  ")
    cols = [c.strip() for c in cols if c.strip()]
    row = lines[3].split()
    assert cols[8:12] == ["TTFT mean s", "TPOT mean ms", "ITL mean ms", "E2E mean s"]
    assert row[8] == f"{means['ttft_mean_s']:.3f}" and row[9] == f"{means['tpot_mean_s'] * 1e3:.1f}"
    rc, out, _ = run(capsys, "simulate", *argv, "--format", "csv")
    import io
    import pandas as pd
    df = pd.read_csv(io.StringIO(out))
    assert df["ttft_mean_s"].iloc[0] == pytest.approx(means["ttft_mean_s"], rel=1e-9)
    assert df["e2e_p90_s"].iloc[0] == pytest.approx(means["e2e_p90_s"], rel=1e-9)


def test_overloaded_horizon_run_has_infinite_means_with_reasons(capsys):
    (rec,) = sim_json(capsys, *SCEN, *PLAN, "--rate", "200", "--horizon", "60")["runs"]
    assert rec["e2e_mean_s"] is None
    assert rec["null_reasons"]["e2e_mean_s"].startswith("infinite: a measured request did not finish by the horizon")


# ---- bad input --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("extra, flag, allowed", [
    (["--requests", "0"], "--requests", "an integer from 1 to 50,000,000"),
    (["--requests", str(MAX_REQUESTS + 1)], "--requests", "an integer from 1 to 50,000,000"),
    (["--requests", "10", "--offline", "--rate", "3"], "--rate", "no value with --offline"),
    (["--requests", "10", "--horizon", "60"], "--horizon", "no value with --requests"),
    (["--requests", "10", "--offline", "--horizon", "60"], "--horizon", "no value with --requests"),
    (["--requests", "10", "--offline", "--seeds", "2", "--lengths", "fixed:100,10"], "--seeds", "1 with --offline"),
    (["--requests", "10", "--offline", "--seeds", "2", "--lengths", "fixed"], "--seeds", "1 with --offline"),
    (["--requests", "10", "--offline", "--arrival", "gamma", "--cv", "2"], "--arrival", "no value with --offline"),
    (["--requests", "10", "--profile", "m-mid"], "--profile", "no value with --requests"),
    (["--requests", "10", "--shared-prefix", "64"], "--shared-prefix", "no value with --requests"),
    (["--requests", "10", "--lengths", "fixed:0,5"], "--lengths", "fixed:P,O"),
    (["--horizon", "60", "--lengths", "fixed:12"], "--lengths", "fixed:P,O"),
    (["--offline"], "--offline", "with --requests N"),
    (["--drain"], "--drain", "with --trace only"),
])
def test_bad_benchmark_flags_are_named_and_refused(capsys, extra, flag, allowed):
    rc, out, err = run(capsys, "simulate", *SCEN, *PLAN, *extra)
    assert rc == 2 and "Traceback" not in err
    assert f"error: {flag}: got " in err and allowed in err


def test_offline_needs_instance_counts(capsys):
    rc, _, err = run(capsys, "simulate", *SCEN, "--gpu", "H100", "--precision", "FP8", "--requests", "5", "--offline")
    assert rc == 2 and "error: --instances: got None; allowed: an instance count with --offline" in err


@pytest.mark.parametrize("extra, flag", [
    (["--requests", "10"], "--requests"),
    (["--drain", "--seeds", "2"], "--seeds"),
    (["--drain", "--horizon", "100"], "--horizon"),
    (["--drain", "--offline"], "--drain"),
])
def test_bad_trace_benchmark_flags(capsys, extra, flag, tmp_path):
    trace = _trace(tmp_path / "t.csv", [i * 0.5 for i in range(20)])
    rc, _, err = run(capsys, "simulate", "--trace", trace, "--model", "llama-3.1-8b", "--ttft", "1", "--tpot", "0.05",
                     *PLAN, *extra)
    assert rc == 2 and f"error: {flag}: got " in err


@pytest.mark.parametrize("extra, flag", [(["--rate", "3"], "--rate"), (["--horizon", "50"], "--horizon"),
                                         (["--seeds", "2"], "--seeds")])
def test_bad_burst_flags(capsys, extra, flag, tmp_path):
    trace = _trace(tmp_path / "b.csv", [1.0] * 20)
    rc, _, err = run(capsys, "simulate", "--trace", trace, "--model", "llama-3.1-8b", "--ttft", "1", "--tpot", "0.05",
                     *PLAN, *extra)
    assert rc == 2 and f"error: {flag}: got " in err


def test_the_readme_offline_figure_is_the_commands(capsys):
    from pathlib import Path
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    sec = readme.split("### The benchmarks people run")[1].split("### ")[0]
    cmd = next(line for line in sec.splitlines() if line.startswith("fastsim simulate") and "--offline" in line)
    (rec,) = sim_json(capsys, *cmd.split()[2:])["runs"]
    text = " ".join(sec.split())
    assert f"prints {rec['output_tokens_per_s']:,.0f} output tokens/s over a makespan of {rec['makespan_s']:.1f} s" in text


def test_pooled_means_weigh_each_seed_by_its_measured_requests(capsys):
    runs = sim_json(capsys, *SCEN, *PLAN, "--rate", "8", "--horizon", "60", "--seeds", "2")["runs"]
    a, b, pooled = runs
    assert pooled["seed_index"] == "all" and pooled["measured"] == a["measured"] + b["measured"]
    for k in ("ttft_mean_s", "e2e_mean_s"):
        assert pooled[k] == pytest.approx((a[k] * a["measured"] + b[k] * b["measured"]) / pooled["measured"],
                                          rel=1e-12)
