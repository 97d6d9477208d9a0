"""Failures and spares (:mod:`fastsim.fleet.strategies`: "Failures", "Spares").

:func:`inject_failures` applies Poisson failures (rate 1 / MTBF while ready; default
:data:`MTBF_GPU_HOURS`, from Llama 3's training fleet) or failures at given times to a schedule,
each replaced after ``repair_s`` (or at the autoscaler's next decision) and a cold start.
:func:`through_failure` simulates N instances at a constant rate through one failure
(:func:`fastsim.fleet.sim.simulate_fleet`), :func:`spares_for_failure` finds the fewest spares
that keep the attainment through it at a target.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..errors import FastsimInputError, require_positive
from ._checks import _count, _fraction, _nonneg
from .lifetimes import static_schedule
from .schema import END_FAIL, FleetSchedule

__all__ = ["MTBF_GPU_HOURS", "Failure", "inject_failures", "ThroughFailure", "through_failure",
           "window_attainment", "SparesResult", "spares_for_failure"]

#: Mean GPU-hours between failures of one GPU: Llama 3's pre-training on 16,384 H100 had 419
#: unexpected interruptions in 54 days (Dubey et al., "The Llama 3 Herd of Models", 2024, §3.3.4),
#: 16,384 x 54 x 24 / 419 = 50,700 GPU-hours. An instance of G GPUs fails G times as often.
MTBF_GPU_HOURS = 16384 * 54 * 24 / 419


class Failure(NamedTuple):
    """One failure applied by :func:`inject_failures`.

    Attributes
    ----------
    time_s : float
        When it failed (s).
    lifetime : int
        The lifetime (row of the returned schedule) that failed.
    replacement : int
        The replacement's lifetime, or -1 when none was needed (the failed lifetime would have
        ended before a replacement could be ready).
    """

    time_s: float
    lifetime: int
    replacement: int


def inject_failures(schedule: FleetSchedule, *, horizon_s: float, cold_start_s: float, repair_s: float = 0.0,
                    mtbf_s: float | None = None, fail_times_s=(), seed=0, decision_s=None):
    """Failures applied to a schedule (:mod:`fastsim.fleet.strategies`, "Failures").

    Parameters
    ----------
    schedule : FleetSchedule
    horizon_s : float
        End of the period (s, > 0): no failures at or after it.
    cold_start_s : float
        Cold start of a replacement (s, >= 0).
    repair_s : float
        Time from a failure to the replacement's provisioning (s, >= 0); with ``decision_s``,
        to the earliest time the autoscaler can act on it.
    mtbf_s : float, optional
        Mean time between failures of one instance while ready (s, > 0); None: no random
        failures.
    fail_times_s : sequence of float
        Failures at these times (s, in [0, horizon_s)), each of the instance ready longest
        (lowest row on ties) at that time; applied after the random ones.
    seed : int or numpy.random.SeedSequence
        Root of the failure draws (one exponential per lifetime, in row order, replacements
        after the lifetimes that exist).
    decision_s : array_like of float, optional
        An autoscaler's decision times (s, ascending): the replacement is provisioned at the
        first of them at or after ``failure + repair_s`` (none after the last: no replacement).
        None (the static fleet): at ``failure + repair_s``.

    Returns
    -------
    (FleetSchedule, list of Failure, list of float)
        The schedule with failed lifetimes ending ``END_FAIL`` and their replacements appended;
        the failures applied, in order of time; the given times at which no instance was ready
        (not applied).

    Raises
    ------
    FastsimInputError
        A bad schedule, horizon, cold start, repair time, MTBF or failure time.
    """
    if not isinstance(schedule, FleetSchedule):
        raise FastsimInputError("schedule", type(schedule).__name__, "a FleetSchedule")
    horizon = require_positive("horizon_s", horizon_s)
    cold = _nonneg("cold_start_s", cold_start_s)
    repair = _nonneg("repair_s", repair_s)
    mtbf = None if mtbf_s is None else require_positive("mtbf_s", mtbf_s)
    dec = None if decision_s is None else np.asarray(decision_s, np.float64).ravel()
    if dec is not None and not (np.all(np.isfinite(dec)) and np.all(np.diff(dec) > 0)):
        raise FastsimInputError("decision_s", "not finite and strictly ascending", "ascending decision times (s)")
    times = []
    for i, x in enumerate(fail_times_s):
        v = _nonneg(f"fail_times_s[{i}]", x)
        if v >= horizon:
            raise FastsimInputError(f"fail_times_s[{i}]", x, f"a time in [0, {horizon:g}) s, inside the period")
        times.append(v)
    prov = [float(x) for x in schedule.provision_s]
    ready = [float(x) for x in schedule.ready_s]
    end = [float(x) for x in schedule.end_s]
    kind = [int(x) for x in schedule.end_kind]
    failures = []

    def fail(life: int, tf: float) -> None:
        old_end, old_kind = end[life], kind[life]
        end[life], kind[life] = tf, END_FAIL
        p = tf + repair
        if dec is not None:
            i = int(np.searchsorted(dec, p, side="left"))
            p = float(dec[i]) if i < dec.shape[0] else math.inf
        r = p + cold
        rep = -1
        if r < old_end and p < horizon:
            rep = len(prov)
            prov.append(p)
            ready.append(r)
            end.append(old_end)
            kind.append(old_kind)
        failures.append(Failure(tf, life, rep))

    if mtbf is not None:
        from ..workload import _seed_seq
        rng = np.random.default_rng(_seed_seq(seed))
        i = 0
        while i < len(prov):
            x = float(rng.exponential(mtbf))
            tf = ready[i] + x
            if tf < min(end[i], horizon):
                fail(i, tf)
            i += 1
    skipped = []
    for tf in sorted(times):
        up = [i for i in range(len(prov)) if ready[i] <= tf < end[i]]
        if not up:
            skipped.append(tf)
            continue
        fail(min(up, key=lambda i: (ready[i], i)), tf)
    m = len(prov)
    out = FleetSchedule(np.asarray(prov, np.float64).reshape(m), np.asarray(ready, np.float64).reshape(m),
                        np.asarray(end, np.float64).reshape(m), np.asarray(kind, np.int8).reshape(m))
    return out, sorted(failures), skipped


class ThroughFailure(NamedTuple):
    """Attainment of N + k instances through one failure at a constant rate.

    Attributes
    ----------
    instances : int
        Instances before the failure (N + k).
    window_start_s : ndarray(float64) of shape (w,)
        Metric windows of the run (s).
    window_attainment : ndarray(float64) of shape (w,)
        Met / arrived per window (nan without arrivals).
    fail_at_s, recovered_s : float
        The failure and when the replacement is ready (s).
    min_attainment : float
        Lowest window attainment from the failure's window to the end of the run.
    attainment : float
        Pooled attainment of the requests arriving from the failure's window to the end.
    recomputed : int
        Requests the failure handed back for recomputation.
    """

    instances: int
    window_start_s: np.ndarray
    window_attainment: np.ndarray
    fail_at_s: float
    recovered_s: float
    min_attainment: float
    attainment: float
    recomputed: int


def through_failure(plan, scenario, rate_req_per_s: float, instances: int, *, ttft_slo_s: float,
                    tpot_slo_s: float, cold_start_s: float, repair_s: float = 0.0, fail_at_s: float = 600.0,
                    recovery_s: float = 600.0, window_s: float = 60.0, seed=0,
                    max_context_tokens: int = 131072, routing: str = "least-loaded") -> ThroughFailure:
    """Simulate ``instances`` instances at a constant rate through one failure (:mod:`fastsim.fleet.strategies`).

    Parameters
    ----------
    plan : fastsim.sim.ColocatedPlan
        The instance type.
    scenario : Scenario, str or (LengthDist, LengthDist)
        Request lengths (:func:`fastsim.workload.synthesize`).
    rate_req_per_s : float
        Constant arrival rate (req/s, > 0).
    instances : int
        Instances up from 0 (>= 1); the longest-ready (row 0) fails.
    ttft_slo_s, tpot_slo_s : float
        P90 targets (s).
    cold_start_s, repair_s : float
        The replacement is provisioned ``repair_s`` after the failure and ready ``cold_start_s``
        after that (s, >= 0).
    fail_at_s : float
        Failure time (s, > 0): the warm-up before it.
    recovery_s : float
        Run on after the replacement is ready (s, > 0).
    window_s : float
        Metric window (s, > 0).
    seed : int
        Seed of the workload (common random numbers across instance counts).
    max_context_tokens : int
    routing : str

    Returns
    -------
    ThroughFailure
    """
    from ..workload import synthesize
    from .sim import simulate_fleet
    n = _count("instances", instances, 1)
    tf = require_positive("fail_at_s", fail_at_s)
    rec = require_positive("recovery_s", recovery_s)
    w = require_positive("window_s", window_s)
    cold = _nonneg("cold_start_s", cold_start_s)
    repair = _nonneg("repair_s", repair_s)
    recovered = tf + repair + cold
    horizon = math.ceil((recovered + rec) / w) * w
    wl = synthesize(scenario, rate_req_per_s, horizon, seed)
    sched, fails, _ = inject_failures(static_schedule(n), horizon_s=horizon, cold_start_s=cold, repair_s=repair,
                                      fail_times_s=(tf,))
    run = simulate_fleet(plan, wl, sched, ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s, horizon_s=horizon,
                         window_s=w, max_context_tokens=max_context_tokens, routing=routing)
    att = window_attainment(run)
    k0 = int(tf // w)
    after = run.counts[k0:]
    from .schema import WINDOW_COLUMNS
    a_col, m_col = WINDOW_COLUMNS.index("arrived"), WINDOW_COLUMNS.index("met")
    arrived = int(after[:, a_col].sum())
    pooled = float(after[:, m_col].sum()) / arrived if arrived else math.nan
    tail = att[k0:]
    tail = tail[~np.isnan(tail)]
    return ThroughFailure(n, run.window_start_s, att, tf, recovered, float(tail.min()) if tail.size else math.nan,
                          pooled, int(run.recomputed_by_lifetime.sum()))


def window_attainment(run) -> np.ndarray:
    """Met / arrived per window of a :class:`~fastsim.fleet.schema.FleetRun` (nan without arrivals).

    Parameters
    ----------
    run : FleetRun

    Returns
    -------
    ndarray(float64) of shape (w,)
    """
    from .schema import WINDOW_COLUMNS
    a = run.counts[:, WINDOW_COLUMNS.index("arrived")].astype(np.float64)
    m = run.counts[:, WINDOW_COLUMNS.index("met")].astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(a > 0, m / np.where(a > 0, a, 1.0), np.nan)


class SparesResult(NamedTuple):
    """The smallest N + k that keeps the attainment target through one failure at the peak.

    Attributes
    ----------
    base_instances : int
        N: instances the capacity curve gives the peak rate.
    spares : int
        k (-1 when no k up to ``max_spares`` passed).
    target : float
        The attainment target each window after the failure must keep.
    rate_req_per_s : float
        The peak rate simulated.
    trials : list of ThroughFailure
        One per k tried, k = 0, 1, ... in order.
    """

    base_instances: int
    spares: int
    target: float
    rate_req_per_s: float
    trials: list


def spares_for_failure(plan, scenario, rate_req_per_s: float, base_instances: int, *, target: float = 0.9,
                       max_spares: int | None = None, **kwargs) -> SparesResult:
    """Try k = 0, 1, ... spares until N + k instances keep ``target`` through one failure.

    Parameters
    ----------
    plan, scenario, rate_req_per_s
        As for :func:`through_failure`.
    base_instances : int
        N (>= 1).
    target : float
        Attainment target (in (0, 1]).
    max_spares : int, optional
        Most spares tried (default N).
    **kwargs
        Passed to :func:`through_failure` (SLOs, cold start, repair time, windows, seed).

    Returns
    -------
    SparesResult
    """
    n = _count("base_instances", base_instances, 1)
    tgt = _fraction("target", target)
    kmax = n if max_spares is None else _count("max_spares", max_spares, 0)
    trials = []
    for k in range(kmax + 1):
        tr = through_failure(plan, scenario, rate_req_per_s, n + k, **kwargs)
        trials.append(tr)
        if tr.min_attainment >= tgt:
            return SparesResult(n, k, tgt, float(rate_req_per_s), trials)
    return SparesResult(n, -1, tgt, float(rate_req_per_s), trials)
