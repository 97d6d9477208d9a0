"""Speculative decoding: the configuration, the draft model's step parameters and the round time.

A speculative-decoding round (Leviathan, Kalman, Matias, ICML 2023) drafts ``gamma`` tokens per
sequence with a cheap draft model, ``gamma`` decode steps of the draft, then verifies them in one
forward pass of the target over ``gamma + 1`` tokens per sequence. With each draft token accepted
independently with probability ``alpha`` a round yields ``(1 - alpha^(gamma+1)) / (1 - alpha)``
tokens per sequence (3.36 at ``alpha = 0.8, gamma = 4``; SPEC §4). The decode cost of one output
token is then ``round time / tokens per round``.

The draft shares the target's GPUs (same GPU, precision and tensor-parallel group, SPEC §4): its
weights and its KV cache take HBM the target's KV cache would otherwise have. A draft is either

* a catalog model (``SpecDecoding.draft`` is its name): a smaller model of the target's family,
  Llama-3.1-8B for Llama-3.1-70B and -405B (SPEC §4; Chen et al., "Accelerating Large Language
  Model Decoding with Speculative Sampling", 2023, draft Chinchilla 4B for Chinchilla 70B); or
* ``"mtp"``: a one-layer head on the target, as DeepSeek-V3's multi-token-prediction module
  (DeepSeek-V3 technical report, arXiv:2412.19437 §2.2: each MTP module is "a shared embedding
  layer, a shared output head, a Transformer block and a projection matrix M in R^(d x 2d)", its
  inputs the RMS-normalised hidden state and token embedding) and EAGLE's one-layer draft head
  (Li et al., ICML 2024). fastsim models it as one more decoder layer of the target (a MoE layer
  for a MoE target, with all its experts in memory), plus the ``2 hidden x hidden`` projection and
  two input RMSNorms; it holds one layer of KV per token; the embedding and the output head are the
  target's own (no memory), but every draft step still reads and multiplies the output head
  (``vocab x hidden``). The layer attends over the full context unless every layer of the target
  slides (then over the target's window). It drafts ``gamma`` tokens autoregressively, one step
  per token, as EAGLE does.

What the model leaves out (stated so that nobody mistakes it for a measurement): the draft's own
prefill of the prompt (one layer for an MTP head; for a separate draft about its size ratio of the
target's prefill, 11% for 8B / 70B); the context growth of at most ``gamma`` tokens within a round;
tree drafting; a lower acceptance at high temperature (``alpha`` is the user's figure).
"""
from __future__ import annotations

import math
import re
from dataclasses import replace
from numbers import Integral, Real
from typing import NamedTuple

import numpy as np

from .catalog import GPU, Catalog, Model, Precision, default_catalog
from .errors import FastsimInputError
from .formulas import speculative_tokens_per_round
from .stepmodel import (N_PARAMS, P_DP, P_GPUS, P_KV_BUDGET_TOKENS, P_LAYERS, P_MATMUL, P_QDIM_DEC, P_SLIDE_FRAC,
                        P_WDENSE, P_WINDOW, StepConstants, decode_attn_flops, expert_share, resolve_constants,
                        instance_layout_refusal, step_params, step_time)

__all__ = ["SpecDecoding", "MTP", "DRAFT_MAX_PARAM_FRACTION", "spec_decoding", "default_draft", "model_family",
           "mtp_model", "draft_model", "spec_refusal", "spec_step_params", "expected_tokens_per_round",
           "round_time_s"]

#: Name of the one-layer multi-token-prediction / EAGLE-style head of the target.
MTP = "mtp"

#: A catalog model is a default draft only if its total parameters are at most this fraction of the
#: target's. A round costs ``gamma x c + 1`` target steps for ``c`` = draft / target step cost: at
#: ``c = 1/4``, ``gamma = 4`` and ``alpha = 0.8`` it yields 3.36 tokens for 2 steps' time (1.7x),
#: at ``c = 1/2`` only 1.1x. A choice of fastsim, not a published constant; Llama-3.1-8B is 11% of
#: 70B and 2% of 405B.
DRAFT_MAX_PARAM_FRACTION = 0.25

