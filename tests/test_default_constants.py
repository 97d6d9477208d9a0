"""Which step constants a command runs on: ``--constants fitted`` (default), ``lecture``, ``--calibration``.

A run on an engine's policy takes the calibration fitted to that engine's measurements where one
ships (``fastsim/data/calibrations/<engine>.toml``: TensorRT-LLM's), else SPEC §3's; the default
scheduler (``--policy lecture``) keeps SPEC §3's, so every lecture figure is unchanged to the bit.
``--calibration FILE`` replaces both, and a file fitted on another engine than the run's policy is
noted. Every command says which constants it used.
"""
from __future__ import annotations

import json
import shutil

import pytest

from cliutil import run
from test_validate import row, write_csv

from fastsim.constants import (SHIPPED_CALIBRATIONS, Calibration, CalibrationEntry, choose_step_constants,
                               is_shipped_calibration, shipped_calibration, shipped_fit)
from fastsim.stepmodel import StepConstants

TRT = str(SHIPPED_CALIBRATIONS / "trtllm.toml")
SIM = ("simulate", "--scenario", "chat", "--model", "llama-3.1-8b", "--gpu", "H100", "--precision", "FP8",
       "--instances", "1", "--horizon", "20", "--format", "json")
PLAN = ("plan", "--scenario", "chat", "--no-verify", "--gpu", "H100", "--precision", "FP8", "--top-k", "1",
        "--format", "json")
SPEC_DEFAULT = ("step constants: SPEC §3's (the default scheduler; --policy trtllm runs on the constants fitted to "
                "TensorRT-LLM measurements, --policy vllm runs on the constants fitted to vLLM measurements)")


def _json(capsys, *argv):
    rc, out, err = run(capsys, *argv)
    assert rc == 0, err
    return json.loads(out)


def _figures(doc, key):
    """The records without their notes (what the constants change)."""
    return [{k: v for k, v in r.items() if k != "notes"} for r in doc[key]]


def _fitted_note():
    h = shipped_fit("trtllm")["held_out"]
    return (f"step constants: fitted to TensorRT-LLM measurements (fastsim/data/calibrations/trtllm.toml; "
            f"leave-one-source-out median error {h['fitted']['median_abs_pct_error']:.1f}% vs SPEC §3's "
            f"{h['start']['median_abs_pct_error']:.1f}% on {h['fitted']['rows']:,} held-out rows, "
            "docs/VALIDATION.md); --constants lecture for SPEC §3's")


# ---- the rule --------------------------------------------------------------------------------------

def test_the_rule_per_policy_and_choice():
    trt = shipped_calibration("trtllm")
    assert isinstance(trt, Calibration) and trt.engine == "trtllm"
    vllm = shipped_calibration("vllm")
    assert isinstance(vllm, Calibration) and vllm.engine == "vllm"
    assert shipped_calibration("sglang") is None and shipped_calibration("lecture") is None
    # vLLM's families share no GPU: its fit is the engine's host costs alone, every efficiency SPEC §3's
    (entry,) = vllm.entries
    assert set(entry.fitted) == {"overhead_s", "overhead_per_seq_s", "overhead_per_layer_s", "request_overhead_s"}
    assert (entry.constants.eta_compute, entry.constants.eta_bw) == (StepConstants().eta_compute,
                                                                     StepConstants().eta_bw)
    for choice in (None, "fitted"):
        c = choose_step_constants("trtllm", choice)
        assert (c.kind, c.constants, c.path, c.engine) == ("fitted", trt, "fastsim/data/calibrations/trtllm.toml",
                                                           "trtllm")
        assert c.notes == (_fitted_note(),)
        lec = choose_step_constants("lecture", choice)
        assert lec.kind == "lecture" and lec.constants == StepConstants() and lec.notes == (SPEC_DEFAULT,)
        c = choose_step_constants("vllm", choice)
        assert (c.kind, c.constants, c.path, c.engine) == ("fitted", vllm, "fastsim/data/calibrations/vllm.toml",
                                                           "vllm")
        for engine in ("sglang",):
            c = choose_step_constants(engine, choice)
            assert c.constants == StepConstants() and c.kind == "lecture"
            # the fit report's reason why no fit of this engine ships
            assert c.note.endswith(f"measurements ships: {shipped_fit(engine)['reason']})")
    for policy in ("lecture", "trtllm", "vllm", "sglang"):
        c = choose_step_constants(policy, "lecture")
        assert c.constants == StepConstants() and c.notes == ("step constants: SPEC §3's (--constants lecture)",)
    # the figures of the note are the report's: 12.5% held out against SPEC §3's 32.4% today
    assert "error 12.5% vs SPEC §3's 32.4% on 858 held-out rows" in _fitted_note()


