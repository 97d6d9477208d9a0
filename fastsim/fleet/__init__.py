"""Fleets over time: instances that join, drain and fail under time-varying traffic.

:func:`simulate_fleet` runs a pool of colocated instances of one plan through a schedule of
instance lifetimes (:class:`FleetSchedule`) on a workload (arrays, or a streamed rate profile,
:class:`ProfileArrivals`), and streams per-window metrics (:class:`FleetRun`).
"""
from __future__ import annotations

from .schema import END_DRAIN, END_FAIL, WINDOW_COLUMNS, FleetRun, FleetSchedule
from .sim import ProfileArrivals, profile_chunks, simulate_fleet, window_percentile
from .api import FleetResult, StrategyResult, fleet
from .strategies import CapacityCurve, STRATEGIES

__all__ = ["END_DRAIN", "END_FAIL", "WINDOW_COLUMNS", "FleetRun", "FleetSchedule", "ProfileArrivals",
           "profile_chunks", "simulate_fleet", "window_percentile"]
# fastsim fleet: strategies compared over a profile (fastsim.fleet.api, fastsim.fleet.strategies)
__all__ += ["fleet", "FleetResult", "StrategyResult", "CapacityCurve", "STRATEGIES"]
