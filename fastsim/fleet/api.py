"""``fastsim fleet``: static, reactive, scheduled and oracle fleets of one instance type over a rate profile.

:func:`fleet` sizes each strategy of :mod:`fastsim.fleet.strategies` from a capacity curve of the
plan's instance type (the maximum sustainable rate of 1..N instances, measured at a few N by
:func:`fastsim.search.max_sustainable_rate` and interpolated), simulates every strategy's fleet on
the same arrivals (:func:`fastsim.fleet.sim.simulate_fleet`, a streamed
:class:`~fastsim.fleet.sim.ProfileArrivals` workload), optionally with failures, and accounts
GPU-hours, dollars and SLO attainment per window; it then finds the spares that keep the
attainment target through one failure at the peak.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from ..errors import FastsimInputError, require_positive
from . import strategies as S

__all__ = ["fleet", "FleetResult", "StrategyResult", "capacity_curve", "plot_fleet", "format_time"]


@dataclass
class StrategyResult:
    """One strategy's fleet over the period.

    Attributes
    ----------
    name : str
        ``static``, ``reactive``, ``scheduled`` or ``oracle``.
    target : ndarray(int64) of shape (d,)
        Instances the strategy wants from each of its decisions (``decision_s``) to the next.
    schedule : FleetSchedule
        The lifetimes simulated (failures and replacements included).
    run : FleetRun
        The simulation.
    cost : CostBreakdown
        GPU-hours and dollars over the period.
    window_attainment : ndarray(float64) of shape (v,)
        Met / arrived per metric window (nan without arrivals).
    window_instances : ndarray(float64) of shape (v,)
        Mean instances ready in each metric window.
    failures : list of Failure
    decision_s : ndarray(float64) of shape (d,)
        The strategy's decision times (s): the profile's window starts, or the reactive
        autoscaler's control interval.
    """

    name: str
    target: np.ndarray
    schedule: object
    run: object
    cost: object
    window_attainment: np.ndarray
    window_instances: np.ndarray
    failures: list
    decision_s: np.ndarray | None = None


@dataclass
class FleetResult:
    """What :func:`fleet` returns (see :meth:`to_dict` for the record the command prints).

    Attributes
    ----------
    plan : Plan
        The instance type (``instances`` is not used).
    profile : RateProfile
        The profile as simulated (scaled).
    horizon_s : float
        The period (s).
    window_s : float
        Metric windows (s).
    capacity : CapacityCurve
    cold_start : ColdStart
    strategies : list of StrategyResult
        In :data:`~fastsim.fleet.strategies.STRATEGIES` order.
    spares : SparesResult or None
    settings : dict
        The knobs used (target utilisation, delays, prices, seeds, ...).
    notes : list of str
    """

    plan: object
    profile: object
    horizon_s: float
    window_s: float
    capacity: object
    cold_start: object
    strategies: list
    spares: object
    settings: dict
    notes: list = field(default_factory=list)

    def strategy(self, name: str) -> StrategyResult:
        """The result of one strategy.

        Parameters
        ----------
        name : str
            A strategy simulated.

        Returns
        -------
        StrategyResult

        Raises
        ------
        FastsimInputError
            A strategy not in the result.
        """
        for s in self.strategies:
            if s.name == name:
                return s
        raise FastsimInputError("strategy", name, ", ".join(s.name for s in self.strategies))

    def to_dict(self, worst: int = 5) -> dict:
        """The record ``fastsim fleet --format json`` prints (without ``notes``).

        Parameters
        ----------
        worst : int
            Worst windows listed per strategy.

        Returns
        -------
        dict
            ``plan``, ``profile``, ``horizon_s``, ``window_s``, ``window_start_s`` and
            ``window_rate_req_per_s`` (the profile's rate at each metric window's start),
            ``capacity`` (points), ``cold_start``, ``settings``, ``strategies`` (one record each:
            instances, GPU-hours, reserved / on-demand split, dollars, $ per million output
            tokens and per million SLO-met output tokens (goodput), attainment overall and per
            window, requests rejected for the context / KV limit and unserved for want of an
            instance, instances per window, the worst windows below the attainment target,
            failures) and ``spares`` (or None). Non-finite values as the floats they are (the
            command writes them as null with reasons).
        """
        from .schema import WINDOW_COLUMNS
        p = self.plan
        starts = self.strategies[0].run.window_start_s
        rates = _rate_at(self.profile, starts)
        tgt = self.settings["attainment_target"]
        out_strats = []
        for s in self.strategies:
            c, run = s.cost, s.run
            att = s.window_attainment
            order = np.argsort(np.where(np.isnan(att), np.inf, att), kind="stable")[:worst]
            order = [int(i) for i in order if att[i] < tgt]          # nan compares False
            col = WINDOW_COLUMNS.index
            rec = {
                "strategy": s.name,
                "instances_min": int(s.target.min()), "instances_max": int(s.target.max()),
                "instances_mean": float(np.nanmean(s.window_instances)),
                "lifetimes": int(s.schedule.provision_s.shape[0]),
                "gpu_hours": c.gpu_hours, "reserved_instances": c.reserved_instances,
                "reserved_gpu_hours": c.reserved_gpu_hours, "on_demand_gpu_hours": c.on_demand_gpu_hours,
                "reserved_usd": c.reserved_usd, "on_demand_usd": c.on_demand_usd, "usd": c.usd,
                "output_tokens": c.output_tokens,
                "usd_per_million_output_tokens": c.usd_per_million_output_tokens,
                "met_output_tokens": c.met_output_tokens,
                "usd_per_million_met_output_tokens": c.usd_per_million_met_output_tokens,
                "requests": int(run.n_requests), "attainment": float(run.attainment),
                "windows_below_target": int(np.sum(att < tgt)),
                "min_window_attainment": float(np.nanmin(att)) if np.any(~np.isnan(att)) else math.nan,
                "rejected_context": int(run.counts[:, col("rejected_context")].sum()),
                "rejected_no_instance": int(run.counts[:, col("rejected_no_instance")].sum()),
                "recomputed": int(run.counts[:, col("recomputed")].sum()),
                "failures": [{"time_s": f.time_s, "lifetime": f.lifetime, "replaced": f.replacement >= 0}
                             for f in s.failures],
                "worst_windows": [{"window_start_s": float(starts[i]), "rate_req_per_s": float(rates[i]),
                                   "instances": float(s.window_instances[i]), "attainment": float(att[i])}
                                  for i in order],
                "window_attainment": att.tolist(),
                "window_instances": s.window_instances.tolist(),
            }
            out_strats.append(rec)
        spares = None
        if self.spares is not None:
            sp = self.spares
            spares = {"base_instances": sp.base_instances, "spares": sp.spares,
                      "instances": sp.base_instances + sp.spares if sp.spares >= 0 else None,
                      "target": sp.target, "rate_req_per_s": sp.rate_req_per_s,
                      "trials": [{"instances": tr.instances, "min_window_attainment": tr.min_attainment,
                                  "attainment": tr.attainment, "fail_at_s": tr.fail_at_s,
                                  "recovered_s": tr.recovered_s, "recomputed": tr.recomputed}
                                 for tr in sp.trials]}
        cs = self.cold_start
        return {
            "plan": {"model": p.model, "gpu": p.gpu, "precision": p.precision, "tp": p.tp,
                     "gpus_per_instance": p.gpus_per_instance, "chunk_tokens": p.chunk_tokens, "layout": p.layout,
                     "price_usd_per_gpu_hour": p.price_usd_per_gpu_hour},
            "profile": {"name": self.profile.name, "windows": self.profile.n_windows,
                        "span_s": self.profile.span_s, "peak_rate_req_per_s": self.profile.peak_rate_req_per_s,
                        "mean_rate_req_per_s": self.profile.mean_rate_req_per_s},
            "horizon_s": self.horizon_s, "window_s": self.window_s,
            "capacity": {"instances": self.capacity.instances.tolist(),
                         "rate_req_per_s": self.capacity.rate_req_per_s.tolist()},
            "cold_start": {"weight_bytes": cs.weight_bytes, "load_bw_bytes_per_s": cs.load_bw_bytes_per_s,
                           "load_s": cs.load_s, "fixed_start_s": cs.fixed_start_s, "total_s": cs.total_s,
                           "checkpoint": cs.checkpoint},
            "settings": dict(self.settings),
            "window_start_s": starts.tolist(), "window_rate_req_per_s": rates.tolist(),
            "strategies": out_strats, "spares": spares,
        }


def format_time(t_s: float) -> str:
    """A time of the period as ``day D HH:MM`` (day 1 from 0 s), the format of every fleet output.

    Parameters
    ----------
    t_s : float
        Seconds from the start of the profile (>= 0).

    Returns
    -------
    str
    """
    d, rest = divmod(float(t_s), 86400.0)
    return f"day {int(d) + 1} {int(rest // 3600):02d}:{int(rest % 3600 // 60):02d}"


def _plural(n, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _slo(slo):
    """(ttft_s, tpot_s, attainment) of an SLO or of a plan dict (``ttft_slo_s``, ``tpot_slo_s``)."""
    from ..search import SLO
    if isinstance(slo, SLO):
        t, p, a = slo.ttft_s, slo.tpot_s, slo.attainment
    elif isinstance(slo, dict) and "ttft_slo_s" in slo and "tpot_slo_s" in slo:
        t, p, a = slo["ttft_slo_s"], slo["tpot_slo_s"], slo.get("attainment", 0.9)
    else:
        raise FastsimInputError("slo", type(slo).__name__, "a fastsim.search.SLO, or a plan dict with "
                                "ttft_slo_s and tpot_slo_s (fastsim plan --format json)")
    t = require_positive("slo.ttft_s", t)
    p = require_positive("slo.tpot_s", p)
    a = S._fraction("slo.attainment", a)
    return SLO(t, p, a)


def _rate_at(profile, t) -> np.ndarray:
    i = np.clip(np.searchsorted(profile.window_start_s, t, side="right") - 1, 0, profile.n_windows - 1)
    return profile.rate_req_per_s[i]


def capacity_curve(plan, scenario, slo, *, peak_req_per_s: float, seeds: int = 2, horizon_s: float = 600.0,
                   points: int = 5, catalog=None, constants=None, model=None, rel_tol: float = 0.02,
                   routing: str = "least-loaded", seed: int = 0) -> S.CapacityCurve:
    """Measure the maximum sustainable rate of N instances at a few N up to the peak's need.

    N = 1 first; then up to ``points`` counts spaced geometrically from 1 to the count the peak
    needs at one instance's capacity (at least 2), each bisected with ``seeds`` seeds of
    ``horizon_s`` (:func:`fastsim.search.max_sustainable_rate`), the first probe at N times
    the per-instance capacity measured last.

    Parameters
    ----------
    plan : Plan
        Colocated; its ``instances`` are replaced.
    scenario : Scenario, str or (LengthDist, LengthDist)
    slo : SLO
    peak_req_per_s : float
        The highest rate the fleet must serve (req/s, > 0).
    seeds, horizon_s, rel_tol, routing, seed, catalog, constants, model
        As for :func:`fastsim.search.max_sustainable_rate`.
    points : int
        Counts measured (>= 1).

    Returns
    -------
    CapacityCurve

    Raises
    ------
    FastsimInputError
        Bad inputs, or a plan that sustains no rate at all.
    """
    from dataclasses import replace
    from ..search import max_sustainable_rate
    from ..stepmodel import StepConstants
    constants = constants or StepConstants()
    peak = require_positive("peak_req_per_s", peak_req_per_s)
    pts = S._count("capacity points", points, 1)
    ns, caps = [], []

    def measure(n, hint):
        res = max_sustainable_rate(replace(plan, instances=n), scenario, slo, seeds=seeds, horizon_s=horizon_s,
                                   rel_tol=rel_tol, rate_hint_req_per_s=hint, seed=seed, catalog=catalog,
                                   constants=constants, model=model, routing=routing, bootstrap=0)
        if not res.rate_req_per_s > 0:
            raise FastsimInputError("plan", plan.describe(), "an instance type that sustains some rate within the "
                                    f"SLOs ({n} instance(s) passed no probe)")
        return res.rate_req_per_s
    c1 = measure(1, None)
    ns.append(1)
    caps.append(c1)
    need = max(2, int(math.ceil(peak / c1)))
    if need > S.MAX_INSTANCES:
        raise FastsimInputError("peak_req_per_s", peak, f"at most {S.MAX_INSTANCES * c1:,.6g} req/s: one instance "
                                f"sustains {c1:,.4g} req/s, and {S.MAX_INSTANCES:,} instances is the most sized")
    if pts > 1:
        grid = np.unique(np.round(np.geomspace(1, need, pts)).astype(np.int64))
        for n in grid[1:]:
            per = caps[-1] / ns[-1]
            caps.append(measure(int(n), float(n) * per))
            ns.append(int(n))
    return S.CapacityCurve.from_points(ns, caps)


def _simulate_one(job):
    """One strategy's simulation (a picklable job for a worker process)."""
    from .sim import simulate_fleet
    sp, workload, schedule, kw = job
    return simulate_fleet(sp, workload, schedule, **kw)


