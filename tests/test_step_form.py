"""The step time by kernel classes (StepConstants.step_form "classes", step model v2).

SPEC §3 takes one roofline over the whole step, ``max(weight + KV read, GEMM + attention
FLOPs)``; an engine runs a layer's GEMMs and its attention as separate kernels, so the
``"classes"`` form sums a roofline per class, ``max(weight read, GEMM compute) + max(KV read,
attention compute)``. Under SPEC §3's form (the default) every step time is unchanged to the
bit; under the classes form every simulator path agrees with its pure-Python reference to the
bit, and closed forms give the step.
"""
from __future__ import annotations

import numpy as np
import pytest

from fastsim.catalog import default_catalog
from fastsim.errors import FastsimInputError
from fastsim.sim import ColocatedPlan
from fastsim.stepmodel import (P_CLASSES, P_GPUS, P_HBM_BW, P_KVPG, P_MATMUL, P_PEAK, P_WDENSE,
                               StepConstants, class_compute, decode_attn_flops, stage_params, step_params, step_parts,
                               step_time, step_time_nb)

from kernel_checks import reference_tests

CAT = default_catalog()
M8, H200, FP8 = CAT.model("llama-3.1-8b"), CAT.gpu("H200"), CAT.precision("FP8")
K = StepConstants(step_form="classes")


def test_spec_form_is_the_default_and_leaves_every_step_time_alone():
    p0 = step_params(M8, H200, FP8, 1)
    assert StepConstants().step_form == "spec" and p0[P_CLASSES] == 0.0
    assert step_params(M8, H200, FP8, 1, K)[P_CLASSES] == 1.0
    b = np.array([1.0, 64.0, 840.0])
    kv = b * 2000.0
    attn = decode_attn_flops(M8.layers, M8.attn_dim_decode, kv)
    w, kvs, comp, ar, a2a = step_parts(p0, b, kv, attn)
    np.testing.assert_array_equal(step_time(p0, b, kv, attn, b), np.maximum(w + kvs, comp) + (ar + a2a) + 0.0 + 1e-3)
    with pytest.raises(FastsimInputError, match="step_form: got 'overlap'; allowed: one of spec, classes"):
        StepConstants(step_form="overlap")


def test_a_large_decode_batch_pays_its_gemms_and_its_kv_read_in_turn():
    # Llama-3.1-8B FP8 on H200 at 840 running sequences of 2,000 tokens: the GEMMs are compute
    # bound, the KV read bandwidth bound; the classes form adds the two, SPEC §3's takes the larger
    p0, p1 = step_params(M8, H200, FP8, 1), step_params(M8, H200, FP8, 1, K)
    b, kv = 840.0, 840.0 * 2000.0
    attn = decode_attn_flops(M8.layers, M8.attn_dim_decode, kv)
    d_c = 0.6 * p1[P_PEAK]
    gemm = 2.0 * p1[P_MATMUL] * b / d_c
    kv_s = kv * p1[P_KVPG] / (0.8 * p1[P_HBM_BW])
    w_s = p1[P_WDENSE] / (0.8 * p1[P_HBM_BW])
    attn_s = attn / d_c
    assert gemm > w_s and kv_s > attn_s
    assert float(step_time(p1, b, kv, attn, b)) == pytest.approx(gemm + kv_s + 1e-3, rel=1e-12)
    assert float(step_time(p0, b, kv, attn, b)) == pytest.approx(max(w_s + kv_s, gemm + attn_s) + 1e-3, rel=1e-12)
    assert float(step_time(p1, b, kv, attn, b)) > 1.2 * float(step_time(p0, b, kv, attn, b))
    g, a = class_compute(p1, b, attn)
    assert float(g) == pytest.approx(gemm, rel=1e-12) and float(a) == pytest.approx(attn_s, rel=1e-12)
    # a lone decode reads weights and KV (both classes bandwidth bound) and a long prefill computes
    # (both compute bound): the forms agree
    for n, c, at in ((1.0, 2000.0, decode_attn_flops(M8.layers, M8.attn_dim_decode, 2000.0)), (8192.0, 0.0, 0.0)):
        assert float(step_time(p1, n, c, at, 1.0)) == pytest.approx(float(step_time(p0, n, c, at, 1.0)), rel=1e-12)


