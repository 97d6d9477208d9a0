"""The ledger of one speculative-decoding round (SPEC section 4; lecture 16 exercise 9).

A round is ``gamma`` decode steps of the draft plus one verify step of the target over
``gamma + 1`` tokens per sequence, each a :func:`fastsim.ledger_step.ledger` step; it yields
:func:`fastsim.formulas.speculative_tokens_per_round` tokens per sequence (Leviathan, Kalman,
Matias, ICML 2023, eq. 1). The ladder's level 5 is such a round. :mod:`fastsim.ledger`
re-exports :class:`SpeculativeResult` and :func:`speculative_step`.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from .errors import require_tp
from .formulas import _int_at_least, speculative_tokens_per_round
from .ledger_step import (KERNELS_PER_LAYER_FUSED, LAUNCH_S_GRAPHS, LedgerResult, _check_launch, _core, _lookup,
                          _result, _within_context, ledger, memory_per_gpu)
from .specdec import MTP, mtp_model
from .stepmodel import StepConstants, decode_attn_flops, step_params

__all__ = ["SpeculativeResult", "speculative_step"]

class SpeculativeResult(NamedTuple):
    """One round of speculative decoding (see :func:`speculative_step`).

    Attributes
    ----------
    draft : LedgerResult
        One draft-model decode step (the round runs ``gamma`` of them).
    verify : LedgerResult
        The target model's verify step over ``gamma + 1`` tokens per sequence.
    round_s : float
        ``gamma x draft.step_s + verify.step_s`` (s).
    tokens_per_round : float
        Expected output tokens per sequence per round, :func:`speculative_tokens_per_round`.
    tokens_per_s_per_gpu : float
        ``batch x tokens_per_round / round_s / TP``.
    memory_per_gpu_bytes : float
        HBM per GPU of both models together: both models' weights / TP plus both KV caches of
        ``batch x context`` tokens.
    memory_limit_per_gpu_bytes : float
        ``memory_utilization x HBM``.
    fits : bool
        ``memory_per_gpu_bytes <= memory_limit_per_gpu_bytes``.
    """

    draft: LedgerResult
    verify: LedgerResult
    round_s: float
    tokens_per_round: float
    tokens_per_s_per_gpu: float
    memory_per_gpu_bytes: float
    memory_limit_per_gpu_bytes: float
    fits: bool


def _is_mtp(draft) -> bool:
    return isinstance(draft, str) and draft.strip().lower() == MTP


def speculative_step(model, draft_model, gpu, precision, tp: int, *, batch: int = 1,
                     context_tokens: int = 4096, acceptance: float = 0.8, gamma: int = 4,
                     kernels_per_layer: int = KERNELS_PER_LAYER_FUSED, launch_s: float = LAUNCH_S_GRAPHS,
                     constants: StepConstants = StepConstants()) -> SpeculativeResult:
    """Ledger of one speculative-decoding round (SPEC §4, lecture 16 exercise 9).

    A round is ``gamma`` decode steps of the draft model (same precision, same TP group, batch
    ``b``, KV of ``b x context``) plus one verify step of the target over ``gamma + 1`` tokens per
    sequence: ``n_tokens = b (gamma + 1)``, KV read of ``b x context``, attention of
    ``b (gamma + 1)`` tokens at ``context``. It yields ``b x`` :func:`speculative_tokens_per_round`
    tokens. The context growth within a round (at most ``gamma`` tokens) is neglected.

    Parameters
    ----------
    model, draft_model : str or Model
        Target and draft models. ``draft_model`` ``"mtp"`` is a one-layer multi-token-prediction
        / EAGLE-style head of the target (:func:`fastsim.specdec.mtp_model`): its step is one
        decoder layer of the target plus the output head, and its memory is that layer and the
        ``2 hidden x hidden`` projection (the embedding and output head are the target's own).
        The projection's read is not added to the draft step (under 10% of it for DeepSeek-V3).
    gpu, precision : str or catalog entry
    tp : int
        Tensor parallelism shared by both models (power of two, 1..64).
    batch, context_tokens : int
        As in :func:`ledger`.
    acceptance : float, default 0.8
        Per-token acceptance probability, in [0, 1).
    gamma : int, default 4
        Draft tokens per round, >= 1.
    kernels_per_layer, launch_s, constants
        As in :func:`ledger`, for both models.

    Returns
    -------
    SpeculativeResult
        With the memory check of both models on the same GPUs (``fits``).

    Raises
    ------
    FastsimInputError
        As :func:`ledger`, and for ``acceptance`` outside [0, 1) or ``gamma`` < 1.

    References
    ----------
    Leviathan, Kalman, Matias, "Fast Inference from Transformers via Speculative Decoding",
    ICML 2023.
    """
    tpr = speculative_tokens_per_round(acceptance, gamma)
    g_ = int(gamma)
    m = _lookup("model", model)
    mtp = _is_mtp(draft_model)
    d = mtp_model(m) if mtp else _lookup("model", draft_model)
    gp, pr = _lookup("gpu", gpu), _lookup("precision", precision)
    tp = require_tp("tp", tp)
    b = _int_at_least("batch", batch, 1)
    ctx = _within_context("context_tokens", _int_at_least("context_tokens", context_tokens, 0), m)
    kpl, ls = _check_launch(kernels_per_layer, launch_s)
    draft = ledger(d, gp, pr, tp, batch=b, context_tokens=ctx, kernels_per_layer=kpl, launch_s=ls,
                   constants=constants)
    if mtp:
        # the head shares the target's embedding and output head (no memory of its own) and adds
        # the 2 hidden x hidden projection of DeepSeek-V3 §2.2 (fastsim.specdec.mtp_model)
        shared = d.vocab * d.hidden * (1 if d.tied_embeddings else 2)
        extra = (2.0 * d.hidden * d.hidden - shared) * pr.weight_bytes / tp
        draft = draft._replace(memory_per_gpu_bytes=draft.memory_per_gpu_bytes + extra)
    p = step_params(m, gp, pr, tp, constants)
    n = float(b * (g_ + 1))
    held = float(b * m.kv_tokens_held(ctx))
    # the verify step's sequences are the batch's b (their gamma + 1 tokens each): its host time
    verify = _result(_core(p, n, held, decode_attn_flops(m.layers, m.attn_dim_decode, n * m.kv_tokens_held(ctx)),
                           kpl, ls, math.nan, float(b))
                     | memory_per_gpu(m, gp, pr, tp, held, constants))
    round_s = g_ * draft.step_s + verify.step_s
    used = verify.memory_per_gpu_bytes + draft.memory_per_gpu_bytes    # both models, both caches
    limit = verify.memory_limit_per_gpu_bytes
    return SpeculativeResult(draft=draft, verify=verify, round_s=round_s, tokens_per_round=tpr,
                             tokens_per_s_per_gpu=b * tpr / round_s / tp, memory_per_gpu_bytes=used,
                             memory_limit_per_gpu_bytes=limit, fits=bool(used <= limit))