def _run_jobs(jobs, workers: int):
    if workers <= 1 or len(jobs) <= 1:
        return [_simulate_one(j) for j in jobs]
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=mp.get_context("spawn")) as ex:
        return list(ex.map(_simulate_one, jobs))


def fleet(plan, scenario, profile, slo, *, rate_scale: float = 1.0, horizon_s: float | None = None,
          catalog=None, constants=None, model=None, capacity: S.CapacityCurve | None = None,
          capacity_seeds: int = 2, capacity_points: int = 5, capacity_horizon_s: float = 600.0,
          load_bw_bytes_per_s: float = S.LOAD_BW_BYTES_PER_S, fixed_start_s: float = S.FIXED_START_S,
          cold_start_s: float | None = None, target_utilisation: float = S.TARGET_UTILISATION,
          scale_down_delay_s: float = S.SCALE_DOWN_DELAY_S, control_interval_s: float | None = None,
          static_quantile: float = 1.0, min_instances: int = 1, day_s: float = S.DAY_S,
          reserved_instances="none", reserved_usd_per_gpu_hour: float | None = None, mtbf_s: float | None = None,
          repair_s: float = 0.0, fail_times_s=(), spares: bool = True, seed: int = 0, routing: str = "least-loaded",
          workers: int | None = None, strategies=S.STRATEGIES) -> FleetResult:
    """Compare static, reactive, scheduled and oracle fleets of a plan's instance type over a profile.

    Every strategy is sized with the same headroom, ``target_utilisation`` (module docstring of
    :mod:`fastsim.fleet.strategies`): static for the peak (or a quantile) / u, the oracle for each
    window's rate / u, reactive and scheduled for the rate they see / u; u = 1 sizes every
    strategy for exact capacity. The oracle has each window's need ready at the window's start
    with no cold start: the fewest GPU-hours of any fleet never short of that need (up to the
    drain tails, billed as the simulation ends them). It is not a lower bound on the others'
    cost: reactive (a control interval plus a cold start behind a rise) and scheduled (on a day
    busier than the one before) fall short in some windows and can bill less, at lower
    attainment; a note then says so and for how long each was short of the need.

    Parameters
    ----------
    plan : Plan
        A colocated plan (its GPU, precision, TP, chunk and ``price_usd_per_gpu_hour``, the
        on-demand price; its ``instances`` is not used).
    scenario : Scenario
        Request lengths (its rate is not used).
    profile : RateProfile or str
        The traffic (:func:`fastsim.workload.read_rate_profile`).
    slo : SLO or dict
        P90 TTFT and TPOT targets and the attainment target (per window and overall); or a plan
        dict from ``fastsim plan --format json`` (its ``ttft_slo_s`` and ``tpot_slo_s``).
    rate_scale : float
        Every rate of the profile multiplied by this (> 0).
    horizon_s : float, optional
        The period (s, at least one metric window, at most the profile's span); default the span.
    catalog, constants, model
        As for :func:`fastsim.search.sim_plan`.
    capacity : CapacityCurve, optional
        The capacity of N instances; default measured by :func:`capacity_curve` with
        ``capacity_seeds`` seeds of ``capacity_horizon_s`` at ``capacity_points`` counts.
    load_bw_bytes_per_s, fixed_start_s : float
        Cold start = checkpoint bytes / load bandwidth + fixed start (defaults
        :data:`~fastsim.fleet.strategies.LOAD_BW_BYTES_PER_S`,
        :data:`~fastsim.fleet.strategies.FIXED_START_S`).
    cold_start_s : float, optional
        The cold start itself (s, >= 0), instead of the two above.
    target_utilisation : float
        Every strategy's sizing: rate / capacity wanted, in (0, 1] (1 = exact capacity).
    scale_down_delay_s : float
        Reactive downscale stabilisation (s, >= 0).
    control_interval_s : float, optional
        Reactive: time between decisions (s, > 0); default
        :data:`~fastsim.fleet.strategies.CONTROL_INTERVAL_S` or the profile's smallest window
        when shorter.
    static_quantile : float
        Static sizing: quantile of the window rates, in (0, 1] (1 = peak).
    min_instances : int
        Floor of every strategy's count (>= 0).
    day_s : float
        Scheduled look-back (s).
    reserved_instances : int, "none" or "auto"
        Reservation of each strategy (:func:`~fastsim.fleet.strategies.cost`).
    reserved_usd_per_gpu_hour : float, optional
        Reserved price; default the on-demand price (the plan's GPU price).
    mtbf_s : float, optional
        Mean time between failures of one instance (s); None: no random failures.
    repair_s : float
        Failure to replacement provisioning (s, >= 0): in the static fleet the replacement is
        provisioned then; an autoscaled fleet's at its first decision from then on.
    fail_times_s : sequence of float
        Failures at given times (s).
    spares : bool
        Also find the smallest N + k that keeps the target through one failure at the peak (N:
        the peak's exact capacity).
    seed : int
        Seed of the arrivals (the same for every strategy), the failures and the capacity runs.
    routing : {'least-loaded', 'round-robin'}
    workers : int, optional
        Processes for the strategies' simulations; default 1 for small runs, else the CPUs (at
        most 4).
    strategies : sequence of str
        Which strategies, a subset of :data:`~fastsim.fleet.strategies.STRATEGIES`.

    Returns
    -------
    FleetResult
        Its ``notes`` say what the numbers need to be read right (requests rejected or unserved,
        reservations that cannot pay, a period without a previous day, unequal windows).

    Raises
    ------
    FastsimInputError
        A disaggregated plan, an SLO that is neither an SLO nor a plan dict, a period shorter
        than one metric window, a peak beyond what the capacity curve can size, or any bad input
        (naming it).
    """
    from ..catalog import default_catalog
    from ..search import sim_plan
    from ..stepmodel import StepConstants
    from ..workload import RateProfile, read_rate_profile
    from .sim import ProfileArrivals
    catalog = catalog or default_catalog()
    constants = constants or StepConstants()
    model = model or catalog.model(plan.model)
    if getattr(plan, "mode", None) != "colocated":
        raise FastsimInputError("plan", plan.describe() if hasattr(plan, "describe") else type(plan).__name__,
                                "a colocated Plan (the fleet simulator serves colocated instances)")
    slo = _slo(slo)
    bad = [s for s in strategies if s not in S.STRATEGIES]
    if bad or not strategies:
        raise FastsimInputError("strategies", list(strategies), "a non-empty subset of " + ", ".join(S.STRATEGIES))
    # the knobs checked before anything is measured or simulated
    u = S._fraction("target_utilisation", target_utilisation)
    S._fraction("static_quantile", static_quantile)
    S._nonneg("scale_down_delay_s", scale_down_delay_s)
    repair = S._nonneg("repair_s", repair_s)
    S._count("min_instances", min_instances, 0)
    require_positive("day_s", day_s)
    if isinstance(reserved_instances, str):
        if reserved_instances not in ("none", "auto"):
            raise FastsimInputError("reserved_instances", reserved_instances, "an integer >= 0, 'none' or 'auto'")
    else:
        S._count("reserved_instances", reserved_instances, 0)
    if reserved_usd_per_gpu_hour is not None:
        require_positive("reserved_usd_per_gpu_hour", reserved_usd_per_gpu_hour)
    if workers is not None:
        S._count("workers", workers, 1)
    prof = profile if isinstance(profile, RateProfile) else read_rate_profile(profile)
    prof = prof.scaled(rate_scale)
    horizon = prof.span_s if horizon_s is None else require_positive("horizon_s", horizon_s)
    if horizon > prof.span_s * (1 + 1e-12):
        raise FastsimInputError("horizon_s", horizon_s, f"at most the profile's span, {prof.span_s:g} s")
    inside = prof.window_start_s < horizon
    t_w = prof.window_start_s[inside]
    r_w = prof.rate_req_per_s[inside]
    e_w = np.minimum(prof.window_end_s[inside], horizon)
    widths = prof.window_s
    window_s = float(np.median(widths))
    if horizon < window_s:
        raise FastsimInputError("horizon_s", horizon, f"at least one metric window, {window_s:g} s (the profile's "
                                "window): a shorter period has no complete window to report")
    if not np.any(r_w > 0):
        raise FastsimInputError("horizon_s", horizon_s, "a period with traffic (the profile's windows before it "
                                "are all gaps)")
    if control_interval_s is None:
        control = min(S.CONTROL_INTERVAL_S, float(np.min(widths[inside])))
    else:
        control = require_positive("control_interval_s", control_interval_s)
    notes = []
    w_in = widths[inside]
    if not np.allclose(w_in[:-1], w_in[0]):
        notes.append(f"the profile's windows are of unequal widths ({float(w_in.min()):g} to {float(w_in.max()):g} s): "
                     f"metric windows are {window_s:g} s, each shown with the profile's rate at its start; the "
                     f"reactive autoscaler decides every {control:g} s whatever the windows")
    peak = float(r_w.max())
    t_peak = float(t_w[int(np.argmax(r_w))])

    catalog.gpu(plan.gpu)
    pr = catalog.precision(plan.precision)
    ck_bytes, ck_what = checkpoint_bytes(model, pr, catalog)
    if cold_start_s is None:
        cs = S.cold_start(ck_bytes, load_bw_bytes_per_s, fixed_start_s, ck_what)
    else:
        c = S._nonneg("cold_start_s", cold_start_s)
        cs = S.ColdStart(ck_bytes, math.inf, c, ck_what)
    cold = cs.total_s

    if capacity is None:
        capacity = capacity_curve(plan, scenario, slo, peak_req_per_s=peak / u, seeds=capacity_seeds,
                                  horizon_s=capacity_horizon_s, points=capacity_points, catalog=catalog,
                                  constants=constants, model=model, routing=routing, seed=seed)
    elif not isinstance(capacity, S.CapacityCurve):
        raise FastsimInputError("capacity", type(capacity).__name__, "a CapacityCurve")
    reach = capacity.reach_req_per_s()
    if peak / u > reach:
        raise FastsimInputError("profile", f"{prof.name}: {peak:,.6g} req/s at {t_peak:g} s (x {rate_scale:g})",
                                f"a peak of at most {reach * u:,.0f} req/s: {S.MAX_INSTANCES:,} instances serve "
                                f"{reach:,.0f} req/s on this capacity curve at target utilisation {u:g} (scale "
                                "the profile down: rate_scale, --rate, --rate-scale)")
    if capacity.instances.max() < peak / u / capacity.per_instance_req_per_s(capacity.instances.max()):
        notes.append(f"capacity measured up to {int(capacity.instances.max())} instances; beyond, each instance is "
                     "taken to serve what one of those does")
    n_static = S.static_count(r_w, capacity, quantile=static_quantile, min_instances=min_instances,
                              target_utilisation=u)
    n_peak = int(capacity.instances_for(peak, max(1, min_instances)))
    targets, schedules, decisions = {}, {}, {}
    for name in strategies:
        if name == "static":
            decisions[name] = t_w
            targets[name] = np.full(t_w.shape[0], n_static, np.int64)
            schedules[name] = S.static_schedule(n_static)
        elif name == "reactive":
            decisions[name], targets[name] = S.reactive_decisions(
                t_w, r_w, capacity, horizon_s=horizon, control_interval_s=control, window_end_s=e_w,
                target_utilisation=u, scale_down_delay_s=scale_down_delay_s, min_instances=min_instances)
            schedules[name] = S.schedule_from_targets(decisions[name], targets[name], cold_start_s=cold,
                                                      horizon_s=horizon)
        elif name == "scheduled":
            decisions[name] = t_w
            targets[name] = S.scheduled_targets(t_w, r_w, capacity, first_day_instances=n_static,
                                                target_utilisation=u, day_s=day_s,
                                                window_end_s=e_w, min_instances=min_instances)
            schedules[name] = S.schedule_from_targets(t_w, targets[name], cold_start_s=cold, ahead=True,
                                                      horizon_s=horizon)
        else:
            decisions[name] = t_w
            targets[name] = S.oracle_targets(r_w, capacity, min_instances=min_instances, target_utilisation=u)
            schedules[name] = S.schedule_from_targets(t_w, targets[name], cold_start_s=0.0, ahead=True,
                                                      horizon_s=horizon)
    failures = {name: [] for name in strategies}
    if mtbf_s is not None or len(fail_times_s):
        for name in strategies:
            schedules[name], failures[name], skipped = S.inject_failures(
                schedules[name], horizon_s=horizon, cold_start_s=cold,
                repair_s=repair, mtbf_s=mtbf_s, fail_times_s=fail_times_s, seed=seed,
                decision_s=None if name == "static" else decisions[name])
            if skipped:
                notes.append(f"{name}: no instance was up at the failure time(s) "
                             + ", ".join(f"{x:g} s" for x in skipped) + ": not applied")
            lost = sum(1 for f in failures[name] if f.replacement < 0)
            if lost:
                notes.append(f"{name}: {_plural(lost, 'failed instance')} not replaced (no decision left in the "
                             "period, or the instance was due to end before a replacement could be ready)")

    sp = sim_plan(plan, catalog, constants, model)
    workload = ProfileArrivals(scenario, prof, seed, 1.0, horizon)
    kw = dict(ttft_slo_s=slo.ttft_s, tpot_slo_s=slo.tpot_s, horizon_s=horizon, window_s=window_s,
              max_context_tokens=model.max_context_tokens, routing=routing)
    expected = prof.expected_requests(horizon)
    if workers is None:
        workers = min(4, os.cpu_count() or 1) if expected * len(strategies) > 4e6 else 1
    runs = _run_jobs([(sp, workload, schedules[n], kw) for n in strategies], int(workers))

    results = []
    price = plan.price_usd_per_gpu_hour
    from .schema import WINDOW_COLUMNS
    col = WINDOW_COLUMNS.index
    for name, run in zip(strategies, runs):
        sched = schedules[name]
        tokens = int(run.counts[:, col("output_tokens")].sum())
        met = int(run.met_output_tokens.sum())
        c = S.cost(sched, run.off_s, horizon_s=horizon, gpus_per_instance=plan.gpus_per_instance,
                   on_demand_usd_per_gpu_hour=price,
                   reserved_usd_per_gpu_hour=reserved_usd_per_gpu_hour, reserved_instances=reserved_instances,
                   output_tokens=tokens, met_output_tokens=met)
        ts, cs_ = S.ready_steps(sched, run.off_s, horizon)
        ws = run.window_start_s
        inst = S.window_mean_count(ts, cs_, ws, np.minimum(ws + run.window_s, horizon))
        results.append(StrategyResult(name, targets[name], sched, run, c, S.window_attainment(run), inst,
                                      failures[name], decisions[name]))
        n_req = int(run.n_requests)
        rej = int(run.counts[:, col("rejected_context")].sum())
        uns = int(run.counts[:, col("rejected_no_instance")].sum())
        if rej:
            notes.append(f"{name}: {rej:,} of {n_req:,} requests rejected for the context / KV limit (prompt + "
                         f"output above {model.max_context_tokens:,} tokens or one instance's KV budget): SLO misses "
                         f"whatever the fleet, so attainment is at most {1 - rej / n_req:.4f}")
        if uns:
            notes.append(f"{name}: {uns:,} of {n_req:,} requests unserved for want of an available instance "
                         "(SLO misses)")
        if isinstance(reserved_instances, (int, np.integer)) and reserved_instances > 0:
            _, billed = S.billed_steps(sched, run.off_s, horizon)
            top = int(billed.max())
            if reserved_instances > top:
                notes.append(f"{name}: {_plural(int(reserved_instances), 'instance')} reserved, above the "
                             f"{top:,} it ever bills: {int(reserved_instances) - top:,} reserved instances are "
                             "paid all period and never used")
    if "oracle" in strategies:
        notes += _below_oracle_notes(results, targets["oracle"], t_w, horizon, u)
    pr_res = price if reserved_usd_per_gpu_hour is None else float(reserved_usd_per_gpu_hour)
    if reserved_instances != "none" and pr_res > price:
        notes.append(f"the reserved price (${pr_res:g}/GPU-h) is above the on-demand price (${price:g}/GPU-h): a "
                     "reservation costs more than the same hours on demand"
                     + (" (auto reserves none)" if reserved_instances == "auto" else ""))
    elif reserved_instances == "auto" and pr_res == price:
        notes.append("reservation auto at the on-demand price (no reserved price given) saves nothing: it reserves "
                     "only instances billed all period, at the same price")
    if reserved_instances != "none":
        notes.append("reserved GPU-hours are the reserved instances x the period, idle reserved hours included: "
                     "reserved + on-demand GPU-hours exceed the GPU-hours billed when a reservation sits idle")
    if "scheduled" in strategies and horizon <= day_s:
        notes.append(f"scheduled runs the static count all period: the period ({horizon / 3600:,.4g} h) has no "
                     f"previous day (look-back {day_s / 3600:g} h) to schedule from")
    spares_res = None
    if spares:
        spares_res = S.spares_for_failure(sp, scenario, peak, n_peak, target=slo.attainment,
                                          ttft_slo_s=slo.ttft_s, tpot_slo_s=slo.tpot_s, cold_start_s=cold,
                                          repair_s=repair, seed=seed, max_context_tokens=model.max_context_tokens,
                                          routing=routing)
    settings = {"attainment_target": slo.attainment, "ttft_slo_s": slo.ttft_s, "tpot_slo_s": slo.tpot_s,
                "rate_scale": float(rate_scale), "target_utilisation": float(u),
                "scale_down_delay_s": float(scale_down_delay_s), "control_interval_s": float(control),
                "static_quantile": float(static_quantile),
                "static_instances": n_static, "peak_instances": n_peak, "min_instances": int(min_instances),
                "day_s": float(day_s), "reserved": reserved_instances if isinstance(reserved_instances, str)
                else int(reserved_instances), "on_demand_usd_per_gpu_hour": price,
                "reserved_usd_per_gpu_hour": pr_res,
                "mtbf_s": mtbf_s, "repair_s": float(repair), "fail_times_s": [float(x) for x in fail_times_s],
                "seed": int(seed), "routing": routing, "capacity_seeds": int(capacity_seeds),
                "capacity_horizon_s": float(capacity_horizon_s)}
    return FleetResult(plan, prof, float(horizon), window_s, capacity, cs, results, spares_res, settings, notes)


