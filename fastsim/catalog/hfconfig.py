"""Reading a Hugging Face ``config.json`` into a :class:`~fastsim.catalog.Model` (SPEC §2, §10).

Every key that changes fastsim's arithmetic (parameters, FLOPs, KV bytes, weight bytes, served
context) is either modelled as the engines do it or refused with a one-line
:class:`~fastsim.errors.FastsimInputError` that names the file and the key: nothing that
describes experts, latent attention, windows, chunked/linear attention or state-space layers is
ever read as a dense, full-attention model. The key spellings are those of the
``transformers`` configuration classes (``configuration_<model_type>.py``).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re

from ..errors import FastsimInputError
from .models import Model

__all__ = ["model_from_hf_config"]

# Sub-configs that hold the language model of a multimodal checkpoint.
_TEXT_KEYS = ("text_config", "language_config", "llm_config")

# transformers' default for a key the config leaves out, where the default is not "none": a
# config of that model_type without the key would be misread, so it must be given explicitly.
_TYPE_DEFAULTS = {
    "deepseek_v2": ("n_routed_experts", "kv_lora_rank"),
    "deepseek_v3": ("n_routed_experts", "kv_lora_rank"),
    "kimi_k2": ("n_routed_experts", "kv_lora_rank"),
    "mixtral": ("num_local_experts",),
    "qwen2_moe": ("num_experts", "shared_expert_intermediate_size"),
    "qwen3_moe": ("num_experts",),
    "gpt_oss": ("num_local_experts",),
    "llama4": ("num_local_experts", "attention_chunk_size"),
    "llama4_text": ("num_local_experts", "attention_chunk_size"),
}

# Windows: every Nth layer full, the others sliding, by transformers' default for the type
# (used when the config has no layer_types).
_DEFAULT_PATTERN = {"gemma2": 2, "gpt_oss": 2, "gemma3": 6, "gemma3_text": 6, "cohere2": 4}

# Model types whose configuration class ties the LM head to the input embedding by default.
_TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3", "gemma3_text", "cohere", "cohere2"}

# Model types whose MLP is not gated (two matrices, not three) and whose other differences
# (biases, parallel blocks, key spellings) are not modelled: refused.
_UNGATED_MLP = {"gpt2", "gpt_bigcode", "gpt_neo", "gpt_neox", "gptj", "codegen", "opt", "bloom", "falcon",
                "mpt", "phi", "starcoder2", "bert", "roberta", "t5", "bart"}

# Model types whose MLP is not gated and is modelled as such (Model.gated_mlp false: up and down
# projections, 2 x hidden x intermediate_size per layer). Nemotron-4 / Minitron: transformers'
# NemotronMLP (models/nemotron/modeling_nemotron.py) has up_proj and down_proj only, with
# hidden_act "relu2" (squared ReLU) between them; the config.json of nvidia/Minitron-8B-Base
# (architectures NemotronForCausalLM, hidden_act relu2) and the Nemotron-4 15B report
# (arXiv:2402.16819 §2: "squared ReLU activations in the MLP layers ... no gating"). Minitron-8B:
# 8.27e9 parameters (3 matrices would give 10.42e9).
_UNGATED_MODELLED = {"nemotron"}

# Activations used only by two-matrix MLPs: a config of another model type with one of them is
# refused, naming hidden_act, rather than counted as a gated MLP.
_UNGATED_ACTS = {"relu2", "relu_squared", "squared_relu"}

# Model types that are not decoder-only attention transformers (recurrent, state-space,
# encoder-decoder), refused whatever their keys.
_REFUSED_TYPES = {
    "rwkv": "RWKV recurrent layers, not attention",
    "mamba": "state-space layers", "mamba2": "state-space layers", "falcon_mamba": "state-space layers",
    "recurrent_gemma": "recurrent / attention hybrids", "xlstm": "recurrent layers",
    "whisper": "an encoder-decoder model", "mt5": "an encoder-decoder model", "mbart": "an encoder-decoder model",
    "pegasus": "an encoder-decoder model", "marian": "an encoder-decoder model",
}

# Keys that, when true, describe an encoder-decoder or cross-attending model (checked in the
# text config and at the top level of the file).
_ENCODER_DECODER_KEYS = {
    "is_encoder_decoder": "an encoder-decoder model (an encoder stack and cross-attention)",
    "add_cross_attention": "cross-attention layers",
}

# Keys that describe layers fastsim does not model (state-space, linear or sparse attention,
# hybrid stacks, KV shared across layers, cross-attention, per-layer embeddings).
_REFUSED_KEYS = {
    "layers_block_type": "state-space / hybrid layer stacks",
    "layer_block_types": "state-space / hybrid layer stacks",
    "block_types": "recurrent / hybrid layer stacks",
    "hybrid_override_pattern": "state-space / hybrid layer stacks",
    "hybrid_layer_pattern": "hybrid layer stacks",
    "attn_type_list": "linear / softmax attention hybrids",
    "full_attn_layers": "linear / softmax attention hybrids",
    "full_attention_interval": "linear / softmax attention hybrids",
    "attn_layer_period": "state-space / attention hybrids",
    "attn_layer_offset": "state-space / attention hybrids",
    "expert_layer_period": "state-space / attention hybrids",
    "ssm_cfg": "state-space layers",
    "state_size": "state-space layers",
    "time_step_rank": "state-space layers",
    "conv_L_cache": "convolution / attention hybrids",
    "sparse_attention_config": "sparse attention",
    "index_topk": "sparse attention (a top-k token indexer)",
    "index_n_heads": "sparse attention (a top-k token indexer)",
    "attention_chunk_size": "chunked attention",
    "num_kv_shared_layers": "KV caches shared across layers",
    "kv_sharing_layer_map": "KV caches shared across layers",
    "hidden_size_per_layer_input": "per-layer input embeddings",
    "altup_num_inputs": "alternating-updates layers",
    "cross_attention_layers": "cross-attention layers",
    "encoder_layers": "an encoder stack (encoder-decoder model)",
    "num_encoder_layers": "an encoder stack (encoder-decoder model)",
    "decoder_layers": "an encoder-decoder model's decoder stack (num_hidden_layers is the decoder's)",
    "num_decoder_layers": "an encoder-decoder model's decoder stack (num_hidden_layers is the decoder's)",
    "cross_attention_hidden_size": "cross-attention layers",
    "num_global_key_value_heads": "KV heads that differ between layer types",
    "global_head_dim": "head dimensions that differ between layer types",
    "attention_window": "local attention windows",
    "window_size": "local attention windows",
}
_REFUSED_PREFIXES = ("mamba", "ssm", "linear_attn", "linear_key", "linear_value", "linear_num", "linear_conv")

# Keys read below, and keys that name experts, windows or chunks yet change nothing fastsim counts.
_READ = {
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "intermediate_size", "intermediate_size_mlp", "vocab_size", "tie_word_embeddings", "max_position_embeddings",
    "attention_bias", "qkv_bias", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
    "v_head_dim", "qk_head_dim", "sliding_window", "use_sliding_window", "max_window_layers", "layer_types",
    "sliding_window_pattern", "num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok",
    "experts_per_token", "moe_topk", "moe_intermediate_size", "n_shared_experts", "num_shared_experts",
    "shared_expert_intermediate_size", "first_k_dense_replace", "moe_layer_freq", "decoder_sparse_step",
    "mlp_only_layers", "moe_layers", "interleave_moe_layer_step", "mlp_layer_types", "num_nextn_predict_layers",
    "model_type", "_name_or_path", "mlp_bias", "hidden_act", "is_encoder_decoder", "add_cross_attention",
    "sliding_window_size", "rope_scaling", "rope_parameters", "quantization_config", "compression_config",
    "n_positions", "max_seq_len", "seq_length", "model_max_length", "max_sequence_length", "max_seq_length", "seq_len",
}
_HARMLESS = {"norm_topk_prob", "router_aux_loss_coef", "output_router_logits", "routed_scaling_factor",
             "moe_router_enable_expert_bias", "moe_router_use_sigmoid", "moe_aux_loss_coeff", "moe_z_loss_coeff",
             "chunk_size_feed_forward", "cache_implementation"}


# Model fields and the config.json keys they are read from (for the record's own checks).
_CONFIG_KEYS = {"layers": "num_hidden_layers", "hidden": "hidden_size", "heads": "num_attention_heads",
                "kv_heads": "num_key_value_heads", "ffn": "intermediate_size", "vocab": "vocab_size",
                "max_context_tokens": "max_position_embeddings", "sliding_layers": "sliding_window / layer_types",
                "experts_per_token": "num_experts_per_tok", "moe_ffn": "moe_intermediate_size",
                "moe_layers": "the dense-layer keys (first_k_dense_replace, mlp_only_layers, moe_layers...)",
                "n_experts": "the expert count (num_local_experts, num_experts, n_routed_experts)"}


def _refuse(where: str, key: str, value, allowed: str):
    raise FastsimInputError(f"{where} key {key}", value, allowed)


def _given(cfg: dict, key: str) -> bool:
    """True when the config gives ``key`` a value other than null/false/0/empty."""
    v = cfg.get(key)
    return v is not None and v is not False and v != 0 and v != [] and v != {} and v != ""


def _int(cfg: dict, key: str, where: str, default=None, *, zero: bool = False):
    """A positive (>= 0 with zero) integer read from ``cfg[key]``; ``default`` when absent or null."""
    v = cfg.get(key)
    if v is None:
        if default is None:
            _refuse(where, key, None, "a positive integer (required)")
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < 0 or (v == 0 and not zero):
        _refuse(where, key, v, "an integer >= 0" if zero else "a positive integer")
    return v


def _one_value(cfg: dict, key: str, where: str):
    """A per-layer list whose entries are all equal (Hunyuan's ``moe_topk``) reads as that entry."""
    v = cfg.get(key)
    if isinstance(v, list):
        if not v or any(x != v[0] for x in v):
            _refuse(where, key, v, "one value for every layer (per-layer values are not modelled)")
        return {key: v[0]}
    return cfg


def _first(cfg: dict, keys: tuple, where: str):
    """The key among ``keys`` the config gives (not null), or None; two given with different values is refused."""
    given = [k for k in keys if cfg.get(k) is not None]
    if len({json.dumps(cfg[k]) for k in given}) > 1:
        _refuse(where, " and ".join(given), [cfg[k] for k in given], "one value (they name the same figure)")
    return given[0] if given else None


def _bool(cfg: dict, key: str, where: str, default: bool) -> bool:
    v = cfg.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        _refuse(where, key, v, "true or false")
    return v


def _layer_list(cfg: dict, key: str, layers: int, where: str) -> set:
    v = cfg.get(key) or []
    if not isinstance(v, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < layers for i in v):
        _refuse(where, key, v, f"a list of layer indices 0 to {layers - 1}")
    return set(v)


def _check_refused(cfg: dict, where: str, top: dict | None = None) -> None:
    mt = cfg.get("model_type")
    for c in (cfg, top or {}):
        for key, what in _ENCODER_DECODER_KEYS.items():
            if key in c and c[key] is not False and c[key] is not None:
                _refuse(where, key, c[key], f"absent or false ({what}: not modelled; fastsim models decoder-only "
                                            "transformers)")
    for c in (cfg, top or {}):
        if c.get("model_type") in _REFUSED_TYPES:
            _refuse(where, "model_type", c["model_type"],
                    f"a decoder-only attention transformer ({_REFUSED_TYPES[c['model_type']]}: not modelled)")
    if mt in _UNGATED_MLP:
        _refuse(where, "model_type", mt, "a decoder with a gated MLP (gate, up and down projections), or "
                                         + ", ".join(sorted(_UNGATED_MODELLED))
                                         + "; this family's two-matrix MLP and other layers are not modelled")
    act = cfg.get("hidden_act")
    if act is not None and not isinstance(act, str):
        _refuse(where, "hidden_act", act, "an activation name (a string)")
    if isinstance(act, str) and act.lower() in _UNGATED_ACTS and mt not in _UNGATED_MODELLED:
        _refuse(where, "hidden_act", act, "an activation of a gated MLP (silu, gelu...), or model_type "
                                          + " or ".join(repr(t) for t in sorted(_UNGATED_MODELLED))
                                          + f" ({act} is the activation of two-matrix MLPs; model_type {mt!r} "
                                            "is not known to have one)")
    for key in sorted(cfg):
        if not _given(cfg, key) or key in _READ or key in _HARMLESS:
            continue
        if key in _REFUSED_KEYS:
            _refuse(where, key, cfg[key], f"absent or null ({_REFUSED_KEYS[key]}: not modelled)")
        low = key.lower()
        if low.startswith(_REFUSED_PREFIXES):
            _refuse(where, key, cfg[key], "absent or null (state-space and linear-attention layers: not modelled)")
        if "expert" in low or low.startswith("moe") or "window" in low or "chunk" in low:
            _refuse(where, key, cfg[key], "absent, or a spelling fastsim reads (see model_from_hf_config): "
                                          "experts and attention windows are never read as dense, full attention")
    for key in _TYPE_DEFAULTS.get(mt, ()):
        if key not in cfg:
            _refuse(where, key, None, f"given explicitly, null if the model has none (transformers' {mt} default "
                                      "for a missing value is not 'none')")


def _windows(cfg: dict, layers: int, where: str) -> tuple:
    """(sliding_window, sliding_layers) of the config."""
    mt = str(cfg.get("model_type") or "")
    types = cfg.get("layer_types")
    n_layer_types = None
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            _refuse(where, "layer_types", types, f"a list of {layers} entries (one per layer)")
        bad = sorted({t for t in types if t not in ("full_attention", "sliding_attention")}, key=str)
        if bad:
            _refuse(where, "layer_types", bad[0], "'full_attention' or 'sliding_attention' for every layer "
                                                  "(chunked, linear, convolution and state-space layers are not modelled)")
        n_layer_types = types.count("sliding_attention")
    use = cfg.get("use_sliding_window")
    if use is not None and not isinstance(use, bool):
        _refuse(where, "use_sliding_window", use, "true or false")
    if use is None and mt.startswith("qwen"):
        use = False                                    # Qwen2/Qwen3 configs: no window unless enabled
    if cfg.get("sliding_window_size") is not None:
        # Gemma-2's config.json gives the window twice, sliding_window and sliding_window_size,
        # equal (google/gemma-2-9b); transformers' Gemma2Config reads sliding_window.
        if cfg.get("sliding_window") is None:
            _refuse(where, "sliding_window_size", cfg["sliding_window_size"],
                    "absent, or equal to sliding_window beside it (Gemma-2's second spelling of the window; "
                    "alone it is no transformers key)")
        _first(cfg, ("sliding_window", "sliding_window_size"), where)
    window = cfg.get("sliding_window")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 0):
        _refuse(where, "sliding_window", window, "an integer >= 0 (tokens), or null")
    if use is False or not window:
        return 0, 0                                    # Qwen2: use_sliding_window false means no window
    if n_layer_types is not None:
        return (window, n_layer_types) if n_layer_types else (0, 0)
    pattern = cfg.get("sliding_window_pattern", _DEFAULT_PATTERN.get(mt))
    if pattern is not None:
        if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
            _refuse(where, "sliding_window_pattern", pattern, "an integer >= 1 (every Nth layer is full attention)")
        n = layers - layers // pattern                 # layer i slides unless (i + 1) % N == 0 (Gemma)
        return (window, n) if n else (0, 0)
    if use:
        if mt == "qwen2_moe":
            # transformers' Qwen2MoeConfig: layer i slides when i is even and i < max_window_layers.
            mwl = min(_int(cfg, "max_window_layers", where, zero=True), layers)
            n = (mwl + 1) // 2
        else:
            # Qwen2/Qwen3 config docs: the first max_window_layers layers use full attention, the rest slide.
            n = layers - min(_int(cfg, "max_window_layers", where, zero=True), layers)
        return (window, n) if n else (0, 0)
    return window, layers                              # Mistral: every layer slides


