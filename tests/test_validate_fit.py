"""Constants fitted to measurements through the simulator (fastsim.validate.fit), engine-tagged calibrations,
the engines' default KV-cache dtype, and the FP8 / FP4 compute factors of the step model."""
import json
import math

import pytest

from fastsim.catalog import default_catalog
from fastsim.cli import main
from fastsim.constants import Calibration, CalibrationEntry, load_calibration
from fastsim.errors import FastsimInputError
from fastsim.stepmodel import (P_ETA_C, P_LAYERS, P_QDIM_DEC, StepConstants, decode_attn_flops, step_params,
                               step_time)
from fastsim.validate import engine_constants, read_measurements, run_measurements
from fastsim.validate.fit import fit_measurements
from fastsim.validate.run import engine_kv_dtype

from test_validate import row, write_csv

# in the step form the engine's fits take (fastsim.validate.fit.ENGINE_STEP_FORM): a fit keeps its start's form
TRUE = StepConstants(eta_compute=0.45, eta_bw=0.6, overhead_s=2e-3, step_form="classes")


def _step_rows(prefix, engine="trtllm", constants=TRUE, gpu="H100"):
    """Decode steps of Llama-3.1-8B BF16 on one ``gpu``, their times from the step model at ``constants``."""
    cat = default_catalog()
    p = step_params(cat.model("llama-3.1-8b"), cat.gpu(gpu), cat.precision("BF16"), 1, constants)
    out = []
    for i, (b, ctx) in enumerate([(b, c) for b in (1, 8, 64, 512, 4096, 8192) for c in (100, 2000)]):
        kv = b * float(ctx)
        t = float(step_time(p, float(b), kv, decode_attn_flops(p[P_LAYERS], p[P_QDIM_DEC], kv), float(b)))
        out.append(row(id=f"{prefix}{i}", engine=engine, benchmark="step", metric="step_s", stat="mean", value=repr(t),
                       input_tokens=None, output_tokens=None, num_requests=None, max_num_batched_tokens=None,
                       max_num_seqs=None, batch=str(b), context_tokens=str(ctx), gpu=gpu))
    return out


def test_the_fit_recovers_the_constants_that_made_the_measurements_and_cross_validates(tmp_path):
    ms = read_measurements(write_csv(tmp_path / "m.csv", *_step_rows("A"), *_step_rows("C")))
    # the likelihood alone recovers the constants; the default prior (centred on SPEC §3's) moves a
    # constant these 24 exact rows pin by a few per cent at most (overhead_s, the least pinned, by 2%)
    fit = fit_measurements(ms, engine="trtllm", names=("eta_compute", "eta_bw", "overhead_s"), prior_log_sd=None)
    mapfit = fit_measurements(ms, engine="trtllm", names=("eta_compute", "eta_bw", "overhead_s"), cross_validate=False)
    for name in ("eta_compute", "eta_bw", "overhead_s"):
        assert getattr(fit.constants, name) == pytest.approx(getattr(TRUE, name), rel=1e-3), name
        assert getattr(mapfit.constants, name) == pytest.approx(getattr(TRUE, name), rel=3e-2), name
        assert abs(getattr(mapfit.constants, name) / getattr(fit.constants, name) - 1) > 1e-4   # the prior pulls
    assert fit.in_sample["fitted"]["median_abs_pct_error"] < 0.1
    assert fit.in_sample["start"]["median_abs_pct_error"] > 10          # SPEC §3's constants are far off here
    # leave one source out: two families, each fitted on the other's rows and judged on its own
    assert [f.family for f in fit.folds] == ["A", "C"]
    assert all(f.rows == 12 and f.median_abs_pct_error < 0.1 for f in fit.folds)
    assert fit.held_out["fitted"]["rows"] == 24
    assert fit.held_out["per_metric"]["step_s"]["fitted"]["rows"] == 24
    cal = fit.calibration("test")
    assert cal.engine == "trtllm" and cal.entries[0].gpu == "*"
    assert fit.constants.step_form == "classes" and 'step_form = "classes"' in cal.to_toml()
    for name, lo, hi in fit.interval95:
        assert lo <= getattr(fit.constants, name) <= hi


