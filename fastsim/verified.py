"""Verified planning: the cheapest configuration of the grid that the simulator passes.

The lecture's planner (``fastsim plan --search screen``) simulates only the plans its analytic
screen ranks first, at the counts the screen sizes, so a heuristic of the screen can hide the
cheapest plan that works: on the coding agent, the screen's TTFT / 2 rule drops H100 FP8 TP2,
whose P90 prompt the simulator prefills alone in 1.21 s of a 2-s target.

:func:`plan_verified` simulates every configuration of the grid that is not provably hopeless:

- pruned: a layout the model refuses at that TP (the screen's refused rows, e.g. a TP that does
  not divide the attention heads); weights and one request's KV do not fit in memory (the
  screen's memory test, exact); more instances than :data:`fastsim.analytic.MAX_INSTANCES` needed
  to carry the rate (the screen's reason);
  or a request of the latency-quantile lengths misses the SLO alone on an idle instance,
  measured by the simulator (:func:`fastsim.search.lone_request_check`): no count can pass;
- every other configuration gets its cheapest passing instance count by simulation: colocated
  plans from the screen's count (or 1 where the screen finds none) down while they pass, or up
  (doubling, then bisection) until they pass, up to ``max_instances``; disaggregated plans from
  the screen's counts by :func:`fastsim.search.repair` (a prefill instance for TTFT, a decode
  instance for TPOT) and then one fewer of each side while they pass.

The grid is the screen's: colocated points per GPU x precision x TP, disaggregated points one per
GPU x precision with the prefill and decode TPs DistServe's rule picks (SPEC §5; other TP pairs
are not searched, and a disaggregated point the screen finds infeasible has no TP pair to
simulate, so it is left out as pruned). The ranking is by verified cost (GPUs x price at the
target rate, SPEC §1), so no configuration of the grid passes at a lower cost at the same seeds
than the answer, up to the
count search's assumption that more instances of a kind never fail where fewer pass (the
verification at one count is exact; between counts it is not re-checked). Each plan says how
the screen saw it: ``kept`` (the screen's count passes and one fewer does not), ``over-sized``
(fewer instances pass), ``under-sized`` (more were needed), or ``missed`` (the screen found it
infeasible, with its reason).
"""
from __future__ import annotations

import math

from .analytic import MAX_INSTANCES, Demand, ScreenOptions, plan_for, screen
from .catalog import Catalog, Model, default_catalog
from .errors import FastsimInputError
from .search import SLO, RepairResult, lone_request_check, repair, unsimulated_reason, verify
from .stepmodel import layout_refusal, pp_refusal

__all__ = ["plan_verified", "verification_engine", "same_deployment_key", "SCREEN_VIEWS"]

#: How the screen saw a verified plan (``PlannedDeployment.screen_view``).
SCREEN_VIEWS = ("kept", "over-sized", "under-sized", "missed")

_MEMORY = "do not fit in memory"
#: The screen's reason for a configuration that needs more than MAX_INSTANCES instances: pruned.
_TOO_MANY = f"needs more than {MAX_INSTANCES:,} instances"


def _count_search(plan, check, n0: int, max_instances: int):
    """Cheapest passing count of a colocated plan: ``(count or None, history of (n, Verification))``.

    From ``n0`` down while it passes, else up by doubling then bisection; ``check(n)`` verifies
    the plan at n instances.
    """
    hist = {}

    def ok(n):
        if n not in hist:
            hist[n] = check(n)
        return hist[n].passed

    if ok(n0):
        n = n0
        while n > 1 and ok(n - 1):
            n -= 1
        return n, hist
    if _hopeless(hist[n0]):
        return None, hist
    lo, hi = n0, None
    n = n0
    while hi is None:
        if n >= max_instances:
            return None, hist
        n = min(max(2 * n, n + 1), max_instances)
        if ok(n):
            hi = n
        else:
            lo = n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi, hist


def _hopeless(v) -> bool:
    """A verification no count of the same instances can pass: requests that fit the context rejected
    beyond the budget (an instance's KV cannot hold them, however many instances there are)."""
    return v.rejected_in_context > v.rejection_budget * v.requests