def _moe(cfg: dict, layers: int, hidden_ffn, where: str) -> dict:
    """MoE fields of :class:`Model` (empty for a dense model)."""
    mt = str(cfg.get("model_type") or "")
    key = _first(cfg, ("num_local_experts", "num_experts", "n_routed_experts"), where)
    n_experts = _int(cfg, key, where, zero=True) if key else 0
    if not n_experts:
        return {}
    topk_key = _first(cfg, ("num_experts_per_tok", "experts_per_token", "moe_topk"), where)
    if topk_key is None:
        _refuse(where, "num_experts_per_tok", None, f"the routed experts per token (the config has {key} = {n_experts})")
    topk = _int(_one_value(cfg, topk_key, where), topk_key, where)
    if cfg.get("moe_intermediate_size") is not None:
        moe_ffn = _int(_one_value(cfg, "moe_intermediate_size", where), "moe_intermediate_size", where)
    else:                                              # Mixtral, gpt-oss, Llama-4: experts are intermediate_size wide
        if hidden_ffn is None:
            _refuse(where, "moe_intermediate_size", None, "the routed experts' width (or intermediate_size)")
        moe_ffn = hidden_ffn
    shared = 0
    sk = _first(cfg, ("n_shared_experts", "num_shared_experts"), where)
    if sk:
        shared += _int(cfg, sk, where, zero=True) * moe_ffn
    if cfg.get("shared_expert_intermediate_size") is not None:
        shared += _int(cfg, "shared_expert_intermediate_size", where, zero=True)
    if mt.startswith("llama4"):
        shared += moe_ffn                              # Llama-4: one shared expert as wide as a routed one
    is_moe = [True] * layers
    if "first_k_dense_replace" in cfg or "moe_layer_freq" in cfg:      # DeepSeek
        k = _int(cfg, "first_k_dense_replace", where, 0, zero=True)
        freq = _int(cfg, "moe_layer_freq", where, 1)
        is_moe = [m and i >= k and i % freq == 0 for i, m in enumerate(is_moe)]
    if "decoder_sparse_step" in cfg or "mlp_only_layers" in cfg:      # Qwen-MoE
        step = _int(cfg, "decoder_sparse_step", where, 1)
        dense = _layer_list(cfg, "mlp_only_layers", layers, where)
        is_moe = [m and i not in dense and (i + 1) % step == 0 for i, m in enumerate(is_moe)]
    if cfg.get("moe_layers") is not None:                             # Llama-4, explicit
        listed = _layer_list(cfg, "moe_layers", layers, where)
        is_moe = [m and i in listed for i, m in enumerate(is_moe)]
    elif "interleave_moe_layer_step" in cfg:                          # Llama-4
        step = _int(cfg, "interleave_moe_layer_step", where, 1)
        is_moe = [m and i % step == step - 1 for i, m in enumerate(is_moe)]
    if cfg.get("mlp_layer_types") is not None:                        # "dense" / "sparse" per layer
        t = cfg["mlp_layer_types"]
        if not isinstance(t, list) or len(t) != layers or set(t) - {"dense", "sparse"}:
            _refuse(where, "mlp_layer_types", t, f"a list of {layers} entries 'dense' or 'sparse'")
        is_moe = [m and x == "sparse" for m, x in zip(is_moe, t)]
    moe_layers = sum(is_moe)
    if moe_layers == 0:
        _refuse(where, key, n_experts, "experts on at least one layer (the dense-layer keys leave none)")
    return dict(n_experts=n_experts, experts_per_token=topk, moe_ffn=moe_ffn, shared_ffn=shared,
                moe_layers=moe_layers, expert_bias=mt == "gpt_oss")


