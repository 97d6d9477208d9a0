"""The catalog: GPUs, precisions, models and scenarios (SPEC sections 2 and 9).

Entries are frozen dataclasses loaded from TOML files shipped inside the package. A user file
(TOML or JSON, same layout) adds entries or overrides fields of existing ones; a model can also be
loaded from a Hugging Face ``config.json`` on disk.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import Mapping

import numpy as np

from ..errors import FastsimInputError

__all__ = [
    "GPU", "Precision", "Model", "LengthDist", "Scenario", "Catalog",
    "load_catalog", "default_catalog", "model_from_hf_config",
]


def _pos(kind: str, name: str, field_: str, v, *, integer: bool = False, allow_zero: bool = False) -> None:
    """Raise unless ``v`` is a finite number > 0 (>= 0 with allow_zero; an integer with integer)."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and (v >= 0 if allow_zero else v > 0)
    if ok and integer:
        ok = float(v).is_integer()
    if not ok:
        what = "an integer" if integer else "a finite number"
        raise FastsimInputError(f"{kind}.{name}.{field_}", v, f"{what} {'>= 0' if allow_zero else '> 0'}")


@dataclass(frozen=True)
class GPU:
    """One accelerator (SPEC §2; figures from the NVIDIA H100/H200/B200 datasheets, see ``source``).

    Attributes
    ----------
    name : str
        Catalog key, e.g. ``"H100"``.
    peak_flops_per_s : dict[str, float]
        Dense tensor-core peak in FLOP/s per precision key (``"bf16"``, ``"fp8"``).
    hbm_bw_bytes_per_s, hbm_bytes : float
        HBM bandwidth (bytes/s) and capacity (bytes).
    nvlink_bw_bytes_per_s : float
        NVLink bandwidth per GPU, one direction (bytes/s).
    network_bw_bytes_per_s : float
        Scale-out bandwidth per GPU used for KV transfer between disaggregated instances (bytes/s).
    price_usd_per_hour, power_w : float
        Assumed rental price per GPU (US dollars per hour; the lecture's comparison values) and
        board power (W).
    description : str
        Free text shown in listings.
    source : str
        Datasheet the figures come from.
    default_grid : bool
        True when the GPU belongs to the planner's default grid (:meth:`Catalog.default_gpus`);
        other GPUs are chosen by name (or ``--gpu all``).

    Raises
    ------
    FastsimInputError
        ``peak_flops_per_s`` is not a non-empty mapping, or any peak, bandwidth, capacity, price
        or power is not a finite number > 0.
    """

    name: str
    peak_flops_per_s: Mapping[str, float]
    hbm_bw_bytes_per_s: float
    hbm_bytes: float
    nvlink_bw_bytes_per_s: float
    network_bw_bytes_per_s: float
    price_usd_per_hour: float
    power_w: float
    description: str = ""
    source: str = ""
    default_grid: bool = True

    def __post_init__(self):
        if not isinstance(self.peak_flops_per_s, Mapping) or not self.peak_flops_per_s:
            raise FastsimInputError(f"gpu.{self.name}.peak_flops_per_s", self.peak_flops_per_s,
                                    "a table of precision keys to FLOP/s, e.g. { bf16 = 989e12, fp8 = 1979e12 }")
        for key, v in self.peak_flops_per_s.items():
            _pos("gpu", self.name, f"peak_flops_per_s.{key}", v)
        for f in ("hbm_bw_bytes_per_s", "hbm_bytes", "nvlink_bw_bytes_per_s", "network_bw_bytes_per_s",
                  "price_usd_per_hour", "power_w"):
            _pos("gpu", self.name, f, getattr(self, f))


