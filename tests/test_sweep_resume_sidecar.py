"""Resume and the ``FILE.sweep.json`` sidecar: an output whose sidecar is missing or unreadable is
refused (and left untouched) rather than kept as this run's rows; the other resumes still work."""
import os

import pandas as pd
import pytest

from fastsim import sweep as SW
from fastsim.cli import main
from fastsim.errors import FastsimInputError

# two colocated points of one scenario, both simulated once for 20 s: about a second per run
TINY = {"scenario": "chat", "gpu": "B200", "precision": "FP8", "mode": "colocated", "tp": [1, 2],
        "rate_req_per_s": 10}
SIM = dict(verify="all", seeds=1, horizon_s=20.0, seed=3)
CLI = ["sweep", "--axis", "scenario=chat", "--axis", "gpu=B200", "--axis", "precision=FP8",
       "--axis", "mode=colocated", "--axis", "tp=1,2", "--axis", "rate_req_per_s=10",
       "--verify", "all", "--seeds", "1", "--horizon", "20", "--seed", "3"]


def _has_pyarrow():
    try:
        import pyarrow  # noqa: F401
        return True
    except ImportError:
        return False


EXTS = [".csv", ".jsonl"] + ([".parquet"] if _has_pyarrow() else [])


@pytest.fixture(scope="module")
def fresh():
    """The table of an uninterrupted run of TINY (nothing written to disk)."""
    df = SW.run_sweep(TINY, **SIM)
    assert len(df) == 2 and df.verified.all()
    return df


def _snapshot(path):
    """The bytes of an output: a file, or every file of a Parquet directory by name."""
    if os.path.isdir(path):
        return {f: open(os.path.join(path, f), "rb").read() for f in sorted(os.listdir(path))}
    with open(path, "rb") as fh:
        return fh.read()


def _written_without_sidecar(tmp_path, ext):
    out = str(tmp_path / ("t" + ext))
    SW.run_sweep(TINY, out=out, **SIM)
    os.remove(out + ".sweep.json")
    if ext != ".parquet":
        with open(out, "a") as fh:      # a tail that a resume's read would cut
            fh.write("0123,")
    return out


@pytest.mark.parametrize("ext", EXTS)
def test_resume_without_sidecar_is_refused_and_leaves_the_table(tmp_path, ext):
    out = _written_without_sidecar(tmp_path, ext)
    before = _snapshot(out)
    # other settings (2 seeds, 30 s): the rows there would have been kept as results of this run
    with pytest.raises(FastsimInputError) as info:
        SW.run_sweep(TINY, out=out, resume=True, **dict(SIM, seeds=2, horizon_s=30.0))
    err = info.value
    assert err.field == "--resume" and err.value == out
    assert err.allowed.startswith(f"a table with its t{ext}.sweep.json beside it")
    assert f"t{ext}.sweep.json is missing" in err.allowed
    assert err.allowed.endswith("start afresh without --resume")
    assert str(err).startswith(f"--resume: got {out!r}; allowed: a table with its t{ext}.sweep.json")
    assert _snapshot(out) == before
    assert not os.path.exists(out + ".sweep.json")
    # the same settings are refused as well: nothing shows which run wrote the rows
    with pytest.raises(FastsimInputError, match="sweep.json is missing"):
        SW.run_sweep(TINY, out=out, resume=True, **SIM)
    assert _snapshot(out) == before


def test_resume_of_a_foreign_table_is_refused(tmp_path):
    """A CSV not written by fastsim sweep (no sidecar) is refused by --resume, not read."""
    out = tmp_path / "t.csv"
    out.write_text("a,b\n1,2\n")
    with pytest.raises(FastsimInputError) as info:
        SW.run_sweep(TINY, out=str(out), resume=True, **SIM)
    assert info.value.field == "--resume" and "t.csv.sweep.json is missing" in info.value.allowed
    assert out.read_text() == "a,b\n1,2\n"