def test_the_rule_refuses_what_it_cannot_do(tmp_path):
    from fastsim.errors import FastsimInputError
    for bad in ("spec", "Fitted"):
        with pytest.raises(FastsimInputError, match="--constants"):
            choose_step_constants("trtllm", bad)
    with pytest.raises(FastsimInputError, match="policy"):
        choose_step_constants("tgi")
    for choice in ("lecture", "fitted"):
        with pytest.raises(FastsimInputError, match="no value with --calibration"):
            choose_step_constants("trtllm", choice, TRT)


def test_a_copy_of_the_shipped_file_reads_with_the_shipped_gpus(tmp_path):
    """The shipped fit names GPUs of the shipped measurement set (L40S, RTX PRO 6000) beyond the built-in
    catalog: given as --calibration, it (or a copy of it) reads with them."""
    copy = tmp_path / "mine.toml"
    shutil.copyfile(TRT, copy)
    assert is_shipped_calibration(copy) and is_shipped_calibration(TRT)
    assert not is_shipped_calibration(tmp_path / "absent.toml")
    c = choose_step_constants("trtllm", None, str(copy))
    assert c.kind == "file" and c.constants == shipped_calibration("trtllm") and c.mismatch == ""
    import fastsim.validate as V
    assert V.SHIPPED_CALIBRATIONS == SHIPPED_CALIBRATIONS


# ---- planning commands -----------------------------------------------------------------------------

def test_trtllm_policy_runs_on_the_shipped_fit_by_default(capsys):
    base = _json(capsys, *SIM, "--policy", "trtllm")
    lecture = _json(capsys, *SIM, "--policy", "trtllm", "--constants", "lecture")
    given = _json(capsys, *SIM, "--policy", "trtllm", "--calibration", TRT)
    # the default is the shipped calibration's run to the bit, and not SPEC §3's
    assert _figures(base, "runs") == _figures(given, "runs")
    assert base["runs"][0]["tpot_p90_s"] != lecture["runs"][0]["tpot_p90_s"]
    assert base["runs"][0]["tpot_p90_s"] > 1.3 * lecture["runs"][0]["tpot_p90_s"]     # the fit's slower weight read and host time
    assert _fitted_note() in base["notes"]
    assert "step constants: SPEC §3's (--constants lecture)" in lecture["notes"]
    assert ('step constants: --calibration fastsim/data/calibrations/trtllm.toml, fitted to TensorRT-LLM '
            'measurements (engine = "trtllm")') in given["notes"]
    assert not any("was fitted to" in n for n in base["notes"] + given["notes"])
    # the screen too: plan's analytic capacity under --policy trtllm
    p = _json(capsys, *PLAN, "--policy", "trtllm")["plans"][0]
    q = _json(capsys, *PLAN, "--policy", "trtllm", "--calibration", TRT)["plans"][0]
    r = _json(capsys, *PLAN, "--policy", "trtllm", "--constants", "lecture")["plans"][0]
    assert p["capacity_req_per_s"] == q["capacity_req_per_s"] != r["capacity_req_per_s"]
    assert p["usd_per_million_output_tokens"] == q["usd_per_million_output_tokens"]


def test_a_plan_verified_under_trtllm_brings_its_constants(capsys, tmp_path):
    """--from-plan of a plan verified under trtllm runs under trtllm, on its shipped fit, without --policy."""
    plans = _json(capsys, *PLAN)["plans"]
    plans[0]["verification"] = {"policy": "trtllm"}
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(plans))
    argv = ("simulate", "--from-plan", str(f), "--horizon", "20", "--format", "json")
    doc = _json(capsys, *argv)
    ref = _json(capsys, *argv, "--policy", "trtllm", "--calibration", TRT)
    assert doc["runs"][0]["policy"] == "trtllm" and _figures(doc, "runs") == _figures(ref, "runs")
    # one choice for the whole run: the plan's policy was known before any constants were read
    assert [n for n in doc["notes"] if n.startswith("step constants")] == [_fitted_note()]
    cap = _json(capsys, "capacity", "--from-plan", str(f), "--horizon", "20", "--seeds", "1", "--tol", "0.3",
                "--format", "json")
    assert [n for n in cap["notes"] if n.startswith("step constants")] == [_fitted_note()]


