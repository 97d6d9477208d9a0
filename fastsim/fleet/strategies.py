"""Fleet strategies: instance schedules over a rate profile, failures, spares and cost accounting.

Everything here is arithmetic on instance counts and lifetimes; the simulation is
:func:`fastsim.fleet.sim.simulate_fleet`. Times are seconds from the start of the profile.

Capacity
    :class:`CapacityCurve` holds the maximum sustainable rate of N instances at a few N
    (:func:`fastsim.search.max_sustainable_rate`); the capacity of any N interpolates the
    per-instance capacity linearly in log2 N between measured points and holds it constant
    outside them. The measured totals must not decrease with N (:meth:`CapacityCurve.from_points`).
    ``instances_for(rate)`` is the smallest N (at least ``min_instances``) whose capacity is at
    least the rate.

Headroom
    Every strategy sizes with the same target utilisation u (rate / capacity, default
    :data:`TARGET_UTILISATION`): it wants ``instances_for(rate / u)`` for the rate it sizes for,
    so the strategies differ only in *which* rate and *when*. u = 1 sizes for exact capacity.

Strategies
    - ``static``: one count for the whole period, ``instances_for(q / u)`` with q a quantile of
      the window rates (1 = the peak) outside gaps: :func:`static_count`.
    - ``reactive``: decides every control interval c (default :data:`CONTROL_INTERVAL_S`, or the
      profile's smallest window when shorter): at decision k (time k c) the autoscaler sees the
      mean rate of the interval just finished (at k = 0 the first interval's own) and wants
      ``instances_for(rate / u)``; it scales up at once and scales down only to the highest count
      it wanted within the last ``scale_down_delay_s``, a downscale stabilisation window like
      Kubernetes' horizontal pod autoscaler's
      (https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/#stabilization-window,
      300 s by default there; :data:`SCALE_DOWN_DELAY_S` says why 1800 s here). New instances are
      ready a cold start after the decision: :func:`reactive_decisions`, :func:`reactive_targets`.
    - ``scheduled``: window k gets ``instances_for(r / u)`` with r the rate of the same window the
      day before (``day_s`` earlier; the highest rate of the windows that span overlaps when the
      windows do not line up); windows of the first day (no previous day) get
      ``first_day_instances`` (the static count, by default). Instances are provisioned a cold
      start ahead so they are ready when their window starts: :func:`scheduled_targets`.
    - ``oracle``: window k gets ``instances_for(rate_k / u)``, ready at the window's start with
      no cold start (perfect foresight, free start-up): :func:`oracle_targets`. It bills the
      fewest GPU-hours of any fleet that has at least that count ready through every window
      (up to drain tails): the lower bound among strategies that are never short of each
      window's rate / u (at u = 1, that keep every window within the capacity curve). It is not
      a lower bound on a strategy that falls short: reactive lags a rise by a control interval
      plus a cold start and scheduled follows yesterday, so either can bill less than the
      oracle, at lower attainment.

    Gaps (zero-rate windows, missing data) are not observations: reactive and scheduled carry
    the last rate seen before them; the oracle keeps ``min_instances`` through them.

Lifetimes (:func:`schedule_from_targets`)
    The instances of the first decision are up (ready) at 0, warm. At a decision whose target is
    above the instances provisioned, new instances are provisioned (billed) and become ready a
    cold start later; below, ready instances are drained, newest first, down to the target. An
    instance in its cold start is never cancelled, and the ready ones are never drained below the
    target on its account: pending instances still in excess are drained at a later decision. With
    ``ahead=True`` (scheduled, oracle) the provisioned count at time t is the highest target over
    ``[t, t + cold_start_s]``, so instances are ready when their window starts and an instance
    needed again within a cold start is kept instead of drained.

Cold start (:class:`ColdStart`)
    ``weight_bytes / load_bw_bytes_per_s + fixed_start_s``: the checkpoint (all parameters in
    the plan's precision, read once per instance) at the load bandwidth of the instance's
    storage, plus the engine's start (process and CUDA context, memory profiling, CUDA-graph
    capture, warm-up). Defaults: 2 GB/s (:data:`LOAD_BW_BYTES_PER_S`) and 60 s
    (:data:`FIXED_START_S`), see their sources.

Failures (:func:`inject_failures`)
    Poisson: each instance fails at rate 1 / ``mtbf_s`` while it is ready (not during its cold
    start or after its end); or failures at given times, each taking the longest-ready instance
    up then. A failed instance is released at once (billed until then). Its replacement inherits
    the rest of the failed lifetime (its end and how it ends) and is provisioned: in the static
    fleet (no autoscaler), ``repair_s`` after the failure (detection, rescheduling); in an
    autoscaled fleet (reactive, scheduled, oracle: ``decision_s`` given), at the autoscaler's
    first decision at or after ``failure + repair_s``, which finds one instance fewer than it
    wants. Either way it is ready a cold start after its provisioning. The default MTBF
    figure, :data:`MTBF_GPU_HOURS`, is from Llama 3's training fleet.

Spares (:func:`through_failure`, :func:`spares_for_failure`)
    N + k instances serve the peak rate (constant) from 0; one fails at ``fail_at_s``; the
    replacement is ready ``repair_s + cold_start_s`` later. The attainment through the failure is
    the lowest per-window attainment from the failure's window to ``recovery_s`` after the
    replacement is ready; the smallest k keeping it at or above the target is the answer.

Cost (:func:`cost`)
    GPU-hours of a lifetime run from ``provision_s`` to its release (``FleetRun.off_s``: the end
    of its drain, its failure; the end of the period if still up), clipped to the period
    ``[0, horizon_s]``, times the GPUs per instance. ``reserved_instances`` instances are paid at
    the reserved price for the whole period whether used or not; the instances billed above
    them at any time are paid at the on-demand price. :func:`optimal_reserved` gives the
    reservation that minimises the total (reserve the r-th instance when it is billed for at
    least a fraction reserved / on-demand price of the period).

The modules, in the order a fleet comparison uses them:

- :mod:`fastsim.fleet.capacity`: :class:`CapacityCurve`, :class:`ColdStart`, :func:`cold_start`;
- :mod:`fastsim.fleet.strategies` (this one): the defaults of the strategies and the four
  strategies' targets, :func:`static_count`, :func:`reactive_targets`,
  :func:`reactive_decisions`, :func:`scheduled_targets`, :func:`oracle_targets`; it re-exports
  the names of the other four modules;
- :mod:`fastsim.fleet.lifetimes`: :func:`schedule_from_targets`, :func:`static_schedule`;
- :mod:`fastsim.fleet.failures`: :func:`inject_failures`, :func:`through_failure`,
  :func:`spares_for_failure`;
- :mod:`fastsim.fleet.cost`: :func:`billed_steps`, :func:`ready_steps`, :func:`cost`,
  :func:`optimal_reserved`.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import FastsimInputError, require_positive
from ._checks import _count, _fraction, _nonneg
# the rest of the fleet's arithmetic, re-exported: fastsim.fleet.strategies names all of it
from .capacity import FIXED_START_S, LOAD_BW_BYTES_PER_S, MAX_INSTANCES, CapacityCurve, ColdStart, cold_start
from .cost import CostBreakdown, billed_steps, cost, optimal_reserved, ready_steps, window_mean_count
from .failures import (MTBF_GPU_HOURS, Failure, SparesResult, ThroughFailure, inject_failures, spares_for_failure,
                       through_failure, window_attainment)
from .lifetimes import schedule_from_targets, static_schedule

__all__ = ["STRATEGIES", "LOAD_BW_BYTES_PER_S", "FIXED_START_S", "MTBF_GPU_HOURS", "SCALE_DOWN_DELAY_S",
           "TARGET_UTILISATION", "DAY_S", "CONTROL_INTERVAL_S", "MAX_INSTANCES",
           "reactive_decisions", "CapacityCurve", "ColdStart", "cold_start", "static_count",
           "oracle_targets", "reactive_targets", "scheduled_targets", "schedule_from_targets",
           "static_schedule", "inject_failures", "Failure", "billed_steps", "ready_steps",
           "window_mean_count", "CostBreakdown", "cost", "optimal_reserved", "through_failure",
           "ThroughFailure", "spares_for_failure", "SparesResult", "window_attainment"]

#: The four strategies, in the order they are reported.
STRATEGIES = ("static", "reactive", "scheduled", "oracle")

#: Default downscale stabilisation of the reactive autoscaler (s): three 600-s control intervals,
#: an assumption of this tool. Kubernetes' HPA defaults to 300 s, but it decides every 15 s; with
#: decisions every 600 s, 300 s would be no hysteresis at all, while 1800 s holds a count through
#: two quiet intervals between bursts.
SCALE_DOWN_DELAY_S = 1800.0

#: Default control interval of the reactive autoscaler (s); the profile's smallest window when
#: that is shorter.
CONTROL_INTERVAL_S = 600.0

#: Default target utilisation of every strategy (rate / capacity): the headroom each sizes with.
TARGET_UTILISATION = 0.8

#: One day (s): the scheduled strategy's look-back.
DAY_S = 86400.0


def _windows(window_start_s, rate_req_per_s):
    t = np.asarray(window_start_s, dtype=np.float64).ravel()
    r = np.asarray(rate_req_per_s, dtype=np.float64).ravel()
    if t.shape != r.shape or t.shape[0] == 0:
        raise FastsimInputError("window_start_s, rate_req_per_s", (t.shape, r.shape), "two arrays of the same length >= 1")
    if not (t[0] == 0.0 and np.all(np.diff(t) > 0)):
        raise FastsimInputError("window_start_s", "not strictly ascending from 0", "window starts ascending from 0")
    if not np.all(np.isfinite(r) & (r >= 0.0)):
        raise FastsimInputError("rate_req_per_s", "a negative or non-finite rate", "finite rates >= 0")
    return t, r


def _ffill(r: np.ndarray) -> np.ndarray:
    """Rates with each gap (0) replaced by the last rate before it (0 before the first)."""
    idx = np.where(r > 0.0, np.arange(r.shape[0]), -1)
    idx = np.maximum.accumulate(idx)
    return np.where(idx >= 0, r[np.maximum(idx, 0)], 0.0)


def static_count(rate_req_per_s, curve: CapacityCurve, *, quantile: float = 1.0, min_instances: int = 1,
                 target_utilisation: float = 1.0) -> int:
    """Instances of the static strategy: enough for a quantile of the window rates at a target utilisation.

    Parameters
    ----------
    rate_req_per_s : array_like of float, shape (w,)
        Window rates (req/s); gaps (0) are left out.
    curve : CapacityCurve
    quantile : float
        In (0, 1]: 1 sizes for the peak; 0.99 for the rate only 1% of the windows exceed (the
        window's own rate: ``numpy.quantile(method="inverted_cdf")``).
    min_instances : int
    target_utilisation : float
        In (0, 1]: the count is ``instances_for(rate / target_utilisation)`` (1 = exact capacity).

    Returns
    -------
    int

    Raises
    ------
    FastsimInputError
        A quantile or target utilisation outside (0, 1], bad rates, a rate above the curve's
        reach.
    """
    q = _fraction("quantile", quantile)
    u = _fraction("target_utilisation", target_utilisation)
    r = np.asarray(rate_req_per_s, dtype=np.float64).ravel()
    r = r[r > 0.0]
    target = float(np.quantile(r, q, method="inverted_cdf")) if r.size else 0.0
    return int(curve.instances_for(target / u, _count("min_instances", min_instances, 0)))


def oracle_targets(rate_req_per_s, curve: CapacityCurve, *, min_instances: int = 1,
                   target_utilisation: float = 1.0) -> np.ndarray:
    """Per window, the smallest count whose capacity covers the window's rate / target utilisation.

    Parameters
    ----------
    rate_req_per_s : array_like of float, shape (w,)
        Window rates (req/s; 0 = gap, which gets ``min_instances``).
    curve : CapacityCurve
    min_instances : int
        Floor (>= 0).
    target_utilisation : float
        In (0, 1]: ``instances_for(rate / target_utilisation)`` (1 = exact capacity).

    Returns
    -------
    ndarray(int64) of shape (w,)

    Raises
    ------
    FastsimInputError
        A target utilisation outside (0, 1], bad rates, a rate above the curve's reach.
    """
    u = _fraction("target_utilisation", target_utilisation)
    r = np.asarray(rate_req_per_s, dtype=np.float64).ravel()
    return curve.instances_for(r / u, _count("min_instances", min_instances, 0))


def reactive_targets(window_start_s, rate_req_per_s, curve: CapacityCurve, *,
                     target_utilisation: float = TARGET_UTILISATION,
                     scale_down_delay_s: float = SCALE_DOWN_DELAY_S, min_instances: int = 1,
                     _lag: bool = True) -> np.ndarray:
    """Per window, the count the reactive autoscaler sets at the window's start (module docstring).

    Decisions here are at the windows' starts, each seeing the window before; with windows of
    unequal width use :func:`reactive_decisions` (decisions at a fixed interval).

    Parameters
    ----------
    window_start_s, rate_req_per_s : array_like of float, shape (w,)
        The profile's windows: starts (s, ascending from 0) and rates (req/s; 0 = gap).
    curve : CapacityCurve
    target_utilisation : float
        In (0, 1]: the autoscaler wants ``instances_for(observed rate / target_utilisation)``.
    scale_down_delay_s : float
        Downscale stabilisation (s, >= 0): the target at t is the highest count wanted at the
        decisions in ``(t - scale_down_delay_s, t]``.
    min_instances : int

    Returns
    -------
    ndarray(int64) of shape (w,)
        The target at each window's start.
    """
    t, r = _windows(window_start_s, rate_req_per_s)
    u = _fraction("target_utilisation", target_utilisation)
    delay = _nonneg("scale_down_delay_s", scale_down_delay_s)
    obs = _ffill(r)
    seen = np.concatenate(([obs[0]], obs[:-1])) if _lag else obs
    want = curve.instances_for(seen / u, _count("min_instances", min_instances, 0))
    out = np.empty_like(want)
    lo = 0
    for k in range(t.shape[0]):
        while lo < k and t[lo] <= t[k] - delay:
            lo += 1
        out[k] = want[lo:k + 1].max()
    return out


def reactive_decisions(window_start_s, rate_req_per_s, curve: CapacityCurve, *, horizon_s: float,
                       control_interval_s: float = CONTROL_INTERVAL_S, window_end_s=None,
                       target_utilisation: float = TARGET_UTILISATION,
                       scale_down_delay_s: float = SCALE_DOWN_DELAY_S, min_instances: int = 1):
    """The reactive autoscaler deciding every control interval, whatever the profile's windows (module docstring).

    Decision k is at ``k x control_interval_s`` (k = 0, 1, ... below ``horizon_s``); it sees the
    time-weighted mean rate of ``[(k - 1) c, k c)`` (decision 0: of ``[0, c)``), gaps (zero-rate
    windows) left out, an interval that is all gap carrying the last rate seen; then as
    :func:`reactive_targets`.

    Parameters
    ----------
    window_start_s, rate_req_per_s : array_like of float, shape (w,)
        The profile's windows: starts (s, ascending from 0) and rates (req/s; 0 = gap).
    curve : CapacityCurve
    horizon_s : float
        End of the period (s, > 0).
    control_interval_s : float
        Time between decisions (s, > 0).
    window_end_s : array_like of float, shape (w,), optional
        Window ends (s); default the next start, the last window ending at ``horizon_s``.
    target_utilisation, scale_down_delay_s, min_instances
        As for :func:`reactive_targets`.

    Returns
    -------
    (ndarray(float64) of shape (d,), ndarray(int64) of shape (d,))
        Decision times (s) and the target set at each.

    Raises
    ------
    FastsimInputError
        Bad windows, rates, horizon, interval, utilisation, delay or floor (naming the field).
    """
    t, r = _windows(window_start_s, rate_req_per_s)
    h = require_positive("horizon_s", horizon_s)
    c = require_positive("control_interval_s", control_interval_s)
    e = np.append(t[1:], max(h, t[-1])) if window_end_s is None else np.asarray(window_end_s, np.float64).ravel()
    if e.shape != t.shape or np.any(e <= t):
        raise FastsimInputError("window_end_s", "not one end after each start", "window ends after their starts")
    dec = np.arange(int(math.ceil(h / c)), dtype=np.float64) * c
    dec = dec[dec < h]
    # time the profile has traffic, and requests, from 0 to x (gaps: no time, no requests)
    live = r > 0.0
    cum_t = np.concatenate([[0.0], np.cumsum(np.where(live, e - t, 0.0))])
    cum_n = np.concatenate([[0.0], np.cumsum(np.where(live, (e - t) * r, 0.0))])

    def upto(x):
        i = np.clip(np.searchsorted(t, x, side="right") - 1, 0, t.shape[0] - 1)
        span = np.clip(np.minimum(x, e[i]) - t[i], 0.0, None)
        return cum_t[i] + np.where(live[i], span, 0.0), cum_n[i] + np.where(live[i], span * r[i], 0.0)
    lo = np.maximum(dec - c, 0.0)
    hi = np.where(dec > 0.0, dec, np.minimum(c, h))
    t_lo, n_lo = upto(lo)
    t_hi, n_hi = upto(hi)
    dt = t_hi - t_lo
    with np.errstate(invalid="ignore", divide="ignore"):
        seen = np.where(dt > 0.0, (n_hi - n_lo) / np.where(dt > 0.0, dt, 1.0), 0.0)
    tgt = reactive_targets(dec, seen, curve, target_utilisation=target_utilisation,
                           scale_down_delay_s=scale_down_delay_s, min_instances=min_instances, _lag=False)
    return dec, tgt


def scheduled_targets(window_start_s, rate_req_per_s, curve: CapacityCurve, *, first_day_instances: int,
                      target_utilisation: float = TARGET_UTILISATION, day_s: float = DAY_S,
                      window_end_s=None, min_instances: int = 1) -> np.ndarray:
    """Per window, the count scheduled from the previous day's rates (module docstring).

    Parameters
    ----------
    window_start_s, rate_req_per_s : array_like of float, shape (w,)
    curve : CapacityCurve
    first_day_instances : int
        Count of the windows that start less than ``day_s`` after 0 (no previous day).
    target_utilisation : float
        In (0, 1].
    day_s : float
        Look-back (s, > 0).
    window_end_s : array_like of float, shape (w,), optional
        Window ends (s); default the next start, the last window as long as the one before.
    min_instances : int

    Returns
    -------
    ndarray(int64) of shape (w,)
        Window k's count: ``instances_for(max rate over [start_k - day_s, end_k - day_s) /
        target_utilisation)`` (gaps carrying the last rate before them), or
        ``first_day_instances``.
    """
    t, r = _windows(window_start_s, rate_req_per_s)
    u = _fraction("target_utilisation", target_utilisation)
    day = require_positive("day_s", day_s)
    first = _count("first_day_instances", first_day_instances, 0)
    if window_end_s is None:
        last = t[-1] - t[-2] if t.shape[0] > 1 else day
        e = np.append(t[1:], t[-1] + last)
    else:
        e = np.asarray(window_end_s, dtype=np.float64).ravel()
    obs = _ffill(r)
    prev = np.zeros(t.shape[0])
    has = t >= day
    for k in np.flatnonzero(has):
        i = int(np.searchsorted(e, t[k] - day, side="right"))     # first window ending after the start
        j = int(np.searchsorted(t, e[k] - day, side="left"))      # windows starting before the end
        prev[k] = obs[i:max(j, i + 1)].max()
    want = curve.instances_for(prev / u, _count("min_instances", min_instances, 0))
    return np.where(has, want, first).astype(np.int64)