def test_families_without_a_shared_gpu_fit_the_engines_host_alone(tmp_path):
    """Family A on the H100 and C on the A100: no held-out family can judge a GPU's efficiencies, so a
    default fit fits the engine's host costs alone and keeps SPEC §3's efficiencies (fastsim.validate.fit,
    "GPUs no other family ran"); where the families share a GPU, the default names are all of them."""
    from fastsim.validate.fit import HOST_FITTED, _families_share_gpu as families_share_gpu, default_names
    cat = default_catalog()
    shared = read_measurements(write_csv(tmp_path / "s.csv", *_step_rows("A"), *_step_rows("C")))
    apart = read_measurements(write_csv(tmp_path / "a.csv", *_step_rows("A"), *_step_rows("C", gpu="A100")))
    assert families_share_gpu(shared) and not families_share_gpu(apart)
    assert not families_share_gpu(shared[:12])                          # one family shares with none
    fit = fit_measurements(apart, engine="trtllm", max_nfev=2, max_runs=None, cross_validate=False)
    # step rows measure no TTFT or E2E: no request overhead to fit
    assert fit.names == ("overhead_s", "overhead_per_seq_s", "overhead_per_layer_s")
    assert set(fit.names) < set(HOST_FITTED) and "eta_compute" in default_names(apart, cat)
    assert (fit.constants.eta_compute, fit.constants.eta_bw) == (StepConstants().eta_compute, StepConstants().eta_bw)
    assert [e.gpu for e in fit.entries] == ["*"]                        # no GPU entry: no efficiency to refit
    # names given are fitted as given
    assert fit_measurements(apart, engine="trtllm", names=("eta_bw",), max_nfev=2, max_runs=None,
                            cross_validate=False).names == ("eta_bw",)
    assert fit_measurements(shared, engine="trtllm", max_nfev=1, max_runs=None,
                            cross_validate=False).names == default_names(shared, cat)
    # one family has no held-out family to judge any constant by: its default fit fits them all
    from fastsim.validate.fit import host_only
    one = read_measurements(write_csv(tmp_path / "o.csv", *_step_rows("A-h"), *_step_rows("A-a", gpu="A100")))
    assert {m.family for m in one} == {"A"} and not families_share_gpu(one)       # one family, two GPUs
    assert host_only(apart) and not host_only(shared) and not host_only(one)
    assert fit_measurements(one, engine="trtllm", max_nfev=1, max_runs=None,
                            cross_validate=False).names == default_names(one, cat)


def test_calibrate_says_when_it_fits_the_host_alone_and_what_the_start_gives_held_out(capsys, tmp_path):
    from cliutil import run
    csv = write_csv(tmp_path / "m.csv", *_step_rows("A"), *_step_rows("C", gpu="A100"))
    rc, out, err = run(capsys, "calibrate", "--measurements", str(csv), "--engine", "trtllm", "--max-runs", "4")
    assert rc == 0, err
    assert ("note: the engine's own constants alone (overhead_s, overhead_per_seq_s, overhead_per_layer_s, "
            "request_overhead_s): no GPU is measured by two of these rows' source families") in out
    assert "note: no per-GPU entries: no efficiency is fitted" in out
    # each fold's start, run on its held-out rows unfitted, beside the fitted figure
    assert "note: held out unfitted (each fold's start: " in out and "24 rows), against fitted " in out


def _small_batch_rows(prefix):
    """Decode steps at 1 and 2 sequences: weight-read bound, so they pin ``weight bytes / eta_bw + overhead_s``
    and barely tell the two apart."""
    cat = default_catalog()
    p = step_params(cat.model("llama-3.1-8b"), cat.gpu("H100"), cat.precision("BF16"), 1, TRUE)
    out = []
    for i, (b, ctx) in enumerate([(1, 100), (1, 2000), (2, 100), (2, 2000)]):
        kv = b * float(ctx)
        t = float(step_time(p, float(b), kv, decode_attn_flops(p[P_LAYERS], p[P_QDIM_DEC], kv), float(b)))
        out.append(row(id=f"{prefix}{i}", engine="trtllm", benchmark="step", metric="step_s", stat="mean",
                       value=repr(t), input_tokens=None, output_tokens=None, num_requests=None,
                       max_num_batched_tokens=None, max_num_seqs=None, batch=str(b), context_tokens=str(ctx)))
    return out


