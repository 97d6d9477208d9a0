"""Verification and repair of plans in simulation (SPEC section 7; lecture §2.3).

``verify`` simulates a plan on a set of workloads (one per seed, common random numbers) at the
target rate and pools the measured requests; a plan passes when its SLO attainment is >= 0.90 and
the runs, judged together, are not overloaded (:func:`pooled_overload`). ``repair`` adds whole instances, on the failing side for disaggregated
plans (decode when TPOT fails, prefill when TTFT fails), until the plan passes, and says so when no
count can pass: a request that alone, on an idle instance, misses its SLO is not helped by more
machines. ``max_sustainable_rate`` bisects the rate of a synthetic workload over seeds;
``max_sustainable_scale`` bisects the time scale of a real trace, replayed once per probe.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from .analytic import MAX_INSTANCES, Plan
from .catalog import Catalog, Model, default_catalog
from .errors import FastsimInputError
from .stepmodel import P_KV_BUDGET_TOKENS, P_KVPG, P_NET_BW, StepConstants, step_params, step_time

__all__ = ["SLO", "Verification", "RepairResult", "CapacityResult", "sim_plan", "verify", "repair",
           "lone_request_check", "max_sustainable_rate", "pooled_overload", "max_sustainable_scale",
           "TraceCapacityResult", "ScaleProbe", "MAX_REPLAY_SPAN_S", "MAX_RATE_REQ_PER_S", "HorizonFloor",
           "horizon_floor", "check_rate_hint", "check_plan_instances"]


@dataclass(frozen=True)
class SLO:
    """P90 latency targets and the pass threshold (SPEC §1: a plan passes at attainment >= 0.90).

    Attributes
    ----------
    ttft_s, tpot_s : float
        TTFT and TPOT targets (s), each a finite number > 0.
    attainment : float
        Fraction of measured requests that must meet both targets, in (0, 1] (0.90).

    Raises
    ------
    FastsimInputError
        At construction (also through :func:`dataclasses.replace`): a target that is not a finite
        number > 0 (``SLO.ttft_s``, ``SLO.tpot_s``), or an attainment outside (0, 1]
        (``SLO.attainment``; NaN included); booleans and strings are refused, not converted.
        The fields are stored as floats.
    """

    ttft_s: float
    tpot_s: float
    attainment: float = 0.90

    def __post_init__(self):
        for name in ("ttft_s", "tpot_s", "attainment"):
            v = getattr(self, name)
            ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
            f = float(v) if ok else math.nan
            if name == "attainment":
                if not (0.0 < f <= 1.0):
                    raise FastsimInputError("SLO.attainment", v, "a fraction of the measured requests in (0, 1] "
                                            "(0.9: 90% must meet both targets)")
            elif not (0.0 < f < math.inf):
                raise FastsimInputError(f"SLO.{name}", v, f"a finite number of seconds > 0 (the P90 "
                                        f"{name[:4].upper()} target)")
            object.__setattr__(self, name, f)


@dataclass(frozen=True)
class Verification:
    """The result of simulating one plan.

    Attributes
    ----------
    attainment : float
        Pooled SLO attainment over the measured requests of all runs.
    ttft_p90_s, tpot_p90_s : float
        P90 over the pooled measured requests (inf when a measured request never got a token).
    passed : bool
        ``attainment >= SLO.attainment``, the runs, judged together, not overloaded, and no more
        requests that fit the model's context rejected than the rejection budget allows.
    overloaded : bool
        The runs, judged together by :func:`pooled_overload`, show the number of requests in
        the system growing without bound.
    runs : int
        Simulations pooled (seeds).
    measured, rejected : int
        Measured requests; requests rejected (too long for the instance or the model).
    requests : int
        All requests simulated.
    policy : str
        The simulator's engine policy (``lecture``, ``vllm`` or ``sglang``).
    preemptions : int
        Preemptions (vLLM) or retractions (SGLang) over all runs; 0 under the lecture policy.
    cache_hit_fraction : float
        Prompt tokens served from the prefix cache / prompt tokens admitted, over all runs
        (nan without prefix caching): what the simulation reached, beside a plan's sized
        ``prefix_hit_fraction``.
    rejected_in_context : int
        Rejected requests whose prompt + output fit the model's context: the plan's instances
        cannot hold their KV (a valid request the plan cannot serve).
    rejection_budget : float
        The fraction of all requests that may be rejected within the context before the plan
        fails (0 by default: a plan that cannot serve a valid request does not pass).
    reason : str
        Why the plan fails ("" when it passes): each failed criterion, in words.
    """

    attainment: float
    ttft_p90_s: float
    tpot_p90_s: float
    passed: bool
    overloaded: bool
    runs: int
    measured: int
    rejected: int
    requests: int = 0
    policy: str = "lecture"
    preemptions: int = 0
    cache_hit_fraction: float = float("nan")
    rejected_in_context: int = 0
    rejection_budget: float = 0.0
    reason: str = ""

    def to_dict(self) -> dict:
        """The fields as a JSON-ready dict.

        Returns
        -------
        dict
            Every field; non-finite floats (inf, nan) become None.
        """
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in self.__dict__.items()}


def sim_plan(plan: Plan, catalog: Catalog | None = None, constants: StepConstants = StepConstants(),
             model: Model | None = None):
    """The simulator's plan object for an analytic :class:`~fastsim.analytic.Plan`.

    Parameters
    ----------
    plan : Plan
    catalog : Catalog, optional
        Resolves the plan's GPU, precision and (unless ``model`` is given) model; defaults to
        the built-in catalog.
    constants : StepConstants
        Step-model constants (SPEC §3).
    model : Model, optional
        The model, when it is not a catalog entry (e.g. read from a ``config.json``).

    Returns
    -------
    ColocatedPlan or DisaggregatedPlan
        With step parameters from :func:`fastsim.stepmodel.step_params`; the plan's
        ``chunk_tokens`` for a colocated plan, the default prefill token budget (8192) for a
        disaggregated one; the plan's ``max_batch`` (0: no cap) on its (decode) instances.

    Raises
    ------
    FastsimInputError
        Unknown names, a TP that is not a power of two, a GPU without a peak for the precision,
        or instance counts / chunk below 1.
    """
    from .sim import ColocatedPlan, DisaggregatedPlan
    catalog = catalog or default_catalog()
    model = model or catalog.model(plan.model)
    g, pr = catalog.gpu(plan.gpu), catalog.precision(plan.precision)
    if plan.mode == "disaggregated":
        # a heterogeneous plan's prefill side has its own GPU and precision (its KV is sent as it holds it)
        gp, prp = catalog.gpu(plan.prefill_gpu_name), catalog.precision(plan.prefill_precision_name)
        return DisaggregatedPlan(step_params(model, gp, prp, plan.prefill_tp, constants,
                                             **plan.layout_kwargs(plan.prefill_tp)), plan.prefill_instances,
                                 step_params(model, g, pr, plan.decode_tp, constants,
                                             **plan.layout_kwargs(plan.decode_tp)), plan.decode_instances,
                                 decode_max_batch=plan.max_batch)
    if plan.spec_gamma:
        # the draft shares the instance: the KV budget left beside it (fastsim.specdec)
        from .specdec import spec_step_params
        p, _ = spec_step_params(model, g, pr, plan.tp, constants, plan.spec, catalog=catalog,
                                **plan.layout_kwargs(plan.tp))
        return ColocatedPlan(p, plan.instances, plan.chunk_tokens, plan.max_batch)
    return ColocatedPlan(step_params(model, g, pr, plan.tp, constants, **plan.layout_kwargs(plan.tp)),
                         plan.instances, plan.chunk_tokens, plan.max_batch)


class _Replay(NamedTuple):
    """A replayed stretch of a trace, with its prefix blocks (what :func:`fastsim.sim.simulate_batch` reads)."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    prefix: object = None


def _engine_kwargs(engine, plan: Plan, catalog: Catalog, model: Model, constants: StepConstants) -> dict:
    """The simulator keywords of an engine setting for a plan (``engine`` of :func:`verify` and the capacity searches).

    A plan sized with speculative decoding (``plan.spec_gamma > 0``) brings its draft: ``spec`` and
    ``p_draft`` (:func:`fastsim.specdec.spec_step_params`); the lecture policy cannot simulate it.
    """
    if engine is None:
        if plan.spec_gamma:
            raise FastsimInputError("engine", None, f"an engine policy (e.g. {{'policy': 'vllm'}}) for {plan.describe()}: "
                                    "speculative decoding is simulated under the vllm and sglang policies only")
        return {}
    if not isinstance(engine, dict) or "policy" not in engine:
        raise FastsimInputError("engine", engine, "a dict with a policy (vllm, sglang or an EnginePolicy) and "
                                "optionally spec_seed")
    kw = dict(engine)
    over = {k: kw.pop(k) for k in ("max_num_batched_tokens", "max_num_seqs", "prefix_caching") if k in kw}
    from_plan = bool(kw.pop("plan_settings", False)) and plan.mode == "colocated" and plan.batch > 0
    if from_plan:
        # the settings `fastsim plan --emit` writes for this plan (fastsim.emit): the plan's decode batch,
        # and a token budget of its decodes' tokens plus its chunk (vLLM) or its chunk (SGLang)
        name = kw["policy"] if isinstance(kw["policy"], str) else kw["policy"].name
        over.setdefault("max_num_seqs", int(plan.batch))
        over.setdefault("max_num_batched_tokens", int(plan.batch) * (int(plan.spec_gamma) + 1)
                        + int(plan.chunk_tokens) if name == "vllm" else int(plan.chunk_tokens))
    if isinstance(kw["policy"], str) and kw["policy"] != "lecture":
        # the engine's defaults for this plan's GPU (and KV pool), with the user's overrides
        from .sim.policy import engine_policy
        p = sim_plan(plan, catalog, constants, model)
        p = p.p if hasattr(p, "p") else p.p_decode
        pol = engine_policy(kw["policy"], catalog.gpu(plan.gpu).hbm_bytes,
                            kv_budget_tokens=float(p[P_KV_BUDGET_TOKENS]),
                            context_tokens=model.max_context_tokens, **over)
        dp = int(plan.layout_kwargs(plan.tp).get("dp", 1)) if plan.mode == "colocated" else 1
        if pol.name == "vllm" and dp > 1 and not from_plan:
            # vLLM's data-parallel ranks are engines of their own, each with these limits
            # (vllm/v1/engine/core.py, DPEngineCoreProc); SGLang's --max-running-requests counts the
            # whole instance and SGLang splits it over its DP-attention ranks
            pol = pol._replace(max_num_batched_tokens=pol.max_num_batched_tokens * dp,
                               max_num_seqs=pol.max_num_seqs * dp,
                               source=pol.source + f"; x {dp} data-parallel ranks")
        kw["policy"] = pol
    elif over:
        raise FastsimInputError("engine", sorted(over), "engine settings with a vllm or sglang policy name")
    if plan.spec_gamma:
        from .specdec import spec_step_params
        if plan.mode != "colocated":
            raise FastsimInputError("plan", plan.describe(), "a colocated plan (the engine policies simulate "
                                    "speculative decoding on colocated instances)")
        _, pd = spec_step_params(model, catalog.gpu(plan.gpu), catalog.precision(plan.precision), plan.tp, constants,
                                 plan.spec, catalog=catalog, **plan.layout_kwargs(plan.tp))
        kw.update(spec=plan.spec, p_draft=pd)
        kw.setdefault("spec_seed", 0)
    return kw


def pooled_overload(metrics, horizon_s: float) -> bool:
    """Whether a set of replications of one plan at one rate is overloaded, judged together.

    The simulator flags a single run when the least-squares slope ``b`` of its number of requests
    in system over the second half exceeds ``OVERLOAD_SLOPE_FRACTION x lambda`` and adds at least
    ``OVERLOAD_MIN_GROWTH`` requests (:mod:`fastsim.sim.engine`). Across seeds the same test is
    applied to the mean slope and the mean accepted rate: a stable system's backlog drifts up in
    some seeds and down in others, and a one-seed drift flagged per run would fail a stable plan
    more often the more seeds it is given (at 16 seeds, 2 of 16 runs of the offline-batch plan at
    86% load are flagged; the mean slope is 0.4% of lambda), while a real overload raises every
    seed's backlog.

    Parameters
    ----------
    metrics : sequence of SimMetrics
        One per replication, non-empty.
    horizon_s : float
        Simulated seconds of each run.

    Returns
    -------
    bool
        With one run, that run's own flag.

    Raises
    ------
    IndexError
        ``metrics`` is empty (nothing is validated otherwise).
    """
    from .sim import OVERLOAD_MIN_GROWTH, OVERLOAD_SLOPE_FRACTION
    if len(metrics) == 1:
        return bool(metrics[0].overloaded)
    b = float(np.mean([m.queue_slope_req_per_s for m in metrics]))
    lam = float(np.mean([m.arrival_rate_req_per_s for m in metrics]))
    return bool(b > OVERLOAD_SLOPE_FRACTION * lam and b * horizon_s / 2.0 >= OVERLOAD_MIN_GROWTH)


def _p90(a: np.ndarray) -> float:
    """P90 by linear interpolation with +inf allowed, the same arithmetic as the simulator's kernel."""
    n = a.size
    if n == 0:
        return float("nan")
    pos = 0.9 * (n - 1)
    lo = int(np.floor(pos))
    frac = pos - lo
    srt = np.sort(a)
    x, y = srt[lo], srt[min(lo + 1, n - 1)]
    if frac == 0.0 or x == y:
        return float(x)
    if np.isinf(y):
        return float("inf")
    return float(x + (y - x) * frac)


def _pooled(results, slo: SLO, measure_window, horizon_s, max_context_tokens=None, rejection_budget: float = 0.0):
    """The :class:`Verification` of runs judged together (SPEC §7).

    ``max_context_tokens`` (the model's) separates the rejections: a request rejected although
    its prompt + output fits the context is one the plan's instances cannot hold, and more of
    them than ``rejection_budget`` x requests fails the plan. Without it (None) rejections count
    only as misses.
    """
    ttft_all, tpot_all = [], []
    met = measured = rejected = requests = in_ctx = 0
    overloaded = pooled_overload([r.metrics for r in results], horizon_s) if results else False
    for r in results:
        rejected += int(r.metrics.rejected)
        requests += int(r.metrics.n_requests)
        if max_context_tokens is not None and r.metrics.rejected:
            rej = r.status == 2
            in_ctx += int(np.count_nonzero(rej & (r.prompt_tokens + r.output_tokens <= max_context_tokens)))
        lo, hi = measure_window[0] * horizon_s, measure_window[1] * horizon_s
        sel = (r.arrival_s >= lo) & (r.arrival_s < hi)
        first, fin, o = r.first_token_s[sel], r.finish_s[sel], r.output_tokens[sel]
        # a request that never reached its first (last) token counts as +inf, never as nan
        ttft = np.where(np.isnan(first), np.inf, first - r.arrival_s[sel])
        served = ~np.isnan(first) & ~np.isnan(fin) & (o > 1)
        tpot = np.full(o.shape, np.inf)
        tpot[served] = (fin[served] - first[served]) / (o[served] - 1)
        tpot[o == 1] = 0.0
        ok = (ttft <= slo.ttft_s) & ((o == 1) | (tpot <= slo.tpot_s))
        met += int(ok.sum())
        measured += int(sel.sum())
        ttft_all.append(ttft)
        tpot_all.append(tpot[o > 1])
    ttft_all = np.concatenate(ttft_all) if ttft_all else np.empty(0)
    tpot_all = np.concatenate(tpot_all) if tpot_all else np.empty(0)
    q = _p90
    att = met / measured if measured else 0.0
    ms = [r.metrics for r in results]
    policy = ms[0].policy if ms else "lecture"
    cached = sum(m.cached_prompt_tokens for m in ms)
    admitted = sum(m.prompt_tokens_admitted for m in ms)
    caching = any(m.cache_hit_fraction_per_instance is not None for m in ms)
    why = []
    if att < slo.attainment:
        why.append(f"attainment {att:.3f} below {slo.attainment:g}")
    if overloaded:
        why.append("overloaded (the queue grows without bound)")
    if in_ctx > rejection_budget * requests:
        why.append(f"rejects {in_ctx:,} of {requests:,} requests that fit the model's context (an instance's KV "
                   "cache cannot hold them)" + (f"; the rejection budget allows {rejection_budget:g} of the requests"
                                                if rejection_budget > 0 else "; allow some with a rejection budget"))
    return Verification(attainment=att, ttft_p90_s=q(ttft_all), tpot_p90_s=q(tpot_all),
                        passed=not why, overloaded=overloaded,
                        runs=len(results), measured=measured, rejected=rejected, requests=requests,
                        policy=policy, preemptions=sum(int(m.preemptions) for m in ms),
                        cache_hit_fraction=cached / admitted if caching and admitted else float("nan"),
                        rejected_in_context=in_ctx, rejection_budget=float(rejection_budget), reason="; ".join(why))