def plan_verified(model: Model | str, demand: Demand, workloads, horizon_s: float, *, catalog: Catalog | None = None,
                  options: ScreenOptions = ScreenOptions(), engine: dict | None = None, rejection_budget: float = 0.0,
                  max_instances: int = 64, progress=None, prefixes: bool = False,
                  spec_engine: dict | None = None, on_total=None) -> list:
    """Every configuration of the screen's grid at its cheapest passing count, cheapest first.

    Parameters
    ----------
    model : Model or str
    demand : Demand
        Rate, SLOs and length statistics (the screen's).
    workloads : sequence of (arrival_s, prompt_tokens, output_tokens), or SeedWorkloads
        One per seed (:func:`fastsim.search.verify`); every configuration sees the same ones. A
        :class:`fastsim.search.SeedWorkloads` (the planner's) lets a count whose attainment the 95%
        Wilson bound cannot decide run more seeds; a count passes only when the bound clears the
        target (:mod:`fastsim.search.confidence`).
    horizon_s : float
        Arrival window simulated (s).
    catalog, options
        As for :func:`fastsim.analytic.screen`.
    engine, rejection_budget
        As for :func:`fastsim.search.verify`.
    max_instances : int
        Largest count tried for one configuration (>= 1).
    prefixes : bool
        The workloads carry prefix blocks (:func:`fastsim.search.unsimulated_reason`): plans
        sized for prefix hits can then be simulated under an engine policy.
    progress : callable(), optional
        Called after each configuration.
    spec_engine : dict, optional
        With ``engine`` None (the lecture policy): the engine that verifies the colocated plans
        sized with speculative decoding (:func:`verification_engine`); None leaves them not
        simulated.
    on_total : callable(int), optional
        Called once, before the first ``progress``, with the number of configurations that
        ``progress`` will count.

    Returns
    -------
    list of (Plan, RepairResult or None, str, str, Plan, float, float, tuple of Plan)
        Per configuration: the verified plan (at its cheapest passing count, or the last count
        tried; None for a pruned disaggregated or refused configuration), its
        :class:`~fastsim.search.RepairResult` (None when pruned), how the screen saw it
        (:data:`SCREEN_VIEWS`, ``pruned``, or ``not simulated`` for a plan the simulator cannot
        run as the screen sized it: speculative decoding or prefix hits under the lecture
        policy), the reason (screen's, pruning's, the simulator's or the count
        search's), the screen's own plan, and the screen's integer and efficiency costs (US
        dollars per million output tokens, inf where it found none), and the screen's plans of
        the other rows that are the same deployment (:func:`same_deployment_key`: simulated
        once, for the first); passing plans first by verified cost, then the rest.

    Raises
    ------
    FastsimInputError
        A bad ``max_instances``, or anything :func:`fastsim.search.verify` rejects.
    """
    catalog = catalog or default_catalog()
    model = catalog.model(model) if isinstance(model, str) else model
    if isinstance(max_instances, bool) or int(max_instances) != max_instances or max_instances < 1:
        raise FastsimInputError("max_instances", max_instances, "an integer >= 1")
    slo = SLO(demand.ttft_s, demand.tpot_s, demand.slo_attainment)
    grid = screen(model, demand, catalog=catalog, options=options)
    kw = dict(horizon_s=horizon_s, catalog=catalog, constants=options.constants, model=model, engine=engine,
              rejection_budget=rejection_budget)
    out = []
    groups = _grid_groups(grid, model, demand, catalog, options)
    if on_total is not None:
        on_total(len(groups))
    for row, same in groups:
        n_before = len(out)
        costs = (float(row.usd_per_million_output_tokens), float(row.efficiency_usd_per_million_output_tokens))
        _run_row(row, out, model, demand, workloads, slo, kw, catalog, options, engine, int(max_instances),
                 prefixes, spec_engine)
        out[n_before:] = [e + costs + (tuple(same),) for e in out[n_before:]]
        if progress is not None:
            progress()
    out.sort(key=lambda e: (not (e[1] is not None and e[1].passed), e[1] is None,
                            e[0].price_usd_per_hour if e[0] is not None else math.inf))
    return out


