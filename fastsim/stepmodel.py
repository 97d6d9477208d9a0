"""Roofline step-time model of one forward pass of one instance (SPEC section 3).

For a step that processes ``n_tokens`` new tokens and reads ``kv_tokens`` cached tokens on TP GPUs::

    weight read = matmul_params x weight_bytes / TP / (eta_bw x HBM bytes/s)
    KV read     = kv_tokens x KV bytes per token per GPU / (eta_bw x HBM bytes/s)
    compute     = (2 x matmul_params x n_tokens + attention FLOPs) / TP / (eta_compute x peak FLOP/s)
    all-reduce  = 2 x layers x [2 (p-1) alpha + 2 (p-1)/p x n_tokens x hidden x 2 B / (eta_nvlink x NVLink B/s)]
    step        = max(weight read + KV read, compute) + all-reduce + fixed overhead

The formula is written once, in plain arithmetic, so that it runs both on numpy arrays (the
vectorized form over a grid of configurations) and inside numba kernels (the scalar form
:func:`step_time_nb`, which takes the packed parameter vector of :func:`step_params`).

Sources: roofline model (Williams, Waterman, Patterson, CACM 2009); ring all-reduce alpha-beta cost
(Thakur, Rabenseifner, Gropp 2005); constants alpha = 0.43 us and eta = 0.85 fitted to the
lecture's TP8 figures (SPEC §3).
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
from numba import njit

from .catalog import GPU, Model, Precision
from .errors import FastsimInputError, require_tp

__all__ = [
    "StepConstants", "step_params", "step_time", "step_parts", "step_time_nb",
    "decode_attn_flops", "prefill_attn_flops", "P_MATMUL", "N_PARAMS",
]

# Layout of the packed parameter vector (float64) passed to the kernels.
P_MATMUL, P_WBYTES, P_TP, P_HBM_BW, P_PEAK, P_KVPG, P_LAYERS, P_HIDDEN, P_NVLINK, \
    P_ETA_C, P_ETA_BW, P_ALPHA, P_ETA_NV, P_OVERHEAD, P_KV_BUDGET_TOKENS, P_NET_BW = range(16)
N_PARAMS = 16


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
    """

    eta_compute: float = 0.6
    eta_bw: float = 0.8
    alpha_s: float = 0.43e-6
    eta_nvlink: float = 0.85
    overhead_s: float = 1e-3
    memory_utilization: float = 0.9

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if not (v >= 0.0) or v != v:
                raise FastsimInputError(f.name, v, "a finite number >= 0")
        for name in ("eta_compute", "eta_bw", "eta_nvlink", "memory_utilization"):
            v = getattr(self, name)
            if not (0.0 < v <= 1.0):
                raise FastsimInputError(name, v, "a fraction in (0, 1]")


def kv_budget_tokens(model: Model, precision: Precision, gpu: GPU, tp: int,
                     constants: StepConstants = StepConstants()) -> float:
    """Tokens of KV cache an instance can hold (SPEC §3), may be <= 0 when the model does not fit.

    ``budget = TP x mem_util x HBM bytes - total_params x weight_bytes``;
    ``tokens = budget / (TP x KV bytes per token per GPU)``.

    Parameters
    ----------
    model : Model
    precision : Precision
        Gives the weight and KV bytes per element.
    gpu : GPU
        Gives the HBM capacity (bytes).
    tp : int
        Tensor-parallel degree (not validated here).
    constants : StepConstants
        Gives ``memory_utilization``.

    Returns
    -------
    float
        KV tokens per instance (not rounded; <= 0 when the weights alone do not fit).
    """
    budget = tp * constants.memory_utilization * gpu.hbm_bytes - model.total_params * precision.weight_bytes
    return budget / (tp * model.kv_bytes_per_token_per_gpu(precision.kv_bytes, tp))


def step_params(model: Model, gpu: GPU, precision: Precision, tp: int,
                constants: StepConstants = StepConstants()) -> np.ndarray:
    """Pack one instance's constants into the vector the kernels read (SPEC §3).

    Parameters
    ----------
    model : Model
    gpu : GPU
    precision : Precision
    tp : int
        Tensor-parallel degree: a power of two from 1 to 64.
    constants : StepConstants
        Efficiencies, all-reduce latency, per-step overhead and memory utilisation.

    Returns
    -------
    ndarray(float64) of shape (N_PARAMS,)
        Indexed by the ``P_*`` constants of this module; ``P_KV_BUDGET_TOKENS`` holds
        :func:`kv_budget_tokens` (may be <= 0 when the model does not fit: infeasible, not an
        error).

    Raises
    ------
    FastsimInputError
        TP not a power of two from 1 to 64, or a precision the GPU has no peak for.
    """
    tp = require_tp("tp", tp)
    if precision.flops_key not in gpu.peak_flops_per_s:
        raise FastsimInputError("precision", precision.name,
                                f"a precision {gpu.name} has a peak for: {', '.join(gpu.peak_flops_per_s)}")
    p = np.empty(N_PARAMS, dtype=np.float64)
    p[P_MATMUL] = model.matmul_params
    p[P_WBYTES] = precision.weight_bytes
    p[P_TP] = tp
    p[P_HBM_BW] = gpu.hbm_bw_bytes_per_s
    p[P_PEAK] = gpu.peak_flops_per_s[precision.flops_key]
    p[P_KVPG] = model.kv_bytes_per_token_per_gpu(precision.kv_bytes, tp)
    p[P_LAYERS] = model.layers
    p[P_HIDDEN] = model.hidden
    p[P_NVLINK] = gpu.nvlink_bw_bytes_per_s
    p[P_ETA_C] = constants.eta_compute
    p[P_ETA_BW] = constants.eta_bw
    p[P_ALPHA] = constants.alpha_s
    p[P_ETA_NV] = constants.eta_nvlink
    p[P_OVERHEAD] = constants.overhead_s
    p[P_KV_BUDGET_TOKENS] = kv_budget_tokens(model, precision, gpu, tp, constants)
    p[P_NET_BW] = gpu.network_bw_bytes_per_s
    return p