def verify(plan: Plan, workloads, slo: SLO, *, horizon_s: float, catalog: Catalog | None = None,
           constants: StepConstants = StepConstants(), model: Model | None = None,
           measure_window=(0.2, 0.8), routing: str = "least-loaded", drain_s: float = 0.0,
           engine: dict | None = None, rejection_budget: float = 0.0) -> Verification:
    """Simulate a plan on each workload and pool the measured requests (SPEC §7).

    Parameters
    ----------
    plan : Plan
    workloads : sequence of (arrival_s, prompt_tokens, output_tokens)
        One per seed: ``ndarray(float64) of shape (n,)`` ascending arrival times (s) and two
        ``ndarray(int64) of shape (n,)`` token counts.
    slo : SLO
    horizon_s : float
        Arrival window simulated (s).
    catalog : Catalog, optional
        Defaults to the built-in catalog.
    constants : StepConstants
        Step-model constants (SPEC §3).
    model : Model, optional
        The model, when it is not a catalog entry.
    measure_window : (float, float)
        Fractions of the arrival window bounding the measured requests (SPEC §1).
    routing : {"least-loaded", "round-robin", "prefix-aware"}
    engine : dict, optional
        An engine policy for the simulations (:mod:`fastsim.sim.policy`): ``{"policy": "vllm"}``.
        A name takes the engine's defaults for the plan's GPU and KV pool, with the optional
        overrides ``max_num_batched_tokens``, ``max_num_seqs`` and ``prefix_caching``, or with
        ``plan_settings: True`` the settings ``fastsim plan --emit`` writes for the plan (its decode
        batch; a budget of its decodes' tokens plus its chunk for vLLM, its chunk for SGLang); an
        :class:`~fastsim.sim.policy.EnginePolicy` is used as it is. Optionally ``spec_seed``. A
        plan sized with speculative decoding brings its draft (``plan.spec``). None: the lecture
        policy, which refuses such a plan.
    drain_s : float
        Extra simulated time after the last arrival so that the measured requests can finish
        (default 0: the run ends with the arrival window, as SPEC §6 defines it). The measured
        requests stay those of the middle of the arrival window.
    rejection_budget : float
        Fraction of the requests (in [0, 1)) that may be rejected although they fit the model's
        context (their KV does not fit an instance) before the plan fails; default 0.

    Returns
    -------
    Verification
        Pooled over the runs; ``attainment`` is 0 when nothing was measured; ``reason`` says
        why it fails.

    Raises
    ------
    FastsimInputError
        A negative or non-finite ``drain_s``, a rejection budget outside [0, 1); unknown names in the plan; anything
        :func:`fastsim.sim.simulate` rejects (bad arrays, horizon, SLO targets, window, routing).
    RuntimeError
        A simulator kernel reported an internal failure.
    """
    from .errors import require_positive
    from .sim import simulate_batch
    catalog = catalog or default_catalog()
    model = model or catalog.model(plan.model)
    if drain_s:
        require_positive("drain_s", drain_s)
    rejection_budget = _rejection_budget(rejection_budget)
    sp = sim_plan(plan, catalog, constants, model)
    ekw = _engine_kwargs(engine, plan, catalog, model, constants)
    total = horizon_s + drain_s
    window = (measure_window[0] * horizon_s / total, measure_window[1] * horizon_s / total)
    # every seed in one parallel kernel call; results are identical to one simulate() per seed
    results = simulate_batch([sp], list(workloads), horizon_s=total, ttft_slo_s=slo.ttft_s, tpot_slo_s=slo.tpot_s,
                             max_context_tokens=model.max_context_tokens, routing=routing, **ekw,
                             measure_window=window, full=True)
    return _pooled(results, slo, window, total, model.max_context_tokens, rejection_budget)


def _rejection_budget(v) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        f = math.nan
    if not (0.0 <= f < 1.0):
        raise FastsimInputError("rejection_budget", v, "a fraction of the requests in [0, 1)")
    return f


def _lone_times(plan: Plan, prompt_tokens: float, output_tokens: float, catalog: Catalog | None = None,
                constants: StepConstants = StepConstants(), model: Model | None = None,
                prefill_gpu: bool = False) -> tuple:
    """``(ttft_s, tpot_s)`` of one request alone on an idle instance of the plan (SPEC §3 step model).

    TTFT alone = the prompt's prefill steps (chunks of ``chunk_tokens`` for colocated plans, one
    step plus the KV transfer for disaggregated ones); TPOT alone = one decode step at context
    ``P + O / 2``. ``prefill_gpu``: a disaggregated plan's prefill side on its own GPU and
    precision (as the simulator runs it); False prices it on the decode GPU (what
    :func:`lone_request_check` has always done). Raises FastsimInputError for unknown names or a
    colocated plan with ``chunk_tokens`` < 1.
    """
    catalog = catalog or default_catalog()
    model = model or catalog.model(plan.model)
    g, pr = catalog.gpu(plan.gpu), catalog.precision(plan.precision)
    L, h, hd = model.layers, model.attn_dim_prefill, model.attn_dim_decode
    P, O = float(prompt_tokens), float(output_tokens)
    if plan.mode == "disaggregated":
        gp, prp = ((catalog.gpu(plan.prefill_gpu_name), catalog.precision(plan.prefill_precision_name))
                   if prefill_gpu else (g, pr))
        pp = step_params(model, gp, prp, plan.prefill_tp, constants, **plan.layout_kwargs(plan.prefill_tp))
        ttft = float(step_time(pp, P, 0.0, 2.0 * L * h * P * P)) + P * pp[P_KVPG] / pp[P_NET_BW]
        pd_ = step_params(model, g, pr, plan.decode_tp, constants, **plan.layout_kwargs(plan.decode_tp))
    else:
        pd_ = step_params(model, g, pr, plan.tp, constants, **plan.layout_kwargs(plan.tp))
        c = float(plan.chunk_tokens)
        if not c >= 1.0:        # a zero chunk would never finish the prompt
            raise FastsimInputError("chunk_tokens", plan.chunk_tokens, "an integer >= 1 (a colocated plan)")
        ttft, done = 0.0, 0.0
        while done < P:
            x = min(c, P - done)
            ttft += float(step_time(pd_, x, done, 2.0 * L * h * x * x + 4.0 * L * h * x * done))
            done += x
    ctx = float(model.kv_tokens_held(P + O / 2.0))
    tpot = float(step_time(pd_, 1.0, ctx, 4.0 * L * hd * ctx))
    return ttft, tpot


def lone_request_check(plan: Plan, prompt_tokens: float, output_tokens: float, slo: SLO,
                       catalog: Catalog | None = None, constants: StepConstants = StepConstants(),
                       model: Model | None = None) -> str:
    """Why a request of these lengths misses its SLO even alone on an idle instance ('' if it does not).

    TTFT alone = the prompt's prefill steps (chunks of ``chunk_tokens`` for colocated plans, one
    step plus the KV transfer for disaggregated ones); TPOT alone = one decode step at context
    ``P + O / 2`` (SPEC §3 step model). More instances cannot fix either (lecture §2.3, lesson
    one).

    Parameters
    ----------
    plan : Plan
        A colocated plan must have ``chunk_tokens >= 1``.
    prompt_tokens, output_tokens : float
        Lengths of the request (tokens; the latency quantiles in :func:`repair`).
    slo : SLO
    catalog : Catalog, optional
        Defaults to the built-in catalog.
    constants : StepConstants
        Step-model constants (SPEC §3).
    model : Model, optional
        The model, when it is not a catalog entry.

    Returns
    -------
    str
        The reasons, joined by ``"; "``, or ``""`` when the lone request meets both targets.

    Raises
    ------
    FastsimInputError
        Unknown names, a TP that is not a power of two, a GPU without a peak for the
        precision, or a colocated plan with ``chunk_tokens`` < 1.
    """
    ttft, tpot = _lone_times(plan, prompt_tokens, output_tokens, catalog, constants, model)
    P, O = float(prompt_tokens), float(output_tokens)
    why = []
    if ttft > slo.ttft_s:
        why.append(f"a {P:.0f}-token prompt alone takes {ttft:.2f} s to its first token (TTFT target {slo.ttft_s:g} s)")
    if O > 1 and tpot > slo.tpot_s:
        why.append(f"one decode step alone takes {tpot * 1e3:.1f} ms (TPOT target {slo.tpot_s * 1e3:g} ms)")
    return "; ".join(why)


@dataclass(frozen=True)
class RepairResult:
    """A plan after repair.

    Attributes
    ----------
    plan : Plan
        The plan that passed (or the last one tried).
    verification : Verification
        Its simulation result.
    passed : bool
        The final plan passes its verification.
    repaired_from_instances : int or None
        Total instances before repair (None when the plan passed as planned).
    reason : str
        Why no instance count can pass ('' otherwise).
    history : list of (Plan, Verification)
        Every count tried.
    """

    plan: Plan
    verification: Verification
    passed: bool
    repaired_from_instances: int | None
    reason: str = ""
    history: list = field(default_factory=list)


def _instances(plan: Plan) -> int:
    return plan.prefill_instances + plan.decode_instances if plan.mode == "disaggregated" else plan.instances


def repair(plan: Plan, workloads, slo: SLO, *, horizon_s: float, latency_prompt_tokens: float,
           latency_output_tokens: float, max_added: int | None = None, catalog: Catalog | None = None,
           constants: StepConstants = StepConstants(), model: Model | None = None,
           measure_window=(0.2, 0.8), routing: str = "least-loaded", engine: dict | None = None,
           rejection_budget: float = 0.0) -> RepairResult:
    """Verify a plan and add instances until it passes (SPEC §7).

    Colocated plans gain one instance at a time; disaggregated plans gain a decode instance when
    the TPOT P90 misses its target, a prefill instance when the TTFT P90 does (both when both do).
    Before adding anything, a request of the latency-quantile lengths is checked alone on an idle
    instance: if it already misses the SLO, no count can pass and the plan is reported unrepairable.

    A plan is also reported unrepairable when more than ``1 - slo.attainment`` of its requests
    are rejected (longer than the context or an instance's KV cache), or when it rejects
    requests that fit the model's context beyond ``rejection_budget`` (more instances of the
    same kind hold no more KV per request).

    Parameters
    ----------
    plan : Plan
    workloads : sequence of (arrival_s, prompt_tokens, output_tokens)
        As for :func:`verify`.
    slo : SLO
    horizon_s : float
        Arrival window simulated (s).
    latency_prompt_tokens, latency_output_tokens : float
        Lengths for the lone-request check (the P90s).
    max_added : int, optional
        Instance-adding rounds before giving up; default ``max(8, instances)`` (up to a doubling
        of a large plan).
    catalog, constants, model, measure_window, routing, engine, rejection_budget
        As for :func:`verify` (with an engine policy the lone-request check, which follows the
        lecture's chunking, is skipped).

    Returns
    -------
    RepairResult
        ``passed`` False with a ``reason`` when no count can pass or the rounds ran out.

    Raises
    ------
    FastsimInputError
        As for :func:`verify`.
    RuntimeError
        A simulator kernel reported an internal failure.
    """
    catalog = catalog or default_catalog()
    model = model or catalog.model(plan.model)
    kw = dict(horizon_s=horizon_s, catalog=catalog, constants=constants, model=model,
              measure_window=measure_window, routing=routing, engine=engine, rejection_budget=rejection_budget)
    v = verify(plan, workloads, slo, **kw)
    history = [(plan, v)]
    if v.passed:
        return RepairResult(plan, v, True, None, "", history)
    # the lone-request check follows the lecture's chunking; an engine policy chunks by its own budget
    why = "" if engine is not None else lone_request_check(plan, latency_prompt_tokens, latency_output_tokens, slo,
                                                           catalog, constants, model)
    if not why and v.rejected_in_context > v.rejection_budget * v.requests:
        why = (f"{v.rejected_in_context:,} requests that fit {model.name}'s context of {model.max_context_tokens:,} "
               "tokens are rejected (an instance's KV cache cannot hold them): more instances of the same kind "
               "cannot serve them")
    if not why and v.requests and v.rejected / v.requests > 1.0 - slo.attainment:
        why = (f"{v.rejected:,} requests are rejected (longer than {model.name}'s context of "
               f"{model.max_context_tokens:,} tokens or than an instance's KV cache): more instances of the "
               "same kind cannot serve them")
    if why:
        return RepairResult(plan, v, False, None, "no instance count can pass: " + why, history)
    start = _instances(plan)
    if max_added is None:
        max_added = max(8, start)
    cur = plan
    for _ in range(max_added):
        if cur.mode == "disaggregated":
            add_d = v.tpot_p90_s > slo.tpot_s or not (v.ttft_p90_s > slo.ttft_s)
            add_p = v.ttft_p90_s > slo.ttft_s
            cur = cur.with_instances(prefill_instances=cur.prefill_instances + int(add_p),
                                     decode_instances=cur.decode_instances + int(add_d))
        else:
            cur = cur.with_instances(instances=cur.instances + 1)
        v = verify(cur, workloads, slo, **kw)
        history.append((cur, v))
        if v.passed:
            return RepairResult(cur, v, True, start, "", history)
    return RepairResult(cur, v, False, start, f"still failing after adding {max_added} instances", history)


