"""Step model v2's KV-read efficiency (eta_kv): the formula, and the kernels against the pure-Python references."""
from __future__ import annotations

import numpy as np
import pytest

from fastsim.catalog import default_catalog
from fastsim.errors import FastsimInputError
from fastsim.sim import ColocatedPlan, DisaggregatedPlan, simulate
from fastsim.sim.policy import engine_policy
from fastsim.stepmodel import (P_ETA_BW, P_ETA_KV, P_HBM_BW, P_KV_BUDGET_TOKENS, P_KVPG, StepConstants, step_params,
                               step_parts, step_time)

from reference_sim import check_against_reference, simulate_reference
from test_sim_policy import check_policy_against_reference

CAT = default_catalog()
M, G, BF16 = CAT.model("llama-3.1-8b"), CAT.gpu("H100"), CAT.precision("BF16")


def _p(constants, kv=3000.0):
    p = step_params(M, G, BF16, 1, constants)
    p[P_KV_BUDGET_TOKENS] = kv
    return p


def test_eta_kv_times_the_kv_read_only():
    base, half = _p(StepConstants()), _p(StepConstants(eta_kv=0.4))
    assert base[P_ETA_KV] == base[P_ETA_BW] == 0.8                  # SPEC §3: KV read at eta_bw
    assert half[P_ETA_KV] == 0.4 and half[P_ETA_BW] == 0.8
    kv_tokens = 64 * 2000.0
    w0, kv0, c0, _, _ = step_parts(base, 64.0, kv_tokens, 0.0)
    w1, kv1, c1, _, _ = step_parts(half, 64.0, kv_tokens, 0.0)
    assert w1 == w0 and c1 == c0
    assert kv1 == pytest.approx(kv_tokens * base[P_KVPG] / (0.4 * base[P_HBM_BW]), rel=1e-15)
    assert kv1 == pytest.approx(2.0 * kv0, rel=1e-15)
    assert float(step_time(half, 64.0, kv_tokens, 0.0, 64.0)) == pytest.approx(max(w1 + kv1, c1) + 1e-3, rel=1e-15)
    with pytest.raises(FastsimInputError, match="eta_kv"):
        StepConstants(eta_kv=1.5)
    assert StepConstants(eta_bw=0.7).kv_efficiency == 0.7 and StepConstants(eta_kv=0.5).kv_efficiency == 0.5


def _workload(seed, n=40):
    rng = np.random.default_rng(seed)
    arr = np.sort(rng.uniform(0.0, 6.0, n))
    return arr, rng.integers(1, 400, n), rng.integers(1, 60, n)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_colocated_and_disaggregated_kernels_match_the_reference_with_eta_kv(seed):
    p = _p(StepConstants(eta_kv=0.45))
    arr, P, O = _workload(seed)
    res = simulate(ColocatedPlan(p, 2, 64, 0), arr, P, O, horizon_s=12.0, ttft_slo_s=0.5, tpot_slo_s=0.02,
                   sample_dt_s=0.5)
    ref = simulate_reference("colocated", arr, P, O, horizon=12.0, dt=0.5, max_context=10 ** 9,
                             routing="least-loaded", p=p, n_instances=2, chunk=64, max_batch=0)
    check_against_reference(res, ref, np.full(2, 3000))
    res = simulate(DisaggregatedPlan(p, 1, p, 2, 256, 0), arr, P, O, horizon_s=12.0, ttft_slo_s=0.5,
                   tpot_slo_s=0.02, sample_dt_s=0.5)
    ref = simulate_reference("disaggregated", arr, P, O, horizon=12.0, dt=0.5, max_context=10 ** 9,
                             routing="least-loaded", p_prefill=p, n_prefill=1, p_decode=p, n_decode=2,
                             prefill_budget=256, decode_max_batch=0)
    check_against_reference(res, ref, np.full(3, 3000))


@pytest.mark.parametrize("name", ["vllm", "sglang", "trtllm"])
def test_policy_kernels_match_the_reference_with_eta_kv(name):
    p = _p(StepConstants(eta_kv=0.45))
    arr, P, O = _workload(7)
    pol = engine_policy(name, max_num_batched_tokens=256, max_num_seqs=16)
    check_policy_against_reference(p, 2, arr, P, O, pol, horizon=12.0)


def test_the_engines_kv_pool_rules_by_hand():
    """Llama-3.1-8B FP8 on one H100: SPEC §3's pool, vLLM's and TensorRT-LLM's (StepConstants.kv_memory)."""
    from fastsim.stepmodel import kv_budget_tokens
    fp8 = CAT.precision("FP8")
    per_token = 32 * 8 * 128 * 2 * 1.0                     # layers x KV heads x head dim x (K, V) x 1 byte
    assert M.kv_bytes_per_token_per_gpu(1, 1) == per_token
    weights = M.total_params * 1.0
    bf16_extra = 128256 * 4096 * 2 * (2.0 - 1.0)           # untied embedding and LM head kept at BF16
    reported = 81559 * 2 ** 20                             # nvidia-smi's 81,559 MiB
    assert G.reported_hbm_bytes == reported and G.hbm_bytes == 80e9
    res = 2 * 2 ** 30
    spec = kv_budget_tokens(M, fp8, G, 1)
    assert spec == pytest.approx((0.9 * 80e9 - weights) / per_token, rel=1e-12)
    vllm = kv_budget_tokens(M, fp8, G, 1, StepConstants(kv_memory="vllm", reserved_bytes_per_gpu=res))
    assert vllm == pytest.approx((0.9 * reported - res - weights - bf16_extra) / per_token, rel=1e-12)
    trt = kv_budget_tokens(M, fp8, G, 1, StepConstants(kv_memory="trtllm", reserved_bytes_per_gpu=res))
    assert trt == pytest.approx(0.9 * (reported - res - weights - bf16_extra) / per_token, rel=1e-12)
    # a BF16 deployment keeps its embedding at BF16 anyway: no extra
    bf = kv_budget_tokens(M, BF16, G, 1, StepConstants(kv_memory="vllm"))
    assert bf == pytest.approx((0.9 * reported - 2.0 * M.total_params) / (2 * per_token), rel=1e-12)
    with pytest.raises(FastsimInputError, match="kv_memory"):
        StepConstants(kv_memory="sglang")