_SIZE = re.compile(r"-(\d+(\.\d+)?[bm]|\d+x\d+(\.\d+)?[bm])(-a\d+(\.\d+)?[bm])?$", re.IGNORECASE)


class SpecDecoding(NamedTuple):
    """A speculative-decoding configuration (build it with :func:`spec_decoding`, which checks it).

    Attributes
    ----------
    gamma : int
        Draft tokens per round (>= 1).
    alpha : float
        Per-token acceptance probability, in [0, 1).
    draft : str
        Catalog name (or ``config.json`` path) of the draft model, or :data:`MTP` for a one-layer
        multi-token-prediction / EAGLE-style head of the target.
    """

    gamma: int
    alpha: float
    draft: str


def model_family(name: str) -> str:
    """The family of a model name: the name without its size suffix (lower case).

    Parameters
    ----------
    name : str
        A model name, e.g. ``"llama-3.1-70b"``, ``"qwen3-235b-a22b"``, ``"mixtral-8x7b"``.

    Returns
    -------
    str
        ``"llama-3.1"``, ``"qwen3"``, ``"mixtral"``; a name without a size suffix
        (``"deepseek-v3"``) is its own family.
    """
    n = str(name).strip().lower()
    return _SIZE.sub("", n)


def _as_model(model, catalog: Catalog) -> Model:
    return model if isinstance(model, Model) else catalog.model(model)


def default_draft(model: Model | str, catalog: Catalog | None = None) -> str:
    """The draft a target gets when none is named.

    Rule: the smallest catalog model of the target's family (:func:`model_family`: the same name
    without its size suffix) with the target's vocabulary size (the draft proposes token ids the
    target scores, so both need one tokenizer; Leviathan et al. 2023 §2) whose total parameters
    are at most :data:`DRAFT_MAX_PARAM_FRACTION` of the target's; else :data:`MTP`. Built in:
    Llama-3.1-70B and -405B get ``llama-3.1-8b`` (SPEC §4), Qwen3-235B-A22B ``qwen3-30b-a3b``,
    gpt-oss-120b ``gpt-oss-20b``; the others (DeepSeek-V3 ships an MTP module) ``mtp``.

    Parameters
    ----------
    model : Model or str
        The target (a model or a catalog name / ``config.json`` path).
    catalog : Catalog, optional
        Where drafts are looked for; defaults to the built-in catalog.

    Returns
    -------
    str
        A catalog model name or ``"mtp"``.

    Raises
    ------
    FastsimInputError
        An unknown target name or an unreadable config.
    """
    catalog = catalog or default_catalog()
    m = _as_model(model, catalog)
    fam = model_family(m.name)
    best = None
    for name, cand in catalog.models.items():
        if cand.name == m.name or model_family(cand.name) != fam or cand.vocab != m.vocab:
            continue
        if cand.total_params > DRAFT_MAX_PARAM_FRACTION * m.total_params:
            continue
        if best is None or (cand.total_params, cand.name) < (best.total_params, best.name):
            best = cand
    return best.name if best is not None else MTP