def test_unreadable_sidecar_is_refused(tmp_path, fresh):
    out = str(tmp_path / "t.csv")
    SW.run_sweep(TINY, out=out, **SIM)
    before = _snapshot(out)
    for text, what in (('{"table_version": 2, "ax', "it does not parse"), ("[1, 2]", "it holds a list")):
        with open(out + ".sweep.json", "w") as fh:
            fh.write(text)
        with pytest.raises(FastsimInputError) as info:
            SW.run_sweep(TINY, out=out, resume=True, **SIM)
        assert info.value.field == "--resume" and info.value.value == out
        assert "t.csv.sweep.json is the JSON" in info.value.allowed and what in info.value.allowed
        assert info.value.allowed.endswith("start afresh without --resume")
        assert _snapshot(out) == before
        with open(out + ".sweep.json") as fh:
            assert fh.read() == text
    # without --resume the output and its sidecar are simply replaced
    pd.testing.assert_frame_equal(SW.run_sweep(TINY, out=out, **SIM), fresh)
    pd.testing.assert_frame_equal(SW.read_table(out), fresh)


@pytest.mark.parametrize("ext", EXTS)
def test_interrupted_with_sidecar_resumes_to_the_fresh_table(tmp_path, monkeypatch, fresh, ext):
    out = str(tmp_path / ("t" + ext))
    real = SW._run_task
    calls = {"n": 0, "stop_at": 2}

    def counted(task):
        calls["n"] += 1
        if calls["n"] == calls["stop_at"]:
            raise KeyboardInterrupt
        return real(task)

    monkeypatch.setattr(SW, "_run_task", counted)
    with pytest.raises(KeyboardInterrupt):
        SW.run_sweep(TINY, out=out, chunk_verify=1, **SIM)
    assert len(SW.read_table(out)) == 1
    calls.update(n=0, stop_at=None)
    done = SW.run_sweep(TINY, out=out, resume=True, chunk_verify=1, **SIM)
    assert calls["n"] == 1                      # only the missing point was simulated
    pd.testing.assert_frame_equal(done, fresh)
    pd.testing.assert_frame_equal(SW.read_table(out), fresh)


def test_resume_with_neither_table_nor_sidecar_starts_afresh(tmp_path, fresh):
    out = str(tmp_path / "t.csv")
    done = SW.run_sweep(TINY, out=out, resume=True, **SIM)
    pd.testing.assert_frame_equal(done, fresh)
    pd.testing.assert_frame_equal(SW.read_table(out), fresh)
    assert os.path.exists(out + ".sweep.json")


def test_resume_of_an_empty_output_without_sidecar_starts_afresh(tmp_path, fresh):
    out = tmp_path / "t.csv"
    out.write_text("")
    pd.testing.assert_frame_equal(SW.run_sweep(TINY, out=str(out), resume=True, **SIM), fresh)
    pd.testing.assert_frame_equal(SW.read_table(str(out)), fresh)


def test_resume_with_sidecar_but_no_table(tmp_path, fresh):
    """A run interrupted before its first chunk: the matching sidecar resumes to every point; one
    recording other settings is refused, as when the table is there."""
    out = str(tmp_path / "t.csv")
    SW.run_sweep(TINY, out=out, **SIM)
    os.remove(out)
    with pytest.raises(FastsimInputError, match="the grid, settings and inputs of the run that wrote it"):
        SW.run_sweep(TINY, out=out, resume=True, **dict(SIM, seeds=2))
    assert not os.path.exists(out)
    open(out, "w").close()                      # a first chunk cut before its first newline
    pd.testing.assert_frame_equal(SW.run_sweep(TINY, out=out, resume=True, **SIM), fresh)
    pd.testing.assert_frame_equal(SW.read_table(out), fresh)


def test_read_table_of_an_empty_csv_is_empty(tmp_path):
    out = tmp_path / "t.csv"
    out.write_text("")
    df = SW.read_table(str(out))
    assert len(df) == 0 and list(df.columns) == [c for c, _ in SW.COLUMNS]


def test_cli_resume_without_sidecar_exits_2_and_leaves_the_table(tmp_path, capsys, fresh):
    out = str(tmp_path / "t.csv")
    assert main(CLI + ["--out", out]) == 0
    pd.testing.assert_frame_equal(SW.read_table(out), fresh)
    os.remove(out + ".sweep.json")
    before = _snapshot(out)
    capsys.readouterr()
    assert main(CLI + ["--seeds", "2", "--out", out, "--resume"]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"fastsim sweep: error: --resume: got {out!r}; allowed: a table with its "
                            "t.csv.sweep.json beside it, which records the grid and settings a resume must "
                            "match (t.csv.sweep.json is missing, so the rows already there cannot be checked "
                            "against this run); start afresh without --resume\n")
    assert captured.out == ""
    assert _snapshot(out) == before and not os.path.exists(out + ".sweep.json")
    # starting afresh, as the message says, works
    assert main(CLI + ["--seeds", "2", "--out", out]) == 0
    assert os.path.exists(out + ".sweep.json") and SW.read_table(out).verified.all()


