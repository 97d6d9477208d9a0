"""The planner: analytic screen -> simulation -> repair -> ranking by verified cost (SPEC §5, §7).

``plan_deployment`` screens the whole grid analytically, verifies the ``top_k`` cheapest feasible
plans in the discrete-event simulator (several seeds of a synthetic workload with common random
numbers, or a replay of a real trace), repairs the ones that fail by adding instances, and ranks the
result by the verified integer cost.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .analytic import Demand, Plan, ScreenOptions, cost_usd_per_million_output_tokens, plan_for, screen
from .catalog import Catalog, Model, default_catalog
from .errors import FastsimInputError, require_positive
from .search import SLO, RepairResult, repair, unsimulated_reason

__all__ = ["PlanReport", "PlannedDeployment", "gpu_budget_excess", "plan_deployment", "plan_from_record",
           "unsimulated_reason"]


@dataclass(frozen=True)
class PlannedDeployment:
    """One recommended plan with its analytic figures and its verification.

    Attributes
    ----------
    analytic : Plan
        The plan as the analytic screen sized it.
    repair : RepairResult or None
        Its simulation, repair and final plan (None when not verified).
    analytic_usd_per_million_output_tokens, efficiency_usd_per_million_output_tokens : float
        Integer cost of the analytic plan at the target rate, and efficiency cost (capacity,
        fractional instances), in US dollars per million output tokens (SPEC §1).
    rate_req_per_s : float
        Target rate (req/s), as offered (recorded by :meth:`to_dict`).
    mean_output_tokens : float
        Mean output tokens of a served request (for the cost): the requests within the model's
        context (:meth:`fastsim.analytic.Demand.within_context`), as the screen's cost.
    ttft_slo_s, tpot_slo_s : float or None
        P90 targets (s), reported in :meth:`to_dict`.
    screen_view : str or None
        Under the verified search (:mod:`fastsim.verified`): how the analytic screen saw this
        configuration, ``kept``, ``over-sized``, ``under-sized`` or ``missed``; None under the
        screen's search.
    screen_reason : str
        Why the screen missed it (its reason for calling the configuration infeasible).
    screen : {"lecture", "queueing"}
        The analytic screen that sized it (``queueing`` with ``ScreenOptions.queueing``): its
        analytic capacities depend on it, so :meth:`to_dict` records it for
        :func:`plan_from_record`.
    """

    analytic: Plan
    repair: RepairResult | None
    analytic_usd_per_million_output_tokens: float
    efficiency_usd_per_million_output_tokens: float
    rate_req_per_s: float
    mean_output_tokens: float
    ttft_slo_s: float | None = None
    tpot_slo_s: float | None = None
    screen_view: str | None = None
    screen_reason: str = ""
    screen: str = "lecture"
    #: Share of the offered requests within the model's context (the rest are rejected and serve no
    #: output tokens): the cost divides by the served output, as the screen's does.
    served_fraction: float = 1.0
    #: The screen's plans of other layouts that are the same deployment for the step model
    #: (:func:`fastsim.verified.same_deployment_key`): simulated once, listed once.
    same_as: tuple = ()
    #: The percentile the targets are judged at (:attr:`fastsim.plans.Demand.slo_percentile`).
    slo_percentile: float = 90.0

    @property
    def layout_labels(self) -> list:
        """Every instance label that gives this deployment (list of str): its own first, then those of
        :attr:`same_as` (``TP8``, ``TP8+EP8``; ``P:TP8 D:TP8`` for a disaggregated plan)."""
        out = []
        for p in (self.plan,) + tuple(self.same_as):
            lab = (p.label(p.tp) if p.mode == "colocated"
                   else f"P:{p.label(p.prefill_tp)} D:{p.label(p.decode_tp)}")
            if lab not in out:
                out.append(lab)
        return out

    @property
    def plan(self) -> Plan:
        """The final plan (:class:`~fastsim.analytic.Plan`; repaired when a repair was made)."""
        return self.repair.plan if self.repair is not None else self.analytic

    @property
    def usd_per_million_output_tokens(self) -> float:
        """Integer cost of the final plan at the target rate (float, US dollars per million output
        tokens; SPEC §1 cost formula)."""
        p = self.plan
        rate = self.rate_req_per_s if self.served_fraction == 1.0 else self.rate_req_per_s * self.served_fraction
        if p.heterogeneous:      # each side at its own price
            return float(cost_usd_per_million_output_tokens(1, p.price_usd_per_hour, rate, self.mean_output_tokens))
        return float(cost_usd_per_million_output_tokens(p.gpus, p.price_usd_per_gpu_hour, rate,
                                                        self.mean_output_tokens))

    def to_dict(self) -> dict:
        """The JSON object of ``fastsim plan --format json`` (seconds, US dollars).

        Returns
        -------
        dict
            The final plan's instance ``layout`` (``tp``, ``tp+ep`` or ``dp+ep``), GPUs (a colocated
            plan's ``tp``, pipeline stages ``pp`` and ``gpus_per_instance = tp x pp``),
            ``max_batch`` (0 = no cap), the analytic ``screen`` that sized it (``lecture`` or
            ``queueing``), costs, capacity, price (``price_usd_per_gpu_hour``
            per GPU, ``usd_per_hour`` for the plan's GPUs, as the sweep table names them),
            rate and targets; ``spec_gamma`` (0 = no speculative decoding), ``spec_alpha`` and
            ``spec_draft`` when the screen considered speculative decoding, and
            ``prefix_hit_fraction`` when it was not 0; the prefill side's GPU, precision and
            price of a heterogeneous plan; and a
            ``verification`` dict (None when not verified; with the attainment's 95% Wilson interval
            ``attainment_ci95_lo`` / ``_hi``, the seeds asked for, ``runs_asked``, beside those run,
            and, when the SLO percentile is not 90, ``ttft_at_percentile_s`` / ``tpot_at_percentile_s``
            and a top-level ``slo_percentile``); non-finite P90s become None. Each
            dict has ``null_reasons``: field -> why it is None, starting with ``infinite`` (the
            value is +inf) or ``not applicable`` (no value exists). Every field that makes the
            plan is there: :func:`plan_from_record` rebuilds the same plan from it.
        """
        p = self.plan
        d = {"model": p.model, "gpu": p.gpu, "precision": p.precision, "mode": p.mode, "layout": p.layout,
             "max_batch": int(p.max_batch), "screen": self.screen}
        if p.heterogeneous:      # gpu / precision / price_usd_per_gpu_hour are then the decode side's
            d.update(prefill_gpu=p.prefill_gpu_name, prefill_precision=p.prefill_precision_name,
                     prefill_price_usd_per_gpu_hour=p.prefill_price_usd_per_gpu_hour,
                     prefill_gpus=p.prefill_tp * p.prefill_instances, decode_gpu=p.gpu,
                     decode_precision=p.precision, decode_price_usd_per_gpu_hour=p.price_usd_per_gpu_hour,
                     decode_gpus=p.decode_tp * p.decode_instances)
        if p.spec_alpha is not None:      # screened with speculative decoding: gamma 0 = without it
            d.update(spec_gamma=p.spec_gamma, spec_alpha=p.spec_alpha, spec_draft=p.spec_draft)
        if p.prefix_hit_fraction:
            d["prefix_hit_fraction"] = p.prefix_hit_fraction
        if p.mode == "disaggregated":
            d.update(prefill_tp=p.prefill_tp, decode_tp=p.decode_tp,
                     prefill_instances=p.prefill_instances, decode_instances=p.decode_instances)
        else:
            d.update(tp=p.tp, pp=int(p.pp), gpus_per_instance=p.gpus_per_instance, instances=p.instances,
                     chunk_tokens=p.chunk_tokens)
        d.update(gpus=p.gpus, usd_per_million_output_tokens=self.usd_per_million_output_tokens,
                 analytic_usd_per_million_output_tokens=self.analytic_usd_per_million_output_tokens,
                 efficiency_usd_per_million_output_tokens=self.efficiency_usd_per_million_output_tokens,
                 capacity_req_per_s=p.capacity_req_per_s,
                 instance_capacity_req_per_s=(self.analytic.instance_capacity_req_per_s
                                              if p.mode == "colocated" else None),
                 price_usd_per_gpu_hour=p.price_usd_per_gpu_hour, usd_per_hour=p.price_usd_per_hour,
                 rate_req_per_s=self.rate_req_per_s,
                 ttft_slo_s=self.ttft_slo_s, tpot_slo_s=self.tpot_slo_s)
        if self.slo_percentile != 90.0:      # the targets are judged at another percentile than P90
            d["slo_percentile"] = self.slo_percentile
        if self.same_as:      # other layouts the step model cannot tell from this one
            d["same_deployment_layouts"] = list(dict.fromkeys([p.layout] + [q.layout for q in self.same_as]))
        if self.screen_view is not None:
            d.update(screen_view=self.screen_view, screen_reason=self.screen_reason or None)
            if self.screen_view == "missed":     # the screen sized none: no analytic capacity
                d.update(capacity_req_per_s=None,
                         instance_capacity_req_per_s=None if p.mode == "colocated" else d["instance_capacity_req_per_s"])
        from ._output import null_reasons, percentile_reason
        r = self.repair
        if r is None:
            d["verification"] = None
        else:
            v = r.verification
            ver = {
                "attainment": v.attainment, "ttft_p90_s": v.ttft_p90_s, "tpot_p90_s": v.tpot_p90_s,
                "passed": r.passed, "overloaded": v.overloaded,
                "repaired_from_instances": r.repaired_from_instances,
                "instances_after_repair": (p.prefill_instances + p.decode_instances if p.mode == "disaggregated"
                                           else p.instances),
                "runs": v.runs, "measured_requests": v.measured, "rejected_requests": v.rejected,
                "policy": v.policy, "preemptions": v.preemptions, "cache_hit_fraction": v.cache_hit_fraction,
                "unrepairable_reason": r.reason or None,
                "rejected_in_context_requests": v.rejected_in_context,
                "fail_reason": v.reason or None,
                # the 95% Wilson interval of the attainment: a pass needs its lower end at the target
                "attainment_ci95_lo": v.attainment_ci95_lo, "attainment_ci95_hi": v.attainment_ci95_hi,
                "runs_asked": v.runs_asked or v.runs,
            }
            if self.slo_percentile != 90.0:
                ver.update(ttft_at_percentile_s=v.ttft_at_percentile_s, tpot_at_percentile_s=v.tpot_at_percentile_s)

            def explain(k, x):
                if k in ("ttft_p90_s", "tpot_p90_s"):
                    return percentile_reason(k[:4].upper(), 0.9, x, v.measured)
                if k in ("ttft_at_percentile_s", "tpot_at_percentile_s"):
                    return percentile_reason(k[:4].upper(), self.slo_percentile / 100.0, x, v.measured)
                if k == "repaired_from_instances":
                    return "not applicable: the plan passed as planned (or no instance count can pass)"
                if k == "unrepairable_reason":
                    return "not applicable: the plan passes, or a repair was tried"
                if k == "fail_reason":
                    return "not applicable: the plan passes"
                if k == "cache_hit_fraction":
                    return "not applicable: no prefix cache (the lecture policy, or caching off)"
                return None
            ver["null_reasons"] = null_reasons(ver, explain)
            d["verification"] = {k: (_finite(x) if isinstance(x, float) else x) for k, x in ver.items()}

        def explain_top(k, x):
            if k == "verification":
                from .verified import verification_engine
                why = verification_engine(self.analytic, None, None)[1]
                return ("not applicable: not simulated (" + (why or "analytic ranking only, or below the verified "
                                                                    "top k") + ")")
            if k == "instance_capacity_req_per_s":
                return "not applicable: a disaggregated plan (see prefill and decode capacities)"
            if k == "screen_reason":
                return "not applicable: the screen did not miss this configuration"
            if k in ("capacity_req_per_s", "instance_capacity_req_per_s") and self.screen_view == "missed":
                return ("not applicable: the analytic screen finds this configuration infeasible (screen_reason); "
                        "the verification gives its simulated figures")
            if k == "analytic_usd_per_million_output_tokens":
                return "infinite: the analytic screen finds this configuration infeasible"
            return None
        d["null_reasons"] = null_reasons(d, explain_top)
        return d


def plan_from_record(record: dict, model: Model | str | None, demand: Demand, *, catalog: Catalog | None = None,
                     options: ScreenOptions = ScreenOptions()) -> Plan:
    """The plan of one record of ``fastsim plan --format json`` (:meth:`PlannedDeployment.to_dict`).

    The inverse of :meth:`PlannedDeployment.to_dict`: the plan is rebuilt by
    :func:`fastsim.analytic.plan_for` from the fields that make it (GPU, precision, mode, layout,
    TPs, instance counts, chunk, ``max_batch``, speculative decoding, prefix-cache hits, a
    heterogeneous prefill side, the analytic ``screen``), its analytic capacities recomputed for
    ``demand`` (for the demand the plan was made for, the same plan as the planner's).

    A record without ``layout`` (written before the planner recorded it) reads as ``tp`` when
    that is the only plan it can be: a dense model, or every TP of the plan 1 (where every layout
    gives EP 1 and DP 1). An MoE plan with a TP above 1 differs by layout, and such a record is
    refused rather than read as ``tp``. ``max_batch`` missing reads as 0 (no cap), ``pp`` as 1 (no
    pipeline), ``screen`` as ``lecture``, the speculative and prefix-cache fields as absent.

    Parameters
    ----------
    record : dict
        One plan object (keys ``gpu``, ``precision``, ``mode``, and ``tp``, ``instances`` for a
        colocated plan or ``prefill_tp``, ``decode_tp``, ``prefill_instances``,
        ``decode_instances`` for a disaggregated one; the others optional, as above).
    model : Model, str or None
        The model; None takes the record's ``model``.
    demand : Demand
        Rate, SLOs and length statistics of the analytic capacities.
    catalog : Catalog, optional
        Defaults to the built-in catalog.
    options : ScreenOptions
        The screen's constants (:attr:`ScreenOptions.constants`); the record's speculative
        decoding, prefix-cache hits and screen replace those of ``options``.

    Returns
    -------
    Plan

    Raises
    ------
    FastsimInputError
        Field ``plan key NAME`` for a missing or malformed key (a key absent, a layout not one
        of :data:`fastsim.stepmodel.LAYOUTS` or missing on an MoE record as above, a ``screen``
        other than ``lecture`` or ``queueing``), or anything :func:`fastsim.analytic.plan_for`
        refuses.
    """
    from dataclasses import replace
    from .stepmodel import LAYOUTS
    catalog = catalog or default_catalog()
    if not isinstance(record, dict):
        raise FastsimInputError("plan", type(record).__name__, "a plan object (a JSON object)")

    def need(key):
        if record.get(key) is None:
            raise FastsimInputError(f"plan key {key}", None, f"a value (a {record.get('mode') or 'colocated'} plan "
                                    "object of `fastsim plan --format json` has one)")
        return record[key]

    if model is None:
        model = need("model")
    if isinstance(model, str):
        model = catalog.model(model)
    mode = need("mode")
    if mode not in ("colocated", "disaggregated"):
        raise FastsimInputError("plan key mode", mode, "colocated or disaggregated")
    disagg = mode == "disaggregated"
    tps = (need("prefill_tp"), need("decode_tp")) if disagg else (need("tp"),)
    layout = record.get("layout")
    if layout is None:
        if model.is_moe and any(t != 1 for t in tps):
            raise FastsimInputError("plan key layout", None, "tp, tp+ep or dp+ep: "
                                    f"{model.name} is a mixture-of-experts model, whose plans at TP{max(tps)} "
                                    "differ by layout, and this plan object does not say which it is (written "
                                    "before `fastsim plan` recorded the layout); add \"layout\" to it")
        layout = "tp"
    if layout not in LAYOUTS:
        raise FastsimInputError("plan key layout", layout, "one of " + ", ".join(LAYOUTS))
    screen_kind = record.get("screen") or "lecture"
    if screen_kind not in ("lecture", "queueing"):
        raise FastsimInputError("plan key screen", screen_kind, "lecture or queueing")
    opts = replace(options, queueing=screen_kind == "queueing")
    gamma = record.get("spec_gamma") or 0
    if record.get("spec_alpha") is not None:
        opts = replace(opts, spec_alpha=float(record["spec_alpha"]), spec_draft=record.get("spec_draft"),
                       spec_gammas=(int(gamma),) if gamma else opts.spec_gammas)
    elif gamma:
        need("spec_alpha")
    if record.get("prefix_hit_fraction"):
        opts = replace(opts, prefix_hit_fraction=float(record["prefix_hit_fraction"]))
    kw = dict(gpu=need("gpu"), precision=need("precision"), catalog=catalog, options=opts, layout=layout,
              spec_gamma=gamma, max_batch=record.get("max_batch") or 0)
    if disagg:
        return plan_for(model, demand, mode="disaggregated", tp=tps[1], prefill_tp=tps[0], decode_tp=tps[1],
                        prefill_instances=need("prefill_instances"), decode_instances=need("decode_instances"),
                        prefill_gpu=record.get("prefill_gpu"), prefill_precision=record.get("prefill_precision"),
                        **kw)
    pp = record.get("pp", 1)
    from .plans import check_pp
    pp = check_pp(1 if pp is None else pp, "plan key pp", model.layers)
    return plan_for(model, demand, tp=tps[0], instances=need("instances"), chunk_tokens=record.get("chunk_tokens"),
                    pp=pp, **kw)


def _grid_refusal(model: Model, catalog: Catalog, options: ScreenOptions) -> FastsimInputError | None:
    """The error for a grid whose every configuration the model refuses (None when one can run).

    A layout the model refuses at every TP and GPU of the grid (an expert-parallel layout on a
    dense model; a TP that does not divide the attention heads) leaves nothing to screen; the
    error names the layouts (or the TPs, for ``tp``) and the model's reason.
    """
    from .stepmodel import layout_refusal
    gpus = [catalog.gpu(g) for g in (options.gpus or catalog.default_gpus())]
    lays, tps = options.layouts_for(model), options.tps_for(model)
    first = {}
    for lay in lays:
        for tp in tps:
            for g in gpus:
                why = layout_refusal(model, g, lay, int(tp))
                if why is None:
                    return None
                first.setdefault(lay, why)
    if "tp" in lays:
        return FastsimInputError("tp", tps[0] if len(tps) == 1 else ", ".join(map(str, tps)), first["tp"])
    return FastsimInputError("layout", lays[0] if len(lays) == 1 else ", ".join(lays), first[lays[0]])


def _finite(x):
    return x if isinstance(x, float) and math.isfinite(x) else None


@dataclass
class PlanReport:
    """What ``plan_deployment`` found.

    Attributes
    ----------
    deployments : list of PlannedDeployment
        Best first: passed plans by verified cost, then those that could not be repaired.
    grid : pandas.DataFrame
        The whole analytic screen (see :func:`fastsim.analytic.screen`).
    demand : Demand
        The demand that was screened.
    notes : list of str
        Facts about the input a user must know (e.g. requests longer than the model's context).
    """

    deployments: list
    grid: pd.DataFrame
    demand: Demand
    notes: list = field(default_factory=list)

    def to_frame(self) -> pd.DataFrame:
        """One row per deployment, columns flattened (``verification.*`` become ``verified_*``).

        Returns
        -------
        pandas.DataFrame
            The :meth:`PlannedDeployment.to_dict` fields with nullable dtypes
            (``DataFrame.convert_dtypes``); empty when there are no deployments.
        """
        rows = []
        for d in self.deployments:
            row = d.to_dict()
            ver = row.pop("verification") or {}
            for k, v in ver.items():
                row[f"verified_{k}" if not k.startswith("repaired") else k] = v
            rows.append(row)
        # nullable dtypes: integer columns stay integers where a value is missing (disaggregated rows)
        return pd.DataFrame(rows).convert_dtypes()


def _screen_kind(options: ScreenOptions) -> str:
    """``PlannedDeployment.screen`` of a screen's options: ``queueing`` or ``lecture``."""
    return "queueing" if options.queueing else "lecture"


def _workloads_for(source, demand: Demand, seeds: int, horizon_s: float, seed: int, arrival: str = "poisson",
                   cv: float = 1.0):
    """(workloads, horizon) of a verification: a trace once, or the synthetic workloads of ``seeds``
    children of ``seed`` (:class:`fastsim.search.SeedWorkloads`: an undecided verdict draws more)."""
    from . import workload as W
    from .search import SeedWorkloads
    if isinstance(source, W.Workload):
        # the last request of a trace arrives exactly at its end: keep it inside the half-open window
        return [source], float(np.nextafter(source.duration_s, np.inf))

    def make(s):
        w = W.synthesize(source, demand.rate_req_per_s, horizon_s, s, arrival=arrival, cv=cv)
        return w.arrival_s, w.prompt_tokens, w.output_tokens
    return SeedWorkloads(make, seed, seeds), horizon_s


def plan_deployment(model: Model | str, demand: Demand, source, *, top_k: int = 10, seeds: int = 8,
                    horizon_s: float = 600.0, verify: bool = True, seed: int = 0,
                    catalog: Catalog | None = None, options: ScreenOptions = ScreenOptions(),
                    max_added: int | None = None, progress=None, engine: dict | None = None,
                    rejection_budget: float = 0.0, search: str = "verified", spec_policy: str | None = None,
                    on_total=None, max_gpus: dict | None = None, arrival: str = "poisson",
                    cv: float = 1.0) -> PlanReport:
    """Find the cheapest deployments that pass their SLOs in simulation.

    The pipeline of SPEC §5 and §7: analytic screen (:func:`fastsim.analytic.screen`), then the
    ``top_k`` feasible plans verified and repaired in simulation, re-ranked by verified cost.

    Parameters
    ----------
    model : Model or str
        A model or a catalog name / ``config.json`` path.
    demand : Demand
        Rate, targets, the SLO percentile (:attr:`Demand.slo_percentile`, 90 by default: a plan
        passes when that share of its measured requests meet both targets) and the length
        statistics for the screen.
    source : Scenario, str or fastsim.workload.Workload
        What the simulator replays: a scenario or its name (synthetic arrivals, Poisson or
        ``arrival``, and lognormal lengths at ``demand.rate_req_per_s``, ``seeds`` runs of
        ``horizon_s`` seconds) or a trace (its own arrivals and lengths, one run).
    top_k : int
        Feasible analytic plans to verify (>= 1).
    seeds : int
        Seeds per verification for synthetic workloads (>= 1); a verification whose attainment
        the 95% Wilson bound cannot decide adds seeds, doubling up to 4 x ``seeds``
        (:mod:`fastsim.search.confidence`).
    horizon_s : float
        Simulated arrival window per run (s), 600 by default (lecture §2.3, lesson three).
    verify : bool
        False returns the analytic ranking only. Plans the verification cannot simulate as sized
        (speculative decoding, prefix-cache hits: :func:`unsimulated_reason`) stay unverified,
        with a note.
    seed : int
        Root seed of the synthetic workloads (:func:`fastsim.workload.seeds_for`).
    catalog : Catalog, optional
        Defaults to the built-in catalog.
    options : ScreenOptions
        The grid and the screen's constants (its step constants are used in simulation too).
    max_added : int, optional
        Passed to :func:`fastsim.search.repair`.
    progress : callable, optional
        Called with no arguments after each plan is handled.
    engine : dict, optional
        Verify under an engine policy (:mod:`fastsim.sim.policy`; ``engine`` of
        :func:`fastsim.search.verify`, e.g. ``{"policy": "vllm"}``): plans sized with speculative
        decoding are then simulated with their draft, and plans sized for prefix-cache hits on a
        workload with prefix blocks. None: the lecture policy.
    rejection_budget : float
        Fraction of the requests, in [0, 1), a plan may reject although they fit the model's
        context (its instances cannot hold their KV) and still pass (default 0: such a plan
        fails verification and is not repaired by adding instances of its kind).
    search : {"verified", "screen"}
        ``verified`` (default): every configuration of the grid that is not provably hopeless at
        its cheapest passing count found in simulation (:func:`fastsim.verified.plan_verified`),
        the ``top_k`` cheapest reported, each with how the screen saw it (``screen_view``).
        ``screen``: the lecture's pipeline (the screen's ``top_k`` feasible plans, verified and
        repaired), kept so that its lessons stay reproducible.
    spec_policy : {"vllm", "sglang"} or None
        With ``engine`` None (the lecture policy, which has no speculative decoding): the engine
        policy that verifies the colocated plans sized with speculative decoding
        (:func:`fastsim.verified.verification_engine`), with a note (``fastsim plan`` passes
        ``vllm``); None (the default) leaves them unverified, listed where their analytic cost
        ranks.
    on_total : callable(int), optional
        Called once, before the first ``progress``, with the number of configurations
        ``progress`` will count (a progress bar's total).
    max_gpus : dict of str to int, optional
        GPUs available per GPU type (catalog names): a plan that uses more of a type (at its
        final count; each side of a heterogeneous plan on its own GPU) is left out of the
        deployments, with a note (:func:`gpu_budget_excess`).
    arrival : {"poisson", "gamma"}
        Arrival process of the synthetic workloads (:func:`fastsim.workload.synthesize`);
        refused with a trace, which has its own arrivals.
    cv : float
        Inter-arrival coefficient of variation with ``gamma`` (> 0; 1 for ``poisson``).

    Returns
    -------
    PlanReport
        ``deployments`` best first: passing (or unverified) plans by verified integer cost, then
        the failing ones.

    Raises
    ------
    FastsimInputError
        ``top_k`` or ``seeds`` not an integer >= 1, a non-positive horizon, unknown names, a grid
        whose every configuration the model refuses (field ``layout``, or ``tp`` for the ``tp``
        layout: e.g. an expert-parallel layout on a dense model), or anything
        :func:`fastsim.analytic.screen` or :func:`fastsim.search.repair` rejects.
    RuntimeError
        A simulator kernel reported an internal failure.
    """
    catalog = catalog or default_catalog()
    if isinstance(model, str):
        model = catalog.model(model)
    if int(top_k) != top_k or top_k < 1:
        raise FastsimInputError("top_k", top_k, "an integer >= 1")
    if int(seeds) != seeds or seeds < 1:
        raise FastsimInputError("seeds", seeds, "an integer >= 1")
    require_positive("horizon_s", horizon_s)
    if search not in ("screen", "verified"):
        raise FastsimInputError("search", search, "'screen' or 'verified'")
    refused = _grid_refusal(model, catalog, options)
    if refused is not None:
        raise refused
    spec_engine = _spec_engine(spec_policy, engine, seed)
    max_gpus = _check_budget(max_gpus, catalog)
    arrival, cv = _check_arrival(arrival, cv, source)
    if search == "verified" and verify:
        return _plan_verified_report(model, demand, source, int(top_k), int(seeds), float(horizon_s), seed, catalog,
                                     options, progress, engine, rejection_budget, spec_engine, on_total, max_gpus,
                                     arrival, cv)
    from .verified import verification_engine
    grid = screen(model, demand, catalog=catalog, options=options)
    served = demand.within_context(model.max_context_tokens)     # the cost's output tokens, as the screen's
    feas = grid[grid.feasible]
    if max_gpus:       # the screen's plans within the budget (a repair may still exceed it: left out below)
        feas = feas[[not gpu_budget_excess(p, max_gpus) for p in feas.plan]]
    feas = _distinct_rows(feas, int(top_k), model, catalog, options)
    slo = SLO(demand.ttft_s, demand.tpot_s, demand.slo_attainment)
    deployments = []
    workloads = None
    if verify and len(feas):
        workloads, sim_horizon = _workloads_for(source, demand, int(seeds), float(horizon_s), seed, arrival, cv)
    prefixes = getattr(source, "prefix", None) is not None
    if on_total is not None:
        on_total(len(feas))
    for row, same in feas:
        r = None
        eng, why = verification_engine(row.plan, engine, spec_engine, prefixes)
        if verify and not why:
            r = repair(row.plan, workloads, slo, horizon_s=sim_horizon,
                       latency_prompt_tokens=demand.latency_prompt_tokens,
                       latency_output_tokens=demand.latency_output_tokens, max_added=max_added,
                       catalog=catalog, constants=options.constants, model=model, engine=eng,
                       rejection_budget=rejection_budget)
        if progress is not None:
            progress()
        deployments.append(PlannedDeployment(row.plan, r, float(row.usd_per_million_output_tokens),
                                             float(row.efficiency_usd_per_million_output_tokens),
                                             demand.rate_req_per_s, served.mean_output_tokens,
                                             demand.ttft_s, demand.tpot_s, screen=_screen_kind(options),
                                             served_fraction=served.served_fraction, same_as=same,
                                             slo_percentile=demand.slo_percentile))
    order = sorted(range(len(deployments)), key=lambda i: (
        not (deployments[i].repair is None or deployments[i].repair.passed),
        deployments[i].usd_per_million_output_tokens, i))
    final = [deployments[i] for i in order]
    final, budget_notes = _within_budget(final, max_gpus)
    skipped = {}
    for k, d in enumerate(final, 1):
        why = verification_engine(d.analytic, engine, spec_engine, prefixes)[1] if verify else ""
        if why:
            skipped.setdefault(why, []).append(str(k))
    notes = [f"plan{'s' if len(ix) > 1 else ''} {', '.join(ix)} not simulated: {why}; "
             f"{'their' if len(ix) > 1 else 'its'} figures are the analytic screen's" for why, ix in skipped.items()]
    notes += _shared_notes(final, engine) + budget_notes
    return PlanReport(final, grid, demand, notes)


def _check_arrival(arrival, cv, source):
    """``(arrival, cv)`` checked: ``poisson`` (cv 1) or ``gamma`` with a cv > 0, synthetic workloads only."""
    from . import workload as W
    if arrival not in ("poisson", "gamma"):
        raise FastsimInputError("arrival", arrival, "poisson or gamma")
    require_positive("cv", cv)
    if arrival == "poisson" and cv != 1.0:
        raise FastsimInputError("cv", cv, "1 for Poisson arrivals (or arrival gamma)")
    if arrival != "poisson" and isinstance(source, W.Workload):
        raise FastsimInputError("arrival", arrival, "poisson with a trace (it replays its own arrivals)")
    return arrival, float(cv)


def gpu_budget_excess(plan: Plan, max_gpus: dict) -> str:
    """How ``plan`` exceeds a GPU budget ("" when it does not).

    Parameters
    ----------
    plan : Plan
    max_gpus : dict of str to int
        GPUs available per catalog GPU name; a type not named is unbounded.

    Returns
    -------
    str
        E.g. ``"H100: 12 > 8"`` (each side of a heterogeneous plan counts on its own GPU).
    """
    use = {}
    if plan.mode == "disaggregated" and plan.heterogeneous:
        use[plan.prefill_gpu_name] = use.get(plan.prefill_gpu_name, 0) + plan.prefill_tp * plan.prefill_instances
        use[plan.gpu] = use.get(plan.gpu, 0) + plan.decode_tp * plan.decode_instances
    else:
        use[plan.gpu] = plan.gpus
    return ", ".join(f"{g}: {n} > {max_gpus[g]}" for g, n in use.items() if g in max_gpus and n > max_gpus[g])


def _check_budget(max_gpus, catalog):
    """``max_gpus`` with catalog names, checked (None when not given)."""
    if not max_gpus:
        return None
    out = {}
    for g, n in dict(max_gpus).items():
        if isinstance(n, bool) or int(n) != n or n < 1:
            raise FastsimInputError(f"max_gpus[{g}]", n, "an integer >= 1")
        out[catalog.gpu(g).name] = int(n)
    return out


def _within_budget(deployments: list, max_gpus) -> tuple:
    """The deployments within the GPU budget, and a note on those left out."""
    if not max_gpus:
        return deployments, []
    keep, out = [], []
    for d in deployments:
        (out if gpu_budget_excess(d.plan, max_gpus) else keep).append(d)
    if not out:
        return keep, []
    budget = ", ".join(f"{g} {n}" for g, n in max_gpus.items())
    return keep, [f"{len(out)} plan{'s' if len(out) != 1 else ''} left out: more GPUs than available ({budget}; "
                  "--max-gpus)"]


def _spec_engine(spec_policy, engine, seed):
    """The engine that verifies speculative plans under the lecture policy (None: leave them unverified)."""
    if spec_policy is None or engine is not None:
        return None
    if spec_policy not in ("vllm", "sglang"):
        raise FastsimInputError("spec_policy", spec_policy, "vllm, sglang or None")
    return {"policy": spec_policy, "spec_seed": int(seed)}


def _distinct_rows(feas, top_k: int, model, catalog, options) -> list:
    """The first ``top_k`` distinct deployments of the screen's feasible rows, each with the
    plans of the later rows that are the same deployment (:func:`fastsim.verified.same_deployment_key`)."""
    from .verified import same_deployment_key
    out, index = [], {}
    for _, row in feas.iterrows():
        try:
            key = same_deployment_key(row.plan, catalog, options.constants, model)
        except FastsimInputError:
            key = object()
        if key in index:
            out[index[key]][1].append(row.plan)
            continue
        if len(out) == top_k:
            continue       # later rows may still be the same deployment as one shown
        index[key] = len(out)
        out.append((row, []))
    return [(row, tuple(same)) for row, same in out]


def _shared_notes(shown, engine) -> list:
    """Notes on the shown plans: those listed once for several layouts, those verified under an engine
    policy although the verification's is the lecture's (speculative decoding)."""
    notes = []
    merged = [f"{k} ({' = '.join(d.layout_labels)})" for k, d in enumerate(shown, 1) if d.same_as]
    if merged:
        notes.append(f"plan{'s' if len(merged) > 1 else ''} {', '.join(merged)}: layouts that are the same "
                     "deployment for the step model (the same step parameters, the all-reduce and all-to-all counts "
                     "compared as the communication seconds they give, and the same instance counts, chunk and batch: "
                     "the simulator runs the same thing, up to floating-point rounding; "
                     "fastsim.verified.same_deployment_key), simulated and listed once")
    if engine is None:
        by = {}
        for k, d in enumerate(shown, 1):
            pol = d.repair.verification.policy if d.repair is not None else "lecture"
            if pol != "lecture":
                by.setdefault(pol, []).append(str(k))
        for pol, ix in by.items():
            notes.append(f"plan{'s' if len(ix) > 1 else ''} {', '.join(ix)} verified under the {pol} policy, chosen "
                         "automatically: speculative decoding, which the lecture policy does not simulate "
                         "(fastsim.sim.policy; --policy names the policy of every plan)")
    return notes


def _plan_verified_report(model, demand, source, top_k, seeds, horizon_s, seed, catalog, options, progress, engine,
                          rejection_budget, spec_engine=None, on_total=None, max_gpus=None, arrival="poisson",
                          cv=1.0) -> PlanReport:
    """:func:`plan_deployment` with ``search="verified"``."""
    from .verified import plan_verified
    workloads, sim_horizon = _workloads_for(source, demand, seeds, horizon_s, seed, arrival, cv)
    prefixes = getattr(source, "prefix", None) is not None
    out = plan_verified(model, demand, workloads, sim_horizon, catalog=catalog, options=options, engine=engine,
                        rejection_budget=rejection_budget, progress=progress, prefixes=prefixes,
                        spec_engine=spec_engine, on_total=on_total)
    deployments = []
    pruned = []
    unsimulated = []
    served = demand.within_context(model.max_context_tokens)     # the cost's output tokens, as the screen's
    for plan, rr, view, why, sp, cost, eff, same in out:
        if view == "not simulated":
            unsimulated.append((PlannedDeployment(sp, None, cost, eff, demand.rate_req_per_s, served.mean_output_tokens,
                                                  demand.ttft_s, demand.tpot_s, screen=_screen_kind(options),
                                                  served_fraction=served.served_fraction, same_as=same,
                                                  slo_percentile=demand.slo_percentile), why))
            continue
        if rr is None:
            pruned.append(why)
            continue
        deployments.append(PlannedDeployment(sp, rr, cost, eff, demand.rate_req_per_s, served.mean_output_tokens,
                                             demand.ttft_s, demand.tpot_s, screen_view=view,
                                             screen_reason=why if view == "missed" else "",
                                             screen=_screen_kind(options), served_fraction=served.served_fraction,
                                             same_as=same, slo_percentile=demand.slo_percentile))
    grid = screen(model, demand, catalog=catalog, options=options)
    n_verified = len(deployments)
    deployments, budget_notes = _within_budget(deployments, max_gpus)
    unsim, unsim_notes = _within_budget([d for d, _ in unsimulated], max_gpus)
    shown = _ranked(deployments, unsim, top_k)
    notes = []
    skipped = {}
    for k, d in enumerate(shown, 1):
        for u, why in unsimulated:
            if u is d:
                skipped.setdefault(why, []).append(str(k))
    notes += [f"plan{'s' if len(ix) > 1 else ''} {', '.join(ix)} not simulated: {why}; "
              f"{'their' if len(ix) > 1 else 'its'} figures are the analytic screen's" for why, ix in skipped.items()]
    missed = [str(k) for k, d in enumerate(shown, 1) if d.screen_view == "missed" and d.repair.passed]
    if missed:
        notes.append(f"plan{'s' if len(missed) > 1 else ''} {', '.join(missed)}: the analytic screen calls "
                     f"{'these configurations' if len(missed) > 1 else 'this configuration'} infeasible "
                     "(--search screen would not have simulated "
                     f"{'them' if len(missed) > 1 else 'it'}); the simulator passes "
                     f"{'them' if len(missed) > 1 else 'it'}")
    mixed = [str(k) for k, d in enumerate(shown, 1) if d.plan.heterogeneous
             and d.plan.prefill_precision_name != d.plan.precision]
    if mixed:
        notes.append(f"plan{'s' if len(mixed) > 1 else ''} {', '.join(mixed)}: prefill and decode in different "
                     "precisions; the prefill side's KV cache would have to be converted to the decode side's format "
                     "on transfer, which serving engines do not do today (the simulator charges no conversion)")
    over = [str(k) for k, d in enumerate(shown, 1) if d.screen_view == "over-sized"]
    if over:
        notes.append(f"plan{'s' if len(over) > 1 else ''} {', '.join(over)}: fewer instances than the screen sized pass")
    notes += _shared_notes(shown, engine)
    if max_gpus and (budget_notes or unsim_notes):
        n_out = sum(int(n.split()[0]) for n in budget_notes + unsim_notes)
        notes.append(f"{n_out} plan{'s' if n_out != 1 else ''} left out: more GPUs than available ("
                     + ", ".join(f"{g} {n}" for g, n in max_gpus.items()) + "; --max-gpus)")
    if pruned:
        from collections import Counter
        n = n_verified
        notes.append(f"{n} configuration{'' if n == 1 else 's'} verified, {len(pruned)} pruned as hopeless: "
                     + "; ".join(f"{w} ({n})" for w, n in Counter(pruned).most_common()))
    return PlanReport(shown, grid, demand, notes)


def _ranked(verified: list, unsimulated: list, top_k: int) -> list:
    """The plans shown: passing and not-simulated plans together by cost (a not-simulated plan where
    its analytic cost ranks, so that none cheaper than a shown passing plan is left out), then the
    failing ones; the first ``top_k``."""
    passing = [d for d in verified if d.repair.passed]
    failing = [d for d in verified if not d.repair.passed]
    # a stable sort: passing plans keep their order (by verified price) among equal costs, and
    # come before a not-simulated plan of the same cost
    ranked = sorted(passing + list(unsimulated), key=lambda d: (d.usd_per_million_output_tokens, d.repair is None))
    return (ranked + failing)[:top_k]
