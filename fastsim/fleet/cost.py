"""Cost accounting of a fleet's lifetimes (:mod:`fastsim.fleet.strategies`: "Cost").

:func:`billed_steps` and :func:`ready_steps` are the instances billed and ready as step
functions of time, :func:`window_mean_count` their mean per window; :func:`cost` prices the
GPU-hours (reserved instances for the whole period, on-demand above them) and
:func:`optimal_reserved` gives the reservation that minimises the total.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..errors import FastsimInputError, require_positive
from ._checks import _count
from .schema import FleetSchedule

__all__ = ["billed_steps", "ready_steps", "window_mean_count", "CostBreakdown", "cost", "optimal_reserved"]

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
    """GPU-hours and dollars of one strategy over the period (:mod:`fastsim.fleet.strategies`, "Cost").

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
    """GPU-hours and dollars of a fleet's lifetimes over ``[0, horizon_s]`` (:mod:`fastsim.fleet.strategies`).

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
