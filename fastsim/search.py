"""Verification and repair of plans in simulation (SPEC section 7; lecture §2.3).

``verify`` simulates a plan on a set of workloads (one per seed, common random numbers) at the
target rate and pools the measured requests; a plan passes when its SLO attainment is >= 0.90 and no
run is flagged overloaded. ``repair`` adds whole instances, on the failing side for disaggregated
plans (decode when TPOT fails, prefill when TTFT fails), until the plan passes, and says so when no
count can pass: a request that alone, on an idle instance, misses its SLO is not helped by more
machines.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .analytic import Plan
from .catalog import Catalog, Model, default_catalog
from .errors import FastsimInputError
from .stepmodel import P_HIDDEN, P_KVPG, P_LAYERS, P_NET_BW, StepConstants, step_params, step_time

__all__ = ["SLO", "Verification", "RepairResult", "sim_plan", "verify", "repair", "lone_request_check"]


@dataclass(frozen=True)
class SLO:
    """P90 latency targets and the pass threshold.

    Attributes
    ----------
    ttft_s, tpot_s : float
        Targets (s).
    attainment : float
        Fraction of measured requests that must meet both targets (0.90).
    """

    ttft_s: float
    tpot_s: float
    attainment: float = 0.90


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
        ``attainment >= SLO.attainment`` and no run overloaded.
    overloaded : bool
        Some run's waiting queue grew without bound.
    runs : int
        Simulations pooled (seeds).
    measured, rejected : int
        Measured requests; requests rejected (too long for the instance or the model).
    """

    attainment: float
    ttft_p90_s: float
    tpot_p90_s: float
    passed: bool
    overloaded: bool
    runs: int
    measured: int
    rejected: int

    def to_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in self.__dict__.items()}


def sim_plan(plan: Plan, catalog: Catalog | None = None, constants: StepConstants = StepConstants(),
             model: Model | None = None):
    """The simulator's plan object for an analytic :class:`~fastsim.analytic.Plan`."""
    from .sim import ColocatedPlan, DisaggregatedPlan
    catalog = catalog or default_catalog()
    model = model or catalog.model(plan.model)
    g, pr = catalog.gpu(plan.gpu), catalog.precision(plan.precision)
    if plan.mode == "disaggregated":
        return DisaggregatedPlan(step_params(model, g, pr, plan.prefill_tp, constants), plan.prefill_instances,
                                 step_params(model, g, pr, plan.decode_tp, constants), plan.decode_instances)
    return ColocatedPlan(step_params(model, g, pr, plan.tp, constants), plan.instances, plan.chunk_tokens)


def _pooled(results, slo: SLO, measure_window, horizon_s):
    ttft_all, tpot_all = [], []
    met = measured = rejected = 0
    overloaded = False
    for r in results:
        m = r.metrics
        overloaded |= bool(m.overloaded)
        rejected += int(m.rejected)
        lo, hi = measure_window[0] * horizon_s, measure_window[1] * horizon_s
        sel = (r.arrival_s >= lo) & (r.arrival_s < hi)
        ttft = np.where(np.isnan(r.first_token_s), np.inf, r.first_token_s - r.arrival_s)[sel]
        o = r.output_tokens[sel]
        fin = r.finish_s[sel]
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(o > 1, (np.where(np.isnan(fin), np.inf, fin) - (ttft + r.arrival_s[sel])) / (o - 1), 0.0)
        ok = (ttft <= slo.ttft_s) & ((o == 1) | (tpot <= slo.tpot_s))
        met += int(ok.sum())
        measured += int(sel.sum())
        ttft_all.append(ttft)
        tpot_all.append(tpot[o > 1])
    ttft_all = np.concatenate(ttft_all) if ttft_all else np.empty(0)
    tpot_all = np.concatenate(tpot_all) if tpot_all else np.empty(0)
    q = lambda a: float(np.quantile(a, 0.9, method="inverted_cdf")) if a.size else float("nan")  # noqa: E731
    att = met / measured if measured else 0.0
    return Verification(attainment=att, ttft_p90_s=q(ttft_all), tpot_p90_s=q(tpot_all),
                        passed=bool(att >= slo.attainment and not overloaded), overloaded=overloaded,
                        runs=len(results), measured=measured, rejected=rejected)