def _short_of_need_s(ready_times_s, ready_counts, need_start_s, need, horizon_s: float) -> float:
    """Time a fleet has fewer instances ready than a per-window need (s).

    Parameters
    ----------
    ready_times_s, ready_counts : ndarray of shape (s,)
        Instances ready as a step function (:func:`~fastsim.fleet.strategies.ready_steps`).
    need_start_s, need : ndarray of shape (w,)
        Window starts (s, ascending from 0) and the count each window needs until the next
        (the oracle's targets: each window's rate / target utilisation).
    horizon_s : float
        End of the period (s).

    Returns
    -------
    float
        Seconds of ``[0, horizon_s)`` with ready < need.
    """
    ts = np.asarray(ready_times_s, np.float64)
    cs = np.asarray(ready_counts, np.int64)
    tn = np.asarray(need_start_s, np.float64)
    n = np.asarray(need, np.int64)
    h = float(horizon_s)
    x = np.unique(np.concatenate([ts, tn, [0.0, h]]))
    x = x[(x >= 0.0) & (x <= h)]
    left, dt = x[:-1], np.diff(x)
    ready = cs[np.clip(np.searchsorted(ts, left, side="right") - 1, 0, cs.shape[0] - 1)]
    want = n[np.clip(np.searchsorted(tn, left, side="right") - 1, 0, n.shape[0] - 1)]
    return float(np.sum(dt[ready < want]))


