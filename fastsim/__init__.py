"""fastsim: plan LLM inference deployments.

For a model, a workload and P90 latency SLOs, fastsim finds the cheapest GPU, precision, tensor
parallelism, colocated-or-disaggregated layout and instance count; checks the best plans in a
discrete-event simulation, repairs the ones that fail, and finds the traffic a deployment can
truly sustain.

Heavy submodules load lazily: ``import fastsim`` is cheap.

Code map
--------
Where each stage lives, in the order data flows through ``fastsim plan`` (each package's
``__init__`` opens with a reading guide of its own):

1. :mod:`fastsim.cli` builds the parser from :data:`fastsim.commands.COMMANDS` and runs one
   command; :mod:`fastsim.commands.plan` is ``plan``, and :mod:`fastsim.commands._resolve` turns
   flags into a model, a :class:`~fastsim.plans.Demand`, a plan and engine settings, with the
   argparse types, flag groups and readers of :mod:`fastsim._command_helpers`.
2. :mod:`fastsim.catalog`: GPUs, precisions, models (TOML files, Hugging Face ``config.json``:
   ``catalog/hfconfig.py``) and scenarios; ``catalog/lengths.py``, a length distribution's
   moments within a model's context.
3. The step model: :mod:`fastsim.stepmodel` (the roofline step time and its parameter vector,
   SPEC §3), :mod:`fastsim.constants` (calibration files), :mod:`fastsim.specdec` (speculative
   decoding, SPEC §4); :mod:`fastsim.formulas` holds the closed forms every stage shares (cost per
   million output tokens, instances needed, the M/D/1 wait, tokens per speculative round).
4. :mod:`fastsim.plans`: :class:`~fastsim.plans.Demand`, :class:`~fastsim.plans.ScreenOptions` and
   :class:`~fastsim.plans.Plan`, the records every stage passes on.
5. :mod:`fastsim.analytic` (kernels in ``_analytic_nb.py``): the analytic screen over the whole
   grid, and the instance count each plan needs (SPEC §1, §5).
6. :mod:`fastsim.workload`: synthetic workloads with common random numbers, real traces, rate
   profiles (SPEC §6).
7. :mod:`fastsim.sim`: the discrete-event simulator: inputs, the lecture's scheduler, the vLLM
   and SGLang policies, numba kernels, plain-Python references (SPEC §6).
8. :mod:`fastsim.search`: verification (a pass is sure: the Wilson bound on the pooled
   attainment and the seeds it adds, ``search/confidence.py``), repair, horizon floors and the
   maximum sustainable rate (SPEC §7).
9. :mod:`fastsim.verified` and :mod:`fastsim.planner`: every configuration verified at its
   cheapest passing count, ranked by verified cost; :mod:`fastsim.emit` writes launch commands,
   checked against the engines' start-up rules (:mod:`fastsim.engine_rules`).
10. :mod:`fastsim._output` and :mod:`fastsim.plots`: tables, JSON, CSV and figures.

Beside the plan, on the same stages: :mod:`fastsim.ledger` (one step's token ledger and the
ladder), :mod:`fastsim.whatif` (SPEC §8), :mod:`fastsim.sweep` (grids of configurations),
:mod:`fastsim.fleet` (fleets over time), :mod:`fastsim.calibrate` (fitting the step model),
:mod:`fastsim.validate` (fastsim beside real engines' published figures) and :mod:`fastsim.bench`. Imports point down this list (``tests/test_import_cycles.py`` checks it).
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
