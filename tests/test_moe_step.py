"""The step model beyond the lecture (SPEC §10): MoE expert reads, EP all-to-all, DP attention,
attention widths (q_dim, MLA), sliding windows, TP refusals and groups across nodes; and the
simulator's exact agreement with the reference on such instances."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastsim.analytic import REFUSED, Demand, ScreenOptions, instance_table, plan_for, screen
from fastsim.catalog import Model, default_catalog
from fastsim.errors import FastsimInputError
from fastsim.ledger import ledger
from fastsim.stepmodel import (P_KV_BUDGET_TOKENS, StepConstants, instance_layout_refusal, kv_budget_tokens,
                               step_params, step_parts, step_time, step_time_nb)

from reference_sim import check_plan_against_reference
from test_sim import small_workload, with_budget

CAT = default_catalog()
DS = CAT.model("deepseek-v3")
QWEN_MOE = CAT.model("qwen3-30b-a3b")
H100, B200 = CAT.gpu("H100"), CAT.gpu("B200")
FP8, BF16 = CAT.precision("FP8"), CAT.precision("BF16")


# ------------------------------------------------------------------ the silent errors, exact

def test_qwen3_32b_prefill_attention_uses_q_dim():
    # hidden 5120 but 64 heads x 128 = 8192: 1.180 s if the hidden size were used, 1.357 s with q_dim
    r = ledger("qwen3-32b", "H100", "BF16", 4, batch=1, prefill_tokens=32768)
    assert r.compute_s == pytest.approx(1.357, abs=0.0005)
    m = CAT.model("qwen3-32b")
    flops = 2 * m.matmul_params * 32768 + 2 * m.layers * 32768 ** 2 * 8192
    assert r.compute_s == pytest.approx(flops / 4 / (0.6 * 989e12), rel=1e-12)


def test_tp_across_nodes_runs_at_the_network_bandwidth():
    # 405B, TP16 on 8-GPU H100 nodes: the ring crosses the 50e9 B/s NIC, not NVLink
    r16 = ledger("llama-3.1-405b", "H100", "BF16", 16, batch=64)
    expect = 2 * 126 * (2 * 15 * 0.43e-6 + 2 * 15 / 16 * 64 * 16384 * 2 / (0.85 * 50e9))
    assert r16.allreduce_s == pytest.approx(expect, rel=1e-12)
    assert r16.allreduce_s == pytest.approx(26.6e-3, abs=0.05e-3)
    r8 = ledger("llama-3.1-405b", "H100", "BF16", 8, batch=64)        # within a node: NVLink, as before
    assert r8.allreduce_s == pytest.approx(2 * 126 * (14 * 0.43e-6 + 14 / 8 * 64 * 16384 * 2 / (0.85 * 450e9)),
                                           rel=1e-12)


def test_sliding_window_holds_and_reads_the_window():
    r4 = ledger("mistral-7b", "H100", "BF16", 1, batch=16, context_tokens=4096)
    r32 = ledger("mistral-7b", "H100", "BF16", 1, batch=16, context_tokens=32768)
    assert r32.kv_read_s == r4.kv_read_s
    assert r32.memory_per_gpu_bytes == r4.memory_per_gpu_bytes
    assert r32.fits
    m = CAT.model("mistral-7b")
    assert r32.memory_per_gpu_bytes == pytest.approx(m.total_params * 2 + 16 * 4096 * 131072, rel=1e-12)
    assert r32.memory_per_gpu_bytes / 1e9 == pytest.approx(23.07, abs=0.01)
    # below the window nothing changes
    r2 = ledger("mistral-7b", "H100", "BF16", 1, batch=16, context_tokens=2000)
    assert r2.kv_read_s == pytest.approx(16 * 2000 * 131072 / (0.8 * 3.35e12), rel=1e-12)


def test_tp_that_does_not_divide_the_heads_is_not_a_plan():
    qwen2 = Model(name="qwen2-7b", layers=28, hidden=3584, heads=28, kv_heads=4, head_dim=128, ffn=18944,
                  vocab=152064, attn_bias=True)
    assert instance_layout_refusal(qwen2, H100, 8) is not None
    assert instance_layout_refusal(qwen2, H100, 4) is None
    with pytest.raises(FastsimInputError, match="28 attention heads"):
        step_params(qwen2, H100, FP8, 8)
    d = Demand.from_scenario(CAT.scenario("chat"))
    t = instance_table(qwen2, d, options=ScreenOptions(gpus=("H100",), precisions=("FP8",)))
    assert list(t.tp[t.status == REFUSED]) == [8]
    s = screen(qwen2, d, options=ScreenOptions(gpus=("H100",), precisions=("FP8",)))
    assert not ((s.tp == 8) & s.feasible).any()
    assert all(p is None or p.tp != 8 for p in s.plan)
    with pytest.raises(FastsimInputError, match="28 attention heads"):
        plan_for(qwen2, d, gpu="H100", precision="FP8", tp=8)


# ------------------------------------------------------------------ MoE arithmetic

def test_expected_distinct_experts_matches_uniform_routing_monte_carlo():
    # weight read at T tokens = dense + routed bytes x (1 - (1 - k/E)^T) (SPEC §10); check the
    # expectation against top-k routing drawn uniformly without replacement per token
    m = QWEN_MOE                           # 128 experts, top-8
    p = step_params(m, H100, FP8, 1)
    rng = np.random.default_rng(0)
    for T in (1, 4, 16, 64):
        touched = []
        for _ in range(400):
            chosen = np.zeros(m.n_experts, dtype=bool)
            for _t in range(T):
                chosen[rng.choice(m.n_experts, m.experts_per_token, replace=False)] = True
            touched.append(chosen.mean())
        w, *_ = step_parts(p, float(T), 0.0, 0.0)
        dense = m.dense_matmul_params * 1.0 / (0.8 * 3.35e12)
        frac = (w - dense) / (m.routed_expert_params * 1.0 / (0.8 * 3.35e12))
        # (1 - k/E)^T treats the k picks of a token as independent: exact for T = 1, within 1% beyond
        assert frac == pytest.approx(np.mean(touched), rel=0.02, abs=0.002)
    w1, *_ = step_parts(p, 1.0, 0.0, 0.0)
    assert w1 * 0.8 * 3.35e12 == pytest.approx(m.active_matmul_params, rel=1e-12)


def test_moe_compute_runs_active_parameters_and_memory_holds_all():
    _, _, comp, _, _ = step_parts(step_params(DS, B200, FP8, 8), 1000.0, 0.0, 0.0)
    assert comp == pytest.approx(2 * DS.active_matmul_params * 1000 / 8 / (0.6 * 5e15), rel=1e-12)
    budget = kv_budget_tokens(DS, FP8, B200, 8)
    assert budget == pytest.approx((8 * 0.9 * 192e9 - DS.total_params) / (8 * DS.kv_bytes_per_token(1)), rel=1e-12)


def test_expert_parallel_all_to_all_and_dp_attention():
    g = 16                                             # two H100 nodes: the EP group crosses the NIC
    p = step_params(DS, H100, FP8, g, dp=g, ep=g)
    n = 512.0
    w, kv, comp, ar, a2a = step_parts(p, n, 1000.0 * 512, 0.0)
    assert ar == 0.0                                   # attention TP 1: no all-reduce
    per_dir = (g - 1) * 0.43e-6 + (g - 1) / g * (n * 8 / g * 7168 * 2) / (0.85 * 50e9)
    assert a2a == pytest.approx(58 * 2 * per_dir, rel=1e-12)
    # KV read is split over the DP ranks; MLA's latent is not split by heads
    assert kv == pytest.approx(1000.0 * 512 * DS.kv_bytes_per_token(1) / g / (0.8 * 3.35e12), rel=1e-12)
    # each DP rank holds the dense weights, the experts are spread: more KV than TP16 at DP 1
    assert kv_budget_tokens(DS, FP8, H100, g, dp=g, ep=g) > kv_budget_tokens(DS, FP8, H100, g)
    with pytest.raises(FastsimInputError, match="expert parallelism"):
        step_params(DS, H100, FP8, g, dp=g, ep=1)
    with pytest.raises(FastsimInputError, match="dense"):
        step_params(CAT.model("llama-3.1-70b"), H100, FP8, 8, ep=8)


def test_dense_models_keep_the_lecture_step():
    p = step_params(CAT.model("llama-3.1-70b"), H100, BF16, 8)
    w, kv, comp, ar, a2a = step_parts(p, 64.0, 64 * 4096.0, 0.0)
    assert a2a == 0.0
    assert w == pytest.approx(69.503e9 * 2 / 8 / (0.8 * 3.35e12), rel=1e-4)
    assert ledger("llama-3.1-70b", "H100", "BF16", 8).step_s * 1e3 == pytest.approx(8.48, abs=0.005)


@pytest.mark.parametrize("layout", [dict(), dict(ep=8), dict(dp=8, ep=8)])
def test_scalar_and_vector_step_agree_to_the_bit(layout):
    p = step_params(QWEN_MOE, H100, FP8, 8, **layout)
    for n, kv, attn in ((1.0, 100.0, 3e9), (37.0, 50000.0, 1e11), (2048.0, 0.0, 7e12)):
        assert step_time_nb(p, n, kv, attn, n) == float(step_time(p, n, kv, attn, n))


# ------------------------------------------------------------------ the simulator on MoE instances

P_MOE = [step_params(m, g, pr, tp, **kw) for m, g, pr, tp, kw in [
    (QWEN_MOE, H100, FP8, 1, {}), (QWEN_MOE, H100, FP8, 4, dict(ep=4)), (QWEN_MOE, H100, BF16, 8, dict(dp=8, ep=8)),
    (DS, B200, FP8, 8, dict(dp=8, ep=8)), (DS, H100, FP8, 16, dict(ep=16))]]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(w=small_workload(), which=st.integers(0, len(P_MOE) - 1), dec=st.integers(0, len(P_MOE) - 1),
       disagg=st.booleans(), n=st.integers(1, 2), chunk=st.sampled_from([7, 64, 4096]), kv=st.floats(40.0, 3000.0))
def test_moe_plans_match_reference(w, which, dec, disagg, n, chunk, kv):
    check_plan_against_reference(w, with_budget(P_MOE[which], kv), with_budget(P_MOE[dec], kv), disagg, n, chunk, kv)


def test_moe_screen_offers_expert_parallel_and_multi_node_plans():
    d = Demand.from_scenario(CAT.scenario("chat"))
    s = screen(DS, d, options=ScreenOptions(gpus=("H100",), precisions=("FP8",)))
    ok = s[s.feasible]
    assert set(ok.layout) == {"tp", "tp+ep", "dp+ep"}
    # 671 GB of FP8 weights do not fit one 8 x 80 GB node: every H100 plan spans nodes, a TP group of
    # 16 or more GPUs or a pipeline of TP8 stages (the default pp axis of a model that does not fit a node)
    assert (ok.gpus_per_instance >= 16).all() and len(ok) and (ok[ok.pp > 1].tp <= 8).all()
    best = ok.iloc[0].plan
    assert best.label(best.tp).startswith(("TP", "DP"))
    assert StepConstants().memory_utilization * 8 * 80e9 < DS.total_params
