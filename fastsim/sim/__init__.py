"""Discrete-event simulator of an LLM serving plan (SPEC section 6).

``simulate`` runs one plan on one workload; ``simulate_batch`` runs many in one parallel kernel
call. The semantics are documented in :mod:`fastsim.sim.engine` (the lecture's scheduler) and
:mod:`fastsim.sim.policy` (vLLM's and SGLang's, with prefix caching and speculative decoding).
"""
from __future__ import annotations

from .engine import (OVERLOAD_MIN_GROWTH, OVERLOAD_SLOPE_FRACTION, ColocatedPlan, DisaggregatedPlan,
                     simulate, simulate_batch, warmup)
from .policy import POLICIES, EnginePolicy, engine_policy, policy_defaults
from .records import RequestStatus, RunStatus, SimMetrics, SimResult

__all__ = [
    "ColocatedPlan", "DisaggregatedPlan", "simulate", "simulate_batch", "warmup",
    "SimResult", "SimMetrics", "RequestStatus", "RunStatus",
    "OVERLOAD_SLOPE_FRACTION", "OVERLOAD_MIN_GROWTH", "POLICIES", "EnginePolicy", "engine_policy",
    "policy_defaults",
]
