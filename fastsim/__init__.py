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
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'fastsim' has no attribute {name!r}")
    return getattr(importlib.import_module(mod), name)
