"""Outputs that say exactly what happened: strict JSON, notes in every format, inf vs n/a, honest labels."""
import json

import pytest

from cliutil import run


def strict_loads(text):
    """json.loads that refuses NaN, Infinity and -Infinity (as strict parsers do)."""
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


SIM = ("simulate", "--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--instances", "2")

#: One invocation of every command, small enough for the test suite.
COMMANDS = {
    "plan": ("plan", "--scenario", "chat", "--top-k", "1", "--seeds", "1", "--horizon", "60"),
    "plan-no-verify": ("plan", "--scenario", "chat", "--no-verify", "--top-k", "3"),
    "simulate": SIM + ("--rate", "0.05", "--horizon", "60"),
    "simulate-seeds": SIM + ("--horizon", "60", "--seeds", "2"),
    "capacity": ("capacity", "--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--instances", "1",
                 "--seeds", "2", "--horizon", "120", "--tol", "0.1"),
    "ledger": ("ledger", "--rate", "1000", "--output-tokens", "250", "--prefill", "0", "2048"),
    "ladder": ("ladder",),
    "whatif": ("whatif", "--no-verify", "--study", "traffic", "--study", "fp8"),
    "sweep": ("sweep", "--axis", "gpu=B200,H100", "--axis", "tp=1", "--verify", "all", "--seeds", "1",
              "--horizon", "60"),
    "bench": ("bench", "--quick"),
}


def _null_paths(obj, path=""):
    """Every null in a JSON document, as a path."""
    if obj is None:
        yield path
    elif isinstance(obj, dict):
        for k, v in obj.items():
            if k != "null_reasons":
                yield from _null_paths(v, f"{path}.{k}" if path else k)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _null_paths(v, f"{path}[{i}]")


@pytest.fixture(scope="module")
def json_outputs():
    """stdout of every command with --format json (run once for the module)."""
    import contextlib
    import io
    from fastsim.cli import main
    out = {}
    for name, argv in COMMANDS.items():
        buf, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
            rc = main(list(argv) + ["--format", "json"])
        assert rc == 0, (name, err.getvalue())
        out[name] = buf.getvalue()
    return out


# ---- 1. strict JSON ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_prints_strict_json(json_outputs, name):
    text = json_outputs[name]
    assert "NaN" not in text and "Infinity" not in text
    strict_loads(text)


def test_idle_instance_mean_batch_is_null_with_a_reason(capsys):
    """The issue's command: the second instance never runs a step at 0.05 req/s for 60 s."""
    rc, out, _ = run(capsys, *COMMANDS["simulate"], "--format", "json")
    assert rc == 0
    (rec,) = strict_loads(out)["runs"]
    assert rec["mean_batch"] == [1.0, None]
    assert rec["null_reasons"]["mean_batch"] == "not applicable for instance 1: it ran no step"


def _reason_for(doc, path):
    """The null_reasons entry that covers ``path`` (a dotted path with [i] indices)."""
    parts = path.replace("[", ".[").split(".")
    node, reasons = doc, None
    for p in parts:
        if isinstance(node, dict) and "null_reasons" in node:
            reasons = (node["null_reasons"], p)
        node = node[int(p[1:-1])] if p.startswith("[") else node[p]
    return reasons[0].get(reasons[1]) if reasons else None


@pytest.mark.parametrize("name", sorted(set(COMMANDS) - {"bench"}))
def test_every_null_says_why(json_outputs, name):
    doc = strict_loads(json_outputs[name])
    nulls = list(_null_paths(doc))
    for path in nulls:
        why = _reason_for(doc, path)
        assert why and why.startswith(("infinite", "not applicable")), (path, why)


# ---- 2. notes in machine formats ---------------------------------------------------------------

#: The top-level key of each command's records in its JSON object.
KEYS = {"plan": "plans", "plan-no-verify": "plans", "simulate": "runs", "simulate-seeds": "runs",
        "ledger": "rows", "ladder": "levels", "whatif": "studies", "sweep": "rows"}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_json_output_is_one_object_with_notes(json_outputs, name):
    doc = strict_loads(json_outputs[name])
    assert isinstance(doc, dict) and isinstance(doc["notes"], list)
    assert all(isinstance(n, str) for n in doc["notes"])
    if name in KEYS:
        assert doc[KEYS[name]]


