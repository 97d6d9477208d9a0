"""Verification and repair of plans in simulation, and the capacity searches (SPEC section 7; lecture §2.3).

:func:`verify` simulates a plan on a set of workloads (one per seed, common random numbers) at
the target rate and pools the measured requests; a plan passes when its SLO attainment surely
reaches the target (0.90 for a P90 SLO; the 95% Wilson interval's lower end, seeds added while it
cannot decide: :mod:`fastsim.search.confidence`) and the runs, judged together, are not
overloaded (:func:`pooled_overload`). :func:`repair` adds
whole instances, on the failing side for disaggregated plans (decode when TPOT fails, prefill when
TTFT fails), until the plan passes, and says so when no count can pass: a request that alone, on
an idle instance, misses its SLO is not helped by more machines. :func:`max_sustainable_rate`
bisects the rate of a synthetic workload over seeds (:func:`max_sustainable_rates`: many plans
in lockstep); :func:`max_sustainable_scale` bisects the time scale of a real trace, replayed once
per probe.

The package, in the order a verification and then a capacity search run:

- :mod:`fastsim.search.records`: what they take and return: :class:`SLO`,
  :class:`Verification`, :class:`RepairResult`, :class:`HorizonFloor`, :class:`CapacityResult`,
  :class:`ScaleProbe`, :class:`TraceCapacityResult`;
- :mod:`fastsim.search.adapter`: :func:`sim_plan`, the planner's plan as the simulator's
  (:func:`pipeline_refusal`: the policies that cannot run a pipelined one), and an
  engine setting as the simulator's keywords;
- :mod:`fastsim.search.confidence`: the Wilson bound on a pooled attainment, the seeds an
  undecided verification adds (:class:`SeedWorkloads`), and the capacity that refutes a pass;
- :mod:`fastsim.search.verify`: :func:`verify` and its pooling, :func:`repair`,
  :func:`lone_request_check`, :func:`horizon_floor`, and :func:`unsimulated_reason`;
- :mod:`fastsim.search.checks`: what a capacity search checks before its first probe
  (:func:`check_rate_hint`, :func:`check_plan_instances`, the horizon floor) and its limits
  (:data:`MAX_RATE_REQ_PER_S`);
- :mod:`fastsim.search._bisect`: common random numbers, the verdict of a probe, the estimator and
  its bootstrap, the sequential test, and ``_Bisection``, the ask/tell search of one plan;
- :mod:`fastsim.search.rate`: :func:`max_sustainable_rate` and :func:`max_sustainable_rates`,
  the loops that drive ``_Bisection`` for one plan or many;
- :mod:`fastsim.search.scale`: :func:`max_sustainable_scale` on a real trace.
"""
from __future__ import annotations

from .adapter import PIPELINE_POLICIES, pipeline_refusal, sim_plan
from .checks import MAX_RATE_REQ_PER_S, check_plan_instances, check_rate_hint
from .confidence import (MAX_SEED_FACTOR, SeedWorkloads, attainment_verdict, capacity_refutation, next_seed_count,
                         wilson_interval)
from .rate import max_sustainable_rate, max_sustainable_rates
from .records import (SLO, CapacityResult, HorizonFloor, RepairResult, ScaleProbe, TraceCapacityResult,
                      Verification)
from .scale import MAX_REPLAY_SPAN_S, max_sustainable_scale
from .verify import horizon_floor, lone_request_check, pooled_overload, repair, unsimulated_reason, verify

# Besides __all__: the names that the command line, the planner, the sweep and the tests import
# from here (this package was one module, fastsim/search.py, and every name it defined still
# resolves here). max_sustainable_rates reads _BATCH_REQUESTS here when it runs, so that
# replacing it on this package takes effect (tests bound the batches so); the command line reads
# max_sustainable_rate(s) here when it runs, and every search reads fastsim.sim.simulate_batch
# when it runs, for the same reason.
from ..analytic import MAX_INSTANCES  # noqa: F401
from ._bisect import (EARLY_ATTAINMENT_SD_FLOOR, EARLY_SLOPE_SD_FLOOR, _Bisection, _bracket_capacities,  # noqa: F401
                      _capacities_from, _capacity_from, _CRN, _early_verdict, _pooled_figures, _probe_verdict)
from .adapter import _engine_kwargs, _plan_model, _simulated  # noqa: F401
from .checks import (_check_budget, _check_seed, _check_slo, _checked_floor, _floor_of,  # noqa: F401
                     _max_probe_rate, _mean_lengths, _search_inputs)
from .rate import (_BATCH_REQUESTS, _HALF_WIDTH_SIBLINGS, _STEP_COLD, EARLY_STOP_ALPHA,  # noqa: F401
                   FIRST_SEEDS, _family_count, _family_key, _predicted_ratio)
from .records import _Replay, _RunFigures  # noqa: F401
from .scale import _SCALE_STEP, _figures_at, _figures_of, _replay_horizon  # noqa: F401
from .verify import _instances, _lone_times, _p90, _pooled, _quantile, _rejection_budget  # noqa: F401

__all__ = ["SLO", "Verification", "RepairResult", "CapacityResult", "sim_plan", "verify", "repair",
           "lone_request_check", "max_sustainable_rate", "pooled_overload", "max_sustainable_scale",
           "TraceCapacityResult", "ScaleProbe", "MAX_REPLAY_SPAN_S", "MAX_RATE_REQ_PER_S", "HorizonFloor",
           "horizon_floor", "check_rate_hint", "check_plan_instances", "wilson_interval", "attainment_verdict",
           "next_seed_count", "capacity_refutation", "SeedWorkloads", "MAX_SEED_FACTOR", "pipeline_refusal",
           "PIPELINE_POLICIES"]