def test_the_kernels_scalar_step_time_is_the_same_expression():
    p1 = step_params(CAT.model("llama-3.1-70b"), H200, FP8, 4, K)
    assert p1[P_GPUS] == 4.0
    for b in (1.0, 8.0, 256.0, 1300.0):
        kv = b * 1500.0
        attn = decode_attn_flops(80, CAT.model("llama-3.1-70b").attn_dim_decode, kv)
        assert step_time_nb(p1, b, kv, attn, b) == float(step_time(p1, b, kv, attn, b))


def test_the_form_is_carried_in_calibration_files(tmp_path):
    from fastsim.constants import Calibration, CalibrationEntry, load_calibration
    cal = Calibration((CalibrationEntry("*", "*", K),), engine="trtllm")
    path = tmp_path / "c.toml"
    cal.write(path)
    assert 'step_form = "classes"' in path.read_text(encoding="utf-8")
    assert load_calibration(path).step_constants("H200", "FP8", 1).step_form == "classes"
    assert "step_form =" not in Calibration((CalibrationEntry("*", "*", StepConstants()),)).to_toml()
    bad = tmp_path / "bad.toml"
    bad.write_text('format_version = 1\n\n[[constants]]\ngpu = "*"\nprecision = "*"\nstep_form = 1\n', encoding="utf-8")
    with pytest.raises(FastsimInputError, match="step_form: got 1; allowed: a string: spec or classes"):
        load_calibration(bad)


def test_the_ledger_step_is_the_step_model_s():
    from fastsim.ledger import ledger
    r0 = ledger("llama-3.1-8b", "H200", "FP8", 1, batch=840, context_tokens=2000)
    r1 = ledger("llama-3.1-8b", "H200", "FP8", 1, batch=840, context_tokens=2000, constants=K)
    p1 = step_params(M8, H200, FP8, 1, K)
    kv = 840.0 * 2000.0
    attn = decode_attn_flops(M8.layers, M8.attn_dim_decode, kv)
    # the ledger's step adds its own launch term where the step model has overhead_s
    assert r1.step_s - r1.launch_s - r1.host_s == pytest.approx(float(step_time(p1, 840.0, kv, attn, 840.0)) - 1e-3,
                                                               rel=1e-9)
    assert r1.step_s > r0.step_s
    # the columns are the parts of SPEC §3 (compute = GEMM + attention); the step adds the GEMMs' compute
    # and the KV read (each class's larger side), and the binding weighs the KV read against the GEMMs
    gemm, attn = class_compute(p1, 840.0, attn)
    assert r1.compute_s == r0.compute_s == pytest.approx(float(gemm + attn), rel=1e-12)
    assert r1.step_s - r1.launch_s - r1.host_s - r1.allreduce_s == pytest.approx(float(gemm) + r1.kv_read_s, rel=1e-9)
    assert r1.binding == "memory"


# ---------------------------------------------------------------- kernels against their references

# a small GPU peak, so that the classes' compute binds at the batches the tests reach
_SLOW = CAT.gpu("H100")
PK = step_params(M8, _SLOW, CAT.precision("BF16"), 1, K)
PK[P_PEAK] = PK[P_PEAK] / 200.0


def _slow_stages(S):
    rows = stage_params(M8, _SLOW, FP8, 1, K, pp=S)
    rows[:, P_PEAK] = rows[:, P_PEAK] / 200.0
    return rows


def test_the_slow_peak_makes_both_classes_bind_somewhere():
    p0 = PK.copy()
    p0[P_CLASSES] = 0.0
    b = np.array([1.0, 4.0, 16.0])
    kv = b * 300.0
    attn = decode_attn_flops(M8.layers, M8.attn_dim_decode, kv)
    assert (step_time(PK, b, kv, attn, b) != step_time(p0, b, kv, attn, b)).any()


(test_colocated_kernel_matches_reference, test_disaggregated_kernel_matches_reference,
 test_policy_kernel_matches_reference, test_pipeline_kernel_matches_reference) = reference_tests(PK, _slow_stages)