def test_simulate_trace_notes_reach_json_and_csv(capsys):
    argv = ("simulate", "--trace", "azure-code", "--model", "llama-3.1-70b", "--ttft", "2", "--tpot", "0.1",
            "--gpu", "B200", "--precision", "FP8", "--instances", "2", "--seeds", "2")
    rc, out, _ = run(capsys, *argv, "--format", "json")
    assert rc == 0
    notes = strict_loads(out)["notes"]
    assert "a trace replays once over its own duration: --seeds and --horizon do not apply" in notes
    assert any(n.startswith("trace azure-code: 8,819 requests") for n in notes)
    rc, out, _ = run(capsys, *argv, "--format", "csv")
    import csv
    import io
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 1 and strict_loads(rows[0]["notes"]) == notes


def test_plan_notes_in_json_not_only_on_stderr(capsys):
    rc, out, err = run(capsys, "plan", "--scenario", "chat", "--no-verify", "--top-k", "1", "--horizon", "60",
                       "--format", "json")
    assert rc == 0
    notes = strict_loads(out)["notes"]
    # nothing is simulated: no note on a short horizon, one that --horizon does not apply
    assert not any(n.startswith("--horizon 60 s is short") for n in notes)
    assert "--no-verify ranks the plans analytically and simulates nothing: --horizon does not apply" in notes
    rc, out, _ = run(capsys, "plan", "--scenario", "chat", "--no-verify", "--top-k", "1", "--horizon", "60",
                     "--format", "csv")
    import csv
    import io
    rows = list(csv.DictReader(io.StringIO(out)))
    assert strict_loads(rows[0]["notes"]) == notes


def test_plan_with_no_feasible_configuration_keeps_its_note_in_csv(capsys):
    rc, out, _ = run(capsys, "plan", "--scenario", "chat", "--tpot", "0.001", "--no-verify", "--format", "csv")
    assert rc == 0
    import csv
    import io
    (row,) = list(csv.DictReader(io.StringIO(out)))
    assert strict_loads(row["notes"])[0].startswith("no configuration of the grid meets these SLOs analytically")


def test_from_plan_reads_the_plan_object(capsys, tmp_path):
    rc, out, _ = run(capsys, "plan", "--scenario", "chat", "--no-verify", "--top-k", "2", "--format", "json")
    f = tmp_path / "plans.json"
    f.write_text(out)
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", "--from-plan", str(f), "--plan-index", "1",
                       "--horizon", "30", "--format", "json")
    assert rc == 0, err
    second = strict_loads(f.read_text())["plans"][1]
    assert strict_loads(out)["runs"][0]["plan"].startswith(f"{second['gpu']} {second['precision']} colocated, ")
    assert strict_loads(out)["runs"][0]["plan"].endswith(f"({second['gpus']} GPUs)")


# ---- 3. inf and n/a ------------------------------------------------------------------------------

def test_overloaded_percentiles_read_inf_with_an_infinite_reason(capsys):
    argv = ("simulate", "--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--instances", "1",
            "--rate", "40", "--horizon", "120")
    rc, out, _ = run(capsys, *argv)
    assert rc == 0
    row = out.splitlines()[3].split()
    assert row[4:8] == ["inf", "inf", "inf", "inf"]                  # TTFT P50 / P90 / P99, TPOT P90
    assert ("note: TTFT P90 inf (seed 0): infinite: more than 10% of the measured requests got no first "
            "token by the horizon (rejected or unfinished)") in out
    rc, out, _ = run(capsys, *argv, "--format", "json")
    (rec,) = strict_loads(out)["runs"]
    assert rec["ttft_p90_s"] is None and rec["null_reasons"]["ttft_p90_s"].startswith("infinite: more than 10%")
    assert rec["null_reasons"]["tpot_p90_s"].startswith("infinite: more than 10% of the measured requests with more")


