"""Calibration of the step model (fastsim.calibrate, `fastsim calibrate`, --calibration)."""
import json

import numpy as np
import pandas as pd
import pytest

from cliutil import run
from fastsim.calibrate import (Calibration, CalibrationEntry, PROFILES_DIR, calibrate, fit_steps, load_calibration,
                               read_allreduce_profile, read_op_profile)
from fastsim.catalog import default_catalog
from fastsim.errors import FastsimInputError
from fastsim.stepmodel import (StepConstants, decode_attn_flops, prefill_attn_flops, step_params, step_time)

TRUE = StepConstants(eta_compute=0.55, eta_bw=0.7, alpha_s=2e-6, eta_nvlink=0.7, overhead_s=2e-3)
FITTED = ("eta_compute", "eta_bw", "alpha_s", "eta_nvlink", "overhead_s")


def _synthetic(seed, noise=0.05, constants=TRUE):
    """Measured steps of H100 BF16 from known constants, times (1 + noise x N(0, 1))."""
    cat = default_catalog()
    rng = np.random.default_rng(seed)
    g, pr = cat.gpu("H100"), cat.precision("BF16")
    rows = []
    for name in ("llama-3.1-8b", "llama-3.1-70b"):
        m = cat.model(name)
        for tp in (1, 2, 4, 8):
            p = step_params(m, g, pr, tp, constants)
            for b in (1, 8, 32, 128):
                for ctx in (512, 4096):
                    rows.append((name, tp, b, 0, b * ctx))
            for c in (256, 1024, 4096):
                rows.append((name, tp, 0, c, 0))
                rows.append((name, tp, 16, c, 16 * 2048))
    recs = []
    for name, tp, d, pf, kv in rows:
        m = cat.model(name)
        p = step_params(m, g, pr, tp, constants)
        attn = decode_attn_flops(m.layers, m.attn_dim_decode, kv) + prefill_attn_flops(m.layers, m.attn_dim_prefill, pf)
        t = float(step_time(p, d + pf, kv, attn, d + (pf > 0))) * (1.0 + noise * rng.standard_normal())
        recs.append(dict(gpu="H100", precision="BF16", tp=tp, model=m.name, decode_tokens=d, prefill_tokens=pf,
                         kv_tokens=kv, step_s=t))
    df = pd.DataFrame(recs)
    df["line"] = np.arange(2, len(df) + 2)
    return df


def test_round_trip_recovers_known_constants_within_intervals():
    (fit,) = fit_steps(_synthetic(seed=1))
    assert set(fit.fitted) == set(FITTED)
    for k in FITTED:
        lo, hi = fit.interval95[k]
        true = getattr(TRUE, k)
        assert lo <= true <= hi, (k, lo, true, hi)
        assert fit.values[k] == pytest.approx(true, rel=0.1), k
        assert lo < fit.values[k] < hi
    # log residuals of 5% noise: median |error| about 0.67 x 5%
    assert 0.02 < fit.median_abs_rel_error < 0.05


def test_round_trip_interval_coverage_over_seeds():
    inside = total = 0
    for seed in range(12):
        (fit,) = fit_steps(_synthetic(seed=100 + seed))
        for k in FITTED:
            lo, hi = fit.interval95[k]
            inside += lo <= getattr(TRUE, k) <= hi
            total += 1
    assert inside / total >= 0.85, inside / total


def test_noiseless_fit_is_exact_and_compute_unidentified_when_all_memory_bound():
    (fit,) = fit_steps(_synthetic(seed=0, noise=0.0))
    for k in FITTED:
        assert fit.values[k] == pytest.approx(getattr(TRUE, k), rel=1e-6)
    d = _synthetic(seed=0, noise=0.0)
    d = d[(d.prefill_tokens == 0) & (d.decode_tokens <= 8)]
    (fit,) = fit_steps(d)
    assert "eta_compute" not in fit.fitted and "eta_compute" not in fit.interval95
    assert fit.values["eta_compute"] == StepConstants().eta_compute      # kept at the default


