"""An engine's runtimes: TensorRT-LLM's PyTorch backend and its TensorRT-engine runtime.

Each measurement's runtime is read off its ``engine_version`` (``fastsim.engine_rules.engine_runtime``);
a calibration's ``[[runtime]]`` tables hold another runtime's host costs; ``fastsim validate`` runs each
row on its own runtime's constants, every planning command on the default runtime's; and the fit
gives the host costs one value per runtime where the rows run two.
"""
from __future__ import annotations

import collections
from dataclasses import replace

import pytest

from fastsim.catalog import load_catalog
from fastsim.constants import Calibration, CalibrationEntry, RuntimeEntry, load_calibration
from fastsim.engine_rules import ENGINE_RUNTIMES, engine_runtime
from fastsim.errors import FastsimInputError
from fastsim.stepmodel import StepConstants
from fastsim.validate import SHIPPED_CATALOG, SHIPPED_MEASUREMENTS, read_measurements, run_measurements
from fastsim.validate.fit import RUNTIME_FITTED, _fold_names, default_names, fit_measurements, runtime_names
from fastsim.validate.run import run_key

CAT = load_catalog([str(SHIPPED_CATALOG)])
ROWS = read_measurements(SHIPPED_MEASUREMENTS, CAT)
TRT = [m for m in ROWS if m.engine == "trtllm"]
K = StepConstants(step_form="classes", overhead_s=1e-3)


@pytest.mark.parametrize("version, runtime", [
    ("perf-overview (PyTorch backend)", "pytorch"), ("0.17 (TensorRT engine)", "tensorrt"),
    ("0.14 (Triton)", "tensorrt"), ("0.21.0", "tensorrt"), ("v0.9.0", "tensorrt"), ("1.0.0", "pytorch"),
    ("1.1.0rc3", "pytorch"), ("", "pytorch"), ("0.20 PyTorch flow", "pytorch"), ("not stated", "pytorch"),
    ("1.0 (TensorRT-engine)", "tensorrt"), ("trtllm-build engine 1.0", "tensorrt")])
def test_the_runtime_is_read_off_the_version(version, runtime):
    assert engine_runtime("trtllm", version) == runtime
    assert engine_runtime("vllm", version) == ""
    assert runtime in ENGINE_RUNTIMES["trtllm"] and ENGINE_RUNTIMES["trtllm"][0] == "pytorch"


def test_a_version_that_is_not_text_is_refused():
    with pytest.raises(FastsimInputError, match="engine_version: got 1.0; allowed: a string"):
        engine_runtime("trtllm", 1.0)


def test_the_shipped_families_runtimes():
    by = collections.Counter((m.family, m.runtime) for m in TRT)
    assert by == {("O", "tensorrt"): 216, ("T17", "tensorrt"): 311, ("S", "tensorrt"): 2, ("T", "pytorch"): 294,
                  ("T2", "pytorch"): 88}
    assert {m.runtime for m in ROWS if m.engine != "trtllm"} == {""}


def test_rows_of_two_runtimes_never_share_a_run():
    m = next(x for x in TRT if x.family == "T17")
    assert run_key(m) != run_key(m._replace(engine_version="perf-overview (PyTorch backend)"))


def _cal(overhead_trt):
    return Calibration((CalibrationEntry("*", "*", K), CalibrationEntry("H100", "*", replace(K, eta_bw=0.7))),
                       "test", "trtllm", (RuntimeEntry("tensorrt", (("overhead_s", overhead_trt),), ("overhead_s",),
                                                       (("overhead_s", 1e-3, 3e-3),)),))


def test_for_runtime_replaces_the_host_costs_of_every_entry_and_nothing_else():
    cal = _cal(2e-3)
    t = cal.for_runtime("tensorrt")
    assert t.runtimes == () and t.engine == "trtllm"
    assert t.step_constants("H100", "BF16").overhead_s == 2e-3 and t.step_constants("H100", "BF16").eta_bw == 0.7
    assert t.step_constants("H200", "FP8") == replace(K, overhead_s=2e-3)
    assert cal.for_runtime("pytorch") is cal and cal.for_runtime("") is cal
    # the default runtime's constants are the entries' own: what every planning command runs on
    assert cal.step_constants("H200", "FP8") == K


def test_validate_runs_each_row_on_its_runtime():
    o = next(x for x in TRT if x.id == "O1-itl")
    as_pytorch = o._replace(engine_version="1.0.0")
    a, b, c = run_measurements([o, as_pytorch, o], CAT, [_cal(1e-3)])[0:3]
    assert a.predicted == b.predicted == c.predicted           # equal host costs: equal figures
    slow = run_measurements([o, as_pytorch], CAT, [_cal(4e-3)])
    # ITL at about 8 ms a step: 3 ms more a step on the TensorRT engine's rows only
    assert slow[1].predicted == b.predicted
    assert slow[0].predicted == pytest.approx(a.predicted + 3e-3, rel=0.1)