def spec_decoding(gamma, alpha, draft: str | None = None, model: Model | str | None = None, *,
                  catalog: Catalog | None = None) -> SpecDecoding:
    """A checked :class:`SpecDecoding`.

    Parameters
    ----------
    gamma : int
        Draft tokens per round, an integer >= 1.
    alpha : float
        Per-token acceptance probability, in [0, 1).
    draft : str, optional
        ``"mtp"``, a catalog model name or a ``config.json`` path. None picks
        :func:`default_draft` of ``model``.
    model : Model or str, optional
        The target. Needed when ``draft`` is None; when given, a named draft must have its
        vocabulary size.
    catalog : Catalog, optional
        Resolves names; defaults to the built-in catalog.

    Returns
    -------
    SpecDecoding
        ``draft`` is ``"mtp"``, the catalog's name of the draft, or the path as given.

    Raises
    ------
    FastsimInputError
        ``gamma`` not an integer >= 1 (booleans refused); ``alpha`` not a number in [0, 1);
        ``draft`` not a string, an unknown draft name, a draft whose vocabulary size differs
        from the target's, a draft that is the target itself or has at least its parameters;
        ``draft`` and ``model`` both None.
    """
    if isinstance(gamma, bool) or not isinstance(gamma, (Integral, Real)) or not math.isfinite(float(gamma)) \
            or float(gamma) != int(gamma) or int(gamma) < 1:
        raise FastsimInputError("gamma", gamma, "an integer >= 1 (draft tokens per round)")
    if isinstance(alpha, bool) or not isinstance(alpha, Real) or not (0.0 <= float(alpha) < 1.0):
        raise FastsimInputError("alpha", alpha, "a probability in [0, 1) (per-token acceptance)")
    catalog = catalog or default_catalog()
    target = _as_model(model, catalog) if model is not None else None
    if draft is None:
        if target is None:
            raise FastsimInputError("draft", None, "'mtp', a catalog model name, or a target model to pick the "
                                                   "default draft for")
        name = default_draft(target, catalog)
    else:
        if not isinstance(draft, str) or not draft.strip():
            raise FastsimInputError("draft", draft, "'mtp' or a catalog model name / config.json path")
        if draft.strip().lower() == MTP:
            name = MTP
        else:
            d = catalog.model(draft.strip())
            name = d.name if _is_catalog_name(draft, catalog) else draft.strip()   # a path stays a path
            if target is not None:
                if d.vocab != target.vocab:
                    raise FastsimInputError("draft", draft, f"a model with {target.name}'s vocabulary of "
                                            f"{target.vocab:,} tokens (the draft proposes token ids the target "
                                            f"scores; {d.name} has {d.vocab:,}), or 'mtp'")
                if d.name == target.name:
                    raise FastsimInputError("draft", draft, f"a model other than the target {target.name}, or 'mtp'")
                if d.total_params >= target.total_params:
                    raise FastsimInputError("draft", draft, f"a model smaller than the target {target.name} "
                                            f"({target.total_params / 1e9:.1f}B parameters; {d.name} has "
                                            f"{d.total_params / 1e9:.1f}B), or 'mtp'")
    return SpecDecoding(int(gamma), float(alpha), name)


def _is_catalog_name(name: str, catalog: Catalog) -> bool:
    return any(k.lower() == name.strip().lower() for k in catalog.models)


def mtp_model(model: Model) -> Model:
    """The one-layer head of :data:`MTP` as a :class:`Model` (its step and KV; see the module docstring).

    Parameters
    ----------
    model : Model
        The target.

    Returns
    -------
    Model
        The target with one layer (a MoE layer for a MoE target), named ``"<target>+mtp"``;
        sliding only when every layer of the target slides. Its parameter counts include the
        embedding and output head, which the MTP head shares with the target:
        :func:`spec_step_params` adds the ``2 hidden^2`` projection and charges memory without them.
    """
    slide_all = model.sliding_window > 0 and model.sliding_layers == model.layers
    return replace(model, name=f"{model.name}+{MTP}", layers=1, moe_layers=1 if model.is_moe else 0,
                   sliding_window=model.sliding_window if slide_all else 0, sliding_layers=1 if slide_all else 0,
                   source=f"one decoder layer of {model.name} (MTP / EAGLE-style draft head)")


def draft_model(spec: SpecDecoding, model: Model, catalog: Catalog | None = None) -> Model:
    """The draft of ``spec`` as a :class:`Model` (:func:`mtp_model` for ``"mtp"``).

    Parameters
    ----------
    spec : SpecDecoding
    model : Model
        The target.
    catalog : Catalog, optional
        Resolves the draft name; defaults to the built-in catalog.

    Returns
    -------
    Model

    Raises
    ------
    FastsimInputError
        An unknown draft name.
    """
    if spec.draft == MTP:
        return mtp_model(model)
    return (catalog or default_catalog()).model(spec.draft)


