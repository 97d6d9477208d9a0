"""Speculative decoding: configuration, draft step parameters, shared KV budget and round time (SPEC §4)."""
import numpy as np
import pytest

from fastsim.catalog import default_catalog
from fastsim.errors import FastsimInputError
from fastsim.ledger import KERNELS_PER_LAYER_FUSED, LAUNCH_S_GRAPHS, speculative_step
from fastsim.specdec import (MTP, SpecDecoding, default_draft, expected_tokens_per_round, model_family, mtp_model,
                             round_time_s, spec_decoding, spec_refusal, spec_step_params)
from fastsim.stepmodel import (P_DP, P_GPUS, P_KV_BUDGET_TOKENS, P_LAYERS, P_MATMUL, P_OVERHEAD, P_QDIM_DEC,
                               P_WDENSE, StepConstants, decode_attn_flops, kv_budget_tokens, step_params, step_time)

CAT = default_catalog()
C = StepConstants()


def test_expected_tokens_per_round_is_the_ledgers():
    assert expected_tokens_per_round(0.8, 4) == pytest.approx(3.3616, rel=1e-12)
    assert round(expected_tokens_per_round(0.8, 4), 2) == 3.36
    assert expected_tokens_per_round(0.0, 4) == 1.0
    with pytest.raises(FastsimInputError, match="gamma"):
        expected_tokens_per_round(0.8, 0)


def test_round_time_equals_the_ledgers_round_to_the_bit():
    """SPEC §4 level 5: Llama-3.1-70B + 8B, H100 FP8 TP8, batch 64, context 4096, alpha 0.8, gamma 4."""
    spec = spec_decoding(4, 0.8, model="llama-3.1-70b")
    assert spec == SpecDecoding(4, 0.8, "llama-3.1-8b")
    p_t, p_d = spec_step_params("llama-3.1-70b", "H100", "FP8", 8, C, spec)
    # the ledger counts kernel launches where the planner has a fixed overhead: give each its model's
    p_t[P_OVERHEAD] = p_t[P_LAYERS] * KERNELS_PER_LAYER_FUSED * LAUNCH_S_GRAPHS
    p_d[P_OVERHEAD] = p_d[P_LAYERS] * KERNELS_PER_LAYER_FUSED * LAUNCH_S_GRAPHS
    led = speculative_step("llama-3.1-70b", "llama-3.1-8b", "H100", "FP8", 8, batch=64, context_tokens=4096,
                           acceptance=0.8, gamma=4)
    r = round_time_s(p_t, p_d, 64, 4096, 4)
    assert r == led.round_s
    assert 0.015 < r < 0.03
    assert led.tokens_per_round == expected_tokens_per_round(0.8, 4)


def test_round_time_parts_and_gamma_zero():
    p_t, p_d = spec_step_params("llama-3.1-70b", "H100", "FP8", 8, C, spec_decoding(2, 0.8, model="llama-3.1-70b"))
    b, ctx = 64.0, 4096.0
    plain = float(step_time(p_t, b, b * ctx, decode_attn_flops(80, p_t[P_QDIM_DEC], b * ctx), b))
    assert round_time_s(p_t, p_d, b, ctx, 0) == plain
    draft = float(step_time(p_d, b, b * ctx, decode_attn_flops(32, p_d[P_QDIM_DEC], b * ctx), b))
    verify = float(step_time(p_t, 3 * b, b * ctx, decode_attn_flops(80, p_t[P_QDIM_DEC], 3 * b * ctx), b))
    assert round_time_s(p_t, p_d, b, ctx, 2) == 2 * draft + verify
    # vectorised over batches
    v = round_time_s(p_t, p_d, np.array([1.0, 64.0]), ctx, 2)
    assert v.shape == (2,) and v[1] == 2 * draft + verify and v[0] < v[1]
    with pytest.raises(FastsimInputError, match="gamma"):
        round_time_s(p_t, p_d, b, ctx, -1)
    with pytest.raises(FastsimInputError, match="p_draft"):
        round_time_s(p_t, p_d[:5], b, ctx, 2)