@pytest.mark.parametrize("argv", [SIM, PLAN, ("ledger", "--format", "json"),
                                  ("sweep", "--axis", "gpu=H100", "--axis", "precision=FP8", "--axis", "tp=1",
                                   "--axis", "mode=colocated", "--format", "json")])
def test_the_default_scheduler_is_spec_3s_to_the_bit(capsys, argv):
    key = {"simulate": "runs", "plan": "plans", "ledger": "rows", "sweep": "rows"}[argv[0]]
    base = _json(capsys, *argv)
    lecture = _json(capsys, *argv, "--constants", "lecture")
    fitted = _json(capsys, *argv, "--constants", "fitted")
    assert _figures(base, key) == _figures(lecture, key) == _figures(fitted, key)
    assert any(n.startswith("step constants: SPEC §3's (") for n in base["notes"])
    assert "step constants: SPEC §3's (--constants lecture)" in lecture["notes"]


def test_sglang_keeps_spec_3s_constants(capsys):
    base = _json(capsys, *SIM, "--policy", "sglang")
    lecture = _json(capsys, *SIM, "--policy", "sglang", "--constants", "lecture")
    assert _figures(base, "runs") == _figures(lecture, "runs")
    assert ("step constants: SPEC §3's (no calibration fitted to SGLang measurements ships: one source family: no "
            "held-out rows to judge a fit by)") in base["notes"]


def test_vllm_runs_on_its_fit(capsys):
    """vLLM's fit adds its host costs: a request overhead of several ms enters every TTFT."""
    base = _json(capsys, *SIM, "--policy", "vllm")
    lecture = _json(capsys, *SIM, "--policy", "vllm", "--constants", "lecture")
    (b,), (lec,) = base["runs"], lecture["runs"]
    cal = shipped_calibration("vllm").entries[0].constants
    assert 0.004 < cal.request_overhead_s < 0.01                   # 6.9 ms in the shipped fit
    assert b["ttft_p90_s"] > lec["ttft_p90_s"] + cal.request_overhead_s * 0.5  # the step form moves the rest
    assert any(n.startswith("step constants: fitted to vLLM measurements (fastsim/data/calibrations/vllm.toml; "
                            "leave-one-source-out median error ") for n in base["notes"])


def test_a_tagged_calibration_on_another_policy_is_noted(capsys, tmp_path):
    doc = _json(capsys, *SIM, "--policy", "vllm", "--calibration", TRT)
    (note,) = [n for n in doc["notes"] if "was fitted to" in n]
    assert note.startswith('fastsim/data/calibrations/trtllm.toml was fitted to TensorRT-LLM measurements '
                           '(engine = "trtllm") and this run is on the vllm policy (vLLM)')
    doc = _json(capsys, *PLAN, "--calibration", TRT)
    (note,) = [n for n in doc["notes"] if "was fitted to" in n]
    assert "and this run is on the default scheduler (no engine's)" in note
    rc, out, err = run(capsys, "ledger", "--calibration", TRT)
    assert rc == 0 and "note: fastsim/data/calibrations/trtllm.toml was fitted to TensorRT-LLM measurements" in out
    # an untagged file applies anywhere without one
    cal = tmp_path / "mine.toml"
    Calibration((CalibrationEntry("H100", "*", StepConstants(eta_bw=0.6), ("eta_bw",)),)).write(cal)
    doc = _json(capsys, *SIM, "--policy", "vllm", "--calibration", str(cal))
    assert not any("was fitted to" in n for n in doc["notes"])
    assert f"step constants: --calibration {cal} (no engine tag)" in doc["notes"]


@pytest.mark.parametrize("choice", ["lecture", "fitted"])
def test_constants_with_calibration_is_an_error(capsys, choice):
    for argv in (SIM, PLAN, ("ledger",)):
        rc, out, err = run(capsys, *argv, "--constants", choice, "--calibration", TRT)
        assert rc == 2 and out == ""
        assert err.strip().endswith(f"--constants: got '{choice}'; allowed: no value with --calibration (the file "
                                    "gives the step constants; --constants chooses between the shipped fits and "
                                    "SPEC §3's when no file is given): drop one")