@dataclass(frozen=True)
class CapacityResult:
    """The maximum sustainable rate of a plan (SPEC §7).

    Attributes
    ----------
    rate_req_per_s : float
        The capacity estimate: the estimator the bootstrap resamples (:func:`_capacities_from`)
        applied to all seeds over every probe (the search's and those added for the interval),
        i.e. the rate between the largest passing probe below the smallest failing one and that
        failing probe where the failing criterion (pooled attainment, or the backlog slope)
        crosses its threshold by linear interpolation. It lies inside ``bracket``; 0 when no
        probe passed below the smallest failing one, the largest passing rate when none failed;
        NaN (undetermined, said in ``notes``) when no probe measured a request.
    bracket : (float, float)
        The estimator's (pass, fail) rates over every probe: the largest passing rate below the
        smallest failing one (0 when there is none), and that failing rate (inf when none
        failed). ``(hi - lo) / lo <= rel_tol`` unless the probe budget ran out or a probe added
        for the interval contradicted the search's bracket (:attr:`contradicting_probes`: the
        smallest failing rate then bounds the capacity). ``(nan, nan)`` when undetermined.
    ci95 : (float, float)
        95% bootstrap interval across seeds: seeds are resampled with replacement (2,000
        resamples); for each resample the pooled attainment and backlog slope at every probed rate
        are recomputed from the per-seed results already simulated, and its capacity is found
        between the largest passing and the smallest failing probe by linear interpolation of the
        failing criterion (:func:`_capacities_from`), the same estimator on the same probes as
        ``rate_req_per_s``. No extra simulation is run. ``(nan, nan)`` with one seed. With 2
        seeds half of the resamples are the full sample, so the estimate lies inside; with more,
        a percentile interval can, rarely, leave it out where the estimator jumps (a resample
        that flips one probe's verdict moves the capacity to another pair of probes):
        :attr:`estimate_in_ci`.
    probes : list of (rate, attainment, overloaded, passed)
        Every probe in order; attainment NaN when its runs measured no request (such a probe,
        unless overloaded, has no verdict and ends the search).
    per_seed_attainment : ndarray(float64) of shape (probes, seeds)
        Attainment of each seed's run at each probe (0 when it measured nothing; nan for the
        seeds a probe decided early by the sequential test did not run).
    analytic_req_per_s : float
        The analytic capacity of the plan; ``analytic_ratio`` = analytic / simulated.
    seeds : int
        Replications per probe.
    horizon_s : float
        Simulated seconds per run.
    probe_seeds : tuple of int
        Seeds each probe ran: ``seeds``, or fewer when :func:`max_sustainable_rates`' sequential
        test decided the probe early (in ``to_dict`` as each probe's ``seeds_run``).
    probe_measured : tuple of int
        Measured requests of each probe over the seeds it ran (in ``to_dict`` as each probe's
        ``measured``); empty when not recorded.
    notes : tuple of str
        What the figures need said: a horizon that understates the capacity
        (:func:`horizon_floor`), a search that stopped at a probe that measured nothing, an
        undetermined result, a search that reached the largest rate it probes.
    search_bracket : (float, float)
        The search's own bracket before the probes added for the interval: its largest passing
        and smallest failing rate (0 when none passed, inf when none failed); empty when not
        recorded. It differs from ``bracket`` only when the result is :attr:`unstable`.

    Notes
    -----
    When the probes contradict each other (a failing probe below a passing one:
    :attr:`contradicting_probes`), the result is :attr:`unstable`: the search has no single answer
    at these seeds and horizon. ``rate_req_per_s``, ``bracket`` and ``ci95`` still hold the
    estimator's (conservative) figures, bounded by the smallest failing probe, but
    :meth:`to_dict` reports no estimate, interval or ratio (null, with the reason), and
    :attr:`analytic_ratio` and :attr:`simulated_ratio` are NaN.
    """

    rate_req_per_s: float
    bracket: tuple
    ci95: tuple
    probes: list
    per_seed_attainment: np.ndarray
    analytic_req_per_s: float
    seeds: int
    horizon_s: float
    probe_seeds: tuple = ()
    probe_measured: tuple = ()
    notes: tuple = ()
    search_bracket: tuple = ()

    @property
    def undetermined(self) -> bool:
        """Whether no probe gave a verdict, so there is no estimate (bool; ``rate_req_per_s`` NaN)."""
        return not math.isfinite(self.rate_req_per_s)

    @property
    def unstable(self) -> bool:
        """Whether the probes contradict each other, so the search has no single answer (bool).

        True when a probe failed below a passing one (:attr:`contradicting_probes` is not empty):
        the attainment or the backlog slope fluctuates around its threshold at these seeds and
        horizon, and another order of probes would give another answer. A longer horizon or more
        seeds steady it. The estimator's figures bound the capacity conservatively (the smallest
        failing probe); :attr:`conflict` and :attr:`unstable_reason` say where the probes disagree.
        """
        return bool(self.contradicting_probes)

    @property
    def conflict(self):
        """Where the probes disagree: ``((fail_lo, fail_hi), (pass_lo, pass_hi))`` or None when stable.

        Returns
        -------
        tuple of two (float, float) or None
            The lowest and highest rate of the probes that failed at or below the largest passing
            rate, and of those that passed at or above the smallest failing rate (probes without a
            verdict left out); None when no probe contradicts another (:attr:`unstable` False).
        """
        if not self.unstable:
            return None
        judged = [p for p in self.probes if not (p[1] != p[1] and not p[2])]
        top_pass = max(p[0] for p in judged if p[3])
        low_fail = min(p[0] for p in judged if not p[3])
        fails = [p[0] for p in judged if not p[3] and p[0] <= top_pass]
        passes = [p[0] for p in judged if p[3] and p[0] >= low_fail]
        return (min(fails), max(fails)), (min(passes), max(passes))

    @property
    def unstable_detail(self) -> str:
        """Where and why an :attr:`unstable` result's probes disagree (str; empty when stable).

        Names the rates that fail and pass, why the failing ones failed (flagged overloaded,
        perhaps with the attainment as high as the passing probes', or the attainment or slope at
        its threshold), the conservative end (the estimator's bound: ``bracket``) and the search's
        own bracket (:attr:`search_bracket`).
        """
        c = self.conflict
        if c is None:
            return ""
        (f0, f1), (p0, p1) = c
        judged = [p for p in self.probes if not (p[1] != p[1] and not p[2])]
        failing = [p for p in judged if not p[3] and p[0] <= p1]
        if all(p[2] for p in failing):
            pass_att = [p[1] for p in judged if p[3] and p[1] == p[1]]
            high = bool(pass_att) and all(p[1] == p[1] and p[1] >= min(pass_att) for p in failing)
            why = ("the failing ones flagged overloaded by the backlog-slope test, which is noisy at this horizon "
                   "and these seeds" + (", their attainment as high as the passing ones'" if high else ""))
        else:
            why = "the attainment or the backlog slope hovers at its threshold"

        def span(a, b):
            return f"{a:.3f}" if a == b else f"{a:.3f}-{b:.3f}"
        lo, hi = self.bracket
        cons = (f"below {hi:.3f} req/s" if lo == 0 else
                f"{self.rate_req_per_s:.3f} req/s (between {lo:.3f} and {hi:.3f})")
        sb = ""
        if len(self.search_bracket) == 2:
            a, b = self.search_bracket
            sb = f", the search's bracket is [{a:.3f}, {b:.3f}]" if math.isfinite(b) else \
                f", the search's bracket is [{a:.3f}, inf)"
        return f"probes at {span(f0, f1)} req/s fail while {span(p0, p1)} pass ({why}); the conservative end is {cons}{sb}"

    @property
    def unstable_reason(self) -> str:
        """Why an :attr:`unstable` result has no single answer (str; empty when stable): :attr:`unstable_detail`
        prefixed with the seeds and horizon, followed by what steadies it."""
        if not self.unstable:
            return ""
        return (f"no stable answer at a {self.horizon_s:g}-s horizon and {self.seeds} seed"
                f"{'s' if self.seeds != 1 else ''}: {self.unstable_detail}; a longer horizon (or more seeds) "
                "steadies it")

    @property
    def ci_censored(self) -> bool:
        """Whether the interval's lower end is censored at the lowest probe (bool).

        True when the result is stable with an estimate above 0 but more than 2.5% of the
        bootstrap resamples pass at no probe below their smallest failing one (their capacity,
        estimated as 0, lies below the lowest probe): ``ci95[0]`` is then 0, which is no rate the
        plan sustains but "below the lowest probe". :meth:`to_dict` reports that end as null with
        the reason.
        """
        lo, hi = self.ci95
        return bool(math.isfinite(lo) and math.isfinite(hi) and lo <= 0.0 and not self.undetermined
                    and not self.unstable and self.rate_req_per_s > 0 and self.probes)

    @property
    def estimate_in_ci(self):
        """Whether ``rate_req_per_s`` lies inside ``ci95`` (bool; None without an interval or an estimate)."""
        lo, hi = self.ci95
        if not (math.isfinite(lo) and math.isfinite(hi)) or self.undetermined:
            return None
        return bool(lo <= self.rate_req_per_s <= hi)

    @property
    def analytic_ratio(self) -> float:
        """Analytic capacity / simulated capacity (float; > 1: the analytic screen is optimistic); inf at 0.

        NaN when the result is undetermined or :attr:`unstable` (no single simulated capacity).
        """
        if self.undetermined or self.unstable:
            return float("nan")
        return self.analytic_req_per_s / self.rate_req_per_s if self.rate_req_per_s > 0 else float("inf")

    @property
    def contradicting_probes(self) -> list:
        """Probes whose verdict contradicts the bracket: failed below its lower end, or passed above its upper end.

        Returns
        -------
        list of (rate, attainment, overloaded, passed)
            Empty when the verdicts are monotone in rate over the probes (a probe without a
            verdict, which measured nothing, contradicts nothing). Otherwise the answer depends
            on the order of the probes (two searches of the same seeds may then differ by more
            than the tolerance): the attainment or the backlog slope fluctuates around its
            threshold at these seeds and horizon, and more seeds or a longer horizon steady it.
        """
        lo, hi = self.bracket
        return [p for p in self.probes if not (p[1] != p[1] and not p[2])
                and ((p[0] < lo and not p[3]) or (p[0] > hi and p[3]))]

    @property
    def simulated_ratio(self) -> float:
        """Simulated capacity / analytic capacity: the direction of the lecture's figures.

        The lecture (§2.3, §6) measured 0.91 chat, 1.11 offline batch, 0.69 coding agent, and says
        the analytic capacity of the coding agent is 1/0.69 times the simulated one, so its figures
        are simulated / analytic (see docs/REPRODUCTION.md). Returns a float, nan when the
        analytic capacity is 0 or the result is undetermined or :attr:`unstable`.
        """
        if self.unstable:
            return float("nan")
        return self.rate_req_per_s / self.analytic_req_per_s if self.analytic_req_per_s > 0 else float("nan")

    def to_dict(self) -> dict:
        """The result as a JSON-ready dict.

        Returns
        -------
        dict
            ``rate_req_per_s``, ``bracket_req_per_s``, ``ci95_req_per_s``, ``probes`` (list of
            dicts, each with ``seeds_run``, ``measured`` and, where its attainment is null,
            ``null_reasons``), ``analytic_req_per_s``, ``analytic_ratio``, ``simulated_ratio``,
            ``seeds``, ``horizon_s``, ``estimate_method``, ``ci_method``, ``estimate_in_ci``,
            ``contradicting_probes``, ``undetermined``, ``unstable``, ``unstable_reason``,
            ``search_bracket_req_per_s`` (when recorded) and ``notes``; non-finite values (an
            unbounded bracket, a missing interval, a ratio to 0) become None, each explained in
            ``null_reasons`` (field -> reason starting with ``infinite`` or ``not applicable``);
            ``per_seed_attainment`` is left out. An :attr:`unstable` result reports no
            ``rate_req_per_s``, ``ci95_req_per_s``, ratios or ``estimate_in_ci`` (null, the
            reason pointing to ``unstable_reason``); its ``bracket_req_per_s`` is the conservative
            bound. ``estimate_in_ci`` is null without an interval or an estimate. A
            :attr:`ci_censored` interval's lower end is null (below the lowest probe).
        """
        from ._output import null_reasons, strict
        probes = []
        for i, (r, a, o, p) in enumerate(self.probes):
            q = dict(rate_req_per_s=r, attainment=a, overloaded=o, passed=p,
                     seeds_run=int(self.probe_seeds[i]) if i < len(self.probe_seeds) else self.seeds)
            if i < len(self.probe_measured):
                q["measured"] = int(self.probe_measured[i])
            if a != a:
                q["null_reasons"] = {"attainment": "not applicable: the probe's runs measured no request"}
            probes.append(q)
        d = {"rate_req_per_s": self.rate_req_per_s, "bracket_req_per_s": list(self.bracket),
             "ci95_req_per_s": list(self.ci95), "probes": probes,
             "analytic_req_per_s": self.analytic_req_per_s,
             "analytic_ratio": self.analytic_ratio if self.analytic_req_per_s > 0 else math.nan,
             "simulated_ratio": self.simulated_ratio,
             "seeds": self.seeds, "horizon_s": self.horizon_s,
             "estimate_method": ("interpolated between the largest passing probe below the smallest failing one and "
                                 "that probe, where the failing criterion crosses its threshold, over all seeds and "
                                 "every probe"),
             "ci_method": ("bootstrap over seeds of the pooled probe results (2,000 resamples), same estimator on "
                           "the same probes"),
             "estimate_in_ci": self.estimate_in_ci,
             "contradicting_probes": len(self.contradicting_probes),
             "undetermined": self.undetermined,
             "unstable": self.unstable,
             "unstable_reason": self.unstable_reason or None,
             "notes": list(self.notes)}
        if len(self.search_bracket) == 2:
            d["search_bracket_req_per_s"] = list(self.search_bracket)
        unstable = ("not applicable: unstable, the probes contradict each other, so there is no single answer at "
                    "these seeds and horizon (see unstable_reason)")
        if self.unstable:
            d.update(rate_req_per_s=math.nan, ci95_req_per_s=[math.nan, math.nan], estimate_in_ci=None)
        low_probe = min((p[0] for p in self.probes), default=math.nan)
        if self.ci_censored:
            d["ci95_req_per_s"] = [math.nan, self.ci95[1]]
        undetermined = "not applicable: undetermined, no probe measured a request (see notes)"

        def explain(k, v):
            if self.undetermined and k in ("rate_req_per_s", "bracket_req_per_s", "ci95_req_per_s",
                                           "analytic_ratio", "simulated_ratio", "estimate_in_ci"):
                return undetermined
            if self.unstable and k in ("rate_req_per_s", "ci95_req_per_s", "analytic_ratio", "simulated_ratio",
                                       "estimate_in_ci"):
                return unstable
            if k == "unstable_reason":
                return "not applicable: the probes' verdicts are monotone in rate (no probe contradicts another)"
            if k == "estimate_in_ci":
                return ("not applicable: one seed gives no interval (use 2 seeds or more)" if self.seeds < 2 else
                        "not applicable: no interval was resampled (no probe passed, or bootstrap=0)")
            if k == "search_bracket_req_per_s":
                return "infinite: no probe of the search failed, so its bracket has no upper end"
            if k == "bracket_req_per_s":
                return "infinite: no probe failed, so the bracket has no upper end"
            if k == "ci95_req_per_s" and self.ci_censored:
                return (f"not applicable: the lower end is censored: more than 2.5% of the resamples of the seeds "
                        f"pass at no probe below their smallest failing one, so their capacity lies below the "
                        f"lowest probe, {low_probe:.4g} req/s (a longer horizon or more seeds steady the verdicts)")
            if k == "ci95_req_per_s":
                return ("not applicable: one seed gives no interval (use 2 seeds or more)" if self.seeds < 2 else
                        "not applicable: no interval was resampled (no probe passed, or bootstrap=0)")
            if k == "analytic_ratio":
                return ("not applicable: the analytic screen finds the plan infeasible (analytic capacity 0)"
                        if not self.analytic_req_per_s > 0 else "infinite: no probed rate passed (simulated capacity 0)")
            if k == "simulated_ratio":
                return "not applicable: the analytic screen finds the plan infeasible (analytic capacity 0)"
            return None
        d["null_reasons"] = null_reasons(d, explain)
        return strict(d)


class _CRN:
    """Per-seed requests drawn once at a high rate and rescaled to each probe (common random numbers).

    Request i of seed s arrives at ``t_i(max_rate) x max_rate / rate``, with the same lengths at
    every rate; the lower rate sees a prefix of the requests (SPEC §6: :func:`synthesize` draws
    the same requests at any rate, only more of them at a higher one). So one draw serves every
    rate up to ``max_rate``, and every plan of the same workload and root seed: each gets the
    requests a draw of its own would give, the arrival times equal to rounding (rescaled from
    another drawn rate). The draw is made on first use at the largest rate noted by
    :meth:`want` or ``growth`` x the rate asked for, and again (higher) when a probe goes past it.
    """

    def __init__(self, dists, seeds, horizon_s, seed=0, arrival="poisson", cv=1.0, first_rate=0.0, growth=2.0):
        from . import workload as W
        self._W, self.dists, self.horizon_s = W, dists, horizon_s
        self.children = W.seeds_for(seed, seeds)
        self.arrival, self.cv, self.growth = arrival, cv, growth
        self.max_rate, self.base, self.wanted = 0.0, None, float(first_rate)

    def want(self, rate) -> None:
        """Note a rate some search will probe: the next draw covers it."""
        self.wanted = max(self.wanted, float(rate))

    def at(self, rate, s0=0, s1=None):
        """Seeds ``s0 .. s1 - 1``'s workloads at ``rate``: list of (arrival_s, prompt_tokens, output_tokens)."""
        if rate > self.max_rate:
            # at most the workload limit's rate (the searches never probe above it: _max_probe_rate)
            self.max_rate = min(max(self.wanted, rate * self.growth), max(_max_probe_rate(self.horizon_s), rate))
            self.base = [self._W.synthesize(self.dists, self.max_rate, self.horizon_s, s, arrival=self.arrival,
                                            cv=self.cv) for s in self.children]
        out = []
        scale = self.max_rate / rate
        h = self.horizon_s
        for w in self.base[s0:s1]:
            a = w.arrival_s
            # the requests with a x scale < h, found on the unscaled times (only they are scaled)
            k = int(np.searchsorted(a, h / scale, side="left"))
            while k > 0 and a[k - 1] * scale >= h:
                k -= 1
            while k < a.shape[0] and a[k] * scale < h:
                k += 1
            out.append((a[:k] * scale, w.prompt_tokens[:k], w.output_tokens[:k]))
        return out


def _pooled_figures(met, mea, over, horizon_s):
    """Pooled attainment, backlog-slope ratio and overload flag over the last (seed) axis.

    ``met`` / ``mea`` (..., S) counts, ``over`` (..., S, 3) = backlog slope, accepted rate, run
    flag; each probe judged as the search judges it (pooled attainment, :func:`pooled_overload`:
    the mean slope against ``OVERLOAD_SLOPE_FRACTION`` x the mean accepted rate, a single run by
    its own flag). Returns three arrays of shape (...,): attainment (NaN where the seeds measured
    no request), slope / threshold (2 or 0 for one run), flagged.
    """
    from .sim import OVERLOAD_MIN_GROWTH, OVERLOAD_SLOPE_FRACTION
    m = mea.sum(axis=-1)
    att = np.where(m > 0, met.sum(axis=-1) / np.maximum(m, 1.0), np.nan)
    if over.shape[-2] == 1:
        flagged = over[..., 0, 2] > 0
        return att, np.where(flagged, 2.0, 0.0), flagged
    b = over[..., 0].mean(axis=-1)
    lam = over[..., 1].mean(axis=-1)
    ratio = b / np.maximum(OVERLOAD_SLOPE_FRACTION * lam, 1e-300)
    return att, ratio, (ratio > 1.0) & (b * horizon_s / 2.0 >= OVERLOAD_MIN_GROWTH)


def _bracket_capacities(rates, att, ratio, flagged, target, bracket: bool = False):
    """The capacity of each row of pooled probe figures (shape (B, k) each; rates (k,)): float64 (B,).

    A probe passes when its attainment is >= ``target`` and it is not flagged; it fails when it
    is flagged or its attainment is below the target; a probe that measured nothing (attainment
    NaN) and is not flagged has no verdict and is passed over. A row's answer lies between the
    largest passing rate below the smallest failing one (lo) and that failing rate (hi),
    interpolated linearly on whichever criterion fails at hi: the attainment's crossing of the
    target, or the backlog slope's crossing of its threshold. 0 when no probe passes below the
    smallest failing one (the capacity lies below it); the largest passing rate when none fails.
    Ties in rate go to the first probe. With ``bracket``, returns ``(capacities, lo, hi)``: lo 0
    when nothing passed below hi, hi inf when nothing failed.
    """
    with np.errstate(invalid="ignore"):
        ok = (att >= target) & ~flagged
        fail = flagged | (att < target)
    rows = np.arange(ok.shape[0])
    any_fail = fail.any(axis=1)
    j = np.where(fail, rates, np.inf).argmin(axis=1)              # the smallest failing rate
    below = ok & ((rates < rates[j][:, None]) | ~any_fail[:, None])
    i = np.where(below, rates, -np.inf).argmax(axis=1)           # the largest passing rate below it
    ai, aj, qi, qj = att[rows, i], att[rows, j], ratio[rows, i], ratio[rows, j]
    with np.errstate(divide="ignore", invalid="ignore"):
        t_att = np.where((aj < target) & (ai > aj), (ai - target) / (ai - aj), 1.0)
        t_over = np.where(flagged[rows, j] & (qj > qi), (1.0 - qi) / (qj - qi), 1.0)
    t = np.clip(np.minimum(np.minimum(1.0, t_att), t_over), 0.0, 1.0)
    passed = below.any(axis=1)
    caps = np.where(passed, np.where(any_fail, rates[i] + t * (rates[j] - rates[i]), rates[i]), 0.0)
    if not bracket:
        return caps
    return caps, np.where(passed, rates[i], 0.0), np.where(any_fail, rates[j], np.inf)