def test_the_prior_keeps_what_the_rows_do_not_pin_near_its_start(tmp_path):
    """Rows that pin only a combination of two constants: both fits reproduce them, and the MAP fit is the
    one nearer its start (SPEC §3's constants) on the prior's scale (fastsim.validate.fit, "Priors")."""
    from fastsim.validate.fit import PRIOR_LOG_SD
    ms = read_measurements(write_csv(tmp_path / "m.csv", *_small_batch_rows("A")))
    names = ("eta_bw", "overhead_s")
    spec = StepConstants()

    def dist(c):
        return sum((math.log(getattr(c, n) / getattr(spec, n)) / PRIOR_LOG_SD[n]) ** 2 for n in names)

    exact = fit_measurements(ms, engine="trtllm", names=names, prior_log_sd=None, cross_validate=False)
    fit = fit_measurements(ms, engine="trtllm", names=names, cross_validate=False)
    for f in (exact, fit):
        assert f.in_sample["fitted"]["median_abs_pct_error"] < 1.0
    assert dist(fit.constants) < dist(exact.constants)
    with pytest.raises(FastsimInputError, match="prior_log_sd"):
        fit_measurements(ms, engine="trtllm", names=names, prior_log_sd={"eta_bw": 0.5}, cross_validate=False)
    for bad in ("wide", {"eta_bw": 0.5, "overhead_s": 1.0, "eta_bww": 0.5}, {"eta_bw": -0.5, "overhead_s": 1.0},
                {"eta_bw": float("nan"), "overhead_s": 1.0}, {"eta_bw": True, "overhead_s": 1.0}):
        with pytest.raises(FastsimInputError, match="prior_log_sd"):
            fit_measurements(ms, engine="trtllm", names=names, prior_log_sd=bad, cross_validate=False)
    assert fit.prior_log_sd == {"eta_bw": 0.5, "overhead_s": 1.0} and exact.prior_log_sd is None
    assert fit.to_dict()["prior_log_sd"] == fit.prior_log_sd


def test_the_compute_factor_priors_sit_inside_their_bounds():
    """SPEC §3's compute factors (1.0) are their upper bound: the priors are centred on the published
    low-precision GEMM speed-ups instead, inside the bounds (fastsim.validate.fit.PRIOR_CENTRE)."""
    from fastsim.validate.fit import BOUNDS, PRIOR_CENTRE
    assert PRIOR_CENTRE == {"fp8_compute_factor": 0.8, "fp4_compute_factor": 0.6}
    for n, c in PRIOR_CENTRE.items():
        assert BOUNDS[n][0] < c < BOUNDS[n][1] and getattr(StepConstants(), n) == BOUNDS[n][1]


def test_a_gpu_with_enough_rows_gets_an_entry_of_its_own(tmp_path):
    ms = read_measurements(write_csv(tmp_path / "m.csv", *_step_rows("A")))
    fit = fit_measurements(ms, engine="trtllm", names=("eta_bw",), min_gpu_rows=2, cross_validate=False)
    assert [e.gpu for e in fit.entries] == ["*"]                        # one GPU: the "*" entry is its own
    assert fit.folds == () and fit.held_out["fitted"]["rows"] == 0


def test_fit_refuses_bad_input(tmp_path):
    ms = read_measurements(write_csv(tmp_path / "m.csv", *_step_rows("A")))
    with pytest.raises(FastsimInputError, match="engine"):
        fit_measurements(ms, engine="tgi")
    with pytest.raises(FastsimInputError, match="an engine with rows"):
        fit_measurements(ms, engine="vllm")
    with pytest.raises(FastsimInputError, match="names"):
        fit_measurements(ms, engine="trtllm", names=("eta_magic",))