def test_one_token_outputs_read_n_a_with_a_not_applicable_reason(capsys, tmp_path):
    trace = tmp_path / "one_token.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     + "".join(f"{i * 0.5},{300 + i},1\n" for i in range(200)))
    argv = ("simulate", "--trace", str(trace), "--model", "llama-3.1-8b", "--ttft", "1", "--tpot", "0.05",
            "--gpu", "H100", "--precision", "FP8", "--instances", "1")
    rc, out, _ = run(capsys, *argv)
    assert rc == 0
    row = out.splitlines()[3].split()
    assert row[3] == "1.000" and row[7] == "n/a" and "inf" not in row
    assert ("note: TPOT P90 n/a (seed 0): not applicable: no measured request has more than one output token "
            "(TPOT needs two)") in out
    rc, out, _ = run(capsys, *argv, "--format", "json")
    (rec,) = strict_loads(out)["runs"]
    assert rec["tpot_p90_s"] is None and rec["ttft_p90_s"] > 0
    assert rec["null_reasons"]["tpot_p90_s"].startswith("not applicable")


def test_sweep_json_lines_are_strict_and_read_back_infinite(capsys, tmp_path):
    from fastsim.sweep import read_table
    out = tmp_path / "t.jsonl"
    rc, _, err = run(capsys, "sweep", "--axis", "gpu=H100", "--axis", "tp=1", "--out", str(out))
    assert rc == 0, err
    lines = [strict_loads(ln) for ln in out.read_text().splitlines()]
    bf16 = next(r for r in lines if r["precision"] == "BF16" and r["mode"] == "colocated")
    assert bf16["usd_per_million_output_tokens"] is None
    assert bf16["null_reasons"]["usd_per_million_output_tokens"] == ("infinite: the configuration is infeasible "
                                                                     "(see reason)")
    df = read_table(str(out))
    row = df[(df.precision == "BF16") & (df["mode"] == "colocated")].iloc[0]
    assert row.usd_per_million_output_tokens == float("inf") and row.sim_attainment != row.sim_attainment  # NaN


# ---- 4. the capacity estimate lies inside its interval -------------------------------------------

def test_capacity_estimate_inside_its_bracket_and_interval(capsys):
    """The issue's command (its estimate once printed outside its interval): bracket and interval pinned."""
    argv = ("capacity", "--scenario", "chat", "--gpu", "H100", "--precision", "FP8", "--tp", "2", "--instances", "2",
            "--horizon", "3600")
    rc, out, _ = run(capsys, *argv, "--format", "json")
    assert rc == 0
    res = strict_loads(out)
    lo, hi = res["bracket_req_per_s"]
    ci_lo, ci_hi = res["ci95_req_per_s"]
    assert (round(lo, 3), round(hi, 3), round(ci_lo, 3), round(ci_hi, 3)) == (20.849, 20.992, 20.815, 20.95)
    assert round(res["rate_req_per_s"], 3) == 20.88
    assert lo <= res["rate_req_per_s"] <= hi and ci_lo <= res["rate_req_per_s"] <= ci_hi
    assert res["estimate_in_ci"] is True and res["notes"] == [
        "step constants: SPEC §3's (the default scheduler; --policy trtllm runs on the constants fitted to "
        "TensorRT-LLM measurements, --policy vllm runs on the constants fitted to vLLM measurements)"]


def test_capacity_estimate_outside_its_interval_is_explained():
    from fastsim._output import strict
    from fastsim.cli import _capacity_notes
    from fastsim.search import CapacityResult
    import numpy as np
    res = CapacityResult(10.5, (10.0, 11.0), (10.6, 10.9), [(10.0, 0.95, False, True), (11.0, 0.8, False, False)],
                         np.ones((2, 4)), 12.0, 4, 600.0)
    assert not res.estimate_in_ci
    (note,) = _capacity_notes(res)
    assert note.startswith("the estimate 10.500 req/s lies outside the 95% interval 10.600 - 10.900: both come "
                           "from the same estimator")
    assert strict(res.to_dict())["estimate_in_ci"] is False


# ---- 5. capacity shows its probes as they finish ------------------------------------------------

CAP = ("capacity", "--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--instances", "1",
       "--seeds", "2", "--horizon", "120", "--tol", "0.1")


def test_capacity_prints_each_probe_as_it_finishes(capsys, monkeypatch):
    import fastsim.search as S
    seen = []
    real = S.max_sustainable_rate

    def spy(*a, on_probe=None, **kw):
        def on(*p):
            on_probe(*p)
            seen.append(capsys.readouterr().out)      # what the terminal shows when the probe ends
        return real(*a, on_probe=on, **kw)
    monkeypatch.setattr(S, "max_sustainable_rate", spy)
    rc, out, _ = run(capsys, *CAP)
    assert rc == 0 and len(seen) == 4
    assert seen[0].splitlines()[-1].split() == ["1", "16.408", "0.043", "no", "FAIL"]
    assert seen[1].split() == ["2", "13.126", "0.971", "no", "pass"]
    assert out.startswith("max sustainable rate: 14.090 req/s")


