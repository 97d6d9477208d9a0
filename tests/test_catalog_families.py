"""Model families people deploy now: built-in entries against published figures, config.json reading.

Every config below carries the keys of the config.json published with the weights (Hugging Face
repository named in each); published parameter counts are the model cards' / technical reports'.
"""
import dataclasses
import json
import math

import pytest

from fastsim.catalog import GPU, Precision, default_catalog, load_catalog, model_from_hf_config
from fastsim.errors import FastsimInputError

CAT = default_catalog()


def _read(tmp_path, cfg, folder="model"):
    d = tmp_path / folder
    d.mkdir(exist_ok=True)
    p = d / "config.json"
    p.write_text(json.dumps(cfg))
    return model_from_hf_config(str(p))


# ---- published configs (the keys that matter, spelled as published) ------------------------------

DEEPSEEK_V3 = {
    "_name_or_path": "deepseek-ai/DeepSeek-V3", "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "attention_bias": False, "ep_size": 1, "first_k_dense_replace": 3, "hidden_size": 7168,
    "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
    "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
    "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
    "tie_word_embeddings": False, "topk_group": 4, "topk_method": "noaux_tc", "v_head_dim": 128,
    "vocab_size": 129280, "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096}, "aux_loss_alpha": 0.001, "seq_aux": True,
    "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
}
MINICPM3_4B = {   # openbmb/MiniCPM3-4B: latent attention, no v_head_dim key (hidden / heads = 64)
    "_name_or_path": "openbmb/MiniCPM3-4B", "model_type": "minicpm3", "hidden_size": 2560, "num_hidden_layers": 62,
    "num_attention_heads": 40, "num_key_value_heads": 40, "intermediate_size": 6400, "vocab_size": 73448,
    "q_lora_rank": 768, "kv_lora_rank": 256, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32,
    "max_position_embeddings": 32768, "scale_emb": 12, "dim_model_base": 256, "scale_depth": 1.4,
}
LLAMA_31_70B = {
    "_name_or_path": "meta-llama/Llama-3.1-70B", "model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
    "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 131072, "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0},
}
MISTRAL_7B = {
    "_name_or_path": "mistralai/Mistral-7B-v0.1", "model_type": "mistral", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "sliding_window": 4096, "tie_word_embeddings": False, "vocab_size": 32000,
}
MIXTRAL = {
    "_name_or_path": "mistralai/Mixtral-8x7B-v0.1", "model_type": "mixtral", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "num_attention_heads": 32,
    "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
    "output_router_logits": False, "router_aux_loss_coef": 0.02, "sliding_window": None,
    "tie_word_embeddings": False, "vocab_size": 32000,
}


def _gpt_oss(layers, experts):
    return {
        "_name_or_path": f"openai/gpt-oss-{'120b' if experts == 128 else '20b'}", "model_type": "gpt_oss",
        "attention_bias": True, "experts_per_token": 4, "head_dim": 64, "hidden_size": 2880,
        "initial_context_length": 4096, "intermediate_size": 2880,
        "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)],
        "max_position_embeddings": 131072, "num_attention_heads": 64, "num_experts_per_tok": 4,
        "num_hidden_layers": layers, "num_key_value_heads": 8, "num_local_experts": experts,
        "output_router_logits": False, "rope_scaling": {"rope_type": "yarn", "factor": 32.0,
                                                             "original_max_position_embeddings": 4096},
        "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0, "tie_word_embeddings": False,
        "vocab_size": 201088, "quantization_config": {"quant_method": "mxfp4"},
    }


def _qwen3_moe(name, hidden, layers, heads, inter, moe_inter):
    return {
        "_name_or_path": f"Qwen/{name}", "model_type": "qwen3_moe", "attention_bias": False,
        "decoder_sparse_step": 1, "head_dim": 128, "hidden_size": hidden, "intermediate_size": inter,
        "max_position_embeddings": 40960, "max_window_layers": layers, "mlp_only_layers": [],
        "moe_intermediate_size": moe_inter, "norm_topk_prob": True, "num_attention_heads": heads, "num_experts": 128,
        "num_experts_per_tok": 8, "num_hidden_layers": layers, "num_key_value_heads": 4, "sliding_window": None,
        "tie_word_embeddings": False, "use_sliding_window": False, "vocab_size": 151936,
    }