def test_runtime_tables_round_trip_and_are_checked(tmp_path):
    cal = _cal(2.5e-3)
    p = tmp_path / "c.toml"
    cal.write(p)
    text = p.read_text(encoding="utf-8")
    assert '[[runtime]]' in text and 'name = "tensorrt"' in text
    back = load_calibration(p, CAT)
    assert back.runtimes == cal.runtimes
    head = 'format_version = 1\nengine = "{e}"\n\n[[constants]]\ngpu = "*"\nprecision = "*"\n\n[[runtime]]\n'
    for engine, body, match in (
            ("trtllm", 'name = "pytorch"\n', r"\[\[runtime\]\] 1: name: got 'pytorch'; allowed: one of tensorrt"),
            ("trtllm", 'name = "tensorrt"\neta_bw = 0.5\n', r"\[\[runtime\]\] 1: key: got 'eta_bw'"),
            ("trtllm", 'name = "tensorrt"\noverhead_s = -1.0\n', r"\[\[runtime\]\] 1: overhead_s: got -1.0"),
            ("trtllm", 'name = "tensorrt"\noverhead_s = "1"\n', r"\[\[runtime\]\] 1: overhead_s: got '1'; allowed: a number"),
            ("trtllm", 'name = "tensorrt"\nfitted = ["eta_bw"]\n', r"\[\[runtime\]\] 1: fitted: got \['eta_bw'\]"),
            ("trtllm", 'name = "tensorrt"\ninterval95 = { overhead_s = [1.0] }\n', r"\[\[runtime\]\] 1: interval95: got"),
            ("vllm", 'name = "tensorrt"\n', r"runtime: got 'a \[\[runtime\]\] table'; allowed: none")):
        bad = tmp_path / "bad.toml"
        bad.write_text(head.format(e=engine) + body, encoding="utf-8")
        with pytest.raises(FastsimInputError, match=match):
            load_calibration(bad, CAT)


def test_the_fit_names_a_runtime_s_host_costs_only_where_both_runtimes_run():
    assert runtime_names(TRT) == tuple(f"{f}@tensorrt" for f in RUNTIME_FITTED)
    assert runtime_names([m for m in TRT if m.runtime == "tensorrt"]) == ()
    assert runtime_names([m for m in ROWS if m.engine == "vllm"]) == ()
    # not by default (fastsim.validate.fit, "Runtimes": it did not beat one host on held-out rows)
    assert not any("@" in n for n in default_names(TRT, CAT))
    names = default_names(TRT, CAT) + runtime_names(TRT)
    # a fold with one runtime left fits no runtime of its own, and resets nothing it does not hold
    keep, start = _fold_names(names, K, [m for m in TRT if m.runtime == "pytorch"], CAT)
    assert not any("@" in n for n in keep) and start.overhead_s == K.overhead_s


def test_the_fit_refuses_runtime_names_it_cannot_fit():
    rows = [m for m in TRT if m.model == "llama-3.1-8b" and m.gpu == "H100"][:6]
    for bad in ("eta_bw@tensorrt", "overhead_s@pytorch", "overhead_s@cuda"):
        with pytest.raises(FastsimInputError, match=f"names: got '{bad}'; allowed: constants among"):
            fit_measurements(rows, CAT, engine="trtllm", names=("overhead_s", bad), max_nfev=1, cross_validate=False)


def test_a_fit_over_both_runtimes_writes_a_runtime_table(tmp_path):
    rows = [m for m in TRT if m.model == "llama-3.1-8b" and m.gpu == "H100" and m.family in ("O", "T17")][:30]
    rows += [m for m in TRT if m.model == "llama-3.1-8b" and m.gpu == "H100" and m.family == "T"]
    assert {m.runtime for m in rows} == {"tensorrt", "pytorch"}
    fit = fit_measurements(rows, CAT, engine="trtllm", names=("eta_bw", "overhead_s", "overhead_s@tensorrt"),
                           max_runs=12, max_nfev=2, cross_validate=False)
    (rt,) = fit.runtimes
    assert rt.name == "tensorrt" and rt.fitted == ("overhead_s",) and [n for n, _ in rt.constants] == ["overhead_s"]
    assert fit.entries[0].constants.overhead_s != dict(rt.constants)["overhead_s"]
    assert "overhead_s@tensorrt" not in fit.calibration().entries[0].fitted
    path = tmp_path / "fit.toml"
    fit.calibration("test").write(path)
    assert load_calibration(path, CAT).runtimes == fit.runtimes
    assert fit.to_dict()["runtimes"][0]["name"] == "tensorrt"


def test_entries_that_are_not_tables_are_refused(tmp_path):
    for text, match in (('format_version = 1\nengine = "trtllm"\nruntime = [1]\n', r"\[\[runtime\]\] 1: got 1; allowed: a \[\[runtime\]\] table"),
                        ('format_version = 1\nconstants = [2]\n', r"\[\[constants\]\] 1: got 2; allowed: a \[\[constants\]\] table")):
        bad = tmp_path / "bad.toml"
        bad.write_text(text, encoding="utf-8")
        with pytest.raises(FastsimInputError, match=match):
            load_calibration(bad, CAT)


def test_a_joint_fit_refuses_a_runtime_s_own_constants():
    rows = [m for m in TRT if m.model == "llama-3.1-8b" and m.gpu == "H100"][:6]
    with pytest.raises(FastsimInputError, match="names: got 'overhead_s@tensorrt'; allowed: no runtime's own constant "
                                                "under gpu_fit 'joint'"):
        fit_measurements(rows, CAT, engine="trtllm", names=("overhead_s", "overhead_s@tensorrt"), max_nfev=1,
                         cross_validate=False, gpu_fit="joint")