def test_capacity_bar_per_probe_on_a_terminal_only(capsys, monkeypatch):
    rc, _, err = run(capsys, *CAP)
    assert rc == 0 and "probe 1 at" not in err
    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    rc, out, err = run(capsys, *CAP)
    assert rc == 0
    assert "probe 1 at 16.408 req/s" in err and "probe 4 at 13.947 req/s" in err and "0/2 [" in err
    assert " at 16.408 req/s" not in out                              # bars go to stderr, never stdout


def test_capacity_runs_in_batches_give_the_same_probes():
    from fastsim.analytic import Demand, plan_for
    from fastsim.catalog import default_catalog
    from fastsim.search import SLO, max_sustainable_rate
    cat = default_catalog()
    s = cat.scenario("chat")
    plan = plan_for(s.model, Demand.from_scenario(s), gpu="B200", precision="FP8", tp=1, instances=1)
    kw = dict(seeds=4, horizon_s=120.0, rel_tol=0.1)
    counts = []
    one = max_sustainable_rate(plan, s, SLO(s.ttft_s, s.tpot_s), **kw)
    batched = max_sustainable_rate(plan, s, SLO(s.ttft_s, s.tpot_s), on_runs=counts.append, **kw)
    assert batched.probes == one.probes and batched.ci95 == one.ci95
    assert sum(counts) == 4 * len(one.probes)


def test_capacity_of_a_plan_the_screen_calls_infeasible(capsys):
    argv = ("capacity", "--scenario", "chat", "--gpu", "H100", "--precision", "BF16", "--tp", "4", "--instances", "1",
            "--tpot", "0.02", "--seeds", "2", "--horizon", "120", "--tol", "0.1")
    rc, out, _ = run(capsys, *argv)
    assert rc == 0
    summary = next(ln for ln in out.splitlines() if ln.startswith("max sustainable rate"))
    assert summary.endswith("the analytic screen finds this plan infeasible (no batch meets the TPOT target), "
                            "so there is no ratio")
    assert "nan" not in out and "analytic 0.000" not in out
    rc, out, _ = run(capsys, *argv, "--format", "json")
    res = strict_loads(out)
    assert res["analytic_feasible"] is False
    assert res["analytic_infeasible_reason"] == "no batch meets the TPOT target"
    assert res["simulated_ratio"] is None and res["analytic_ratio"] is None
    assert res["null_reasons"]["simulated_ratio"].startswith("not applicable: the analytic screen finds")


def test_capacity_csv_probes_column_is_json(capsys):
    import csv
    import io
    rc, out, _ = run(capsys, *CAP, "--format", "csv")
    (row,) = list(csv.DictReader(io.StringIO(out)))
    probes = strict_loads(row["probes"])
    assert [round(p["rate_req_per_s"], 3) for p in probes] == [16.408, 13.126, 14.767, 13.947]
    assert probes[1]["passed"] is True and strict_loads(row["bracket_req_per_s"])[0] == probes[3]["rate_req_per_s"]


# ---- 6. labels ------------------------------------------------------------------------------------

def test_busy_fraction_and_utilisation_of_the_chat_plan_at_60_percent_load(capsys):
    """Chat: 20 req/s on 2 x B200 FP8 TP1 (analytic capacity 32.8 req/s, 61% load)."""
    rc, out, _ = run(capsys, *SIM, "--format", "json")
    assert rc == 0
    (rec,) = strict_loads(out)["runs"]
    assert [round(x, 2) for x in rec["busy_fraction"]] == [1.0, 1.0]
    assert [round(x, 2) for x in rec["utilisation"]] == [0.6, 0.62]
    rc, out, _ = run(capsys, *SIM)
    head = out.splitlines()[1].split()
    assert "utilisation" in head and out.splitlines()[1].count("busy fraction") == 1
    assert out.splitlines()[3].split()[-5:] == ["1.00", "1.00", "0.60", "0.62", "pass"]


