"""Models: decoder-only transformers, dense or mixture-of-experts, GQA or MLA, full or sliding-window (SPEC §2, §10)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from ..errors import FastsimInputError
from ._checks import _pos

__all__ = ["Model"]


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer: dense or mixture-of-experts, GQA or MLA attention, full or sliding-window.

    Parameter counts follow the published layouts. Per layer: attention projections (GQA:
    q/o ``2 hidden heads head_dim``, k/v ``2 hidden kv_heads head_dim``; MLA: the low-rank
    projections of DeepSeek-V2, arXiv:2405.04434 §2.1), two RMSNorms and either a gated MLP
    ``3 hidden ffn`` (dense layers) or a router ``hidden x n_experts``, ``n_experts`` routed experts
    of ``3 hidden moe_ffn`` and shared experts of total width ``shared_ffn`` (MoE layers); an
    ungated MLP (``gated_mlp`` false: up and down projections only, Nemotron-4 / Minitron) has
    ``2 hidden ffn`` (and ``2 hidden moe_ffn`` per expert); plus
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
    gated_mlp : bool
        True (default) when every MLP is gated (gate, up and down projections: SwiGLU/GeGLU,
        Llama, Qwen, DeepSeek...); false for a two-matrix MLP (up and down projections, e.g.
        Nemotron-4 / Minitron's squared-ReLU MLP).
    source : str
        Where the figures come from (the config.json published with the weights).
    checkpoint_precision : str
        The catalog precision a quantised checkpoint is served at (``"W4A16"`` for a 4-bit AWQ /
        GPTQ checkpoint, ``"FP8"`` for an FP8 one...: :func:`~fastsim.catalog.model_from_hf_config`
        reads it from ``quantization_config``); ``""`` (default): an unquantised checkpoint, any
        precision. The plan grid offers only this precision (:meth:`served_precision`).
    checkpoint_weight_bytes : float
        Bytes per parameter of that checkpoint, averaged over :attr:`total_params`: its quantised
        matmuls with their group scales and zero points, and the modules it keeps in BF16 at 2
        bytes; 0 (default): the precision's own ``weight_bytes``.
    checkpoint_bf16_modules : tuple of str
        The modules the checkpoint keeps in BF16 (``"embedding"``, ``"lm_head"``, ``"router"``,
        ``"attention"``...); empty for an unquantised checkpoint.
    checkpoint_note : str
        One sentence on the checkpoint's quantisation, for the plan's notes ("" when none).

    The four ``checkpoint_*`` fields describe the weights file, not the architecture: they do
    not take part in comparisons (two records of one architecture are equal).

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
    gated_mlp: bool = True
    source: str = ""
    checkpoint_precision: str = field(default="", compare=False)
    checkpoint_weight_bytes: float = field(default=0.0, compare=False)
    checkpoint_bf16_modules: tuple = field(default=(), compare=False)
    checkpoint_note: str = field(default="", compare=False)

    def __post_init__(self):
        for f in ("layers", "hidden", "heads", "kv_heads", "head_dim", "vocab", "max_context_tokens"):
            _pos("model", self.name, f, getattr(self, f), integer=True)
        for f in ("ffn", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "q_lora_rank",
                  "sliding_window", "sliding_layers", "n_experts", "experts_per_token", "moe_ffn", "shared_ffn",
                  "moe_layers"):
            _pos("model", self.name, f, getattr(self, f), integer=True, allow_zero=True)
        if not isinstance(self.checkpoint_precision, str):
            raise FastsimInputError(f"model.{self.name}.checkpoint_precision", self.checkpoint_precision,
                                    "a precision name, or '' for an unquantised checkpoint")
        _pos("model", self.name, "checkpoint_weight_bytes", self.checkpoint_weight_bytes, allow_zero=True)
        if self.checkpoint_weight_bytes and not self.checkpoint_precision:
            raise FastsimInputError(f"model.{self.name}.checkpoint_weight_bytes", self.checkpoint_weight_bytes,
                                    "0 unless checkpoint_precision names the precision the checkpoint is served at")
        if not isinstance(self.checkpoint_bf16_modules, tuple):
            object.__setattr__(self, "checkpoint_bf16_modules", tuple(self.checkpoint_bf16_modules))
        if not isinstance(self.gated_mlp, bool):
            raise FastsimInputError(f"model.{self.name}.gated_mlp", self.gated_mlp, "true or false")
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

    def served_precision(self, precision):
        """The precision as this model's checkpoint is served at it.

        An unquantised checkpoint (``checkpoint_precision`` empty) is served at any precision:
        ``precision`` is returned as given. A quantised checkpoint is served only at its own
        precision (vLLM loads the weights in the format ``quantization_config`` names and does
        not convert them: ``ModelConfig._verify_quantization`` refuses a ``--quantization``
        other than the checkpoint's); its bytes per weight are then
        ``checkpoint_weight_bytes`` (BF16 modules and group scales included) when given.

        Parameters
        ----------
        precision : Precision
            A catalog precision.

        Returns
        -------
        Precision
            ``precision``, or a copy with ``weight_bytes`` replaced by ``checkpoint_weight_bytes``.

        Raises
        ------
        FastsimInputError
            The checkpoint is quantised and ``precision`` is not its precision (field
            ``precision``; the message names the checkpoint's quantisation).
        """
        if not self.checkpoint_precision:
            return precision
        if precision.name.strip().lower() != self.checkpoint_precision.strip().lower():
            raise FastsimInputError("precision", precision.name,
                                    f"{self.checkpoint_precision} only: {self.checkpoint_note or 'the checkpoint is quantised'}")
        if self.checkpoint_weight_bytes > 0 and precision.weight_bytes != self.checkpoint_weight_bytes:
            return dataclasses.replace(precision, weight_bytes=float(self.checkpoint_weight_bytes))
        return precision

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
        """Parameters of one routed expert (float, count): gated MLP ``3 hidden moe_ffn`` (``2`` ungated; + biases)."""
        b = ((self.mlp_matrices - 1) * self.moe_ffn + self.hidden) if self.expert_bias else 0
        return float(self.mlp_matrices * self.hidden * self.moe_ffn + b)

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices of one MLP (int): 3 gated (gate, up, down), 2 ungated (up, down)."""
        return 3 if self.gated_mlp else 2

    @property
    def routed_expert_params(self) -> float:
        """All routed experts of all MoE layers (float, count): held in memory, read when touched."""
        return self.moe_layers * self.n_experts * self.expert_params

    @property
    def layer_params(self) -> float:
        """Parameters of one dense transformer layer (float, count): attention, MLP, two RMSNorms.

        The MLP has ``3 hidden ffn`` parameters when gated, ``2 hidden ffn`` when not. For a MoE
        model this is a dense layer of the model (its first ``layers - moe_layers``).
        """
        return self.attn_params + float(self.mlp_matrices * self.hidden * self.ffn + 2 * self.hidden)

    @property
    def moe_layer_params(self) -> float:
        """Parameters of one MoE layer (float, count): attention, router, routed and shared experts, norms."""
        router = self.hidden * self.n_experts + (self.n_experts if self.expert_bias else 0)
        return (self.attn_params + router + self.n_experts * self.expert_params
                + float(self.mlp_matrices) * self.hidden * self.shared_ffn + 2.0 * self.hidden)

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