def _below_oracle_notes(results, need, t_w, horizon: float, u: float) -> list:
    """A note per strategy billing fewer GPU-hours than the oracle: what it saved on (time short of the need)."""
    by = {s.name: s for s in results}
    o = by["oracle"]
    out = []
    for s in results:
        if s.name == "oracle" or not s.cost.gpu_hours < o.cost.gpu_hours:
            continue
        ts, cs = S.ready_steps(s.schedule, s.run.off_s, horizon)
        short = _short_of_need_s(ts, cs, t_w, need, horizon)
        out.append(f"{s.name} bills {s.cost.gpu_hours:,.4g} GPU-h, less than the oracle's {o.cost.gpu_hours:,.4g}: "
                   f"for {short / 3600:,.3g} h of the {horizon / 3600:,.4g}-h period it has fewer instances ready "
                   f"than the windows' rates / {u:g} need (attainment {s.run.attainment:.4f}, the oracle's "
                   f"{o.run.attainment:.4f}); the oracle is the fewest GPU-hours of a fleet that is never short")
    return out


def checkpoint_bytes(model, precision, catalog) -> tuple:
    """The bytes an instance reads at a cold start: the checkpoint that ``fastsim plan --emit`` serves.

    An FP8 plan of a BF16 checkpoint loads the BF16 weights and quantizes them online
    (``--quantization fp8``, :mod:`fastsim.emit`), so it reads twice the FP8 bytes; an FP8
    checkpoint (DeepSeek-V3) is read as FP8. For a model whose checkpoint fastsim does not know
    (:data:`fastsim.emit.HF_CHECKPOINTS`; a ``config.json`` read by path), the plan's precision is
    assumed.

    Parameters
    ----------
    model : Model
    precision : Precision
        The plan's precision.
    catalog : Catalog
        Resolves the checkpoint's weight format to its bytes per weight.

    Returns
    -------
    tuple of (float, str)
        Bytes (total parameters x the checkpoint format's bytes per weight) and what they are.

    Raises
    ------
    FastsimInputError
        A checkpoint format the catalog has no precision for.
    """
    from ..emit import HF_CHECKPOINTS
    known = HF_CHECKPOINTS.get(model.name.lower())
    if known is None:
        return (float(model.total_params * precision.weight_bytes),
                f"{precision.name} weights assumed (fastsim does not know the checkpoint of {model.name}: "
                "the plan's precision)")
    repo, fmt = known
    return (float(model.total_params * catalog.precision(fmt).weight_bytes),
            f"{repo}, {fmt} weights (the checkpoint `fastsim plan --emit` serves"
            + (f", quantized online to {precision.name})" if fmt != precision.name else ")"))