def test_default_drafts():
    assert default_draft("llama-3.1-70b") == "llama-3.1-8b"
    assert default_draft("llama-3.1-405b") == "llama-3.1-8b"
    assert default_draft("llama-3.1-8b") == MTP               # nothing smaller in its family
    assert default_draft("deepseek-v3") == MTP                # ships an MTP module
    assert default_draft("qwen3-32b") == MTP                  # qwen3-30b-a3b is not a quarter of it
    assert default_draft("qwen3-235b-a22b") == "qwen3-30b-a3b"
    assert default_draft("gpt-oss-120b") == "gpt-oss-20b"
    assert default_draft("mixtral-8x7b") == MTP               # mistral-7b is another family
    assert model_family("qwen3-235b-a22b") == model_family("qwen3-32b") == "qwen3"
    assert model_family("mixtral-8x7b") == "mixtral" and model_family("Llama-3.1-70B") == "llama-3.1"


@pytest.mark.parametrize("kw, field", [
    (dict(gamma=0, alpha=0.8, draft="mtp"), "gamma"),
    (dict(gamma=2.5, alpha=0.8, draft="mtp"), "gamma"),
    (dict(gamma=True, alpha=0.8, draft="mtp"), "gamma"),
    (dict(gamma=4, alpha=1.0, draft="mtp"), "alpha"),
    (dict(gamma=4, alpha=-0.1, draft="mtp"), "alpha"),
    (dict(gamma=4, alpha="0.8", draft="mtp"), "alpha"),
    (dict(gamma=4, alpha=0.8), "draft"),                                       # no draft, no target
    (dict(gamma=4, alpha=0.8, draft="no-such-model"), "model"),
    (dict(gamma=4, alpha=0.8, draft="deepseek-v3", model="llama-3.1-70b"), "draft"),   # another vocabulary
    (dict(gamma=4, alpha=0.8, draft="llama-3.1-70b", model="llama-3.1-70b"), "draft"),  # the target itself
    (dict(gamma=4, alpha=0.8, draft=""), "draft"),
])
def test_spec_decoding_refuses_bad_input(kw, field):
    with pytest.raises(FastsimInputError) as e:
        spec_decoding(**kw)
    assert e.value.field == field


def test_spec_decoding_names():
    assert spec_decoding(3, 0.7, "MTP") == SpecDecoding(3, 0.7, "mtp")
    assert spec_decoding(3, 0.7, "Llama-3.1-8B", "llama-3.1-70b").draft == "llama-3.1-8b"


def test_budget_shares_memory_with_the_draft():
    """tokens = (G x 0.9 x HBM - both models' weights) / (G x (target + draft) KV bytes per token per GPU)."""
    m, d = CAT.model("llama-3.1-70b"), CAT.model("llama-3.1-8b")
    g, pr = CAT.gpu("H100"), CAT.precision("FP8")
    p_t, p_d = spec_step_params(m, g, pr, 8, C, spec_decoding(4, 0.8, model=m))
    left = 8 * 0.9 * g.hbm_bytes - m.total_params * 1.0 - d.total_params * 1.0
    per_token = 8 * (2 * 80 * 1 * 128 * 1.0) + 8 * (2 * 32 * 1 * 128 * 1.0)     # one KV head per GPU each, FP8
    assert p_t[P_KV_BUDGET_TOKENS] == pytest.approx(left / per_token, rel=1e-12)
    assert p_d[P_KV_BUDGET_TOKENS] == p_t[P_KV_BUDGET_TOKENS]
    alone = kv_budget_tokens(m, pr, g, 8, C)
    assert p_t[P_KV_BUDGET_TOKENS] < alone
    # everything but the budget is the target's own vector, and the draft's is its own
    base = step_params(m, g, pr, 8, C)
    keep = np.arange(len(base)) != P_KV_BUDGET_TOKENS
    assert np.array_equal(p_t[keep], base[keep])
    assert np.array_equal(p_d[keep], step_params(d, g, pr, 8, C)[keep])