def test_profile_reader_on_shipped_files():
    ops = read_op_profile(PROFILES_DIR / "mlp_llama-2-70b-hf.csv")
    assert len(ops) == 1044 * 10
    mm = ops[ops.operation == "mlp_up_proj"]
    assert len(mm) == 1044 and sorted(mm.tp.unique()) == [1, 2, 4, 8]
    first = mm[(mm.num_tokens == 4096) & (mm.tp == 1)].iloc[0]
    assert first.time_s == pytest.approx(5.6685e-3)           # the file's median, ms -> s
    assert first.weight_params == 8192 * 2 * 28672            # gate + up, TP 1
    pre = ops[(ops.operation == "attn_pre_proj") & (ops.tp == 8)].iloc[0]
    assert pre.weight_params == 8192 * (8 + 2 * 1) * 128      # 64/8 query heads + 1 K and 1 V head per GPU
    assert ops.attrs["model"].layers == 80 and ops.attrs["model"].name == "llama-2-70b"
    ar = read_allreduce_profile(PROFILES_DIR / "all_reduce_h100_dgx.csv")
    assert len(ar) == 2982 and ar.groupby("gpus").size().to_dict() == {2: 994, 4: 994, 8: 994}
    assert (ar.gpus.iloc[0], ar.bytes.iloc[0], ar.time_s.iloc[0]) == (8, 2048.0, pytest.approx(0.037e-3))


def test_shipped_profiles_calibration_figures():
    r = calibrate(profiles="vidur-h100")
    mm = next(f for f in r.fits if f.kind == "matmul")
    assert len(mm.points) == 3 * 1044 * 4
    assert 0.6 < mm.values["eta_compute"] < 0.75 and 0.75 < mm.values["eta_bw"] <= 1.0
    assert mm.median_abs_rel_error <= 0.15
    c = r.calibration.step_constants("H100", "BF16")
    assert c.eta_compute == mm.values["eta_compute"] and c.overhead_s == StepConstants().overhead_s
    c8 = r.calibration.step_constants("H100", "BF16", 8)
    ar8 = next(f for f in r.fits if f.label == "all-reduce, 8 GPUs")
    assert c8.alpha_s == ar8.values["alpha_s"] and ar8.median_abs_rel_error < 0.1
    assert r.calibration.step_constants("H100", "FP8") == StepConstants()     # not measured: defaults
    assert r.calibration.step_constants("B200", "BF16", 8) == StepConstants()


def test_calibration_file_round_trip(tmp_path):
    r = calibrate(profiles="vidur-h100")
    path = tmp_path / "cal.toml"
    r.calibration.write(path)
    back = load_calibration(path)
    assert back.entries == r.calibration.entries
    assert back.step_constants("h100", "bf16", 4) == r.calibration.step_constants("H100", "BF16", 4)


def test_lookup_order():
    a = StepConstants(eta_compute=0.5)
    b = StepConstants(eta_compute=0.4)
    c = StepConstants(eta_compute=0.3)
    cal = Calibration((CalibrationEntry("*", "*", c), CalibrationEntry("H100", "*", b),
                       CalibrationEntry("H100", "FP8", a)))
    assert cal.step_constants("H100", "FP8") == a
    assert cal.step_constants("H100", "BF16") == b
    assert cal.step_constants("B200", "FP8") == c


@pytest.mark.parametrize("text,field", [
    ("gpu,precision,tp,model,decode_tokens,prefill_tokens,step_s\nH100,BF16,1,llama-3.1-8b,1,0,0.01\n",
     "line 1 (header): column kv_tokens"),
    ("gpu,precision,tp,model,decode_tokens,prefill_tokens,kv_tokens,step_s\n"
     "H100,BF16,1,llama-3.1-8b,1,0,100,0.01\nH100,BF16,1,llama-3.1-8b,1,0,100,-0.01\n", "line 3: step_s"),
    ("gpu,precision,tp,model,decode_tokens,prefill_tokens,kv_tokens,step_s\n"
     "H100,BF16,1,llama-3.1-8b,1,0,100,0\n", "line 2: step_s"),
    ("gpu,precision,tp,model,decode_tokens,prefill_tokens,kv_tokens,step_s\n"
     "Z100,BF16,1,llama-3.1-8b,1,0,100,0.01\n", "line 2: gpu"),
    ("gpu,precision,tp,model,decode_tokens,prefill_tokens,kv_tokens,step_s\n"
     "H100,BF16,1,llama-3.1-8b,-4,0,100,0.01\n", "line 2: decode_tokens"),
    ("gpu,precision,tp,model,decode_tokens,prefill_tokens,kv_tokens,step_s\n"
     "H100,BF16,3,llama-3.1-8b,1,0,100,0.01\n", "line 2: tp"),
])
def test_bad_measurement_files_one_line_error_exit_2(tmp_path, capsys, text, field):
    path = tmp_path / "steps.csv"
    path.write_text(text)
    rc, out, err = run(capsys, "calibrate", "--steps", str(path))
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fastsim calibrate: error: ")
    assert f"{path} {field}" in lines[0]