def plot_fleet(result: FleetResult, path: str, *, title: str = "") -> str:
    """Rate, instances ready and SLO attainment per window over the period, one line per strategy.

    Parameters
    ----------
    result : FleetResult
    path : str
        Image file (format from the extension; see :func:`fastsim.plots.check_plot_path`).
    title : str

    Returns
    -------
    str
        The path written.
    """
    from ..plots import _figure
    fig, (a1, a2, a3) = _figure(3, 1, (11, 8.5))
    fig.set_layout_engine("constrained")
    starts = result.strategies[0].run.window_start_s
    days = result.horizon_s >= 2 * 86400
    unit, div = ("days", 86400.0) if days else ("hours", 3600.0)
    x = starts / div
    rate = _rate_at(result.profile, starts)
    a1.step(x, rate, where="post", color="k", lw=0.8)
    a1.set(ylabel="rate (req/s)", title=title or f"{result.profile.name}: rate, instances and SLO attainment")
    colors = {"static": "tab:red", "reactive": "tab:orange", "scheduled": "tab:blue", "oracle": "tab:green"}
    # a line style per strategy, so that two strategies that coincide both show
    styles = {"static": "-", "reactive": "--", "scheduled": "-.", "oracle": ":"}
    for s in result.strategies:
        lab = f"{s.name}: {s.cost.gpu_hours:,.0f} GPU-h, ${s.cost.usd_per_million_output_tokens:.3f}/M tok"
        a2.step(x, s.window_instances, where="post", lw=1.1, color=colors.get(s.name), ls=styles.get(s.name, "-"),
                label=lab)
        a3.plot(x, s.window_attainment, lw=1.0, color=colors.get(s.name), ls=styles.get(s.name, "-"),
                label=f"{s.name}: {s.run.attainment:.3f} overall")
    a2.set(ylabel="instances ready (mean per window)")
    a2.legend(fontsize=7, loc="upper left")
    tgt = result.settings["attainment_target"]
    a3.axhline(tgt, color="k", ls="--", lw=0.8)
    lo = min([float(np.nanmin(s.window_attainment)) for s in result.strategies
              if np.any(~np.isnan(s.window_attainment))] + [tgt - 0.05])
    a3.set(ylabel="SLO attainment per window", xlabel=f"time ({unit})", ylim=(max(0.0, lo - 0.02), 1.005))
    a3.legend(fontsize=7, loc="lower left")
    fig.savefig(path)
    return path
