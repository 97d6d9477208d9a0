"""Roofline step-time model of one forward pass of one instance (SPEC sections 3 and 10).

An instance has G GPUs. Its attention runs tensor-parallel over ``tp = G / dp`` GPUs in each of
``dp`` data-parallel attention ranks (``dp = 1``: plain TP over all G, SPEC §3); the routed
experts of a mixture-of-experts model are spread over all G GPUs, either tensor-sharded
(``ep = 1``, vLLM's default) or whole experts per GPU (``ep = G``, expert parallelism). For a
step that processes ``n_tokens`` new tokens and reads ``kv_tokens`` cached tokens, per GPU::

    weight read = (dense matmul bytes / tp + routed-expert bytes / G x touched(n)) / (eta_bw x HBM B/s)
                  touched(n) = 1 - (1 - k/E)^n      (expected fraction of experts a step touches, SPEC §10)
    KV read     = kv_tokens x KV bytes per token per GPU / dp / (eta_kv x HBM B/s)   (eta_kv = eta_bw in SPEC §3)
    compute     = (2 x active matmul params x n_tokens + attention FLOPs) / G / (eta_compute x peak FLOP/s)
    all-reduce  = n_ar x [2 (tp-1) alpha + 2 (tp-1)/tp x (n_tokens / dp) x hidden x 2 B / (eta_link x link B/s)]
    all-to-all  = n_a2a x 2 x [(G-1) alpha + (G-1)/G x (n_tokens x k / G) x busiest x hidden x 2 B / (eta_nvlink x link B/s)]
                  (k: the copies of a token the dispatch moves, the experts per token under SPEC §10;
                  step model v2: StepConstants.moe_dispatch, fastsim.formulas.dispatch_copies)
    step        = max(weight read + KV read, compute) + all-reduce + all-to-all + fixed overhead
                  (step model v2: StepConstants.step_form "classes" takes max(weight read, GEMM) +
                  max(KV read, attention) instead; docs/STEP_MODEL.md)

``n_ar`` = 2 per dense layer, 2 per MoE layer with tensor-sharded experts and 1 per MoE layer under
expert parallelism (whose dispatch and combine are the two all-to-alls, ``n_a2a`` = MoE layers).
A group that fits in one node (``gpu.gpus_per_node``) runs at the NVLink bandwidth, a group that
spans nodes at the slowest link it crosses, the scale-out bandwidth per GPU (SPEC §10); ``eta_link`` is
``eta_pcie`` on a PCIe GPU when set, else ``eta_nvlink``. Dense, ``dp = ep = 1``: every term is SPEC §3's.

The formula is written once, in plain arithmetic, so that it runs both on numpy arrays (the
vectorized form over a grid of configurations) and inside numba kernels (the scalar form
:func:`step_time_nb`, which takes the packed parameter vector of :func:`step_params`).

Sources: roofline model (Williams, Waterman, Patterson, CACM 2009); ring all-reduce alpha-beta cost
(Thakur, Rabenseifner, Gropp 2005); constants alpha = 0.43 us and eta = 0.85 fitted to the
lecture's TP8 figures (SPEC §3); expected distinct experts under uniform routing (SPEC §10);
expert parallelism with data-parallel attention as DeepSeek-V3 serves it (arXiv:2412.19437 §3.4)
and as vLLM (``--enable-expert-parallel``, EP = TP x DP) and SGLang (``--enable-dp-attention``) run it.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from numbers import Real

import numpy as np
from numba import njit

from .catalog import GPU, Model, Precision
from .errors import FastsimInputError
from .formulas import (MOE_DISPATCH, decode_attn_flops, dispatch_copies, ep_busiest_rank_factor, gemm_blend_nb, gemm_blend_s,  # noqa: F401
                       prefill_attn_flops)
from .layouts import LAYOUTS, instance_layout_refusal, layout_degrees, layout_refusal

__all__ = [
    "StepConstants", "resolve_constants", "step_params", "step_time", "step_parts", "step_time_nb", "kv_budget_tokens",
    "instance_layout_refusal", "layout_refusal", "layout_degrees", "LAYOUTS", "decode_attn_flops", "prefill_attn_flops", "P_MATMUL", "N_PARAMS", "STEP_FORMS", "class_compute",
    "PARAM_NAMES", "P_ETA_KV", "KV_MEMORY_RULES", "P_PP", "P_P2P_LAT", "P_P2P_S_PER_TOKEN", "stage_params",
    "stage_layers", "pp_refusal", "pipeline_round_params", "P_REQ_OVERHEAD", "P_OVERHEAD_SEQ", "p2p_time", "PP_ACTIVATION_TENSORS",
    "P_GEMM_Q",
]

# Layout of the packed parameter vector (float64) passed to the kernels.
(P_MATMUL,        # active matmul parameters per token (compute)
 P_WBYTES,        # bytes per weight element
 P_TP,            # attention tensor-parallel degree (the all-reduce ring)
 P_HBM_BW,        # HBM bytes/s per GPU
 P_PEAK,          # peak FLOP/s per GPU at the precision
 P_KVPG,          # KV bytes per token on one GPU of an attention TP group (full context)
 P_LAYERS,        # transformer layers
 P_HIDDEN,        # hidden size (activation messages)
 P_NVLINK,        # link bandwidth of the attention TP group (bytes/s; slowest link it crosses)
 P_ETA_C, P_ETA_BW, P_ALPHA, P_ETA_NV, P_OVERHEAD,
 P_KV_BUDGET_TOKENS,  # KV tokens per instance (full-context tokens)
 P_NET_BW,        # scale-out bytes/s per GPU (KV transfer between instances)
 P_QDIM_PF,       # attention width of prefill tokens (Model.attn_dim_prefill)
 P_QDIM_DEC,      # attention width of decode tokens (Model.attn_dim_decode)
 P_WDENSE,        # dense matmul weight bytes read per GPU per step
 P_WEXP,          # routed-expert weight bytes held per GPU (read in the touched fraction)
 P_KFRAC,         # experts per token / routed experts (0 for a dense model)
 P_DP,            # data-parallel attention ranks
 P_GPUS,          # GPUs of the instance (G)
 P_N_AR,          # all-reduces per step
 P_N_A2A,         # MoE layers with a dispatch + combine all-to-all
 P_TOPK,          # copies of a token the all-to-all moves (experts per token under SPEC §10; StepConstants.moe_dispatch)
 P_EP_BW,         # link bandwidth of the expert group (bytes/s), x eta_nvlink / P_ETA_NV (eta_pcie: the ring's only)
 P_WINDOW,        # sliding window (tokens; 0 = none)
 P_SLIDE_FRAC,    # fraction of the layers that slide
 P_ETA_KV,        # achieved fraction of HBM bandwidth on the paged KV read (step model v2; SPEC §3: eta_bw)
 P_PP,            # pipeline stages of the instance (1: no pipeline parallelism); the vector is one stage's
 P_P2P_LAT,       # latency of this stage's activation send to the next stage (s; 0: none, the last stage)
 P_P2P_S_PER_TOKEN,  # seconds per token of that send (0: none)
 P_REQ_OVERHEAD,  # per-request time outside the GPU schedule, added to TTFT and E2E (s; StepConstants.request_overhead_s)
 P_OVERHEAD_SEQ,  # host time per sequence of a step (s; StepConstants.overhead_per_seq_s)
 P_CLASSES,       # 1.0: the step by kernel classes (StepConstants.step_form "classes"); 0.0: SPEC §3's roofline
 P_GEMM_Q,        # 1 / StepConstants.gemm_blend_p: the GEMM class's blend of read and compute (0.0: their max)
 ) = range(37)
N_PARAMS = 37
#: The parameters' names, in vector order (``PARAM_NAMES[P_TP] == "P_TP"``): errors name them.
PARAM_NAMES = ("P_MATMUL", "P_WBYTES", "P_TP", "P_HBM_BW", "P_PEAK", "P_KVPG", "P_LAYERS", "P_HIDDEN", "P_NVLINK",
               "P_ETA_C", "P_ETA_BW", "P_ALPHA", "P_ETA_NV", "P_OVERHEAD", "P_KV_BUDGET_TOKENS", "P_NET_BW",
               "P_QDIM_PF", "P_QDIM_DEC", "P_WDENSE", "P_WEXP", "P_KFRAC", "P_DP", "P_GPUS", "P_N_AR", "P_N_A2A",
               "P_TOPK", "P_EP_BW", "P_WINDOW", "P_SLIDE_FRAC", "P_ETA_KV", "P_PP", "P_P2P_LAT",
               "P_P2P_S_PER_TOKEN", "P_REQ_OVERHEAD", "P_OVERHEAD_SEQ", "P_CLASSES", "P_GEMM_Q")
assert len(PARAM_NAMES) == N_PARAMS and all(globals()[n] == i for i, n in enumerate(PARAM_NAMES))


#: The KV-pool sizing rules of :attr:`StepConstants.kv_memory`.
KV_MEMORY_RULES = ("spec", "vllm", "trtllm")
#: The forms of the step time of :attr:`StepConstants.step_form`.
STEP_FORMS = ("spec", "classes")


@dataclass(frozen=True)
class StepConstants:
    """Efficiencies and fixed costs of the step model (SPEC §3); all are calibratable.

    Attributes
    ----------
    eta_compute : float
        Achieved fraction of peak FLOP/s (MFU), default 0.6.
    eta_bw : float
        Achieved fraction of HBM bandwidth (MBU), default 0.8.
    alpha_s : float
        Per-hop latency of a ring all-reduce (s), default 0.43e-6.
    eta_nvlink : float
        Achieved fraction of NVLink bandwidth, default 0.85.
    overhead_s : float
        Fixed per-step overhead (s), default 1e-3 (CUDA graphs assumed).
    memory_utilization : float
        Fraction of HBM the engine may use (vLLM ``gpu_memory_utilization``), default 0.9.
    fp8_compute_factor, fp4_compute_factor : float
        Step model v2: the fraction of ``eta_compute`` a GEMM reaches on the FP8 (FP4) peak, so
        that an FP8 (FP4) step's compute efficiency is ``eta_compute x factor`` of that peak
        (default 1.0, SPEC §3's one efficiency for every precision). Low-precision GEMMs reach a
        smaller fraction of their peak than BF16 ones (scaling, de-quantisation and a tile shape
        tuned for the larger dtype: NVIDIA's published FP8 / FP4 GEMM throughput is below the
        datasheet's 2x / 4x of BF16); the factors are fitted to serving measurements
        (:func:`fastsim.validate.fit.fit_measurements`). ``eta_compute x factor`` must stay <= 1.
    eta_kv : float or None
        Step model v2: the achieved fraction of HBM bandwidth on the decode attention's KV read,
        or None (default) for ``eta_bw``'s (SPEC §3 reads KV and weights alike). A paged KV read
        gathers 16- to 64-token blocks scattered over the pool, one per sequence and layer, where a
        weight read streams contiguous matrices, and it reaches a smaller fraction of the bandwidth
        (Kwon et al., "Efficient Memory Management for LLM Serving with PagedAttention", SOSP
        2023, §7.2: the paged kernel's overhead over a contiguous read); fitted to serving
        measurements like the others.
    kv_memory : str
        How the KV pool is sized (:data:`KV_MEMORY_RULES`): ``"spec"`` (default, SPEC §3:
        ``G x memory_utilization x hbm_bytes - weights``), or an engine's own rule, which starts
        from the memory the driver reports (:attr:`fastsim.catalog.GPU.reported_hbm_bytes`), sets
        aside ``reserved_bytes_per_gpu`` and counts the embedding and LM head at BF16 under 8-bit
        and 4-bit weights (ModelOpt, compressed-tensors and vLLM's online FP8 leave them
        unquantised):

        - ``"vllm"`` (also SGLang's ``mem_fraction_static``): ``G x (memory_utilization x
          reported - reserved) - weights`` (vLLM ``gpu_memory_utilization`` bounds weights,
          activations and KV together: ``vllm/v1/worker/gpu_worker.py``,
          ``Worker.determine_available_memory``);
        - ``"trtllm"``: ``memory_utilization x (G x (reported - reserved) - weights)`` (TensorRT-LLM's
          ``kv_cache_config.free_gpu_memory_fraction`` is a fraction of the memory left free once
          the weights and runtime buffers are loaded: ``tensorrt_llm/_torch/pyexecutor/_util.py``,
          ``KvCacheCreator``).
    reserved_bytes_per_gpu : float
        Bytes per GPU the engine's activations, CUDA graphs and communication buffers hold
        outside the KV pool under an engine rule (default 0; ignored by ``"spec"``).
    request_overhead_s : float
        Step model v2: a request's time on the way into and out of the engine, outside the GPU's
        schedule (HTTP, tokenisation, detokenisation and streaming through the engine's API
        server), added to every request's TTFT and E2E as its client sees them; TPOT and ITL are
        unchanged, and so is the schedule (the API server runs beside the engine's GPU loop:
        vLLM's ``AsyncLLM`` front end, TensorRT-LLM's Triton or ``trtllm-serve`` front end).
        Default 0 (SPEC §3 has none). TensorRT-LLM's Triton path adds 6-10 ms of TTFT on 8B at
        the lightest load in its published tables; fitted per engine
        (:func:`fastsim.validate.fit.fit_measurements`).
    moe_compute_factor, moe_pad_fraction, moe_load_cv : float
        Step model v2, dimensionless; the defaults (1.0, 0, 0) give SPEC §10's figures to the bit.
        A mixture-of-experts layer's active expert FLOPs run at ``eta_compute x factor / ((1 + q E
        / k) x busiest)`` (folded into ``P_MATMUL``). ``moe_compute_factor`` (in (0, 1]): the
        grouped GEMMs' fraction of the dense efficiency, behind a router, a top-k and a permutation
        (Gale et al., "MegaBlocks", MLSys 2023, §3). ``moe_pad_fraction`` ``q``: each expert's
        ``n k / E`` rows run as whole 64- or 128-row tiles, ``1 + pad x E / (n k)`` taken at a loaded
        step as ``1 + q E / k`` (DeepGEMM aligns each expert's rows to its block M), so Qwen3-235B
        (``E / k`` = 16) pays more than Mixtral (4). ``moe_load_cv`` ``cv``: the coefficient of
        variation of an expert's routed tokens in a step; under expert parallelism over
        ``G`` ranks the step waits for the busiest rank, ``busiest =``
        :func:`fastsim.formulas.ep_busiest_rank_factor` ``= 1 + z_G cv sqrt(G / E)`` (its
        all-to-all receive too; DeepSeek-V3 report, arXiv:2412.19437, §3.4); 1 for tensor-sharded
        experts. All fitted per engine (:func:`fastsim.validate.fit.fit_measurements`).
    overhead_per_seq_s : float
        Step model v2: the engine's host time per sequence of a step (s), added to the step on
        top of ``overhead_s``: a step of ``n`` sequences (its decodes and its prompt pieces)
        costs ``overhead_s + n x overhead_per_seq_s`` besides its GPU time. The engine's CPU
        schedules, prepares inputs for, samples and detokenises each sequence of the batch
        every step, and with CUDA graphs hiding the launches that work grows with the batch:
        vLLM measured its host overhead at 62% of a Llama-3-8B step on an H100 before v0.6
        overlapped it ("vLLM v0.6.0: 2.7x Throughput Improvement and 5x Latency Reduction",
        vLLM blog, 2024-09-05), and TensorRT-LLM's published inter-token latency grows with load
        faster than its GPU time. Default 0 (SPEC §3 has one fixed overhead per step); fitted
        per engine (:func:`fastsim.validate.fit.fit_measurements`).
    overhead_per_layer_s : float
        Step model v2: fixed time per transformer layer of a step (s), added to ``overhead_s``
        (``P_OVERHEAD = overhead_s + layers x overhead_per_layer_s``; a pipeline stage counts its
        own layers). Even under CUDA graphs each of a layer's 10-15 kernels leaves a gap of a
        microsecond or more between launches on the stream, and a tensor-parallel layer waits
        twice for its peers' all-reduce, so a step's fixed time grows with the depth of the
        model: SPEC §4's ledger charges ``layers x kernels_per_layer x launch time`` for the same
        reason. Default 0 (SPEC §3 has one overhead per step); fitted per engine
        (:func:`fastsim.validate.fit.fit_measurements`).
    eta_pcie : float or None
        Step model v2: the all-reduce's (and a pipeline send's) fraction of the link bandwidth on
        GPUs whose TP link is PCIe (:attr:`fastsim.catalog.GPU.tp_link`), or None (default):
        ``eta_nvlink``'s. The ring crosses PCIe switches, host bridges and the CPU sockets' link,
        bounded by what the root complexes move: NCCL's all_reduce_perf on 8 (4) PCIe Gen5 RTX
        5090s reaches 28 (35) GB/s of bus bandwidth of 64 GB/s per direction (NVIDIA/nccl issue
        1639); fitted per engine (:func:`fastsim.validate.fit.fit_measurements` starts it at 0.5).
    step_form : str
        How the step's parts combine (:data:`STEP_FORMS`). ``"spec"`` (default, SPEC §3): one
        roofline over the whole step, ``max(weight read + KV read, GEMM FLOPs + attention FLOPs)``,
        as if the attention's KV read overlapped the GEMMs' compute. ``"classes"`` (step model v2):
        a roofline per kernel class, summed, ``max(weight read, GEMM compute) + max(KV read,
        attention compute)``: an engine runs a layer's GEMMs and its attention as separate
        kernels one after the other on the GPU's stream (vLLM's and TensorRT-LLM's decoder layer:
        QKV GEMM, attention kernel, output GEMM, MLP GEMMs), so a large decode batch pays its
        compute-bound GEMMs and its bandwidth-bound KV read in turn, not the larger of the two
        (per-operator times summed, as Vidur does: Agrawal et al., "Vidur: A Large-Scale
        Simulation Framework for LLM Inference", MLSys 2024, §4). The two forms agree when one
        side binds both classes (a small batch reads weights and KV; a prefill computes).
    gemm_blend_p : float or None
        Step model v2, under ``step_form`` ``"classes"`` only: the GEMM class's time is the p-norm
        of its weight read and its compute, ``(read^p + compute^p)^(1/p)``, with ``p`` this value
        (>= 1; 1 adds them), or None (default): their max, the roofline. A GEMM near the ridge
        reaches neither peak (tile and wave quantisation: :func:`fastsim.formulas.gemm_blend_s`,
        whose ``p`` = 1.23 is fitted to Vidur's H100 matmul profiles).
    moe_dispatch : str
        Step model v2: how an expert-parallel MoE layer moves its tokens (:data:`MOE_DISPATCH`), the
        copies of a token its all-to-all carries (:func:`fastsim.formulas.dispatch_copies`):
        ``"per_expert"`` (default, SPEC §10: one per routed expert, ``k``), ``"per_rank"`` (one per
        rank holding one of its experts: DeepEP) or ``"allgather"`` (every rank gets every token,
        ``G``: TensorRT-LLM's attention-DP MoE at an EP degree up to ``k``). Under ``"allgather"``
        the volume does not follow the routing, so the busiest rank's excess (``moe_load_cv``) does
        not enter it.
    """

    eta_compute: float = 0.6
    eta_bw: float = 0.8
    alpha_s: float = 0.43e-6
    eta_nvlink: float = 0.85
    overhead_s: float = 1e-3
    memory_utilization: float = 0.9
    fp8_compute_factor: float = 1.0
    fp4_compute_factor: float = 1.0
    eta_kv: float | None = None
    kv_memory: str = "spec"
    reserved_bytes_per_gpu: float = 0.0
    request_overhead_s: float = 0.0
    overhead_per_seq_s: float = 0.0
    moe_compute_factor: float = 1.0
    moe_pad_fraction: float = 0.0
    moe_load_cv: float = 0.0
    overhead_per_layer_s: float = 0.0
    step_form: str = "spec"
    eta_pcie: float | None = None
    gemm_blend_p: float | None = None
    moe_dispatch: str = "per_expert"

    def __post_init__(self):
        if self.moe_dispatch not in MOE_DISPATCH:
            raise FastsimInputError("moe_dispatch", self.moe_dispatch, "one of " + ", ".join(MOE_DISPATCH))
        if self.step_form not in STEP_FORMS:
            raise FastsimInputError("step_form", self.step_form, "one of " + ", ".join(STEP_FORMS))
        if self.kv_memory not in KV_MEMORY_RULES:
            raise FastsimInputError("kv_memory", self.kv_memory, "one of " + ", ".join(KV_MEMORY_RULES))
        if self.eta_kv is not None and not (isinstance(self.eta_kv, (int, float)) and 0.0 < self.eta_kv <= 1.0):
            raise FastsimInputError("eta_kv", self.eta_kv, "a fraction in (0, 1], or None (eta_bw's)")
        v = self.eta_pcie
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 < v <= 1.0):
            raise FastsimInputError("eta_pcie", self.eta_pcie, "a fraction in (0, 1], or None (eta_nvlink's)")
        v = self.gemm_blend_p
        if v is not None and (isinstance(v, bool) or not isinstance(v, Real) or not 1.0 <= v < np.inf):
            raise FastsimInputError("gemm_blend_p", v, "a finite exponent >= 1 (1: read + compute), or None (their max)")
        if v is not None and self.step_form != "classes":
            raise FastsimInputError("gemm_blend_p", v, "None under step_form 'spec' (it blends the GEMM class of "
                                    "step_form 'classes')")
        for f in fields(self):
            if f.name in ("eta_kv", "eta_pcie", "kv_memory", "step_form", "gemm_blend_p", "moe_dispatch"):
                continue
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, Real) or not (0.0 <= v < np.inf):    # NaN and inf fail too
                raise FastsimInputError(f.name, v, "a finite number >= 0")
        for name in ("eta_compute", "eta_bw", "eta_nvlink", "memory_utilization", "moe_compute_factor"):
            v = getattr(self, name)
            if not (0.0 < v <= 1.0):
                raise FastsimInputError(name, v, "a fraction in (0, 1]")
        for name in ("fp8_compute_factor", "fp4_compute_factor"):
            v = getattr(self, name)
            if not (0.0 < v and v * self.eta_compute <= 1.0):
                raise FastsimInputError(name, v, f"a factor > 0 with eta_compute ({self.eta_compute:g}) x factor <= 1")

    @property
    def kv_efficiency(self) -> float:
        """The KV read's fraction of HBM bandwidth (float): ``eta_kv``, or ``eta_bw`` when it is None."""
        return self.eta_bw if self.eta_kv is None else float(self.eta_kv)

    def link_efficiency(self, tp_link: str) -> float:
        """The all-reduce's fraction of a TP link's bandwidth: ``eta_pcie`` on PCIe when set, else ``eta_nvlink``.

        Parameters
        ----------
        tp_link : str
            :attr:`fastsim.catalog.GPU.tp_link`: ``"nvlink"`` or ``"pcie"``.

        Returns
        -------
        float
            In (0, 1]; exactly ``eta_nvlink`` (SPEC §3) on NVLink or with ``eta_pcie`` None.
        """
        return float(self.eta_pcie) if tp_link == "pcie" and self.eta_pcie is not None else self.eta_nvlink

    def compute_efficiency(self, flops_key: str) -> float:
        """The achieved fraction of a precision's peak FLOP/s: ``eta_compute``, times
        ``fp8_compute_factor`` / ``fp4_compute_factor`` for the FP8 / FP4 peaks (class docstring).

        Parameters
        ----------
        flops_key : str
            A precision's peak key (``bf16``, ``fp8``, ``fp4``; :attr:`fastsim.catalog.Precision.flops_key`).

        Returns
        -------
        float
            A fraction in (0, 1]; exactly ``eta_compute`` for BF16 and for factors of 1.0.
        """
        f = {"fp8": self.fp8_compute_factor, "fp4": self.fp4_compute_factor}.get(flops_key, 1.0)
        return self.eta_compute if f == 1.0 else self.eta_compute * f


def resolve_constants(constants, gpu: GPU, precision: Precision, tp: int = 0) -> StepConstants:
    """The step constants that apply to one GPU and precision.

    Parameters
    ----------
    constants : StepConstants or fastsim.calibrate.Calibration
        A :class:`StepConstants` applies to every GPU and precision and is returned as is; a
        calibration (any object with a ``step_constants(gpu_name, precision_name)`` method, see
        :class:`fastsim.calibrate.Calibration`) gives the constants fitted for the pair.
    gpu : GPU
    precision : Precision
    tp : int, default 0
        GPUs of the tensor-parallel group whose all-reduce the constants time (a calibration may
        hold all-reduce constants per group size); 0 = not a step (memory figures only).

    Returns
    -------
    StepConstants

    Raises
    ------
    FastsimInputError
        ``constants`` is neither.
    """
    if isinstance(constants, StepConstants):
        return constants
    get = getattr(constants, "step_constants", None)
    if get is None:
        raise FastsimInputError("constants", type(constants).__name__,
                                "a StepConstants or a fastsim.calibrate.Calibration")
    return get(gpu.name, precision.name, int(tp))


def _check_layout(model, gpu, gpus, dp, ep):
    for name, v in (("gpus", gpus), ("dp", dp), ("ep", ep)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= 4096:
            raise FastsimInputError(name, v, "an integer from 1 to 4096")
    why = instance_layout_refusal(model, gpu, int(gpus), int(dp), int(ep))
    if why:
        if dp == 1 and ep == 1:
            raise FastsimInputError("tp", gpus, why)
        raise FastsimInputError("instance layout", f"{gpus} GPUs, dp {dp}, ep {ep}", why)
    return int(gpus), int(dp), int(ep)


def expert_share(model: Model, gpus: int, ep: int) -> float:
    """Fraction of the routed experts' bytes one GPU holds (float): 1/G tensor-sharded, ceil(E/G)/E under EP
    (SPEC §10); 0 for a dense model. Inputs are not validated."""
    if not model.is_moe:
        return 0.0
    if ep > 1:
        return float(-(-model.n_experts // gpus)) / model.n_experts
    return 1.0 / gpus


def kv_budget_tokens(model: Model, precision: Precision, gpu: GPU, tp: int,
                     constants: StepConstants = StepConstants(), *, dp: int = 1, ep: int = 1) -> float:
    """Tokens of KV cache an instance can hold (SPEC §3, §10), may be <= 0 when the model does not fit.

    ``budget = G x mem_util x HBM bytes - dense params x weight_bytes x dp - routed-expert bytes
    held``; ``tokens = budget / (G x KV bytes per token per GPU / dp)`` (full-context tokens; a
    sliding-window model holds :meth:`Model.kv_tokens_held` of them per sequence). For a dense
    model with ``dp = 1`` this is SPEC §3's ``(TP x 0.9 x HBM - params x bytes) / (TP x KV per GPU)``.

    Parameters
    ----------
    model : Model
    precision : Precision
        Gives the weight and KV bytes per element.
    gpu : GPU
        Gives the HBM capacity (bytes).
    tp : int
        GPUs of the instance (G; the TP degree when ``dp = 1``). Not validated here.
    constants : StepConstants or fastsim.calibrate.Calibration
        Gives ``memory_utilization`` (a calibration: its constants for ``gpu`` and ``precision``).
    dp, ep : int
        Data-parallel attention ranks and expert-parallel degree (see :func:`step_params`).

    Returns
    -------
    float
        KV tokens per instance (not rounded; <= 0 when the weights alone do not fit). A quantised
        checkpoint's weights count at its own bytes per weight (:meth:`Model.served_precision`).

    Raises
    ------
    FastsimInputError
        ``precision`` is not a quantised checkpoint's own (:meth:`Model.served_precision`).
    """
    precision = model.served_precision(precision)      # a quantised checkpoint's own bytes per weight
    constants = resolve_constants(constants, gpu, precision)
    g = tp
    tp_attn = g // dp
    routed = model.routed_expert_params * precision.weight_bytes * (expert_share(model, g, ep) * g)
    dense = model.total_params - model.routed_expert_params
    emb = model.vocab * model.hidden * (1 if model.tied_embeddings else 2)
    return _stage_kv_tokens(model, precision, gpu, g, constants, dp, dense, routed, emb,
                            model.kv_bytes_per_token_per_gpu(precision.kv_bytes, tp_attn))


def _link_bw(gpu: GPU, group: int) -> float:
    """Bandwidth per GPU of a group: NVLink inside one node, else the slowest link crossed (SPEC §10)."""
    if group <= getattr(gpu, "gpus_per_node", 8):
        return gpu.nvlink_bw_bytes_per_s
    return min(gpu.nvlink_bw_bytes_per_s, gpu.network_bw_bytes_per_s)


def _fixed_overhead_s(constants, layers) -> float:
    """``P_OVERHEAD`` of a step over ``layers`` layers (s): ``overhead_s + layers x overhead_per_layer_s``.

    Exactly ``overhead_s`` when the per-layer time is 0 (SPEC §3's figures to the bit).
    """
    if not constants.overhead_per_layer_s:
        return constants.overhead_s
    return constants.overhead_s + layers * constants.overhead_per_layer_s


def _moe_extra_params(model, moe_layers, constants, busiest) -> float:
    """Parameters added to ``P_MATMUL`` so that ``moe_layers`` layers' active experts run at
    ``moe_compute_factor / ((1 + moe_pad_fraction x E / k) x busiest)`` of the compute efficiency
    (``busiest``: :func:`_busiest`): ``moe_layers x experts_per_token x expert_params x (slow / factor - 1)``;
    exactly 0.0 for a dense model or a factor and a load of 1.0 and a fraction of 0 (SPEC §10 to the bit)."""
    f, q = constants.moe_compute_factor, constants.moe_pad_fraction
    if not model.is_moe or (f == 1.0 and q == 0.0 and busiest == 1.0) or moe_layers <= 0:
        return 0.0
    slow = (1.0 + q * model.n_experts / model.experts_per_token) * busiest
    return float(moe_layers) * model.experts_per_token * model.expert_params * (slow / f - 1.0)


def _busiest(model, ep, constants) -> float:
    """The busiest EP rank's load over the mean (:func:`fastsim.formulas.ep_busiest_rank_factor`); 1.0 for a dense model."""
    return ep_busiest_rank_factor(model.n_experts, ep, constants.moe_load_cv) if model.is_moe else 1.0


def step_params(model: Model, gpu: GPU, precision: Precision, tp: int,
                constants: StepConstants = StepConstants(), *, dp: int = 1, ep: int = 1, pp: int = 1) -> np.ndarray:
    """Pack one instance's constants into the vector the kernels read (SPEC §3, §10).

    Parameters
    ----------
    model : Model
    gpu : GPU
    precision : Precision
    tp : int
        GPUs of the instance (G), 1 to 4096; the tensor-parallel degree when ``dp = 1``.
    constants : StepConstants or fastsim.calibrate.Calibration
        Efficiencies, all-reduce latency, per-step overhead and memory utilisation (a calibration:
        its constants for ``gpu`` and ``precision``, :func:`resolve_constants`).
    dp : int, keyword-only
        Data-parallel attention ranks (default 1); attention TP = ``tp / dp``. MoE models with
        ``ep = tp`` only (DeepSeek-V3's serving layout).
    ep : int, keyword-only
        1 (routed experts tensor-sharded over the G GPUs) or ``tp`` (expert parallelism).
    pp : int, keyword-only
        Pipeline stages (default 1); with ``pp > 1`` ``tp`` is the GPUs of one stage and the vector
        is the slowest stage's (the most matmul parameters per token, the first of equals) of
        :func:`stage_params`, whose rows the simulator runs.

    Returns
    -------
    ndarray(float64) of shape (N_PARAMS,)
        Indexed by the ``P_*`` constants of this module; ``P_KV_BUDGET_TOKENS`` holds
        :func:`kv_budget_tokens` (may be <= 0 when the model does not fit: infeasible, not an
        error).

    Raises
    ------
    FastsimInputError
        A GPU count, ``dp`` or ``ep`` outside 1..4096; a layout :func:`instance_layout_refusal`
        refuses (e.g. an attention TP that does not divide the heads); a precision the GPU has
        no peak for; a precision other than a quantised checkpoint's own
        (:meth:`Model.served_precision`, whose bytes per weight are then the checkpoint's).
    """
    g, dp, ep = _check_layout(model, gpu, tp, dp, ep)
    precision = model.served_precision(precision)      # a quantised checkpoint's own bytes per weight
    constants = resolve_constants(constants, gpu, precision, g // dp)
    if precision.flops_key not in gpu.peak_flops_per_s:
        raise FastsimInputError("precision", precision.name,
                                f"a precision {gpu.name} has a peak for: {', '.join(gpu.peak_flops_per_s)}")
    tp_attn = g // dp
    wb = precision.weight_bytes
    p, busiest = np.empty(N_PARAMS, dtype=np.float64), _busiest(model, ep, constants)
    p[P_MATMUL] = model.active_matmul_params + _moe_extra_params(model, model.moe_layers, constants, busiest)
    p[P_WBYTES] = wb
    p[P_TP] = tp_attn
    p[P_HBM_BW] = gpu.hbm_bw_bytes_per_s
    p[P_PEAK] = gpu.peak_flops_per_s[precision.flops_key]
    p[P_KVPG] = model.kv_bytes_per_token_per_gpu(precision.kv_bytes, tp_attn)
    p[P_LAYERS] = model.layers
    p[P_HIDDEN] = model.hidden
    p[P_NVLINK] = _link_bw(gpu, tp_attn)
    p[P_ETA_C] = constants.compute_efficiency(precision.flops_key)
    p[P_ETA_BW] = constants.eta_bw
    p[P_ALPHA] = constants.alpha_s
    p[P_ETA_NV] = constants.link_efficiency(gpu.tp_link)
    p[P_OVERHEAD] = _fixed_overhead_s(constants, model.layers)
    p[P_KV_BUDGET_TOKENS] = kv_budget_tokens(model, precision, gpu, g, constants, dp=dp, ep=ep)
    p[P_NET_BW] = gpu.network_bw_bytes_per_s
    p[P_QDIM_PF] = model.attn_dim_prefill
    p[P_QDIM_DEC] = model.attn_dim_decode
    p[P_WDENSE] = model.dense_matmul_params * wb / tp_attn
    p[P_WEXP] = model.routed_expert_params * wb * expert_share(model, g, ep)
    p[P_KFRAC] = model.experts_per_token / model.n_experts if model.is_moe else 0.0
    p[P_DP] = dp
    p[P_GPUS] = g
    moe_ar = 2 if ep == 1 else 1
    p[P_N_AR] = 2 * (model.layers - model.moe_layers) + moe_ar * model.moe_layers
    p[P_N_A2A] = model.moe_layers if ep > 1 else 0
    # the copies of a token the dispatch moves (StepConstants.moe_dispatch; k under SPEC §10)
    p[P_TOPK] = (dispatch_copies(model.n_experts, model.experts_per_token, ep, constants.moe_dispatch)
                 if model.is_moe and ep > 1 else model.experts_per_token)
    # all-to-all at eta_nvlink (eta_pcie is the ring's), received by the busiest EP rank (an
    # AllGather's volume does not follow the routing)
    p[P_EP_BW] = _link_bw(gpu, g) * (constants.eta_nvlink / p[P_ETA_NV]) / (
        1.0 if constants.moe_dispatch == "allgather" else busiest)
    p[P_WINDOW] = model.sliding_window
    p[P_SLIDE_FRAC] = model.sliding_fraction
    p[P_ETA_KV] = constants.kv_efficiency
    p[P_PP] = 1.0
    p[P_P2P_LAT] = 0.0
    p[P_P2P_S_PER_TOKEN] = 0.0
    p[P_REQ_OVERHEAD] = constants.request_overhead_s
    p[P_OVERHEAD_SEQ] = constants.overhead_per_seq_s
    p[P_CLASSES] = 1.0 if constants.step_form == "classes" else 0.0
    p[P_GEMM_Q] = 0.0 if constants.gemm_blend_p is None else 1.0 / float(constants.gemm_blend_p)
    if pp != 1:
        return _bottleneck(stage_params(model, gpu, precision, g, constants, pp=pp, dp=dp, ep=ep))
    return p


#: Activation tensors a stage sends the next one per token, each ``hidden`` BF16 elements: vLLM's
#: ``IntermediateTensors`` of ``hidden_states`` and ``residual`` (``vllm/model_executor/models/llama.py``,
#: ``LlamaModel.forward``), split over the stage's TP ranks and gathered on the receiving side
#: (``vllm/distributed/parallel_state.py``, ``GroupCoordinator.send_tensor_dict``, ``all_gather_group``).
PP_ACTIVATION_TENSORS = 2


def stage_layers(layers: int, pp: int) -> tuple:
    """Layers of each pipeline stage, vLLM's default partition.

    ``layers // pp`` each; the remainder goes one layer each to the stages before the last, from
    the second-to-last backwards (the last stage also runs the final norm and the LM head):
    ``vllm/distributed/utils.py``, ``get_pp_indices``. 61 layers in 2 stages: ``(31, 30)``; in 4:
    ``(15, 15, 16, 15)``.

    Parameters
    ----------
    layers : int
        Transformer layers, >= 1.
    pp : int
        Pipeline stages, 1 to ``layers``.

    Returns
    -------
    tuple of int
        ``pp`` layer counts, summing to ``layers``, each >= 1.

    Raises
    ------
    FastsimInputError
        ``pp`` not an integer from 1 to ``layers`` (a stage without layers).
    """
    if isinstance(pp, bool) or not isinstance(pp, (int, np.integer)) or not 1 <= pp <= layers:
        raise FastsimInputError("pp", pp, f"an integer from 1 to the model's {layers} layers (a stage needs a layer)")
    base, rem = divmod(int(layers), int(pp))
    parts = [base] * int(pp)
    for i in range(2, rem + 2):
        parts[-i] += 1
    return tuple(parts)


def pp_refusal(model: Model, gpu: GPU, tp: int, pp: int) -> str | None:
    """Why a TP x PP instance cannot serve a model, or None when it can (pipeline parallelism).

    Parameters
    ----------
    model : Model
    gpu : GPU
        Gives ``gpus_per_node``.
    tp : int
        GPUs of one stage.
    pp : int
        Pipeline stages (1: no pipeline, never refused here).

    Returns
    -------
    str or None
        A sentence: more stages than layers; a stage's TP group larger than a node (the engines
        keep TP inside a node and put the stages across nodes); a sliding-window model whose
        stages (:func:`stage_layers`) cannot each hold a whole number of its sliding layers at
        the model's share (fastsim knows how many layers slide, not which: each stage is given
        the model's share, which must come to whole layers).
    """
    if pp == 1:
        return None
    if not 1 <= pp <= model.layers:
        return f"{pp} pipeline stages for {model.name}'s {model.layers} layers (a stage needs a layer)"
    gpn = int(getattr(gpu, "gpus_per_node", 8))
    if tp > gpn:
        return (f"a stage of {tp} GPUs spans nodes: at most the {gpn} GPUs of one {gpu.name} node under pipeline "
                "parallelism (each stage's TP group stays inside a node)")
    if model.sliding_layers and not _whole_sliding(model, pp):
        sizes = sorted(set(stage_layers(model.layers, pp)))
        ok = [k for k in range(1, model.layers + 1) if _whole_sliding(model, k)]
        return (f"{pp} stages give {model.name} stages of {' and '.join(map(str, sizes))} layers, which cannot "
                f"each keep its share of sliding-window layers ({model.sliding_layers} of {model.layers}) in "
                f"whole layers; pipeline stages that can: {', '.join(map(str, ok))}")
    return None


def _whole_sliding(model: Model, pp: int) -> bool:
    """Whether every stage of ``pp`` holds a whole number of the model's sliding layers at its share."""
    for n in set(stage_layers(model.layers, pp)):
        x = n * model.sliding_layers / model.layers
        if abs(x - round(x)) > 1e-9:
            return False
    return True


def _bottleneck(stages: np.ndarray) -> np.ndarray:
    """The stage that does the most matmul work per token (the first of equals): the pipeline's slowest.

    Its per-step overhead is not weighed: with step model v2's ``overhead_per_layer_s`` a stage of
    one layer more but no LM head can be slower at small batches (Llama-3.1-70B at PP3, stages of
    27/27/26 layers, the shipped TensorRT-LLM fit: 6.60 ms picked against 6.63 ms, 0.5%), which the
    analytic screen's figure does not see; the simulator runs every stage.
    """
    return stages[int(np.argmax(stages[:, P_MATMUL]))].copy()


def stage_params(model: Model, gpu: GPU, precision: Precision, tp: int,
                 constants: StepConstants = StepConstants(), *, pp: int, dp: int = 1, ep: int = 1) -> np.ndarray:
    """Step parameters of each pipeline stage of a TP x PP instance (pipeline parallelism).

    An instance of ``tp x pp`` GPUs runs its layers in ``pp`` stages of :func:`stage_layers` layers,
    each stage tensor-parallel over ``tp`` GPUs of one node (the engines keep a TP group inside a
    node: vLLM, SGLang and TensorRT-LLM place consecutive ranks by TP first). A stage's vector is
    :func:`step_params`' of a model made of its own layers: its dense and routed-expert weights,
    its layers' KV bytes per token per GPU and all-reduces, its ``P_LAYERS``; the dense layers are
    taken to be the model's first ``layers - moe_layers`` (DeepSeek's ``first_k_dense_replace``).
    The LM head (and the final norm) is the last stage's, the input embedding the first's (memory
    only: a lookup is not a matmul); a model with tied embeddings holds a copy on both, as vLLM's
    stages do. Every stage but the last sends its activations to the next
    (:data:`PP_ACTIVATION_TENSORS` x ``hidden`` BF16 values per token, split over its ``tp`` GPUs)
    at the bandwidth of the boundary: NVLink when both stages are in one node
    (``gpu.gpus_per_node``), else the scale-out network, with the all-reduce's per-hop latency
    ``alpha_s``; :func:`step_time` adds it as ``P_P2P_LAT + n_tokens x P_P2P_S_PER_TOKEN``. Each
    stage pays the fixed per-step overhead (its own forward, graph launch and hand-off).

    Memory: every stage holds the KV of every running sequence for its layers, so the instance's
    KV budget (``P_KV_BUDGET_TOKENS``, the same in every row) is the smallest of the stages' own
    budgets (:func:`kv_budget_tokens`' rule applied to the stage's weights and KV per token).

    Parameters
    ----------
    model, gpu, precision, constants
        As in :func:`step_params`.
    tp : int
        GPUs of one stage (its tensor-parallel group; with ``dp`` > 1, ``tp / dp`` per attention
        rank), at most ``gpu.gpus_per_node``.
    pp : int, keyword-only
        Pipeline stages, 1 to ``model.layers``.
    dp, ep : int, keyword-only
        As in :func:`step_params`, inside each stage.

    Returns
    -------
    ndarray(float64) of shape (pp, N_PARAMS)
        Row ``s`` is stage ``s``'s vector, ``P_PP = pp`` in each; ``pp = 1`` gives
        :func:`step_params`' vector as its one row.

    Raises
    ------
    FastsimInputError
        What :func:`step_params` raises; ``pp`` outside 1..layers; a stage's TP group larger than
        a node when ``pp > 1``.
    """
    stages = stage_layers(model.layers, pp)
    base = step_params(model, gpu, precision, tp, constants, dp=dp, ep=ep)
    if pp == 1:
        return base[None, :].copy()
    why = pp_refusal(model, gpu, int(tp), int(pp))
    if why:
        raise FastsimInputError("tp" if int(tp) > int(getattr(gpu, "gpus_per_node", 8)) else "pp",
                                tp if int(tp) > int(getattr(gpu, "gpus_per_node", 8)) else pp, why)
    gpn = int(getattr(gpu, "gpus_per_node", 8))
    g = int(tp)
    served = model.served_precision(precision)
    constants_ = resolve_constants(constants, gpu, served, g // dp)
    wb = served.weight_bytes
    L, Lm = int(model.layers), int(model.moe_layers)
    Ld = L - Lm
    k = model.experts_per_token if model.is_moe else 0
    dense_layer = model.layer_params
    moe_dense = (model.moe_layer_params - model.n_experts * model.expert_params) if model.is_moe else 0.0
    moe_active = moe_dense + k * model.expert_params if model.is_moe else 0.0
    # what the layers do not hold: the LM head (and final norm) of the last stage, as the model counts it
    head_active = model.active_matmul_params - (Ld * dense_layer + Lm * moe_active)
    head_dense = model.dense_matmul_params - (Ld * dense_layer + Lm * moe_dense)
    emb = float(model.vocab * model.hidden)
    tp_attn = g // dp
    share = expert_share(model, g, ep)
    kv_layer = base[P_KVPG] / L
    moe_ar, busiest = (2 if ep == 1 else 1), _busiest(model, ep, constants_)   # MoE all-reduces, busiest EP rank: as step_params
    out = np.empty((len(stages), N_PARAMS), dtype=np.float64)
    a = 0
    for s, n in enumerate(stages):
        nd = max(0, min(a + n, Ld) - a)
        nm = n - nd
        last = s == len(stages) - 1
        act = nd * dense_layer + nm * moe_active + (head_active if last else 0.0) + _moe_extra_params(
            model, nm, constants_, busiest)
        dense = nd * dense_layer + nm * moe_dense + (head_dense if last else 0.0)
        routed = nm * model.n_experts * model.expert_params if model.is_moe else 0.0
        row = base.copy()
        row[P_MATMUL] = act
        row[P_LAYERS] = n
        row[P_OVERHEAD] = _fixed_overhead_s(constants_, n)
        row[P_KVPG] = kv_layer * n
        row[P_WDENSE] = dense * wb / tp_attn
        row[P_WEXP] = routed * wb * share
        row[P_N_AR] = 2 * nd + moe_ar * nm
        row[P_N_A2A] = nm if ep > 1 else 0
        # the first stage also holds the input embedding; the last one's LM head is in ``dense``
        # (with tied embeddings a copy of the same matrix)
        held_dense = dense + (emb if s == 0 else 0.0)
        row[P_PP] = len(stages)
        if last:
            row[P_P2P_LAT] = 0.0
            row[P_P2P_S_PER_TOKEN] = 0.0
        else:
            end = (s + 1) * g          # the first GPU of the next stage
            bw = gpu.nvlink_bw_bytes_per_s if (end - 1) // gpn == end // gpn else \
                min(gpu.nvlink_bw_bytes_per_s, gpu.network_bw_bytes_per_s)
            row[P_P2P_LAT] = constants_.alpha_s
            row[P_P2P_S_PER_TOKEN] = PP_ACTIVATION_TENSORS * model.hidden * 2.0 / tp_attn / (constants_.link_efficiency(gpu.tp_link) * bw)
        bf16 = emb * ((s == 0) + last)
        row[P_KV_BUDGET_TOKENS] = _stage_kv_tokens(model, served, gpu, g, constants_, dp, held_dense,
                                                    routed * wb * (share * g), bf16, row[P_KVPG])
        out[s] = row
        a += n
    out[:, P_KV_BUDGET_TOKENS] = out[:, P_KV_BUDGET_TOKENS].min()
    return out


def _stage_kv_tokens(model, precision, gpu, g, constants, dp, dense_params, routed, bf16_params, kvpg):
    """KV tokens the memory of ``g`` GPUs holds after their weights (:func:`kv_budget_tokens`' rule, for
    an instance or one pipeline stage): ``dense_params`` held ``dp`` times, ``routed`` expert bytes,
    ``bf16_params`` the embedding and LM head, which the engine rules keep at BF16."""
    wb = precision.weight_bytes
    u = constants.memory_utilization
    if constants.kv_memory == "spec":
        budget = g * u * gpu.hbm_bytes - dense_params * wb * dp - routed
    else:
        extra = bf16_params * (2.0 - wb) * dp if wb < 2.0 and not model.checkpoint_precision else 0.0
        weights = dense_params * wb * dp + routed + extra
        rep, res = gpu.reported_hbm_bytes, constants.reserved_bytes_per_gpu
        if constants.kv_memory == "vllm":
            budget = g * (u * rep - res) - weights
        else:
            budget = u * (g * (rep - res) - weights)
    return budget / (g * kvpg / dp)


def pipeline_round_params(p) -> np.ndarray:
    """The steady-state pipeline round of a PP stage as one step vector (the analytic screen's closed form).

    With ``S = p[P_PP]`` equal stages kept busy by ``S`` micro-batches of ``b / S`` sequences each
    (vLLM's virtual engines, TensorRT-LLM's micro-batches), a sequence gets one token per round of
    ``S x stage(b / S)``: the bottleneck stage runs every micro-batch once. For a dense model the
    stage's roofline terms are linear in the tokens and KV of the step, so that round is
    :func:`step_time` of this vector at the whole batch ``b``: the stage's weight bytes, per-step
    overhead, link latencies (all-reduce hops, the stage send) taken ``S`` times, the rest as is
    (the per-sequence host time too: ``S`` micro-batches of ``b / S`` sequences are ``b``).
    For a MoE model the touched experts are counted at ``b`` tokens, not ``S`` times at ``b / S``
    (fewer weight bytes: an optimistic weight read). The pipeline's fill and drain (the bubble,
    ``(S - 1) / (M + S - 1)`` of the time with ``M`` micro-batches) and uneven stages are the
    simulator's (:class:`fastsim.sim.PipelinePlan`), not this screen's.

    Parameters
    ----------
    p : ndarray(float64) of shape (N_PARAMS,) or (n, N_PARAMS)
        Stage vectors (:func:`step_params` with ``pp``); rows with ``P_PP <= 1`` are returned unchanged.

    Returns
    -------
    ndarray(float64), the shape of ``p``
        A copy.
    """
    q = np.array(p, dtype=np.float64, copy=True)
    s = np.maximum(q[..., P_PP], 1.0)
    for col in (P_WDENSE, P_WEXP, P_OVERHEAD, P_ALPHA, P_P2P_LAT):
        q[..., col] = q[..., col] * s
    return q


def p2p_time(p, n_tokens):
    """Time of a stage's activation send to the next stage (s): ``P_P2P_LAT + n_tokens x P_P2P_S_PER_TOKEN``.

    Parameters
    ----------
    p : ndarray(float64) of shape (N_PARAMS,) or (n, N_PARAMS)
        Stage vectors (:func:`stage_params`); 0 for a vector without a send.
    n_tokens : float or ndarray(float64)
        Tokens of the micro-batch.

    Returns
    -------
    float or ndarray(float64)
        Seconds, the broadcast shape.
    """
    p = np.asarray(p, dtype=np.float64)
    return _p2p([p[..., i] for i in range(N_PARAMS)], n_tokens)


def _parts(c, n_tokens, kv_tokens, attn_flops):
    # c: the packed parameters, indexable by P_* (a float64 vector, or a list of column arrays)
    d_bw = c[P_ETA_BW] * c[P_HBM_BW]
    weight_s = (c[P_WDENSE] + c[P_WEXP] * (1.0 - (1.0 - c[P_KFRAC]) ** n_tokens)) / d_bw
    kv_s = kv_tokens * c[P_KVPG] / c[P_DP] / (c[P_ETA_KV] * c[P_HBM_BW])
    compute_s = (2.0 * c[P_MATMUL] * n_tokens + attn_flops) / c[P_GPUS] / (c[P_ETA_C] * c[P_PEAK])
    tp = c[P_TP]
    g = c[P_GPUS]
    ar_s = c[P_N_AR] * (2.0 * (tp - 1.0) * c[P_ALPHA]
                        + 2.0 * (tp - 1.0) / tp * (n_tokens / c[P_DP] * c[P_HIDDEN] * 2.0) / (c[P_ETA_NV] * c[P_NVLINK]))
    a2a_s = c[P_N_A2A] * 2.0 * ((g - 1.0) * c[P_ALPHA]
                                + (g - 1.0) / g * (n_tokens * c[P_TOPK] / g * c[P_HIDDEN] * 2.0) / (c[P_ETA_NV] * c[P_EP_BW]))
    return weight_s, kv_s, compute_s, ar_s, a2a_s


def _p2p(c, n_tokens):
    return c[P_P2P_LAT] + n_tokens * c[P_P2P_S_PER_TOKEN]


def step_parts(p, n_tokens, kv_tokens, attn_flops):
    """The parts of a step, vectorized (numpy broadcasting over configurations; SPEC §3, §10).

    Roofline terms (Williams, Waterman, Patterson 2009), a ring all-reduce alpha-beta cost
    (Thakur, Rabenseifner, Gropp 2005) and the expert-parallel all-to-alls; see the module
    docstring. Inputs are not validated.

    Parameters
    ----------
    p : ndarray(float64) of shape (N_PARAMS,) or (n, N_PARAMS)
        Packed parameters from :func:`step_params` (stacked for a grid).
    n_tokens, kv_tokens, attn_flops : float or ndarray(float64), broadcastable against ``p[..., 0]``
        New tokens in the step, cached tokens read (full-context equivalent), attention FLOPs.

    Returns
    -------
    tuple of ndarray(float64)
        ``(weight_read_s, kv_read_s, compute_s, allreduce_s, alltoall_s)``, seconds
        (``alltoall_s`` is 0 without expert parallelism).
    """
    p = np.asarray(p, dtype=np.float64)
    return _parts([p[..., i] for i in range(N_PARAMS)], n_tokens, kv_tokens, attn_flops)


def step_time(p, n_tokens, kv_tokens, attn_flops, n_seqs):
    """Step time in seconds, vectorized: ``max(weight + KV, compute) + all-reduce + all-to-all + overhead`` (SPEC §3).

    Under :attr:`StepConstants.step_form` ``"classes"`` (``P_CLASSES`` 1.0, step model v2) the
    roofline is taken per kernel class and summed: ``max(weight, GEMM compute) + max(KV,
    attention compute)`` (:func:`class_compute`; Vidur, Agrawal et al., MLSys 2024, §4: the
    operators' times add); with ``P_GEMM_Q`` > 0 (:attr:`StepConstants.gemm_blend_p`) the GEMM
    class's max is :func:`fastsim.formulas.gemm_blend_s`' p-norm.

    The overhead is ``overhead_s + n_seqs x overhead_per_seq_s`` (step model v2's host time per
    sequence, :attr:`StepConstants.overhead_per_seq_s`; 0 under SPEC §3, whose step times this
    gives bit for bit).

    Inputs are not validated.

    Parameters
    ----------
    p : ndarray(float64) of shape (N_PARAMS,) or (n, N_PARAMS)
        Packed parameters from :func:`step_params` (stacked for a grid).
    n_tokens, kv_tokens, attn_flops : float or ndarray(float64), broadcastable against ``p[..., 0]``
        New tokens in the step, cached tokens read, attention FLOPs (as in :func:`step_parts`).
    n_seqs : float or ndarray(float64), broadcastable likewise
        Sequences in the step: its decodes and its prompt pieces (a lone prefill is 1).

    Returns
    -------
    ndarray(float64)
        Seconds per step, shape of the broadcast inputs (a 0-d value for scalar inputs).
    """
    p = np.asarray(p, dtype=np.float64)
    w, kv, comp, ar, a2a = step_parts(p, n_tokens, kv_tokens, attn_flops)
    roof = np.maximum(w + kv, comp)
    classes = p[..., P_CLASSES] != 0.0
    if np.any(classes):
        gemm, attn = class_compute(p, n_tokens, attn_flops)
        roof = np.where(classes, gemm_blend_s(w, gemm, p[..., P_GEMM_Q]) + np.maximum(kv, attn), roof)
    return (roof + (ar + a2a) + p2p_time(p, n_tokens) + p[..., P_OVERHEAD]
            + p[..., P_OVERHEAD_SEQ] * n_seqs)


def _class_compute(c, n_tokens, attn_flops):
    # the kernels' operations in their order: (x / G) / (eta_c x peak)
    d = c[P_ETA_C] * c[P_PEAK]
    return 2.0 * c[P_MATMUL] * n_tokens / c[P_GPUS] / d, attn_flops / c[P_GPUS] / d


def class_compute(p, n_tokens, attn_flops):
    """The compute time of a step's two kernel classes, vectorized: ``(gemm_s, attention_s)``.

    ``2 x P_MATMUL x n_tokens`` and ``attn_flops`` FLOPs over the instance's GPUs at
    ``eta_compute x peak`` (:attr:`StepConstants.step_form` ``"classes"``; their sum is
    :func:`step_parts`' ``compute_s`` up to rounding). Inputs are not validated (nothing is
    raised). Formula: SPEC §3's compute term split by kernel class (docs/STEP_MODEL.md,
    ``step_form``).

    Parameters
    ----------
    p : ndarray(float64) of shape (N_PARAMS,) or (n, N_PARAMS)
    n_tokens, attn_flops : float or ndarray(float64), broadcastable against ``p[..., 0]``

    Returns
    -------
    tuple of ndarray(float64)
        Seconds.
    """
    p = np.asarray(p, dtype=np.float64)
    return _class_compute([p[..., i] for i in range(N_PARAMS)], n_tokens, attn_flops)


_parts_nb = njit(cache=True, inline="always")(_parts)
_class_compute_nb = njit(cache=True, inline="always")(_class_compute)
_p2p_nb = njit(cache=True, inline="always")(_p2p)


@njit(cache=True)
def step_time_nb(p, n_tokens, kv_tokens, attn_flops, n_seqs):
    """Scalar step time for kernels; same formula and float operations as :func:`step_time` (SPEC §3).

    Inputs are not validated (a numba kernel: it raises nothing).

    Parameters
    ----------
    p : ndarray(float64) of shape (N_PARAMS,)
        Packed parameters from :func:`step_params`.
    n_tokens, kv_tokens, attn_flops : float64
        New tokens in the step, cached tokens read, attention FLOPs.
    n_seqs : float64
        Sequences in the step (its decodes and prompt pieces).

    Returns
    -------
    float64
        Seconds.
    """
    w, kv, comp, ar, a2a = _parts_nb(p, n_tokens, kv_tokens, attn_flops)
    if p[P_CLASSES] != 0.0:
        gemm, attn = _class_compute_nb(p, n_tokens, attn_flops)
        a = gemm_blend_nb(w, gemm, p[P_GEMM_Q]) + (kv if kv >= attn else attn)
    else:
        a = w + kv
        a = a if a >= comp else comp
    return a + (ar + a2a) + _p2p_nb(p, n_tokens) + p[P_OVERHEAD] + p[P_OVERHEAD_SEQ] * n_seqs