def test_the_ledger_command_says_how_its_columns_add_up_under_the_classes_form(tmp_path, capsys):
    from fastsim.cli import main
    cal = tmp_path / "classes.toml"
    cal.write_text('format_version = 1\n\n[[constants]]\ngpu = "*"\nprecision = "*"\nstep_form = "classes"\n',
                   encoding="utf-8")
    args = ["ledger", "--model", "llama-3.1-8b", "--gpu", "H200", "--precision", "FP8", "--tp", "1", "--batch", "840",
            "--context", "2000"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "step = max(weight + KV, compute) + all-reduce + launch" in out and "step form" not in out
    assert main(args + ["--calibration", str(cal)]) == 0
    out = capsys.readouterr().out
    assert "step = max(weight, GEMM) + max(KV, attention) + all-reduce + launch" in out
    assert "note: step form: classes" in out
    # 1.954 ms of weights (its class bound by the GEMMs' 10.618 ms of compute) and 28.672 ms of KV read
    assert "1.954" in out and "11.360" in out and "28.672" in out and "39.674" in out
    # the plot's bars are the step, in either form
    from fastsim.ledger import ledger_table, plot_ledger
    df = ledger_table(M8, H200, FP8, 1, batch=[1, 840], context_tokens=2000, constants=K)
    plot_ledger(df, tmp_path / "l.png")
    rest = df.weight_read_s + df.kv_read_s + df.launch_s + df.allreduce_s + df.host_s
    assert ((df.step_s - rest) >= 0).all() and (df.step_s - rest).iloc[1] == pytest.approx(10.618e-3 - 1.954e-3, rel=1e-3)


# ---------------------------------------------------------------- the fixed time per layer

def test_the_fixed_time_per_layer_adds_to_the_step_overhead_by_the_model_s_depth():
    from fastsim.stepmodel import P_LAYERS, P_OVERHEAD
    c = 5e-6
    kc = StepConstants(overhead_per_layer_s=c)
    m70 = CAT.model("llama-3.1-70b")
    assert step_params(M8, H200, FP8, 1)[P_OVERHEAD] == 1e-3            # SPEC §3, to the bit
    assert step_params(M8, H200, FP8, 1, kc)[P_OVERHEAD] == pytest.approx(1e-3 + 32 * c, rel=1e-12)
    assert step_params(m70, H200, FP8, 4, kc)[P_OVERHEAD] == pytest.approx(1e-3 + 80 * c, rel=1e-12)
    # a pipeline stage pays for its own layers
    S = stage_params(m70, H200, FP8, 4, kc, pp=2)
    np.testing.assert_allclose(S[:, P_OVERHEAD], 1e-3 + S[:, P_LAYERS] * c, rtol=1e-12)
    assert S[:, P_LAYERS].sum() == 80
    np.testing.assert_array_equal(stage_params(m70, H200, FP8, 4, pp=2)[:, P_OVERHEAD], 1e-3)
    with pytest.raises(FastsimInputError, match="overhead_per_layer_s"):
        StepConstants(overhead_per_layer_s=-1e-6)


def test_the_fixed_time_per_layer_is_carried_in_calibration_files_and_fitted(tmp_path):
    from fastsim.constants import Calibration, CalibrationEntry, load_calibration
    from fastsim.validate.fit import FITTABLE
    path = tmp_path / "c.toml"
    Calibration((CalibrationEntry("*", "*", StepConstants(overhead_per_layer_s=4e-6)),), engine="trtllm").write(path)
    assert "overhead_per_layer_s = 4e-06" in path.read_text(encoding="utf-8")
    assert load_calibration(path).step_constants("H200", "FP8", 1).overhead_per_layer_s == 4e-6
    assert "overhead_per_layer_s" in FITTABLE


def test_a_parameter_vector_with_another_form_code_is_refused():
    p = step_params(M8, H200, FP8, 1, K).copy()
    p[P_CLASSES] = 0.5
    with pytest.raises(FastsimInputError, match=r"p\[P_CLASSES\]: got 0.5; allowed: 0.0 .* or 1.0"):
        ColocatedPlan(p, 1, 512)