def _projection_params(model: Model) -> float:
    """MTP: the ``M in R^(d x 2d)`` projection of the concatenated inputs (DeepSeek-V3 §2.2)."""
    return 2.0 * model.hidden * model.hidden


def _resident_bytes(m: Model, wb: float, g: int, dp: int, ep: int) -> float:
    """Weight bytes a model holds on an instance of g GPUs, as :func:`fastsim.stepmodel.kv_budget_tokens` counts them."""
    routed = m.routed_expert_params * wb * (expert_share(m, g, ep) * g)
    dense = m.total_params - m.routed_expert_params
    return dense * wb * dp + routed


def _draft_layout(d: Model, g: int, dp: int, ep: int) -> tuple:
    """(dp, ep) the draft runs with: the target's for a MoE draft; dense: TP over each of the dp ranks."""
    if d.is_moe:
        return dp, ep
    return dp, 1


def spec_refusal(model: Model, spec: SpecDecoding, gpu: GPU, tp: int, dp: int = 1, ep: int = 1,
                 catalog: Catalog | None = None) -> str | None:
    """Why the draft of ``spec`` cannot share an instance layout with the target, or None.

    Parameters
    ----------
    model : Model
        The target.
    spec : SpecDecoding
    gpu : GPU
    tp : int
        GPUs of the instance (G).
    dp, ep : int
        The target's data-parallel attention ranks and expert-parallel degree.
    catalog : Catalog, optional
        Resolves the draft name.

    Returns
    -------
    str or None
        A sentence naming the draft and what does not fit (e.g. a TP that does not divide the
        draft's attention heads), or None.

    Raises
    ------
    FastsimInputError
        An unknown draft name.
    """
    d = draft_model(spec, model, catalog)
    ddp, dep = _draft_layout(d, tp, dp, ep)
    why = instance_layout_refusal(d, gpu, tp, ddp, dep) if d.is_moe else d.tp_refusal(tp // dp)
    return f"speculative decoding: draft {d.name}: {why}" if why else None


def spec_step_params(model: Model | str, gpu: GPU | str, precision: Precision | str, tp: int,
                     constants: StepConstants, spec: SpecDecoding, *, dp: int = 1, ep: int = 1,
                     catalog: Catalog | None = None) -> tuple:
    """Step parameters of the target and of its draft sharing one instance (SPEC §3, §4, §10).

    ``p_target`` is :func:`fastsim.stepmodel.step_params` of the target with its KV budget cut
    for the draft: both models' weights are resident, and every token of a sequence is cached by
    both, so::

        tokens = (G x mem_util x HBM - target weights - draft weights)
                 / (G x target KV bytes per token per GPU / dp + G x draft KV bytes per token per GPU / dp)

    where the weights are counted as :func:`fastsim.stepmodel.kv_budget_tokens` counts them
    (dense weights once per data-parallel rank, routed experts as held). An MTP head holds one
    decoder layer, its projection and two RMSNorms (its embedding and output head are the
    target's); a catalog draft holds all its parameters. Without a draft this is exactly
    ``kv_budget_tokens``. The tokens may be <= 0: the pair does not fit, the screen refuses the
    plan (status NO_FIT), nothing is clipped.

    ``p_draft`` is the draft's vector on the same GPUs, precision and attention TP group: a MoE
    draft with the target's ``dp`` / ``ep``; a dense draft tensor-parallel over the ``G / dp`` GPUs
    of each data-parallel rank (replicated over the ``dp`` ranks, each rank drafting for its own
    sequences). An MTP head adds the ``2 hidden^2`` projection to its matmul parameters and dense
    weight read; its output-head read and multiply are in the one-layer model's. Its
    ``P_KV_BUDGET_TOKENS`` holds the same shared budget.

    Parameters
    ----------
    model : Model or str
        The target (or a catalog name / ``config.json`` path).
    gpu : GPU or str
    precision : Precision or str
        Of both models (weights and KV).
    tp : int
        GPUs of the instance (G), as in :func:`fastsim.stepmodel.step_params`.
    constants : StepConstants or fastsim.calibrate.Calibration
        Efficiencies, overhead and memory utilisation (both models; a calibration: its constants
        for ``gpu`` and ``precision``).
    spec : SpecDecoding
        Only ``spec.draft`` is used here.
    dp, ep : int, keyword-only
        The target's layout degrees (:func:`fastsim.stepmodel.layout_degrees`).
    catalog : Catalog, keyword-only, optional
        Resolves names; defaults to the built-in catalog.

    Returns
    -------
    (p_target, p_draft) : tuple of ndarray(float64) of shape (N_PARAMS,)
        Indexed by the ``P_*`` constants of :mod:`fastsim.stepmodel`.

    Raises
    ------
    FastsimInputError
        Anything :func:`fastsim.stepmodel.step_params` raises for the target; an unknown draft;
        a draft that cannot use the layout (:func:`spec_refusal`, e.g. a TP that does not
        divide its heads).
    """
    catalog = catalog or default_catalog()
    m = _as_model(model, catalog)
    g_ = gpu if isinstance(gpu, GPU) else catalog.gpu(gpu)
    pr = precision if isinstance(precision, Precision) else catalog.precision(precision)
    memory = resolve_constants(constants, g_, pr)      # a calibration's memory share for this GPU
    p_t = step_params(m, g_, pr, tp, constants, dp=dp, ep=ep)
    g, dp, ep = int(tp), int(dp), int(ep)
    why = spec_refusal(m, spec, g_, g, dp, ep, catalog)
    if why:
        raise FastsimInputError("spec_draft", spec.draft, why.split(": ", 2)[-1])
    d = draft_model(spec, m, catalog)
    tp_attn = g // dp
    wb = pr.weight_bytes
    if d.is_moe:
        p_d = step_params(d, g_, pr, g, constants, dp=dp, ep=ep)
        d_bytes = _resident_bytes(d, wb, g, dp, ep)
    else:
        p_d = step_params(d, g_, pr, tp_attn, constants)
        if dp > 1:               # one replica per data-parallel rank, each on its rank's GPUs
            p_d[P_DP] = dp
            p_d[P_GPUS] = g
        d_bytes = _resident_bytes(d, wb, g, dp, 1)
    if spec.draft == MTP:
        proj = _projection_params(m)
        p_d[P_MATMUL] += proj
        p_d[P_WDENSE] += proj * wb / tp_attn
        shared = m.vocab * m.hidden * (1 if m.tied_embeddings else 2)    # embedding and head: the target's
        d_bytes = d_bytes + (proj + 2.0 * m.hidden - shared) * wb * dp
    routed = m.routed_expert_params * wb * (expert_share(m, g, ep) * g)
    dense = m.total_params - m.routed_expert_params
    budget = g * memory.memory_utilization * g_.hbm_bytes - dense * wb * dp - routed - d_bytes
    per_token = (g * m.kv_bytes_per_token_per_gpu(pr.kv_bytes, tp_attn) / dp
                 + g * d.kv_bytes_per_token_per_gpu(pr.kv_bytes, tp_attn) / dp)
    tokens = budget / per_token
    p_t[P_KV_BUDGET_TOKENS] = tokens
    p_d[P_KV_BUDGET_TOKENS] = tokens
    return p_t, p_d


def expected_tokens_per_round(alpha: float, gamma: int) -> float:
    """Expected tokens per sequence per round, ``(1 - alpha^(gamma+1)) / (1 - alpha)`` (SPEC §4).

    :func:`fastsim.formulas.speculative_tokens_per_round` (Leviathan et al. 2023, eq. 1).

    Parameters
    ----------
    alpha : float
        Per-token acceptance probability, in [0, 1).
    gamma : int
        Draft tokens per round, >= 1.

    Returns
    -------
    float
        Tokens, in [1, gamma + 1); 3.36 at (0.8, 4).

    Raises
    ------
    FastsimInputError
        ``alpha`` outside [0, 1) or ``gamma`` not an integer >= 1.
    """
    return speculative_tokens_per_round(alpha, gamma)


def _held(p, ctx):
    """Full-context-equivalent KV tokens of a sequence of ``ctx`` tokens (``Model.kv_tokens_held``)."""
    w = p[..., P_WINDOW]
    return np.where((w > 0.0) & (ctx > w), ctx - p[..., P_SLIDE_FRAC] * (ctx - w), ctx)


def _params(field: str, p) -> np.ndarray:
    a = np.asarray(p, dtype=np.float64)
    if a.ndim not in (1, 2) or a.shape[-1] != N_PARAMS:
        raise FastsimInputError(field, f"array of shape {a.shape}", f"shape ({N_PARAMS},) or (n, {N_PARAMS}) "
                                "(fastsim.stepmodel.step_params)")
    return a


def round_time_s(p_target, p_draft, n_seqs, context_tokens, gamma: int):
    """Time of one speculative-decoding round of ``n_seqs`` sequences (s).

    ``gamma`` decode steps of the draft (``n_seqs`` tokens, KV of ``n_seqs x context``) plus one
    verify step of the target over ``n_seqs x (gamma + 1)`` tokens: KV read of ``n_seqs x
    context``, attention ``4 x layers x q_dim x (n_seqs (gamma + 1)) x context`` (SPEC §3, §4).
    ``context`` is taken as each model's full-context-equivalent tokens (sliding windows,
    SPEC §10). The float operations are those of :func:`fastsim.ledger.speculative_step`, whose
    steps count kernel launches instead of the fixed overhead: with ``P_OVERHEAD`` of each vector
    set to its model's ``layers x kernels per layer x launch time`` the two agree to the bit.
    ``gamma = 0`` is one plain decode step of the target.

    Parameters
    ----------
    p_target, p_draft : ndarray(float64) of shape (N_PARAMS,) or (n, N_PARAMS)
        From :func:`spec_step_params` (or :func:`fastsim.stepmodel.step_params`).
    n_seqs : float or ndarray(float64)
        Sequences in the round (the decode batch), broadcast against the vectors.
    context_tokens : float or ndarray(float64)
        Tokens per sequence (prompt + output so far).
    gamma : int
        Draft tokens per round, >= 0.

    Returns
    -------
    float or ndarray(float64)
        Seconds (a float for scalar inputs).

    Raises
    ------
    FastsimInputError
        A vector of the wrong shape; ``gamma`` not an integer >= 0.
    """
    pt, pd = _params("p_target", p_target), _params("p_draft", p_draft)
    if isinstance(gamma, bool) or not isinstance(gamma, Integral) or gamma < 0:
        raise FastsimInputError("gamma", gamma, "an integer >= 0 (draft tokens per round)")
    g = int(gamma)
    b = np.asarray(n_seqs, dtype=np.float64)
    ctx = np.asarray(context_tokens, dtype=np.float64)
    ct = _held(pt, ctx)
    kv = b * ct
    n = b * float(g + 1)
    out = step_time(pt, n, kv, decode_attn_flops(pt[..., P_LAYERS], pt[..., P_QDIM_DEC], n * ct), b)
    if g > 0:
        kvd = b * _held(pd, ctx)
        draft = step_time(pd, b, kvd, decode_attn_flops(pd[..., P_LAYERS], pd[..., P_QDIM_DEC], kvd), b)
        out = g * draft + out
    out = np.asarray(out, dtype=np.float64)
    return float(out) if out.ndim == 0 else out