def _mla(cfg: dict, hidden: int, heads: int, where: str) -> dict:
    """MLA fields of :class:`Model` (empty for GQA/MHA)."""
    if cfg.get("kv_lora_rank") is None:
        for k in ("q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim"):
            if _given(cfg, k):
                _refuse(where, "kv_lora_rank", None, f"the latent KV rank (the config has {k}, a latent-attention key)")
        return {}
    out = dict(attention="mla", kv_lora_rank=_int(cfg, "kv_lora_rank", where),
               qk_rope_head_dim=_int(cfg, "qk_rope_head_dim", where),
               qk_nope_head_dim=_int(cfg, "qk_nope_head_dim", where),
               q_lora_rank=_int(cfg, "q_lora_rank", where, 0, zero=True))
    if cfg.get("v_head_dim") is None and cfg.get("model_type") == "minicpm3":
        if hidden % heads:
            _refuse(where, "v_head_dim", None, "given, or hidden_size divisible by num_attention_heads (MiniCPM3)")
        out["v_head_dim"] = hidden // heads            # MiniCPM3's modelling code: hidden_size / heads
    else:
        out["v_head_dim"] = _int(cfg, "v_head_dim", where)
    return out


# ---- served context: vLLM's derived max_model_len -------------------------------------------------

# vLLM's _get_and_verify_max_len (vllm/config.py, v0.6-v0.10; vllm/config/model.py from v0.11):
# the smallest of these keys the config gives is the derived length.
_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
             "max_sequence_length", "max_seq_length", "seq_len")

