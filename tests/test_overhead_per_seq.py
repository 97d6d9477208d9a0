"""The engine's host time per sequence of a step (StepConstants.overhead_per_seq_s, step model v2).

A step of n sequences (its decodes and its prompt pieces) costs ``overhead_s + n x
overhead_per_seq_s`` of host time besides its GPU time. Under SPEC §3 (0 s per sequence) every
step time is the one without the term, to the bit; with it every simulator path (the lecture
kernel's colocated, prefill and decode paths, the engine policies, the pipeline) agrees with its
pure-Python reference to the bit, and closed forms give the exact delay it adds.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fastsim.catalog import default_catalog
from fastsim.errors import FastsimInputError
from fastsim.sim import ColocatedPlan, simulate
from fastsim.stepmodel import (P_OVERHEAD, P_OVERHEAD_SEQ, StepConstants, decode_attn_flops,
                               pipeline_round_params, stage_params, step_params, step_time, step_time_nb)

from kernel_checks import reference_tests

CAT = default_catalog()
M8, H100, FP8 = CAT.model("llama-3.1-8b"), CAT.gpu("H100"), CAT.precision("FP8")
C_SEQ = 2.5e-4          # s per sequence: large, so that every step time changes visibly
K = StepConstants(overhead_per_seq_s=C_SEQ)


def test_the_step_time_adds_the_host_time_of_each_sequence():
    p0 = step_params(M8, H100, FP8, 1)
    p1 = step_params(M8, H100, FP8, 1, K)
    assert p0[P_OVERHEAD_SEQ] == 0.0 and p1[P_OVERHEAD_SEQ] == C_SEQ
    b = np.array([1.0, 8.0, 64.0, 256.0])
    kv = b * 1500.0
    attn = decode_attn_flops(M8.layers, M8.attn_dim_decode, kv)
    t0, t1 = step_time(p0, b, kv, attn, b), step_time(p1, b, kv, attn, b)
    np.testing.assert_allclose(t1 - t0, C_SEQ * b, rtol=1e-9)
    # SPEC §3 (no per-sequence time): the sequences do not enter, to the bit
    np.testing.assert_array_equal(step_time(p0, b, kv, attn, b), step_time(p0, b, kv, attn, 0.0 * b))
    # the kernels' scalar step time is the same expression
    for i in range(b.size):
        assert step_time_nb(p1, b[i], kv[i], attn[i], b[i]) == float(step_time(p1, b[i], kv[i], attn[i], b[i]))


def test_a_pipeline_round_counts_every_sequence_once():
    # S micro-batches of b / S sequences per round: b sequences' host time, not S x b
    S = stage_params(CAT.model("llama-3.1-70b"), H100, FP8, 4, K, pp=2)
    q = pipeline_round_params(S[0])
    assert q[P_OVERHEAD_SEQ] == C_SEQ and q[P_OVERHEAD] == 2 * S[0][P_OVERHEAD]
    b, kv = 64.0, 64.0 * 2000.0
    attn = decode_attn_flops(40, 1024, kv)      # any attention: linear in the batch
    want = 2 * step_time(S[0], b / 2, kv / 2, attn / 2, b / 2)
    assert float(step_time(q, b, kv, attn, b)) == pytest.approx(float(want), rel=1e-12)


def test_a_lone_request_is_delayed_by_one_sequence_per_step():
    # P <= chunk: one prefill step, then O - 1 decode steps, each of one sequence
    for O in (1, 2, 37):
        a, P, o = np.array([0.0]), np.array([700]), np.array([O])
        kw = dict(horizon_s=30.0, ttft_slo_s=1.0, tpot_slo_s=1.0, measure_window=(0.0, 1.0))
        r0 = simulate(ColocatedPlan(step_params(M8, H100, FP8, 1), 1, 2048), a, P, o, **kw)
        r1 = simulate(ColocatedPlan(step_params(M8, H100, FP8, 1, K), 1, 2048), a, P, o, **kw)
        assert r1.first_token_s[0] - r0.first_token_s[0] == pytest.approx(C_SEQ, rel=1e-9)
        assert r1.finish_s[0] - r0.finish_s[0] == pytest.approx(O * C_SEQ, rel=1e-9)


def test_an_offline_batch_pays_its_batch_size_every_step():
    # B identical requests at t = 0, every prompt in the first step (B pieces), then O - 1 steps of B
    # decodes: each step B x C_SEQ later, the last finish O x B x C_SEQ later
    B, O = 8, 20
    a, P, o = np.zeros(B), np.full(B, 100), np.full(B, O)
    kw = dict(horizon_s=30.0, ttft_slo_s=1.0, tpot_slo_s=1.0, measure_window=(0.0, 1.0))
    for pol in ("lecture", "vllm", "trtllm"):
        r0 = simulate(ColocatedPlan(step_params(M8, H100, FP8, 1), 1, 4096), a, P, o, policy=pol, **kw)
        r1 = simulate(ColocatedPlan(step_params(M8, H100, FP8, 1, K), 1, 4096), a, P, o, policy=pol, **kw)
        np.testing.assert_allclose(r1.first_token_s - r0.first_token_s, B * C_SEQ, rtol=1e-9, err_msg=pol)
        np.testing.assert_allclose(r1.finish_s - r0.finish_s, O * B * C_SEQ, rtol=1e-9, err_msg=pol)


# ---------------------------------------------------------------- kernels against their references

P8S = step_params(M8, H100, CAT.precision("BF16"), 1, K)

(test_colocated_kernel_matches_reference, test_disaggregated_kernel_matches_reference,
 test_policy_kernel_matches_reference, test_pipeline_kernel_matches_reference) = reference_tests(
    P8S, lambda S: stage_params(M8, H100, FP8, 1, K, pp=S))


def test_the_constant_is_checked_and_carried_in_calibration_files(tmp_path):
    from fastsim.constants import Calibration, CalibrationEntry, load_calibration
    with pytest.raises(FastsimInputError, match="overhead_per_seq_s"):
        StepConstants(overhead_per_seq_s=-1e-6)
    # "a finite number >= 0": infinity and NaN are refused as the message says, for every constant
    for name in ("overhead_per_seq_s", "overhead_s", "request_overhead_s", "alpha_s"):
        for v in (float("inf"), float("nan"), "1e-5"):
            with pytest.raises(FastsimInputError, match=f"{name}: got .*; allowed: a finite number >= 0"):
                StepConstants(**{name: v})
    bad = tmp_path / "inf.toml"
    bad.write_text('format_version = 1\n\n[[constants]]\ngpu = "*"\nprecision = "*"\noverhead_per_seq_s = inf\n',
                   encoding="utf-8")
    with pytest.raises(FastsimInputError, match="overhead_per_seq_s: got inf"):
        load_calibration(bad)
    cal = Calibration((CalibrationEntry("*", "*", replace(StepConstants(), overhead_per_seq_s=3e-5),
                                        ("overhead_per_seq_s",)),), engine="trtllm")
    path = tmp_path / "c.toml"
    cal.write(path)
    assert "overhead_per_seq_s = 3e-05" in path.read_text(encoding="utf-8")
    assert load_calibration(path).step_constants("H100", "FP8", 1).overhead_per_seq_s == 3e-5
    assert "overhead_per_seq_s" not in Calibration((CalibrationEntry("*", "*", StepConstants()),)).to_toml()


def test_the_ledger_has_the_host_time_as_a_column():
    from fastsim.ledger import ledger
    r0 = ledger("llama-3.1-8b", "H100", "FP8", 1, batch=64, context_tokens=2000)
    r1 = ledger("llama-3.1-8b", "H100", "FP8", 1, batch=64, context_tokens=2000, constants=K)
    assert r0.host_s == 0.0 and r1.host_s == pytest.approx(64 * C_SEQ, rel=1e-12)
    assert r1.step_s - r0.step_s == pytest.approx(64 * C_SEQ, rel=1e-9)
    pf = ledger("llama-3.1-8b", "H100", "FP8", 1, batch=2, prefill_tokens=1000, constants=K)
    assert pf.host_s == pytest.approx(2 * C_SEQ, rel=1e-12)


# ---------------------------------------------------------------- the routed experts' compute efficiency

def test_routed_experts_run_at_their_own_fraction_of_the_compute_efficiency():
    from fastsim.stepmodel import P_MATMUL, step_parts
    moe = CAT.model("qwen3-30b-a3b")
    p1 = step_params(moe, H100, FP8, 1)
    assert step_params(moe, H100, FP8, 1, StepConstants(moe_compute_factor=1.0))[P_MATMUL] == p1[P_MATMUL]
    f = 0.5
    ph = step_params(moe, H100, FP8, 1, StepConstants(moe_compute_factor=f))
    expert_active = moe.moe_layers * moe.experts_per_token * moe.expert_params
    # the experts' FLOPs cost 1 / f times as much; the dense part is unchanged
    assert ph[P_MATMUL] == pytest.approx(p1[P_MATMUL] + expert_active * (1.0 / f - 1.0), rel=1e-12)
    n = 4096.0
    c1, ch = step_parts(p1, n, 0.0, 0.0)[2], step_parts(ph, n, 0.0, 0.0)[2]
    dense_share = (moe.active_matmul_params - expert_active) / moe.active_matmul_params
    assert ch / c1 == pytest.approx(dense_share + (1.0 - dense_share) / f, rel=1e-12)
    # a dense model is untouched; the stages of a pipeline carry their own layers' share
    assert step_params(M8, H100, FP8, 1, StepConstants(moe_compute_factor=f))[P_MATMUL] == \
        step_params(M8, H100, FP8, 1)[P_MATMUL]
    S1 = stage_params(moe, H100, FP8, 1, pp=2)
    Sh = stage_params(moe, H100, FP8, 1, StepConstants(moe_compute_factor=f), pp=2)
    np.testing.assert_allclose((Sh[:, P_MATMUL] - S1[:, P_MATMUL]).sum(), expert_active * (1.0 / f - 1.0), rtol=1e-12)
    with pytest.raises(FastsimInputError, match="moe_compute_factor"):
        StepConstants(moe_compute_factor=1.5)


def test_the_fit_fits_the_moe_factor_only_where_rows_run_moe_models():
    from fastsim.validate import SHIPPED_CATALOG, SHIPPED_MEASUREMENTS, read_measurements
    from fastsim.catalog import load_catalog
    from fastsim.validate.fit import default_names
    cat = load_catalog([str(SHIPPED_CATALOG)])
    ms = [m for m in read_measurements(SHIPPED_MEASUREMENTS, cat) if m.engine == "trtllm"]
    def is_moe(name):
        try:
            return cat.model(name).is_moe
        except FastsimInputError:       # a config fastsim refuses (its rows are not expressed)
            return None
    dense = [m for m in ms if is_moe(m.model) is False]
    assert "moe_compute_factor" in default_names(ms, cat)
    assert "moe_compute_factor" not in default_names(dense, cat)
    assert "overhead_per_seq_s" in default_names(dense, cat)


def test_the_ledgers_speculative_round_charges_the_verify_step_for_every_sequence():
    # the verify step carries the batch's b sequences (gamma + 1 tokens each), as the planner's round
    # (fastsim.specdec.round_time_s) counts them: the two agree to the bit with the host time too
    from fastsim.ledger import KERNELS_PER_LAYER_FUSED, LAUNCH_S_GRAPHS, speculative_step
    from fastsim.specdec import round_time_s, spec_decoding, spec_step_params
    from fastsim.stepmodel import P_LAYERS
    b = 64
    p_t, p_d = spec_step_params("llama-3.1-70b", "H100", "FP8", 8, K, spec_decoding(4, 0.8, model="llama-3.1-70b"))
    for q in (p_t, p_d):
        q[P_OVERHEAD] = q[P_LAYERS] * KERNELS_PER_LAYER_FUSED * LAUNCH_S_GRAPHS
    led = speculative_step("llama-3.1-70b", "llama-3.1-8b", "H100", "FP8", 8, batch=b, context_tokens=4096,
                           acceptance=0.8, gamma=4, constants=K)
    assert led.verify.host_s == pytest.approx(b * C_SEQ, rel=1e-12)
    assert led.draft.host_s == pytest.approx(b * C_SEQ, rel=1e-12)
    assert led.round_s == round_time_s(p_t, p_d, b, 4096, 4)
    led0 = speculative_step("llama-3.1-70b", "llama-3.1-8b", "H100", "FP8", 8, batch=b, context_tokens=4096,
                            acceptance=0.8, gamma=4)
    assert led.round_s - led0.round_s == pytest.approx(5 * b * C_SEQ, rel=1e-9)     # 4 draft steps + the verify