def test_busy_fraction_and_utilisation_are_defined_in_help_and_readme(capsys):
    from pathlib import Path
    rc, out, _ = run(capsys, "simulate", "--help")
    text = " ".join(out.split())
    assert "busy fraction = share of the horizon in which the instance runs a step" in text
    assert "utilisation = accepted requests routed to the instance per second / its analytic capacity" in text
    assert "arriving in the middle 60% of the arrival time span" in text
    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())
    assert "busy fraction: the share of the horizon in which the instance runs a step" in readme
    assert ("utilisation: accepted requests routed to the instance per second divided by its analytic capacity"
            in readme)
    assert "those arriving in the middle 60% of the arrival time span" in readme
    assert "middle 60% of arrivals" not in readme


def test_measured_window_is_the_middle_of_the_time_span(capsys):
    """azure-code: 6,102 of its 8,819 requests arrive in the middle 60% of its time span."""
    rc, out, _ = run(capsys, "simulate", "--trace", "azure-code", "--model", "llama-3.1-70b", "--ttft", "2",
                     "--tpot", "0.1", "--gpu", "B200", "--precision", "FP8", "--instances", "2", "--format", "json")
    assert rc == 0
    (rec,) = strict_loads(out)["runs"]
    assert (rec["requests"], rec["measured"]) == (8819, 6102)


def test_plan_label_names_instances_and_gpus_apart():
    from fastsim.analytic import Demand, plan_for
    from fastsim.catalog import default_catalog
    cat = default_catalog()
    s = cat.scenario("chat")
    d = Demand.from_scenario(s)
    assert plan_for(s.model, d, gpu="B200", precision="FP8", tp=1, instances=2).describe() == \
        "B200 FP8 colocated, 2 instances of TP1 (2 GPUs)"
    assert plan_for(s.model, d, gpu="H100", precision="FP8", tp=2, instances=1).describe() == \
        "H100 FP8 colocated, 1 instance of TP2 (2 GPUs)"
    dis = plan_for(s.model, d, gpu="H200", precision="FP8", mode="disaggregated", prefill_tp=1, decode_tp=4,
                   prefill_instances=3, decode_instances=1)
    assert dis.describe() == "H200 FP8 disaggregated, prefill 3 instances of TP1 + decode 1 instance of TP4 (7 GPUs)"


def test_lecture_is_explained_where_it_is_cited(capsys):
    rc, out, _ = run(capsys, "whatif", "--no-verify", "--study", "tpot")
    assert rc == 0
    assert ("note: lecture columns: the figures printed by lecture 16 ('wrap-up and deployment planner') of the "
            "LLM-systems course whose planner fastsim reproduces") in out
    rc, out, _ = run(capsys, "simulate", "--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--horizon", "30")
    assert "lecture" not in out
    rc, out, _ = run(capsys, "plan", "--scenario", "chat", "--no-verify", "--mean-lengths")
    assert "lecture" not in out and "selects plans whose longer requests miss it" in out


# ---- 7. traces read as written --------------------------------------------------------------------

def _jsonl(path, n=1000, gap=1.01, zero_every=None):
    with open(path, "w") as f:
        for i in range(n):
            o = 0 if zero_every and i % zero_every == 7 else 200
            f.write(json.dumps({"timestamp": round(i * gap, 3), "input_length": 500, "output_length": o}) + "\n")
    return str(path)


TRACE_PLAN = ("--model", "llama-3.1-8b", "--ttft", "1", "--tpot", "0.05", "--gpu", "H100", "--precision", "FP8",
              "--instances", "1")


def test_jsonl_in_seconds_read_as_milliseconds_warns(capsys, tmp_path):
    trace = _jsonl(tmp_path / "sec.jsonl")
    rc, out, err = run(capsys, "simulate", "--trace", trace, *TRACE_PLAN, "--format", "json")
    assert rc == 0
    warn = ("warning: trace sec: timestamps read as milliseconds imply 991.1 req/s, implausibly high for one "
            "deployment (outside 0.01 - 200 req/s); if they are in seconds, use --time-unit s")
    assert warn in err.splitlines() and warn in strict_loads(out)["notes"]
    rc, out, err = run(capsys, "simulate", "--trace", trace, *TRACE_PLAN, "--time-unit", "s", "--format", "json")
    assert rc == 0 and "warning" not in err
    doc = strict_loads(out)
    assert "trace sec: 1,000 requests over 1,009.0 s (0.99 req/s)" in doc["notes"]
    assert doc["runs"][0]["horizon_s"] == pytest.approx(999 * 1.01, rel=1e-9)