# ---------------------------------------------------------------- the inputs behind the rows

ANALYTIC = {"gpu": ["H100", "B200"], "precision": "FP8", "mode": "colocated", "tp": [1, 2], "scenario": "chat"}


def _cut_to_first_row(path):
    with open(path, encoding="utf-8") as fh:
        lines = fh.readlines()
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(lines[:2])


def test_resume_with_other_prices_is_refused(tmp_path):
    """The sidecar records a digest of the catalog: rows priced at other prices are not kept."""
    from fastsim.catalog import default_catalog
    out = str(tmp_path / "p.csv")
    SW.run_sweep(ANALYTIC, out=out)
    _cut_to_first_row(out)
    before = _snapshot(out)
    dear = default_catalog().with_prices({"H100": 10.0})
    with pytest.raises(FastsimInputError, match=r"differs in its inputs \(catalog and prices"):
        SW.run_sweep(ANALYTIC, out=out, resume=True, catalog=dear)
    assert _snapshot(out) == before
    # the same inputs resume, to the fresh table
    df = SW.run_sweep(ANALYTIC, out=out, resume=True)
    pd.testing.assert_frame_equal(df, SW.run_sweep(ANALYTIC))


def test_resume_with_other_trace_data_is_refused(tmp_path):
    """Same trace path, other requests in it: refused (the digest covers the workload's data)."""
    trace = tmp_path / "t.csv"
    rows = "\n".join(f"{0.5 * i:.1f},{200 + 10 * i},{50 + i}" for i in range(40))
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows + "\n")
    grid = {"trace": [str(trace)], "model": "llama-3.1-8b", "gpu": "H100", "precision": "FP8", "mode": "colocated",
            "tp": [1, 2], "ttft_s": 1.0, "tpot_s": 0.05}
    out = str(tmp_path / "p.jsonl")
    SW.run_sweep(grid, out=out)
    with open(out, encoding="utf-8") as fh:
        first = fh.readline()
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(first)
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     + "\n".join(f"{0.5 * i:.1f},{800 + 10 * i},{50 + i}" for i in range(40)) + "\n")
    with pytest.raises(FastsimInputError, match=r"differs in its inputs"):
        SW.run_sweep(grid, out=out, resume=True)


def test_a_row_that_does_not_parse_is_an_input_error(tmp_path, capsys):
    """A damaged row in the middle of a table: a one-line error naming the file (exit 2), not a traceback."""
    out = str(tmp_path / "p.csv")
    SW.run_sweep(ANALYTIC, out=out)
    with open(out, encoding="utf-8") as fh:
        lines = fh.readlines()
    lines[1] = "tp,not,a,row\n"
    with open(out, "w", encoding="utf-8") as fh:
        fh.writelines(lines)
    with pytest.raises(FastsimInputError) as e:
        SW.read_table(out)
    assert e.value.field == "sweep table" and "does not parse" in str(e.value)
    argv = ["sweep", "--axis", "gpu=H100,B200", "--axis", "precision=FP8", "--axis", "mode=colocated",
            "--axis", "tp=1,2", "--axis", "scenario=chat", "--out", out, "--resume"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "sweep table" in err and "Traceback" not in err


@pytest.mark.parametrize("ext", [".csv", ".jsonl"])
def test_read_table_leaves_a_cut_off_last_line_in_the_file(tmp_path, ext):
    """A reader does not write: the cut-off last line is left out of the frame, not out of the file."""
    out = str(tmp_path / ("t" + ext))
    whole = SW.run_sweep(TINY, out=out, **SIM)
    with open(out, "a") as fh:
        fh.write("0123,")
    before = _snapshot(out)
    pd.testing.assert_frame_equal(SW.read_table(out), SW.read_table(out))
    assert len(SW.read_table(out)) == len(whole)
    assert _snapshot(out) == before
