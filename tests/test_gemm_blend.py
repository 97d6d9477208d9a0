"""The GEMM class's blend of weight read and compute (StepConstants.gemm_blend_p, step model v2).

The roofline takes a GEMM's time as the larger of its weight read and its compute; near the ridge a
real GEMM reaches neither peak (tile and wave quantisation), and Vidur's measured H100 matmul times
follow the p-norm ``(read^p + compute^p)^(1/p)`` with ``p`` about 1.23. These tests check the
p-norm's closed forms and invariants, that ``None`` (the default) leaves every step time alone to
the bit, that every simulator path agrees with its pure-Python reference under the blend, that the
exponent is carried in calibration files and refused where it means nothing, and that the shipped
profiles give the exponent the fits start from.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastsim.catalog import default_catalog
from fastsim.errors import FastsimInputError
from fastsim.formulas import gemm_blend_s
from fastsim.sim import ColocatedPlan
from fastsim.stepmodel import (P_CLASSES, P_GEMM_Q, P_PEAK, StepConstants, class_compute, decode_attn_flops,
                               gemm_blend_nb, stage_params, step_params, step_parts, step_time, step_time_nb)

from kernel_checks import reference_tests

CAT = default_catalog()
M8, H100, BF16 = CAT.model("llama-3.1-8b"), CAT.gpu("H100"), CAT.precision("BF16")
KB = StepConstants(step_form="classes", gemm_blend_p=1.23)

times = st.floats(0.0, 10.0, allow_nan=False)


def test_closed_forms():
    # p infinite (q = 0): the max, bit for bit; p = 1: the sum; p = 2: the hypotenuse
    assert gemm_blend_s(3e-3, 4e-3, 0.0) == 4e-3
    assert gemm_blend_s(3e-3, 4e-3, 1.0) == pytest.approx(7e-3, rel=1e-15)
    assert gemm_blend_s(3e-3, 4e-3, 0.5) == pytest.approx(5e-3, rel=1e-15)
    # equal parts: 2^(1/p) of either; at p = 1.23, 1.757
    assert gemm_blend_s(1.0, 1.0, 1 / 1.23) == pytest.approx(2 ** (1 / 1.23), rel=1e-15)
    # nothing to read and nothing to compute: zero, not NaN
    assert gemm_blend_s(0.0, 0.0, 0.8) == 0.0
    assert gemm_blend_nb(0.0, 0.0, 0.8) == 0.0
    np.testing.assert_array_equal(gemm_blend_s(np.array([1.0, 2.0]), np.array([3.0, 1.0]), np.array([0.0, 0.0])),
                                  [3.0, 2.0])


@settings(max_examples=200, deadline=None)
@given(a=times, b=times, p=st.floats(1.0, 50.0))
def test_between_the_max_and_the_sum_symmetric_and_the_kernels_scalar_agrees(a, b, p):
    q = 1.0 / p
    v = float(gemm_blend_s(a, b, q))
    assert max(a, b) <= v * (1 + 1e-12) and v <= (a + b) * (1 + 1e-12)
    assert v == float(gemm_blend_s(b, a, q))
    assert gemm_blend_nb(a, b, q) == pytest.approx(v, rel=1e-14, abs=0.0)
    assert gemm_blend_nb(a, b, 0.0) == max(a, b)


def test_none_leaves_the_classes_step_alone_to_the_bit():
    k0 = StepConstants(step_form="classes")
    assert k0.gemm_blend_p is None and step_params(M8, H100, BF16, 1, k0)[P_GEMM_Q] == 0.0
    p0 = step_params(M8, H100, BF16, 1, k0)
    b = np.array([1.0, 64.0, 300.0, 840.0, 4096.0])
    kv = b * 2000.0
    attn = decode_attn_flops(M8.layers, M8.attn_dim_decode, kv)
    w, kvs, _, ar, a2a = step_parts(p0, b, kv, attn)
    gemm, at = class_compute(p0, b, attn)
    np.testing.assert_array_equal(step_time(p0, b, kv, attn, b),
                                  np.maximum(w, gemm) + np.maximum(kvs, at) + (ar + a2a) + 0.0 + 1e-3)


def test_the_step_by_hand_near_the_ridge():
    # Llama-3.1-8B BF16 on an H100 at 300 tokens: the GEMMs' read and compute are close (the ridge of
    # an H100 at eta 0.6 / 0.8 is about 220 tokens), where the blend adds the most
    p = step_params(M8, H100, BF16, 1, KB)
    assert p[P_GEMM_Q] == 1.0 / 1.23
    n, kv = 300.0, 300.0 * 1000.0
    attn = decode_attn_flops(M8.layers, M8.attn_dim_decode, kv)
    w, kvs, _, ar, a2a = step_parts(p, n, kv, attn)
    gemm, at = class_compute(p, n, attn)
    lo, hi = sorted((float(w), float(gemm)))
    blended = hi * (1 + (lo / hi) ** 1.23) ** (1 / 1.23)
    want = blended + max(float(kvs), float(at)) + float(ar + a2a) + 1e-3
    assert float(step_time(p, n, kv, attn, n)) == pytest.approx(want, rel=1e-13)
    assert step_time_nb(p, n, kv, attn, n) == float(step_time(p, n, kv, attn, n))
    # the blend costs 50-75% of the GEMM class here: the read is 4.8 ms, the compute 4.2 ms
    assert 1.5 * hi < blended < 1.75 * hi
    # far from the ridge it costs little: one decode token
    w1, gemm1 = float(step_parts(p, 1.0, 0.0, 0.0)[0]), float(class_compute(p, 1.0, 0.0)[0])
    assert float(gemm_blend_s(w1, gemm1, 1 / 1.23)) == pytest.approx(w1, rel=2e-3)


def test_the_pipeline_stages_carry_it():
    rows = stage_params(M8, H100, BF16, 1, KB, pp=2)
    assert (rows[:, P_GEMM_Q] == 1.0 / 1.23).all()


def test_bad_exponents_are_refused_naming_the_field():
    for v in (0.5, 0.0, -1.0, math.nan, math.inf, True, "2"):
        with pytest.raises(FastsimInputError, match=r"gemm_blend_p: got .*; allowed: a finite exponent >= 1"):
            StepConstants(step_form="classes", gemm_blend_p=v)
    with pytest.raises(FastsimInputError, match=r"gemm_blend_p: got 1.23; allowed: None under step_form 'spec'"):
        StepConstants(gemm_blend_p=1.23)
    p = step_params(M8, H100, BF16, 1, KB).copy()
    p[P_CLASSES] = 0.0
    with pytest.raises(FastsimInputError, match=r"p\[P_GEMM_Q\]: got 0.81.*; allowed: 1 / StepConstants.gemm_blend_p"):
        ColocatedPlan(p, 1, 512)
    p = step_params(M8, H100, BF16, 1, KB).copy()
    p[P_GEMM_Q] = 1.5
    with pytest.raises(FastsimInputError, match=r"p\[P_GEMM_Q\]: got 1.5"):
        ColocatedPlan(p, 1, 512)


def test_carried_in_calibration_files(tmp_path):
    from fastsim.constants import Calibration, CalibrationEntry, load_calibration
    path = tmp_path / "c.toml"
    Calibration((CalibrationEntry("*", "*", KB),), engine="trtllm").write(path)
    assert "gemm_blend_p = 1.23" in path.read_text(encoding="utf-8")
    assert load_calibration(path).step_constants("H100", "BF16", 1).gemm_blend_p == 1.23
    assert "gemm_blend_p =" not in Calibration((CalibrationEntry("*", "*", StepConstants(step_form="classes")),)).to_toml()
    bad = tmp_path / "bad.toml"
    bad.write_text('format_version = 1\n\n[[constants]]\ngpu = "*"\nprecision = "*"\ngemm_blend_p = 1.2\n',
                   encoding="utf-8")
    with pytest.raises(FastsimInputError, match=r"\[\[constants\]\] 1: gemm_blend_p: got 1.2; allowed: None under"):
        load_calibration(bad)


def test_the_shipped_h100_profiles_give_the_exponent_the_fits_start_from():
    from fastsim.calibrate import fit_operations
    from fastsim.calibrate.readers import read_profiles
    from fastsim.validate.fit import PROFILE_GEMM_BLEND_P
    ops, _ = read_profiles(["vidur-h100"])
    f0 = fit_operations(ops, H100, BF16)
    f1 = fit_operations(ops, H100, BF16, blend=True)
    assert "gemm_blend_p" not in f0.values
    assert f1.values["gemm_blend_p"] == pytest.approx(PROFILE_GEMM_BLEND_P, abs=0.01)
    lo, hi = f1.interval95["gemm_blend_p"]
    assert lo < PROFILE_GEMM_BLEND_P < hi
    assert f0.median_abs_rel_error == pytest.approx(0.094, abs=0.001)
    assert f1.median_abs_rel_error == pytest.approx(0.068, abs=0.001)

    def band_means(f):
        pts = f.points
        return {b: float(np.exp(np.log1p(g.rel_error).mean())) for b, g in pts.groupby("size_band")}
    m0, m1 = band_means(f0), band_means(f1)
    # the max is 26% too slow at 2-16 tokens and 12% too fast at 129-512; the blend within 5% everywhere
    assert m0["2-16"] == pytest.approx(1.26, abs=0.01) and m0["129-512"] == pytest.approx(0.885, abs=0.01)
    assert all(abs(v - 1.0) < 0.05 for v in m1.values())


def test_a_fit_started_from_it_keeps_it_and_the_engines_fits_start_from_the_max():
    from fastsim.catalog import load_catalog
    from fastsim.validate import SHIPPED_CATALOG, SHIPPED_MEASUREMENTS, read_measurements
    from fastsim.validate.fit import PROFILE_GEMM_BLEND_P, fit_measurements
    cat = load_catalog([str(SHIPPED_CATALOG)])
    rows = [m for m in read_measurements(SHIPPED_MEASUREMENTS, cat) if m.engine == "trtllm"][:3]
    start = StepConstants(step_form="classes", kv_memory="trtllm", gemm_blend_p=PROFILE_GEMM_BLEND_P)
    fit = fit_measurements(rows, cat, engine="trtllm", names=("overhead_s",), start=start, max_runs=None,
                           max_nfev=1, cross_validate=False)
    assert all(e.constants.gemm_blend_p == PROFILE_GEMM_BLEND_P for e in fit.entries)
    plain = fit_measurements(rows, cat, engine="trtllm", names=("overhead_s",), max_runs=None, max_nfev=1,
                             cross_validate=False)
    assert plain.start.step_form == "classes" and plain.start.gemm_blend_p is None


# ---------------------------------------------------------------- kernels against their references

# a small GPU peak, so that the GEMMs' read and compute meet at the batches the tests reach
PK = step_params(M8, H100, BF16, 1, KB)
PK[P_PEAK] = PK[P_PEAK] / 200.0


def _slow_stages(S):
    rows = stage_params(M8, H100, CAT.precision("FP8"), 1, KB, pp=S)
    rows[:, P_PEAK] = rows[:, P_PEAK] / 200.0
    return rows


def test_the_blend_changes_the_steps_the_reference_tests_reach():
    p0 = PK.copy()
    p0[P_GEMM_Q] = 0.0
    b = np.array([1.0, 4.0, 16.0])
    kv = b * 300.0
    attn = decode_attn_flops(M8.layers, M8.attn_dim_decode, kv)
    assert (step_time(PK, b, kv, attn, b) > step_time(p0, b, kv, attn, b)).all()


(test_colocated_kernel_matches_reference, test_disaggregated_kernel_matches_reference,
 test_policy_kernel_matches_reference, test_pipeline_kernel_matches_reference) = reference_tests(PK, _slow_stages)