def test_csv_in_milliseconds_with_time_unit(capsys, tmp_path):
    from fastsim.workload import read_trace, trace_rate_warning
    trace = tmp_path / "ms.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(f"{i * 500},{300},{50}\n" for i in range(100)))
    wl = read_trace(str(trace))
    assert wl.time_unit == "s" and wl.duration_s == 49500.0
    assert trace_rate_warning(wl).startswith("trace ms: timestamps read as seconds imply 0.00202 req/s, implausibly low")
    wl = read_trace(str(trace), time_unit="ms")
    assert wl.duration_s == 49.5 and trace_rate_warning(wl) == ""


def test_time_unit_refused_for_date_times():
    from fastsim.errors import FastsimInputError
    from fastsim.workload import read_trace
    with pytest.raises(FastsimInputError, match=r"time_unit: got 's'; allowed: no time unit \(None\) for the built-in trace azure-conv"):
        read_trace("azure-conv", time_unit="s")


def test_zero_output_rows_name_the_first_or_are_skipped(capsys, tmp_path):
    trace = _jsonl(tmp_path / "failed.jsonl", zero_every=100)
    argv = ("simulate", "--trace", trace, *TRACE_PLAN, "--time-unit", "s")
    rc, _, err = run(capsys, *argv)
    assert rc == 2
    assert err.strip() == (f"fastsim simulate: error: {trace}, line 8, output_length: got 0; allowed: an integer >= 1 "
                           "(O counts the first token; a request with no output cannot be served); or --skip-invalid "
                           "(skip_invalid=True) to drop such rows")
    rc, out, err = run(capsys, *argv, "--skip-invalid", "--format", "json")
    assert rc == 0, err
    doc = strict_loads(out)
    assert "trace failed: --skip-invalid dropped 10 rows: 10 with output_length 0 (first at line 8)" in doc["notes"]
    assert doc["runs"][0]["requests"] == 990


def test_skip_invalid_in_csv_traces_names_both_lengths():
    import os
    import tempfile
    from fastsim.workload import read_trace
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "t.csv")
        with open(p, "w") as f:
            f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n0,10,5\n1,0,5\n2,10,0\n3,0,0\n4,10,5\n")
        wl = read_trace(p, skip_invalid=True)
    assert wl.n == 2
    assert wl.dropped == ((3, "ContextTokens 0"), (4, "GeneratedTokens 0"), (5, "ContextTokens 0, GeneratedTokens 0"))


def test_sweep_reads_traces_with_the_same_flags(capsys, tmp_path):
    trace = _jsonl(tmp_path / "failed.jsonl", zero_every=100)
    argv = ("sweep", "--axis", f"trace={trace}", "--axis", "model=llama-3.1-8b", "--axis", "ttft_s=1",
            "--axis", "tpot_s=0.05", "--axis", "gpu=H100", "--axis", "tp=1")
    rc, _, err = run(capsys, *argv)
    assert rc == 2 and "line 8, output_length: got 0" in err
    rc, out, err = run(capsys, *argv, "--skip-invalid", "--time-unit", "s", "--format", "json")
    assert rc == 0 and "warning" not in err
    doc = strict_loads(out)
    assert doc["notes"] == ["trace failed: --skip-invalid dropped 10 rows: 10 with output_length 0 (first at line 8)",
                            "step constants: SPEC §3's (this command models no engine's scheduler)"]
    assert doc["rows"][0]["rate_req_per_s"] == pytest.approx(990 / (999 * 1.01), rel=1e-12)


# ---- 8. ledger --rate counts the steps a request needs -------------------------------------------