QWEN3_235B = _qwen3_moe("Qwen3-235B-A22B", 4096, 94, 64, 12288, 1536)
QWEN3_30B = _qwen3_moe("Qwen3-30B-A3B", 2048, 48, 32, 6144, 768)
QWEN3_32B = {
    "_name_or_path": "Qwen/Qwen3-32B", "model_type": "qwen3", "attention_bias": False, "head_dim": 128,
    "hidden_size": 5120, "intermediate_size": 25600, "max_position_embeddings": 40960, "max_window_layers": 64,
    "num_attention_heads": 64, "num_hidden_layers": 64, "num_key_value_heads": 8, "sliding_window": None,
    "tie_word_embeddings": False, "use_sliding_window": False, "vocab_size": 151936,
}
QWEN25_7B = {   # Qwen2: q/k/v biases by construction; a window value that is switched off
    "_name_or_path": "Qwen/Qwen2.5-7B", "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
    "max_position_embeddings": 131072, "max_window_layers": 28, "num_attention_heads": 28, "num_hidden_layers": 28,
    "num_key_value_heads": 4, "sliding_window": 131072, "tie_word_embeddings": False, "use_sliding_window": False,
    "vocab_size": 152064,
}
QWEN15_MOE = {   # Qwen/Qwen1.5-MoE-A2.7B: 60 routed experts, top-4, one 5632-wide shared expert
    "_name_or_path": "Qwen/Qwen1.5-MoE-A2.7B", "model_type": "qwen2_moe", "decoder_sparse_step": 1,
    "hidden_size": 2048, "intermediate_size": 5632, "max_position_embeddings": 8192, "max_window_layers": 21,
    "moe_intermediate_size": 1408, "norm_topk_prob": False, "num_attention_heads": 16, "num_experts": 60,
    "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 16,
    "shared_expert_intermediate_size": 5632, "sliding_window": 32768, "tie_word_embeddings": False,
    "use_sliding_window": False, "vocab_size": 151936,
}
DEEPSEEK_V2_LITE = {   # full-rank query (q_lora_rank null), 2 shared experts, one dense layer
    "_name_or_path": "deepseek-ai/DeepSeek-V2-Lite", "model_type": "deepseek_v2", "first_k_dense_replace": 1,
    "hidden_size": 2048, "intermediate_size": 10944, "kv_lora_rank": 512, "max_position_embeddings": 163840,
    "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_routed_experts": 64, "n_shared_experts": 2,
    "num_attention_heads": 16, "num_experts_per_tok": 6, "num_hidden_layers": 27, "num_key_value_heads": 16,
    "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "tie_word_embeddings": False,
    "v_head_dim": 128, "vocab_size": 102400,
}


def _llama4(experts, step, chunk):
    text = {
        "model_type": "llama4_text", "attention_bias": False, "attention_chunk_size": chunk, "head_dim": 128,
        "hidden_size": 5120, "interleave_moe_layer_step": step, "intermediate_size": 8192,
        "intermediate_size_mlp": 16384, "max_position_embeddings": 262144, "num_attention_heads": 40,
        "num_experts_per_tok": 1, "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": experts,
        "no_rope_layers": [0 if (i + 1) % 4 == 0 else 1 for i in range(48)], "use_qk_norm": True,
        "router_aux_loss_coef": 0.001, "router_jitter_noise": 0.0, "tie_word_embeddings": False,
        "vocab_size": 202048,
    }
    return {"_name_or_path": "meta-llama/Llama-4-Scout-17B-16E" if experts == 16 else
            "meta-llama/Llama-4-Maverick-17B-128E", "model_type": "llama4", "text_config": text,
            "vision_config": {"hidden_size": 1408, "num_hidden_layers": 34, "num_attention_heads": 16,
                              "intermediate_size": 5632, "model_type": "llama4_vision_model"},
            "tie_word_embeddings": False}


# ---- built-in entries against the published parameter counts ------------------------------------

