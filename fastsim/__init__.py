"""fastsim: plan LLM inference deployments.

For a model, a workload and P90 latency SLOs, fastsim finds the cheapest GPU, precision, tensor
parallelism, colocated-or-disaggregated layout and instance count; checks the best plans in a
discrete-event simulation, repairs the ones that fail, and finds the traffic a deployment can
truly sustain.

Heavy submodules load lazily: ``import fastsim`` is cheap.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = {
    # errors
    "FastsimInputError": "fastsim.errors",
    # catalog (SPEC §2, §9)
    "Catalog": "fastsim.catalog",
    "GPU": "fastsim.catalog",
    "Precision": "fastsim.catalog",
    "Model": "fastsim.catalog",
    "LengthDist": "fastsim.catalog",
    "Scenario": "fastsim.catalog",
    "load_catalog": "fastsim.catalog",
    "default_catalog": "fastsim.catalog",
    "model_from_hf_config": "fastsim.catalog",
    # step-time model (SPEC §3)
    "StepConstants": "fastsim.stepmodel",
    "step_params": "fastsim.stepmodel",
    "step_time": "fastsim.stepmodel",
    "step_parts": "fastsim.stepmodel",
    # workloads (SPEC §6)
    "Workload": "fastsim.workload",
    "read_trace": "fastsim.workload",
    "synthesize": "fastsim.workload",
    "synthesize_many": "fastsim.workload",
    "synthesize_from_trace": "fastsim.workload",
    "scenario_workload": "fastsim.workload",
    "seeds_for": "fastsim.workload",
    "length_quantiles": "fastsim.workload",
    "length_means": "fastsim.workload",
    # analytic screen (SPEC §1, §5)
    "Demand": "fastsim.analytic",
    "ScreenOptions": "fastsim.analytic",
    "Plan": "fastsim.analytic",
    "screen": "fastsim.analytic",
    "instance_table": "fastsim.analytic",
    "plan_for": "fastsim.analytic",
    "cost_usd_per_million_output_tokens": "fastsim.analytic",
    "instances_needed": "fastsim.analytic",
    # simulator (SPEC §6)
    "ColocatedPlan": "fastsim.sim",
    "DisaggregatedPlan": "fastsim.sim",
    "simulate": "fastsim.sim",
    "simulate_batch": "fastsim.sim",
    "SimResult": "fastsim.sim",
    "SimMetrics": "fastsim.sim",
    # verification, repair, capacity (SPEC §7)
    "SLO": "fastsim.search",
    "Verification": "fastsim.search",
    "RepairResult": "fastsim.search",
    "CapacityResult": "fastsim.search",
    "sim_plan": "fastsim.search",
    "verify": "fastsim.search",
    "repair": "fastsim.search",
    "max_sustainable_rate": "fastsim.search",
    # planner (SPEC §5 + §7)
    "plan_deployment": "fastsim.planner",
    "PlanReport": "fastsim.planner",
    "PlannedDeployment": "fastsim.planner",
    # ledger and ladder (SPEC §4)
    "token_ledger": ("fastsim.ledger", "ledger"),
    "ledger_table": "fastsim.ledger",
    "ladder": "fastsim.ledger",
    "speculative_step": "fastsim.ledger",
    "LedgerResult": "fastsim.ledger",
    # what-if studies (SPEC §8)
    "tpot_study": "fastsim.whatif",
    "fp8_study": "fastsim.whatif",
    "price_study": "fastsim.whatif",
    "model_size_study": "fastsim.whatif",
    "traffic_study": "fastsim.whatif",
    "run_studies": "fastsim.whatif",
    # sweeps
    "make_grid": "fastsim.sweep",
    "load_grid": "fastsim.sweep",
    "analytic_table": "fastsim.sweep",
    "run_sweep": "fastsim.sweep",
    "read_table": "fastsim.sweep",
    # plots
    "plot_simulation": "fastsim.plots",
    "plot_capacity": "fastsim.plots",
}

__all__ = sorted(_LAZY) + ["__version__", "warmup"]


def warmup() -> None:
    """Compile (or load from the numba cache) the planner's kernels once, so later calls run at full speed.

    Runs a tiny analytic screen and tiny colocated and disaggregated verifications (the kernels
    of :func:`screen`, :func:`verify` and :func:`simulate`), then :func:`fastsim.sim.warmup`
    (every simulator kernel, including the batch kernels of :func:`simulate_batch` and
    :func:`max_sustainable_rate`).

    Returns
    -------
    None
    """
    from .analytic import Demand, screen
    from .catalog import default_catalog
    from .search import SLO, verify
    cat = default_catalog()
    chat = cat.scenario("chat")
    grid = screen(chat.model, Demand.from_scenario(chat), catalog=cat)
    from .workload import synthesize
    w = synthesize(chat, 2.0, 10.0, 0)
    wl = [(w.arrival_s, w.prompt_tokens, w.output_tokens)]
    for mode in ("colocated", "disaggregated"):
        rows = grid[grid.feasible & (grid["mode"] == mode)]
        if len(rows):
            verify(rows.iloc[0].plan, wl, SLO(chat.ttft_s, chat.tpot_s), horizon_s=10.0, catalog=cat)
    from .sim import warmup as sim_warmup
    sim_warmup()


def __dir__():
    return sorted(set(globals()) | set(__all__))


def __getattr__(name):
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'fastsim' has no attribute {name!r}")
    mod, attr = target if isinstance(target, tuple) else (target, name)
    return getattr(importlib.import_module(mod), attr)
