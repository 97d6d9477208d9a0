"""A first run's compilation (issue 13): one type signature per kernel, the helper's kernels are the ones used.

Nothing here compiles from an empty cache (that is ``benchmarks/bench_first_run.py``): the tests
check the types the kernels are called with, which decide what a first run compiles.
"""
import numba
import numpy as np
import pytest

from fastsim import _precompile
from fastsim.sim import ColocatedPlan, DisaggregatedPlan, simulate, simulate_batch
from fastsim.sim import _kernels as K
from fastsim.sim.engine import warmup_metrics
from fastsim.stepmodel import N_PARAMS, P_KV_BUDGET_TOKENS

KW = dict(horizon_s=10.0, ttft_slo_s=1.0, tpot_slo_s=1.0)


def _plans():
    p = np.ones(N_PARAMS)
    p[P_KV_BUDGET_TOKENS] = 1000.0
    return ColocatedPlan(p, 2, 8), DisaggregatedPlan(p, 1, p, 1)


def _record(monkeypatch, name):
    """Replace kernel ``name`` of the simulator's kernels by a wrapper recording its argument types."""
    seen = []
    real = getattr(K, name)

    def wrapper(*args):
        seen.append(tuple(numba.typeof(a) for a in args))
        return real(*args)

    monkeypatch.setattr(K, name, wrapper)
    return seen


@pytest.mark.parametrize("name", ["_run_nb", "_metrics_nb", "check_one_nb"])
def test_one_signature_per_kernel(monkeypatch, name):
    """Single runs and batches, writable or read-only, int32 or float inputs: the same argument types."""
    seen = _record(monkeypatch, name)
    col, dis = _plans()
    a = np.array([0.0, 0.5, 1.0])
    pt, ot = np.array([10, 20, 5]), np.array([2, 3, 1])
    ro = [x.copy() for x in (a, pt, ot)]
    for x in ro:
        x.setflags(write=False)
    simulate(col, a, pt, ot, **KW)
    simulate(dis, a, pt.astype(np.int32), ot.astype(np.float64), **KW)
    simulate(col, *ro, **KW)
    simulate_batch([col, dis], [(a, pt, ot), tuple(ro)], product=True, **KW)
    simulate_batch([col], [(a, pt, ot)] * 3, full=True, **KW)
    assert len(seen) >= 8 and len(set(seen)) == 1


def test_helper_compiles_the_engines_metrics_kernel(monkeypatch):
    """``warmup_metrics`` (the helper's task) calls ``_metrics_nb`` with the types the engine does."""
    seen = _record(monkeypatch, "_metrics_nb")
    warmup_metrics()
    col, dis = _plans()
    simulate_batch([col, dis], [(np.array([0.0, 0.5]), np.array([10, 20]), np.array([2, 3]))] * 2, product=True,
                   **KW)
    assert len(set(seen)) == 1


def test_precompile_does_nothing_on_a_warm_cache(monkeypatch):
    """With the simulator kernel in the cache (or FASTSIM_PRECOMPILE=0) no helper process starts."""
    started = []
    monkeypatch.setattr(_precompile.subprocess, "Popen", lambda *a, **k: started.append(a))
    monkeypatch.setattr(_precompile, "in_cache", lambda d: True)
    _precompile.plan_kernels()
    monkeypatch.setattr(_precompile, "in_cache", lambda d: False)
    monkeypatch.setenv("FASTSIM_PRECOMPILE", "0")
    _precompile.plan_kernels()
    assert started == []


def test_precompile_starts_the_helper_on_a_cold_cache(monkeypatch):
    """A cold cache: the helper gets the screen's and the metrics' tasks, this process the simulator's."""
    calls = []

    class FakeHelper:
        def __init__(self, argv, **kw):
            calls.append(argv)

        def wait(self, timeout=None):
            calls.append("waited")
            return 0

    monkeypatch.setattr(_precompile.subprocess, "Popen", FakeHelper)
    monkeypatch.setattr(_precompile, "in_cache", lambda d: False)
    monkeypatch.delenv("FASTSIM_PRECOMPILE", raising=False)
    monkeypatch.setenv("FASTSIM_COMPILE_NOTICE", "1")     # main() silences it for the helper
    _precompile.plan_kernels(screen=True)
    argv, waited = calls
    assert waited == "waited" and argv[1] == "-c" and "['screen', 'metrics']" in argv[2]
    _precompile.main(["metrics"])        # the helper's entry point, in this process (a warm cache)


def test_in_cache_never_raises():
    assert _precompile.in_cache(object()) is True
    assert isinstance(_precompile.in_cache(K._run_nb), bool)