def decode_attn_flops(layers, hidden, context_tokens):
    """Attention FLOPs of decode tokens: ``4 x layers x context x hidden`` summed over tokens (SPEC §3).

    Parameters
    ----------
    layers, hidden : float or ndarray(float64)
        Transformer layers and hidden size.
    context_tokens : float or ndarray(float64)
        Context tokens attended to, summed over the decode tokens of the step.

    Returns
    -------
    float or ndarray(float64)
        FLOPs (whole model, before the division by TP), shape of the broadcast inputs.
    """
    return 4.0 * layers * hidden * context_tokens


def prefill_attn_flops(layers, hidden, chunk_tokens):
    """Causal attention FLOPs of a prefill chunk of c tokens: ``2 x layers x c^2 x hidden`` (SPEC §3).

    Parameters
    ----------
    layers, hidden : float or ndarray(float64)
        Transformer layers and hidden size.
    chunk_tokens : float or ndarray(float64)
        Prompt tokens in the chunk (c).

    Returns
    -------
    float or ndarray(float64)
        FLOPs (whole model, before the division by TP), shape of the broadcast inputs.
    """
    return 2.0 * layers * hidden * chunk_tokens * chunk_tokens


def _parts(matmul, wbytes, tp, hbm_bw, peak, kvpg, layers, hidden, nvlink, eta_c, eta_bw, alpha, eta_nv,
           n_tokens, kv_tokens, attn_flops):
    weight_s = matmul * wbytes / tp / (eta_bw * hbm_bw)
    kv_s = kv_tokens * kvpg / (eta_bw * hbm_bw)
    compute_s = (2.0 * matmul * n_tokens + attn_flops) / tp / (eta_c * peak)
    msg_bytes = n_tokens * hidden * 2.0
    comm_s = 2.0 * layers * (2.0 * (tp - 1.0) * alpha + 2.0 * (tp - 1.0) / tp * msg_bytes / (eta_nv * nvlink))
    return weight_s, kv_s, compute_s, comm_s


def step_parts(p, n_tokens, kv_tokens, attn_flops):
    """The four parts of a step, vectorized (numpy broadcasting over configurations; SPEC §3).

    Roofline terms (Williams, Waterman, Patterson 2009) and a ring all-reduce alpha-beta cost
    (Thakur, Rabenseifner, Gropp 2005), two all-reduces per layer; see the module docstring.
    Inputs are not validated.

    Parameters
    ----------
    p : ndarray(float64) of shape (N_PARAMS,) or (n, N_PARAMS)
        Packed parameters from :func:`step_params` (stacked for a grid).
    n_tokens, kv_tokens, attn_flops : float or ndarray(float64), broadcastable against ``p[..., 0]``
        New tokens in the step, cached tokens read, attention FLOPs.

    Returns
    -------
    tuple of ndarray(float64)
        ``(weight_read_s, kv_read_s, compute_s, allreduce_s)``, seconds.
    """
    p = np.asarray(p, dtype=np.float64)
    c = [p[..., i] for i in range(N_PARAMS)]
    return _parts(c[P_MATMUL], c[P_WBYTES], c[P_TP], c[P_HBM_BW], c[P_PEAK], c[P_KVPG], c[P_LAYERS],
                  c[P_HIDDEN], c[P_NVLINK], c[P_ETA_C], c[P_ETA_BW], c[P_ALPHA], c[P_ETA_NV],
                  n_tokens, kv_tokens, attn_flops)


def step_time(p, n_tokens, kv_tokens, attn_flops):
    """Step time in seconds, vectorized: ``max(weight + KV, compute) + all-reduce + overhead`` (SPEC §3).

    Inputs are not validated.

    Parameters
    ----------
    p : ndarray(float64) of shape (N_PARAMS,) or (n, N_PARAMS)
        Packed parameters from :func:`step_params` (stacked for a grid).
    n_tokens, kv_tokens, attn_flops : float or ndarray(float64), broadcastable against ``p[..., 0]``
        New tokens in the step, cached tokens read, attention FLOPs (as in :func:`step_parts`).

    Returns
    -------
    ndarray(float64)
        Seconds per step, shape of the broadcast inputs (a 0-d value for scalar inputs).
    """
    p = np.asarray(p, dtype=np.float64)
    w, kv, comp, comm = step_parts(p, n_tokens, kv_tokens, attn_flops)
    return np.maximum(w + kv, comp) + comm + p[..., P_OVERHEAD]


_parts_nb = njit(cache=True, inline="always")(_parts)


@njit(cache=True)
def step_time_nb(p, n_tokens, kv_tokens, attn_flops):
    """Scalar step time for kernels; same formula and float operations as :func:`step_time` (SPEC §3).

    Inputs are not validated (a numba kernel: it raises nothing).

    Parameters
    ----------
    p : ndarray(float64) of shape (N_PARAMS,)
        Packed parameters from :func:`step_params`.
    n_tokens, kv_tokens, attn_flops : float64
        New tokens in the step, cached tokens read, attention FLOPs.

    Returns
    -------
    float64
        Seconds.
    """
    w, kv, comp, comm = _parts_nb(p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10],
                                  p[11], p[12], n_tokens, kv_tokens, attn_flops)
    a = w + kv
    return (a if a >= comp else comp) + comm + p[13]