# (name, published total, published active, which count the publisher uses for "active")
#  "all": every parameter a token touches, both embeddings included (Mistral AI, Qwen);
#  "no-input-embedding": without the input embedding, the LM head kept (OpenAI's gpt-oss card,
#  DeepSeek): Model.active_matmul_params.
PUBLISHED = [
    ("deepseek-v3", 671e9, 37e9, "no-input-embedding"),     # DeepSeek-V3 technical report: 671B / 37B
    ("deepseek-r1", 671e9, 37e9, "no-input-embedding"),
    ("qwen3-235b-a22b", 235e9, 22e9, "all"),                # Qwen3 model card: 235B / 22B
    ("qwen3-32b", 32.8e9, 32.8e9, "all"),                   # Qwen3-32B model card: 32.8B
    ("gpt-oss-120b", 116.83e9, 5.13e9, "no-input-embedding"),   # gpt-oss model card, table 1
    ("gpt-oss-20b", 20.91e9, 3.61e9, "no-input-embedding"),
    ("mixtral-8x7b", 46.7e9, 12.9e9, "all"),                # Mistral AI, "Mixtral of experts"
    ("mistral-7b", 7.24e9, 7.24e9, "all"),                  # 14.48 GB of BF16 weights
    ("llama-3.1-70b", 70.55e9, 70.55e9, "all"),             # SPEC section 2
]


def _active(m, convention):
    return m.active_params if convention == "all" else m.active_matmul_params


@pytest.mark.parametrize("name,total,active,convention", PUBLISHED)
def test_builtin_params_match_published(name, total, active, convention):
    m = CAT.model(name)
    assert m.total_params == pytest.approx(total, rel=0.015)
    assert _active(m, convention) == pytest.approx(active, rel=0.015)
    assert m.source and "/" in m.source                      # names the published repository


def test_qwen3_30b_a3b_params():
    """Card: 30.5B total, 29.9B non-embedding, 3.3B activated.

    Counted: 30.53B / 29.91B / 3.353B. The activated figure is the count cut to two digits
    (3.353B, 1.6% above 3.3B); the card's other two figures agree to 0.1%.
    """
    m = CAT.model("qwen3-30b-a3b")
    assert m.total_params == pytest.approx(30.5e9, rel=0.015)
    assert m.total_params - 2 * m.vocab * m.hidden == pytest.approx(29.9e9, rel=0.005)
    assert math.floor(m.active_params / 1e8) / 10 == 3.3
    assert m.active_params == pytest.approx(3.353e9, rel=1e-3)


def test_builtin_kv_and_windows():
    assert CAT.model("deepseek-v3").kv_bytes_per_token(2) == 70_272          # SPEC §10: 61 x (512 + 64) x 2
    assert CAT.model("deepseek-v3").kv_bytes_per_token_per_gpu(2, 8) == 70_272  # latent not split by TP
    assert CAT.model("deepseek-r1").kv_bytes_per_token(2) == 70_272
    mistral = CAT.model("mistral-7b")
    assert mistral.kv_bytes_per_token(2) == 131_072
    assert mistral.kv_tokens_held(32768) == 4096
    assert mistral.kv_tokens_held(2000) == 2000
    oss = CAT.model("gpt-oss-120b")
    assert oss.kv_tokens_held(10000) == pytest.approx(10000 - 0.5 * (10000 - 128))
    assert CAT.model("mixtral-8x7b").kv_tokens_held(30000) == 30000
    assert CAT.model("qwen3-235b-a22b").kv_bytes_per_token(2) == 94 * 2 * 4 * 128 * 2


# ---- config.json read back, family by family ---------------------------------------------------

def _same_as_builtin(m, name):
    b = CAT.model(name)
    assert dataclasses.replace(m, name=b.name, source=b.source) == b


def test_deepseek_v3_config(tmp_path):
    m = _read(tmp_path, DEEPSEEK_V3)
    assert m.name == "DeepSeek-V3"
    assert (m.attention, m.kv_lora_rank, m.q_lora_rank, m.qk_rope_head_dim, m.v_head_dim) == ("mla", 512, 1536, 64, 128)
    assert (m.n_experts, m.experts_per_token, m.moe_ffn, m.shared_ffn, m.moe_layers) == (256, 8, 2048, 2048, 58)
    assert m.kv_bytes_per_token(2) == 70_272
    assert m.total_params == pytest.approx(671e9, rel=0.015)   # the MTP layer is not counted
    _same_as_builtin(m, "deepseek-v3")


