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
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..errors import FastsimInputError, require_positive
from .schema import END_DRAIN, END_FAIL, FleetSchedule

__all__ = ["STRATEGIES", "LOAD_BW_BYTES_PER_S", "FIXED_START_S", "MTBF_GPU_HOURS", "SCALE_DOWN_DELAY_S",
           "TARGET_UTILISATION", "DAY_S", "CONTROL_INTERVAL_S", "MAX_INSTANCES",
           "reactive_decisions", "CapacityCurve", "ColdStart", "cold_start", "static_count",
           "oracle_targets", "reactive_targets", "scheduled_targets", "schedule_from_targets",
           "static_schedule", "inject_failures", "Failure", "billed_steps", "ready_steps",
           "window_mean_count", "CostBreakdown", "cost", "optimal_reserved", "through_failure",
           "ThroughFailure", "spares_for_failure", "SparesResult", "window_attainment"]

#: The four strategies, in the order they are reported.
STRATEGIES = ("static", "reactive", "scheduled", "oracle")

#: Default load bandwidth of an instance's weights (bytes/s): reads from object storage or a
#: network file system run at 1-2.5 GB/s per node (e.g. a 894 GiB checkpoint read at startup
#: from Amazon EFS in about 43 minutes, 0.37 GB/s, modelplaneai/modelplane issue 204; local
#: NVMe reaches 3-7 GB/s). 2 GB/s is an assumption; set your own (``--load-bandwidth``).
LOAD_BW_BYTES_PER_S = 2e9

#: Default fixed start of an instance (s), on top of loading its weights: process and CUDA
#: context, memory profiling, CUDA-graph capture and warm-up. vLLM's blog on sleep mode
#: (2025-10-26, https://blog.vllm.ai/2025/10/26/sleep-mode.html) puts a full reload at 30-100+ s;
#: 60 s is an assumption (``--start-time``). Provisioning a new node (VM boot, image pull) is
#: not included: add it here if your fleet does not keep warm nodes.
FIXED_START_S = 60.0

#: Mean GPU-hours between failures of one GPU: Llama 3's pre-training on 16,384 H100 had 419
#: unexpected interruptions in 54 days (Dubey et al., "The Llama 3 Herd of Models", 2024, §3.3.4),
#: 16,384 x 54 x 24 / 419 = 50,700 GPU-hours. An instance of G GPUs fails G times as often.
MTBF_GPU_HOURS = 16384 * 54 * 24 / 419

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

#: Largest instance count :meth:`CapacityCurve.instances_for` considers.
MAX_INSTANCES = 100_000

#: One day (s): the scheduled strategy's look-back.
DAY_S = 86400.0