# RoPE types vLLM builds (vllm/model_executor/layers/rotary_embedding get_rope; "su" and "mrope"
# as vllm/transformers_utils/config.py patch_rope_scaling_dict renames them) and how each
# changes the derived length in _get_and_verify_max_len.
_ROPE_UNSCALED = ("su", "longrope", "llama3")        # max_position_embeddings is already the long context
_ROPE_SCALED = ("default", "linear", "dynamic", "yarn", "deepseek_yarn", "mrope")   # derived x factor


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _rope_entries(cfg: dict, where: str) -> tuple:
    """(key, list of rope dicts) of ``rope_scaling`` / ``rope_parameters`` (nested per layer type or flat)."""
    key = _first(cfg, ("rope_scaling", "rope_parameters"), where)
    if key is None:
        return None, []
    rs = cfg[key]
    if not isinstance(rs, dict):
        _refuse(where, key, rs, "a table of RoPE settings (rope_type, factor...), or null")
    if rs and all(isinstance(v, dict) for v in rs.values()):
        return key, list(rs.values())                 # transformers v5: one table per layer type
    return key, [rs]


def _served_context(cfg: dict, where: str) -> int:
    """The context vLLM serves for ``cfg`` (tokens), as ``_get_and_verify_max_len`` derives it."""
    lens = [(k, _int(cfg, k, where)) for k in _LEN_KEYS if cfg.get(k) is not None]
    derived = min(v for _, v in lens) if lens else 131072
    key, entries = _rope_entries(cfg, where)
    factor = 1.0
    for rp in entries:
        t, legacy = rp.get("rope_type"), rp.get("type")
        if t is not None and legacy is not None and t != legacy:
            # patch_rope_scaling_dict: "Found conflicts between 'rope_type' and 'type'"
            _refuse(where, f"{key}.rope_type and {key}.type", [t, legacy], "one RoPE type (they name the same thing)")
        t = t if t is not None else legacy
        if t is None and not any(k in rp for k in ("factor", "original_max_position_embeddings")):
            continue                                  # RoPE theta only (transformers v5 rope_parameters)
        if t not in _ROPE_UNSCALED + _ROPE_SCALED:
            _refuse(where, f"{key}.rope_type", t, "a RoPE type vLLM builds: " + ", ".join(_ROPE_UNSCALED + _ROPE_SCALED))
        if t in _ROPE_UNSCALED:
            continue
        f = rp.get("factor", 1.0)
        if not _number(f) or f <= 0:
            _refuse(where, f"{key}.factor", f, "a number > 0 (the RoPE scaling factor)")
        factor = float(f)
        if t == "yarn":
            omp = rp.get("original_max_position_embeddings")
            if isinstance(omp, bool) or not isinstance(omp, int) or omp <= 0:
                _refuse(where, f"{key}.original_max_position_embeddings", omp,
                        "a positive integer (vLLM derives a YaRN model's context as original_max_position_embeddings "
                        "x factor, and does not start without it)")
            derived = omp
    if "gemma3" in str(cfg.get("model_type") or ""):
        factor = 1.0                                  # vLLM: Gemma-3's max_position_embeddings is already scaled
    return int(derived * factor)


# ---- quantised checkpoints: bytes per weight and the precision they are served at -----------------

# Module names a quantization_config may leave unquantised, by the part of the model they name.
_MODULE_PARTS = (
    ("visual", None), ("vision", None), ("audio", None), ("multi_modal_projector", None), ("mm_projector", None),
    ("lm_head", "lm_head"), ("embed", "embedding"), ("wte", "embedding"), ("router", "router"),
    ("shared_expert", "shared experts"), ("experts", "experts"), ("self_attn", "attention"), ("attn", "attention"),
    ("q_proj", "attention"), ("k_proj", "attention"), ("v_proj", "attention"), ("o_proj", "attention"),
    ("q_a_proj", "attention"), ("q_b_proj", "attention"), ("kv_a_proj", "attention"), ("kv_b_proj", "attention"),
    ("gate_proj", "mlp"), ("up_proj", "mlp"), ("down_proj", "mlp"), ("mlp.gate", "router"), ("mlp", "mlp"))


def _parts(m: Model) -> dict:
    """Parameters of each part of ``m`` (float, count); the parts add up to ``m.total_params``."""
    mm = m.mlp_matrices
    parts = {
        "embedding": float(m.vocab * m.hidden),
        "lm_head": 0.0 if m.tied_embeddings else float(m.vocab * m.hidden),
        "attention": m.layers * m.attn_params,
        "mlp": float((m.layers - m.moe_layers) * mm * m.hidden * m.ffn),
        "experts": m.routed_expert_params,
        "shared experts": float(m.moe_layers * mm * m.hidden * m.shared_ffn),
        "router": float(m.moe_layers * (m.hidden * m.n_experts + (m.n_experts if m.expert_bias else 0))),
    }
    parts["norms"] = m.total_params - sum(parts.values())
    return parts


