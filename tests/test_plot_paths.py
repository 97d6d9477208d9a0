"""``--plot`` destinations are checked before any work: one-line error, exit status 2, no traceback."""
import os

import pytest

import fastsim.cli as cli
from cliutil import run
from fastsim.errors import FastsimInputError

PLAN = ["--gpu", "B200", "--precision", "FP8", "--tp", "1", "--instances", "1"]




@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if a command gets past its argument checks (every command reads the catalog first)."""
    def boom(args):
        raise AssertionError("the command started its work before checking --plot")
    monkeypatch.setattr(cli, "_catalog", boom)


def _one_line_error(rc, err, value):
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert "--plot" in lines[0] and repr(str(value)) in lines[0] and "allowed" in lines[0]
    return lines[0]


# ---------------------------------------------------------------------------- every command that draws

def _bad_paths(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    taken = tmp_path / "taken"
    (taken / "whatif_fp8.png").mkdir(parents=True)
    return {
        "missing_parent": str(tmp_path / "nope" / "x.png"),
        "parent_is_file": str(a_file / "x.png"),
        "bad_extension": str(tmp_path / "x.txt"),
        "no_extension": str(tmp_path / "x"),
        "is_directory": str(tmp_path),
        "dir_missing_parent": str(tmp_path / "nope" / "dir"),
        "dir_is_file": str(a_file),
        "dir_output_is_directory": str(taken),
    }


@pytest.mark.parametrize("argv, case", [
    (["ledger"], "missing_parent"),
    (["ledger"], "parent_is_file"),
    (["ledger"], "bad_extension"),
    (["ledger"], "no_extension"),
    (["ledger"], "is_directory"),
    (["simulate", "--scenario", "chat"] + PLAN, "missing_parent"),
    (["simulate", "--scenario", "chat"] + PLAN, "bad_extension"),
    (["capacity", "--scenario", "chat"] + PLAN, "missing_parent"),
    (["capacity", "--scenario", "chat"] + PLAN, "bad_extension"),
    (["whatif", "--study", "fp8", "--no-verify"], "dir_missing_parent"),
    (["whatif", "--study", "fp8", "--no-verify"], "dir_is_file"),
    (["whatif", "--study", "fp8", "--no-verify"], "dir_output_is_directory"),
    (["sweep", "--axis", "gpu=H100"], "dir_missing_parent"),
    (["sweep", "--axis", "gpu=H100"], "dir_is_file"),
])
def test_bad_plot_path_fails_before_work(capsys, tmp_path, no_work, argv, case):
    value = _bad_paths(tmp_path)[case]
    rc, out, err = run(capsys, *argv, "--plot", value)
    _one_line_error(rc, err, value)
    assert out == ""


@pytest.mark.parametrize("argv", [["ledger"], ["whatif", "--study", "fp8", "--no-verify"]])
def test_unwritable_system_paths(capsys, no_work, argv):
    # /proc refuses new files even to root, whose permission bits checks would let through
    if not os.path.isdir("/proc/self"):
        pytest.skip("no /proc here")
    value = "/proc/nope/l.png" if argv[0] == "ledger" else "/proc/nope"
    rc, _, err = run(capsys, *argv, "--plot", value)
    _one_line_error(rc, err, value)


def test_empty_plot_value_is_an_error(capsys, no_work):
    rc, _, err = run(capsys, "whatif", "--study", "fp8", "--no-verify", "--plot", "")
    _one_line_error(rc, err, "")


# ---------------------------------------------------------------------------- what is allowed

def test_whatif_creates_the_directory_and_overwrites_files_inside(capsys, tmp_path):
    d = tmp_path / "new"
    rc, _, err = run(capsys, "whatif", "--study", "fp8", "--no-verify", "--plot", str(d))
    assert rc == 0, err
    png = d / "whatif_fp8.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    png.write_bytes(b"old")
    rc, _, err = run(capsys, "whatif", "--study", "fp8", "--no-verify", "--plot", str(d))
    assert rc == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(os.listdir(d)) == ["whatif_fp8.png"]                  # no probe file left behind


def test_ledger_plot_formats_and_overwrite(capsys, tmp_path):
    pdf = tmp_path / "ledger.pdf"
    pdf.write_bytes(b"old")
    rc, _, err = run(capsys, "ledger", "--plot", str(pdf))
    assert rc == 0, err
    assert pdf.read_bytes()[:5] == b"%PDF-"
    svg = tmp_path / "ledger.SVG"
    rc, _, err = run(capsys, "ledger", "--plot", str(svg))
    assert rc == 0, err
    assert b"<svg" in svg.read_bytes()[:500]


def test_check_plot_path_unit(tmp_path):
    from fastsim.plots import check_plot_path, plot_formats
    assert {"png", "pdf", "svg"} <= set(plot_formats()) and "pgf" not in plot_formats()
    assert check_plot_path(tmp_path / "a.png") == str(tmp_path / "a.png")
    sub = tmp_path / "sub"
    assert check_plot_path(sub, "dir") == str(sub) and sub.is_dir()
    assert check_plot_path(sub, "dir", files=["x.png"]) == str(sub)        # existing directory is fine
    (sub / "x.png").mkdir()
    with pytest.raises(FastsimInputError) as exc:
        check_plot_path(sub, "dir", files=["x.png"])
    assert exc.value.field == "--plot" and "x.png" in exc.value.allowed
    with pytest.raises(FastsimInputError) as exc:
        check_plot_path(tmp_path / "a.txt", field="path")
    assert exc.value.field == "path" and ".png, .pdf, .svg" in exc.value.allowed
    with pytest.raises(FastsimInputError) as exc:
        check_plot_path(tmp_path / "a.png", kind="files")
    assert exc.value.field == "kind"
    assert os.listdir(tmp_path) == ["sub"]                                   # a file check writes nothing
