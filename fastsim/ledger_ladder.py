"""The optimization ladder: levels 0-5 of SPEC section 4 and a batch-1 control row (lecture 16 §1.3).

Levels 0-4 are decode steps of :func:`fastsim.ledger_step.ledger` (eager launches, CUDA graphs,
fusion, batching, FP8); level 5 a speculative-decoding round of
:func:`fastsim.ledger_spec.speculative_step`. Each row is priced with the SPEC section 1 cost
formula and :func:`fastsim.formulas.joules_per_token` (lecture 16 exercises 1, 9 and 10).
:func:`ladder_draft` picks level 5's draft as ``fastsim plan`` does. :mod:`fastsim.ledger`
re-exports both.
"""
from __future__ import annotations

from .catalog import GPU, Model, default_catalog
from .errors import FastsimInputError, require_tp
from .formulas import _int_at_least, _positive, joules_per_token, speculative_tokens_per_round
from .formulas import cost_usd_per_million_output_tokens as _array_cost
from .ledger_spec import _is_mtp, speculative_step
from .ledger_step import (KERNELS_PER_LAYER_EAGER, KERNELS_PER_LAYER_FUSED, LAUNCH_S_EAGER, LAUNCH_S_GRAPHS,
                          _lookup, _within_context, ledger)
from .specdec import MTP, default_draft, spec_decoding
from .stepmodel import StepConstants

__all__ = ["ladder", "ladder_draft"]

_LADDER = (
    # level, change, batch, precision, kernels per layer, launch s, speculative
    (0, "naive eager", 1, "BF16", KERNELS_PER_LAYER_EAGER, LAUNCH_S_EAGER, False),
    (1, "+ CUDA Graphs", 1, "BF16", KERNELS_PER_LAYER_EAGER, LAUNCH_S_GRAPHS, False),
    (2, "+ fusion", 1, "BF16", KERNELS_PER_LAYER_FUSED, LAUNCH_S_GRAPHS, False),
    (3, "+ batching", 64, "BF16", KERNELS_PER_LAYER_FUSED, LAUNCH_S_GRAPHS, False),
    (4, "+ FP8 weights and KV", 64, "FP8", KERNELS_PER_LAYER_FUSED, LAUNCH_S_GRAPHS, False),
    (5, "+ speculative decoding", 64, "FP8", KERNELS_PER_LAYER_FUSED, LAUNCH_S_GRAPHS, True),
    (5, "speculative decoding at batch 1 (control)", 1, "FP8", KERNELS_PER_LAYER_FUSED, LAUNCH_S_GRAPHS, True),
)
_CONTROL_ROW = len(_LADDER) - 1


def ladder_draft(model, draft_model=None, catalog=None) -> str:
    """The draft of the ladder's level 5, chosen and checked as ``fastsim plan`` / ``simulate`` do.

    Parameters
    ----------
    model : str or Model
        The target.
    draft_model : str, Model or None
        None picks :func:`fastsim.specdec.default_draft` (the smallest catalog model of the
        target's family with its vocabulary and at most a quarter of its parameters, else
        ``"mtp"``); ``"mtp"``; a catalog name, ``config.json`` path or :class:`Model`, which
        must have the target's vocabulary size, not be the target and be smaller than it.
    catalog : Catalog, optional
        Where drafts are looked up; defaults to the built-in catalog.

    Returns
    -------
    str or Model
        ``"mtp"``, a catalog model name, or ``draft_model`` itself when it is a Model or a path.

    Raises
    ------
    FastsimInputError
        An unknown draft, or one that :func:`fastsim.specdec.spec_decoding` refuses (another
        vocabulary, the target itself, not smaller than the target), field ``draft_model``.
    """
    cat = catalog or default_catalog()
    m = model if isinstance(model, Model) else cat.model(model)
    if draft_model is None:
        return default_draft(m, cat)
    if _is_mtp(draft_model):
        return MTP
    if isinstance(draft_model, Model):
        d = draft_model
        if d.vocab != m.vocab:
            why = (f"a model with {m.name}'s vocabulary of {m.vocab:,} tokens (the draft proposes token ids the target "
                   f"scores; {d.name} has {d.vocab:,}), or 'mtp'")
        elif d.name == m.name:
            why = f"a model other than the target {m.name}, or 'mtp'"
        elif d.total_params >= m.total_params:
            why = (f"a model smaller than the target {m.name} ({m.total_params / 1e9:.1f}B parameters; {d.name} has "
                   f"{d.total_params / 1e9:.1f}B), or 'mtp'")
        else:
            return d
        raise FastsimInputError("draft_model", d.name, why)
    try:
        name = spec_decoding(1, 0.5, draft_model, m, catalog=cat).draft
    except FastsimInputError as exc:
        if exc.field == "draft":
            raise FastsimInputError("draft_model", exc.value, exc.allowed) from None
        raise
    return name