def test_every_command_with_calibration_has_constants():
    import argparse
    from fastsim.cli import build_parser
    ap = build_parser()
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    having = sorted(name for name, sp in sub.choices.items()
                    if any("--calibration" in a.option_strings for a in sp._actions))
    assert having == ["capacity", "ledger", "plan", "simulate", "sweep", "validate"]   # fleet parses its own
    for name in having:
        (act,) = [a for a in sub.choices[name]._actions if "--constants" in a.option_strings]
        assert act.choices == ("fitted", "lecture") and act.default is None
    from fastsim._command_helpers import _add_calibration, _add_common, _Parser
    from fastsim.fleet.command import add_fleet_args
    sp = _Parser(prog="fleet")
    add_fleet_args(sp, _add_common, _add_calibration)
    assert any("--constants" in a.option_strings for a in sp._actions)


def test_capacity_and_fleet_say_which_constants(capsys, tmp_path):
    doc = _json(capsys, "capacity", "--scenario", "chat", "--model", "llama-3.1-8b", "--gpu", "H100", "--precision",
                "FP8", "--instances", "1", "--policy", "trtllm", "--horizon", "20", "--seeds", "1", "--tol", "0.3",
                "--format", "json")
    assert _fitted_note() in doc["notes"]
    prof = tmp_path / "p.csv"
    prof.write_text("window_start_s,rate_req_per_s\n0,4\n600,6\n")
    doc = _json(capsys, "fleet", "--profile", str(prof), "--scenario", "chat", "--gpu", "B200", "--precision", "FP8",
                "--tp", "1", "--chunk", "512", "--rate-scale", "1", "--capacity", "1=15", "--capacity", "2=30",
                "--no-spares", "--format", "json")
    assert "step constants: SPEC §3's (this command models no engine's scheduler)" in doc["notes"]


# ---- validate --------------------------------------------------------------------------------------

def test_validate_defaults_to_the_fits_and_says_the_rows_are_in_sample(capsys):
    from fastsim.catalog import load_catalog
    from fastsim.validate import (SHIPPED_CATALOG, SHIPPED_MEASUREMENTS, fitted_calibrations, read_measurements,
                                  run_measurements)
    ids = ["T03", "S1"]                                  # TensorRT-LLM rows: an offline run and a step
    doc = _json(capsys, "validate", "--only", *ids, "--format", "json")
    lec = _json(capsys, "validate", "--only", *ids, "--format", "json", "--constants", "lecture")
    cat = load_catalog([str(SHIPPED_CATALOG)])
    ms = [m for m in read_measurements(SHIPPED_MEASUREMENTS, cat) if m.id in ids]
    fit = [r.predicted for r in run_measurements(ms, cat, fitted_calibrations(catalog=cat))]
    spec = [r.predicted for r in run_measurements(ms, cat, StepConstants())]
    assert [r["predicted"] for r in doc["rows"]] == fit
    assert [r["predicted"] for r in lec["rows"]] == spec
    assert fit[0] != spec[0] and fit[1] != spec[1]
    assert any(n.startswith("with fitted constants the trtllm rows are IN SAMPLE") and "docs/VALIDATION.md" in n
               for n in doc["notes"])
    assert not any("IN SAMPLE" in n for n in lec["notes"])
    assert "step constants: SPEC §3's on every row (--constants lecture)" in lec["notes"]


def test_validate_on_another_file(capsys, tmp_path):
    path = str(write_csv(tmp_path / "m.csv", row(id="A1", engine="sglang", num_requests="8"),
                         row(id="T1", engine="trtllm", num_requests="8")))
    doc = _json(capsys, "validate", path, "--format", "json")
    assert any(n.startswith("the trtllm rows run on constants fitted to the shipped measurement set, not to these "
                            "rows") for n in doc["notes"])
    assert "step constants of the sglang rows: SPEC §3's (no sglang fit ships)" in doc["notes"]
    only_sglang = _json(capsys, "validate", path, "--engine", "sglang", "--format", "json")
    assert "step constants: SPEC §3's on every row (no sglang fit ships)" in only_sglang["notes"]
    rc, _, err = run(capsys, "validate", path, "--constants", "lecture", "--calibration", TRT)
    assert rc == 2 and "--constants: got 'lecture'; allowed: no value with --calibration" in err
