"""The checks every capacity search makes before its first probe, and the limits it probes within.

A search's root seed, SLO, probe budget and bootstrap; its first rate (:func:`check_rate_hint`,
bounded by :data:`MAX_RATE_REQ_PER_S` and the workload limit of :mod:`fastsim.workload`); the
plan's instance counts (:func:`check_plan_instances`, :data:`fastsim.analytic.MAX_INSTANCES`);
its horizon against :func:`~fastsim.search.horizon_floor` (``_floor_of``, ``_checked_floor``).
``_search_inputs`` is the opening of a rate search (SPEC §7).
"""
from __future__ import annotations

import numpy as np

from ..analytic import MAX_INSTANCES, Plan
from ..errors import FastsimInputError
from .records import SLO, HorizonFloor
from .verify import horizon_floor


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
    return _checked_floor(plan, P, O, slo, horizon_s, window, catalog, constants, model, field)


def _checked_floor(plan, prompt_tokens, output_tokens, slo, horizon_s, window, catalog, constants, model,
                   field="horizon_s") -> HorizonFloor:
    """:func:`horizon_floor` of a capacity search at mean lengths ``prompt_tokens``, ``output_tokens``;
    a horizon below its ``min_horizon_s`` is refused, naming ``field``."""
    floor = horizon_floor(plan, prompt_tokens, output_tokens, slo, measure_window=window, catalog=catalog,
                          constants=constants, model=model)
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
    from ..workload import MAX_REQUESTS
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
    from ..errors import require_positive
    from ..workload import MAX_REQUESTS
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


def _mean_lengths(dists) -> tuple:
    """Mean (prompt, output) tokens of a rate search's length distributions."""
    from .. import workload as W
    _, pd, od = W._dists(dists)
    return float(pd.mean), float(od.mean)


def _search_inputs(plan: Plan, seeds, rel_tol, horizon_s, rate_hint_req_per_s, hint_field="rate_hint_req_per_s"):
    """Checked ``(seeds, first rate, analytic capacity)`` of a capacity search.

    The plan's instance counts (:func:`check_plan_instances`), the hint (None: the analytic
    capacity; else :func:`check_rate_hint`, named ``hint_field``) and the first draw's size: a
    first rate (the analytic capacity) whose draw exceeds the workload limit is refused as
    ``horizon_s``.
    """
    from ..errors import require_positive
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
        from ..workload import MAX_REQUESTS
        if 2.0 * r * h > MAX_REQUESTS:
            raise FastsimInputError("horizon_s", horizon_s, f"at most {MAX_REQUESTS / (2.0 * r):.6g} s for "
                                    f"{plan.describe()}: the search starts at its analytic capacity, {r:,.6g} req/s, "
                                    f"and draws each seed's requests up to twice that rate, at most "
                                    f"{MAX_REQUESTS:,} per seed (or a smaller rate_hint_req_per_s)")
    return int(seeds), float(r), analytic