def verification_engine(plan, engine: dict | None, spec_engine: dict | None, prefixes: bool = False) -> tuple:
    """The engine policy that verifies ``plan`` and why it cannot be simulated ("" when it can).

    The lecture policy (``engine`` None) has no speculative decoding; a colocated plan sized with
    it is then verified under ``spec_engine`` (e.g. ``{"policy": "vllm"}``, whose kernel
    simulates the draft and the verify step, :mod:`fastsim.sim.policy`) rather than left
    unsimulated.

    Parameters
    ----------
    plan : Plan
    engine : dict or None
        The verification's engine (``engine`` of :func:`fastsim.search.verify`; None: lecture).
    spec_engine : dict or None
        The engine for speculative plans under the lecture policy; None leaves them unsimulated.
    prefixes : bool
        The workloads carry prefix blocks (:func:`fastsim.search.unsimulated_reason`).

    Returns
    -------
    tuple of (dict or None, str)
        The engine to verify under, and the reason the plan is not simulated ("" when it is).
    """
    why = unsimulated_reason(plan, engine, prefixes)
    if why and engine is None and plan.spec_gamma and plan.mode != "colocated":
        why = ("speculative decoding on a disaggregated plan, which no policy of the simulator runs (the lecture "
               "policy has no speculation, the engine policies model colocated instances)")
    if (why and engine is None and spec_engine is not None and plan.spec_gamma
            and not unsimulated_reason(plan, spec_engine, prefixes)):
        return spec_engine, ""
    return engine, why


def same_deployment_key(plan, catalog: Catalog | None = None, constants=None, model: Model | None = None) -> tuple:
    """What the simulator runs for ``plan``: two plans with equal keys are the same deployment.

    The key is built from the simulator's inputs, not from labels: the step-parameter vectors of
    :func:`fastsim.search.sim_plan` (every stage's of a pipelined plan; SPEC §3; bit for bit, except
    that the counts of all-reduces and all-to-alls enter as the fixed and per-token communication
    seconds of a step they give, :func:`_step_signature`, the only way the step time uses them), the
    instance counts, the chunk, the
    batch cap, the speculative decoding (gamma, alpha, the draft's step parameters), the
    data-parallel degree (engine policies split their limits over DP ranks,
    :mod:`fastsim.sim.policy`) and the price per hour. DeepSeek-V3's TP8 and TP8+EP8 have equal
    keys (at EP = TP = 8 experts per token, a MoE layer's dispatch and combine all-to-alls cost
    what its second all-reduce costs, and every GPU reads the same weight bytes), so the planner
    simulates and lists them once.

    Parameters
    ----------
    plan : Plan
    catalog : Catalog, optional
        Defaults to the built-in catalog.
    constants : StepConstants, optional
        The step model's constants (default ``StepConstants()``).
    model : Model, optional
        The model when it is not a catalog entry.

    Returns
    -------
    tuple
        Hashable; equal for plans the simulator cannot tell apart (their step times agree up to
        floating-point rounding: the communication seconds are summed in another order).

    Raises
    ------
    FastsimInputError
        Anything :func:`fastsim.search.sim_plan` refuses.
    """
    from .search import sim_plan
    from .stepmodel import StepConstants
    catalog = catalog or default_catalog()
    constants = constants if constants is not None else StepConstants()
    sp = sim_plan(plan, catalog, constants, model)
    if plan.mode == "colocated" and hasattr(sp, "stages"):
        # a pipeline: every stage's vector, in order (PipelinePlan)
        sim = (("pipeline",) + tuple(_step_signature(r) for r in sp.stages), int(sp.n_instances),
               int(sp.chunk_tokens), int(sp.max_batch))
        dp = int(plan.layout_kwargs(plan.tp).get("dp", 1))
    elif plan.mode == "colocated":
        sim = (_step_signature(sp.p), int(sp.n_instances), int(sp.chunk_tokens), int(sp.max_batch))
        dp = int(plan.layout_kwargs(plan.tp).get("dp", 1))
    else:
        sim = (_step_signature(sp.p_prefill), int(sp.n_prefill), _step_signature(sp.p_decode), int(sp.n_decode),
               int(sp.prefill_token_budget), int(sp.decode_max_batch))
        dp = (int(plan.layout_kwargs(plan.prefill_tp).get("dp", 1)), int(plan.layout_kwargs(plan.decode_tp).get("dp", 1)))
    spec = ()
    if plan.spec_gamma and plan.mode == "colocated":
        from .specdec import spec_step_params
        model = model or catalog.model(plan.model)
        _, pd = spec_step_params(model, catalog.gpu(plan.gpu), catalog.precision(plan.precision), plan.tp, constants,
                                 plan.spec, catalog=catalog, **plan.layout_kwargs(plan.tp))
        spec = (int(plan.spec_gamma), float(plan.spec_alpha), _step_signature(pd))
    elif plan.spec_gamma:
        spec = (int(plan.spec_gamma), float(plan.spec_alpha), str(plan.spec_draft))
    return (plan.mode, sim, dp, spec, float(plan.prefix_hit_fraction or 0.0), float(plan.price_usd_per_hour))


