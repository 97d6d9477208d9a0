"""Instance lifetimes: a :class:`~fastsim.fleet.schema.FleetSchedule` from target counts (:mod:`fastsim.fleet.strategies`: "Lifetimes").

:func:`schedule_from_targets` turns the counts a strategy wants at its decision times into
lifetimes (provision, ready, end), provisioning above the target and draining newest first
below it, optionally a cold start ahead; :func:`static_schedule` is the fixed fleet.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import FastsimInputError
from ._checks import _count, _nonneg
from .schema import END_DRAIN, FleetSchedule

__all__ = ["schedule_from_targets", "static_schedule"]

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
    """Instance lifetimes that follow a target count (:mod:`fastsim.fleet.strategies`, "Lifetimes").

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