def ladder(model="llama-3.1-70b", gpu="H100", tp: int = 8, context_tokens: int = 4096,
           price_usd_per_gpu_hour: float | None = None, power_w: float | None = None,
           draft_model=None, acceptance: float = 0.8, gamma: int = 4,
           constants: StepConstants = StepConstants(), catalog=None):
    """The optimization ladder: levels 0-5 of SPEC §4 and a batch-1 control row of level 5.

    ====  ============================  =====  =========  =============
    lvl   change                        batch  precision  launch
    ====  ============================  =====  =========  =============
    0     naive eager                   1      BF16       27 x 4 us
    1     + CUDA Graphs                 1      BF16       27 x 1 us
    2     + fusion                      1      BF16       12 x 1 us
    3     + batching                    64     BF16       12 x 1 us
    4     + FP8 weights and KV          64     FP8        12 x 1 us
    5     + speculative decoding        64     FP8        12 x 1 us
    5     control: level 5 at batch 1   1      FP8        12 x 1 us     (``control`` True)
    ====  ============================  =====  =========  =============

    Levels 0-4 are decode steps of :func:`ledger`; level 5 is a round of
    :func:`speculative_step` (``step_s`` is then the round time and ``tokens_per_step`` the
    expected tokens per sequence per round, 3.36 at ``a = 0.8, gamma = 4``).

    How close fastsim comes (70B, 8 x H100, TP8, context 4096, $2/GPU-hour, 700 W):

    =======================  ==========  ========  ==========================================
    figure                   lecture     fastsim   why it differs
    =======================  ==========  ========  ==========================================
    level 0 tokens/s/GPU     7.7 (a)     7.73      exact (16.16 ms step)
    level 2 tokens/s/GPU     15          14.7      exact step (8.48 ms); the lecture rounds
    level 3 tokens/s/GPU     591         607       +2.7%: step 13.18 ms vs 13.53 ms, all the
                                                   gap is the batch-64 all-reduce (1.73 vs
                                                   2.08 ms, SPEC §3). The overlapped step
                                                   max(weight + KV, compute) + all-reduce +
                                                   launch lands within 5% (so does it with
                                                   the planner's 1 ms overhead in place of
                                                   launches: 13.22 ms, 605, +2.4%); summing
                                                   compute instead of overlapping it gives
                                                   15.20 ms and 526 (-11%), outside 5%
    level 4 tokens/s/GPU     (none)      1,008     step 7.94 ms (weights and KV halve)
    level 5 tokens/s/GPU     1,261       1,393     +10%, from the same all-reduce gap: for
                                                   the verify step's 320 tokens (64 x 5)
                                                   fastsim's all-reduce gives 4.80 ms
                                                   where a line through the lecture's batch-1
                                                   and batch-64 figures gives 6.55 ms; with
                                                   that value level 5 reads 1,277 (+1.3%).
                                                   Round: 4 x 2.07 ms draft + 11.01 ms verify
    level 5 / level 0        163x        180x      +10%, from level 5 (level 0 is exact);
                                                   165x with the lecture's all-reduce line
    J/token at level 5       0.56        0.50      -10%, from level 5 (700 x 8 / (1393 x 8));
                                                   0.548 with the lecture's all-reduce line
    =======================  ==========  ========  ==========================================

    (a) implied by 1,261 / 163.

    Parameters
    ----------
    model, gpu : str or catalog entry
        Target model and GPU.
    tp : int, default 8
        Tensor parallelism (GPUs of the one instance), power of two.
    context_tokens : int, default 4096
        Cached tokens per sequence.
    price_usd_per_gpu_hour : float, optional
        Defaults to the GPU's catalog price.
    power_w : float, optional
        Defaults to the GPU's catalog board power.
    draft_model : str or Model, optional
        Draft model of level 5 (same precision, same TP group), chosen and checked by
        :func:`ladder_draft` as ``fastsim plan`` and ``simulate`` choose theirs: by default the
        smallest catalog model of the target's family with its vocabulary (Llama-3.1-70B and
        -405B: ``llama-3.1-8b``; Qwen3-235B-A22B: ``qwen3-30b-a3b``; gpt-oss-120b:
        ``gpt-oss-20b``), else ``"mtp"``, a one-layer multi-token-prediction head of the target
        (DeepSeek-V3); ``"mtp"`` may be named.
    acceptance : float, default 0.8
        Per-token acceptance probability of the draft, in [0, 1).
    gamma : int, default 4
        Draft tokens per round, >= 1.
    constants : StepConstants
    catalog : Catalog, optional
        Where the default draft is looked for (and draft names resolved); defaults to the
        built-in catalog.

    Returns
    -------
    pandas.DataFrame
        Seven rows. Columns: ``level`` (int64), ``control`` (bool: True only on the last row, the
        batch-1 control of level 5, so ``(level, control)`` names a row), ``change`` (str),
        ``draft`` (str: the draft model's name on the level-5 rows, ``"mtp"`` for the head, empty
        on levels 0-4),
        ``batch`` (int64), ``precision`` (str), ``kernels_per_layer`` (int64), ``launch_us``
        (float64, per launch), ``step_s`` (float64, s; a whole round at level 5),
        ``tokens_per_step`` (float64), ``tokens_per_s_per_gpu``, ``usd_per_million_tokens``
        (price x GPUs / tokens per hour x 1e6), ``joules_per_token`` (power x GPUs / tokens per
        s), ``speedup_vs_level0`` (float64), ``memory_per_gpu_bytes``,
        ``memory_limit_per_gpu_bytes`` (float64: weights / TP + KV of batch x context per GPU,
        both models at level 5, against ``memory_utilization x HBM``) and ``fits`` (bool). Rows
        that do not fit are computed all the same; their figures describe a setup that cannot
        run.

    Raises
    ------
    FastsimInputError
        Unknown names, TP not a power of two, ``context_tokens`` < 0 or past the model's context
        window, a GPU without an FP8 peak (levels 4 and 5 run in FP8), non-positive price or
        power, ``acceptance`` outside [0, 1), ``gamma`` < 1, a draft :func:`ladder_draft` refuses
        (another vocabulary: the draft proposes token ids the target scores).

    Notes
    -----
    Sources: SPEC §4; lecture 16 §1.3 and exercises 1, 9, 10; Leviathan et al. 2023 for the
    speculative round.
    """
    import pandas as pd

    cat = catalog or default_catalog()
    m = model if isinstance(model, Model) else cat.model(model)
    g = gpu if isinstance(gpu, GPU) else cat.gpu(gpu)
    choice = ladder_draft(m, draft_model, cat)
    d = choice if isinstance(choice, Model) else (MTP if choice == MTP else cat.model(choice))
    draft_name = MTP if choice == MTP else (choice if isinstance(choice, str) else d.name)
    tp = require_tp("tp", tp)
    ctx = _within_context("context_tokens", _int_at_least("context_tokens", context_tokens, 0), m)
    if d != MTP:
        _within_context("context_tokens", ctx, d)
    for prec in dict.fromkeys(row[3] for row in _LADDER):
        pr = _lookup("precision", prec)
        if pr.flops_key not in g.peak_flops_per_s:
            levels = ", ".join(str(lv) for lv in dict.fromkeys(row[0] for row in _LADDER if row[3] == prec))
            with_it = [x.name for x in default_catalog().gpus.values() if pr.flops_key in x.peak_flops_per_s]
            levels = " and ".join(levels.rsplit(", ", 1))
            peaks = ", ".join(k.upper() for k in g.peak_flops_per_s)
            raise FastsimInputError("gpu", g.name, f"a GPU with a peak for {pr.name}: the ladder's levels {levels} "
                                    f"run in {pr.name} and {g.name} has a peak for {peaks} only"
                                    + (f" (catalog GPUs that have one: {', '.join(with_it)})" if with_it else ""))
    price = g.price_usd_per_hour if price_usd_per_gpu_hour is None else _positive("price_usd_per_gpu_hour",
                                                                                    price_usd_per_gpu_hour)
    power = g.power_w if power_w is None else _positive("power_w", power_w)
    speculative_tokens_per_round(acceptance, gamma)      # validates before any work
    rows = []
    for i, (level, change, b, prec, kpl, ls, spec) in enumerate(_LADDER):
        pr = _lookup("precision", prec)
        if spec:
            r = speculative_step(m, d, g, pr, tp, batch=b, context_tokens=ctx, acceptance=acceptance,
                                 gamma=gamma, kernels_per_layer=kpl, launch_s=ls, constants=constants)
            step, per_step, tps = r.round_s, r.tokens_per_round, r.tokens_per_s_per_gpu
        else:
            r = ledger(m, g, pr, tp, batch=b, context_tokens=ctx, kernels_per_layer=kpl, launch_s=ls,
                       constants=constants)
            step, per_step, tps = r.step_s, 1.0, r.tokens_per_s_per_gpu
        # the cost formula of SPEC §1 with the instance's tokens/s as the rate, one token each
        rows.append(dict(level=level, control=i == _CONTROL_ROW, change=change, draft=draft_name if spec else "",
                         batch=b, precision=pr.name,
                         kernels_per_layer=kpl, launch_us=ls * 1e6, step_s=step, tokens_per_step=per_step,
                         tokens_per_s_per_gpu=tps,
                         usd_per_million_tokens=float(_array_cost(tp, price, tps * tp, 1.0)),
                         joules_per_token=joules_per_token(power, tp, tps),
                         memory_per_gpu_bytes=float(r.memory_per_gpu_bytes),
                         memory_limit_per_gpu_bytes=float(r.memory_limit_per_gpu_bytes), fits=bool(r.fits)))
    df = pd.DataFrame(rows)
    df.insert(df.columns.get_loc("joules_per_token") + 1, "speedup_vs_level0",
              df["tokens_per_s_per_gpu"] / df["tokens_per_s_per_gpu"].iloc[0])
    return df