def _step_signature(p) -> tuple:
    """A step-parameter vector as the step time sees it (SPEC §3, ``fastsim.stepmodel._parts``).

    The communication seconds of a step are ``A + B x tokens``, with ``A`` and ``B`` the sums
    over the all-reduces (``P_N_AR``) and the all-to-alls (``P_N_A2A``) of their alpha and
    per-token beta terms; the two counts enter the step time only there. The vector with the
    two counts zeroed (bit for bit) and ``A``, ``B`` to 12 significant digits.
    """
    import numpy as np
    from .stepmodel import (P_ALPHA, P_DP, P_EP_BW, P_ETA_NV, P_GPUS, P_HIDDEN, P_N_A2A, P_N_AR, P_NVLINK,
                            P_TOPK, P_TP)
    q = np.array(p, dtype=np.float64)
    tp, g = q[P_TP], q[P_GPUS]
    fixed = q[P_N_AR] * 2.0 * (tp - 1.0) * q[P_ALPHA] + q[P_N_A2A] * 2.0 * (g - 1.0) * q[P_ALPHA]
    per_token = (q[P_N_AR] * 2.0 * (tp - 1.0) / tp * (q[P_HIDDEN] * 2.0 / q[P_DP]) / (q[P_ETA_NV] * q[P_NVLINK])
                 + q[P_N_A2A] * 2.0 * (g - 1.0) / g * (q[P_TOPK] / g * q[P_HIDDEN] * 2.0) / (q[P_ETA_NV] * q[P_EP_BW]))
    q[P_N_AR] = q[P_N_A2A] = 0.0
    return q.tobytes(), float(f"{fixed:.12g}"), float(f"{per_token:.12g}")


def _refused(row, model, catalog) -> str | None:
    """Why a colocated screen row is no plan to simulate: its layout (:func:`fastsim.stepmodel.layout_refusal`),
    its pipeline (:func:`fastsim.stepmodel.pp_refusal`) or speculative decoding on a pipeline (None when it
    is a plan)."""
    g = catalog.gpu(row.gpu)
    why = layout_refusal(model, g, row.layout, int(row.tp))
    pp = int(getattr(row, "pp", 1) or 1)
    if why is None and pp > 1:
        why = pp_refusal(model, g, int(row.tp), pp)
    if why is None and pp > 1 and int(getattr(row, "spec_gamma", 0) or 0):
        why = str(row.reason or "speculative decoding on a pipelined instance is not screened")
    return why


def _row_plan(row, model, demand, catalog, options):
    """The plan the count search of an infeasible colocated row starts from: one instance (:func:`plan_for`)."""
    return plan_for(model, demand, gpu=row.gpu, precision=row.precision, tp=int(row.tp), instances=1,
                    catalog=catalog, options=options, layout=row.layout,
                    spec_gamma=int(getattr(row, "spec_gamma", 0) or 0), pp=int(getattr(row, "pp", 1) or 1))


def _grid_groups(grid, model, demand, catalog, options) -> list:
    """The grid's rows grouped by :func:`same_deployment_key` of the plan each would simulate.

    Returns a list of ``(row, [plans of the other rows])`` in the grid's order (the plan each
    other row would simulate); a row whose plan cannot be built (refused, pruned for memory)
    stands alone.
    """
    groups, index = [], {}
    for _, row in grid.iterrows():
        key, reason, plan = None, str(row.reason or ""), row.plan
        try:
            if row.feasible:
                key = (True, same_deployment_key(row.plan, catalog, options.constants, model))
            elif (row["mode"] == "colocated" and _MEMORY not in reason and _TOO_MANY not in reason
                  and not _refused(row, model, catalog)):
                # the plan the count search starts from (_run_row): one instance
                sp = _row_plan(row, model, demand, catalog, options)
                key, plan = (False, same_deployment_key(sp, catalog, options.constants, model)), sp
        except FastsimInputError:
            key = None
        if key is None:
            groups.append((row, []))
        elif key in index:
            groups[index[key]][1].append(plan)
        else:
            index[key] = len(groups)
            groups.append((row, []))
    return groups