def _unconverted(qc: dict, key: str, m: Model, where: str) -> dict:
    """Fraction of each part a ``modules_to_not_convert`` / ``ignore`` list keeps in BF16."""
    names = qc.get(key) or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        _refuse(where, f"quantization_config.{key}", names, "a list of module names")
    out = {}
    for n in names:
        low = n.lower()
        part = next((p for s, p in _MODULE_PARTS if s in low), "?")
        if part == "?":
            _refuse(where, f"quantization_config.{key}", n, "names of the lm_head, embeddings, attention, MLP, router, "
                                                            "experts or vision modules (other modules are not modelled)")
        if part is None:
            continue                                  # the vision / audio tower: not counted
        share = 1.0                                   # the part in every layer
        if re.search(r"layers\.\d+\.", low):         # one layer's share of it
            share /= max({"attention": m.layers, "mlp": m.layers - m.moe_layers}.get(part, m.moe_layers), 1)
        if part == "experts" and re.search(r"experts\.\d+\.", low):
            share /= m.n_experts                      # one expert's
        share *= _projection_share(low, part, m)
        out[part] = min(1.0, out.get(part, 0.0) + share)
    return out


def _projection_share(low: str, part: str, m: Model) -> float:
    """Share of a part's weights one named projection holds (1 when the name is the whole block)."""
    if part in ("mlp", "experts", "shared experts") and re.search(r"(gate_proj|up_proj|down_proj|\bw[123])$", low):
        return 1.0 / m.mlp_matrices
    if part == "attention" and m.attention == "gqa":
        qd, kvd = m.heads * m.head_dim, m.kv_heads * m.head_dim
        for name, width in (("q_proj", qd), ("k_proj", kvd), ("v_proj", kvd), ("o_proj", qd)):
            if low.endswith(name):
                return width / (2.0 * (qd + kvd))
    return 1.0


def _bits(v, where: str, key: str, allowed: tuple) -> int:
    if v not in allowed or isinstance(v, bool):
        _refuse(where, f"quantization_config.{key}", v, " or ".join(map(str, allowed))
                + " (the weight widths fastsim has a precision for: W4A16, W8A16)")
    return int(v)


def _group(v, where: str, key: str, m: Model) -> int:
    """A group size; -1 or null: one group per output channel (taken as ``hidden`` input elements)."""
    if v is None or v == -1:
        return m.hidden
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        _refuse(where, f"quantization_config.{key}", v, "a positive integer, or -1 (one group per channel)")
    return v


def _ct_scheme(qc: dict, m: Model, where: str) -> tuple:
    """(precision, bytes per quantised weight, formula) of a compressed-tensors ``config_groups``."""
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        _refuse(where, "quantization_config.config_groups", groups, "a table of quantisation groups")
    seen = set()
    for gname, grp in groups.items():
        k = f"config_groups.{gname}"
        w = grp.get("weights") if isinstance(grp, dict) else None
        if not isinstance(w, dict):
            _refuse(where, f"quantization_config.{k}.weights", w, "a table (num_bits, type, strategy, group_size...)")
        act = grp.get("input_activations")
        bits, typ, strat = w.get("num_bits"), w.get("type", "int"), w.get("strategy", "tensor")
        a_bits = act.get("num_bits") if isinstance(act, dict) else None
        if typ == "int" and act is None and bits in (4, 8):
            g = _group(w.get("group_size"), where, f"{k}.weights.group_size", m) if strat == "group" else (
                m.hidden if strat == "channel" else 0)
            sym = w.get("symmetric", True) is not False
            per = bits / 8 + ((2 + (0 if sym else bits / 8)) / g if g else 0.0)
            seen.add((f"W{bits}A16", per, f"{bits}/8 + (2-byte scale{'' if sym else f' + {bits}-bit zero point'}) "
                                           f"/ {g}-element group"))
        elif typ == "float" and bits == 8 and isinstance(act, dict) and act.get("type") == "float" and a_bits == 8:
            if strat == "block":
                b = w.get("block_structure") or [128, 128]
                per, how = 1 + 4 / (b[0] * b[1]), f"1 + 4-byte scale / {b[0]}x{b[1]} block"
            elif strat == "channel":
                per, how = 1 + 4 / m.hidden, "1 + 4-byte scale per channel"
            else:
                per, how = 1.0, "1 (one scale per tensor)"
            seen.add(("FP8", per, how))
        elif (typ == "float" and bits == 4 and w.get("group_size") == 16 and isinstance(act, dict)
              and act.get("type") == "float" and a_bits == 4):
            seen.add(("NVFP4", 0.5 + 1 / 16, "0.5 + 1-byte FP8 scale / 16-element block"))
        else:
            _refuse(where, f"quantization_config.{k}", {"weights": {"num_bits": bits, "type": typ, "strategy": strat},
                                                       "input_activations": act},
                    "4- or 8-bit integer weights with 16-bit activations (W4A16, W8A16), FP8 weights and activations "
                    "(FP8) or NVFP4 (other schemes, e.g. INT8 activations, have no fastsim precision)")
    if len(seen) > 1:
        _refuse(where, "quantization_config.config_groups", sorted(groups), "one scheme for every quantised layer")
    return seen.pop()