def test_ledger_rate_counts_output_tokens_over_the_batch(capsys):
    """5 req/s of 250-token outputs on a batch-64 decode step of 13.181 ms: 0.26, not 0.07."""
    rc, out, _ = run(capsys, "ledger", "--rate", "5", "--output-tokens", "250", "--format", "json")
    assert rc == 0
    b1, b64 = strict_loads(out)["rows"]
    assert round(b64["utilization"], 2) == 0.26 and b64["utilization"] == pytest.approx(5 * 250 * b64["step_s"] / 64)
    assert round(b1["utilization"], 2) == 10.60
    assert b64["queue_wait_s"] is None and b64["null_reasons"]["queue_wait_s"].startswith("not applicable: a batched")
    rc, out, _ = run(capsys, "ledger", "--batch", "1", "--prefill", "2048", "--rate", "20", "--format", "json")
    (pf,) = strict_loads(out)["rows"]
    assert round(pf["utilization"], 2) == 1.75 and pf["queue_wait_s"] is None
    assert pf["null_reasons"]["queue_wait_s"] == "infinite: utilization >= 1, the queue grows without bound"
    rc, _, err = run(capsys, "ledger", "--rate", "5")
    assert rc == 2 and err.startswith("fastsim ledger: error: --output-tokens: got None; allowed: the mean output")


def test_ledger_rate_help_says_what_it_computes(capsys):
    rc, out, _ = run(capsys, "ledger", "--help")
    text = " ".join(out.split())
    assert "utilization = rate x output tokens x step / batch for decode" in text
    assert "rate x step / batch for prefill" in text


# ---- 9. small things users look for --------------------------------------------------------------

README = __import__("pathlib").Path(__file__).resolve().parents[1] / "README.md"


def _readme_block(lang, containing):
    import re
    blocks = re.findall(r"```" + lang + r"\n(.*?)```", README.read_text(), flags=re.S)
    return next(b for b in blocks if containing in b)


def test_version(capsys):
    import fastsim
    rc, out, _ = run(capsys, "--version")
    assert rc == 0 and out == f"fastsim {fastsim.__version__}\n" and fastsim.__version__ == "0.1.0"


def test_readme_catalog_example_works(capsys, tmp_path):
    f = tmp_path / "support.toml"
    f.write_text(_readme_block("toml", "[scenarios.support]"))
    rc, out, err = run(capsys, "plan", "--scenario", "support", "--catalog", str(f), "--no-verify", "--gpu", "H100",
                       "--format", "json")
    assert rc == 0, err
    plans = strict_loads(out)["plans"]
    assert plans and all(p["price_usd_per_gpu_hour"] == 2.5 and p["model"] == "llama-3.1-8b" for p in plans)
    assert plans[0]["rate_req_per_s"] == 10 and plans[0]["tpot_slo_s"] == 0.04


def test_plan_and_sweep_name_costs_and_prices_alike(json_outputs):
    plan = strict_loads(json_outputs["plan-no-verify"])["plans"][0]
    row = next(r for r in strict_loads(json_outputs["sweep"])["rows"] if r["gpu"] == plan["gpu"]
               and r["precision"] == plan["precision"] and r["mode"] == plan["mode"] and r["tp"] == plan["tp"])
    money = {k for k in row if "usd" in k}
    assert money == {"price_usd_per_gpu_hour", "usd_per_hour", "usd_per_million_output_tokens",
                     "efficiency_usd_per_million_output_tokens"}
    assert money <= set(plan) and "price_usd_per_hour" not in plan
    for k in money:
        assert plan[k] == pytest.approx(row[k]), k
    assert plan["usd_per_hour"] == plan["gpus"] * plan["price_usd_per_gpu_hour"]


def test_readme_python_snippet_prints_the_whole_table(capsys):
    code = _readme_block("python", "plan_deployment")
    exec(compile(code.replace("seeds=4)", "seeds=1, horizon_s=60.0)"), "README", "exec"), {})
    out = capsys.readouterr().out
    assert "..." not in out
    for col in ("usd_per_million_output_tokens", "price_usd_per_gpu_hour", "verified_attainment", "tpot_slo_s"):
        assert col in out
    assert len(out.splitlines()) == 6                                  # header and five plans


# ---- 10. the first run says it is compiling ------------------------------------------------------

def _fastsim_kernel():
    """A fresh (uncached) numba function that the notice counts as one of fastsim's simulator kernels."""
    import numba

    def add_one_nb(x):
        return x + 1
    add_one_nb.__module__ = "fastsim.sim._notice_test"
    return numba.njit(add_one_nb)


class _TTY:
    def __init__(self, tty):
        self.text, self.tty = "", tty

    def write(self, s):
        self.text += s

    def flush(self):
        pass

    def isatty(self):
        return self.tty