def _run_row(row, out, model, demand, workloads, slo, kw, catalog, options, engine, max_instances,
             prefixes, spec_engine=None) -> None:
    """Verify one configuration of the grid at its cheapest passing count; append its entry to ``out``."""
    reason = str(row.reason or "")
    if row.feasible:
        engine, why = verification_engine(row.plan, engine, spec_engine, prefixes)
        if why:
            out.append((row.plan, None, "not simulated", why, row.plan))
            return
    if row.feasible:
        sp = row.plan
    elif row["mode"] == "colocated" and _refused(row, model, catalog):
        # a layout the model refuses at this TP (e.g. a TP that does not divide the heads), or a pipeline
        # stage larger than a node: no plan to simulate
        out.append((None, None, "pruned", reason, None))
        return
    elif row["mode"] == "colocated":
        sp = _row_plan(row, model, demand, catalog, options)
        engine, why = verification_engine(sp, engine, spec_engine, prefixes)
        if why:
            out.append((sp, None, "pruned", f"{reason or 'infeasible'}; not simulated: {why}", sp))
            return
    else:
        sp = None
    kw = dict(kw, engine=engine)
    if _MEMORY in reason or _TOO_MANY in reason or sp is None:
        out.append((sp, None, "pruned", reason or "infeasible", sp))
        return
    if sp.mode == "colocated":
        base = sp
        why = "" if engine is not None else lone_request_check(
            base, demand.latency_prompt_tokens, demand.latency_output_tokens, slo, catalog, options.constants,
            model)
        if why:
            out.append((base, None, "pruned", "no count can pass: " + why, sp))
            return
        n0 = int(sp.instances) if row.feasible else 1
        n, hist = _count_search(base, lambda k: verify(base.with_instances(instances=k),
                                                       workloads, slo, **kw), n0, max_instances)
        tried = sorted(hist)
        history = [(base.with_instances(instances=k), hist[k]) for k in tried]
        if n is None:
            last = tried[-1]
            why = (f"no instance count can pass: {hist[last].reason}" if _hopeless(hist[last]) else
                   f"fails up to {last} instances: " + (hist[last].reason or "attainment below target"))
            rr = RepairResult(base.with_instances(instances=last), hist[last], False, n0 if row.feasible else None,
                              why, history)
            out.append((rr.plan, rr, "missed" if not row.feasible else "under-sized", rr.reason, sp))
        else:
            final = base.with_instances(instances=n)
            # repaired from the screen's count (none when the screen sized none: the search began at 1)
            rr = RepairResult(final, hist[n], True, None if n == n0 or not row.feasible else n0, "", history)
            view = ("missed" if not row.feasible else "kept" if n == n0
                    else "over-sized" if n < n0 else "under-sized")
            out.append((final, rr, view, reason if not row.feasible else "", sp))
    else:
        rr = repair(sp, workloads, slo, latency_prompt_tokens=demand.latency_prompt_tokens,
                    latency_output_tokens=demand.latency_output_tokens, **kw)
        n_p0, n_d0 = sp.prefill_instances, sp.decode_instances
        if rr.passed:
            cur, v = rr.plan, rr.verification
            history = list(rr.history)
            for side in ("prefill", "decode"):
                while True:
                    k = getattr(cur, f"{side}_instances")
                    if k <= 1:
                        break
                    trial = cur.with_instances(**{f"{side}_instances": k - 1})
                    tv = verify(trial, workloads, slo, **kw)
                    history.append((trial, tv))
                    if not tv.passed:
                        break
                    cur, v = trial, tv
            moved = (cur.prefill_instances, cur.decode_instances) != (n_p0, n_d0)
            rr = RepairResult(cur, v, True, n_p0 + n_d0 if moved else None, "", history)
            view = "kept" if not moved else "over-sized" if cur.gpus < sp.gpus else "under-sized"
            out.append((cur, rr, view, "", sp))
        else:
            out.append((rr.plan, rr, "under-sized", rr.reason, sp))