def _quantization(top: dict, cfg: dict, m: Model, where: str) -> dict:
    """``checkpoint_*`` fields of :class:`Model` for the checkpoint's ``quantization_config`` (empty when none)."""
    key = next((k for k in ("quantization_config", "compression_config") for c in (cfg, top) if c.get(k) is not None),
               None)
    if key is None:
        return {}
    qc = cfg.get(key) if cfg.get(key) is not None else top.get(key)
    if not isinstance(qc, dict):
        _refuse(where, key, qc, "a table with quant_method")
    method = str(qc.get("quant_method") or "").lower()
    parts = _parts(m)
    bf16 = {"embedding": 1.0, "lm_head": 1.0, "router": 1.0, "norms": 1.0}
    quantised = ("attention", "mlp", "experts", "shared experts")
    if method == "awq":
        bits = _bits(qc.get("bits", qc.get("w_bit")), where, "bits", (4,))
        g = _group(qc.get("group_size", qc.get("q_group_size")), where, "group_size", m)
        zp = qc.get("zero_point", True) is not False
        prec, per = "W4A16", bits / 8 + (2 + (bits / 8 if zp else 0)) / g
        how = f"{bits}/8 + (2-byte FP16 scale{f' + {bits}-bit zero point' if zp else ''}) / {g}-element group"
        src = "vLLM's AWQLinearMethod.create_weights (qweight, qzeros, scales)"
        bf16.update(_unconverted(qc, "modules_to_not_convert", m, where))
    elif method == "gptq":
        bits = _bits(qc.get("bits"), where, "bits", (4, 8))
        g = _group(qc.get("group_size"), where, "group_size", m)
        prec, per = f"W{bits}A16", bits / 8 + (2 + bits / 8) / g
        how = (f"{bits}/8 + (2-byte FP16 scale + {bits}-bit zero point) / {g}-element group (g_idx, 4 bytes per "
               "input row, not counted)")
        src = "vLLM's GPTQLinearMethod.create_weights (qweight, qzeros, scales, g_idx)"
        if qc.get("lm_head") is True:
            bf16["lm_head"] = 0.0
        bf16.update(_unconverted(qc, "modules_to_not_convert", m, where))
    elif method in ("compressed-tensors", "compressed_tensors"):
        prec, per, how = _ct_scheme(qc, m, where)
        src = "vLLM's compressed-tensors schemes' create_weights (weight_packed / weight, weight_scale, weight_zero_point)"
        bf16.update(_unconverted(qc, "ignore", m, where))
    elif method == "fp8":
        act = qc.get("activation_scheme", "dynamic")
        if act not in ("dynamic", "static"):
            _refuse(where, "quantization_config.activation_scheme", act, "'dynamic' or 'static'")
        b = qc.get("weight_block_size")
        if b is not None and (not isinstance(b, list) or len(b) != 2
                              or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in b)):
            _refuse(where, "quantization_config.weight_block_size", b, "two positive integers, or null")
        prec, per = "FP8", 1 + (4 / (b[0] * b[1]) if b else 0.0)
        how = f"1 + 4-byte FP32 scale / {b[0]}x{b[1]} block" if b else "1 (one FP32 scale per tensor)"
        src = "vLLM's Fp8LinearMethod.create_weights (weight, weight_scale_inv)"
        for k in ("ignored_layers", "modules_to_not_convert"):
            bf16.update(_unconverted(qc, k, m, where))
    elif method == "fbgemm_fp8":
        # vLLM's FBGEMMFp8Config (model_executor/layers/quantization/fbgemm_fp8.py): the layers named in
        # modules_to_not_convert run unquantised (its ignore list), every other linear layer holds FP8
        # weights and an FP32 weight_scale per output channel (ChannelQuantScaleParameter); activations
        # are quantised per token at run time, under activation_scale_ub
        prec, per, how = "FP8", 1 + 4 / m.hidden, "1 + 4-byte FP32 scale per output channel"
        src = "vLLM's FBGEMMFp8LinearMethod.create_weights (weight, weight_scale)"
        bf16.update(_unconverted(qc, "modules_to_not_convert", m, where))
    elif method == "mxfp4":
        prec, per, how = "MXFP4", 0.5 + 1 / 32, "0.5 + 1-byte E8M0 scale / 32-element block"
        src = "vLLM's Mxfp4MoEMethod (only the experts are MXFP4; every other layer is unquantised)"
        bf16.update({"attention": 1.0, "mlp": 1.0, "shared experts": 1.0})
        bf16.update(_unconverted(qc, "modules_to_not_convert", m, where))
    else:
        _refuse(where, "quantization_config.quant_method", qc.get("quant_method"),
                "awq, gptq, compressed-tensors, fp8, fbgemm_fp8 or mxfp4 (other checkpoint formats are not modelled)")
    # bytes = sum over the parts of params x (kept x 2 + (1 - kept) x per): BF16 where kept
    total = sum(n * (bf16.get(part, 0.0) * 2.0 + (1.0 - bf16.get(part, 0.0)) * per) for part, n in parts.items())
    wb = total / m.total_params
    kept = tuple(p for p in ("embedding", "lm_head", "router") + quantised if parts[p] > 0 and bf16.get(p, 0.0) > 0)
    label = {"awq": "an AWQ", "gptq": "a GPTQ", "fp8": "an FP8", "fbgemm_fp8": "an FBGEMM FP8", "mxfp4": "an MXFP4"}.get(method, f"a {method}")
    note = (f"{m.name}: {label} checkpoint, served at {prec} only ({how} = {per:.6g} bytes per quantised weight, "
            f"{src}; in BF16: {', '.join(kept)}): {wb:.4g} bytes per parameter, {m.total_params * wb / 1e9:,.1f} GB "
            "of weights")
    return dict(checkpoint_precision=prec, checkpoint_weight_bytes=wb, checkpoint_bf16_modules=kept,
                checkpoint_note=note)


def _text_model(cfg: dict) -> dict:
    for key in _TEXT_KEYS:
        sub = cfg.get(key)
        if isinstance(sub, dict) and "num_hidden_layers" in sub:
            return sub
    return cfg


def _model_name(top: dict, path: str) -> str:
    n = top.get("_name_or_path")
    if isinstance(n, str) and n.strip().strip("/\\"):
        return os.path.basename(os.path.normpath(n.strip()))
    folder = os.path.basename(os.path.dirname(os.path.abspath(path)))
    if folder:
        return folder
    for c in (top, _text_model(top)):
        if isinstance(c.get("model_type"), str) and c["model_type"]:
            return c["model_type"]
    raise FastsimInputError("model name", path, "a config with _name_or_path or model_type, or a name given")