def test_cli_calibrate_steps_csv_json_and_file(tmp_path, capsys):
    d = _synthetic(seed=3)
    steps = tmp_path / "steps.csv"
    d.drop(columns="line").to_csv(steps, index=False)
    out_toml = tmp_path / "cal.toml"
    rc, out, err = run(capsys, "calibrate", "--steps", str(steps), "--out", str(out_toml), "--format", "json")
    assert rc == 0
    doc = json.loads(out)
    assert set(doc) == {"parameters", "residuals", "calibration_file", "calibration", "notes"}
    p = {r["parameter"]: r for r in doc["parameters"]}
    for k in FITTED:
        assert p[k]["ci95_low"] <= getattr(TRUE, k) <= p[k]["ci95_high"] and p[k]["used"]
    cal = load_calibration(out_toml)
    assert cal.step_constants("H100", "BF16").eta_bw == pytest.approx(p["eta_bw"]["value"])
    assert {r["operation"] for r in doc["residuals"]} == {"decode", "prefill", "mixed", "all"}


def test_cli_needs_an_input(capsys):
    rc, out, err = run(capsys, "calibrate")
    assert rc == 2 and "--steps / --profiles" in err


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_calibration_changes_plan_and_absent_flag_is_bit_identical(tmp_path, capsys):
    base = ["plan", "--scenario", "chat", "--gpu", "H100", "--no-verify", "--format", "json"]
    rc, plain, _ = run(capsys, *base)
    assert rc == 0
    # a file that restates the defaults changes nothing, bit for bit
    same = _write(tmp_path, "same.toml", 'format_version = 1\n[[constants]]\ngpu = "H100"\nprecision = "*"\n')
    rc, restated, _ = run(capsys, *base, "--calibration", same)
    assert rc == 0 and json.loads(restated)["plans"] == json.loads(plain)["plans"]
    # the shipped-profile calibration applied to every H100 precision moves the capacities
    r = calibrate(profiles="vidur-h100", precision="*")
    cal = tmp_path / "h100.toml"
    r.calibration.write(cal)
    rc, fitted, _ = run(capsys, *base, "--calibration", str(cal))
    assert rc == 0
    a = {(p["precision"], p["mode"], str(p.get("tp"))): p["capacity_req_per_s"] for p in json.loads(plain)["plans"]}
    b = {(p["precision"], p["mode"], str(p.get("tp"))): p["capacity_req_per_s"] for p in json.loads(fitted)["plans"]}
    common = set(a) & set(b)
    assert common and any(a[k] != b[k] for k in common)


def test_calibration_changes_ledger(tmp_path, capsys):
    r = calibrate(profiles="vidur-h100")
    cal = tmp_path / "h100.toml"
    r.calibration.write(cal)
    rc, plain, _ = run(capsys, "ledger", "--format", "json")
    rc2, fitted, _ = run(capsys, "ledger", "--format", "json", "--calibration", str(cal))
    assert rc == rc2 == 0
    p, f = json.loads(plain)["rows"][0], json.loads(fitted)["rows"][0]
    assert p["step_s"] == pytest.approx(8.48e-3, abs=0.01e-3)          # the lecture's figure, untouched
    # TP8 batch-1 decode: weight read at the fitted 83% of HBM bandwidth, NCCL-like all-reduces
    assert f["weight_read_s"] < p["weight_read_s"] and f["allreduce_s"] > 3 * p["allreduce_s"]


