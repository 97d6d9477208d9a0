"""config.json keys that change what an engine serves: window spellings, RoPE scaling, quantised checkpoints.

Each rule is the engine's, as its source states it; the configs carry the keys of the config.json
files published with the weights on Hugging Face (the repository named beside each).
"""
import dataclasses
import json

import pytest

from fastsim.catalog import default_catalog, model_from_hf_config
from fastsim.errors import FastsimInputError

CAT = default_catalog()


def _path(tmp_path, cfg, folder="model"):
    d = tmp_path / folder
    d.mkdir(exist_ok=True)
    p = d / "config.json"
    p.write_text(json.dumps(cfg))
    return str(p)


def _read(tmp_path, cfg, folder="model"):
    return model_from_hf_config(_path(tmp_path, cfg, folder))


# google/gemma-2-9b-it config.json (the keys that matter, spelled as published)
GEMMA2_9B = {
    "architectures": ["Gemma2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attn_logit_softcapping": 50.0, "cache_implementation": "hybrid", "final_logit_softcapping": 30.0,
    "head_dim": 256, "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 3584, "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "gemma2",
    "num_attention_heads": 16, "num_hidden_layers": 42, "num_key_value_heads": 8, "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096, "sliding_window_size": 4096,
    "torch_dtype": "bfloat16", "vocab_size": 256000,
}

# meta-llama/Llama-3.1-8B-Instruct's shape; the quantised checkpoints below keep it
LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
}

# Llama-3.1-8B by hand: per layer, attention 2 x 4096 x 4096 + 2 x 4096 x 1024 = 41,943,040 and the
# gated MLP 3 x 4096 x 14336 = 176,160,768; 32 layers of them = 6,979,321,856 quantisable weights;
# embedding and LM head 128256 x 4096 = 525,336,576 each; norms 32 x 2 x 4096 + 4096 = 266,240.
LINEAR = 6_979_321_856
BF16_REST = 2 * 525_336_576 + 266_240
TOTAL = LINEAR + BF16_REST


def _bytes_per_param(per_quantised_weight, linear=LINEAR, rest=BF16_REST):
    return (linear * per_quantised_weight + rest * 2.0) / TOTAL


# ---- Gemma-2's two spellings of the window ------------------------------------------------------

def test_gemma2_both_window_spellings_accepted(tmp_path):
    m = _read(tmp_path, GEMMA2_9B)
    assert (m.sliding_window, m.sliding_layers) == (4096, 21)      # every other layer slides (Gemma2Config)
    assert m.tied_embeddings and m.max_context_tokens == 8192
    assert m.total_params == pytest.approx(9.24e9, rel=0.01)       # Gemma 2 report: 9.24B


def test_gemma2_different_window_spellings_refused(tmp_path):
    with pytest.raises(FastsimInputError) as exc:
        _read(tmp_path, {**GEMMA2_9B, "sliding_window_size": 2048})
    msg = str(exc.value)
    assert "config.json key sliding_window and sliding_window_size" in msg and "[4096, 2048]" in msg


def test_window_size_spelling_alone_refused(tmp_path):
    cfg = {k: v for k, v in GEMMA2_9B.items() if k != "sliding_window"}
    with pytest.raises(FastsimInputError, match="sliding_window_size"):
        _read(tmp_path, cfg)


# ---- RoPE scaling: the context vLLM serves -------------------------------------------------------

