"""fastsim sweep refuses what it would ignore, contradict or overflow: one-line errors, exit status 2.

A new user's report: flags silently ignored or contradicted (--capacity, --top-k, --workers with
--scheduler), tracebacks (a bad --scheduler, an --out in a missing directory), grid values accepted
and computed wrongly (an empty or repeated [sweep] chunk_tokens, tp = 2.0, a model named twice),
read_table of a typo reading as an empty sweep, int64 overflow in the instance sizing, a CSV unlike
every other command's, and a table that hid rows --rows asked for.
"""
import csv
import io
import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from cliutil import run
from fastsim import sweep as SW
from fastsim.errors import FastsimInputError
from fastsim.sweep import run as sweep_run

ONE = ["--axis", "gpu=B200", "--axis", "precision=FP8", "--axis", "tp=1", "--axis", "mode=colocated"]
ONE_AXES = {"gpu": "B200", "precision": "FP8", "tp": 1, "mode": "colocated"}
FAST = ["--seeds", "1", "--horizon", "20"]
TRACE = ["--axis", "trace=azure-conv", "--axis", "model=llama-3.1-8b", "--axis", "ttft_s=1", "--axis", "tpot_s=0.05"]


def one_line_error(rc, out, err, *parts):
    """Exit status 2, nothing on stdout, one line on stderr holding every part, no traceback."""
    assert rc == 2, (out, err)
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fastsim sweep: error: "), err
    assert "Traceback" not in err
    for p in parts:
        assert p in lines[0], (p, lines[0])
    return lines[0]


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if the sweep computes its table or simulates anything."""
    def refuse(*a, **k):
        raise AssertionError("the sweep started working before refusing its input")
    monkeypatch.setattr(sweep_run, "analytic_table", refuse)
    monkeypatch.setattr(SW, "_run_task", refuse)


def grid_file(tmp_path, text, name="grid.toml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


# --- 1. flags ignored or contradicted -------------------------------------------------------------

def test_capacity_without_verification_is_refused(capsys, tmp_path, no_work):
    line = one_line_error(*run(capsys, "sweep", *ONE, "--capacity"), "--capacity: got True",
                          "--verify top-k-per-scenario or --verify all")
    assert "(sim max req/s: --capacity)" not in line
    one_line_error(*run(capsys, "sweep", *ONE, "--capacity", "--verify", "none"), "--capacity: got True")
    g = grid_file(tmp_path, '[axes]\ngpu = "B200"\n[sweep]\ncapacity = true\n')
    one_line_error(*run(capsys, "sweep", g), f"[sweep] capacity in {g}: got True", "verify top-k-per-scenario or all")
    with pytest.raises(FastsimInputError) as e:
        SW.SweepSettings(capacity=True)
    assert e.value.field == "capacity" and e.value.value is True
    with pytest.raises(FastsimInputError) as e:
        SW.run_sweep(ONE_AXES, capacity=True)
    assert e.value.field == "capacity"
    assert SW.SweepSettings(capacity=True, verify="all").capacity is True


def test_capacity_on_a_trace_grid_is_refused_saying_why(capsys, no_work):
    one_line_error(*run(capsys, "sweep", *TRACE, "--axis", "gpu=B200", "--verify", "all", "--capacity"),
                   "--capacity: got True", "scenario rows only")
    with pytest.raises(FastsimInputError) as e:
        SW.run_sweep({"trace": "azure-conv", "model": "llama-3.1-8b", "ttft_s": 1, "tpot_s": 0.05, "gpu": "B200"},
                     verify="all", capacity=True)
    assert e.value.field == "capacity" and "scenario rows only" in e.value.allowed


def test_top_k_without_top_k_verification_is_refused(capsys, tmp_path, no_work):
    one_line_error(*run(capsys, "sweep", *ONE, "--top-k", "5"), "--top-k: got 5",
                   "only with verify top-k-per-scenario", "verify none simulates none")
    one_line_error(*run(capsys, "sweep", *ONE, "--top-k", "5", "--verify", "all"), "--top-k: got 5",
                   "verify all simulates every feasible point")
    g = grid_file(tmp_path, '[axes]\ngpu = "B200"\n[sweep]\ntop_k = 2\n')
    one_line_error(*run(capsys, "sweep", g), f"[sweep] top_k in {g}: got 2")
    with pytest.raises(FastsimInputError) as e:
        SW.run_sweep(ONE_AXES, top_k=5)
    assert (e.value.field, e.value.value) == ("top_k", 5)


def test_top_k_with_top_k_verification_is_used(capsys, tmp_path, monkeypatch):
    g = grid_file(tmp_path, '[axes]\ngpu = "B200"\nprecision = "FP8"\ntp = [1, 2]\nmode = "colocated"\n'
                  '[sweep]\ntop_k = 1\n')
    calls = []
    real = SW._run_task
    monkeypatch.setattr(SW, "_run_task", lambda task: calls.append(task.points.shape[0]) or real(task))
    rc, out, err = run(capsys, "sweep", g, "--verify", "top-k-per-scenario", *FAST)
    assert rc == 0, err
    assert sum(calls) == 1 and out.startswith("2 points: 2 analytically feasible, 1 simulated")


def test_workers_and_scheduler_together_are_refused(capsys, no_work):
    one_line_error(*run(capsys, "sweep", *ONE, "--verify", "all", "--workers", "2", "--scheduler",
                        "tcp://127.0.0.1:8786"), "--workers: got 2", "not both")
    with pytest.raises(FastsimInputError) as e:
        SW.run_sweep(ONE_AXES, verify="all", workers=2, scheduler="tcp://127.0.0.1:8786")
    assert e.value.field == "--workers"


def test_keyword_settings_beside_a_settings_object_are_refused():
    with pytest.raises(FastsimInputError) as e:
        SW.run_sweep(ONE_AXES, settings=SW.SweepSettings(), verify="all")
    assert e.value.value == ["verify"]


def test_na_note_says_what_is_true(capsys):
    rc, out, err = run(capsys, "sweep", *ONE, "--verify", "all", *FAST)
    assert rc == 0, err
    assert "(sim max req/s: --capacity)" not in out
    assert ("note: n/a = not applicable: capacity not searched (sim max req/s; --capacity searches it for each "
            "simulated point)") in out


# --- 2. one-line errors, not tracebacks -----------------------------------------------------------

def test_a_scheduler_that_is_no_address_is_refused_before_work(capsys, no_work):
    pytest.importorskip("distributed")
    one_line_error(*run(capsys, "sweep", "--axis", "gpu=B200", "--verify", "all", "--scheduler", "garbage"),
                   "--scheduler: got 'garbage'", "missing port number")


def test_a_scheduler_that_does_not_answer_is_a_one_line_error(capsys):
    pytest.importorskip("distributed")
    import dask
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        one_line_error(*run(capsys, "sweep", *ONE, "--verify", "all", *FAST, "--scheduler", "tcp://127.0.0.1:1"),
                       "--scheduler: got 'tcp://127.0.0.1:1'", "connecting failed")


def test_an_output_in_a_missing_directory_is_refused_before_work(capsys, tmp_path, no_work):
    missing = tmp_path / "nonexistent" / "dir" / "x.csv"
    one_line_error(*run(capsys, "sweep", "--axis", "gpu=B200", "--out", str(missing)), f"--out: got '{missing}'",
                   f"{missing.parent} does not exist")
    assert not missing.parent.exists()
    d = tmp_path / "adir.csv"
    d.mkdir()
    one_line_error(*run(capsys, "sweep", "--axis", "gpu=B200", "--out", str(d)), "this path is a directory")
    f = tmp_path / "file"
    f.write_text("x")
    one_line_error(*run(capsys, "sweep", "--axis", "gpu=B200", "--out", str(f / "x.jsonl")),
                   f"{f} is not a directory")


def test_a_failed_refusal_leaves_the_previous_output(capsys, tmp_path):
    """A refused sweep (here: an instance count past the limit) changes no file."""
    out = tmp_path / "t.csv"
    assert run(capsys, "sweep", *ONE, "--out", str(out))[0] == 0
    before = out.read_bytes()
    rc, _, err = run(capsys, "sweep", *ONE, "--axis", "instances=4097", "--verify", "all", "--out", str(out))
    assert rc == 2 and "instances" in err
    assert out.read_bytes() == before


# --- 3. grid files --------------------------------------------------------------------------------

GRID = '[axes]\ngpu = "B200"\nprecision = "FP8"\ntp = 1\nmode = "colocated"\n'


@pytest.mark.parametrize("value, why", [("[]", "this one is empty"), ("[512, 512]", "this one repeats a size"),
                                        ("[512.0]", "512, not 512.0"), ("[0]", "from 1 to"),
                                        ("[2000000000]", "from 1 to 1,000,000,000")])
def test_sweep_chunk_tokens_must_be_distinct_integers(capsys, tmp_path, value, why):
    g = grid_file(tmp_path, GRID + f"[sweep]\nchunk_tokens = {value}\n")
    one_line_error(*run(capsys, "sweep", g), f"[sweep] chunk_tokens in {g}: got", "a non-empty list of distinct "
                   "integers", why)


def test_sweep_chunk_tokens_of_one_size_is_used(capsys, tmp_path):
    g = grid_file(tmp_path, GRID + "[sweep]\nchunk_tokens = [256]\n")
    rc, out, err = run(capsys, "sweep", g, "--format", "json")
    assert rc == 0, err
    import json
    (row,) = json.loads(out)["rows"]
    assert row["feasible"] and row["chunk_tokens"] == 256


def test_settings_chunk_tokens_refused_in_python():
    for bad in ((), (512, 512), (0,), (512.0,)):
        with pytest.raises(FastsimInputError) as e:
            SW.SweepSettings(chunk_tokens=bad)
        assert e.value.field == "chunk_tokens"


@pytest.mark.parametrize("axis, file_value, cli_value", [
    ("tp", "[1, 2.0]", "1,2.0"), ("chunk_tokens", "[512.0]", "512.0"), ("max_batch", "[8.0]", "8.0"),
    ("instances", "[2.0]", "2.0"), ("tp", "1e0", "1e0"),
])
def test_whole_numbers_as_floats_are_refused_alike_in_file_and_cli(capsys, tmp_path, axis, file_value, cli_value):
    """One rule: an integer axis takes integers written as integers, in the file as on the command line."""
    g = grid_file(tmp_path, f'[axes]\ngpu = "B200"\nprecision = "FP8"\nmode = "colocated"\n{axis} = {file_value}\n')
    a = one_line_error(*run(capsys, "sweep", g), f"axis {axis}: got ", "written as an integer")
    b = one_line_error(*run(capsys, "sweep", "--axis", "gpu=B200", "--axis", "mode=colocated", "--axis",
                            f"{axis}={cli_value}"), f"axis {axis}: got ", "written as an integer")
    assert a.split("allowed: ")[1] == b.split("allowed: ")[1]


def test_integers_still_accepted(capsys, tmp_path):
    g = grid_file(tmp_path, '[axes]\ngpu = "B200"\nprecision = "FP8"\nmode = "colocated"\ntp = [1, 2]\n'
                  'chunk_tokens = [512]\nmax_batch = [8]\n')
    rc, out, err = run(capsys, "sweep", g, "--axis", "instances=2")
    assert rc == 0, err and out.startswith("2 points")
    df = SW.analytic_table({"gpu": "B200", "precision": "FP8", "mode": "colocated", "tp": [np.int64(1), "2"],
                            "chunk_tokens": ["512"], "instances": [np.int32(2)]})
    assert list(df.tp) == [1, 2] and list(df.chunk_tokens) == [512, 512] and list(df.instances) == [2, 2]


def test_a_model_named_twice_is_refused_as_a_gpu_named_twice_is(capsys):
    one_line_error(*run(capsys, "sweep", "--axis", "model=llama-3.1-70b,LLAMA-3.1-70B"), "axis model: got "
                   "'LLAMA-3.1-70B'", "repeated", "'LLAMA-3.1-70B' and 'llama-3.1-70b' both name llama-3.1-70b")
    one_line_error(*run(capsys, "sweep", "--axis", "gpu=B200,b200"), "axis gpu: got 'B200'", "repeated")
    with pytest.raises(FastsimInputError) as e:
        SW.make_grid({"model": ["llama-3.1-70b", "llama-3.1-70b"]})
    assert e.value.field == "axis model"


# --- 4. read_table of a missing path --------------------------------------------------------------

@pytest.mark.parametrize("ext", ["csv", "jsonl", "json", "parquet"])
def test_read_table_of_a_missing_path_names_it(tmp_path, ext):
    # with or without pyarrow: a missing .parquet said "--out: ... needs pyarrow" where pyarrow is missing
    p = str(tmp_path / f"missing_typo.{ext}")
    with pytest.raises(FastsimInputError) as e:
        SW.read_table(p)
    assert e.value.field == "sweep table" and e.value.value == p and "file not found" in e.value.allowed


def test_resume_still_starts_where_no_output_exists(tmp_path):
    out = str(tmp_path / "t.csv")
    df = SW.run_sweep(ONE_AXES, out=out, resume=True)
    assert len(df) == 1 and len(SW.read_table(out)) == 1


# --- 5. huge values -------------------------------------------------------------------------------

TOO_MANY = "the target rate needs more than 4,096 instances"


def test_a_huge_rate_is_an_infeasible_point_not_an_overflow():
    df = SW.analytic_table({"gpu": "B200", "precision": "FP8", "tp": 1, "rate_req_per_s": [1e308, 20]})
    huge = df[df.rate_req_per_s == 1e308]
    assert len(huge) == 2 and set(huge["mode"]) == {"colocated", "disaggregated"}
    assert not huge.feasible.any() and huge.reason.str.startswith(TOO_MANY).all()
    assert (huge.gpus == 0).all() and (huge.capacity_req_per_s == 0).all() and (huge.usd_per_hour == 0).all()
    assert np.isinf(huge.usd_per_million_output_tokens).all()
    assert huge.instances.isna().all() and huge.prefill_instances.isna().all() and huge.decode_instances.isna().all()
    # the per-instance figures still stand
    assert (huge.instance_capacity_req_per_s > 0).all() and np.isfinite(huge.analytic_tpot_s).all()
    ok = df[df.rate_req_per_s == 20].set_index("mode")
    assert ok.loc["colocated", "gpus"] == 2 and ok.loc["colocated", "feasible"]


def test_sizing_up_to_the_maximum_is_exact():
    one = SW.analytic_table(ONE_AXES).iloc[0]
    cap = one.instance_capacity_req_per_s
    fits = SW.analytic_table(dict(ONE_AXES, rate_req_per_s=[cap * 4095.5, cap * 4096.5])).set_index("point")
    a, b = fits.loc[0], fits.loc[1]
    assert a.feasible and a.instances == 4096 and a.gpus == 4096 and a.usd_per_hour == 4096 * 4.0
    assert not b.feasible and b.reason.startswith(TOO_MANY) and b.gpus == 0 and pd.isna(b.instances)


def test_disaggregated_side_over_the_maximum_is_infeasible():
    df = SW.analytic_table({"gpu": "B200", "precision": "FP8", "mode": "disaggregated", "tp": 1,
                            "prefill_instances": [1], "rate_req_per_s": [1e12]})
    (r,) = df.itertuples()
    assert not r.feasible and r.reason.startswith(TOO_MANY) and r.gpus == 0
    assert r.prefill_instances == 1 and pd.isna(r.decode_instances)


@pytest.mark.parametrize("axis", ["instances", "prefill_instances", "decode_instances"])
def test_instance_axis_above_the_maximum_is_refused(capsys, axis, no_work):
    mode = "colocated" if axis == "instances" else "disaggregated"
    for value, verify in (("4097", "none"), ("4097", "all"), ("100000000000000000000", "none")):
        one_line_error(*run(capsys, "sweep", "--axis", "gpu=B200", "--axis", f"mode={mode}", "--axis",
                            f"{axis}={value}", "--verify", verify),
                       f"axis {axis}: got '{value}'", "an integer from 1 to 4,096 or 'auto'")


def test_the_limit_is_the_screens_and_the_capacity_commands():
    from fastsim.analytic import MAX_INSTANCES
    from fastsim.cli import MAX_INSTANCE_COUNT
    assert SW.MAX_INSTANCES == SW.grid.MAX_INSTANCES == MAX_INSTANCES == MAX_INSTANCE_COUNT == 4096


def test_a_point_whose_rate_needs_more_than_the_limit_is_infeasible_and_not_simulated(monkeypatch):
    def refuse(task):
        raise AssertionError("simulated")
    monkeypatch.setattr(SW, "_run_task", refuse)
    r = SW.run_sweep(dict(ONE_AXES, rate_req_per_s=200_000), verify="all").iloc[0]
    assert not r.feasible and r.reason.startswith(TOO_MANY) and not r.verified and pd.isna(r.instances)
    from fastsim.analytic import Demand, screen
    from fastsim.catalog import default_catalog
    cat = default_catalog()
    sc = cat.scenario("chat")
    ref = screen(sc.model, Demand.from_scenario(sc, rate_req_per_s=200_000), catalog=cat)
    row = ref[(ref.gpu == r.gpu) & (ref.precision == r.precision) & (ref.tp == r.tp) & (ref["mode"] == "colocated")].iloc[0]
    assert not row.feasible and "4,096" in row.reason


# --- 6. CSV as every command writes it ------------------------------------------------------------

def test_stdout_csv_writes_infinity_as_an_empty_cell_with_its_reason(capsys):
    rc, out, err = run(capsys, "sweep", "--axis", "gpu=A100", "--axis", "precision=FP8,BF16", "--axis", "tp=1,8",
                       "--axis", "mode=colocated", "--format", "csv")
    assert rc == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    df = SW.analytic_table({"gpu": "A100", "precision": ["FP8", "BF16"], "tp": [1, 8], "mode": "colocated"})
    assert len(rows) == len(df) == 4
    for r, (_, ref) in zip(rows, df.iterrows()):
        assert r["point_id"] == ref.point_id and r["tp"] == str(ref.tp) and r["gpus"] == str(ref.gpus)
        cost = ref.usd_per_million_output_tokens
        if math.isinf(cost):
            assert r["usd_per_million_output_tokens"] == ""
            assert r["null_reasons.usd_per_million_output_tokens"] == \
                "infinite: the configuration is infeasible (see reason)"
        else:
            assert float(r["usd_per_million_output_tokens"]) == cost
            assert r["null_reasons.usd_per_million_output_tokens"] == ""
        assert r["null_reasons.prefill_tp"] == "not applicable: a colocated row"
        assert "inf" not in {v.lower() for v in r.values()} and "nan" not in {v.lower() for v in r.values()}
        assert json.loads(r["notes"]) == ["step constants: SPEC §3's (this command models no engine's scheduler)"]
    assert not df.feasible.all() and df.feasible.any()


# --- 7. the table shows what --rows says ----------------------------------------------------------

def _table_rows(out):
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("-----")) + 1
    return [ln for ln in lines[start:] if ln and not ln.startswith("note: ")]


def test_rows_shows_verified_then_the_cheapest_others(capsys):
    argv = ["sweep", "--axis", "gpu=all", "--axis", "tp=1,2,4,8", "--verify", "top-k-per-scenario", *FAST]
    ref = SW.analytic_table({"gpu": "all", "tp": [1, 2, 4, 8]})
    n, nf = len(ref), int(ref.feasible.sum())
    rc, out, err = run(capsys, *argv, "--rows", "50")
    assert rc == 0, err
    assert out.startswith(f"{n:,} points: {nf:,} analytically feasible, 3 simulated")
    rows = _table_rows(out)
    assert len(rows) == 50
    assert all((" pass " in r) or (" FAIL " in r) for r in rows[:3])
    assert all(" not run " in r for r in rows[3:])
    assert (f"note: rows shown: 50 of the {nf} analytically feasible points, the simulated ones first (passed, then "
            "by cost), then the others by cost (--rows 50; --rows N shows more); the "
            f"{n - nf} infeasible points are not shown") in out
    # the unverified rows by cost
    costs = [float(re.split(r"\s{2,}", r)[8]) for r in rows[3:]]
    assert costs == sorted(costs)
    rc, out, err = run(capsys, *argv, "--rows", "1000")
    assert len(_table_rows(out)) == nf and f"rows shown: all {nf} analytically feasible points" in out


def test_no_rows_note_when_every_point_is_shown(capsys):
    rc, out, err = run(capsys, "sweep", *ONE)
    assert rc == 0 and len(_table_rows(out)) == 1 and "rows shown" not in out


# --- flags the sweep would ignore: simulation settings without simulation, output flags ------------

@pytest.mark.parametrize("flags,needle", [
    (["--seeds", "2"], "--seeds: got 2"), (["--horizon", "30"], "--horizon: got 30.0"), (["--seed", "1"], "--seed: got 1"),
    (["--verify", "none", "--seeds", "2"], "verify none, from --verify"),
])
def test_simulation_flags_without_verification_are_refused(capsys, no_work, flags, needle):
    one_line_error(*run(capsys, "sweep", *ONE, *flags), needle, "only with --verify top-k-per-scenario or --verify all")


def test_simulation_settings_of_a_grid_file_without_verification_are_refused(capsys, tmp_path, no_work):
    g = grid_file(tmp_path, '[axes]\ngpu = "B200"\nprecision = "FP8"\ntp = 1\nmode = "colocated"\n'
                            '[sweep]\nseeds = 2\n')
    one_line_error(*run(capsys, "sweep", g), f"[sweep] seeds in {g}: got 2", "only with --verify")


def test_verify_none_on_the_command_line_leaves_a_grid_files_simulation_settings(capsys, tmp_path):
    # --verify none on the command line overrides a file's verification: its settings are left, not refused
    g = grid_file(tmp_path, '[axes]\ngpu = "B200"\nprecision = "FP8"\ntp = 1\nmode = "colocated"\n'
                            '[sweep]\nverify = "all"\nseeds = 2\n', name="g2.toml")
    rc, out, err = run(capsys, "sweep", g, "--verify", "none", "--format", "csv")
    assert rc == 0 and err == "note: step constants: SPEC §3's (this command models no engine's scheduler)\n"


@pytest.mark.parametrize("flags,needle,allowed", [
    (["--format", "json", "--rows", "5"], "--rows: got 5", "only with the table output"),
    (["--format", "csv", "--rows", "50"], "--rows: got 50", "only with the table output"),
    (["--plot-max", "3"], "--plot-max: got 3", "only with --plot DIR"),
    (["--time-unit", "ms"], "--time-unit: got 'ms'", "only with a trace axis"),
    (["--skip-invalid"], "--skip-invalid: got True", "only with a trace axis"),
])
def test_output_and_trace_flags_the_sweep_would_not_use_are_refused(capsys, no_work, flags, needle, allowed):
    one_line_error(*run(capsys, "sweep", *ONE, *flags), needle, allowed)


def test_trace_reading_flags_are_taken_on_a_trace_grid(capsys):
    rc, out, err = run(capsys, "sweep", *TRACE, "--axis", "gpu=B200", "--axis", "precision=FP8", "--axis", "tp=1",
                       "--axis", "mode=colocated", "--skip-invalid")
    assert rc == 0, err


def test_a_capacity_horizon_too_short_names_the_flag(capsys):
    rc, out, err = run(capsys, "sweep", *ONE, "--verify", "all", "--seeds", "1", "--capacity", "--horizon", "5")
    assert rc == 2 and err.startswith("fastsim sweep: error: --horizon: got 5.0")


def test_read_table_of_an_existing_file_of_another_kind_names_the_table_not_out(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("x\n")
    with pytest.raises(FastsimInputError) as e:
        SW.read_table(str(p))
    assert e.value.field == "sweep table" and "a file ending in .parquet, .csv, .json or .jsonl" in e.value.allowed