def _capacity_from(rates, met, measured, over, target, horizon_s):
    """Capacity of one (re)sample of seeds from the probes already simulated (float).

    rates (k,); met / measured (k, S) counts; over (k, S, 3) = backlog slope, accepted rate, run
    flag: :func:`_pooled_figures` per probe, then :func:`_bracket_capacities`.
    """
    att, ratio, flagged = _pooled_figures(met, measured, over, horizon_s)
    return float(_bracket_capacities(rates, att[None], ratio[None], flagged[None], target)[0])


def _capacities_from(rates, met, mea, over, idx, target, horizon_s, bracket: bool = False):
    """:func:`_capacity_from` of many resamples of the seeds at once: float64 (B,).

    ``idx`` (B, S) holds each resample's seed indices; each capacity is the value
    :func:`_capacity_from` gives for ``met[:, idx[b]]``, ``mea[:, idx[b]]``, ``over[:, idx[b]]``
    (a mean slope may differ in its last bit, as numpy sums the seeds of another array shape in
    another order). The point estimate is this function at ``idx = arange(S)[None]``, so it is
    computed exactly as each resample is. With ``bracket``, ``(capacities, lo, hi)`` as
    :func:`_bracket_capacities` gives them.
    """
    figures = [_pooled_figures(met[j][idx], mea[j][idx], over[j][idx], horizon_s) for j in range(rates.shape[0])]
    att, ratio, flagged = (np.stack(f, axis=1) for f in zip(*figures))
    return _bracket_capacities(rates, att, ratio, flagged, target, bracket)


def _probe_verdict(ms, slo: SLO, horizon_s: float):
    """How a capacity search judges one probe from its runs (one per seed, or one trace replay).

    ``ms`` are the runs' :class:`~fastsim.sim.SimMetrics` (or objects with the same
    ``attainment``, ``measured``, ``queue_slope_req_per_s``, ``arrival_rate_req_per_s`` and
    ``overloaded``). Returns ``(met, measured, over, attainment, overloaded, passed)``: per run
    the measured requests that met the SLO (float, ``attainment x measured``, 0 when nothing was
    measured), the measured count, and (slope, accepted rate, own flag); then the attainment over
    all runs' measured requests (0 when none), :func:`pooled_overload`, and the verdict
    ``attainment >= slo.attainment and not overloaded``.
    """
    met = np.array([m.attainment * m.measured if m.measured else 0.0 for m in ms])
    mea = np.array([float(m.measured) for m in ms])
    over = np.array([[m.queue_slope_req_per_s, m.arrival_rate_req_per_s, float(m.overloaded)] for m in ms])
    pooled = float(met.sum() / max(mea.sum(), 1.0))
    pooled_over = pooled_overload(ms, horizon_s)
    passed = bool(pooled >= slo.attainment and not pooled_over)
    return met, mea, over, pooled, pooled_over, passed


#: Floors of the per-seed spreads in :func:`_early_verdict`'s test: of the attainment, and of the
#: backlog slope as a fraction of the arrival rate (a few seeds that happen to agree exactly must
#: not make a probe look certain).
EARLY_ATTAINMENT_SD_FLOOR = 0.01
EARLY_SLOPE_SD_FLOOR = 0.002


def _early_verdict(met, mea, over, S: int, target: float, horizon_s: float, alpha: float):
    """The verdict ``S`` seeds would give a probe, from its first ``k`` seeds, when a test is sure of it.

    The pooled attainment of all ``S`` seeds is ``(k A_k + m A_m) / S`` (``m = S - k`` seeds not
    run, equal measured counts), which differs from the ``k`` seeds' ``A_k`` by
    ``(m / S)(A_m - A_k)``; with per-seed attainments independent with spread ``s``, that
    difference has standard deviation ``(m / S) s sqrt(1/m + 1/k)``. The verdict is taken when
    ``A_k`` is farther from the target than ``t_{k-1}(1 - alpha)`` of those deviations (Student's
    t with the seeds' sample spread, floored at :data:`EARLY_ATTAINMENT_SD_FLOOR`), and the same
    test on the mean backlog slope against the overload threshold of :func:`pooled_overload`
    (spread floored at :data:`EARLY_SLOPE_SD_FLOOR` x the arrival rate) agrees: a fail when
    either criterion surely fails, a pass when both surely pass. Under that normal model a
    probe decided early has the ``S``-seed verdict but with probability at most about
    ``2 alpha``.

    Parameters
    ----------
    met, mea : ndarray(float64) of shape (k,)
        Per seed, measured requests that met the SLO and measured requests.
    over : ndarray(float64) of shape (k, 3)
        Per seed, backlog slope (req/s), accepted rate (req/s) and the run's own overload flag.
    S : int
        Seeds of the full probe (> k).
    target : float
        SLO attainment target.
    horizon_s : float
        Simulated seconds per run.
    alpha : float
        One-sided error level of each criterion, in (0, 0.5).

    Returns
    -------
    bool or None
        The verdict (True: passes), or None when the other seeds are needed (also when fewer
        than two seeds were run or a seed measured nothing).
    """
    from scipy.special import stdtrit       # Student's t quantile (lighter to import than scipy.stats)
    from .sim import OVERLOAD_MIN_GROWTH, OVERLOAD_SLOPE_FRACTION
    k = int(met.shape[0])
    m = S - k
    if k < 2 or m < 1 or not (mea > 0).all():
        return None
    q = float(stdtrit(k - 1, 1.0 - alpha)) * (m / S) * math.sqrt(1.0 / m + 1.0 / k)
    a = met / mea
    pooled = float(met.sum() / mea.sum())
    att_margin = q * max(float(a.std(ddof=1)), EARLY_ATTAINMENT_SD_FLOOR)
    lam = float(over[:, 1].mean())
    b = over[:, 0]
    threshold = max(OVERLOAD_SLOPE_FRACTION * lam, 2.0 * OVERLOAD_MIN_GROWTH / horizon_s)
    b_margin = q * max(float(b.std(ddof=1)), EARLY_SLOPE_SD_FLOOR * lam)
    if pooled < target - att_margin or float(b.mean()) > threshold + b_margin:
        return False
    if pooled >= target + att_margin and float(b.mean()) < threshold - b_margin:
        return True
    return None


def max_sustainable_rate(plan: Plan, dists, slo: SLO, *, seeds: int = 16, horizon_s: float = 600.0,
                         rel_tol: float = 0.01, rate_hint_req_per_s: float | None = None, seed: int = 0,
                         catalog: Catalog | None = None, constants: StepConstants = StepConstants(),
                         model: Model | None = None, measure_window=(0.2, 0.8), routing: str = "least-loaded",
                         arrival: str = "poisson", cv: float = 1.0, max_probes: int = 40,
                         bootstrap: int = 2000, on_probe_start=None, on_runs=None, on_probe=None,
                         engine: dict | None = None) -> CapacityResult:
    """Bisect for the largest rate a plan sustains while passing its SLOs (SPEC §7).

    Each probe simulates every seed (``horizon_s`` each) in one parallel batch with common random
    numbers: all probes of a seed see the same requests, their arrival times scaled by 1 / rate.
    A probe passes when the attainment over all seeds' measured requests is >= ``slo.attainment``
    and the seeds together are not overloaded (:func:`pooled_overload`). The bracket starts at the analytic capacity (or
    ``rate_hint_req_per_s``) and grows or shrinks by 1.25x until it straddles the answer, then
    bisects to ``rel_tol``. The 95% interval is a bootstrap over seeds of the same probe results
    (see :class:`CapacityResult`); the estimate and the bracket are the same estimator on the same
    probes, all seeds at once, so with 2 seeds (half of the resamples are the full sample) the
    estimate always lies inside the interval.

    The horizon. A run does not drain: a measured request still running at the horizon is a miss.
    So a horizon below :func:`horizon_floor`'s ``min_horizon_s`` (a mean request, alone on an
    idle instance, could not finish in time from the last part of the measure window, so no rate
    could pass) is refused, and one below its ``full_horizon_s`` (shorter than a mean request's
    SLO pace, TTFT target + (O - 1) x TPOT target, over ``1 - measure_window[1]``) gets a note in
    ``CapacityResult.notes``: it understates the capacity. A probe whose runs measured no request
    has no attainment (NaN) and, unless overloaded, no verdict: the search stops there, and when
    no probe measured anything the result is undetermined (``rate_req_per_s`` NaN, with a note),
    never a rate of about 0. No probe goes above :data:`MAX_RATE_REQ_PER_S` or the rate whose
    horizon holds :data:`fastsim.workload.MAX_REQUESTS` requests per seed.

    Parameters
    ----------
    plan : Plan
    dists : Scenario, str or (LengthDist, LengthDist)
        Length distributions of the synthetic workload (as for
        :func:`fastsim.workload.synthesize`).
    slo : SLO
    seeds : int
        Replications per probe (>= 1; >= 2 for an interval).
    horizon_s : float
        Simulated seconds per run (600 by default: lecture §2.3 lesson three).
    rel_tol : float
        Relative width of the final bracket, in (0, 1).
    rate_hint_req_per_s : float or None, optional
        First probe (req/s): a finite number > 0 within :func:`check_rate_hint`'s bound (at most
        :data:`MAX_RATE_REQ_PER_S`, and ``MAX_REQUESTS / (2 x horizon_s)``); None (default) the
        plan's analytic capacity (1 req/s when it is 0).
    seed : int
        Root seed of the per-seed workloads and of the bootstrap (an integer >= 0).
    catalog : Catalog, optional
        Defaults to the built-in catalog.
    constants : StepConstants
        Step-model constants (SPEC §3).
    model : Model, optional
        The model, when it is not a catalog entry.
    measure_window : (float, float)
        Fractions of the horizon bounding the measured requests (SPEC §1).
    routing : {"least-loaded", "round-robin", "prefix-aware"}
    engine : dict, optional
        An engine policy for the simulations (:mod:`fastsim.sim.policy`): ``{"policy": "vllm"}``.
        A name takes the engine's defaults for the plan's GPU and KV pool, with the optional
        overrides ``max_num_batched_tokens``, ``max_num_seqs`` and ``prefix_caching``, or with
        ``plan_settings: True`` the settings ``fastsim plan --emit`` writes for the plan (its decode
        batch; a budget of its decodes' tokens plus its chunk for vLLM, its chunk for SGLang); an
        :class:`~fastsim.sim.policy.EnginePolicy` is used as it is. Optionally ``spec_seed``. A
        plan sized with speculative decoding brings its draft (``plan.spec``). None: the lecture
        policy, which refuses such a plan.
    arrival : {'poisson', 'gamma'}
        Arrival process, with inter-arrival coefficient of variation ``cv`` (1 for Poisson).
    cv : float
    max_probes : int
        Probe budget; the bracket reached is reported when it runs out (up to three more probes
        may extend the bootstrap below the lowest probe).
    bootstrap : int
        Bootstrap resamples for the interval; 0 skips it.
    on_probe_start : callable(rate_req_per_s: float, runs: int), optional
        Called before each probe with its rate and its number of runs (``seeds``).
    on_runs : callable(n: int), optional
        Called as runs of the current probe finish, with how many just finished. When given, the
        seeds of a probe run in batches of as many runs as numba has threads (the results are
        identical; a large batch balances uneven runs a little better).
    on_probe : callable(rate_req_per_s: float, attainment: float, overloaded: bool, passed: bool), optional
        Called after each probe with its entry of ``probes``.

    Returns
    -------
    CapacityResult
        ``rate_req_per_s`` interpolated inside the final bracket (see :class:`CapacityResult`);
        0 and bracket ``(0, hi)`` when no probe passed below the smallest failing one; ``hi``
        inf when none failed; NaN (``undetermined``) when no probe measured a request.

    Raises
    ------
    FastsimInputError
        ``slo`` not an :class:`SLO`, ``seeds`` not an integer >= 1, ``rel_tol`` outside (0, 1),
        a non-positive horizon, a horizon below :func:`horizon_floor`'s ``min_horizon_s``
        (``horizon_s``), a rate hint that is not None or a finite number > 0 within
        :func:`check_rate_hint`'s bound (``rate_hint_req_per_s``), an analytic capacity whose
        first draw exceeds the workload limit (``horizon_s``), a plan with more than
        :data:`fastsim.analytic.MAX_INSTANCES` instances on a side (``plan.instances``,
        ``plan.prefill_instances``, ``plan.decode_instances``), ``seed`` not an integer >= 0,
        ``max_probes`` below 1, ``bootstrap`` neither 0 nor at least 20, unknown names in the
        plan, a bad length distribution, measure window, arrival process or cv, or anything
        :func:`fastsim.sim.simulate_batch` rejects.
    RuntimeError
        A simulator kernel reported an internal failure.
    """
    from .sim import simulate_batch
    catalog = catalog or default_catalog()
    model = model or catalog.model(plan.model)
    _check_slo("slo", slo)
    S, r, analytic = _search_inputs(plan, seeds, rel_tol, horizon_s, rate_hint_req_per_s)
    _check_seed("seed", seed)
    _check_budget(max_probes, bootstrap)
    from .sim.engine import measure_fractions
    window = measure_fractions(measure_window)
    floor = _floor_of(plan, dists, slo, float(horizon_s), window, catalog, constants, model)
    sp = sim_plan(plan, catalog, constants, model)
    ekw = _engine_kwargs(engine, plan, catalog, model, constants)
    crn = _CRN(dists, S, float(horizon_s), seed, arrival, cv, first_rate=2.0 * r)
    bis = _Bisection(r, S, float(rel_tol), int(max_probes), int(bootstrap), seed, slo, float(horizon_s), analytic,
                     max_rate=_max_probe_rate(float(horizon_s)), floor=floor, measure_window=window)
    while True:
        rate = bis.next_rate()
        if rate is None:
            break
        wls = crn.at(rate)
        if on_probe_start is not None:
            on_probe_start(float(rate), len(wls))
        step = len(wls)
        if on_runs is not None:
            from ._threads import num_threads
            step = num_threads()
        ms = []
        for k in range(0, len(wls), step):
            ms += simulate_batch([sp], wls[k:k + step], horizon_s=horizon_s, ttft_slo_s=slo.ttft_s,
                                 tpot_slo_s=slo.tpot_s, max_context_tokens=model.max_context_tokens, routing=routing,
                                 measure_window=measure_window, **ekw)
            if on_runs is not None:
                on_runs(len(wls[k:k + step]))
        bis.feed(rate, ms)
        if on_probe is not None:
            on_probe(*bis.probes[-1])
    return bis.result()


def _check_slo(field: str, slo) -> None:
    """``slo`` an :class:`SLO` (whose fields its constructor checked), else FastsimInputError naming ``field``."""
    if not isinstance(slo, SLO):
        raise FastsimInputError(field, slo, "a fastsim.search.SLO(ttft_s, tpot_s, attainment)")


def _check_seed(field: str, seed) -> None:
    """A root seed: an integer >= 0, else FastsimInputError naming ``field`` (the caller's parameter)."""
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise FastsimInputError(field, seed, "an integer >= 0 (the root seed of the workloads and the bootstrap)")


def _floor_of(plan, dists, slo, horizon_s, window, catalog, constants, model, field="horizon_s") -> HorizonFloor:
    """:func:`horizon_floor` of a rate search at its workload's mean lengths; a horizon below its
    ``min_horizon_s`` is refused, naming ``field``."""
    P, O = _mean_lengths(dists)
    floor = horizon_floor(plan, P, O, slo, measure_window=window, catalog=catalog, constants=constants, model=model)
    if horizon_s < floor.min_horizon_s:
        raise floor.refusal(field, horizon_s, window)
    return floor


def _check_budget(max_probes, bootstrap) -> None:
    """``max_probes`` an integer >= 1 and ``bootstrap`` 0 (none) or an integer >= 20, else FastsimInputError."""
    if isinstance(max_probes, bool) or not isinstance(max_probes, (int, np.integer)) or max_probes < 1:
        raise FastsimInputError("max_probes", max_probes, "an integer >= 1")
    if isinstance(bootstrap, bool) or not isinstance(bootstrap, (int, np.integer)) or not (
            bootstrap == 0 or bootstrap >= 20):
        raise FastsimInputError("bootstrap", bootstrap,
                                "0 (no interval) or an integer >= 20 (resamples; 2,000 by default)")


#: Largest rate (req/s) a capacity search takes as its first probe or probes: the rate at which a
#: one-second run would hold :data:`fastsim.workload.MAX_REQUESTS` (50,000,000) requests, the most
#: one synthetic workload may hold. A trace's time scale is bounded by the same equivalent rate.
MAX_RATE_REQ_PER_S = 5e7