def verify(plan: Plan, workloads, slo: SLO, *, horizon_s: float, catalog: Catalog | None = None,
           constants: StepConstants = StepConstants(), model: Model | None = None,
           measure_window=(0.2, 0.8), routing: str = "least-loaded") -> Verification:
    """Simulate a plan on each workload and pool the measured requests (SPEC §7).

    Parameters
    ----------
    plan : Plan
    workloads : sequence of (arrival_s, prompt_tokens, output_tokens)
        One per seed: float64[n] ascending, int64[n], int64[n].
    slo : SLO
    horizon_s : float
        Arrival window simulated (s).

    Returns
    -------
    Verification
    """
    from .sim import simulate
    catalog = catalog or default_catalog()
    model = model or catalog.model(plan.model)
    sp = sim_plan(plan, catalog, constants, model)
    results = [simulate(sp, a, p, o, horizon_s=horizon_s, ttft_slo_s=slo.ttft_s, tpot_slo_s=slo.tpot_s,
                        max_context_tokens=model.max_context_tokens, routing=routing,
                        measure_window=measure_window) for a, p, o in workloads]
    return _pooled(results, slo, measure_window, horizon_s)


def lone_request_check(plan: Plan, prompt_tokens: float, output_tokens: float, slo: SLO,
                       catalog: Catalog | None = None, constants: StepConstants = StepConstants(),
                       model: Model | None = None) -> str:
    """Why a request of these lengths misses its SLO even alone on an idle instance ('' if it does not).

    TTFT alone = the prompt's prefill steps (chunks of ``chunk_tokens`` for colocated plans, one
    step plus the KV transfer for disaggregated ones); TPOT alone = one decode step at its context.
    More instances cannot fix either (lecture §2.3, lesson one).
    """
    catalog = catalog or default_catalog()
    model = model or catalog.model(plan.model)
    g, pr = catalog.gpu(plan.gpu), catalog.precision(plan.precision)
    L, h = model.layers, model.hidden
    P, O = float(prompt_tokens), float(output_tokens)
    if plan.mode == "disaggregated":
        pp = step_params(model, g, pr, plan.prefill_tp, constants)
        ttft = float(step_time(pp, P, 0.0, 2.0 * L * h * P * P)) + P * pp[P_KVPG] / pp[P_NET_BW]
        pd_ = step_params(model, g, pr, plan.decode_tp, constants)
    else:
        pd_ = step_params(model, g, pr, plan.tp, constants)
        c = float(plan.chunk_tokens)
        ttft, done = 0.0, 0.0
        while done < P:
            x = min(c, P - done)
            ttft += float(step_time(pd_, x, done, 2.0 * L * h * x * x + 4.0 * L * h * x * done))
            done += x
    ctx = P + O / 2.0
    tpot = float(step_time(pd_, 1.0, ctx, 4.0 * L * h * ctx))
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
           latency_output_tokens: float, max_added: int = 8, catalog: Catalog | None = None,
           constants: StepConstants = StepConstants(), model: Model | None = None,
           measure_window=(0.2, 0.8), routing: str = "least-loaded") -> RepairResult:
    """Verify a plan and add instances until it passes (SPEC §7).

    Colocated plans gain one instance at a time; disaggregated plans gain a decode instance when
    the TPOT P90 misses its target, a prefill instance when the TTFT P90 does (both when both do).
    Before adding anything, a request of the latency-quantile lengths is checked alone on an idle
    instance: if it already misses the SLO, no count can pass and the plan is reported unrepairable.

    Parameters
    ----------
    plan : Plan
    workloads : sequence of (arrival_s, prompt_tokens, output_tokens)
    slo : SLO
    horizon_s : float
    latency_prompt_tokens, latency_output_tokens : float
        Lengths for the lone-request check (the P90s).
    max_added : int
        Instances that may be added before giving up.

    Returns
    -------
    RepairResult
    """
    catalog = catalog or default_catalog()
    model = model or catalog.model(plan.model)
    kw = dict(horizon_s=horizon_s, catalog=catalog, constants=constants, model=model,
              measure_window=measure_window, routing=routing)
    v = verify(plan, workloads, slo, **kw)
    history = [(plan, v)]
    if v.passed:
        return RepairResult(plan, v, True, None, "", history)
    why = lone_request_check(plan, latency_prompt_tokens, latency_output_tokens, slo, catalog, constants, model)
    if why:
        return RepairResult(plan, v, False, None, "no instance count can pass: " + why, history)
    start = _instances(plan)
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