def test_deepseek_v2_lite_full_rank_query_and_shared_experts(tmp_path):
    m = _read(tmp_path, DEEPSEEK_V2_LITE)
    assert m.q_lora_rank == 0 and m.shared_ffn == 2 * 1408 and m.moe_layers == 26
    assert m.kv_bytes_per_token(2) == 27 * (512 + 64) * 2
    assert m.total_params == pytest.approx(15.7e9, rel=0.015)            # DeepSeek-V2 paper: 15.7B
    assert m.active_matmul_params == pytest.approx(2.4e9, rel=0.025)     # 2.4B, given to two digits (2.45B)


def test_minicpm3_latent_kv(tmp_path):
    m = _read(tmp_path, MINICPM3_4B)
    assert m.attention == "mla" and m.v_head_dim == 64 and m.q_lora_rank == 768
    assert m.kv_bytes_per_token(2) == 62 * (256 + 32) * 2 == 35_712
    assert m.kv_bytes_per_token_per_gpu(2, 4) == 35_712
    assert m.name == "MiniCPM3-4B"


def test_llama_70b_config(tmp_path):
    m = _read(tmp_path, LLAMA_31_70B)
    assert m.kv_bytes_per_token(2) == 327_680
    _same_as_builtin(m, "llama-3.1-70b")


def test_mistral_sliding_window(tmp_path):
    m = _read(tmp_path, MISTRAL_7B)
    assert (m.sliding_window, m.sliding_layers) == (4096, 32)
    assert m.kv_bytes_per_token(2) == 131_072
    assert m.kv_tokens_held(32768) == 4096 and m.kv_tokens_held(2000) == 2000
    assert m.total_params == pytest.approx(7.24e9, rel=0.015)
    _same_as_builtin(m, "mistral-7b")


def test_mixtral_config(tmp_path):
    m = _read(tmp_path, MIXTRAL)
    assert (m.n_experts, m.experts_per_token, m.moe_ffn, m.moe_layers, m.sliding_window) == (8, 2, 14336, 32, 0)
    assert m.total_params == pytest.approx(46.7e9, rel=0.015)
    assert m.active_params == pytest.approx(12.9e9, rel=0.015)
    _same_as_builtin(m, "mixtral-8x7b")


@pytest.mark.parametrize("layers,experts,builtin,total,active", [
    (36, 128, "gpt-oss-120b", 116.83e9, 5.13e9), (24, 32, "gpt-oss-20b", 20.91e9, 3.61e9)])