@pytest.mark.parametrize("tty", [False, True])
def test_compile_notice_one_line_and_a_spinner_on_a_terminal(monkeypatch, tty):
    import time
    from fastsim._compile_notice import compile_notice
    monkeypatch.setenv("FASTSIM_COMPILE_NOTICE", "1")
    stream = _TTY(tty)
    f = _fastsim_kernel()
    with compile_notice(stream):
        time.sleep(0.01)
        assert f(1) == 2
        assert f(2) == 3                                 # compiled once: no second line
    lines = stream.text.split("\n")
    assert lines[0] == "fastsim: compiling simulator kernels, once per install, about 15 s"
    assert stream.text.count("fastsim: compiling") == 1
    assert ("\rcompiling simulator kernels: 00:0" in stream.text) is tty


def test_compile_notice_silent_when_cached_or_switched_off(monkeypatch):
    from fastsim._compile_notice import compile_notice
    f = _fastsim_kernel()
    monkeypatch.setenv("FASTSIM_COMPILE_NOTICE", "0")
    stream = _TTY(True)
    with compile_notice(stream):
        f(1)
    monkeypatch.setenv("FASTSIM_COMPILE_NOTICE", "1")
    with compile_notice(stream):
        f(1)                                             # already compiled: numba fires no event
    assert stream.text == ""


def test_first_command_on_a_cold_cache_says_it_compiles(tmp_path):
    """A fresh numba cache: the line on stderr; the same command again is silent."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), FASTSIM_COMPILE_NOTICE="1")
    argv = [sys.executable, "-m", "fastsim", "plan", "--scenario", "chat", "--no-verify", "--top-k", "1",
            "--format", "json"]
    first = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    assert first.stderr.splitlines()[0] == "fastsim: compiling analytic kernels, once per install, about 3 s"
    strict_loads(first.stdout)
    again = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    assert "compiling" not in again.stderr and again.stdout == first.stdout


# ---- every command's CSV ------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_csv_carries_notes_and_strict_json_cells(capsys, name):
    import csv
    import io
    rc, out, err = run(capsys, *COMMANDS[name], "--format", "csv")
    assert rc == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rows and all("notes" in r for r in rows)
    notes = strict_loads(rows[0]["notes"])
    assert isinstance(notes, list) and all(strict_loads(r["notes"]) == notes for r in rows)
    for r in rows:
        for k, v in r.items():
            assert v.lower() != "nan", (k, v)
            if v and v[0] in "[{":
                strict_loads(v)                          # list and object cells are JSON, not Python reprs


def test_plan_csv_writes_integers_as_integers(capsys):
    import csv
    import io
    rc, out, err = run(capsys, "plan", "--scenario", "chat", "--no-verify", "--format", "csv")
    assert rc == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    first = rows[0]
    assert (first["gpu"], first["mode"], first["layout"]) == ("B200", "colocated", "tp")
    assert (first["tp"], first["instances"], first["chunk_tokens"], first["gpus"], first["max_batch"]) == (
        "1", "2", "512", "2", "0")
    dis = next(r for r in rows if r["mode"] == "disaggregated")
    # a column a disaggregated plan has no value in stays an integer column, empty there
    assert dis["tp"] == dis["instances"] == dis["chunk_tokens"] == ""
    assert all(dis[k].isdigit() for k in ("prefill_tp", "decode_tp", "prefill_instances", "decode_instances", "gpus"))
    for r in rows:
        for k in ("tp", "instances", "chunk_tokens", "gpus", "prefill_tp", "decode_instances"):
            assert "." not in r[k], (k, r[k])
    # floats stay floats, as in JSON
    assert first["price_usd_per_gpu_hour"] == "4.0" and first["rate_req_per_s"] == "20.0"


def test_csv_frame_integer_columns_are_nullable_integers():
    from fastsim._output import csv_frame
    frame = csv_frame([{"n": 2, "x": 1.0, "b": True, "v": {"k": 3}},
                       {"n": None, "x": 2.5, "b": None, "v": None},
                       {"n": 4, "x": 3, "b": False, "v": {"k": 2 ** 62 + 1}}])
    assert str(frame["n"].dtype) == "Int64" and str(frame["v.k"].dtype) == "Int64"
    text = frame.to_csv(index=False).splitlines()
    assert text[0] == "n,x,b,v.k,v,notes"
    assert text[1:] == ['2,1.0,True,3,,[]', ',2.5,,,,[]', f'4,3.0,False,{2 ** 62 + 1},,[]']
