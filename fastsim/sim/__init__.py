"""Discrete-event simulator of an LLM serving plan (SPEC section 6).

``simulate`` runs one plan on one workload; ``simulate_batch`` runs many in one call, the runs
spread over worker threads. The semantics are documented in :mod:`fastsim.sim.engine` (the
lecture's scheduler), :mod:`fastsim.sim.policy` (vLLM's, SGLang's and TensorRT-LLM's, with prefix
caching and speculative decoding) and :mod:`fastsim.sim.pipeline` (pipeline-parallel instances).

The package, in the order a simulation runs through it:

- :mod:`fastsim.sim.inputs`: the plans (:class:`ColocatedPlan`, :class:`DisaggregatedPlan`), the
  checked input arrays, the run's options and the kernels' option row;
- :mod:`fastsim.sim.window`: the sliding-window KV accounting of a plan's step parameters;
- :mod:`fastsim.sim.engine`: :func:`simulate` and :func:`simulate_batch`, the lecture's scheduler
  (run and instance tables, worker threads), and the hand-off to the engine policies;
- :mod:`fastsim.sim.policy`: the engine policies (:class:`EnginePolicy`), their configuration
  rows and runs;
- :mod:`fastsim.sim.pipeline`: runs of :class:`PipelinePlan` (micro-batches through pipeline
  stages, under the lecture or the trtllm policy);
- :mod:`fastsim.sim._kernels`, :mod:`fastsim.sim._policy_nb` and :mod:`fastsim.sim._pipeline_nb`:
  the numba kernels, which loop over the events and compute each run's metrics;
- :mod:`fastsim.sim.records`: the status codes and the results, :class:`SimResult` and
  :class:`SimMetrics`;
- :mod:`fastsim.sim.drain`: runs that drain (offline batches, finite online runs:
  :func:`simulate_drained`) and the figures benchmark clients report (:func:`benchmark_figures`;
  :func:`measured_means` for a run that stops at its horizon);
- :mod:`fastsim.sim.reference`, :mod:`fastsim.sim.reference_policy` and
  :mod:`fastsim.sim.reference_pipeline`: plain-Python references that the kernels match bit for
  bit (tests and ``fastsim bench``).
"""
from __future__ import annotations

from .inputs import OVERLOAD_MIN_GROWTH, OVERLOAD_SLOPE_FRACTION, ColocatedPlan, DisaggregatedPlan, PipelinePlan
from .engine import simulate, simulate_batch, warmup
from .policy import POLICIES, EnginePolicy, engine_policy, policy_defaults
from .records import RequestStatus, RunStatus, SimMetrics, SimResult
from .drain import BenchmarkFigures, benchmark_figures, measured_means, simulate_drained

__all__ = [
    "ColocatedPlan", "DisaggregatedPlan", "PipelinePlan", "simulate", "simulate_batch", "warmup",
    "SimResult", "SimMetrics", "RequestStatus", "RunStatus",
    "OVERLOAD_SLOPE_FRACTION", "OVERLOAD_MIN_GROWTH", "POLICIES", "EnginePolicy", "engine_policy",
    "policy_defaults", "simulate_drained", "benchmark_figures", "BenchmarkFigures",
    "measured_means",
]