def _max_probe_rate(horizon_s: float) -> float:
    """The largest rate a rate search of this horizon probes: :data:`MAX_RATE_REQ_PER_S`, or the rate
    whose ``horizon_s`` holds :data:`fastsim.workload.MAX_REQUESTS` requests (a hair under, so that a
    draw at it is accepted)."""
    from .workload import MAX_REQUESTS
    return min(MAX_RATE_REQ_PER_S, MAX_REQUESTS / horizon_s * (1.0 - 1e-9))


def check_rate_hint(field: str, value, horizon_s: float | None = None) -> float:
    """Check the first rate of a capacity search: a finite number > 0 whose derived values fit.

    Parameters
    ----------
    field : str
        The caller's name for the value (``rate_hint_req_per_s``, ``rate_hints_req_per_s[2]``,
        ``--rate``), used in the error.
    value : object
        The rate (req/s).
    horizon_s : float, optional
        The rate search's horizon (s). Its first draw holds each seed's requests up to twice the
        first rate (:func:`max_sustainable_rate`), so the rate must also be at most
        ``MAX_REQUESTS / (2 x horizon_s)`` (:data:`fastsim.workload.MAX_REQUESTS` = 50,000,000
        requests per seed). None (a trace's time-scale search, whose replay holds the trace's own
        requests at any scale): only :data:`MAX_RATE_REQ_PER_S`.

    Returns
    -------
    float
        ``float(value)``.

    Raises
    ------
    FastsimInputError
        Naming ``field``: a boolean or string, NaN, zero, a negative or infinite value, or a rate
        above :data:`MAX_RATE_REQ_PER_S` (5e7 req/s) or above the horizon's bound.
    """
    from .errors import require_positive
    from .workload import MAX_REQUESTS
    r = require_positive(field, value)
    if r > MAX_RATE_REQ_PER_S:
        raise FastsimInputError(field, value, f"a finite rate > 0 of at most {MAX_RATE_REQ_PER_S:.3g} req/s "
                                f"(fastsim.search.MAX_RATE_REQ_PER_S: a one-second run at that rate holds "
                                f"{MAX_REQUESTS:,} requests, the most one workload may hold)")
    if horizon_s is not None and 2.0 * r * float(horizon_s) > MAX_REQUESTS:
        raise FastsimInputError(field, value, f"a finite rate > 0 of at most {MAX_REQUESTS / (2.0 * horizon_s):.6g} "
                                f"req/s at a horizon of {horizon_s:g} s (the search draws each seed's requests up to "
                                f"twice its first rate, at most {MAX_REQUESTS:,} per seed); or a shorter horizon")
    return r


def check_plan_instances(plan: Plan, fields: dict | None = None) -> None:
    """Refuse a plan with more than :data:`fastsim.analytic.MAX_INSTANCES` instances on a side, naming the count.

    The capacity searches check it before anything is simulated: a :class:`Plan` made with
    :func:`dataclasses.replace` or by hand bypasses :func:`fastsim.analytic.plan_for`'s check,
    and the simulator's event wheel grows with the instances (100,000 asked for 48.8 GiB).

    Parameters
    ----------
    plan : Plan
    fields : dict of str to str, optional
        The caller's name for each count (keys ``instances``, ``prefill_instances``,
        ``decode_instances``); default ``plan.instances`` and so on.

    Raises
    ------
    FastsimInputError
        The first count (``instances`` of a colocated plan; ``prefill_instances`` then
        ``decode_instances`` of a disaggregated one) above :data:`fastsim.analytic.MAX_INSTANCES`
        (4096, the limit of ``capacity --instance-counts``), naming the field, the count and the
        limit.
    """
    names = ("prefill_instances", "decode_instances") if plan.mode == "disaggregated" else ("instances",)
    for name in names:
        n = getattr(plan, name)
        if n > MAX_INSTANCES:
            f = (fields or {}).get(name, f"plan.{name}")
            raise FastsimInputError(f, n, f"an instance count from 1 to {MAX_INSTANCES:,} "
                                    "(fastsim.analytic.MAX_INSTANCES, as capacity --instance-counts takes)")


class HorizonFloor(NamedTuple):
    """How long a capacity search's horizon must be for its measured requests: :func:`horizon_floor`.

    Attributes
    ----------
    prompt_tokens, output_tokens : float
        The mean request's lengths (tokens).
    lone_s : float
        Its latency alone on an idle instance of the plan (s): TTFT alone + (O - 1) x TPOT alone
        (the step model of :func:`lone_request_check`).
    slo_pace_s : float
        The time its SLO allows it (s): TTFT target + (O - 1) x TPOT target; near capacity a
        request takes about this long.
    min_horizon_s : float
        The shortest horizon a search accepts (s): ``lone_s / ((1 - b) + (1 - attainment)(b - a))``
        for the measure window ``(a, b)``.
    full_horizon_s : float
        The horizon below which the capacity is understated (s): ``slo_pace_s / (1 - b)``
        (inf when the window ends at the horizon).
    """

    prompt_tokens: float
    output_tokens: float
    lone_s: float
    slo_pace_s: float
    min_horizon_s: float
    full_horizon_s: float

    def refusal(self, field: str, horizon_s: float, measure_window=(0.2, 0.8)) -> FastsimInputError:
        """The error a horizon below :attr:`min_horizon_s` gets.

        Parameters
        ----------
        field : str
            The caller's name for the horizon (``horizon_s``, ``--horizon``).
        horizon_s : float
            The horizon refused (s).
        measure_window : (float, float)
            The search's measure window (fractions of the horizon).

        Returns
        -------
        FastsimInputError
            Naming ``field``, the horizon and the shortest one accepted, with the reason.
        """
        b = measure_window[1]
        return FastsimInputError(field, horizon_s, (
            f"a horizon of at least {self.min_horizon_s:.3g} s for this plan and workload: a mean request "
            f"({self.prompt_tokens:,.0f} + {self.output_tokens:,.0f} tokens) takes {self.lone_s:.3g} s alone on an "
            f"idle instance, and measured requests still running at the horizon count as misses (a run does "
            f"not drain), so at {horizon_s:g} s those arriving in the last part of the measured window (which "
            f"ends at {b:.0%} of the horizon) could not finish even alone: no rate could pass and the search "
            f"would measure the horizon, not the plan; at least {self.full_horizon_s:.3g} s keeps the capacity "
            "from being understated"))

    def note(self, horizon_s: float, measure_window=(0.2, 0.8)) -> str:
        """The note on a horizon below :attr:`full_horizon_s` ('' at or above it).

        Parameters
        ----------
        horizon_s : float
            The search's horizon (s).
        measure_window : (float, float)
            The search's measure window (fractions of the horizon).

        Returns
        -------
        str
            The note, or ``''``.
        """
        if not horizon_s < self.full_horizon_s:
            return ""
        b = measure_window[1]
        return (f"a horizon of {horizon_s:g} s understates the capacity: a mean request ({self.prompt_tokens:,.0f} "
                f"+ {self.output_tokens:,.0f} tokens) may take {self.slo_pace_s:.3g} s within its targets "
                f"(TTFT target + (O - 1) x TPOT target; near capacity it takes about that long), longer than the "
                f"{(1 - b) * horizon_s:.3g} s from the end of the measured window ({b:.0%} of the horizon) to the "
                "horizon; measured requests still running at the horizon count as misses (a run does not drain), "
                f"so the probes fail early; a horizon of at least {self.full_horizon_s:.3g} s measures the plan")


def horizon_floor(plan: Plan, prompt_tokens: float, output_tokens: float, slo: SLO, *,
                  measure_window=(0.2, 0.8), catalog: Catalog | None = None,
                  constants: StepConstants = StepConstants(), model: Model | None = None) -> HorizonFloor:
    """The horizons below which a capacity search of a plan measures its horizon rather than the plan.

    The rule (SPEC §7 judges a probe on the requests arriving in the measure window ``(a, b)`` of
    the horizon H, and a request still running at the horizon is a miss: a run does not drain):

    - Refused below ``min_horizon_s``. A mean-length request takes ``lone_s`` alone on an idle
      instance. The measured requests arriving in the last ``lone_s - (1 - b) H`` seconds of the
      window cannot finish even alone; when they are more than ``1 - attainment`` of the window
      (``H < lone_s / ((1 - b) + (1 - attainment)(b - a))``), no rate can pass.
    - Understated below ``full_horizon_s``. Near capacity a request takes about what its SLO
      allows, ``slo_pace_s`` = TTFT target + (O - 1) x TPOT target; when that exceeds the
      ``(1 - b) H`` seconds after the window, the last measured requests are cut off at the
      horizon and the probes fail below the capacity (chat on 2 x B200 FP8 TP1, 4 seeds: 31.0
      req/s at 70 s, 17.1 at 40 s, 15.0 at 20 s, 2.2 at 10 s; 31.3 at 100 s and 30.4 at 400 s).

    Parameters
    ----------
    plan : Plan
    prompt_tokens, output_tokens : float
        The workload's mean lengths (tokens, > 0).
    slo : SLO
    measure_window : (float, float)
        Fractions of the horizon bounding the measured requests.
    catalog : Catalog, optional
        Defaults to the built-in catalog.
    constants : StepConstants
        Step-model constants (SPEC §3).
    model : Model, optional
        The model, when it is not a catalog entry.

    Returns
    -------
    HorizonFloor
        The mean request's lone latency and SLO pace, and the two horizons (s).

    Raises
    ------
    FastsimInputError
        Unknown names in the plan, or a colocated plan with ``chunk_tokens`` < 1.
    """
    a, b = float(measure_window[0]), float(measure_window[1])
    P, O = float(prompt_tokens), float(output_tokens)
    ttft, tpot = _lone_times(plan, P, O, catalog, constants, model, prefill_gpu=True)
    more = max(O - 1.0, 0.0)
    lone = ttft + more * tpot
    pace = slo.ttft_s + more * slo.tpot_s
    room = (1.0 - b) + (1.0 - slo.attainment) * (b - a)
    return HorizonFloor(P, O, lone, pace, lone / room if room > 0 else math.inf,
                        pace / (1.0 - b) if b < 1.0 else math.inf)


def _mean_lengths(dists) -> tuple:
    """Mean (prompt, output) tokens of a rate search's length distributions."""
    from . import workload as W
    _, pd, od = W._dists(dists)
    return float(pd.mean), float(od.mean)


def _search_inputs(plan: Plan, seeds, rel_tol, horizon_s, rate_hint_req_per_s, hint_field="rate_hint_req_per_s"):
    """Checked ``(seeds, first rate, analytic capacity)`` of a capacity search.

    The plan's instance counts (:func:`check_plan_instances`), the hint (None: the analytic
    capacity; else :func:`check_rate_hint`, named ``hint_field``) and the first draw's size: a
    first rate (the analytic capacity) whose draw exceeds the workload limit is refused as
    ``horizon_s``.
    """
    from .errors import require_positive
    if isinstance(seeds, bool) or not isinstance(seeds, (int, np.integer)) or seeds < 1:
        raise FastsimInputError("seeds", seeds, "an integer >= 1")
    if not (0 < rel_tol < 1):
        raise FastsimInputError("rel_tol", rel_tol, "a fraction in (0, 1)")
    h = require_positive("horizon_s", horizon_s)
    check_plan_instances(plan)
    analytic = float(plan.capacity_req_per_s)
    if rate_hint_req_per_s is not None:
        r = check_rate_hint(hint_field, rate_hint_req_per_s, h)
    else:
        r = analytic or 1.0
        from .workload import MAX_REQUESTS
        if 2.0 * r * h > MAX_REQUESTS:
            raise FastsimInputError("horizon_s", horizon_s, f"at most {MAX_REQUESTS / (2.0 * r):.6g} s for "
                                    f"{plan.describe()}: the search starts at its analytic capacity, {r:,.6g} req/s, "
                                    f"and draws each seed's requests up to twice that rate, at most "
                                    f"{MAX_REQUESTS:,} per seed (or a smaller rate_hint_req_per_s)")
    return int(seeds), float(r), analytic