class CapacityCurve(NamedTuple):
    """Maximum sustainable rate of N instances at a few N, interpolated for any N.

    Attributes
    ----------
    instances : ndarray(int64) of shape (p,)
        Instance counts measured, ascending, >= 1.
    rate_req_per_s : ndarray(float64) of shape (p,)
        Maximum sustainable rate of that many instances (req/s, > 0).
    """

    instances: np.ndarray
    rate_req_per_s: np.ndarray

    @classmethod
    def from_points(cls, instances, rate_req_per_s) -> "CapacityCurve":
        """A checked curve.

        Parameters
        ----------
        instances : array_like of int, shape (p,)
            Distinct counts >= 1 (any order; sorted here).
        rate_req_per_s : array_like of float, shape (p,)
            Capacities (req/s), finite and > 0.

        Returns
        -------
        CapacityCurve

        Raises
        ------
        FastsimInputError
            Empty or mismatched arrays, counts below 1 or repeated, capacities not finite > 0, or
            a total capacity that decreases with N (more instances serving less is a measurement
            to redo, not a curve to interpolate): the error names the first such point.
        """
        n = np.asarray(instances).ravel()
        r = np.asarray(rate_req_per_s, dtype=np.float64).ravel()
        if n.shape != r.shape or n.shape[0] == 0:
            raise FastsimInputError("capacity points", (n.shape, r.shape), "two arrays of the same length >= 1")
        if not np.all(n == np.round(n)) or np.any(n < 1) or np.unique(n).shape[0] != n.shape[0]:
            raise FastsimInputError("capacity instances", n.tolist(), "distinct integers >= 1")
        if not np.all(np.isfinite(r) & (r > 0.0)):
            raise FastsimInputError("capacity rate_req_per_s", r.tolist(), "finite rates > 0 (req/s)")
        o = np.argsort(n)
        n, r = n[o].astype(np.int64), r[o]
        drop = np.flatnonzero(np.diff(r) < 0.0)
        if drop.size:
            i = int(drop[0]) + 1
            raise FastsimInputError("capacity point", f"{int(n[i])}={r[i]:g}",
                                    f"a total capacity at least that of fewer instances ({int(n[i - 1])}="
                                    f"{r[i - 1]:g} req/s): capacity must not decrease with N")
        return cls(n, r)

    def per_instance_req_per_s(self, n) -> np.ndarray:
        """Capacity per instance of ``n`` instances (req/s): linear in log2 N between the points.

        Parameters
        ----------
        n : int or array_like of int
            Instance counts >= 1.

        Returns
        -------
        ndarray(float64)
            Same shape as ``n``; held at the nearest point outside the measured range.
        """
        n = np.asarray(n, dtype=np.float64)
        x = np.log2(self.instances.astype(np.float64))
        y = self.rate_req_per_s / self.instances
        return np.interp(np.log2(np.maximum(n, 1.0)), x, y)

    def total_req_per_s(self, n) -> np.ndarray:
        """Capacity of ``n`` instances: ``n x per_instance_req_per_s(n)``.

        Parameters
        ----------
        n : int or array_like of int
            Instance counts >= 0.

        Returns
        -------
        ndarray(float64)
            Same shape as ``n`` (req/s); 0 for n = 0.
        """
        n = np.asarray(n, dtype=np.float64)
        return np.where(n > 0, n * self.per_instance_req_per_s(n), 0.0)

    def reach_req_per_s(self, max_instances: int = MAX_INSTANCES) -> float:
        """The highest rate up to ``max_instances`` instances serve (req/s).

        Parameters
        ----------
        max_instances : int
            Largest count considered (>= 1).

        Returns
        -------
        float
            ``max(total_req_per_s(n) for n in 1..max_instances)``.
        """
        return float(np.max(self.total_req_per_s(np.arange(1, max(int(max_instances), 1) + 1))))

    def instances_for(self, rate_req_per_s, min_instances: int = 1, max_instances: int = MAX_INSTANCES) -> np.ndarray:
        """Smallest instance counts whose capacity is at least each rate.

        Parameters
        ----------
        rate_req_per_s : float or array_like of float
            Rates (req/s, finite, >= 0).
        min_instances : int
            Floor of the answer (>= 0).
        max_instances : int
            Largest count considered.

        Returns
        -------
        ndarray(int64)
            Same shape as the rates.

        Raises
        ------
        FastsimInputError
            A rate that is negative or not finite, or above the capacity of ``max_instances``.
        """
        r = np.asarray(rate_req_per_s, dtype=np.float64)
        if not np.all(np.isfinite(r) & (r >= 0.0)):
            raise FastsimInputError("rate_req_per_s", "a negative or non-finite rate", "finite rates >= 0")
        top = float(np.max(r)) if r.size else 0.0
        hi = max(int(min_instances), 1)
        while float(self.total_req_per_s(hi)) < top:
            if hi >= max_instances:
                raise FastsimInputError("rate_req_per_s", top, f"at most {self.reach_req_per_s(max_instances):,.0f} "
                                        f"req/s, the most {max_instances:,} instances serve on this capacity curve")
            hi = min(hi * 2, max_instances)
        grid = np.arange(0, hi + 1)
        cap = self.total_req_per_s(grid)
        # smallest n with cap[n] >= r (cap may wiggle: the first n that reaches it)
        reach = np.maximum.accumulate(cap)
        out = np.searchsorted(reach, r, side="left")
        return np.maximum(out, int(min_instances)).astype(np.int64)