def test_gpt_oss_hybrid_windows_and_biases(tmp_path, layers, experts, builtin, total, active):
    m = _read(tmp_path, _gpt_oss(layers, experts))
    assert (m.sliding_window, m.sliding_layers) == (128, layers // 2)
    assert m.attn_bias and m.expert_bias
    assert m.kv_tokens_held(10000) == pytest.approx(10000 - 0.5 * (10000 - 128))
    assert m.total_params == pytest.approx(total, rel=0.015)
    assert m.active_matmul_params == pytest.approx(active, rel=0.015)
    _same_as_builtin(m, builtin)


@pytest.mark.parametrize("cfg,builtin", [(QWEN3_235B, "qwen3-235b-a22b"), (QWEN3_30B, "qwen3-30b-a3b"),
                                         (QWEN3_32B, "qwen3-32b")])
def test_qwen3_configs(tmp_path, cfg, builtin):
    m = _read(tmp_path, cfg)
    assert m.sliding_window == 0 and not m.attn_bias
    _same_as_builtin(m, builtin)


def test_qwen2_window_switched_off_and_on(tmp_path):
    m = _read(tmp_path, QWEN25_7B)
    assert (m.sliding_window, m.sliding_layers) == (0, 0)          # use_sliding_window: false
    assert m.attn_bias                                              # Qwen2 q/k/v biases
    assert m.total_params == pytest.approx(7.61e9, rel=0.015)       # Qwen2.5-7B card: 7.61B
    on = _read(tmp_path, {**QWEN25_7B, "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 20})
    assert (on.sliding_window, on.sliding_layers) == (4096, 28 - 20)   # the first 20 layers stay full
    with pytest.raises(FastsimInputError, match="max_window_layers"):
        _read(tmp_path, {k: v for k, v in {**QWEN25_7B, "use_sliding_window": True}.items() if k != "max_window_layers"})


def test_qwen2_moe_shared_expert(tmp_path):
    m = _read(tmp_path, QWEN15_MOE)
    assert (m.n_experts, m.experts_per_token, m.moe_ffn, m.shared_ffn, m.moe_layers) == (60, 4, 1408, 5632, 24)
    assert m.total_params == pytest.approx(14.3e9, rel=0.015)       # Qwen1.5-MoE-A2.7B: 14.3B / 2.7B
    assert m.active_params == pytest.approx(2.7e9, rel=0.015)
    sparse = _read(tmp_path, {**QWEN15_MOE, "decoder_sparse_step": 2, "mlp_only_layers": [1]})
    assert sparse.moe_layers == 11                                  # odd layers, less layer 1


def test_llama4_text_config_nesting(tmp_path):
    scout = _read(tmp_path, _llama4(16, 1, None))
    assert scout.name == "Llama-4-Scout-17B-16E"
    assert (scout.n_experts, scout.experts_per_token, scout.moe_ffn, scout.shared_ffn, scout.moe_layers) == \
        (16, 1, 8192, 8192, 48)
    assert scout.active_params == pytest.approx(17e9, rel=0.015)
    # 109B published includes the vision tower, which is not counted
    assert scout.total_params == pytest.approx(109e9, rel=0.015) and scout.total_params < 109e9
    maverick = _read(tmp_path, _llama4(128, 2, None))
    assert maverick.moe_layers == 24 and maverick.ffn == 16384      # dense layers use intermediate_size_mlp
    assert maverick.total_params == pytest.approx(400e9, rel=0.015)
    assert maverick.active_params == pytest.approx(17e9, rel=0.015)
    with pytest.raises(FastsimInputError, match="attention_chunk_size"):
        _read(tmp_path, _llama4(16, 1, 8192))                      # as published: chunked attention


def test_gemma_window_patterns(tmp_path):
    gemma2 = {"_name_or_path": "google/gemma-2-9b", "model_type": "gemma2", "head_dim": 256, "hidden_size": 3584,
              "intermediate_size": 14336, "num_attention_heads": 16, "num_hidden_layers": 42,
              "num_key_value_heads": 8, "sliding_window": 4096, "vocab_size": 256000, "cache_implementation": "hybrid",
              "max_position_embeddings": 8192, "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0}
    m = _read(tmp_path, gemma2)
    assert (m.sliding_window, m.sliding_layers, m.head_dim) == (4096, 21, 256)   # every other layer
    assert m.tied_embeddings                                                      # Gemma2Config's default
    assert m.total_params == pytest.approx(9.24e9, rel=0.015)                     # Gemma 2 report: 9.24B
    gemma3 = {"_name_or_path": "google/gemma-3-27b-it", "model_type": "gemma3", "tie_word_embeddings": True,
              "text_config": {"model_type": "gemma3_text", "head_dim": 128, "hidden_size": 5376,
                              "intermediate_size": 21504, "num_attention_heads": 32, "num_hidden_layers": 62,
                              "num_key_value_heads": 16, "sliding_window": 1024, "sliding_window_pattern": 6,
                              "vocab_size": 262208, "max_position_embeddings": 131072},
              "vision_config": {"hidden_size": 1152, "num_hidden_layers": 27, "num_attention_heads": 16,
                                "intermediate_size": 4304, "model_type": "siglip_vision_model"}}
    m3 = _read(tmp_path, gemma3)
    assert m3.name == "gemma-3-27b-it" and m3.tied_embeddings
    assert (m3.layers, m3.sliding_window, m3.sliding_layers) == (62, 1024, 62 - 10)   # every 6th layer full
    assert m3.kv_tokens_held(100_000) == pytest.approx(100_000 - 52 / 62 * (100_000 - 1024))


def test_gpt_oss_without_layer_types_alternates(tmp_path):
    """transformers' GptOssConfig builds alternating sliding/full layers when layer_types is absent."""
    cfg = {k: v for k, v in _gpt_oss(36, 128).items() if k != "layer_types"}
    assert (_read(tmp_path, cfg).sliding_layers, _read(tmp_path, {**cfg, "layer_types": None}).sliding_layers) == (18, 18)


def test_layer_types_all_full_is_no_window(tmp_path):
    cfg = {**MISTRAL_7B, "layer_types": ["full_attention"] * 32}
    assert _read(tmp_path, cfg).sliding_window == 0


def test_naming(tmp_path):
    cfg = {k: v for k, v in LLAMA_31_70B.items() if k != "_name_or_path"}
    assert _read(tmp_path, cfg, folder="my-llama").name == "my-llama"
    assert _read(tmp_path, {**cfg, "_name_or_path": "/models/Llama-3.1-70B-Instruct/"}).name == "Llama-3.1-70B-Instruct"
    p = tmp_path / "model" / "config.json"
    assert model_from_hf_config(str(p), name="seventy").name == "seventy"
    assert "config.json" in model_from_hf_config(str(p)).source


# ---- refusals: each names its key -----------------------------------------------------------

def _base(**extra):
    cfg = {k: v for k, v in LLAMA_31_70B.items()}
    cfg.update(extra)
    return cfg


REFUSALS = [
    (_base(layer_types=["chunked_attention"] * 80), "layer_types"),
    (_base(layer_types=["linear_attention", "full_attention"] * 40), "layer_types"),
    (_base(layer_types=["full_attention"] * 79), "layer_types"),                     # wrong length
    (_base(layers_block_type=["mamba", "attention"] * 40), "layers_block_type"),     # Nemotron-H / hybrids
    (_base(hybrid_override_pattern="M-M*-" * 16), "hybrid_override_pattern"),
    (_base(mamba_d_state=256, mamba_n_heads=24), "mamba_d_state"),                   # Falcon-H1
    (_base(ssm_cfg={"d_state": 16}), "ssm_cfg"),
    (_base(linear_attn_config={"kda_layers": [1, 2]}), "linear_attn_config"),        # Kimi Linear
    (_base(full_attention_interval=4, linear_num_value_heads=32), "full_attention_interval"),   # Qwen3-Next
    (_base(attn_type_list=[0, 1] * 40), "attn_type_list"),                           # MiniMax-Text-01
    (_base(index_topk=2048, index_n_heads=64), "index_n_heads"),                     # DeepSeek-V3.2 sparse attention
    (_base(attention_chunk_size=8192), "attention_chunk_size"),
    (_base(num_kv_shared_layers=15), "num_kv_shared_layers"),                        # Gemma-3n
    (_base(cross_attention_layers=[3, 8, 13]), "cross_attention_layers"),            # Llama-3.2-Vision
    (_base(sliding_window_size=512), "sliding_window_size"),
    (_base(num_shared_expert=[1]), "num_shared_expert"),                             # an unknown expert spelling
    (_base(num_local_experts=8), "num_experts_per_tok"),                             # experts without a top-k
    (_base(num_local_experts=8, num_experts=16, num_experts_per_tok=2), "num_local_experts and num_experts"),
    (_base(num_experts=16, moe_topk=[2, 4] * 40), "moe_topk"),
    (_base(n_routed_experts=8, num_experts_per_tok=2, first_k_dense_replace=80), "n_routed_experts"),
    (_base(num_experts=8, num_experts_per_tok=2, mlp_only_layers=[80]), "mlp_only_layers"),
    (_base(q_lora_rank=1536, qk_rope_head_dim=64), "kv_lora_rank"),                  # latent attention half-given
    (_base(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128), "v_head_dim"),
    (_base(model_type="gpt_neox"), "model_type"),                                    # ungated MLP
    (_base(hidden_act="relu2"), "hidden_act"),                                       # a two-matrix activation, llama type
    (_base(is_encoder_decoder=True), "is_encoder_decoder"),                          # T5 / Whisper
    (_base(add_cross_attention=True), "add_cross_attention"),
    (_base(encoder_layers=32), "encoder_layers"),
    (_base(model_type="rwkv"), "model_type"),                                        # recurrent, not attention
    ({"text_config": dict(LLAMA_31_70B), "is_encoder_decoder": True}, "is_encoder_decoder"),   # top level
    (_base(model_type="mixtral"), "num_local_experts"),                              # transformers would default 8
    ({k: v for k, v in QWEN15_MOE.items() if k != "shared_expert_intermediate_size"}, "shared_expert_intermediate_size"),
    (_base(sliding_window=-1), "sliding_window"),
    (_base(attention_bias="yes"), "attention_bias"),
    (_base(num_key_value_heads=3), "kv_heads"),
    (_base(head_dim=0), "head_dim"),
]


@pytest.mark.parametrize("cfg,key", REFUSALS, ids=[k for _, k in REFUSALS])
def test_refusals_name_the_key(tmp_path, cfg, key):
    with pytest.raises(FastsimInputError, match=key) as exc:
        _read(tmp_path, cfg)
    assert "\n" not in str(exc.value)


def test_vision_config_is_not_refused(tmp_path):
    """A vision tower's keys (even ones that would be refused in a text model) are not read."""
    cfg = {"_name_or_path": "x/vl", "text_config": dict(LLAMA_31_70B),
           "vision_config": {"window_size": 112, "num_experts": 4, "layer_types": ["conv"]}}
    assert _read(tmp_path, cfg).kv_bytes_per_token(2) == 327_680


def test_refusal_is_a_cli_error(tmp_path, capsys):
    from fastsim.cli import main
    d = tmp_path / "jamba"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(_base(layers_block_type=["mamba"] * 80)))
    rc = main(["plan", "--scenario", "chat", "--model", str(d / "config.json"), "--no-verify"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "layers_block_type" in err and len(err.strip().splitlines()) == 1


# ---- GPUs and precisions ----------------------------------------------------------------------

def test_fp4_precisions_and_peaks():
    nv, mx = CAT.precision("NVFP4"), CAT.precision("MXFP4")
    assert (nv.weight_bytes, nv.kv_bytes, nv.flops_key) == (0.5 + 1 / 16, 1, "fp4")
    assert (mx.weight_bytes, mx.kv_bytes, mx.flops_key) == (0.5 + 1 / 32, 1, "fp4")
    assert CAT.default_precisions() == ["BF16", "FP8"]
    with_fp4 = {n for n, g in CAT.gpus.items() if "fp4" in g.peak_flops_per_s}
    assert with_fp4 == {"B200", "B300", "GB200"}
    for n in with_fp4:
        g = CAT.gpu(n)
        assert g.peak_flops_per_s["fp4"] == 2 * g.peak_flops_per_s["fp8"]
        assert "FP4" in g.source


def test_nodes_and_h800():
    assert CAT.gpu("GB200").gpus_per_node == 72
    assert all(g.gpus_per_node == 8 for n, g in CAT.gpus.items() if n != "GB200")
    h800, h100 = CAT.gpu("H800"), CAT.gpu("H100")
    assert h800.peak_flops_per_s == h100.peak_flops_per_s
    assert (h800.hbm_bw_bytes_per_s, h800.hbm_bytes) == (h100.hbm_bw_bytes_per_s, h100.hbm_bytes)
    assert h800.nvlink_bw_bytes_per_s < h100.nvlink_bw_bytes_per_s   # 400 vs 900 GB/s (both directions)
    assert h800.network_bw_bytes_per_s == 50e9 and not h800.default_grid
    assert "2412.19437" in h800.source
    assert CAT.default_gpus() == ["H100", "H200", "B200"]


def test_missing_fp4_peak_is_refused_not_crashed():
    from fastsim.stepmodel import step_params
    with pytest.raises(FastsimInputError, match="NVFP4"):
        step_params(CAT.model("llama-3.1-8b"), CAT.gpu("H100"), CAT.precision("NVFP4"), 1)


def test_screen_default_grid_keeps_bf16_fp8_and_fp4_runs_where_it_can():
    from fastsim.analytic import Demand, ScreenOptions, screen
    s = CAT.scenario("chat")
    d = Demand.from_scenario(s)
    assert set(screen(s.model, d)["precision"]) == {"BF16", "FP8"}
    fp4 = screen(s.model, d, options=ScreenOptions(precisions=("NVFP4",)))
    assert set(fp4["gpu"]) == {"B200"} and set(fp4["precision"]) == {"NVFP4"}


@pytest.mark.parametrize("text,field", [
    ("[gpus.H100]\ngpus_per_node = 0\n", "gpus_per_node"),
    ("[gpus.H100]\ngpus_per_node = 2.5\n", "gpus_per_node"),
    ("[precisions.FP8]\ndefault_grid = 1\n", "default_grid"),
])
def test_bad_new_fields(tmp_path, text, field):
    p = tmp_path / "c.toml"
    p.write_text(text)
    with pytest.raises(FastsimInputError, match=field):
        load_catalog([str(p)])


def test_user_precision_joins_default_grid_unless_told(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("[precisions.INT4]\nweight_bytes = 0.5\nkv_bytes = 1\nflops_key = 'int4'\n"
                 "[precisions.W4]\nweight_bytes = 0.5\nkv_bytes = 2\nflops_key = 'bf16'\ndefault_grid = false\n"
                 "[gpus.NVL]\npeak_flops_per_s = { bf16 = 1e15 }\nhbm_bw_bytes_per_s = 1e12\nhbm_bytes = 1e11\n"
                 "nvlink_bw_bytes_per_s = 1e11\nnetwork_bw_bytes_per_s = 1e10\nprice_usd_per_hour = 1\n"
                 "power_w = 100\ngpus_per_node = 36\n")
    cat = load_catalog([str(p)])
    assert cat.default_precisions() == ["BF16", "FP8", "INT4"]
    assert cat.gpu("NVL").gpus_per_node == 36
    assert isinstance(cat.gpu("NVL"), GPU) and isinstance(cat.precision("W4"), Precision)


# ---- two-matrix (ungated) MLPs ---------------------------------------------------------------------

MINITRON_8B = {   # nvidia/Minitron-8B-Base config.json (Nemotron-4 architecture, squared-ReLU MLP, no gate)
    "architectures": ["NemotronForCausalLM"], "model_type": "nemotron", "hidden_act": "relu2", "hidden_size": 4096,
    "intermediate_size": 16384, "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128,
    "num_hidden_layers": 32, "vocab_size": 256000, "max_position_embeddings": 4096, "tie_word_embeddings": False,
    "partial_rotary_factor": 0.5, "rope_theta": 10000, "norm_eps": 1e-05,
}


def test_nemotron_mlp_is_two_matrices(tmp_path):
    """Minitron-8B: up and down projections only (transformers' NemotronMLP): 8.27e9 parameters, not 10.42e9."""
    m = _read(tmp_path, MINITRON_8B)
    assert m.gated_mlp is False and m.mlp_matrices == 2
    assert m.total_params == pytest.approx(8.2714e9, rel=1e-4)
    assert m.layer_params - m.attn_params == 2 * 4096 * 16384 + 2 * 4096
    gated = dataclasses.replace(m, gated_mlp=True)
    assert gated.total_params - m.total_params == 32 * 4096 * 16384


def test_gelu_llama_stays_gated(tmp_path):
    """hidden_act picks the activation of Llama's gated MLP; it does not remove the gate."""
    assert _read(tmp_path, _base(hidden_act="gelu")).total_params == _read(tmp_path, _base()).total_params


def test_ungated_moe_experts_and_bad_flag(tmp_path):
    m = CAT.model("mixtral-8x7b") if "mixtral-8x7b" in CAT.models else None
    if m is not None:
        u = dataclasses.replace(m, gated_mlp=False)
        assert u.expert_params == pytest.approx(m.expert_params * 2 / 3)
    p = tmp_path / "c.toml"
    p.write_text('[models.x]\nlayers = 2\nhidden = 64\nheads = 4\nkv_heads = 4\nhead_dim = 16\nffn = 128\n'
                 'vocab = 100\ngated_mlp = "no"\n')
    with pytest.raises(FastsimInputError, match="gated_mlp"):
        load_catalog([str(p)])
