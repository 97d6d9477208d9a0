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
    "FastsimInputError": "fastsim.errors",
    "load_catalog": "fastsim.catalog",
    "default_catalog": "fastsim.catalog",
    "model_from_hf_config": "fastsim.catalog",
    "StepConstants": "fastsim.stepmodel",
    "step_params": "fastsim.stepmodel",
    "step_time": "fastsim.stepmodel",
    "Demand": "fastsim.analytic",
    "ScreenOptions": "fastsim.analytic",
    "Plan": "fastsim.analytic",
    "screen": "fastsim.analytic",
    "plan_deployment": "fastsim.planner",
    "SLO": "fastsim.search",
    "verify": "fastsim.search",
    "repair": "fastsim.search",
    "max_sustainable_rate": "fastsim.search",
    "read_trace": "fastsim.workload",
    "synthesize": "fastsim.workload",
    "Workload": "fastsim.workload",
    "ledger": "fastsim.ledger",
    "run_sweep": "fastsim.sweep",
    "ladder": "fastsim.ledger",
}

__all__ = sorted(_LAZY) + ["__version__", "warmup"]


def warmup() -> None:
    """Compile (or load from the numba cache) every kernel once, so later calls run at full speed.

    Runs a tiny analytic screen and tiny colocated and disaggregated simulations.
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


def __getattr__(name):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'fastsim' has no attribute {name!r}")
    return getattr(importlib.import_module(mod), name)
