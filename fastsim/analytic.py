"""The analytic screen over the full configuration grid (SPEC section 5; lecture §2.2).

The grid is GPU x precision x TP x mode {colocated, disaggregated}. Per configuration a jitted kernel
(:func:`fastsim._analytic_nb.instances_nb`) computes, on arrays:

* decode instance: KV reserved for P + O per request, ``b <= KV tokens / (mean P + mean O)``; the
  largest b with ``step(b) <= 0.85 x TPOT``; throughput ``b / (step x mean O)``;
* prefill instance: M/D/1 queue, ``W = rho S_b / (2 (1 - rho))``, ``P90 TTFT ~ S + 2.3 W`` with S the
  step of the latency-quantile prompt and S_b that of the mean prompt; the largest rho meeting the
  TTFT target after the KV transfer (lecture exercise 4);
* colocated instance: each step carries b decodes and a chunk of c prompt tokens,
  ``c in {256, 512, 1024, 2048}``; ``step <= 0.85 x TPOT`` and ``ceil(P / c) x step <= TTFT / 2``;
  throughput ``min(b / O, c / P) / step`` maximised over b and c (Sarathi-Serve chunked prefill,
  Agrawal et al., OSDI 2024);
* disaggregated: DistServe's Algorithm 1 (Zhong et al., OSDI 2024): prefill and decode each pick
  the TP with the highest per-GPU throughput, then each side is replicated to cover the rate.

In every step the b decodes read ``b x (mean P + mean O / 2)`` tokens of KV. Latency checks use the
latency quantile (P90 by default) of the length distributions, never the mean (lecture §2.3,
lesson one). Instances are whole: each plan reports its integer cost and its efficiency cost. A
configuration that needs more than :data:`MAX_INSTANCES` (4,096) instances of a kind to carry the
rate is infeasible, with a reason that says so (counts never overflow, however large the rate).

Two options go beyond the lecture's screen (its §2.5 list, SPEC §10):

* speculative decoding (``ScreenOptions.spec_alpha``): every configuration is screened without
  speculation and with each ``gamma`` of ``spec_gammas``. A speculative instance decodes in rounds
  of ``gamma`` draft steps plus one verify step over ``gamma + 1`` tokens per sequence
  (:func:`fastsim.specdec.round_time_s`, the ledger's round, SPEC §4), yielding
  ``(1 - alpha^(gamma+1)) / (1 - alpha)`` tokens per sequence: the TPOT check applies to
  ``round / tokens per round`` and the decode throughput is ``b x tokens per round / (round x
  mean O)``; a colocated instance's prefill chunk rides in the verify step. The draft's weights
  and KV share the instance's memory (:func:`fastsim.specdec.spec_step_params`), on both sides
  of a disaggregated plan (its prefill instances would compute the draft's prompt KV);
* a prefix-cache hit fraction (``ScreenOptions.prefix_hit_fraction``): that fraction of every
  prompt's tokens is served from the cache. Their matmuls and their own causal attention are not
  recomputed; their KV is still held, read and attended by the new tokens. It shortens the
  prefill step (prefill instances) and the chunks a prompt needs (colocated instances); the KV
  reserved per request and the KV shipped to a decode instance stay those of the whole prompt.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from . import _analytic_nb as K
from .catalog import Catalog, Model, default_catalog
from .errors import FastsimInputError, require_tp
from .formulas import cost_usd_per_million_output_tokens, instances_needed
from .layouts import instance_label
from .plans import Demand, Plan, ScreenOptions, check_pp
from .specdec import expected_tokens_per_round, spec_refusal, spec_step_params
from .stepmodel import (N_PARAMS, P_KV_BUDGET_TOKENS, layout_degrees, layout_refusal, pipeline_round_params,
                        pp_refusal, step_params)

if TYPE_CHECKING:
    import pandas as pd   # imported where a table is built: a command's first line does not wait for it

# ``Demand``, ``ScreenOptions`` and ``Plan`` live in :mod:`fastsim.plans`, the two closed forms in
# :mod:`fastsim.formulas`; they are the same objects here.
__all__ = ["Demand", "ScreenOptions", "Plan", "screen", "instance_table", "plan_for", "cost_usd_per_million_output_tokens",
           "instances_needed", "MAX_INSTANCES"]

#: Most instances of one kind a plan may have: a colocated plan's instances, or each side of a
#: disaggregated plan. The screen calls a configuration that needs more infeasible (its reason says
#: so); :func:`plan_for`, ``fastsim simulate`` and ``fastsim capacity`` refuse larger counts (the
#: limit of ``capacity --instance-counts``).
MAX_INSTANCES = 4096

#: Status of a grid row whose instance layout the model refuses (set here, not by the kernel).
REFUSED = 4

_REASONS = {REFUSED: "the layout does not fit the model (see the refusal column)",
            K.OK: "", K.NO_FIT: "weights + one request's KV do not fit in memory",
            K.TPOT_UNREACHABLE: "no batch meets the TPOT target",
            K.TTFT_UNREACHABLE: "the latency-quantile prompt cannot be prefilled within the TTFT target"}


def _grid_arrays(model: Model, catalog: Catalog, options: ScreenOptions):
    """Rows ``(gpu, precision, tp, layout, refusal, pp)`` of the grid and their step parameters.

    A refused layout (``refusal`` a sentence) gets a parameter row with a negative KV budget,
    so the kernel reports NO_FIT; :func:`instance_table` then marks it REFUSED. A row with
    ``pp > 1`` is a pipelined instance of ``pp`` stages of ``tp`` GPUs: its vector is the
    steady-state round of its slowest stage (:func:`fastsim.stepmodel.pipeline_round_params` of
    :func:`~fastsim.stepmodel.step_params` with ``pp``), so the kernel's step is the round in which
    every sequence gets a token. A stage's TP group larger than a node is left out of a default
    grid and a refused row of a given one (:attr:`ScreenOptions.pps_given`), as is any pipeline
    :func:`fastsim.stepmodel.pp_refusal` refuses (a sliding-window model's stages that cannot keep
    whole sliding layers, say)."""
    gpus = [catalog.gpu(g) for g in (options.gpus or catalog.default_gpus())]
    precs = [catalog.precision(p) for p in (options.precisions or catalog.default_precisions())]
    if model.checkpoint_precision:
        # a quantised checkpoint is served at its own precision only (Model.served_precision)
        for pr in precs if options.precisions else ():
            model.served_precision(pr)
        precs = [catalog.precision(model.checkpoint_precision)]
    rows = []
    for g in gpus:
        for pr in precs:
            if pr.flops_key not in g.peak_flops_per_s:
                continue
            pps = options.pps_for(model, g, pr)
            for tp in options.tps_for(model):
                for lay in options.layouts_for(model):
                    why = layout_refusal(model, g, lay, int(tp))
                    for pp in pps:
                        pwhy = why
                        piped = pp_refusal(model, g, int(tp), int(pp)) if pp > 1 else None
                        if piped:
                            if not options.pps_given:
                                continue        # a default grid holds only the pipelines that run
                            pwhy = pwhy or f"TP{tp} x PP{pp}: {piped}"
                        rows.append((g, pr, int(tp), lay, pwhy, int(pp)))
    if not rows:
        raise FastsimInputError("precision", ", ".join(p.name for p in precs),
                                "a precision that a selected GPU (" + ", ".join(g.name for g in gpus)
                                + ") has a peak for: " + ", ".join(sorted({k for g in gpus for k in g.peak_flops_per_s})))
    refused = None
    params = []
    for g, pr, tp, lay, why, pp in rows:
        if why is None:
            dp, ep = layout_degrees(lay, tp)
            p = step_params(model, g, pr, tp, options.constants, dp=dp, ep=ep, pp=pp)
            params.append(pipeline_round_params(p) if pp > 1 else p)
        else:
            if refused is None:
                refused = np.ones(N_PARAMS)
                refused[P_KV_BUDGET_TOKENS] = -1.0
            params.append(refused)
    return rows, np.ascontiguousarray(np.stack(params))


def instance_table(model: Model | str, demand: Demand, *, catalog: Catalog | None = None,
                   options: ScreenOptions = ScreenOptions(), max_batch: int = 0) -> pd.DataFrame:
    """Per-instance analytic capacities of every GPU x precision x TP of the grid (SPEC §5).

    Decode capacity ``b / (step x mean O)``; prefill capacity ``rho / S_b`` from the M/D/1 wait
    (lecture exercise 4); colocated capacity ``min(b / O, c / P) / step`` (Sarathi-Serve); see
    the module docstring.

    Parameters
    ----------
    model : Model or str
        A model or a catalog name / ``config.json`` path.
    demand : Demand
        Rate, SLOs and length statistics.
    catalog : Catalog, optional
        Defaults to the built-in catalog.
    options : ScreenOptions
        The grid (GPUs, precisions, TPs, chunk sizes) and the screen's constants; ``modes`` is
        not used here.
    max_batch : int, default 0
        Cap on every instance's batch (requests; :attr:`Plan.max_batch`); 0: only the KV budget
        limits it.

    Returns
    -------
    pandas.DataFrame
        One row per GPU x precision x TP x layout x pipeline stages (pairs whose GPU has no peak
        for the precision are skipped; the stages :meth:`ScreenOptions.pps_for` gives):
        ``gpu, precision, tp, pp, gpus_per_instance`` (``tp x pp``)``, layout, refusal`` (why the
        model cannot run that layout, e.g. a TP that does not divide its heads; "" when it can)``,
        price_usd_per_gpu_hour, status, kv_budget_tokens,
        decode_capacity_req_per_s, decode_batch, decode_step_s, prefill_capacity_req_per_s,
        prefill_utilisation, prefill_step_s, colocated_status, colocated_capacity_req_per_s,
        colocated_batch, chunk_tokens, colocated_step_s`` (capacities 0 where infeasible;
        ``status`` codes are those of :mod:`fastsim._analytic_nb`). With ``options.spec_alpha``
        each configuration appears once per gamma (0 first, then ``options.spec_gammas``), with
        the columns ``spec_gamma`` and ``spec_tokens_per_round`` after ``layout``; a speculative
        row's ``decode_step_s`` and ``colocated_step_s`` are round times (s per round, which
        yields ``spec_tokens_per_round`` tokens per sequence), its ``kv_budget_tokens`` the
        budget left beside the draft, and its ``refusal`` may be the draft's. A row with
        ``pp > 1`` is a pipelined instance: its steps are pipeline rounds
        (:func:`fastsim.stepmodel.pipeline_round_params`: a sequence's token period with ``pp``
        micro-batches in flight), its KV budget the instance's (the smallest stage's); its
        prefill figures (a disaggregated pool) are computed but not used.

    Raises
    ------
    FastsimInputError
        An unknown model, GPU or precision name, a model config that cannot be read, no
        selected GPU with a peak for any selected precision, a speculative-decoding draft
        that is unknown or has another vocabulary than the model, or ``max_batch`` not an
        integer >= 0.
    """
    catalog = catalog or default_catalog()
    if isinstance(model, str):
        model = catalog.model(model)
    if isinstance(max_batch, (bool, np.bool_)) or not isinstance(max_batch, (int, np.integer)) or max_batch < 0:
        raise FastsimInputError("max_batch", max_batch, "an integer >= 0 (requests per instance; 0 = no cap)")
    demand = demand.within_context(model.max_context_tokens)
    rows, params = _grid_arrays(model, catalog, options)
    ext = options.screens_extensions
    if ext:
        rows, params, pidx, dpidx, gam, tpr = _extend_grid(model, catalog, options, rows, params)
    n = len(rows)
    f8 = lambda: np.zeros(n, dtype=np.float64)  # noqa: E731
    i8 = lambda: np.zeros(n, dtype=np.int64)  # noqa: E731
    status, col_status = i8(), i8()
    dec_cap, dec_b, dec_step = f8(), i8(), f8()
    pre_cap, pre_rho, pre_s = f8(), f8(), f8()
    col_cap, col_b, col_c, col_step = f8(), i8(), i8(), f8()
    dm = np.array([[demand.mean_prompt_tokens, demand.mean_output_tokens, demand.latency_prompt_tokens,
                    demand.latency_output_tokens, demand.ttft_s, demand.tpot_s, options.tpot_margin,
                    options.ttft_tail, demand.work_prompt_tokens, 1.0 if options.queueing else 0.0]],
                  dtype=np.float64)
    if n and not ext:
        K.instances_nb(params, np.arange(n, dtype=np.int64), dm, np.zeros(n, dtype=np.int64),
                       np.zeros(n, dtype=np.float64), np.full(n, int(max_batch), dtype=np.int64),
                       np.asarray(options.chunk_tokens, dtype=np.float64),
                       status, dec_cap, dec_b, dec_step, pre_cap, pre_rho, pre_s,
                       col_status, col_cap, col_b, col_c, col_step)
    elif n:
        K.instances_spec_nb(params, pidx, dpidx, dm, np.zeros(n, dtype=np.int64),
                            np.zeros(n, dtype=np.float64), np.full(n, int(max_batch), dtype=np.int64),
                            np.asarray(options.chunk_tokens, dtype=np.float64), gam, tpr,
                            np.full(n, float(options.prefix_hit_fraction), dtype=np.float64),
                            status, dec_cap, dec_b, dec_step, pre_cap, pre_rho, pre_s,
                            col_status, col_cap, col_b, col_c, col_step)
    refused = np.array([r[4] is not None for r in rows], dtype=bool)
    status[refused] = REFUSED
    col_status[refused] = REFUSED
    budget = (params[pidx] if ext else params)[:, P_KV_BUDGET_TOKENS] if n else f8()
    cols = dict(gpu=[r[0].name for r in rows], precision=[r[1].name for r in rows], tp=[r[2] for r in rows],
                pp=np.array([r[5] for r in rows], dtype=np.int64),
                gpus_per_instance=np.array([r[2] * r[5] for r in rows], dtype=np.int64),
                layout=[r[3] for r in rows])
    if options.spec_alpha is not None:
        cols.update(spec_gamma=gam.astype(np.int64), spec_tokens_per_round=tpr)
    cols.update(
        refusal=[r[4] or "" for r in rows],
        price_usd_per_gpu_hour=[r[0].price_usd_per_hour for r in rows],
        status=status, kv_budget_tokens=np.where(refused, np.nan, budget),
        decode_capacity_req_per_s=dec_cap, decode_batch=dec_b, decode_step_s=dec_step,
        prefill_capacity_req_per_s=pre_cap, prefill_utilisation=pre_rho, prefill_step_s=pre_s,
        colocated_status=col_status, colocated_capacity_req_per_s=col_cap, colocated_batch=col_b,
        chunk_tokens=col_c, colocated_step_s=col_step)
    import pandas as pd
    return pd.DataFrame(cols)


def _extend_grid(model: Model, catalog: Catalog, options: ScreenOptions, rows: list, params: np.ndarray):
    """The grid with speculative decoding: each row once without it and once per gamma of ``spec_gammas``.

    Returns ``(rows, params, pidx, dpidx, gamma, tokens_per_round)``: rows ``(gpu, precision, tp,
    layout, refusal, pp)`` (a refusal may now be the draft's; a pipelined row's speculative copies
    are refused, speculation on a pipeline is not screened), the stacked parameter rows (plain
    targets, then per configuration the target beside its draft and the draft,
    :func:`fastsim.specdec.spec_step_params`, then one refused row), and per grid row the target
    and draft parameter rows, gamma (0 = no speculation) and the expected tokens per round (1).
    Without ``spec_alpha`` every row keeps gamma 0 (a prefix-cache-only screen)."""
    spec = options.spec_for(model, catalog)
    gammas = (0,) + tuple(dict.fromkeys(int(g) for g in options.spec_gammas)) if spec else (0,)
    n0 = len(rows)
    extra = []
    any_refused = False
    out_rows, pidx, dpidx, gam, tpr = [], [], [], [], []
    for i, (g, pr, tp, lay, why, pp) in enumerate(rows):
        pair = None
        swhy = None
        if spec is not None and why is None and pp > 1:
            swhy = (f"speculative decoding on a pipelined instance (TP{tp} x PP{pp}) is not screened (the step "
                    "model's draft shares one instance's GPUs, fastsim.specdec)")
        elif spec is not None and why is None:
            dp, ep = layout_degrees(lay, tp)
            swhy = spec_refusal(model, spec, g, tp, dp, ep, catalog)
            if swhy is None:
                p_t, p_d = spec_step_params(model, g, pr, tp, options.constants, spec, dp=dp, ep=ep, catalog=catalog)
                pair = n0 + len(extra)
                extra.extend((p_t, p_d))
        for gm in gammas:
            if gm == 0:
                out_rows.append((g, pr, tp, lay, why, pp))
                pidx.append(i)
                dpidx.append(i)
                gam.append(0.0)
                tpr.append(1.0)
                continue
            r_why = why or swhy
            if r_why is not None:
                any_refused = True
                out_rows.append((g, pr, tp, lay, r_why, pp))
                pidx.append(-1)
                dpidx.append(-1)
            else:
                out_rows.append((g, pr, tp, lay, None, pp))
                pidx.append(pair)
                dpidx.append(pair + 1)
            gam.append(float(gm))
            tpr.append(expected_tokens_per_round(spec.alpha, gm))
    stack = [params] + ([np.stack(extra)] if extra else [])
    if any_refused:
        r = np.ones((1, N_PARAMS))
        r[0, P_KV_BUDGET_TOKENS] = -1.0
        stack.append(r)
    allp = np.ascontiguousarray(np.concatenate(stack, axis=0))
    last = allp.shape[0] - 1
    pidx = np.array([last if k < 0 else k for k in pidx], dtype=np.int64)
    dpidx = np.array([last if k < 0 else k for k in dpidx], dtype=np.int64)
    return out_rows, allp, pidx, dpidx, np.array(gam, dtype=np.float64), np.array(tpr, dtype=np.float64)


def screen(model: Model | str, demand: Demand, *, catalog: Catalog | None = None,
           options: ScreenOptions = ScreenOptions()) -> pd.DataFrame:
    """Evaluate the whole grid analytically and rank it by integer cost.

    Parameters
    ----------
    model : Model or str
        A model or a catalog name / ``config.json`` path.
    demand : Demand
        Rate, SLOs and length statistics; truncated at the model's context
        (:meth:`Demand.within_context`: the simulator serves only requests whose prompt + output
        fit it) and sized for :attr:`Demand.served_rate_req_per_s`.
    catalog : Catalog, optional
        Defaults to the built-in catalog.
    options : ScreenOptions

    Returns
    -------
    pandas.DataFrame
        One row per grid point (colocated: one per GPU x precision x TP; disaggregated: one per
        GPU x precision, TPs chosen per DistServe), sorted feasible first, then by integer cost,
        efficiency cost and GPU count. Columns: ``gpu, precision, mode, tp, pp`` (pipeline stages of a
        colocated instance; 1 on a disaggregated row: its pools are not pipelined)``, gpus_per_instance``
        (``tp x pp``; a disaggregated row's decode instance)``, instances, prefill_tp,
        prefill_instances, decode_tp, decode_instances, gpus, chunk_tokens, batch,
        instance_capacity_req_per_s, capacity_req_per_s, usd_per_million_output_tokens,
        efficiency_usd_per_million_output_tokens, feasible, reason, plan`` (a :class:`Plan`, or
        None when infeasible), and ``layout``. With ``options.spec_alpha`` every point appears
        once per ``spec_gamma`` (0 and each of ``options.spec_gammas``; disaggregated points
        then per GPU x precision x layout x gamma) with the columns ``spec_gamma, spec_alpha,
        spec_draft``; with ``options.prefix_hit_fraction`` > 0 a ``prefix_hit_fraction`` column.
        Infeasible points are rows with ``feasible=False`` and a reason, never exceptions: a
        configuration that needs more than :data:`MAX_INSTANCES` instances of a kind to carry
        the rate is one; a GPU x precision x layout whose every TP the model refuses is one
        disaggregated row with TPs 0 and the refusal. On an MoE model a plan whose TPs are all
        1 is listed once, under ``tp`` when the grid's layouts have it, else under the first of
        them (at TP 1 every layout gives EP 1 and DP 1, :func:`fastsim.stepmodel.layout_degrees`).
        A screen without rows still has every column with its dtype.

    Raises
    ------
    FastsimInputError
        Unknown names in the grid or the model, no selected GPU with a peak for any selected
        precision, or a speculative-decoding draft that is unknown or has another vocabulary
        than the model (:func:`fastsim.specdec.spec_decoding`).
    """
    catalog = catalog or default_catalog()
    if isinstance(model, str):
        model = catalog.model(model)
    demand = demand.within_context(model.max_context_tokens)
    t = instance_table(model, demand, catalog=catalog, options=options)
    rows = [(catalog.gpu(g), catalog.precision(p), int(tp), lay)
            for g, p, tp, lay in zip(t.gpu, t.precision, t.tp, t.layout)]
    pps = t.pp.to_numpy()
    refusal = t.refusal.tolist()
    status, col_status = t.status.to_numpy(), t.colocated_status.to_numpy()
    dec_cap, dec_b = t.decode_capacity_req_per_s.to_numpy(), t.decode_batch.to_numpy()
    pre_cap = t.prefill_capacity_req_per_s.to_numpy()
    col_cap, col_b, col_c = (t.colocated_capacity_req_per_s.to_numpy(), t.colocated_batch.to_numpy(),
                             t.chunk_tokens.to_numpy())
    rate, mean_o = demand.served_rate_req_per_s, demand.mean_output_tokens
    spec = options.spec_for(model, catalog)
    gam = t.spec_gamma.to_numpy() if spec is not None else np.zeros(len(t), dtype=np.int64)
    hit = float(options.prefix_hit_fraction)

    def plan_extra(i):
        """Speculative-decoding and prefix-cache fields of the plan of table row i (none by default)."""
        e = {}
        if spec is not None:
            e.update(spec_gamma=int(gam[i]), spec_alpha=spec.alpha, spec_draft=spec.draft)
        if hit:
            e["prefix_hit_fraction"] = hit
        return e

    out = []
    if "colocated" in options.modes:
        inst = instances_needed(rate, col_cap)
        for i, (g, pr, tp, lay) in enumerate(rows):
            ok = col_status[i] == K.OK
            reason = refusal[i] or _REASONS[int(col_status[i])]
            if ok and inst[i] > MAX_INSTANCES:
                ok, reason = False, _too_many(rate)
            pp = int(pps[i])
            plan = Plan(model=model.name, gpu=g.name, precision=pr.name, mode="colocated", tp=tp,
                        instances=int(inst[i]), chunk_tokens=int(col_c[i]), batch=int(col_b[i]),
                        instance_capacity_req_per_s=float(col_cap[i]),
                        price_usd_per_gpu_hour=g.price_usd_per_hour, layout=lay, pp=pp, **plan_extra(i)) if ok else None
            out.append(dict(
                gpu=g.name, precision=pr.name, mode="colocated", layout=lay, **plan_extra(i), tp=tp, pp=pp,
                gpus_per_instance=tp * pp, instances=int(inst[i]) if ok else 0,
                prefill_tp=0, prefill_instances=0, decode_tp=0, decode_instances=0,
                gpus=plan.gpus if ok else 0, chunk_tokens=int(col_c[i]), batch=int(col_b[i]),
                instance_capacity_req_per_s=float(col_cap[i]),
                capacity_req_per_s=plan.capacity_req_per_s if ok else 0.0,
                usd_per_million_output_tokens=float(cost_usd_per_million_output_tokens(
                    plan.gpus, g.price_usd_per_hour, rate, mean_o)) if ok else np.inf,
                efficiency_usd_per_million_output_tokens=float(tp * pp * g.price_usd_per_hour / (
                    col_cap[i] * mean_o * 3600.0) * 1e6) if ok else np.inf,
                feasible=bool(ok), reason=reason, plan=plan))
    if "disaggregated" in options.modes:
        groups: dict = {}
        refused_groups: dict = {}
        for i, (g, pr, tp, lay) in enumerate(rows):
            if pps[i] > 1:
                continue        # a disaggregated pool is plain TP instances (no pipeline parallelism)
            key = (g.name, pr.name, lay, int(gam[i]))
            if not refusal[i]:
                groups.setdefault(key, []).append(i)
            else:
                refused_groups.setdefault(key, i)
        for (gname, pname, lay, _), idx in groups.items():
            g = catalog.gpu(gname)
            idx = np.asarray(idx)
            tps = np.array([rows[i][2] for i in idx], dtype=np.float64)
            # DistServe Algorithm 1: each side picks the TP with the highest per-GPU throughput
            per_gpu_p = pre_cap[idx] / tps
            per_gpu_d = dec_cap[idx] / tps
            ip, idd = idx[int(np.argmax(per_gpu_p))], idx[int(np.argmax(per_gpu_d))]
            ok = pre_cap[ip] > 0 and dec_cap[idd] > 0
            reason = ""
            if not ok:
                reason = ("prefill: " + (_REASONS[int(status[ip])] or "the TTFT target leaves no room for queueing")
                          if pre_cap[ip] <= 0 else "decode: " + (_REASONS[int(status[idd])] or _REASONS[K.TPOT_UNREACHABLE]))
            n_p = int(instances_needed(rate, pre_cap[ip])) if ok else 0
            n_d = int(instances_needed(rate, dec_cap[idd])) if ok else 0
            if ok and max(n_p, n_d) > MAX_INSTANCES:
                side = "prefill" if n_p > MAX_INSTANCES else "decode"
                ok, reason, n_p, n_d = False, f"{side}: {_too_many(rate)}", 0, 0
            tp_p, tp_d = rows[ip][2], rows[idd][2]
            plan = Plan(model=model.name, gpu=gname, precision=pname, mode="disaggregated", tp=tp_d,
                        instances=n_d, prefill_tp=tp_p, prefill_instances=n_p, decode_tp=tp_d,
                        decode_instances=n_d, batch=int(dec_b[idd]),
                        prefill_capacity_req_per_s=float(pre_cap[ip]),
                        decode_capacity_req_per_s=float(dec_cap[idd]),
                        instance_capacity_req_per_s=float(dec_cap[idd]),
                        price_usd_per_gpu_hour=g.price_usd_per_hour, layout=lay, **plan_extra(idd)) if ok else None
            eff = (tp_p / pre_cap[ip] + tp_d / dec_cap[idd]) * g.price_usd_per_hour / (mean_o * 3600.0) * 1e6 \
                if ok else np.inf
            out.append(dict(
                gpu=gname, precision=pname, mode="disaggregated", layout=lay, **plan_extra(idd), tp=tp_d, pp=1,
                gpus_per_instance=tp_d, instances=n_d,
                prefill_tp=tp_p, prefill_instances=n_p, decode_tp=tp_d, decode_instances=n_d,
                gpus=plan.gpus if ok else 0, chunk_tokens=0, batch=int(dec_b[idd]),
                instance_capacity_req_per_s=float(dec_cap[idd]),
                capacity_req_per_s=plan.capacity_req_per_s if ok else 0.0,
                usd_per_million_output_tokens=float(cost_usd_per_million_output_tokens(
                    plan.gpus, g.price_usd_per_hour, rate, mean_o)) if ok else np.inf,
                efficiency_usd_per_million_output_tokens=float(eff), feasible=bool(ok), reason=reason,
                plan=plan))
        for key, i in refused_groups.items():
            if key in groups:
                continue
            # every TP of this GPU x precision x layout is refused: no TP pair to pick, one refused row
            gname, pname, lay, _ = key
            out.append(dict(
                gpu=gname, precision=pname, mode="disaggregated", layout=lay, **plan_extra(i), tp=0, pp=1,
                gpus_per_instance=0, instances=0,
                prefill_tp=0, prefill_instances=0, decode_tp=0, decode_instances=0, gpus=0, chunk_tokens=0, batch=0,
                instance_capacity_req_per_s=0.0, capacity_req_per_s=0.0, usd_per_million_output_tokens=np.inf,
                efficiency_usd_per_million_output_tokens=np.inf, feasible=False, reason=refusal[i], plan=None))
        if options.heterogeneous:
            out += _heterogeneous_rows(model, catalog, groups, rows, pre_cap, dec_cap, dec_b, rate, mean_o, plan_extra)
    if model.is_moe:
        out = _one_row_per_plan(out, options.layouts_for(model))
    import pandas as pd
    df = pd.DataFrame(out) if out else _empty_screen(spec is not None, bool(hit), options.heterogeneous)
    longest = demand.latency_prompt_tokens + demand.latency_output_tokens
    too_long = ""
    if longest > model.max_context_tokens:
        too_long = (f"the latency-quantile request ({longest:,.0f} tokens of prompt + output) is longer than "
                    f"{model.name}'s context of {model.max_context_tokens:,} tokens")
    elif demand.served_fraction < 0.9:
        too_long = (f"only {demand.served_fraction:.1%} of the requests fit {model.name}'s context of "
                    f"{model.max_context_tokens:,} tokens (prompt + output); the rest are rejected, so a P90 "
                    "SLO cannot hold")
    if len(df) and too_long:
        # more than a tenth of the requests cannot be served by any plan: a P90 SLO cannot hold
        df["feasible"] = False
        df["reason"] = too_long
        df["plan"] = None
        for col in ("usd_per_million_output_tokens", "efficiency_usd_per_million_output_tokens"):
            df[col] = np.inf
    if len(df):
        df = df.sort_values(["feasible", "usd_per_million_output_tokens",
                             "efficiency_usd_per_million_output_tokens", "gpus"],
                            ascending=[False, True, True, True], kind="stable").reset_index(drop=True)
    return df


def _too_many(rate: float) -> str:
    """The screen's reason for a configuration that needs more than :data:`MAX_INSTANCES` instances of a kind."""
    return (f"needs more than {MAX_INSTANCES:,} instances to carry {rate:,.4g} req/s ({MAX_INSTANCES:,} is the most "
            "a plan may have of a kind)")


#: Columns of :func:`screen`, in order; ``spec_*`` after ``layout`` with speculative decoding,
#: ``prefix_hit_fraction`` after them with a prefix-cache hit fraction, ``prefill_gpu`` and
#: ``prefill_precision`` last when heterogeneous plans were screened (and found).
_SCREEN_COLUMNS = (("gpu", "str"), ("precision", "str"), ("mode", "str"), ("layout", "str"),
                   ("tp", "int64"), ("pp", "int64"), ("gpus_per_instance", "int64"), ("instances", "int64"),
                   ("prefill_tp", "int64"),
                   ("prefill_instances", "int64"), ("decode_tp", "int64"), ("decode_instances", "int64"),
                   ("gpus", "int64"), ("chunk_tokens", "int64"), ("batch", "int64"),
                   ("instance_capacity_req_per_s", "float64"), ("capacity_req_per_s", "float64"),
                   ("usd_per_million_output_tokens", "float64"),
                   ("efficiency_usd_per_million_output_tokens", "float64"), ("feasible", "bool"),
                   ("reason", "str"), ("plan", "object"))


def _empty_screen(spec: bool, prefix: bool, heterogeneous: bool):
    """A screen without rows that still has every column, with its dtype (nothing downstream breaks on it)."""
    import pandas as pd
    cols = list(_SCREEN_COLUMNS)
    extra = ([("spec_gamma", "int64"), ("spec_alpha", "float64"), ("spec_draft", "str")] if spec else []) \
        + ([("prefix_hit_fraction", "float64")] if prefix else [])
    cols[4:4] = extra
    if heterogeneous:
        cols += [("prefill_gpu", "str"), ("prefill_precision", "str")]
    return pd.DataFrame({c: pd.Series([], dtype=str if t == "str" else t) for c, t in cols})


def _one_row_per_plan(out: list, layouts: tuple) -> list:
    """The screen rows of an MoE model with each plan once: an EP layout at TP 1 is the plain TP1 plan.

    At one GPU per instance ``tp``, ``tp+ep`` and ``dp+ep`` all give EP 1 and DP 1
    (:func:`fastsim.stepmodel.layout_degrees`): a row whose TPs are all 1 (``tp`` of a colocated
    row, both sides of a disaggregated one) is listed under ``tp`` when ``layouts`` has it, else
    under the first of ``layouts`` (as :mod:`fastsim.sweep` lists it), and rows that are then
    alike are kept once (the first).
    """
    listed = "tp" if "tp" in layouts else layouts[0]
    seen = set()
    kept = []
    for r in out:
        tps = (r["tp"],) if r["mode"] == "colocated" else (r["prefill_tp"], r["decode_tp"])
        if r["layout"] != listed and all(t == 1 for t in tps):
            r = dict(r, layout=listed)
            if r["plan"] is not None:
                r["plan"] = replace(r["plan"], layout=listed)
        key = tuple((k, v) for k, v in r.items() if k != "plan") + (r["plan"],)
        if key not in seen:
            seen.add(key)
            kept.append(r)
    return kept


def _heterogeneous_rows(model, catalog, groups, rows, pre_cap, dec_cap, dec_b, rate, mean_o, plan_extra) -> list:
    """Screen rows of disaggregated plans whose two sides differ in GPU or precision (``ScreenOptions.heterogeneous``).

    ``groups`` maps ``(gpu, precision, layout, gamma)`` to the instance rows of that GPU and
    precision; each side picks, within its group, the TP with the highest per-GPU throughput
    (DistServe's Algorithm 1), without speculative decoding, and is priced at its own GPU's price.
    """
    best_p, best_d = {}, {}
    for (gname, pname, lay, gam), idx in groups.items():
        if gam:
            continue
        idx = np.asarray(idx)
        tps = np.array([rows[i][2] for i in idx], dtype=np.float64)
        best_p[(gname, pname, lay)] = idx[int(np.argmax(pre_cap[idx] / tps))]
        best_d[(gname, pname, lay)] = idx[int(np.argmax(dec_cap[idx] / tps))]
    out = []
    for (gp, pp, lay), ip in best_p.items():
        for (gd, pd_, lay_d), idd in best_d.items():
            if lay_d != lay or (gp, pp) == (gd, pd_) or not (pre_cap[ip] > 0 and dec_cap[idd] > 0):
                continue
            price_p, price_d = catalog.gpu(gp).price_usd_per_hour, catalog.gpu(gd).price_usd_per_hour
            n_p = int(instances_needed(rate, pre_cap[ip]))
            n_d = int(instances_needed(rate, dec_cap[idd]))
            if max(n_p, n_d) > MAX_INSTANCES:     # infeasible (its homogeneous rows give the reason)
                continue
            tp_p, tp_d = rows[ip][2], rows[idd][2]
            plan = Plan(model=model.name, gpu=gd, precision=pd_, mode="disaggregated", tp=tp_d, instances=n_d,
                        prefill_tp=tp_p, prefill_instances=n_p, decode_tp=tp_d, decode_instances=n_d,
                        batch=int(dec_b[idd]), prefill_capacity_req_per_s=float(pre_cap[ip]),
                        decode_capacity_req_per_s=float(dec_cap[idd]), instance_capacity_req_per_s=float(dec_cap[idd]),
                        price_usd_per_gpu_hour=price_d, layout=lay, **plan_extra(idd),
                        prefill_gpu=gp, prefill_precision=pp, prefill_price_usd_per_gpu_hour=price_p)
            eff = (tp_p * price_p / pre_cap[ip] + tp_d * price_d / dec_cap[idd]) / (mean_o * 3600.0) * 1e6
            out.append(dict(
                gpu=gd, precision=pd_, mode="disaggregated", layout=lay, **plan_extra(idd), tp=tp_d, pp=1,
                gpus_per_instance=tp_d, instances=n_d,
                prefill_tp=tp_p, prefill_instances=n_p, decode_tp=tp_d, decode_instances=n_d, gpus=plan.gpus,
                chunk_tokens=0, batch=int(dec_b[idd]), instance_capacity_req_per_s=float(dec_cap[idd]),
                capacity_req_per_s=plan.capacity_req_per_s,
                usd_per_million_output_tokens=float(cost_usd_per_million_output_tokens(1, plan.price_usd_per_hour,
                                                                                       rate, mean_o)),
                efficiency_usd_per_million_output_tokens=float(eff), feasible=True, reason="", plan=plan,
                prefill_gpu=gp, prefill_precision=pp))
    return out


def plan_for(model: Model | str, demand: Demand, *, gpu: str, precision: str, mode: str = "colocated",
             tp: int = 1, instances: int | None = None, prefill_tp: int | None = None,
             decode_tp: int | None = None, prefill_instances: int | None = None,
             decode_instances: int | None = None, chunk_tokens: int | None = None,
             catalog: Catalog | None = None, options: ScreenOptions = ScreenOptions(),
             layout: str = "tp", spec_gamma: int = 0, max_batch: int = 0,
             prefill_gpu: str | None = None, prefill_precision: str | None = None, pp: int = 1) -> Plan:
    """A :class:`Plan` for a configuration the user names, with its analytic capacities filled in.

    Instance counts left as None are sized by the analytic screen for
    ``demand.served_rate_req_per_s`` (at least one): the offered rate times the share of the
    requests that fit the model's context; the length figures are those of the requests served
    (:meth:`Demand.within_context`). ``chunk_tokens`` None takes the screen's best chunk (512 when the colocated
    configuration is analytically infeasible). The capacities come from
    :func:`instance_table` (SPEC §5): a given ``chunk_tokens`` is recorded in the plan but the
    colocated capacity is the one of the best chunk in ``options.chunk_tokens``.

    Parameters
    ----------
    model : Model or str
        A model or a catalog name / ``config.json`` path.
    demand : Demand
        Rate (sizes the instance counts left as None), SLOs and length statistics.
    gpu, precision : str
        Catalog names (of the decode side of a disaggregated plan).
    mode : str
        ``"colocated"`` or ``"disaggregated"``.
    tp : int
        TP of a colocated instance; default TP of both sides of a disaggregated plan.
    instances : int, optional
        Colocated instances, 1 to :data:`MAX_INSTANCES`.
    prefill_tp, decode_tp : int, optional
        TP of each side of a disaggregated plan (default ``tp``).
    prefill_instances, decode_instances : int, optional
        Instances of each side of a disaggregated plan, 1 to :data:`MAX_INSTANCES` each.
    chunk_tokens : int, optional
        Prefill chunk of a colocated instance (tokens).
    catalog : Catalog, optional
        Defaults to the built-in catalog.
    options : ScreenOptions
        Screen constants; its GPU, precision, TP and layout lists are replaced by the named ones.
    layout : str, default "tp"
        Instance layout (:data:`fastsim.stepmodel.LAYOUTS`) of every instance of the plan.
    spec_gamma : int, default 0
        Draft tokens per speculative-decoding round (0: none); > 0 needs ``options.spec_alpha``
        (and takes ``options.spec_draft``).
    max_batch : int, default 0
        Most requests per (decode) instance (:attr:`Plan.max_batch`, applied by the simulator
        and by the analytic capacities); 0: no cap beyond the KV budget.
    prefill_gpu, prefill_precision : str, optional
        The prefill side of a heterogeneous disaggregated plan (catalog names; each defaults to
        the decode side's ``gpu`` / ``precision``); its GPUs are priced at their own price.
    pp : int, default 1
        Pipeline stages of a colocated instance (:attr:`Plan.pp`): ``tp`` is then the GPUs of one
        stage, at most a node of the GPU; the instance has ``tp x pp`` GPUs.

    Returns
    -------
    Plan
        Analytically infeasible configurations are returned too, with capacity 0 (and one
        instance unless given): the simulator decides.

    Raises
    ------
    FastsimInputError
        Unknown names, TP not a power of two from 1 to 64, a mode other than colocated /
        disaggregated, instance counts not integers from 1 to :data:`MAX_INSTANCES`, a chunk
        not an integer >= 1, ``max_batch`` not an integer >= 0, a GPU without a peak for the
        precision, a layout the model refuses (e.g. a TP that does not divide its attention
        heads, SPEC §10), ``spec_gamma`` not an integer >= 0 or > 0 without
        ``options.spec_alpha``, a draft that cannot share the layout, a prefill GPU or
        precision on a colocated plan, ``pp`` not an integer from 1 to the model's layers, ``pp > 1``
        on a disaggregated plan, with speculative decoding, or a pipeline that
        :func:`fastsim.stepmodel.pp_refusal` refuses (a stage TP larger than a node; field ``pp``), or a count left to the sizing that would exceed
        :data:`MAX_INSTANCES` at the demand's rate (field ``rate_req_per_s``).
    """
    catalog = catalog or default_catalog()
    if isinstance(model, str):
        model = catalog.model(model)
    if mode not in ("colocated", "disaggregated"):
        raise FastsimInputError("mode", mode, "colocated or disaggregated")
    for name, v in (("instances", instances), ("prefill_instances", prefill_instances),
                    ("decode_instances", decode_instances)):
        if v is not None and (isinstance(v, bool) or int(v) != v or not 1 <= v <= MAX_INSTANCES):
            raise FastsimInputError(name, v, f"an integer from 1 to {MAX_INSTANCES:,} (MAX_INSTANCES)")
    if chunk_tokens is not None and (int(chunk_tokens) != chunk_tokens or chunk_tokens < 1):
        raise FastsimInputError("chunk_tokens", chunk_tokens, "an integer >= 1")
    if isinstance(max_batch, (bool, np.bool_)) or not isinstance(max_batch, (int, np.integer)) or max_batch < 0:
        raise FastsimInputError("max_batch", max_batch, "an integer >= 0 (requests per instance; 0 = no cap)")
    g, pr = catalog.gpu(gpu), catalog.precision(precision)
    gp = catalog.gpu(prefill_gpu) if prefill_gpu is not None else g
    prp = catalog.precision(prefill_precision) if prefill_precision is not None else pr
    hetero = (gp.name, prp.name) != (g.name, pr.name)
    for name, gg, pq in (("precision", g, pr), ("prefill_precision", gp, prp)):
        if pq.flops_key not in gg.peak_flops_per_s:
            raise FastsimInputError(name, pq.name, f"a precision {gg.name} has a peak for: "
                                    + ", ".join(sorted(gg.peak_flops_per_s)))
    if hetero and mode != "disaggregated":
        raise FastsimInputError("prefill_gpu" if gp.name != g.name else "prefill_precision",
                                gp.name if gp.name != g.name else prp.name,
                                "None for a colocated plan (a prefill side of its own is disaggregated)")
    tps = tuple(sorted({require_tp("tp", tp), require_tp("prefill_tp", prefill_tp or tp),
                        require_tp("decode_tp", decode_tp or tp)}))
    pp = check_pp(pp, "pp", model.layers)
    if pp > 1 and mode != "colocated":
        raise FastsimInputError("pp", pp, "1 for a disaggregated plan (pipeline parallelism applies to colocated "
                                "instances; a disaggregated plan's prefill and decode pools are TP instances)")
    if pp > 1 and spec_gamma:
        raise FastsimInputError("pp", pp, "1 with speculative decoding (spec_gamma > 0 is not screened on a "
                                "pipelined instance)")
    why_pp = pp_refusal(model, g, int(tp), pp) if pp > 1 else None
    if why_pp:
        raise FastsimInputError("pp", pp, f"a pipeline of TP{tp} stages {g.name} can run ({why_pp})")
    for gg in ((g,) if gp.name == g.name else (g, gp)):
        for t_ in tps:
            why = layout_refusal(model, gg, layout, t_)
            if why:
                raise FastsimInputError("tp" if layout == "tp" else "layout", t_ if layout == "tp" else layout, why)
    if isinstance(spec_gamma, bool) or not isinstance(spec_gamma, (int, np.integer)) or spec_gamma < 0:
        raise FastsimInputError("spec_gamma", spec_gamma, "an integer >= 0 (draft tokens per round; 0 = none)")
    if spec_gamma and options.spec_alpha is None:
        raise FastsimInputError("spec_gamma", spec_gamma, "0 unless options.spec_alpha (the acceptance) is given")
    opts = replace(options, gpus=tuple(dict.fromkeys((g.name, gp.name))),
                   precisions=tuple(dict.fromkeys((pr.name, prp.name))), tps=tps, layouts=(layout,),
                   spec_gammas=(int(spec_gamma),) if spec_gamma else options.spec_gammas, pps=(pp,))
    demand = demand.within_context(model.max_context_tokens)
    t = instance_table(model, demand, catalog=catalog, options=opts, max_batch=int(max_batch))
    extra = {}
    if options.spec_alpha is not None:
        t = t[t.spec_gamma == int(spec_gamma)]
        spec = options.spec_for(model, catalog)
        extra.update(spec_gamma=int(spec_gamma), spec_alpha=spec.alpha, spec_draft=spec.draft)
        why = next((r for r in t.refusal if r), "")
        if spec_gamma and why:
            raise FastsimInputError("spec_draft", spec.draft, why)
    if options.prefix_hit_fraction:
        extra["prefix_hit_fraction"] = float(options.prefix_hit_fraction)
    if max_batch:
        extra["max_batch"] = int(max_batch)
    t_p = t[(t.gpu == gp.name) & (t.precision == prp.name)].set_index("tp")
    t = t[(t.gpu == g.name) & (t.precision == pr.name)].set_index("tp")
    rate = demand.served_rate_req_per_s

    def sized(name, n, cap, what):
        if n is not None:
            return int(n)
        n = max(int(instances_needed(rate, cap)), 1)
        if n > MAX_INSTANCES:
            raise FastsimInputError("rate_req_per_s", demand.rate_req_per_s, f"a rate that at most {MAX_INSTANCES:,} instances of "
                                    f"{what} carry ({cap:,.4g} req/s each), or name {name}")
        return n

    if mode == "colocated":
        row = t.loc[tp]
        cap = float(row.colocated_capacity_req_per_s)
        n = sized("the instances", instances, cap,
                  f"{g.name} {pr.name} {instance_label(layout, int(tp), pp, int(getattr(g, 'gpus_per_node', 8)))}")
        return Plan(model=model.name, gpu=g.name, precision=pr.name, mode="colocated", tp=int(tp), instances=n,
                    chunk_tokens=int(chunk_tokens or row.chunk_tokens or 512), batch=int(row.colocated_batch),
                    instance_capacity_req_per_s=cap, price_usd_per_gpu_hour=g.price_usd_per_hour, layout=layout,
                    pp=pp, **extra)
    tp_p, tp_d = int(prefill_tp or tp), int(decode_tp or tp)
    cap_p = float(t_p.loc[tp_p].prefill_capacity_req_per_s)
    cap_d = float(t.loc[tp_d].decode_capacity_req_per_s)
    n_p = sized("the prefill instances", prefill_instances, cap_p,
                f"the prefill side ({gp.name} {prp.name} {instance_label(layout, tp_p)})")
    n_d = sized("the decode instances", decode_instances, cap_d,
                f"the decode side ({g.name} {pr.name} {instance_label(layout, tp_d)})")
    if hetero:
        extra.update(prefill_gpu=gp.name, prefill_precision=prp.name,
                     prefill_price_usd_per_gpu_hour=gp.price_usd_per_hour)
    return Plan(model=model.name, gpu=g.name, precision=pr.name, mode="disaggregated", tp=tp_d, instances=n_d,
                prefill_tp=tp_p, prefill_instances=n_p, decode_tp=tp_d, decode_instances=n_d,
                batch=int(t.loc[tp_d].decode_batch), prefill_capacity_req_per_s=cap_p,
                decode_capacity_req_per_s=cap_d, instance_capacity_req_per_s=cap_d,
                price_usd_per_gpu_hour=g.price_usd_per_hour, layout=layout, **extra)