class _Bisection:
    """The capacity search of one plan as a state machine: which rate to probe next, given the probes so far.

    :func:`max_sustainable_rate` drives one; :func:`max_sustainable_rates` drives many in
    lockstep, all their probes of a round in one batch of simulations. The sequence of probes
    depends only on the probes' verdicts, so both give the same answer for a plan.

    Search: the bracket grows or shrinks by 1.25x from the first rate until it straddles the
    answer (or, given ``step0``, by steps of ``step0`` that double each time: galloping), then
    bisects to ``rel_tol`` (at most ``max_probes`` probes), never above ``max_rate``. Interval:
    the bootstrap over seeds of the probes' results; a resample that fails at every probed rate
    has its capacity below the lowest probe, so up to three more probes go lower (each 1 / 1.1 of
    the lowest) until the interval's lower end is not censored; a galloping search likewise goes
    higher (each ``4 x rel_tol`` above the highest probe) while its upper end is censored at the
    highest probe. With ``first_seeds`` and ``alpha``, a probe runs its first seeds and the others
    only when :func:`_early_verdict` cannot decide it.

    A probe whose runs measured no request (and are not overloaded) has no verdict: its
    attainment is NaN, it counts as neither passing nor failing, and the search stops there
    (lower rates measure fewer requests still); see :meth:`result`.
    """

    def __init__(self, r0, S, rel_tol, max_probes, bootstrap, seed, slo, horizon_s, analytic, step0=None,
                 first_seeds=0, alpha=0.0, max_rate=math.inf, floor=None, measure_window=(0.2, 0.8)):
        self.r, self.S, self.rel_tol, self.max_probes = r0, S, rel_tol, max_probes
        self.bootstrap, self.seed, self.slo, self.horizon_s, self.analytic = bootstrap, seed, slo, horizon_s, analytic
        self.step = step0
        self.first_seeds = first_seeds if 0 < first_seeds < S and alpha > 0 else 0
        self.alpha = alpha
        self.max_rate = max_rate
        self.floor, self.window = floor, measure_window
        self._partial = None
        self._boot_up = False
        self.lo = self.hi = None
        self.probes, self.mets, self.meas, self.overs, self.seeds_run = [], [], [], [], []
        self.phase = "search"
        self.boot_rounds = 0
        self.caps = None
        self.unmeasured_at = None       # the rate of the probe that measured nothing, where the search stopped
        self.capped = False             # the search passed at max_rate and could go no higher

    def next_probe(self):
        """``(rate, first seed, end seed)`` of the runs to simulate next, or None when done.

        With a sequential test (``first_seeds``), a probe first runs seeds ``[0, first_seeds)``
        and, when :func:`_early_verdict` cannot decide it, then ``[first_seeds, S)``.
        """
        rate = self.next_rate()
        if rate is None:
            return None
        if self._partial is not None:
            return rate, len(self._partial), self.S
        return rate, 0, (self.first_seeds or self.S)

    def next_rate(self):
        """The next rate to probe (req/s), or None when the search and its interval are done."""
        if self.phase == "search":
            return self.r
        if self.phase == "boot":
            if self._boot_up:
                return min(max(p[0] for p in self.probes) * (1.0 + 4.0 * self.rel_tol), self.max_rate)
            return min(p[0] for p in self.probes) / 1.1
        return None

    def feed(self, rate, ms) -> None:
        """Record the probe at ``rate`` from the runs of :meth:`next_probe`'s seeds and move on."""
        ms = list(ms)
        if self._partial is not None:
            ms, self._partial = self._partial + ms, None
        met, mea, over, pooled, pooled_over, passed = _probe_verdict(ms, self.slo, self.horizon_s)
        k = len(ms)
        if k < self.S:
            early = _early_verdict(met, mea, over, self.S, self.slo.attainment, self.horizon_s, self.alpha)
            if early is None:
                self._partial = ms      # undecided: the probe goes on with the other seeds
                return
            passed = early
            # the seeds not run are stood in for by the ones run, in turn, so that the pooled
            # figures (and the bootstrap's resamples) are those of the k seeds run
            fill = np.arange(self.S) % k
            met, mea, over = met[fill], mea[fill], over[fill]
        unmeasured = not mea.sum() > 0
        if unmeasured:
            pooled = math.nan           # no attainment without a measured request
        self.probes.append((float(rate), pooled, pooled_over, passed))
        self.mets.append(met), self.meas.append(mea), self.overs.append(over)
        self.seeds_run.append(k)
        if unmeasured and not pooled_over:
            # no verdict, and lower rates measure fewer requests still: the search ends here
            self.unmeasured_at = float(rate)
            if self.phase == "search":
                self._after_search()
            else:
                self.caps = self._bootstrap()     # the interval over every probe, as the estimate
                self.phase = "done"
            return
        if self.phase == "search":
            if passed:
                self.lo = rate if self.lo is None else max(self.lo, rate)
            else:
                self.hi = rate if self.hi is None else min(self.hi, rate)
            lo, hi = self.lo, self.hi
            if (lo is not None and hi is not None and hi - lo <= self.rel_tol * lo) \
                    or len(self.probes) >= self.max_probes:
                self._after_search()
                return
            if lo is not None and hi is not None:
                self.r = 0.5 * (lo + hi)
            elif self.step is None:
                self.r = hi / 1.25 if lo is None else lo * 1.25
            else:       # galloping from a warm start: the step doubles until the verdict turns
                self.r = hi / (1.0 + self.step) if lo is None else lo * (1.0 + self.step)
                self.step *= 2.0
            if self.r > self.max_rate:
                if lo is not None and lo >= self.max_rate:      # passed at the largest rate there is
                    self.capped = True
                    self._after_search()
                    return
                self.r = self.max_rate
        else:
            self._boot_step()

    def _after_search(self) -> None:
        if self.S >= 2 and self.bootstrap > 0 and self.lo is not None:
            self.phase = "boot"
            self._boot_step(first=True)
        else:
            self.phase = "done"

    def _boot_step(self, first: bool = False) -> None:
        # up to four resamplings, each but a good one and the fourth followed by a probe lower (or
        # higher); the interval is the last resampling's, over every probe (the estimate's probes)
        self.caps = self._bootstrap()
        self.boot_rounds += 1
        if self.boot_rounds >= 4:
            self.phase = "done"
            return
        low_ok = bool(np.quantile(self.caps, 0.025) > 0)
        high_ok = True
        if self.step is not None and self.hi is not None:
            # a galloping search may end with its bracket as its only probes near the answer: a
            # resample that passes at the highest probe is censored there (its capacity lies
            # above), so up to three more probes go higher (each 4 x rel_tol above the highest)
            high_ok = bool(np.quantile(self.caps, 0.975) < max(p[0] for p in self.probes))
        self._boot_up = low_ok and not high_ok
        if self._boot_up and max(p[0] for p in self.probes) >= self.max_rate:
            self._boot_up, high_ok = False, True        # no higher rate to probe
        if (low_ok and high_ok) or len(self.probes) >= self.max_probes + 3:
            self.phase = "done"

    def _arrays(self):
        rates = np.array([p[0] for p in self.probes])
        return rates, np.array(self.mets), np.array(self.meas), np.array(self.overs)

    def _bootstrap(self):
        rates, met_a, mea_a, over_a = self._arrays()
        rng = np.random.default_rng(np.random.SeedSequence(self.seed).spawn(1)[0])
        S = self.S
        idx = np.stack([rng.integers(0, S, S) for _ in range(self.bootstrap)])
        return _capacities_from(rates, met_a, mea_a, over_a, idx, self.slo.attainment, self.horizon_s)

    def result(self) -> "CapacityResult":
        """The :class:`CapacityResult` once :meth:`next_rate` is None.

        The estimate and the bracket are the bootstrap's estimator (:func:`_capacities_from`)
        applied to all seeds over every probe, the interval's probes included: the same
        estimator on the same probes as each resample of the interval. ``rate_req_per_s`` is NaN
        (undetermined) when no probe has a verdict (every probe measured nothing).
        """
        ci = (float("nan"), float("nan"))
        if self.caps is not None:
            ci = (float(np.quantile(self.caps, 0.025)), float(np.quantile(self.caps, 0.975)))
        rates, met_a, mea_a, over_a = self._arrays()
        per_seed_att = np.where(mea_a > 0, met_a / np.maximum(mea_a, 1.0), 0.0)
        for i, k_run in enumerate(self.seeds_run):
            per_seed_att[i, k_run:] = np.nan       # seeds a sequential test did not need
        measured = tuple(int(m[:k_run].sum()) for m, k_run in zip(mea_a, self.seeds_run))
        decided = [not (math.isnan(p[1]) and not p[2]) for p in self.probes]
        notes = []
        if self.floor is not None:
            n = self.floor.note(self.horizon_s, self.window)
            if n:
                notes.append(n)
        if not any(decided):
            estimate, bracket = math.nan, (math.nan, math.nan)
            notes.append(f"undetermined: no probe measured a request (the first, at {self.probes[0][0]:.4g} req/s, "
                         f"measured none in {self.S} seed{'s' if self.S > 1 else ''} x the measure window of a "
                         f"{self.horizon_s:g}-s horizon), so there is no capacity to report: a capacity needs measured "
                         "requests, from a longer horizon (horizon_s, --horizon) or a higher first rate "
                         "(rate_hint_req_per_s, --rate)")
        else:
            est, lo, hi = _capacities_from(rates, met_a, mea_a, over_a, np.arange(self.S)[None], self.slo.attainment,
                                           self.horizon_s, bracket=True)
            estimate, bracket = float(est[0]), (float(lo[0]), float(hi[0]))
            if self.unmeasured_at is not None:
                notes.append(f"the search stopped at {self.unmeasured_at:.4g} req/s, whose runs measured no request "
                             f"({self.S} seed{'s' if self.S > 1 else ''} x the measure window of a "
                             f"{self.horizon_s:g}-s horizon): no verdict there, and lower rates measure fewer still"
                             + (f"; the capacity lies below the smallest failing probe, {bracket[1]:.4g} req/s"
                                if bracket[0] == 0 and math.isfinite(bracket[1]) else ""))
            if self.capped:
                notes.append(f"the search passed at {self.max_rate:.6g} req/s, the largest rate it probes at a "
                             f"{self.horizon_s:g}-s horizon (a seed's draw is at most fastsim.workload.MAX_REQUESTS "
                             "requests; fastsim.search.MAX_RATE_REQ_PER_S): the capacity lies above it")
        search_bracket = (float(self.lo) if self.lo is not None else 0.0,
                          float(self.hi) if self.hi is not None else math.inf)
        return CapacityResult(estimate, bracket, ci, self.probes, per_seed_att, self.analytic, self.S,
                              float(self.horizon_s), tuple(self.seeds_run), measured, tuple(notes), search_bracket)


#: Requests one batch of simulations of :func:`max_sustainable_rates` may hold (its runs'
#: rescaled arrivals, about 24 bytes each): a larger round is simulated in several batches.
_BATCH_REQUESTS = 20_000_000

#: Seeds a probe of :func:`max_sustainable_rates` runs before its sequential test
#: (:func:`_early_verdict`), and the test's one-sided error level per criterion.
FIRST_SEEDS = 4
EARLY_STOP_ALPHA = 1e-3

#: First relative step of the galloping search: from the analytic capacity (no sibling solved
#: yet), from one solved sibling's simulated / analytic ratio, from two siblings' trend; in units
#: of ``rel_tol``.
_STEP_COLD, _STEP_ONE_SIBLING, _STEP_TREND = 4.0, 2.0, 1.0


def _family_key(plan: Plan):
    """Plans that differ only in one instance count share a key (their searches warm-start each other).

    The count is ``instances`` of a colocated plan and ``decode_instances`` of a disaggregated one
    (whose prefill side stays in the key: plans with another prefill count are another family).
    """
    return replace(plan, instances=0, decode_instances=0)


def _family_count(plan: Plan) -> int:
    """The instance count that varies along a family (:func:`_family_key`)."""
    return int(plan.decode_instances if plan.mode == "disaggregated" else plan.instances)


def _predicted_ratio(done, count):
    """Simulated / analytic capacity of a plan of ``count`` instances from its solved smaller siblings.

    ``done`` is ``[(count, ratio), ...]`` in order of count, at least two. The last two are
    extrapolated linearly in 1 / count (a pool of more instances queues less, so the ratio rises
    towards a limit); the change is at most the last one when the counts are evenly spaced.
    """
    (n2, r2), (n1, r1) = done[-2], done[-1]
    if n1 == n2 or count == n1:
        return r1
    return r1 + (r1 - r2) * (1.0 / count - 1.0 / n1) / (1.0 / n1 - 1.0 / n2)


def max_sustainable_rates(plans, dists, slos, *, seeds: int = 16, horizon_s: float = 600.0, rel_tol: float = 0.01,
                          rate_hints_req_per_s=None, seeds_root=0, catalog: Catalog | None = None,
                          constants: StepConstants = StepConstants(), models=None, measure_window=(0.2, 0.8),
                          routing: str = "least-loaded", max_probes: int = 40, bootstrap: int = 2000,
                          warm_start: bool = True, first_seeds: int = FIRST_SEEDS,
                          early_stop_alpha: float = EARLY_STOP_ALPHA, on_round=None) -> list:
    """The maximum sustainable rates of many plans, their searches advancing together (SPEC §7).

    Each round simulates the next probe of every plan still searching in batches of parallel
    runs (plans x seeds), longest first, so the threads stay busy across plans and the per-probe
    overhead is paid once per round. Every plan keeps its own common random numbers (those of
    :func:`max_sustainable_rate` with ``seed`` = its ``seeds_root``), drawn once for all plans of
    the same workload and root.

    With ``warm_start=False`` and ``early_stop_alpha=0`` each plan gets exactly
    :func:`max_sustainable_rate`'s search (the same probes and estimator, so the same
    :class:`CapacityResult`). By default two things make it several times cheaper, with the
    answer the same to the tolerance whenever the verdicts are monotone in rate (both final
    brackets then hold the same crossing; :attr:`CapacityResult.contradicting_probes` lists the
    probes that show they are not, as happens when few seeds or a short horizon leave the
    attainment or the backlog slope hovering at its threshold over a range of rates). On the
    default grid at 16 seeds x 600 s, seven searches in ten end in two probes:

    - Warm start. Plans that differ only in their instance count (colocated) or decode instance
      count (disaggregated) form a family, searched in order of that count. The first starts
      at its analytic capacity; the next at its analytic capacity times the simulated /
      analytic ratio of its solved sibling, later ones at the trend of the last two (linear in
      1 / count). From the first probe the search gallops (steps of 4, 2 or 1 x
      ``rel_tol``, doubling until the verdict turns), then bisects to ``rel_tol``: a start
      within ``rel_tol`` of the answer ends in two probes.
    - Sequential test. A probe runs its first ``first_seeds`` seeds; when :func:`_early_verdict`
      is sure of the verdict all ``seeds`` would give (one-sided level ``early_stop_alpha`` per
      criterion: nominally at most about ``2 x early_stop_alpha`` of the probes it decides are
      decided otherwise than with every seed), the other seeds are not run. Such a probe's pooled
      figures, and its part in the bootstrap, are its seeds'; ``CapacityResult.probe_seeds``
      says how many ran.

    Parameters
    ----------
    plans : sequence of Plan
        Colocated or disaggregated plans (lecture scheduler), k of them.
    dists : Scenario, str, (LengthDist, LengthDist), or a sequence of k of them
        Each plan's length distributions (one for all, or one per plan).
    slos : SLO or sequence of k SLO
    seeds, horizon_s, rel_tol, max_probes, bootstrap, measure_window, routing, catalog, constants
        As for :func:`max_sustainable_rate`, shared by all plans.
    rate_hints_req_per_s : float, or sequence of k float or None, optional
        First probe of each plan: a finite number > 0 within :func:`check_rate_hint`'s bound, or
        None for its analytic capacity (or its family's prediction).
    seeds_root : int or sequence of k int
        Each plan's ``seed`` of :func:`max_sustainable_rate` (its workloads and bootstrap), an
        integer >= 0.
    models : sequence of k Model or None, optional
        Models that are not catalog entries.
    warm_start : bool
        Warm-start each family's searches from its solved siblings and gallop (True), or run
        :func:`max_sustainable_rate`'s bisection from each plan's analytic capacity (False).
    first_seeds : int
        Seeds of a probe's first look (the sequential test), at least 2; ``>= seeds`` or 0 turns
        the test off.
    early_stop_alpha : float
        The test's one-sided level per criterion, in [0, 0.5); 0 turns the test off.
    on_round : callable(round: int, searching: int, runs: int), optional
        Called before each round with the plans probing in it and the runs it simulates.

    Returns
    -------
    list of CapacityResult
        One per plan, in order (a plan given twice with the same workload, SLO, seeds and hint
        is searched once and gets the same result).

    Raises
    ------
    FastsimInputError
        As :func:`max_sustainable_rate`, with the caller's parameter names: an entry of a
        sequence is named with its index (``rate_hints_req_per_s[1]``, ``seeds_root[0]``,
        ``slos[2]``; the parameter itself when one value was given for all plans), a plan's
        instance count or a horizon below a plan's floor names the plan (``plans[3].instances``;
        ``horizon_s`` with ``plans[3]`` and the plan in the message). Also a single Plan instead
        of a sequence, sequences whose length is not k, ``first_seeds`` not 0 or an integer >= 2,
        ``early_stop_alpha`` not a number in [0, 0.5), or ``warm_start`` not a bool.
    RuntimeError
        A simulator kernel reported an internal failure.
    """
    from .sim import simulate_batch
    catalog = catalog or default_catalog()
    if isinstance(plans, Plan):
        raise FastsimInputError("plans", "a single Plan", "a sequence of Plan (use max_sustainable_rate for one)")
    plans = list(plans)
    k = len(plans)

    def scalar(v, kind=SLO):
        return v is None or isinstance(v, (kind, str, int, float, np.integer, np.floating))

    def per_plan(field, v, kind):
        if scalar(v, kind):
            return [v] * k
        try:
            v = list(v)
        except TypeError:
            raise FastsimInputError(field, v, f"one value, or a sequence of one per plan ({k})") from None
        if len(v) != k:
            raise FastsimInputError(field, f"{len(v)} entries", f"one, or one per plan ({k})")
        return v
    dl = [dists] * k if not isinstance(dists, (list, tuple)) or (len(dists) == 2 and not isinstance(dists[0], str)
                                                                 and hasattr(dists[0], "kind")) else list(dists)
    if len(dl) != k:
        raise FastsimInputError("dists", f"{len(dl)} entries", f"one, or one per plan ({k})")
    sl = per_plan("slos", slos, SLO)
    hints = per_plan("rate_hints_req_per_s", rate_hints_req_per_s, float)
    roots = per_plan("seeds_root", seeds_root, int)
    ml = per_plan("models", models, Model)

    def name(field, v, i):
        """The caller's name of plan i's entry: the parameter, indexed when a sequence was given."""
        return field if scalar(v) else f"{field}[{i}]"
    for i in range(k):
        _check_slo(name("slos", slos, i), sl[i])
        _check_seed(name("seeds_root", seeds_root, i), roots[i])
    if not isinstance(first_seeds, (int, np.integer)) or isinstance(first_seeds, bool) or first_seeds < 0:
        raise FastsimInputError("first_seeds", first_seeds, "an integer >= 0 (0: no sequential test)")
    if 0 < first_seeds < 2:
        raise FastsimInputError("first_seeds", first_seeds, "0 (no sequential test) or an integer >= 2 (the test "
                                "needs the spread of at least two seeds)")
    if not isinstance(early_stop_alpha, (int, float, np.floating)) or isinstance(early_stop_alpha, bool) \
            or not (0.0 <= float(early_stop_alpha) < 0.5):
        raise FastsimInputError("early_stop_alpha", early_stop_alpha, "a level in [0, 0.5) (0: no sequential test)")
    if not isinstance(warm_start, (bool, np.bool_)):
        raise FastsimInputError("warm_start", warm_start, "True or False")
    _check_budget(max_probes, bootstrap)
    from .sim.engine import measure_fractions
    window = measure_fractions(measure_window)
    checked, floors = [], []
    for i, plan in enumerate(plans):
        model = ml[i] or catalog.model(plan.model)
        try:
            checked.append((model, *_search_inputs(plan, seeds, rel_tol, horizon_s, hints[i],
                                                   name("rate_hints_req_per_s", rate_hints_req_per_s, i))))
            floors.append(_floor_of(plan, dl[i], sl[i], float(horizon_s), window, catalog, constants, model))
        except FastsimInputError as exc:
            if exc.field.startswith("plan.") or exc.field == "horizon_s":
                # say which plan: the caller passed a list
                raise FastsimInputError(exc.field.replace("plan.", f"plans[{i}].", 1), exc.value,
                                        f"{exc.allowed} (plans[{i}]: {plan.describe()})") from None
            raise
    S = int(seeds)
    tol = float(rel_tol)
    # a plan given twice (with the same workload, SLO, seeds, model and hint) is searched once;
    # a disaggregated plan's ``tp`` plays no part in its simulation
    first_of: dict = {}
    same_as = []
    for i, plan in enumerate(plans):
        sim_key = replace(plan, tp=0) if plan.mode == "disaggregated" else plan
        same_as.append(first_of.setdefault((sim_key, id(dl[i]), sl[i], roots[i], checked[i][0].name, hints[i]), i))
    uniq = [i for i in range(k) if same_as[i] == i]
    # families: plans that differ only in instance counts (same workload, SLO, model), by size
    families: dict = {}
    for i in uniq:
        key = (_family_key(plans[i]), id(dl[i]), sl[i], checked[i][0].name) if warm_start and hints[i] is None else i
        families.setdefault(key, []).append(i)
    chains = [sorted(m, key=lambda i: (_family_count(plans[i]), i)) for m in families.values()]
    crns: dict = {}
    exact = not warm_start and not early_stop_alpha > 0
    for i in uniq:
        if exact:       # the one-plan search's own draws, bit for bit
            crns[i] = _CRN(dl[i], S, float(horizon_s), roots[i], first_rate=2.0 * checked[i][2])
            continue
        c = crns.get((id(dl[i]), roots[i]))
        if c is None:
            c = crns[(id(dl[i]), roots[i])] = _CRN(dl[i], S, float(horizon_s), roots[i], growth=1.5)
        # the largest rate a plan is likely to probe: its first rate, or its analytic capacity
        # with the margin of the simulated / analytic ratios seen (lecture §6: 0.69 to 1.11)
        c.want(1.25 * max(checked[i][2], checked[i][3]))
    crn_of = {i: i if exact else (id(dl[i]), roots[i]) for i in uniq}
    sp_of = {}
    results = [None] * k
    active: dict = {}        # plan -> its _Bisection
    solved = [[] for _ in chains]   # per chain: (count, simulated / analytic) of its solved plans
    pos = [0] * len(chains)

    def start(c):
        i = chains[c][pos[c]]
        model, _, r, analytic = checked[i]
        step0 = None
        if warm_start:
            done = [d for d in solved[c] if d[1] is not None]
            step0 = _STEP_COLD * tol
            if done and analytic > 0:
                if len(done) == 1:
                    r, step0 = done[-1][1] * analytic, _STEP_ONE_SIBLING * tol
                else:
                    pred = _predicted_ratio(done, _family_count(plans[i]))
                    r, step0 = (pred if pred > 0 else done[-1][1]) * analytic, _STEP_TREND * tol
            step0 *= 1.0 - 1e-9          # a bracket of one step is within rel_tol despite rounding
        sp_of[i] = sim_plan(plans[i], catalog, constants, model)
        fs = int(first_seeds) if early_stop_alpha > 0 else 0
        r = min(r, _max_probe_rate(float(horizon_s)))     # a sibling's prediction may overshoot the limit
        active[i] = _Bisection(r, S, tol, int(max_probes), int(bootstrap), roots[i], sl[i], float(horizon_s),
                               analytic, step0=step0, first_seeds=fs, alpha=float(early_stop_alpha),
                               max_rate=_max_probe_rate(float(horizon_s)), floor=floors[i], measure_window=window)

    for c in range(len(chains)):
        start(c)
    chain_of = {i: c for c, m in enumerate(chains) for i in m}
    rnd = 0
    while active:
        todo = []
        for i, b in list(active.items()):
            nxt = b.next_probe()
            if nxt is None:
                results[i] = b.result()
                del active[i]
                sp_of.pop(i, None)
                if exact:
                    crns.pop(i, None)
                c = chain_of[i]
                res = results[i]
                ok = res.analytic_req_per_s > 0 and res.rate_req_per_s > 0 and math.isfinite(res.bracket[1])
                solved[c].append((_family_count(plans[i]), res.rate_req_per_s / res.analytic_req_per_s if ok else None))
                pos[c] += 1
                if pos[c] < len(chains[c]):
                    start(c)
                    nxt = active[chains[c][pos[c]]].next_probe()
                    todo.append((chains[c][pos[c]], nxt))
                continue
            todo.append((i, nxt))
        if not todo:
            break
        # one batch per (SLO, context limit), cut at _BATCH_REQUESTS requests
        batches: dict = {}
        for i, (rate, s0, s1) in todo:
            b = active[i]
            g = batches.setdefault((b.slo.ttft_s, b.slo.tpot_s, checked[i][0].max_context_tokens), [])
            g.append((i, rate, s0, s1))
        if on_round is not None:
            on_round(rnd, len(todo), sum(s1 - s0 for _, (_, s0, s1) in todo))
        for (ttft, tpot, ctx), owners in batches.items():
            at = 0
            while at < len(owners):
                ps, ws, fed, load = [], [], [], 0
                while at < len(owners) and (not fed or load < _BATCH_REQUESTS):
                    i, rate, s0, s1 = owners[at]
                    wl = crns[crn_of[i]].at(rate, s0, s1)
                    ps += [sp_of[i]] * len(wl)
                    ws += wl
                    load += sum(w[0].shape[0] for w in wl)
                    fed.append((i, rate, len(wl)))
                    at += 1
                ms = simulate_batch(ps, ws, horizon_s=horizon_s, ttft_slo_s=ttft, tpot_slo_s=tpot,
                                    max_context_tokens=ctx, routing=routing, measure_window=measure_window)
                del ps, ws
                j = 0
                for i, rate, n in fed:
                    active[i].feed(rate, ms[j:j + n])
                    j += n
        rnd += 1
    for i in range(k):
        if results[i] is None:
            results[i] = results[same_as[i]]
    return results