class ColdStart(NamedTuple):
    """How long a new instance takes to become ready (module docstring).

    Attributes
    ----------
    weight_bytes : float
        Checkpoint bytes one instance loads.
    load_bw_bytes_per_s : float
        Load bandwidth (bytes/s).
    fixed_start_s : float
        Engine start on top of the load (s).
    """

    weight_bytes: float
    load_bw_bytes_per_s: float
    fixed_start_s: float

    @property
    def load_s(self) -> float:
        """Weight load time (s)."""
        return self.weight_bytes / self.load_bw_bytes_per_s

    @property
    def total_s(self) -> float:
        """Cold start (s): load plus fixed start."""
        return self.load_s + self.fixed_start_s


def cold_start(weight_bytes: float, load_bw_bytes_per_s: float = LOAD_BW_BYTES_PER_S,
               fixed_start_s: float = FIXED_START_S) -> ColdStart:
    """A checked :class:`ColdStart`.

    Parameters
    ----------
    weight_bytes : float
        Checkpoint bytes (> 0): the model's parameters times the precision's bytes per weight.
    load_bw_bytes_per_s : float
        Load bandwidth (bytes/s, > 0); default :data:`LOAD_BW_BYTES_PER_S`.
    fixed_start_s : float
        Fixed start (s, >= 0); default :data:`FIXED_START_S`.

    Returns
    -------
    ColdStart

    Raises
    ------
    FastsimInputError
        A weight size or bandwidth not finite > 0, a fixed start negative or not finite.
    """
    w = require_positive("weight_bytes", weight_bytes)
    bw = require_positive("load_bw_bytes_per_s", load_bw_bytes_per_s)
    f = _nonneg("fixed_start_s", fixed_start_s)
    return ColdStart(w, bw, f)


def _nonneg(field: str, v) -> float:
    if isinstance(v, (bool, str, bytes)):
        raise FastsimInputError(field, v, "a finite number >= 0")
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise FastsimInputError(field, v, "a finite number >= 0") from None
    if not (math.isfinite(x) and x >= 0.0):
        raise FastsimInputError(field, v, "a finite number >= 0")
    return x


def _count(field: str, v, lo: int) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < lo:
        raise FastsimInputError(field, v, f"an integer >= {lo}")
    return int(v)


def _fraction(field: str, v) -> float:
    x = require_positive(field, v)
    if x > 1.0:
        raise FastsimInputError(field, v, "a fraction in (0, 1]")
    return x


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


def _provisioned_ahead(t: np.ndarray, target: np.ndarray, cold_s: float):
    """(change times, counts): provisioned count = highest target over [time, time + cold_s]."""
    cand = np.unique(np.concatenate([t, np.maximum(t - cold_s, 0.0)]))
    ends = np.append(t[1:], np.inf)
    out = np.empty(cand.shape[0], np.int64)
    for i, c in enumerate(cand):
        # windows [t_j, t_j+1) meeting [c, c + cold]
        j0 = int(np.searchsorted(ends, c, side="right"))
        j1 = int(np.searchsorted(t, c + cold_s, side="right"))
        out[i] = target[j0:max(j1, j0 + 1)].max()
    keep = np.concatenate(([True], out[1:] != out[:-1]))
    return cand[keep], out[keep]