def model_from_hf_config(path: str, name: str | None = None) -> Model:
    """Load a model from a Hugging Face ``config.json`` on disk.

    Multimodal configs are read from their language model (``text_config``, ``language_config``
    or ``llm_config``); nothing about the vision or audio tower is read or refused, and its
    weights are not counted (it runs once per image, not per token). Every key that changes
    the parameters, FLOPs, KV bytes, weight bytes or served context is either read (below) or
    refused, naming the key; keys that change nothing fastsim computes (RoPE theta, norms'
    epsilon, dropout, token ids, soft-capping) are ignored.

    **Read** (``transformers`` spellings):

    - shape: ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``vocab_size``
      (required); ``num_key_value_heads`` (default: the attention heads); ``head_dim`` (used as
      given; else ``hidden_size / num_attention_heads``, or ``qk_nope_head_dim +
      qk_rope_head_dim`` under MLA); ``intermediate_size`` (dense MLP; required when a layer is
      dense), Llama-4's ``intermediate_size_mlp`` for its dense layers; ``tie_word_embeddings``
      (default false; true for the Gemma and Cohere types, as their configuration classes);
      ``max_position_embeddings`` (default 131072); ``attention_bias`` (``qkv_bias``; Qwen2
      types have q/k/v biases by construction).
    - latent attention (DeepSeek-V2/V3, Kimi-K2, MiniCPM3): ``kv_lora_rank``, ``q_lora_rank``
      (null = full-rank query), ``qk_rope_head_dim``, ``qk_nope_head_dim``, ``v_head_dim``
      (MiniCPM3 has none: ``hidden_size / num_attention_heads``, as its modelling code).
    - experts: count ``num_local_experts`` (Mixtral, gpt-oss, Llama-4), ``num_experts``
      (Qwen-MoE), ``n_routed_experts`` (DeepSeek); top-k ``num_experts_per_tok``,
      ``experts_per_token``, ``moe_topk``; width ``moe_intermediate_size`` else
      ``intermediate_size``; shared experts ``n_shared_experts`` / ``num_shared_experts`` x
      the expert width (DeepSeek), ``shared_expert_intermediate_size`` (Qwen2-MoE), Llama-4's one
      shared expert; dense layers ``first_k_dense_replace`` + ``moe_layer_freq`` (DeepSeek: layer
      i is MoE when i >= k and i % freq == 0), ``decoder_sparse_step`` + ``mlp_only_layers``
      (Qwen-MoE), ``moe_layers`` or ``interleave_moe_layer_step`` (Llama-4),
      ``mlp_layer_types`` ("dense"/"sparse"). gpt-oss's experts and router carry biases.
    - windows: ``sliding_window`` (null or 0: none) on the layers ``layer_types`` marks
      ``"sliding_attention"``; else, with ``use_sliding_window`` (Qwen types: false or absent
      means no window; true: the first ``max_window_layers`` layers are full, the rest slide;
      Qwen2-MoE: the even layers below ``max_window_layers`` slide, as transformers builds them);
      else ``sliding_window_pattern`` N (layer i is full when (i + 1) % N == 0; Gemma2 and
      gpt-oss default to 2, Gemma3 to 6, Cohere2 to 4); else every layer (Mistral).
    - ``num_nextn_predict_layers`` is accepted: the multi-token-prediction layers are loaded
      only for speculative decoding, and their weights are not counted. ``mlp_bias`` is
      accepted and not counted (under 0.01% of the parameters), like Qwen3's q/k norms and
      gpt-oss's attention sinks.
    - windows' second spelling: Gemma-2's ``sliding_window_size`` beside an equal
      ``sliding_window`` (different values, or the second spelling alone, are refused).
    - served context (:attr:`Model.max_context_tokens`), as vLLM's ``_get_and_verify_max_len``
      derives it (``vllm/config.py`` at commit 2ac6d0e75bc846998da56b50bf4f8853cb36d484;
      ``vllm/config/model.py`` in later releases, the same rule per layer type of
      ``rope_parameters``): the smallest of ``max_position_embeddings``, ``n_positions``,
      ``max_seq_len``, ``seq_length``, ``model_max_length``, ``max_sequence_length``,
      ``max_seq_length``, ``seq_len`` (none: 131072); then ``rope_scaling`` (or
      ``rope_parameters``; ``type`` is read as ``rope_type``, as vLLM's
      ``patch_rope_scaling_dict``): types ``su``, ``longrope`` and ``llama3`` leave it as is;
      ``default``, ``linear``, ``dynamic``, ``deepseek_yarn``, ``mrope`` multiply it by
      ``factor`` (default 1); ``yarn`` replaces it by ``original_max_position_embeddings`` first,
      then multiplies. Gemma-3 types are not scaled (their length is already the scaled one).
    - ``quantization_config`` (or ``compression_config``): the checkpoint's bytes per parameter
      and the one precision it is served at (:attr:`Model.checkpoint_precision`,
      :attr:`Model.checkpoint_weight_bytes`, :attr:`Model.checkpoint_bf16_modules`,
      :attr:`Model.checkpoint_note`). Bytes per quantised weight, from the tensors vLLM's method
      creates (``create_weights`` of ``AWQLinearMethod``, ``GPTQLinearMethod``, the
      compressed-tensors schemes, ``Fp8LinearMethod``): AWQ (``bits`` 4) ``bits/8 + (2 +
      bits/8) / group_size`` (no zero-point term with ``zero_point`` false), served at W4A16;
      GPTQ (``bits`` 4 or 8) the same (``g_idx``, 4 bytes per input row, not counted) at
      W4A16 / W8A16, ``group_size`` -1 meaning one group of ``hidden_size`` inputs per channel,
      ``lm_head`` true quantising the LM head; compressed-tensors ``config_groups``: integer 4 /
      8-bit weights without input activations ``bits/8 + (2 [+ bits/8 when not symmetric]) /
      group`` at W4A16 / W8A16, FP8 weights and activations ``1 + 4 / block`` (``block``
      strategy), ``1 + 4 / hidden_size`` (``channel``) or 1 (``tensor``) at FP8, 4-bit float
      weights and activations in 16-element groups at NVFP4 (0.5625); ``quant_method`` ``fp8``
      ``1 + 4 / (weight_block_size[0] x [1])`` (1 without blocks) at FP8, ``activation_scheme``
      dynamic or static; ``fbgemm_fp8`` (vLLM's ``FBGEMMFp8Config``, Meta's FP8 Llama 3.1
      checkpoints) ``1 + 4 / hidden_size`` (an FP32 scale per output channel) at FP8, the
      modules its ``modules_to_not_convert`` names unquantised; ``mxfp4`` 0.53125 for the routed experts only (vLLM's
      ``Mxfp4Config`` quantises the fused-MoE layers) at MXFP4. The input embedding, the LM head,
      MoE routers (vLLM builds them unquantised) and the norms stay in BF16, and so do the
      modules ``modules_to_not_convert`` / ``ignore`` / ``ignored_layers`` name (by part:
      attention, MLP, experts, shared experts, router, embedding, lm_head; a name with a layer
      index counts one layer's share, an expert index one expert's, a projection
      (``q/k/v/o_proj``, ``gate/up/down_proj``) its share of the block; vision-tower names are
      skipped). Bytes per parameter =
      sum over the parts of ``params x (2 if kept in BF16 else the quantised figure)`` over
      :attr:`Model.total_params`.
    - MLP: gated (gate, up and down projections) for every model type but ``nemotron``
      (Nemotron-4, Minitron), whose MLP has up and down projections only (transformers'
      ``NemotronMLP``, ``hidden_act`` ``"relu2"``): :attr:`Model.gated_mlp` false, two
      matrices. ``hidden_act`` is otherwise read only to refuse a two-matrix activation.

    **Refused** (the error names the key): ``layer_types`` entries other than
    ``"full_attention"``/``"sliding_attention"`` (``"chunked_attention"``,
    ``"linear_attention"``, ``"conv"``, mamba...); ``attention_chunk_size`` (Llama-4 chunked
    attention; a llama4 config must give it, null to serve without chunking); state-space,
    linear-attention and hybrid stacks (``layers_block_type``, ``layer_block_types``,
    ``block_types``, ``hybrid_override_pattern``, ``hybrid_layer_pattern``, ``attn_type_list``,
    ``full_attn_layers``, ``full_attention_interval``, ``attn_layer_period``,
    ``attn_layer_offset``, ``expert_layer_period``, ``ssm_cfg``, ``state_size``,
    ``time_step_rank``, ``conv_L_cache``, any key starting ``mamba``, ``ssm``, ``linear_attn``,
    ``linear_key``, ``linear_value``, ``linear_num`` or ``linear_conv``); sparse attention
    (``index_topk``, ``index_n_heads``, ``sparse_attention_config``); KV shared across layers
    (``num_kv_shared_layers``, ``kv_sharing_layer_map``); ``hidden_size_per_layer_input``,
    ``altup_num_inputs``; ``cross_attention_layers``; ``num_global_key_value_heads``,
    ``global_head_dim``; ``attention_window``, ``window_size``; a RoPE type vLLM does not
    build, YaRN without ``original_max_position_embeddings``, ``rope_type`` and ``type`` that
    disagree, a factor that is not a number > 0; a ``quant_method`` other than awq, gptq,
    compressed-tensors, fp8, fbgemm_fp8, mxfp4, bit widths and schemes without a fastsim precision (INT8
    activations...), a module-list entry fastsim cannot place, mixed compressed-tensors
    schemes; any
    other key naming experts, MoE, windows or chunks with a value; per-layer lists of different
    top-k or expert widths; encoder-decoder and cross-attending models (``is_encoder_decoder``
    or ``add_cross_attention`` true, in the text config or at the top of the file;
    ``encoder_layers``, ``num_encoder_layers``, ``decoder_layers``, ``num_decoder_layers``,
    ``cross_attention_hidden_size``); a ``model_type`` that is not a decoder-only attention
    transformer (``rwkv``, ``mamba``, ``mamba2``, ``falcon_mamba``, ``recurrent_gemma``,
    ``xlstm``, ``whisper``, ``mt5``, ``mbart``, ``pegasus``, ``marian``); a ``model_type``
    whose MLP is not gated and is not modelled (GPT-2, GPT-NeoX, Falcon, StarCoder2,
    Phi-1/2, OPT, BLOOM...); a ``hidden_act`` of two-matrix MLPs (``"relu2"``,
    ``"relu_squared"``, ``"squared_relu"``) under any ``model_type`` but ``nemotron``; and, for model types whose ``transformers`` default
    is not "none" (deepseek_v2/v3, kimi_k2, mixtral, qwen2_moe, qwen3_moe, gpt_oss, llama4),
    a config that leaves out the expert count, ``kv_lora_rank``,
    ``shared_expert_intermediate_size`` or ``attention_chunk_size``.

    Parameters
    ----------
    path : str
        Path of the ``config.json`` file.
    name : str, optional
        Name of the model. Defaults to the last part of ``_name_or_path``, else the name of the
        directory holding the file, else ``model_type``.

    Returns
    -------
    Model
        With ``source`` naming the file.

    Raises
    ------
    FastsimInputError
        The file is missing or not a JSON object; a required key is missing or not a positive
        integer; ``head_dim`` is absent and ``hidden_size`` is not divisible by
        ``num_attention_heads``; a refused key (above); or the resulting :class:`Model` is
        invalid (e.g. KV heads not dividing the heads). The field names the file and its key
        (``<path> key num_key_value_heads``; nested keys dotted, ``rope_scaling.factor``).
    """
    try:
        with open(path, "r", encoding="utf-8") as fh:
            top = json.load(fh)
    except FileNotFoundError:
        raise FastsimInputError("model", path, "a model name or an existing config.json file") from None
    except (OSError, ValueError) as exc:
        raise FastsimInputError("model config", path, f"a readable JSON file ({exc})") from None
    if not isinstance(top, dict):
        raise FastsimInputError("model config", path, "a JSON object")
    cfg = _text_model(top)
    where = str(path)
    _check_refused(cfg, where, top)
    layers = _int(cfg, "num_hidden_layers", where)
    hidden = _int(cfg, "hidden_size", where)
    heads = _int(cfg, "num_attention_heads", where)
    vocab = _int(cfg, "vocab_size", where)
    kv_heads = _int(cfg, "num_key_value_heads", where, heads)
    mt = str(cfg.get("model_type") or "")
    ffn_key = "intermediate_size_mlp" if mt.startswith("llama4") and "intermediate_size_mlp" in cfg else "intermediate_size"
    expert_width = cfg.get("intermediate_size") if _given(cfg, "intermediate_size") else None
    moe = _moe(cfg, layers, _int(cfg, "intermediate_size", where) if expert_width is not None else None, where)
    dense_layers = layers - moe.get("moe_layers", 0)
    if dense_layers or _given(cfg, ffn_key):
        ffn = _int(cfg, ffn_key, where)
    else:
        ffn = 0                                        # every layer MoE and no dense width given
    mla = _mla(cfg, hidden, heads, where)
    if cfg.get("head_dim") is not None:
        head_dim = _int(cfg, "head_dim", where)
    elif mla:
        head_dim = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
    else:
        if hidden % heads:
            _refuse(where, "head_dim", None, "head_dim, or hidden_size divisible by num_attention_heads")
        head_dim = hidden // heads
    if "attention_bias" in cfg:
        attn_bias = _bool(cfg, "attention_bias", where, False)
    elif "qkv_bias" in cfg:
        attn_bias = _bool(cfg, "qkv_bias", where, False)
    else:
        attn_bias = mt.startswith("qwen2")             # Qwen2 / Qwen2-MoE / Qwen2-VL: q, k, v biases
    window, sliding_layers = _windows(cfg, layers, where)
    tie_default = mt in _TIED_BY_DEFAULT
    if "tie_word_embeddings" in cfg:
        tied = _bool(cfg, "tie_word_embeddings", where, tie_default)
    else:
        tied = _bool(top, "tie_word_embeddings", where, tie_default)
    label = name or _model_name(top, path)
    context = _served_context(cfg, where)
    try:
        m = Model(
            name=label, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim, ffn=ffn,
            vocab=vocab, tied_embeddings=tied, max_context_tokens=context,
            attn_bias=attn_bias, sliding_window=window, sliding_layers=sliding_layers,
            gated_mlp=mt not in _UNGATED_MODELLED,
            source=f"config.json at {os.path.abspath(path)}", **mla, **moe,
        )
    except FastsimInputError as exc:
        # the record's check names its own field (model.<name>.kv_heads): say the file's key instead
        f = str(exc.field).rsplit(".", 1)[-1]
        allowed = exc.allowed.replace("the attention heads", "num_attention_heads")
        if f == "kv_heads":
            allowed += "; vLLM's num_kv_heads must divide the heads"
        raise FastsimInputError(f"{where} key {_CONFIG_KEYS.get(f, f)}", exc.value, allowed) from None
    q = _quantization(top, cfg, m, where)
    return dataclasses.replace(m, **q) if q else m