# --------------------------------------------------------------------------------------------
# Maximum sustainable time scale of a real trace
# --------------------------------------------------------------------------------------------

#: Longest replay (simulated seconds) the scale search probes by default: scales below
#: ``duration_s / MAX_REPLAY_SPAN_S`` are not tried unless ``min_scale`` says otherwise.
MAX_REPLAY_SPAN_S = 1e6
_SCALE_STEP = 1.25          # bracketing factor, as the rate bisection's


class ScaleProbe(NamedTuple):
    """One probe of :func:`max_sustainable_scale`: the trace replayed once at one time scale.

    Attributes
    ----------
    scale : float
        Time scale s (dimensionless, > 0): arrival times are divided by s.
    rate_req_per_s : float
        Equivalent mean rate, ``n / (duration_s / s)`` (req/s; ``n`` and ``duration_s`` of the
        whole trace).
    horizon_s : float
        Simulated seconds: the replayed span ``duration_s / s`` (to the next float up, so that the
        last arrival lies inside it, as ``fastsim simulate --trace`` replays), or the caller's
        ``horizon_s`` when that is shorter.
    requests : int
        Requests replayed (arriving by the horizon).
    excluded_requests : int
        Requests of the trace arriving after the horizon: not simulated (0 unless a horizon cuts
        the replay).
    measured : int
        Replayed requests arriving in the measured window (the middle 60% of the horizon).
    attainment : float
        Fraction of the measured requests that met both targets (0 when none was measured).
    overloaded : bool
        The run's overload flag (:func:`pooled_overload` of one run).
    passed : bool
        ``attainment >= slo.attainment and not overloaded``, the rule of
        :func:`max_sustainable_rate`.
    ttft_p90_s, tpot_p90_s : float
        P90 TTFT and TPOT of the measured requests (s; inf past the requests that never got
        the token, nan with nothing to measure).
    rejected, unfinished : int
        Replayed requests rejected at arrival, and accepted ones without their last token by the
        horizon.
    round : int
        The search round (from 0) whose parallel batch simulated the probe.
    """

    scale: float
    rate_req_per_s: float
    horizon_s: float
    requests: int
    excluded_requests: int
    measured: int
    attainment: float
    overloaded: bool
    passed: bool
    ttft_p90_s: float
    tpot_p90_s: float
    rejected: int
    unfinished: int
    round: int

    def to_dict(self) -> dict:
        """The probe as a JSON-ready dict.

        Returns
        -------
        dict
            Every field; a non-finite P90 becomes None, explained in ``null_reasons``.
        """
        from ._output import null_reasons, percentile_reason, strict
        d = self._asdict()
        d["null_reasons"] = null_reasons(d, lambda k, v: percentile_reason(k[:4].upper(), 0.9, v, self.measured)
                                         if k in ("ttft_p90_s", "tpot_p90_s") else None)
        return strict(d)


class _RunFigures(NamedTuple):
    """What a capacity probe reads of one run (the :class:`~fastsim.sim.SimMetrics` fields it uses)."""

    attainment: float
    measured: int
    n_requests: int
    rejected: int
    unfinished: int
    ttft_p90_s: float
    tpot_p90_s: float
    queue_slope_req_per_s: float
    arrival_rate_req_per_s: float
    overloaded: bool


def _figures_at(res, horizon_s: float, slo: SLO, measure_window, sample_dt_s: float) -> _RunFigures:
    """The metrics the simulator reports for a run with horizon ``horizon_s``, read off a longer run.

    ``res`` is the :class:`~fastsim.sim.SimResult` (``full``) of the same plan and workload
    simulated to a later horizon. Events up to ``horizon_s`` are the same in both runs (a horizon
    only stops the event loop), and so are the samples before it, so the measured window,
    attainment, P90s, backlog slope and overload flag follow from the definitions of
    :mod:`fastsim.sim.engine`, in the kernel's order of float operations: a token after
    ``horizon_s`` was not reached, a request without its last token by then is unfinished.
    """
    from .sim import OVERLOAD_MIN_GROWTH, OVERLOAD_SLOPE_FRACTION
    from .sim.records import REQ_FINISHED, REQ_REJECTED
    a, o_all, status = res.arrival_s, res.output_tokens, res.status
    n = int(a.shape[0])
    rejected = int(np.count_nonzero(status == REQ_REJECTED))
    with np.errstate(invalid="ignore"):
        fin = (status == REQ_FINISHED) & (res.finish_s <= horizon_s)
        first = np.where(res.first_token_s <= horizon_s, res.first_token_s, np.nan)
    lo_t, hi_t = measure_window[0] * horizon_s, measure_window[1] * horizon_s
    sel = (a >= lo_t) & (a < hi_t)
    nm = int(np.count_nonzero(sel))
    ttft = first[sel] - a[sel]
    ttft[np.isnan(ttft)] = np.inf
    o, f_sel, done = o_all[sel], first[sel], fin[sel]
    tpot = np.full(o.shape, np.inf)
    ok_t = done & (o > 1)
    tpot[ok_t] = (res.finish_s[sel][ok_t] - f_sel[ok_t]) / (o[ok_t] - 1).astype(np.float64)
    good = done & (ttft <= slo.ttft_s) & ((o == 1) | (tpot <= slo.tpot_s))
    attainment = int(np.count_nonzero(good)) / nm if nm > 0 else math.nan
    # least-squares slope of the number in system over the samples at t >= horizon / 2, summed
    # left to right as the kernel sums (add.accumulate is sequential)
    ns = max(1, int(math.ceil(horizon_s / sample_dt_s)))
    tk = np.arange(ns, dtype=np.float64) * sample_dt_s
    keep = tk >= 0.5 * horizon_s
    tk, ys = tk[keep], res.in_system[:ns][keep].astype(np.float64)
    slope = 0.0
    cnt = int(tk.shape[0])
    if cnt >= 3:
        tm = float(np.add.accumulate(tk)[-1]) / cnt
        ym = float(np.add.accumulate(ys)[-1]) / cnt
        tc = tk - tm
        num = float(np.add.accumulate(tc * (ys - ym))[-1])
        den = float(np.add.accumulate(tc * tc)[-1])
        slope = num / den
    rate = (n - rejected) / horizon_s
    over = bool(slope > OVERLOAD_SLOPE_FRACTION * rate and slope * 0.5 * horizon_s >= OVERLOAD_MIN_GROWTH)
    return _RunFigures(attainment, nm, n, rejected, n - rejected - int(np.count_nonzero(fin)), _p90(ttft),
                       _p90(tpot[o > 1]), slope, rate, over)


def _figures_of(m) -> _RunFigures:
    """The same figures from a run's own :class:`~fastsim.sim.SimMetrics`."""
    return _RunFigures(m.attainment, int(m.measured), int(m.n_requests), int(m.rejected), int(m.unfinished),
                       m.ttft_p90_s, m.tpot_p90_s, m.queue_slope_req_per_s, m.arrival_rate_req_per_s,
                       bool(m.overloaded))


@dataclass(frozen=True)
class TraceCapacityResult:
    """The maximum sustainable time scale of a plan on a real trace (SPEC §7, on a trace).

    A time scale s replays the trace with its arrival times divided by s (same requests, order
    and lengths); its equivalent mean rate is ``n / (duration_s / s)``.

    Attributes
    ----------
    scale : float
        The estimate: between the largest passing scale below the smallest failing one
        (``bracket[0]``) and that failing scale (``bracket[1]``), where the failing criterion
        (attainment, or the overload flag at the midpoint) crosses its threshold by linear
        interpolation, the estimator of :class:`CapacityResult` on one run per probe. 0 when every
        probe failed; the largest passing scale when none failed.
    bracket : (float, float)
        (pass, fail) scales: the largest passing scale below the smallest failing one, and that
        one; ``(hi - lo) / lo <= rel_tol`` unless the probe budget ran out. ``(0, hi)`` when no
        scale below ``hi`` passed, ``(lo, inf)`` when none failed. The only interval: a trace is
        one realisation.
    probes : list of ScaleProbe
        Every probe, in the order simulated (ascending scale within a round).
    trace : str
        The trace's name.
    requests : int
        Requests in the trace.
    duration_s : float
        The trace's span at scale 1 (s): its ``duration_s``.
    analytic_req_per_s : float
        The plan's analytic capacity (req/s; 0 when the screen finds it infeasible).
    horizon_limit_s : float
        The caller's horizon (s), inf when none: it cuts every replay whose span exceeds it.
    horizon_s : float
        The horizon at ``scale`` (s): ``min(duration_s / scale, horizon_limit_s)``; nan at scale 0.
    excluded_requests : int or None
        Requests of the trace arriving after ``horizon_s`` at ``scale`` (not simulated); None at
        scale 0.
    rel_tol : float
        Relative bracket width asked for.
    probes_per_round : int
        Scales simulated together in each round's parallel batch.
    notes : tuple of str
        What the figures need said: one realisation (no seeds, no confidence interval), a
        horizon that cuts the replay, probes that pass above a failing scale, a budget or
        search range that ran out.
    """

    scale: float
    bracket: tuple
    probes: list
    trace: str
    requests: int
    duration_s: float
    analytic_req_per_s: float
    horizon_limit_s: float
    horizon_s: float
    excluded_requests: int | None
    rel_tol: float
    probes_per_round: int
    notes: tuple = ()

    @property
    def native_rate_req_per_s(self) -> float:
        """The trace's own mean rate, ``requests / duration_s`` (float, req/s)."""
        return self.requests / self.duration_s

    @property
    def rate_req_per_s(self) -> float:
        """Equivalent mean rate at ``scale``: ``requests / (duration_s / scale)`` (float, req/s)."""
        return self.native_rate_req_per_s * self.scale

    @property
    def bracket_req_per_s(self) -> tuple:
        """``bracket`` as equivalent mean rates (tuple of two floats, req/s; inf for an open end)."""
        return tuple(self.native_rate_req_per_s * s for s in self.bracket)

    @property
    def analytic_scale(self) -> float:
        """The scale whose equivalent rate is the analytic capacity (float; 0 when it is 0)."""
        return self.analytic_req_per_s / self.native_rate_req_per_s

    @property
    def analytic_ratio(self) -> float:
        """Analytic capacity / equivalent simulated rate (float; > 1: the screen is optimistic); inf at 0."""
        return self.analytic_req_per_s / self.rate_req_per_s if self.rate_req_per_s > 0 else float("inf")

    @property
    def simulated_ratio(self) -> float:
        """Equivalent simulated rate / analytic capacity (float; nan when the analytic capacity is 0)."""
        return self.rate_req_per_s / self.analytic_req_per_s if self.analytic_req_per_s > 0 else float("nan")

    def to_dict(self) -> dict:
        """The result as a JSON-ready dict.

        Returns
        -------
        dict
            ``scale``, ``bracket_scale``, ``rate_req_per_s``, ``bracket_req_per_s``,
            ``native_rate_req_per_s``, ``trace``, ``requests``, ``trace_duration_s``,
            ``horizon_s``, ``horizon_limit_s``, ``excluded_requests``, ``probes`` (list of
            :meth:`ScaleProbe.to_dict`), ``analytic_req_per_s``, ``analytic_scale``,
            ``analytic_ratio``, ``simulated_ratio``, ``rel_tol``, ``probes_per_round``,
            ``estimate_method``, ``ci_method`` and ``notes``; non-finite values become None,
            each explained in ``null_reasons`` (reasons start with ``infinite`` or
            ``not applicable``).
        """
        from ._output import null_reasons, strict
        feasible = self.analytic_req_per_s > 0
        d = {"scale": self.scale, "bracket_scale": list(self.bracket), "rate_req_per_s": self.rate_req_per_s,
             "bracket_req_per_s": list(self.bracket_req_per_s),
             "native_rate_req_per_s": self.native_rate_req_per_s, "trace": self.trace, "requests": self.requests,
             "trace_duration_s": self.duration_s, "horizon_s": self.horizon_s,
             "horizon_limit_s": self.horizon_limit_s, "excluded_requests": self.excluded_requests,
             "probes": [p.to_dict() for p in self.probes],
             "analytic_req_per_s": self.analytic_req_per_s,
             "analytic_scale": self.analytic_scale if feasible else math.nan,
             "analytic_ratio": self.analytic_ratio if feasible else math.nan,
             "simulated_ratio": self.simulated_ratio, "rel_tol": self.rel_tol,
             "probes_per_round": self.probes_per_round,
             "estimate_method": ("interpolated between the largest passing and the smallest failing scale where "
                                 "the failing criterion crosses its threshold, one replay per probe"),
             "ci_method": "none: a trace is one realisation (no seeds); the bisection bracket is the only interval",
             "notes": list(self.notes)}
        no_pass = "not applicable: no probed scale passed (estimate 0)"

        def explain(k, v):
            if k in ("bracket_scale", "bracket_req_per_s"):
                return "infinite: no probe failed, so the bracket has no upper end"
            if k == "horizon_limit_s":
                return "not applicable: no horizon given; each probe replays the whole trace"
            if k in ("horizon_s", "excluded_requests"):
                return no_pass
            if k in ("analytic_scale", "simulated_ratio") or (k == "analytic_ratio" and not feasible):
                return "not applicable: the analytic screen finds the plan infeasible (analytic capacity 0)"
            if k == "analytic_ratio":
                return "infinite: no probed scale passed (simulated capacity 0)"
            return None
        d["null_reasons"] = null_reasons(d, explain)
        return strict(d)