def schedule_from_targets(decision_s, target, *, cold_start_s: float, ahead: bool = False,
                          horizon_s: float = math.inf) -> FleetSchedule:
    """Instance lifetimes that follow a target count (module docstring, "Lifetimes").

    Parameters
    ----------
    decision_s : array_like of float, shape (w,)
        Decision times (s), ascending from 0.
    target : array_like of int, shape (w,)
        Instances wanted from each decision to the next (>= 0).
    cold_start_s : float
        Provision-to-ready time of a new instance (s, >= 0).
    ahead : bool
        False (reactive): instances are provisioned at the decision and ready a cold start
        later. True (scheduled, oracle): provisioned a cold start before their decision (not
        before 0), so they are ready at it.
    horizon_s : float
        Changes at or after this time are not made.

    Returns
    -------
    FleetSchedule
        Lifetimes in order of provisioning; the first decision's instances ready at 0; drains
        end as ``END_DRAIN``; ``end_s`` inf for those up to the end.

    Raises
    ------
    FastsimInputError
        Mismatched or empty arrays, decisions not ascending from 0, a negative target or cold
        start.
    """
    t = np.asarray(decision_s, dtype=np.float64).ravel()
    n = np.asarray(target).ravel()
    if t.shape != n.shape or t.shape[0] == 0:
        raise FastsimInputError("decision_s, target", (t.shape, n.shape), "two arrays of the same length >= 1")
    if not (t[0] == 0.0 and np.all(np.diff(t) > 0)):
        raise FastsimInputError("decision_s", "not strictly ascending from 0", "decision times ascending from 0")
    if not (np.all(n == np.round(n)) and np.all(n >= 0)):
        raise FastsimInputError("target", "a negative or fractional count", "instance counts >= 0")
    n = n.astype(np.int64)
    cold = _nonneg("cold_start_s", cold_start_s)
    if ahead:
        t, n = _provisioned_ahead(t, n, cold)
    prov, ready, end = [], [], []
    active = []                      # lifetime indices provisioned and not drained, in order
    for k in range(t.shape[0]):
        tk = float(t[k])
        if tk >= horizon_s:
            break
        want = int(n[k])
        if k == 0:
            for _ in range(want):
                active.append(len(prov))
                prov.append(0.0)
                ready.append(0.0)
                end.append(math.inf)
            continue
        cur = len(active)
        if want > cur:
            for _ in range(want - cur):
                active.append(len(prov))
                prov.append(tk)
                ready.append(tk + cold)
                end.append(math.inf)
        elif want < cur:
            n_ready = sum(1 for life in active if ready[life] < tk)
            excess = min(cur - want, max(n_ready - want, 0))
            for i in range(len(active) - 1, -1, -1):
                if excess == 0:
                    break
                life = active[i]
                if ready[life] < tk:
                    end[life] = tk
                    del active[i]
                    excess -= 1
    m = len(prov)
    return FleetSchedule(np.asarray(prov, np.float64).reshape(m), np.asarray(ready, np.float64).reshape(m),
                         np.asarray(end, np.float64).reshape(m), np.full(m, END_DRAIN, np.int8))