def test_a_draft_that_does_not_fit_gives_a_negative_budget():
    """70B FP8 fits one H100 alone (a little KV) but not beside the 8B draft: budget <= 0, never clipped."""
    m = CAT.model("llama-3.1-70b")
    assert kv_budget_tokens(m, CAT.precision("FP8"), CAT.gpu("H100"), 1, C) > 0
    p_t, _ = spec_step_params(m, "H100", "FP8", 1, C, spec_decoding(2, 0.8, model=m))
    assert p_t[P_KV_BUDGET_TOKENS] <= 0


def test_mtp_head_is_one_layer_plus_projection():
    """DeepSeek-V3 MTP (arXiv:2412.19437 §2.2): one transformer block (MoE), a 2d x d projection, two RMSNorms;
    the embedding and the output head are shared (no memory) but the head is read and multiplied each step."""
    m = CAT.model("deepseek-v3")
    g, pr = CAT.gpu("H200"), CAT.precision("FP8")
    spec = spec_decoding(1, 0.85, model=m)
    assert spec.draft == MTP
    p_t, p_d = spec_step_params(m, g, pr, 8, C, spec)
    h = m.hidden
    mtp_bytes = (m.moe_layer_params + 2 * h * h + 2 * h + h) * 1.0      # block, projection, input norms, head norm
    kv_t = m.kv_bytes_per_token_per_gpu(1.0, 8)
    kv_d = kv_t / 61                                                     # one layer of MLA latent
    left = 8 * 0.9 * g.hbm_bytes - m.total_params - mtp_bytes
    assert p_t[P_KV_BUDGET_TOKENS] == pytest.approx(left / (8 * kv_t + 8 * kv_d), rel=1e-12)
    one = mtp_model(m)
    assert one.layers == 1 and one.moe_layers == 1
    head = m.vocab * h
    active = (m.moe_layer_params - m.n_experts * m.expert_params + m.experts_per_token * m.expert_params
              + head + h + 2 * h * h)
    assert p_d[P_MATMUL] == pytest.approx(active, rel=1e-12)
    assert p_d[P_WDENSE] == pytest.approx((m.moe_layer_params - m.n_experts * m.expert_params + head + h
                                           + 2 * h * h) * 1.0 / 8, rel=1e-12)
    # the head costs far less per step than the target
    assert round_time_s(p_t, p_d, 64, 4096, 1) < 1.5 * round_time_s(p_t, p_d, 64, 4096, 0)


def test_dense_draft_under_data_parallel_attention_is_replicated_per_rank():
    m = CAT.model("qwen3-235b-a22b")
    spec = spec_decoding(2, 0.7, "qwen3-32b", m)
    p_t, p_d = spec_step_params(m, "H200", "FP8", 8, C, spec, dp=8, ep=8)
    assert p_d[P_DP] == 8 and p_d[P_GPUS] == 8
    assert p_d[P_WDENSE] == pytest.approx(CAT.model("qwen3-32b").dense_matmul_params * 1.0, rel=1e-12)
    assert 0 < p_t[P_KV_BUDGET_TOKENS] < kv_budget_tokens(m, CAT.precision("FP8"), CAT.gpu("H200"), 8, C, dp=8, ep=8)


def test_draft_that_cannot_use_the_layout_is_refused():
    m = CAT.model("qwen3-235b-a22b")
    spec = spec_decoding(2, 0.7, "qwen3-30b-a3b", m)       # 32 heads, 4 KV heads
    why = spec_refusal(m, spec, CAT.gpu("H200"), 64)
    assert why and "qwen3-30b-a3b" in why and "TP64" in why
    with pytest.raises(FastsimInputError) as e:
        spec_step_params(m, "H200", "FP8", 64, C, spec)
    assert e.value.field == "spec_draft"
    assert spec_refusal(m, spec, CAT.gpu("H200"), 8) is None


def test_every_export_is_documented():
    import fastsim.specdec as S
    from test_public_api import _problems
    problems = []
    for name in S.__all__:
        assert hasattr(S, name), name
        problems += _problems(f"fastsim.specdec.{name}", getattr(S, name))
    assert not problems, "\n".join(problems)