ROPE_CASES = [
    # (config overrides, served context by vLLM's rule)
    ({"max_position_embeddings": 131072}, 131072),                                       # Llama-3.1: llama3 unscaled
    ({"max_position_embeddings": 32768,                                                  # Qwen2.5-7B-Instruct + YaRN
      "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}}, 131072),
    ({"max_position_embeddings": 163840,                                                 # DeepSeek-V3
      "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                       "original_max_position_embeddings": 4096, "type": "yarn"}}, 163840),
    ({"max_position_embeddings": 8192,                                                   # YaRN: original x factor
      "rope_scaling": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 4096}}, 8192),
    ({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 2.0}}, 8192),
    ({"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "dynamic", "factor": 4.0}}, 16384),
    ({"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "dynamic"}}, 4096),   # factor defaults to 1
    ({"max_position_embeddings": 131072, "original_max_position_embeddings": 4096,        # Phi-3-mini-128k
      "rope_scaling": {"type": "longrope", "long_factor": [1.0, 1.1], "short_factor": [1.0, 1.0]}}, 131072),
    ({"max_position_embeddings": 131072, "rope_scaling": {"type": "su", "long_factor": [1.0], "short_factor": [1.0]}},
     131072),
    ({"max_position_embeddings": 8192, "seq_length": 4096, "rope_scaling": None}, 4096),   # the smallest length key
    ({"max_position_embeddings": 4096,                                                     # transformers v5 spelling
      "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}}, 8192),
    ({"max_position_embeddings": 4096, "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}}, 4096),
]


@pytest.mark.parametrize("over,served", ROPE_CASES)
def test_rope_scaling_served_context(tmp_path, over, served):
    """vLLM's ``_get_and_verify_max_len`` (vllm/config.py at v0.10.x; vllm/config/model.py from v0.11):
    the derived length is the smallest of max_position_embeddings, n_positions, max_seq_len,
    seq_length, model_max_length, max_sequence_length, max_seq_length and seq_len; then, unless
    rope_type is "su", "longrope" or "llama3", it is multiplied by rope_scaling's factor
    (default 1), a "yarn" model's length first replaced by original_max_position_embeddings."""
    cfg = {**LLAMA_8B, **over}
    if "rope_parameters" in over:
        cfg.pop("rope_scaling")
    assert _read(tmp_path, cfg).max_context_tokens == served


def test_gemma3_rope_not_applied_twice(tmp_path):
    """vLLM's ``_get_and_verify_max_len`` skips the factor for Gemma-3 ("gemma3" in model_type): its
    max_position_embeddings (131072) is already the scaled context (google/gemma-3-27b-it)."""
    cfg = {**LLAMA_8B, "model_type": "gemma3_text", "max_position_embeddings": 131072, "sliding_window": 1024,
           "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "head_dim": 128}
    m = _read(tmp_path, cfg)
    assert m.max_context_tokens == 131072 and m.sliding_window == 1024


@pytest.mark.parametrize("rope,key", [
    ({"rope_type": "ntk-by-parts", "factor": 2.0}, "rope_scaling.rope_type"),
    ({"rope_type": "yarn", "factor": 4.0}, "rope_scaling.original_max_position_embeddings"),
    ({"rope_type": "yarn", "type": "linear", "factor": 4.0}, "rope_scaling.rope_type and rope_scaling.type"),
    ({"rope_type": "linear", "factor": 0}, "rope_scaling.factor"),
    ({"rope_type": "linear", "factor": "2"}, "rope_scaling.factor"),
])
def test_rope_refusals_name_the_key(tmp_path, rope, key):
    with pytest.raises(FastsimInputError) as exc:
        _read(tmp_path, {**LLAMA_8B, "rope_scaling": rope})
    assert f"config.json key {key}:" in str(exc.value)


def test_longer_served_context_reaches_the_screen(tmp_path):
    """A YaRN-extended model accepts requests past max_position_embeddings: the screen prices them."""
    from fastsim.analytic import Demand
    m = _read(tmp_path, {**LLAMA_8B, "max_position_embeddings": 32768, "rope_scaling": {
        "factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}})
    d = Demand(rate_req_per_s=1.0, ttft_s=10.0, tpot_s=0.1, mean_prompt_tokens=60000, mean_output_tokens=100,
               latency_prompt_tokens=60000, latency_output_tokens=100)
    assert d.within_context(m.max_context_tokens) is d


# ---- quantised checkpoints -----------------------------------------------------------------------

AWQ = {"bits": 4, "group_size": 128, "modules_to_not_convert": None, "quant_method": "awq", "version": "gemm",
       "zero_point": True}                                # hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4
GPTQ = {"bits": 4, "checkpoint_format": "gptq", "damp_percent": 0.01, "desc_act": True, "group_size": 128,
        "model_file_base_name": None, "model_name_or_path": None, "quant_method": "gptq", "static_groups": False,
        "sym": True, "true_sequential": True}             # hugging-quants/Meta-Llama-3.1-8B-Instruct-GPTQ-INT4
CT_W4A16 = {                                              # neuralmagic/Meta-Llama-3.1-8B-Instruct-quantized.w4a16
    "config_groups": {"group_0": {"input_activations": None, "output_activations": None, "targets": ["Linear"],
                                  "weights": {"actorder": None, "block_structure": None, "dynamic": False,
                                              "group_size": 128, "num_bits": 4, "observer": "minmax",
                                              "observer_kwargs": {}, "strategy": "group", "symmetric": True,
                                              "type": "int"}}},
    "format": "pack-quantized", "ignore": ["lm_head"], "kv_cache_scheme": None, "quant_method": "compressed-tensors",
    "quantization_status": "compressed"}
CT_FP8 = {                                                # RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic
    "config_groups": {"group_0": {"input_activations": {"dynamic": True, "num_bits": 8, "observer": None,
                                                        "strategy": "token", "symmetric": True, "type": "float"},
                                  "targets": ["Linear"],
                                  "weights": {"dynamic": False, "num_bits": 8, "observer": "minmax",
                                              "strategy": "channel", "symmetric": True, "type": "float"}}},
    "format": "float-quantized", "ignore": ["lm_head"], "quant_method": "compressed-tensors",
    "quantization_status": "compressed"}
FP8_BLOCK = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
             "weight_block_size": [128, 128]}             # Qwen/Qwen3-8B-FP8, deepseek-ai/DeepSeek-V3


@pytest.mark.parametrize("qc,prec,per", [
    (AWQ, "W4A16", 0.5 + (2 + 0.5) / 128),               # 4-bit weight, FP16 scale + 4-bit zero per 128
    (GPTQ, "W4A16", 0.5 + (2 + 0.5) / 128),
    ({**GPTQ, "bits": 8}, "W8A16", 1 + (2 + 1) / 128),
    ({**GPTQ, "group_size": -1}, "W4A16", 0.5 + (2 + 0.5) / 4096),   # one group per channel (hidden inputs)
    ({**AWQ, "zero_point": False}, "W4A16", 0.5 + 2 / 128),
    (CT_W4A16, "W4A16", 0.5 + 2 / 128),                  # symmetric: a BF16 scale per group, no zero point
    (CT_FP8, "FP8", 1 + 4 / 4096),                       # an FP32 scale per output channel
    (FP8_BLOCK, "FP8", 1 + 4 / (128 * 128)),             # an FP32 scale per 128 x 128 block
    ({"activation_scheme": "static", "quant_method": "fp8"}, "FP8", 1.0),
    ({"activation_scale_ub": 1200.0, "modules_to_not_convert": ["lm_head"], "quant_method": "fbgemm_fp8"},
     "FP8", 1 + 4 / 4096),                                # FBGEMMFp8Config: an FP32 scale per output channel
])
def test_checkpoint_weight_bytes(tmp_path, qc, prec, per):
    """Bytes per parameter = (quantised linear weights x bytes per weight + BF16 embedding, LM head and
    norms x 2) / parameters, the per-weight figure from the tensors vLLM's quantisation method creates
    (AWQLinearMethod / GPTQLinearMethod / compressed-tensors schemes / Fp8LinearMethod create_weights)."""
    m = _read(tmp_path, {**LLAMA_8B, "quantization_config": qc})
    assert m.total_params == TOTAL
    assert m.checkpoint_precision == prec
    assert m.checkpoint_weight_bytes == pytest.approx(_bytes_per_param(per), rel=1e-12)
    assert m.checkpoint_bf16_modules == ("embedding", "lm_head")
    assert prec in m.checkpoint_note and m.name in m.checkpoint_note


def test_awq_hand_figure(tmp_path):
    """Llama-3.1-8B AWQ by hand: 6,979,321,856 x 0.51953125 + 1,050,939,392 x 2 = 5,727,854,592 bytes."""
    m = _read(tmp_path, {**LLAMA_8B, "quantization_config": AWQ})
    assert m.checkpoint_weight_bytes * m.total_params == pytest.approx(5_727_854_592, abs=1.0)  # 3,625,975,808 + 2,101,878,784
    assert "5.7 GB" in m.checkpoint_note


def test_modules_kept_in_bf16(tmp_path):
    """Modules a checkpoint does not convert (AWQ's modules_to_not_convert) are counted at 2 bytes."""
    m = _read(tmp_path, {**LLAMA_8B, "quantization_config": {**AWQ, "modules_to_not_convert": ["self_attn"]}})
    attn = 32 * 41_943_040
    per = 0.5 + 2.5 / 128
    assert m.checkpoint_weight_bytes == pytest.approx(((LINEAR - attn) * per + (BF16_REST + attn) * 2) / TOTAL)
    assert "attention" in m.checkpoint_bf16_modules
    one = _read(tmp_path, {**LLAMA_8B, "quantization_config": {
        **AWQ, "modules_to_not_convert": ["model.layers.0.mlp.down_proj"]}}, folder="one")
    down1 = 4096 * 14336        # one layer's down_proj
    assert one.checkpoint_weight_bytes == pytest.approx(((LINEAR - down1) * per + (BF16_REST + down1) * 2) / TOTAL)
    kv = _read(tmp_path, {**LLAMA_8B, "quantization_config": {**AWQ, "modules_to_not_convert": ["k_proj", "v_proj"]}},
               folder="kv")
    kvw = 32 * 2 * 4096 * 1024  # every layer's k and v projections
    assert kv.checkpoint_weight_bytes == pytest.approx(((LINEAR - kvw) * per + (BF16_REST + kvw) * 2) / TOTAL)
    # a vision tower's modules (not counted) and the router (BF16 anyway) change nothing
    base = _read(tmp_path, {**LLAMA_8B, "quantization_config": AWQ}, folder="base")
    for names in (["model.visual.blocks.0.attn.qkv", "multi_modal_projector"], ["re:.*mlp.gate$"]):
        m2 = _read(tmp_path, {**LLAMA_8B, "quantization_config": {**AWQ, "modules_to_not_convert": names}},
                   folder="v" + str(len(names)))
        assert m2.checkpoint_weight_bytes == base.checkpoint_weight_bytes


def test_gptq_quantised_lm_head(tmp_path):
    m = _read(tmp_path, {**LLAMA_8B, "quantization_config": {**GPTQ, "lm_head": True}})
    per = 0.5 + 2.5 / 128
    assert m.checkpoint_weight_bytes == pytest.approx(
        ((LINEAR + 525_336_576) * per + (525_336_576 + 266_240) * 2) / TOTAL)
    assert "lm_head" not in m.checkpoint_bf16_modules


def test_mxfp4_quantises_only_the_experts(tmp_path):
    """vLLM's Mxfp4Config gives MXFP4 to the fused-MoE experts only (openai/gpt-oss-20b)."""
    cfg = {"_name_or_path": "openai/gpt-oss-20b", "model_type": "gpt_oss", "attention_bias": True,
           "experts_per_token": 4, "head_dim": 64, "hidden_size": 2880, "intermediate_size": 2880,
           "layer_types": ["sliding_attention", "full_attention"] * 12, "max_position_embeddings": 131072,
           "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8,
           "num_local_experts": 32, "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                                                     "original_max_position_embeddings": 4096, "rope_type": "yarn",
                                                     "truncate": False},
           "sliding_window": 128, "tie_word_embeddings": False, "vocab_size": 201088,
           "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                              "model.embed_tokens", "lm_head"],
                                   "quant_method": "mxfp4"}}
    m = _read(tmp_path, cfg)
    assert m.max_context_tokens == 4096 * 32
    experts = m.routed_expert_params
    assert m.checkpoint_precision == "MXFP4"
    assert m.checkpoint_weight_bytes == pytest.approx(
        (experts * (0.5 + 1 / 32) + (m.total_params - experts) * 2) / m.total_params)
    # the gpt-oss model card (arXiv:2508.10925, Table 1) gives the gpt-oss-20b checkpoint as 12.8 GiB
    assert m.checkpoint_weight_bytes * m.total_params == pytest.approx(12.8 * 2**30, rel=0.005)


@pytest.mark.parametrize("qc,key", [
    ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "quantization_config.quant_method"),
    ({**AWQ, "bits": 3}, "quantization_config.bits"),
    ({**GPTQ, "bits": 2}, "quantization_config.bits"),
    ({**GPTQ, "group_size": 0}, "quantization_config.group_size"),
    ({**AWQ, "modules_to_not_convert": ["mystery_block"]}, "quantization_config.modules_to_not_convert"),
    ({**CT_FP8, "config_groups": {"group_0": {**CT_FP8["config_groups"]["group_0"], "input_activations": {
        "num_bits": 8, "type": "int", "dynamic": True}, "weights": {"num_bits": 8, "type": "int",
                                                                     "strategy": "channel"}}}},
     "quantization_config.config_groups.group_0"),                    # INT8 W8A8: no fastsim precision
    ({**FP8_BLOCK, "weight_block_size": [128]}, "quantization_config.weight_block_size"),
    ({**FP8_BLOCK, "activation_scheme": "per-token"}, "quantization_config.activation_scheme"),
])
def test_quantization_refusals_name_the_key(tmp_path, qc, key):
    with pytest.raises(FastsimInputError) as exc:
        _read(tmp_path, {**LLAMA_8B, "quantization_config": qc})
    assert f"config.json key {key}:" in str(exc.value)


# ---- the plan offers only the checkpoint's precision --------------------------------------------

def test_w4a16_precision_entry():
    p = CAT.precision("W4A16")
    assert (p.weight_bytes, p.kv_bytes, p.flops_key, p.default_grid) == (0.5 + 2.5 / 128, 2, "bf16", False)
    assert CAT.precision("W8A16").weight_bytes == 1 + 3 / 128
    assert CAT.default_precisions() == ["BF16", "FP8"]


def test_screen_offers_only_the_checkpoint_precision(tmp_path):
    from fastsim.analytic import Demand, ScreenOptions, instance_table
    from fastsim.stepmodel import P_KV_BUDGET_TOKENS, P_PEAK, P_WBYTES, step_params
    m = _read(tmp_path, {**LLAMA_8B, "quantization_config": AWQ})
    s = CAT.scenario("chat")
    t = instance_table(m, Demand.from_scenario(s))
    assert set(t.precision) == {"W4A16"} and set(t.gpu) == set(CAT.default_gpus())
    h100 = CAT.gpu("H100")
    p = step_params(m, h100, CAT.precision("W4A16"), 1)
    assert p[P_WBYTES] == m.checkpoint_weight_bytes and p[P_PEAK] == h100.peak_flops_per_s["bf16"]
    # KV budget: 0.9 x 80 GB - 5,727,854,592 bytes of weights, over 32 x 2 x 8 x 128 x 2 bytes per token
    assert p[P_KV_BUDGET_TOKENS] == pytest.approx((0.9 * h100.hbm_bytes - 5_727_854_592) / 131_072, rel=1e-9)
    for named in (("BF16",), ("W4A16", "FP8")):
        with pytest.raises(FastsimInputError, match="W4A16 only: .*AWQ checkpoint"):
            instance_table(m, Demand.from_scenario(s), options=ScreenOptions(precisions=named))
    assert set(instance_table(m, Demand.from_scenario(s), options=ScreenOptions(precisions=("W4A16",))).precision) \
        == {"W4A16"}
    with pytest.raises(FastsimInputError, match="precision"):
        step_params(m, h100, CAT.precision("FP8"), 1)


def test_fp8_checkpoint_is_planned_at_fp8(tmp_path):
    """vLLM serves an FP8 checkpoint's weights in FP8 (Fp8LinearMethod); it has no BF16 path for them."""
    from fastsim.analytic import Demand, instance_table
    m = _read(tmp_path, {**LLAMA_8B, "quantization_config": FP8_BLOCK})
    assert set(instance_table(m, Demand.from_scenario(CAT.scenario("chat"))).precision) == {"FP8"}


def test_plan_command_says_so_in_a_note(tmp_path, capsys):
    from fastsim.cli import main
    path = _path(tmp_path, {**LLAMA_8B, "_name_or_path": "org/Llama-8B-AWQ", "quantization_config": AWQ})
    assert main(["plan", "--scenario", "chat", "--model", path, "--no-verify", "--top-k", "3"]) == 0
    out = capsys.readouterr().out
    assert "W4A16" in out and "BF16   " not in out
    assert "note: Llama-8B-AWQ: an AWQ checkpoint, served at W4A16 only" in out
    rc = main(["plan", "--scenario", "chat", "--model", path, "--no-verify", "--precision", "FP8"])
    err = capsys.readouterr().err
    assert rc == 2 and "W4A16 only" in err and len(err.strip().splitlines()) == 1


def test_unquantised_checkpoint_keeps_every_precision(tmp_path):
    from fastsim.analytic import Demand, instance_table
    m = _read(tmp_path, LLAMA_8B)
    assert (m.checkpoint_precision, m.checkpoint_weight_bytes, m.checkpoint_note) == ("", 0.0, "")
    assert set(instance_table(m, Demand.from_scenario(CAT.scenario("chat"))).precision) == {"BF16", "FP8"}
    b = CAT.model("llama-3.1-8b")
    assert dataclasses.replace(m, name=b.name, source=b.source) == b
    # the checkpoint fields describe the weights file, not the architecture: not compared
    q = _read(tmp_path, {**LLAMA_8B, "quantization_config": AWQ}, folder="awq")
    assert dataclasses.replace(q, name=m.name, source=m.source) == m
    assert q.served_precision(CAT.precision("W4A16")).weight_bytes == q.checkpoint_weight_bytes
    assert m.served_precision(CAT.precision("BF16")) is CAT.precision("BF16")


# ---- errors name the file and its key -----------------------------------------------------------

@pytest.mark.parametrize("over,key,value", [
    ({"num_key_value_heads": 0}, "num_key_value_heads", "0"),
    ({"num_key_value_heads": 3}, "num_key_value_heads", "3"),      # does not divide the 32 heads
    ({"num_hidden_layers": -2}, "num_hidden_layers", "-2"),
    ({"head_dim": 0}, "head_dim", "0"),
    ({"max_position_embeddings": 0}, "max_position_embeddings", "0"),
    ({"num_local_experts": 8, "num_experts_per_tok": 9}, "num_experts_per_tok", "9"),
])
def test_errors_name_file_and_key(tmp_path, over, key, value):
    path = _path(tmp_path, {**LLAMA_8B, **over}, folder="bad")
    with pytest.raises(FastsimInputError) as exc:
        model_from_hf_config(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path} key {key}: got {value}; allowed: ")
    assert "model.bad" not in msg and "\n" not in msg


def test_fbgemm_fp8_405b_checkpoint_hand_figure():
    """meta-llama/Llama-3.1-405B-FP8 (the shipped config the VD-l405-H100 rows run): only the MLPs of
    layers 1-124 are FP8 (llama-models' convert_to_fp8_quantized_model), at 1 + 4 / 16384 bytes a weight;
    the other 81,314,922,496 parameters are BF16: 124 x 3 x 16384 x 53248 = 324,538,466,304 FP8 weights,
    324,617,699,328 + 162,629,844,992 = 487,247,544,320 bytes."""
    from fastsim.validate import SHIPPED_MEASUREMENTS
    m = model_from_hf_config(str(SHIPPED_MEASUREMENTS.parent / "configs" / "llama-3.1-405b-fp8" / "config.json"))
    assert m.total_params == 405_853_388_800
    assert m.checkpoint_precision == "FP8"
    fp8 = 124 * 3 * 16384 * 53248
    assert m.checkpoint_weight_bytes * m.total_params == pytest.approx(
        fp8 * (1 + 4 / 16384) + (m.total_params - fp8) * 2, rel=1e-12)
    assert m.checkpoint_weight_bytes * m.total_params == pytest.approx(487_247_544_320, abs=2.0)
    assert set(m.checkpoint_bf16_modules) == {"embedding", "lm_head", "attention", "mlp"}
    assert "487.2 GB" in m.checkpoint_note and "FBGEMM" in m.checkpoint_note