def _replay_horizon(duration_s: float, scale: float, limit_s: float) -> float:
    """Simulated seconds of a replay at ``scale``: its span (next float up), or ``limit_s`` when shorter."""
    span = float(np.nextafter(duration_s / scale, np.inf))
    return min(span, limit_s)


def max_sustainable_scale(plan: Plan, trace, slo: SLO, *, horizon_s: float | None = None, rel_tol: float = 0.01,
                          scale_hint: float | None = None, probes_per_round: int = 4, max_probes: int = 40,
                          min_scale: float | None = None, catalog: Catalog | None = None,
                          constants: StepConstants = StepConstants(), model: Model | None = None,
                          measure_window=(0.2, 0.8), routing: str = "least-loaded", engine: dict | None = None,
                          on_round_start=None,
                          on_probe=None) -> TraceCapacityResult:
    """Search for the largest time scale at which a plan serves a real trace within its SLOs (SPEC §7).

    A time scale s >= 0 replays the trace with its arrival times divided by s: s = 2 is twice as
    fast, with the same requests in the same order with the same lengths, an equivalent mean
    rate of ``n / (duration_s / s)``. Each probe replays the trace once (a trace is one
    realisation: there are no seeds) over its span at that scale, ``duration_s / s`` simulated
    seconds, or ``horizon_s`` when that is shorter (the requests arriving after it are counted
    in the probe's ``excluded_requests``, never dropped unsaid); the measured requests are those
    arriving in the middle 60% of the horizon. A probe passes by the rule of
    :func:`max_sustainable_rate`: attainment >= ``slo.attainment`` and not overloaded.

    The search runs in rounds of ``probes_per_round`` scales, simulated together in one parallel
    :func:`fastsim.sim.simulate_batch` call. The first round spreads around ``scale_hint`` by
    factors of 1.25; while every probe passes (fails) the next round steps up (down) by further
    factors of 1.25; once a scale passes below the smallest failing one, each round splits the
    bracket evenly, until ``(hi - lo) <= rel_tol x lo``. The batch shares one horizon, the
    round's longest; a run whose own horizon is shorter is read off at its own horizon (events
    and samples before a horizon do not depend on it), so every probe equals a
    :func:`fastsim.sim.simulate` of its replay, whatever else its round holds.

    Parameters
    ----------
    plan : Plan
    trace : Workload, str or os.PathLike
        The trace (:class:`fastsim.workload.Workload`: ``arrival_s`` ndarray(float64) of shape
        (n,), ascending, in s; token counts ndarray(int64) of shape (n,)), or a name or path
        for :func:`fastsim.workload.read_trace`. Its ``duration_s`` is its span at scale 1.
    slo : SLO
    horizon_s : float, optional
        Longest replay (simulated s); default none: every probe replays the whole trace.
    rel_tol : float
        Relative width of the final bracket, in (0, 1).
    scale_hint : float, optional
        Centre of the first round; default the scale whose equivalent rate is the plan's analytic
        capacity (1 when that is 0). At least ``min_scale``; at most the largest scale probed: an
        equivalent rate of :data:`MAX_RATE_REQ_PER_S`, and a replay span ``duration_s / s`` no
        shorter than :func:`horizon_floor`'s ``min_horizon_s`` (no scale above it is probed).
    probes_per_round : int
        Scales per round (>= 1; 4 by default, fixed so that the probes, and the answer, do not
        depend on the machine's thread count; up to 4 threads run them at once).
    max_probes : int
        Probe budget (>= 1); the bracket reached is reported when it runs out.
    min_scale : float, optional
        Smallest scale tried (> 0); default ``duration_s / MAX_REPLAY_SPAN_S`` (a replay of at
        most 1e6 s). Must keep the replay within the simulator's 1e7 samples (``duration_s /
        1e7``).
    catalog : Catalog, optional
        Defaults to the built-in catalog.
    constants : StepConstants
        Step-model constants (SPEC §3).
    model : Model, optional
        The model, when it is not a catalog entry.
    measure_window : (float, float)
        Fractions of each probe's horizon bounding the measured requests (SPEC §1).
    routing : {"least-loaded", "round-robin", "prefix-aware"}
    engine : dict, optional
        An engine policy for the simulations (:mod:`fastsim.sim.policy`): ``{"policy": "vllm"}``.
        A name takes the engine's defaults for the plan's GPU and KV pool, with the optional
        overrides ``max_num_batched_tokens``, ``max_num_seqs`` and ``prefix_caching``, or with
        ``plan_settings: True`` the settings ``fastsim plan --emit`` writes for the plan (its decode
        batch; a budget of its decodes' tokens plus its chunk for vLLM, its chunk for SGLang); an
        :class:`~fastsim.sim.policy.EnginePolicy` is used as it is. Optionally ``spec_seed``. A
        plan sized with speculative decoding brings its draft (``plan.spec``). None: the lecture
        policy, which refuses such a plan.
    on_round_start : callable(round: int, scales: list of float), optional
        Called before each round's batch.
    on_probe : callable(probe: ScaleProbe), optional
        Called after each round for each of its probes, in ascending scale.

    Returns
    -------
    TraceCapacityResult
        ``scale`` inside ``bracket``; the equivalent rates, the analytic capacity and ratios as
        properties; ``notes`` saying that the bracket is the only interval, and anything else
        the figures need said (a horizon at the estimate shorter than :func:`horizon_floor`'s
        ``full_horizon_s``, which understates the scale; a search that reached the largest
        scale).

    Raises
    ------
    FastsimInputError
        A trace with fewer than two requests or no span (``trace``), ``rel_tol`` outside
        (0, 1), a non-positive ``horizon_s``, ``scale_hint`` or ``min_scale``, a ``horizon_s``
        below :func:`horizon_floor`'s ``min_horizon_s`` (at the trace's mean lengths), a
        ``scale_hint`` below ``min_scale`` or above the largest scale, a plan with more than
        :data:`fastsim.analytic.MAX_INSTANCES` instances on a side, ``slo`` not an :class:`SLO`,
        a ``min_scale`` whose replay exceeds 1e7 s or lies above the largest scale,
        ``probes_per_round`` or ``max_probes`` not an integer >= 1, unknown names in the plan, an
        unreadable trace, or anything :func:`fastsim.sim.simulate_batch` rejects (routing).
    RuntimeError
        A simulator kernel reported an internal failure.
    """
    from . import workload as W
    from .errors import require_positive
    from .sim import simulate_batch
    from .sim.engine import auto_sample_dt
    catalog = catalog or default_catalog()
    model = model or catalog.model(plan.model)
    wl = trace if isinstance(trace, W.Workload) else W.read_trace(trace)
    if wl.n < 2 or not wl.duration_s > 0:
        raise FastsimInputError("trace", wl.name, f"a trace with at least two requests at distinct times "
                                f"(it has {wl.n} over {wl.duration_s:g} s), so that it has a rate")
    if not (0 < rel_tol < 1):
        raise FastsimInputError("rel_tol", rel_tol, "a fraction in (0, 1)")
    for name, v in (("probes_per_round", probes_per_round), ("max_probes", max_probes)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise FastsimInputError(name, v, "an integer >= 1")
    limit = math.inf if horizon_s is None else require_positive("horizon_s", horizon_s)
    D, n = float(wl.duration_s), wl.n
    native = n / D
    floor_scale = D / 1e7
    if min_scale is None:
        min_scale = D / MAX_REPLAY_SPAN_S
    else:
        min_scale = require_positive("min_scale", min_scale)
        if min_scale < floor_scale:
            raise FastsimInputError("min_scale", min_scale, f">= {floor_scale:.6g} (a replay of at most 1e7 s: "
                                    "the simulator's sample limit at 1-s samples)")
    check_plan_instances(plan)
    _check_slo("slo", slo)
    from .sim.engine import measure_fractions
    window = measure_fractions(measure_window)
    analytic = float(plan.capacity_req_per_s)
    floor = horizon_floor(plan, float(np.mean(wl.prompt_tokens)), float(np.mean(wl.output_tokens)), slo,
                          measure_window=window, catalog=catalog, constants=constants, model=model)
    if limit < floor.min_horizon_s:
        raise floor.refusal("horizon_s", limit, window)
    # the largest scale: an equivalent rate of MAX_RATE_REQ_PER_S, and a replay no shorter than the
    # shortest horizon the floor accepts (a shorter replay measures the horizon, not the plan)
    max_scale = min(MAX_RATE_REQ_PER_S / native, D / floor.min_horizon_s)
    why_max = (f"an equivalent rate of at most {native * max_scale:.6g} req/s: " + (
        f"fastsim.search.MAX_RATE_REQ_PER_S ({wl.name} runs at {native:.4g} req/s at scale 1)"
        if max_scale == MAX_RATE_REQ_PER_S / native else
        f"a faster replay spans less than {floor.min_horizon_s:.3g} s, too short for a mean request "
        f"({floor.prompt_tokens:,.0f} + {floor.output_tokens:,.0f} tokens, {floor.lone_s:.3g} s alone) to finish in "
        "the measure window (fastsim.search.horizon_floor)"))
    if scale_hint is not None:
        s0 = require_positive("scale_hint", scale_hint)
        if s0 > max_scale:
            raise FastsimInputError("scale_hint", scale_hint, f"a scale > 0 of at most {max_scale:.6g}: {why_max}")
    else:
        s0 = min(analytic / native if analytic > 0 else 1.0, max_scale)
    if scale_hint is not None and s0 < min_scale:
        raise FastsimInputError("scale_hint", scale_hint, f">= min_scale ({min_scale:.6g})")
    if min_scale > max_scale:
        raise FastsimInputError("min_scale", min_scale, f"at most {max_scale:.6g}: {why_max}")
    s0 = max(s0, min_scale)
    sp = sim_plan(plan, catalog, constants, model)
    ekw = _engine_kwargs(engine, plan, catalog, model, constants)
    a, P, O = wl.arrival_s, wl.prompt_tokens, wl.output_tokens
    m = int(probes_per_round)
    probes: list = []
    mets, meas, overs = [], [], []

    def _round(scales, rnd):
        if on_round_start is not None:
            on_round_start(rnd, list(scales))
        hz = [_replay_horizon(D, s, limit) for s in scales]
        wls, kept = [], []
        for s, h in zip(scales, hz):
            t = a / s
            k = int(np.searchsorted(t, h, side="right"))
            pre = None
            if wl.prefix is not None:
                pre = W.PrefixBlocks(wl.prefix.block_tokens, wl.prefix.offsets[:k + 1], wl.prefix.ids)
            wls.append(_Replay(t[:k], P[:k], O[:k], pre))
            kept.append(k)
        H = max(hz)
        # the longest replay's sampling step (1 s up to 1e7 s, coarser beyond: auto_sample_dt); a
        # shorter probe read from its samples must be one its own run would sample on that step
        dt = auto_sample_dt(H)
        full = any(h != H for h in hz)
        runs = simulate_batch([sp], wls, horizon_s=H, ttft_slo_s=slo.ttft_s, tpot_slo_s=slo.tpot_s,
                              max_context_tokens=model.max_context_tokens, routing=routing, **ekw,
                              measure_window=measure_window, sample_dt_s=dt, full=full)
        for i, (s, h, k, r) in enumerate(zip(scales, hz, kept, runs)):
            if h == H:
                fig = _figures_of(r.metrics if full else r)
            elif auto_sample_dt(h) == dt:
                fig = _figures_at(r, h, slo, measure_window, sample_dt_s=dt)
            else:       # its own run samples on a finer step: simulate it alone
                fig = _figures_of(simulate_batch([sp], [wls[i]], horizon_s=h, ttft_slo_s=slo.ttft_s,
                                                 tpot_slo_s=slo.tpot_s, max_context_tokens=model.max_context_tokens,
                                                 routing=routing, **ekw, measure_window=measure_window)[0])
            met, mea, over, att, overloaded, passed = _probe_verdict([fig], slo, h)
            p = ScaleProbe(float(s), native * float(s), float(h), k, n - k, fig.measured, att, overloaded, passed,
                           float(fig.ttft_p90_s), float(fig.tpot_p90_s), fig.rejected, fig.unfinished, rnd)
            probes.append(p)
            mets.append(met), meas.append(mea), overs.append(over)
            if on_probe is not None:
                on_probe(p)

    def _bracket():
        fails = [p.scale for p in probes if not p.passed]
        hi = min(fails) if fails else None
        below = [p.scale for p in probes if p.passed and (hi is None or p.scale < hi)]
        return (max(below) if below else None), hi

    scales = sorted({min(max(s0 * _SCALE_STEP ** k, min_scale), max_scale) for k in range(-(m // 2), m - m // 2)})
    rnd = 0
    exhausted_low = capped = False
    while True:
        scales = scales[:max_probes - len(probes)]
        _round(scales, rnd)
        rnd += 1
        lo, hi = _bracket()
        if lo is not None and hi is not None and hi - lo <= rel_tol * lo:
            break
        left = max_probes - len(probes)
        if left <= 0:
            break
        done = {p.scale for p in probes}
        if hi is None:
            if lo >= max_scale:
                capped = True
                break
            scales = [min(lo * _SCALE_STEP ** k, max_scale) for k in range(1, m + 1)]
        elif lo is None:
            scales = [hi / _SCALE_STEP ** k for k in range(1, m + 1) if hi / _SCALE_STEP ** k >= min_scale]
            if not scales and min_scale < hi and min_scale not in done:
                scales = [min_scale]
            if not scales:
                exhausted_low = True
                break
        else:
            k = min(m, left)
            scales = [lo + (hi - lo) * j / (k + 1) for j in range(1, k + 1)]
        scales = sorted(s for s in set(scales) if s not in done)
        if not scales:
            break
    lo, hi = _bracket()
    rates = np.array([p.scale for p in probes])
    estimate = 0.0
    if lo is not None:
        # mets / meas (probes, 1) and overs (probes, 1, 3): one run per probe
        estimate = _capacity_from(rates, np.array(mets), np.array(meas), np.array(overs), slo.attainment, math.nan)
        estimate = min(max(estimate, lo), hi if hi is not None else math.inf)
    bracket = (float(lo or 0.0), float(hi if hi is not None else math.inf))

    notes = [f"a trace is one realisation: each probe replays {wl.name} once, so there are no seeds and no "
             "confidence interval; the bisection bracket "
             f"(scales {bracket[0]:.4g} - {bracket[1]:.4g}) is the only interval"]
    h_est = _replay_horizon(D, estimate, limit) if estimate > 0 else math.nan
    excl = int(n - np.searchsorted(a / estimate, h_est, side="right")) if estimate > 0 else None
    if math.isfinite(limit):
        cut = [p for p in probes if p.excluded_requests]
        notes.append(f"a horizon of {limit:g} s cuts the replay at scales below {D / limit:.4g} (where the trace's "
                     f"span, {D:,.1f} s at scale 1, exceeds it): a probe at scale s then replays only the trace's "
                     f"first {limit:g} x s seconds, a different part at each scale; "
                     + (f"{len(cut)} of {len(probes)} probes left out the requests arriving after it "
                        f"(up to {max(p.excluded_requests for p in cut):,} of {n:,}), counted per probe"
                        if cut else "no probe was cut")
                     + (f"; at the estimate {excl:,} requests would arrive after it" if excl else ""))
    if hi is not None:
        above = sorted(p.scale for p in probes if p.passed and p.scale > hi)
        if above:
            notes.append(f"{len(above)} probe(s) passed above the smallest failing scale {hi:.4g} (at "
                         + ", ".join(f"{s:.4g}" for s in above[:5]) + ("..." if len(above) > 5 else "")
                         + "): one realisation need not pass or fail monotonically in the scale; the bracket is "
                           "taken below the smallest failing scale")
    if lo is None:
        notes.append(f"every probe failed, down to scale {min(p.scale for p in probes):.4g}"
                     + (f" (the smallest tried: min_scale {min_scale:.4g})" if exhausted_low else
                        f" (the probe budget of {max_probes} ran out)"))
    elif hi is None:
        notes.append(f"no probe failed, up to scale {lo:.4g}: "
                     + (f"the largest scale probed ({why_max})" if capped else
                        f"the probe budget of {max_probes} ran out") + "; the capacity lies above it")
    elif hi - lo > rel_tol * lo:
        notes.append(f"the bracket is {100 * (hi - lo) / lo:.2g}% wide, wider than rel_tol {rel_tol:g}: the probe "
                     f"budget of {max_probes} ran out")
    short = floor.note(h_est, window) if estimate > 0 else ""
    if short:
        notes.append("at the estimate, " + short)
    return TraceCapacityResult(float(estimate), bracket, probes, wl.name, n, D, analytic, float(limit),
                               float(h_est), excl, float(rel_tol), m, tuple(notes))