def static_schedule(n_instances: int) -> FleetSchedule:
    """The static fleet: ``n_instances`` lifetimes up (ready) from 0 to the end.

    Parameters
    ----------
    n_instances : int
        Instances (>= 0).

    Returns
    -------
    FleetSchedule
        Provisioned and ready at 0, ``end_s`` inf.
    """
    n = _count("n_instances", n_instances, 0)
    z = np.zeros(n, np.float64)
    return FleetSchedule(z, z.copy(), np.full(n, np.inf), np.full(n, END_DRAIN, np.int8))


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
    """Failures applied to a schedule (module docstring, "Failures").

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


def _steps(on_s: np.ndarray, off_s: np.ndarray, horizon_s: float):
    """(times, counts): a step function counting the intervals [on, off) clipped to [0, horizon]."""
    on = np.clip(on_s, 0.0, horizon_s)
    off = np.clip(off_s, 0.0, horizon_s)
    keep = off > on
    t = np.concatenate([[0.0], on[keep], off[keep], [horizon_s]])
    d = np.concatenate([[0], np.ones(int(keep.sum()), np.int64), -np.ones(int(keep.sum()), np.int64), [0]])
    o = np.lexsort((d, t))
    t, d = t[o], d[o]
    c = np.cumsum(d)
    # the count in force from t[i] to t[i+1]; collapse equal times to their last entry
    last = np.append(t[1:] != t[:-1], True)
    return t[last], c[last]


def _release(schedule: FleetSchedule, off_s) -> np.ndarray:
    off = np.asarray(off_s, dtype=np.float64).ravel()
    if off.shape[0] != schedule.provision_s.shape[0]:
        raise FastsimInputError("off_s", f"length {off.shape[0]}", f"length {schedule.provision_s.shape[0]} "
                                "(one release time per lifetime, FleetRun.off_s)")
    return np.where(np.isnan(off), np.inf, off)


def billed_steps(schedule: FleetSchedule, off_s, horizon_s: float):
    """Instances billed over the period as a step function.

    Parameters
    ----------
    schedule : FleetSchedule
    off_s : array_like of float, shape (m,)
        Release time per lifetime (``FleetRun.off_s``; nan = still up at the end).
    horizon_s : float
        End of the period (s).

    Returns
    -------
    (ndarray(float64) of shape (s,), ndarray(int64) of shape (s,))
        Times from 0 to ``horizon_s`` and the count billed from each time to the next (the
        last entry, at ``horizon_s``, closes the function).
    """
    h = require_positive("horizon_s", horizon_s)
    return _steps(np.asarray(schedule.provision_s, np.float64), _release(schedule, off_s), h)


def ready_steps(schedule: FleetSchedule, off_s, horizon_s: float):
    """Instances ready to serve (joined, not yet draining or failed) as a step function.

    Parameters
    ----------
    schedule : FleetSchedule
    off_s : array_like of float, shape (m,)
        Release time per lifetime (``FleetRun.off_s``; nan = still up at the end).
    horizon_s : float
        End of the period (s).

    Returns
    -------
    (ndarray(float64) of shape (s,), ndarray(int64) of shape (s,))
        As :func:`billed_steps`; an instance counts from ``ready_s`` to the earlier of its
        ``end_s`` and its release.
    """
    h = require_positive("horizon_s", horizon_s)
    stop = np.minimum(np.asarray(schedule.end_s, np.float64), _release(schedule, off_s))
    return _steps(np.asarray(schedule.ready_s, np.float64), stop, h)


def window_mean_count(times_s, counts, window_start_s, window_end_s) -> np.ndarray:
    """Time-average of a step function over each window.

    Parameters
    ----------
    times_s, counts : ndarray of shape (s,)
        A step function (:func:`billed_steps`, :func:`ready_steps`).
    window_start_s, window_end_s : ndarray(float64) of shape (w,)

    Returns
    -------
    ndarray(float64) of shape (w,)
        Mean count over each window (its part before the step function's end).
    """
    t = np.asarray(times_s, np.float64)
    c = np.asarray(counts, np.float64)
    cum = np.concatenate([[0.0], np.cumsum(c[:-1] * np.diff(t))])

    def integral(x):
        x = np.clip(x, t[0], t[-1])
        i = np.clip(np.searchsorted(t, x, side="right") - 1, 0, t.shape[0] - 1)
        return cum[i] + c[i] * (x - t[i])
    a = np.asarray(window_start_s, np.float64)
    b = np.asarray(window_end_s, np.float64)
    span = np.clip(np.minimum(b, t[-1]) - a, 0.0, None)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(span > 0, (integral(b) - integral(a)) / np.where(span > 0, span, 1.0), np.nan)


class CostBreakdown(NamedTuple):
    """GPU-hours and dollars of one strategy over the period (module docstring, "Cost").

    Attributes
    ----------
    gpu_hours : float
        GPU-hours billed by the lifetimes.
    reserved_instances : int
        Instances reserved for the whole period.
    reserved_gpu_hours : float
        ``reserved_instances x GPUs per instance x period`` (paid whether used or not).
    on_demand_gpu_hours : float
        GPU-hours billed above the reservation. ``reserved_gpu_hours + on_demand_gpu_hours`` is
        at least ``gpu_hours``: the reserved hours include those of reserved instances sitting
        idle (paid, not billed by a lifetime).
    reserved_usd, on_demand_usd, usd : float
        Dollars of each part and in all.
    output_tokens : int
        Output tokens of the finished requests.
    usd_per_million_output_tokens : float
        ``usd / output_tokens x 1e6`` (nan without output tokens).
    met_output_tokens : int
        Output tokens of the requests that met both SLOs.
    usd_per_million_met_output_tokens : float
        Goodput cost: ``usd / met_output_tokens x 1e6`` (nan without such tokens).
    """

    gpu_hours: float
    reserved_instances: int
    reserved_gpu_hours: float
    on_demand_gpu_hours: float
    reserved_usd: float
    on_demand_usd: float
    usd: float
    output_tokens: int
    usd_per_million_output_tokens: float
    met_output_tokens: int = 0
    usd_per_million_met_output_tokens: float = math.nan


def optimal_reserved(times_s, counts, *, reserved_usd_per_gpu_hour: float, on_demand_usd_per_gpu_hour: float) -> int:
    """The reservation that minimises the cost of a billed-instances step function.

    The r-th instance is worth reserving when the share of the period with at least r instances
    billed is at least ``reserved / on-demand`` price: reserving it costs that share of the
    on-demand price for the whole period, and saves the on-demand hours it would have billed.

    Parameters
    ----------
    times_s, counts : ndarray of shape (s,)
        :func:`billed_steps`.
    reserved_usd_per_gpu_hour, on_demand_usd_per_gpu_hour : float
        Prices (> 0).

    Returns
    -------
    int
        The largest r whose share is at least the price ratio (0 when the ratio is above 1 or
        no instance is billed long enough).
    """
    pr = require_positive("reserved_usd_per_gpu_hour", reserved_usd_per_gpu_hour)
    po = require_positive("on_demand_usd_per_gpu_hour", on_demand_usd_per_gpu_hour)
    t = np.asarray(times_s, np.float64)
    c = np.asarray(counts, np.int64)
    span = t[-1] - t[0]
    if not span > 0 or pr > po:
        return 0
    dt = np.diff(t)
    r = 0
    top = int(c[:-1].max()) if c.shape[0] > 1 else 0
    for k in range(1, top + 1):
        share = float(dt[c[:-1] >= k].sum()) / span
        if share >= pr / po:
            r = k
        else:
            break
    return r


def cost(schedule: FleetSchedule, off_s, *, horizon_s: float, gpus_per_instance: int,
         on_demand_usd_per_gpu_hour: float, reserved_usd_per_gpu_hour: float | None = None,
         reserved_instances="none", output_tokens: int = 0, met_output_tokens: int = 0) -> CostBreakdown:
    """GPU-hours and dollars of a fleet's lifetimes over ``[0, horizon_s]`` (module docstring).

    Parameters
    ----------
    schedule : FleetSchedule
    off_s : array_like of float, shape (m,)
        Release time per lifetime (``FleetRun.off_s``; nan = still up at the end).
    horizon_s : float
        Length of the period (s, > 0).
    gpus_per_instance : int
        GPUs of one instance (>= 1).
    on_demand_usd_per_gpu_hour : float
        Price of a GPU-hour above the reservation (> 0).
    reserved_usd_per_gpu_hour : float, optional
        Price of a reserved GPU-hour (> 0); default the on-demand price.
    reserved_instances : int, "none" or "auto"
        Instances reserved for the whole period; "none" = 0; "auto" = :func:`optimal_reserved`.
    output_tokens : int
        Output tokens served over the period (for the $ per million).
    met_output_tokens : int
        Output tokens of the requests that met both SLOs (for the goodput cost).

    Returns
    -------
    CostBreakdown

    Raises
    ------
    FastsimInputError
        A bad horizon, GPU count, price or reservation, or ``off_s`` of the wrong length.
    """
    h = require_positive("horizon_s", horizon_s)
    g = _count("gpus_per_instance", gpus_per_instance, 1)
    po = require_positive("on_demand_usd_per_gpu_hour", on_demand_usd_per_gpu_hour)
    pr = po if reserved_usd_per_gpu_hour is None else require_positive("reserved_usd_per_gpu_hour",
                                                                       reserved_usd_per_gpu_hour)
    t, c = billed_steps(schedule, off_s, h)
    dt = np.diff(t)
    inst_s = float(np.sum(c[:-1] * dt))
    if isinstance(reserved_instances, str):
        if reserved_instances == "none":
            r = 0
        elif reserved_instances == "auto":
            r = optimal_reserved(t, c, reserved_usd_per_gpu_hour=pr, on_demand_usd_per_gpu_hour=po)
        else:
            raise FastsimInputError("reserved_instances", reserved_instances, "an integer >= 0, 'none' or 'auto'")
    else:
        r = _count("reserved_instances", reserved_instances, 0)
    over_s = float(np.sum(np.maximum(c[:-1] - r, 0) * dt))
    res_h = r * g * h / 3600.0
    od_h = over_s * g / 3600.0
    tokens = int(output_tokens)
    usd = res_h * pr + od_h * po
    per_m = usd / tokens * 1e6 if tokens > 0 else math.nan
    met = int(met_output_tokens)
    per_met = usd / met * 1e6 if met > 0 else math.nan
    return CostBreakdown(inst_s * g / 3600.0, r, res_h, od_h, res_h * pr, od_h * po, usd, tokens, per_m, met,
                         per_met)


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
    """Simulate ``instances`` instances at a constant rate through one failure (module docstring).

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