def test_calibrate_measurements_command_writes_an_engine_tagged_file(tmp_path, capsys):
    csv = write_csv(tmp_path / "m.csv", *_step_rows("A"), *_step_rows("C"))
    out = tmp_path / "cal.toml"
    assert main(["calibrate", "--measurements", str(csv), "--engine", "trtllm", "--fit", "eta_bw,overhead_s",
                 "--out", str(out), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["engine"] == "trtllm" and doc["names"] == ["eta_bw", "overhead_s"]
    assert [f["family"] for f in doc["folds"]] == ["A", "C"]
    cal = load_calibration(out)
    assert cal.engine == "trtllm"
    # eta_compute was not fitted: SPEC §3's 0.6 stays, and eta_bw / overhead_s absorb the compute-bound rows
    assert cal.entries[0].constants.eta_compute == 0.6
    assert any("maximum a posteriori" in n for n in doc["notes"])
    # --no-prior fits the likelihood alone: another optimum, said so
    out2 = tmp_path / "cal2.toml"
    assert main(["calibrate", "--measurements", str(csv), "--engine", "trtllm", "--fit", "eta_bw,overhead_s",
                 "--out", str(out2), "--format", "json", "--no-prior", "--no-cv"]) == 0
    doc2 = json.loads(capsys.readouterr().out)
    assert any("likelihood alone" in n for n in doc2["notes"])
    assert abs(load_calibration(out2).entries[0].constants.eta_bw / cal.entries[0].constants.eta_bw - 1) > 1e-4
    assert main(["calibrate", "--measurements", str(csv)]) == 2                    # --engine is required
    assert "--engine" in capsys.readouterr().err
    assert main(["calibrate", "--engine", "vllm", "--steps", str(csv)]) == 2       # --engine needs --measurements


def test_an_engine_tagged_calibration_applies_to_its_engine_only(tmp_path):
    slow = StepConstants(eta_bw=0.4)
    cal = Calibration((CalibrationEntry("*", "*", slow),), "test", "vllm")
    pick = engine_constants(cal)
    assert pick("vllm") is cal and pick("trtllm") == StepConstants()
    ms = read_measurements(write_csv(tmp_path / "m.csv", *_step_rows("A", "vllm")[:1], *_step_rows("C", "trtllm")[:1]))
    base = run_measurements(ms)
    with_cal = run_measurements(ms, constants=cal)
    assert with_cal[0].predicted > base[0].predicted                    # the vllm row ran slower
    assert with_cal[1].predicted == base[1].predicted                   # the trtllm row did not change
    with pytest.raises(FastsimInputError, match="one calibration per engine"):
        engine_constants([cal, cal])
    text = cal.to_toml()
    assert 'engine = "vllm"' in text
    p = tmp_path / "c.toml"
    p.write_text(text, encoding="utf-8")
    assert load_calibration(p).engine == "vllm"
    p.write_text(text.replace('engine = "vllm"', 'engine = "tgi"'), encoding="utf-8")
    with pytest.raises(FastsimInputError, match="engine"):
        load_calibration(p)


@pytest.mark.parametrize("engine, precision, dtype", [
    ("vllm", "FP8", "bf16"),       # vllm/config/cache.py: "auto" is the model's dtype, whatever the weights
    ("vllm", "BF16", "bf16"),
    ("sglang", "FP8", "bf16"),     # sglang server_args: kv_cache_dtype "auto" uses the model's dtype
    ("trtllm", "FP8", "fp8"),      # trtllm-bench _KV_CACHE_MAP: FP8 -> fp8
    ("trtllm", "NVFP4", "fp8"),    # NVFP4 -> fp8
    ("trtllm", "MXFP4", "bf16"),   # not in the map: the model's dtype
    ("trtllm", "BF16", "bf16"),
])
def test_the_engines_default_kv_cache_dtype(engine, precision, dtype):
    assert engine_kv_dtype(engine, default_catalog().precision(precision)) == dtype


def test_kv_cache_dtype_column_changes_the_kv_pool(tmp_path):
    """An FP8 vLLM run holds its KV in BF16 unless the row says fp8: half the tokens, a smaller batch."""
    base = dict(precision="FP8", num_requests="400", input_tokens="2048", output_tokens="256",
                max_num_seqs="256", max_num_batched_tokens="8192")
    ms = read_measurements(write_csv(tmp_path / "m.csv", row(id="D1", **base),
                                     row(id="D2", kv_cache_dtype="fp8_e4m3", **base)))
    assert [m.kv_cache_dtype for m in ms] == ["", "fp8"]
    r = run_measurements(ms)
    assert r[1].predicted > r[0].predicted
    bad = write_csv(tmp_path / "bad.csv", row(id="D3", kv_cache_dtype="int4"))
    with pytest.raises(FastsimInputError, match="kv_cache_dtype"):
        read_measurements(bad)


def test_the_shipped_gpt_oss_rows_run_the_published_fp8_kv_cache():
    """The perf-overview's GPT-OSS llm_options.yml sets kv_cache_config dtype fp8 (B200, GB200), where
    trtllm-bench's own map would keep an MXFP4 checkpoint's KV at BF16: the rows say so, and run one byte a value."""
    from fastsim.catalog import load_catalog
    from fastsim.validate import SHIPPED_CATALOG, SHIPPED_MEASUREMENTS
    from fastsim.validate.run import _row_precision
    cat = load_catalog([str(SHIPPED_CATALOG)])
    oss = [m for m in read_measurements(SHIPPED_MEASUREMENTS, cat) if m.model.startswith("gpt-oss")]
    assert len(oss) == 20 and {m.gpu for m in oss} == {"B200", "GB200"}
    assert {m.kv_cache_dtype for m in oss} == {"fp8"}
    assert {_row_precision(m, cat.precision(m.precision)).kv_bytes for m in oss} == {1}


def test_fp8_and_fp4_compute_factors_scale_only_their_peaks():
    cat = default_catalog()
    c = StepConstants(fp8_compute_factor=0.75, fp4_compute_factor=0.5)
    m, g = cat.model("llama-3.1-8b"), cat.gpu("B200")
    assert step_params(m, g, cat.precision("BF16"), 1, c)[P_ETA_C] == 0.6
    assert step_params(m, g, cat.precision("FP8"), 1, c)[P_ETA_C] == pytest.approx(0.45, rel=1e-15)
    assert step_params(m, g, cat.precision("NVFP4"), 1, c)[P_ETA_C] == pytest.approx(0.3, rel=1e-15)
    assert step_params(m, g, cat.precision("FP8"), 1)[P_ETA_C] == 0.6          # SPEC §3: one efficiency
    with pytest.raises(FastsimInputError, match="fp8_compute_factor"):
        StepConstants(fp8_compute_factor=2.0)                                     # 0.6 x 2 > 1
    with pytest.raises(FastsimInputError, match="fp4_compute_factor"):
        StepConstants(fp4_compute_factor=0.0)
    assert math.isclose(c.compute_efficiency("fp8"), 0.45)


def test_fitted_calibrations_are_engine_tagged_files(tmp_path):
    from fastsim.validate import fitted_calibrations
    with pytest.raises(FastsimInputError, match="none there"):
        fitted_calibrations(tmp_path)
    Calibration((CalibrationEntry("*", "*", StepConstants(eta_kv=0.5)),), "t", "trtllm").write(tmp_path / "trtllm.toml")
    cals = fitted_calibrations(tmp_path)
    assert [c.engine for c in cals] == ["trtllm"] and cals[0].entries[0].constants.eta_kv == 0.5
    Calibration((CalibrationEntry("*", "*", StepConstants()),), "t").write(tmp_path / "untagged.toml")
    with pytest.raises(FastsimInputError, match="engine tag"):
        fitted_calibrations(tmp_path)


def test_validate_refuses_fitted_constants_with_a_calibration(tmp_path, capsys):
    cal = tmp_path / "c.toml"
    Calibration((CalibrationEntry("*", "*", StepConstants()),), "t").write(cal)
    assert main(["validate", "--constants", "fitted", "--calibration", str(cal), "--only", "S1"]) == 2
    assert "--constants" in capsys.readouterr().err


def test_v2_constants_round_trip_through_a_calibration_file(tmp_path):
    c = StepConstants(eta_kv=0.55, fp8_compute_factor=0.8, kv_memory="trtllm", reserved_bytes_per_gpu=2e9)
    p = tmp_path / "v2.toml"
    Calibration((CalibrationEntry("H100", "*", c),), "t", "trtllm").write(p)
    text = p.read_text(encoding="utf-8")
    assert 'kv_memory = "trtllm"' in text and "eta_kv = 0.55" in text and "fp4_compute_factor" not in text
    assert load_calibration(p).entries[0].constants == c


def test_a_fold_fits_only_what_its_rows_pin(tmp_path):
    """A held-out family never sets a constant: one the fold's rows cannot pin stays SPEC §3's."""
    from fastsim.validate.fit import START_REQUEST_OVERHEAD_S, _fold_names, default_names
    cat = default_catalog()
    ms = read_measurements(write_csv(
        tmp_path / "m.csv", row(id="A1", precision="FP8"), row(id="A2"),
        row(id="ON", benchmark="online", rate_req_per_s="2", metric="ttft_s", stat="mean", value="0.05")))
    names = default_names(ms, cat)
    assert "request_overhead_s" in names and "fp8_compute_factor" in names
    start = StepConstants(request_overhead_s=START_REQUEST_OVERHEAD_S)
    keep, st = _fold_names(names, start, [m for m in ms if m.id != "ON"], cat)
    assert "request_overhead_s" not in keep and st.request_overhead_s == 0.0
    keep, st = _fold_names(names, start, [m for m in ms if m.id == "A2"], cat)
    assert "fp8_compute_factor" not in keep and st.fp8_compute_factor == 1.0
    keep, st = _fold_names(names, start, ms, cat)
    assert keep == names and st is start


def test_calibrate_measurements_table_shows_spec_3s_values_beside_the_start(tmp_path, capsys):
    # the fit of the host time per sequence starts at 10 us (inside its bounds), SPEC §3 has none: the
    # table's "SPEC §3" column is SPEC §3's value, the start its own column
    truth = StepConstants(eta_bw=0.6, overhead_per_seq_s=3e-5, step_form="classes")
    csv = write_csv(tmp_path / "m.csv", *_step_rows("A", constants=truth), *_step_rows("C", constants=truth))
    assert main(["calibrate", "--measurements", str(csv), "--engine", "trtllm", "--fit", "eta_bw,overhead_per_seq_s",
                 "--no-cv"]) == 0
    out = capsys.readouterr().out
    head = next(ln for ln in out.splitlines() if ln.startswith("GPU"))
    assert head.split()[-4:] == ["interval", "start", "SPEC", "§3"]
    row = next(ln for ln in out.splitlines() if "overhead_per_seq_s" in ln).split()
    assert row[-2:] == ["0.0100", "0.0000"]           # ms: the 10 us start, SPEC §3's 0
    # the 30 us that made the rows ("(ms)" before it), within 1%: the prior centred on the 10 us start pulls a little
    assert float(row[4]) == pytest.approx(0.03, rel=1e-2)
    assert main(["calibrate", "--measurements", str(csv), "--engine", "trtllm", "--fit", "eta_kv,overhead_s",
                 "--no-cv", "--format", "json"]) == 0
    p = {r["parameter"]: r for r in json.loads(capsys.readouterr().out)["parameters"]}
    assert p["eta_kv"]["spec"] == 0.8 and p["eta_kv"]["default"] == 0.8        # eta_bw's, not null
    assert p["overhead_s"]["spec"] == 1e-3


def test_the_joint_fit_recovers_each_gpus_efficiencies_and_shrinks_them_together(tmp_path):
    """Two GPUs whose rows were made with different weight-read efficiencies (H100 0.6, H200 0.4) and one
    shared fixed time: the joint fit (fastsim.validate.fit, "Per-GPU entries") recovers both GPUs' eta_bw
    and the shared overhead_s exactly without priors; with them (each GPU's eta_bw around the "*" one, SD
    GPU_LOG_SD) the two GPU figures stay within a few per cent and move towards each other."""
    from dataclasses import replace
    slow = replace(TRUE, eta_bw=0.4)
    csv = write_csv(tmp_path / "m.csv", *_step_rows("A", "vllm"), *_step_rows("C", "vllm", slow, gpu="H200"))
    ms = read_measurements(csv)
    names = ("eta_compute", "eta_bw", "overhead_s")
    exact = fit_measurements(ms, engine="vllm", names=names, min_gpu_rows=12, prior_log_sd=None,
                             cross_validate=False)
    assert exact.gpu_fit == "joint"                      # vLLM's method (ENGINE_GPU_FIT)
    by = {e.gpu: e.constants for e in exact.entries}
    assert sorted(by) == ["*", "H100", "H200"]
    assert by["H100"].eta_bw == pytest.approx(0.6, rel=1e-3) and by["H200"].eta_bw == pytest.approx(0.4, rel=1e-3)
    for g in ("H100", "H200"):
        assert by[g].overhead_s == pytest.approx(TRUE.overhead_s, rel=1e-3)
        assert by[g].eta_compute == pytest.approx(TRUE.eta_compute, rel=1e-2)
    assert exact.in_sample["fitted"]["median_abs_pct_error"] < 0.1
    mapfit = fit_measurements(ms, engine="vllm", names=names, min_gpu_rows=12, cross_validate=False)
    m = {e.gpu: e.constants for e in mapfit.entries}
    assert m["H200"].eta_bw == pytest.approx(0.4, rel=3e-2) and m["H100"].eta_bw == pytest.approx(0.6, rel=3e-2)
    assert m["H100"].eta_bw / m["H200"].eta_bw < 0.6 / 0.4            # pulled towards each other
    assert mapfit.to_dict()["gpu_fit"] == "joint" and mapfit.to_dict()["gpu_log_sd"] == 0.5
    # the sequential method on the same rows, and a method that does not exist
    seq = fit_measurements(ms, engine="vllm", names=names, min_gpu_rows=12, prior_log_sd=None,
                           cross_validate=False, gpu_fit="sequential")
    assert seq.gpu_fit == "sequential" and seq.to_dict()["gpu_log_sd"] is None
    for bad in ("pooled", 1, None.__class__):
        with pytest.raises(FastsimInputError, match="gpu_fit"):
            fit_measurements(ms, engine="vllm", names=names, cross_validate=False, gpu_fit=bad)


def test_calibrate_measurements_gpu_fit_flag(tmp_path, capsys):
    """``calibrate --measurements --gpu-fit`` picks the per-GPU method and the notes say which one ran."""
    from dataclasses import replace
    csv = write_csv(tmp_path / "m.csv", *_step_rows("A", "vllm"),
                    *_step_rows("C", "vllm", replace(TRUE, eta_bw=0.4), gpu="H200"))
    for flag, word in (([], "jointly"), (["--gpu-fit", "sequential"], "sequentially")):
        assert main(["calibrate", "--measurements", str(csv), "--engine", "vllm", "--fit", "eta_bw,overhead_s",
                     "--no-cv", "--format", "json", *flag]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["gpu_fit"] == {"jointly": "joint", "sequentially": "sequential"}[word]
        assert any(f"per-GPU entries fitted {word}, 0 GPU(s)" in n for n in doc["notes"])   # 12 rows a GPU
    with pytest.raises(SystemExit):
        main(["calibrate", "--measurements", str(csv), "--engine", "vllm", "--gpu-fit", "pooled"])
    assert "--gpu-fit" in capsys.readouterr().err