@pytest.mark.parametrize("text,field", [
    ('[[constants]]\ngpu = "H100"\nprecision = "BF16"\neta_bw = 1.5\n', "[[constants]] 1: eta_bw"),
    ('[[constants]]\ngpu = "Z100"\nprecision = "BF16"\n', "[[constants]] 1: gpu"),
    ('[[constants]]\ngpu = "H100"\nprecision = "BF16"\nspeed = 2\n', "[[constants]] 1: key"),
    ('[[constants]]\ngpu = "H100"\nprecision = "BF16"\n[[constants]]\ngpu = "h100"\nprecision = "bf16"\n',
     "[[constants]] 2: gpu, precision, tp"),
])
def test_bad_calibration_files(tmp_path, capsys, text, field):
    path = _write(tmp_path, "bad.toml", text)
    with pytest.raises(FastsimInputError, match=field.replace("[", r"\[").replace("]", r"\]")):
        load_calibration(path)
    rc, out, err = run(capsys, "ledger", "--calibration", path)
    assert rc == 2 and len(err.strip().splitlines()) == 1


def test_calibrate_plot(tmp_path, capsys):
    png = tmp_path / "cal.png"
    rc, out, err = run(capsys, "calibrate", "--profiles", "vidur-h100", "--plot", str(png))
    assert rc == 0 and png.stat().st_size > 10_000
    assert "median" in out and "all_reduce p=8" in out


def test_calibration_reaches_sweep(tmp_path, capsys):
    r = calibrate(profiles="vidur-h100")
    cal = tmp_path / "h100.toml"
    r.calibration.write(cal)
    base = ["sweep", "--axis", "gpu=H100", "--axis", "precision=BF16", "--axis", "tp=8", "--axis", "scenario=chat",
            "--axis", "mode=colocated", "--format", "json"]
    rc, plain, _ = run(capsys, *base)
    rc2, fitted, _ = run(capsys, *base, "--calibration", str(cal))
    assert rc == rc2 == 0
    a = [x["capacity_req_per_s"] for x in json.loads(plain)["rows"]]
    b = [x["capacity_req_per_s"] for x in json.loads(fitted)["rows"]]
    assert len(a) == len(b) >= 1 and a != b


def test_intervals_stay_in_range_and_other_gpus_refuse_the_h100_profiles():
    from fastsim.calibrate import calibrate
    from fastsim.errors import FastsimInputError
    rep = calibrate(profiles="vidur-h100", detail=True)
    for f in rep.fits:
        for n, (lo, hi) in f.interval95.items():
            if n.startswith("eta_"):
                assert 0.0 < lo <= f.values[n] <= hi <= 1.0, (f.label, n, lo, hi)
    with pytest.raises(FastsimInputError, match="H100"):
        calibrate(profiles="vidur-h100", gpu="B200")


def test_steps_with_a_config_json_model(tmp_path, monkeypatch):
    """A config.json path in the model column is read (relative to the CSV's directory), not misread as tp."""
    from fastsim.calibrate import read_step_measurements
    cfg = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
           "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 128256}
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(json.dumps(cfg))
    rows = ["gpu,precision,tp,model,decode_tokens,prefill_tokens,kv_tokens,step_s"]
    rows += [f"H100,BF16,1,cfg/config.json,{b},0,{b * 1000},{0.008 + b * 1e-5}" for b in (1, 8, 32, 64, 128)]
    (tmp_path / "steps.csv").write_text("\n".join(rows) + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    df = read_step_measurements("../steps.csv")
    assert set(df.model) == {str(tmp_path / "cfg" / "config.json")}
    assert len(fit_steps(df)) == 1
    (tmp_path / "bad.csv").write_text(rows[0] + "\nH100,BF16,1,nope/config.json,1,0,10,0.01\n")
    with pytest.raises(FastsimInputError) as exc:
        read_step_measurements(str(tmp_path / "bad.csv"))
    assert exc.value.field.endswith("line 2: model")