@dataclass(frozen=True)
class Precision:
    """A numeric format for weights and KV cache (bytes per element) and the peak it runs at.

    Built-in entries (SPEC §2): ``BF16`` (2-byte weights and KV, ``bf16`` peak) and ``FP8``
    (1-byte weights and KV, ``fp8`` peak).

    Attributes
    ----------
    name : str
        Catalog key, e.g. ``"FP8"``.
    weight_bytes : float
        Bytes per weight element.
    kv_bytes : float
        Bytes per KV-cache element.
    flops_key : str
        Key into :attr:`GPU.peak_flops_per_s` giving the matmul peak at this precision.

    Raises
    ------
    FastsimInputError
        ``weight_bytes`` or ``kv_bytes`` is not a finite number > 0, or ``flops_key`` is not a
        non-empty string.
    """

    name: str
    weight_bytes: float
    kv_bytes: float
    flops_key: str

    def __post_init__(self):
        _pos("precision", self.name, "weight_bytes", self.weight_bytes)
        _pos("precision", self.name, "kv_bytes", self.kv_bytes)
        if not isinstance(self.flops_key, str) or not self.flops_key:
            raise FastsimInputError(f"precision.{self.name}.flops_key", self.flops_key,
                                    "the name of a GPU peak, e.g. 'bf16' or 'fp8'")


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer: dense or mixture-of-experts, GQA or MLA attention, full or sliding-window.

    Parameter counts follow the published layouts. Per layer: attention projections (GQA:
    q/o ``2 hidden heads head_dim``, k/v ``2 hidden kv_heads head_dim``; MLA: the low-rank
    projections of DeepSeek-V2, arXiv:2405.04434 §2.1), two RMSNorms and either a gated MLP
    ``3 hidden ffn`` (dense layers) or a router ``hidden x n_experts``, ``n_experts`` routed experts
    of ``3 hidden moe_ffn`` and shared experts of total width ``shared_ffn`` (MoE layers); plus
    the input embedding, LM head (unless tied) and final norm. The built-in Llama-3.1 entries use
    the configs published with the weights (SPEC §2); SPEC §10 defines the other terms.

    Attributes
    ----------
    name : str
        Catalog key, e.g. ``"llama-3.1-70b"``.
    layers, hidden, heads, kv_heads, head_dim, ffn, vocab : int
        Transformer layers, hidden size, attention heads, KV heads (GQA), head dimension, MLP
        intermediate size of the dense layers and vocabulary size.
    tied_embeddings : bool
        True when the LM head shares the input embedding matrix.
    max_context_tokens : int
        Longest context the model accepts (tokens).
    attention : str
        ``"gqa"`` (multi-head, grouped-query or multi-query attention) or ``"mla"`` (multi-head
        latent attention, DeepSeek-V2/V3).
    kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim, q_lora_rank : int
        MLA only (0 otherwise): latent KV rank, decoupled RoPE key dimension, per-head no-RoPE
        query/key dimension, per-head value dimension, query low-rank (0 = full-rank query).
    attn_bias : bool
        q/k/v projections carry biases (Qwen2, gpt-oss); counted in the parameters.
    sliding_window : int
        Window of the sliding-window layers (tokens); 0 when no layer slides.
    sliding_layers : int
        How many of the ``layers`` use the window (all of Mistral-7B's; half of gpt-oss's).
    n_experts : int
        Routed experts per MoE layer; 0 for a dense model.
    experts_per_token : int
        Routed experts each token runs (top-k).
    moe_ffn : int
        Intermediate size of one routed expert (gated MLP).
    shared_ffn : int
        Total intermediate size of the shared experts of a MoE layer (0 = none).
    moe_layers : int
        Layers whose MLP is a MoE layer; the other ``layers - moe_layers`` are dense (``ffn``).
    expert_bias : bool
        Experts' and router's projections carry biases (gpt-oss).
    source : str
        Where the figures come from (the config.json published with the weights).

    Raises
    ------
    FastsimInputError
        A size is not an integer > 0 (>= 0 for the optional ones), ``kv_heads`` does not divide
        ``heads``, an unknown ``attention``, an MLA model without its latent dimensions, a
        window without sliding layers (or the reverse), or MoE fields that do not describe a
        MoE model (top-k outside [1, n_experts], no expert width, MoE layers outside
        [1, layers]).
    """

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    tied_embeddings: bool = False
    max_context_tokens: int = 131072
    attention: str = "gqa"
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    q_lora_rank: int = 0
    attn_bias: bool = False
    sliding_window: int = 0
    sliding_layers: int = 0
    n_experts: int = 0
    experts_per_token: int = 0
    moe_ffn: int = 0
    shared_ffn: int = 0
    moe_layers: int = 0
    expert_bias: bool = False
    source: str = ""

    def __post_init__(self):
        for f in ("layers", "hidden", "heads", "kv_heads", "head_dim", "vocab", "max_context_tokens"):
            _pos("model", self.name, f, getattr(self, f), integer=True)
        for f in ("ffn", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "q_lora_rank",
                  "sliding_window", "sliding_layers", "n_experts", "experts_per_token", "moe_ffn", "shared_ffn",
                  "moe_layers"):
            _pos("model", self.name, f, getattr(self, f), integer=True, allow_zero=True)
        if self.kv_heads > self.heads or self.heads % self.kv_heads:
            raise FastsimInputError(f"model.{self.name}.kv_heads", self.kv_heads,
                                    f"a divisor of the attention heads ({self.heads}) (grouped-query attention)")
        if self.attention not in ("gqa", "mla"):
            raise FastsimInputError(f"model.{self.name}.attention", self.attention, "'gqa' or 'mla'")
        if self.attention == "mla":
            for f in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
                if getattr(self, f) <= 0:
                    raise FastsimInputError(f"model.{self.name}.{f}", getattr(self, f),
                                            "an integer > 0 (multi-head latent attention needs it)")
        if (self.sliding_window > 0) != (self.sliding_layers > 0) or self.sliding_layers > self.layers:
            raise FastsimInputError(f"model.{self.name}.sliding_layers", self.sliding_layers,
                                    f"0 without a sliding window, else 1 to {self.layers} layers "
                                    f"(sliding_window = {self.sliding_window})")
        if self.n_experts > 0:
            if not 1 <= self.experts_per_token <= self.n_experts:
                raise FastsimInputError(f"model.{self.name}.experts_per_token", self.experts_per_token,
                                        f"1 to n_experts ({self.n_experts})")
            if self.moe_ffn <= 0:
                raise FastsimInputError(f"model.{self.name}.moe_ffn", self.moe_ffn, "an integer > 0 for a MoE model")
            if not 1 <= self.moe_layers <= self.layers:
                raise FastsimInputError(f"model.{self.name}.moe_layers", self.moe_layers, f"1 to layers ({self.layers})")
        elif self.experts_per_token or self.moe_layers or self.shared_ffn or self.moe_ffn:
            raise FastsimInputError(f"model.{self.name}.n_experts", self.n_experts,
                                    "> 0 when experts_per_token, moe_ffn, shared_ffn or moe_layers is set")
        if self.layers - self.moe_layers > 0 and self.ffn <= 0:
            raise FastsimInputError(f"model.{self.name}.ffn", self.ffn, "an integer > 0 (the model has dense layers)")

    # ---- shape ------------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts model (``n_experts > 0``)."""
        return self.n_experts > 0

    @property
    def q_dim(self) -> int:
        """Query width per token (int): ``heads x head_dim``; MLA ``heads x (qk_nope + qk_rope)`` (SPEC §3, §10)."""
        if self.attention == "mla":
            return self.heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        return self.heads * self.head_dim

    @property
    def attn_dim_prefill(self) -> float:
        """Width d of the attention FLOPs of prefill tokens (float): ``2 x layers x T^2 x d`` causal.

        GQA: ``q_dim`` (SPEC §3: QK^T and PV each ``2 x q_dim`` FLOPs per query-key pair). MLA
        (prefill runs the decompressed heads, DeepSeek-V2 §2.1): ``heads x (qk_nope + qk_rope +
        v_head_dim) / 2``.
        """
        if self.attention == "mla":
            return self.heads * (self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim) / 2.0
        return float(self.q_dim)

    @property
    def attn_dim_decode(self) -> float:
        """Width d of the attention FLOPs of decode tokens (float): ``4 x layers x context x d``.

        GQA: ``q_dim``. MLA decodes with the up-projections absorbed (DeepSeek-V2 §2.1.3; FlashMLA):
        each head scores the ``kv_lora_rank + qk_rope`` latent and sums ``kv_lora_rank`` values,
        ``heads x (2 kv_lora_rank + qk_rope) / 2``.
        """
        if self.attention == "mla":
            return self.heads * (2 * self.kv_lora_rank + self.qk_rope_head_dim) / 2.0
        return float(self.q_dim)

    def tp_refusal(self, tp: int) -> str | None:
        """Why an attention tensor-parallel degree cannot serve this model, or None when it can.

        vLLM requires TP to divide the attention heads, and the KV heads to divide TP or TP to
        divide them (``ModelConfig.verify_with_parallel_config``; SPEC §10).

        Parameters
        ----------
        tp : int
            Tensor-parallel degree of the attention (>= 1; not validated here).

        Returns
        -------
        str or None
            A sentence naming the heads, or None.
        """
        if self.heads % tp:
            return f"TP{tp} does not divide {self.name}'s {self.heads} attention heads"
        if self.attention == "gqa" and self.kv_heads % tp and tp % self.kv_heads:
            return f"TP{tp} and {self.name}'s {self.kv_heads} KV heads do not divide one another"
        return None

    # ---- parameters -------------------------------------------------------------------------
    @property
    def attn_params(self) -> float:
        """Attention parameters of one layer (float, count), biases included when ``attn_bias``."""
        h = self.hidden
        if self.attention == "mla":
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * self.heads * qk
            else:
                q = h * self.heads * qk
            kv = (h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
                  + self.kv_lora_rank * self.heads * (self.qk_nope_head_dim + self.v_head_dim))
            o = self.heads * self.v_head_dim * h
            return float(q + kv + o)
        qd = self.heads * self.head_dim
        kvd = self.kv_heads * self.head_dim
        bias = (qd + 2 * kvd) if self.attn_bias else 0
        return float(2 * h * qd + 2 * h * kvd + bias + (h if self.attn_bias else 0))

    @property
    def expert_params(self) -> float:
        """Parameters of one routed expert (float, count): gated MLP ``3 hidden moe_ffn`` (+ biases)."""
        b = (2 * self.moe_ffn + self.hidden) if self.expert_bias else 0
        return float(3 * self.hidden * self.moe_ffn + b)

    @property
    def routed_expert_params(self) -> float:
        """All routed experts of all MoE layers (float, count): held in memory, read when touched."""
        return self.moe_layers * self.n_experts * self.expert_params

    @property
    def layer_params(self) -> float:
        """Parameters of one dense transformer layer (float, count): attention, gated MLP, two RMSNorms.

        For a MoE model this is a dense layer of the model (its first ``layers - moe_layers``).
        """
        return self.attn_params + float(3 * self.hidden * self.ffn + 2 * self.hidden)

    @property
    def moe_layer_params(self) -> float:
        """Parameters of one MoE layer (float, count): attention, router, routed and shared experts, norms."""
        router = self.hidden * self.n_experts + (self.n_experts if self.expert_bias else 0)
        return (self.attn_params + router + self.n_experts * self.expert_params
                + 3.0 * self.hidden * self.shared_ffn + 2.0 * self.hidden)

    @property
    def total_params(self) -> float:
        """All parameters (float, count): occupies memory (SPEC §2: 70B -> 70.55e9)."""
        emb = self.vocab * self.hidden
        head = 0 if self.tied_embeddings else self.vocab * self.hidden
        dense = (self.layers - self.moe_layers) * self.layer_params
        moe = self.moe_layers * self.moe_layer_params if self.is_moe else 0.0
        return dense + moe + emb + head + self.hidden

    @property
    def matmul_params(self) -> float:
        """Parameters of the matmuls, all experts included (float, count): total minus the input embedding (SPEC §2).

        With tied embeddings the shared matrix is read once, as the LM head.
        """
        if self.tied_embeddings:
            return self.total_params
        return self.total_params - self.vocab * self.hidden

    @property
    def dense_matmul_params(self) -> float:
        """Matmul parameters every token runs and every step reads (float, count): all but the routed experts."""
        return self.matmul_params - self.routed_expert_params

    @property
    def active_matmul_params(self) -> float:
        """Matmul parameters one token runs (float, count): dense part + top-k routed experts per MoE layer (SPEC §10)."""
        return self.dense_matmul_params + self.moe_layers * self.experts_per_token * self.expert_params

    @property
    def active_params(self) -> float:
        """Parameters one token activates (float, count), input embedding included, as model cards count them."""
        return self.total_params - self.routed_expert_params + self.moe_layers * self.experts_per_token * self.expert_params

    # ---- KV cache ---------------------------------------------------------------------------
    @property
    def kv_elems_per_token_per_layer(self) -> int:
        """Cached elements per token per layer (int): GQA ``2 x kv_heads x head_dim``; MLA ``kv_lora_rank + qk_rope`` (SPEC §10)."""
        if self.attention == "mla":
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_heads * self.head_dim

    def kv_heads_per_gpu(self, tp: int) -> int:
        """KV heads held by one GPU under TP (SPEC §2, §3).

        Parameters
        ----------
        tp : int
            Tensor-parallel degree (GPUs per instance); not validated here.

        Returns
        -------
        int
            ``max(kv_heads // tp, 1)``: heads are replicated, not split, when TP > KV heads. An MLA
            model's latent is not split by heads: every GPU holds all of it (returns ``kv_heads``).
        """
        if self.attention == "mla":
            return self.kv_heads
        return max(self.kv_heads // tp, 1)

    def kv_bytes_per_token(self, kv_bytes: float) -> float:
        """KV-cache bytes per token for the whole model at full context (SPEC §2, §10).

        Parameters
        ----------
        kv_bytes : float
            Bytes per KV element (:attr:`Precision.kv_bytes`).

        Returns
        -------
        float
            ``layers x kv_elems_per_token_per_layer x kv_bytes`` (bytes per token): 70B at BF16
            327,680; DeepSeek-V3 at BF16 ``61 x (512 + 64) x 2 = 70,272``. Sliding-window layers
            hold fewer tokens past their window: see :meth:`kv_tokens_held`.
        """
        return float(self.layers * self.kv_elems_per_token_per_layer) * kv_bytes

    def kv_bytes_per_token_per_gpu(self, kv_bytes: float, tp: int) -> float:
        """KV-cache bytes per token held on one GPU of an attention TP group (SPEC §2, §3, §10).

        Parameters
        ----------
        kv_bytes : float
            Bytes per KV element (:attr:`Precision.kv_bytes`).
        tp : int
            Tensor-parallel degree.

        Returns
        -------
        float
            GQA ``2 x layers x kv_heads_per_gpu(tp) x head_dim x kv_bytes`` (heads replicated, not
            split, past ``kv_heads``); MLA ``layers x (kv_lora_rank + qk_rope) x kv_bytes`` on
            every rank (bytes per token per GPU).
        """
        if self.attention == "mla":
            return self.kv_bytes_per_token(kv_bytes)
        return 2.0 * self.layers * self.kv_heads_per_gpu(tp) * self.head_dim * kv_bytes

    @property
    def sliding_fraction(self) -> float:
        """Fraction of the layers that slide (float in [0, 1]; 0 without a window)."""
        return self.sliding_layers / self.layers

    def kv_tokens_held(self, context_tokens):
        """Full-context-equivalent tokens of KV a sequence of ``context_tokens`` holds (SPEC §10).

        A sliding layer keeps ``min(context, window)`` tokens, a full layer all of them, so a
        sequence holds ``context - sliding_fraction x max(context - window, 0)`` tokens' worth
        of :meth:`kv_bytes_per_token`; decode reads and attends over the same amount.

        Parameters
        ----------
        context_tokens : float or ndarray(float64)
            Tokens in the sequence (>= 0; not validated).

        Returns
        -------
        float or ndarray(float64)
            Same shape as the input; equal to it for a model without a window.
        """
        if self.sliding_window <= 0:
            return context_tokens
        return context_tokens - self.sliding_fraction * np.maximum(np.asarray(context_tokens, dtype=np.float64)
                                                                    - self.sliding_window, 0.0)


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution: ``lognormal`` (mean, sigma of the underlying normal) or ``fixed``.

    Attributes
    ----------
    kind : str
        ``"lognormal"`` or ``"fixed"``.
    mean : float
        Mean length (tokens); for ``fixed``, every length.
    sigma : float
        Standard deviation of the underlying normal (dimensionless; ignored for ``fixed``).

    Raises
    ------
    FastsimInputError
        ``kind`` is neither kind, ``mean`` is not a finite number > 0 or ``sigma`` is not a
        finite number >= 0.
    """

    kind: str
    mean: float
    sigma: float = 0.0

    def __post_init__(self):
        if self.kind not in ("lognormal", "fixed"):
            raise FastsimInputError("length kind", self.kind, "'lognormal' or 'fixed'")
        _pos("length", self.kind, "mean", self.mean)
        _pos("length", self.kind, "sigma", self.sigma, allow_zero=True)

    @property
    def mu(self) -> float:
        """Location of the underlying normal (float): ``ln(mean) - sigma^2 / 2``, so the lognormal's mean is ``mean``."""
        return math.log(self.mean) - self.sigma ** 2 / 2.0

    def quantile(self, q: float) -> float:
        """The q-quantile of the length (lecture exercise 5: mean 8000, sigma 0.8 -> P90 16,195).

        Parameters
        ----------
        q : float
            Probability in (0, 1); not validated (0 and 1 give 0 and inf for ``lognormal``).

        Returns
        -------
        float
            ``exp(mu + Phi^-1(q) sigma)`` tokens (not rounded) for ``lognormal``; ``mean`` for
            ``fixed``.
        """
        if self.kind == "fixed":
            return float(self.mean)
        from scipy.stats import norm
        return math.exp(self.mu + norm.ppf(q) * self.sigma)


@dataclass(frozen=True)
class Scenario:
    """A workload with its SLOs: model, length distributions, P90 TTFT and TPOT targets, rate.

    The built-in scenarios are SPEC §9's table (chat, coding-agent, offline-batch, low-latency-8b).

    Attributes
    ----------
    name : str
        Catalog key, e.g. ``"chat"``.
    model : str
        Model name (a key of :attr:`Catalog.models`) or a ``config.json`` path.
    prompt, output : LengthDist
        Prompt and output token-length distributions.
    ttft_s, tpot_s : float
        P90 TTFT and TPOT targets (s).
    rate_req_per_s : float
        Target request rate (req/s).

    Raises
    ------
    FastsimInputError
        ``ttft_s``, ``tpot_s`` or ``rate_req_per_s`` is not a finite number > 0.
    """

    name: str
    model: str
    prompt: LengthDist
    output: LengthDist
    ttft_s: float
    tpot_s: float
    rate_req_per_s: float

    def __post_init__(self):
        for f in ("ttft_s", "tpot_s", "rate_req_per_s"):
            _pos("scenario", self.name, f, getattr(self, f))


def _norm(name: str) -> str:
    return str(name).strip().lower()


@dataclass
class Catalog:
    """Named GPUs, precisions, models and scenarios; lookups are case-insensitive.

    Attributes
    ----------
    gpus : dict[str, GPU]
    precisions : dict[str, Precision]
    models : dict[str, Model]
    scenarios : dict[str, Scenario]
        Entries keyed by name, in load order.
    """

    gpus: dict = field(default_factory=dict)
    precisions: dict = field(default_factory=dict)
    models: dict = field(default_factory=dict)
    scenarios: dict = field(default_factory=dict)

    def _get(self, table: dict, kind: str, name: str):
        key = _norm(name)
        for k, v in table.items():
            if _norm(k) == key:
                return v
        raise FastsimInputError(kind, name, "one of " + ", ".join(sorted(table)))

    def default_gpus(self) -> list:
        """Names of the GPUs of the default planning grid (``default_grid`` true), in catalog order.

        The built-in default grid is the lecture's {H100, H200, B200}; the other built-in GPUs
        (``gpus_extra.toml``) are chosen by name.

        Returns
        -------
        list of str
        """
        return [k for k, g in self.gpus.items() if g.default_grid]

    def gpu(self, name: str) -> GPU:
        """Look up a GPU by name (case-insensitive).

        Parameters
        ----------
        name : str

        Returns
        -------
        GPU

        Raises
        ------
        FastsimInputError
            No GPU has that name; the message lists the known ones.
        """
        return self._get(self.gpus, "gpu", name)

    def precision(self, name: str) -> Precision:
        """Look up a precision (``BF16``, ``FP8``; case-insensitive).

        Parameters
        ----------
        name : str

        Returns
        -------
        Precision

        Raises
        ------
        FastsimInputError
            No precision has that name; the message lists the known ones.
        """
        return self._get(self.precisions, "precision", name)

    def model(self, name_or_path: str) -> Model:
        """Look up a model by name, or load it from a Hugging Face ``config.json`` path.

        Parameters
        ----------
        name_or_path : str
            A catalog name (case-insensitive), or a path: anything containing a path separator
            or ending in ``.json`` is read with :func:`model_from_hf_config`.

        Returns
        -------
        Model

        Raises
        ------
        FastsimInputError
            No model has that name, or the config file is missing or malformed.
        """
        if os.path.sep in str(name_or_path) or str(name_or_path).endswith(".json"):
            return model_from_hf_config(name_or_path)
        return self._get(self.models, "model", name_or_path)

    def scenario(self, name: str) -> Scenario:
        """Look up a built-in or user scenario (case-insensitive).

        Parameters
        ----------
        name : str

        Returns
        -------
        Scenario

        Raises
        ------
        FastsimInputError
            No scenario has that name; the message lists the known ones.
        """
        return self._get(self.scenarios, "scenario", name)

    def with_prices(self, prices_usd_per_hour: Mapping[str, float]) -> "Catalog":
        """A copy with some GPU prices replaced (what-if studies, SPEC §8).

        Parameters
        ----------
        prices_usd_per_hour : mapping of str to float
            GPU name -> new price per GPU (US dollars per hour).

        Returns
        -------
        Catalog
            A new catalog; ``self`` is unchanged.

        Raises
        ------
        FastsimInputError
            A GPU name is unknown, or a price is not a finite number > 0.
        """
        new = dataclasses.replace(self, gpus=dict(self.gpus))
        for name, price in prices_usd_per_hour.items():
            g = self.gpu(name)
            new.gpus[g.name] = dataclasses.replace(g, price_usd_per_hour=float(price))
        return new


_GPU_KEYS = {f.name for f in dataclasses.fields(GPU)} - {"name"}
_MODEL_KEYS = {f.name for f in dataclasses.fields(Model)} - {"name"}
_PREC_KEYS = {f.name for f in dataclasses.fields(Precision)} - {"name"}


def _read_table(path: str) -> dict:
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise FastsimInputError("catalog file", path, f"a readable TOML or JSON file ({exc.strerror})") from None
    try:
        if str(path).endswith(".json"):
            return json.loads(raw)
        return tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise FastsimInputError("catalog file", path, f"valid TOML/JSON ({exc})") from None


_OPTIONAL = {"description", "source", "default_grid"} | {f.name for f in dataclasses.fields(Model) if f.default is not dataclasses.MISSING}


def _merge(table: dict, entries: dict, factory, keys: set, kind: str, source: str) -> None:
    if not isinstance(entries, dict):
        raise FastsimInputError(f"{kind} table in {source}", entries, "a table of named entries")
    for name, fields_ in entries.items():
        if not isinstance(fields_, dict):
            raise FastsimInputError(f"{kind}.{name}", fields_, "a table of fields")
        unknown = set(fields_) - keys
        if unknown:
            raise FastsimInputError(f"{kind}.{name}", sorted(unknown), "fields among " + ", ".join(sorted(keys)))
        existing = next((v for k, v in table.items() if _norm(k) == _norm(name)), None)
        if existing is not None:
            merged = {k: ({**getattr(existing, k), **v} if isinstance(v, dict) and isinstance(getattr(existing, k), Mapping)
                          else v) for k, v in fields_.items()}
            table[existing.name] = dataclasses.replace(existing, **merged)
        else:
            try:
                table[name] = factory(name=name, **fields_)
            except TypeError:
                missing = sorted(keys - set(fields_) - _OPTIONAL)
                raise FastsimInputError(f"{kind}.{name} in {source}", sorted(fields_),
                                        "all required fields; missing " + ", ".join(missing)) from None


_SCENARIO_KEYS = {"model", "prompt", "output", "ttft_s", "tpot_s", "rate_req_per_s"}


def _scenario(name: str, d: dict) -> Scenario:
    if not isinstance(d, dict):
        raise FastsimInputError(f"scenario.{name}", d, "a table with keys " + ", ".join(sorted(_SCENARIO_KEYS)))
    unknown = set(d) - _SCENARIO_KEYS
    missing = _SCENARIO_KEYS - set(d)
    if unknown or missing:
        raise FastsimInputError(f"scenario.{name}", sorted(unknown) or None,
                                "exactly the keys " + ", ".join(sorted(_SCENARIO_KEYS))
                                + (f" (missing {', '.join(sorted(missing))})" if missing else ""))

    def num(v, field_):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise FastsimInputError(f"scenario.{name}.{field_}", v, "a number")
        return float(v)

    def dist(key):
        v = d[key]
        if not isinstance(v, dict) or "mean" not in v or set(v) - {"kind", "mean", "sigma"}:
            raise FastsimInputError(f"scenario.{name}.{key}", v, "a table { kind = 'lognormal'|'fixed', mean, sigma }")
        return LengthDist(kind=v.get("kind", "lognormal"), mean=num(v["mean"], f"{key}.mean"),
                          sigma=num(v.get("sigma", 0.0), f"{key}.sigma"))

    return Scenario(name=name, model=str(d["model"]), prompt=dist("prompt"), output=dist("output"),
                    ttft_s=num(d["ttft_s"], "ttft_s"), tpot_s=num(d["tpot_s"], "tpot_s"),
                    rate_req_per_s=num(d["rate_req_per_s"], "rate_req_per_s"))


def _data(name: str) -> dict:
    return tomllib.loads(resources.files(__package__).joinpath("data", name).read_text("utf-8"))


def load_catalog(user_files=()) -> Catalog:
    """Load the built-in catalog, then apply user files in order.

    Parameters
    ----------
    user_files : sequence of str
        TOML or JSON files with any of the top-level tables ``gpus``, ``precisions``, ``models``,
        ``scenarios``; each entry adds a new item or overrides fields of an existing one.

    Returns
    -------
    Catalog

    Raises
    ------
    FastsimInputError
        A missing or malformed file, or an unknown field.
    """
    cat = Catalog()
    _merge(cat.gpus, _data("gpus.toml"), GPU, _GPU_KEYS, "gpu", "built-in")
    _merge(cat.gpus, _data("gpus_extra.toml"), GPU, _GPU_KEYS, "gpu", "built-in")
    _merge(cat.precisions, _data("precisions.toml"), Precision, _PREC_KEYS, "precision", "built-in")
    _merge(cat.models, _data("models.toml"), Model, _MODEL_KEYS, "model", "built-in")
    for name, d in _data("scenarios.toml").items():
        cat.scenarios[name] = _scenario(name, d)
    for path in user_files:
        t = _read_table(path)
        unknown = set(t) - {"gpus", "precisions", "models", "scenarios"}
        if unknown:
            raise FastsimInputError(f"catalog file {path}", sorted(unknown), "tables gpus, precisions, models, scenarios")
        _merge(cat.gpus, t.get("gpus", {}), GPU, _GPU_KEYS, "gpu", path)
        _merge(cat.precisions, t.get("precisions", {}), Precision, _PREC_KEYS, "precision", path)
        _merge(cat.models, t.get("models", {}), Model, _MODEL_KEYS, "model", path)
        scen = t.get("scenarios", {})
        if not isinstance(scen, dict):
            raise FastsimInputError(f"scenarios table in {path}", scen, "a table of named scenarios")
        for name, d in scen.items():
            cat.scenarios[name] = _scenario(name, d)
    return cat


_DEFAULT: Catalog | None = None


def default_catalog() -> Catalog:
    """The built-in catalog, loaded once and cached (SPEC §2 and §9 entries).

    Returns
    -------
    Catalog
        The shared instance; treat it as read-only (use :meth:`Catalog.with_prices` or
        :func:`load_catalog` for a modified copy).
    """
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = load_catalog()
    return _DEFAULT


_HF_REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")


def model_from_hf_config(path: str, name: str | None = None) -> Model:
    """Load a model from a Hugging Face ``config.json`` on disk.

    Reads ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``,
    ``num_key_value_heads`` (GQA; defaults to the attention heads), ``head_dim`` (when given; else
    ``hidden_size / num_attention_heads``), ``intermediate_size``, ``vocab_size``,
    ``tie_word_embeddings`` and ``max_position_embeddings``. Multimodal configs are read from
    their ``text_config``.

    Parameters
    ----------
    path : str
        Path of the ``config.json`` file.
    name : str, optional
        Name of the model; defaults to the name of the directory holding the file.

    Returns
    -------
    Model

    Raises
    ------
    FastsimInputError
        The file is missing or not a JSON object; a required key is missing or not a positive
        integer; ``head_dim`` is absent and ``hidden_size`` is not divisible by
        ``num_attention_heads``; the config describes a mixture-of-experts model; or the
        resulting :class:`Model` is invalid (e.g. KV heads not dividing the heads).
    """
    try:
        with open(path, "r", encoding="utf-8") as fh:
            cfg = json.load(fh)
    except FileNotFoundError:
        raise FastsimInputError("model", path, "a model name or an existing config.json file") from None
    except (OSError, ValueError) as exc:
        raise FastsimInputError("model config", path, f"a readable JSON file ({exc})") from None
    if not isinstance(cfg, dict):
        raise FastsimInputError("model config", path, "a JSON object")
    if "text_config" in cfg and "num_hidden_layers" not in cfg:
        cfg = cfg["text_config"]
    for key in _HF_REQUIRED:
        if key not in cfg:
            raise FastsimInputError(f"{path}: {key}", None, f"required key {key} (a positive integer)")
    def pos_int(key, default=None):
        v = cfg.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise FastsimInputError(f"{path}: {key}", v, "a positive integer")
        return v
    for moe_key in ("num_local_experts", "num_experts", "n_routed_experts"):
        if isinstance(cfg.get(moe_key), int) and cfg[moe_key] > 1:
            raise FastsimInputError(f"{path}: {moe_key}", cfg[moe_key],
                                    "a dense model (mixture-of-experts models are not modelled yet)")
    heads = pos_int("num_attention_heads")
    hidden = pos_int("hidden_size")
    head_dim = cfg.get("head_dim")
    if head_dim is None:
        if hidden % heads:
            raise FastsimInputError(f"{path}: head_dim", None, "head_dim, or hidden_size divisible by num_attention_heads")
        head_dim = hidden // heads
    else:
        head_dim = pos_int("head_dim")
    label = name or os.path.basename(os.path.dirname(os.path.abspath(path))) or "custom"
    return Model(
        name=label, layers=pos_int("num_hidden_layers"), hidden=hidden, heads=heads,
        kv_heads=pos_int("num_key_value_heads", heads), head_dim=head_dim,
        ffn=pos_int("intermediate_size"), vocab=pos_int("vocab_size"),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_context_tokens=pos_int("max_position_embeddings", 131072),
    )
