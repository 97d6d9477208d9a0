"""Benchmarks of the serving simulator (SPEC section 6).

Run with ``pytest benchmarks/bench_sim.py --benchmark-enable``; under the default
``--benchmark-disable`` each runs once as a test. The kernel is compiled (or loaded from the
numba cache) before timing: these are warm figures.

- one 600-s chat simulation at 20 req/s on 2 x B200 FP8 TP1 colocated, chunk 512 (target <= 5 ms);
- one parallel batch of 16 seeds x 8 rates of the same plan (target <= 0.3 s).
"""
import math

import numpy as np
import pytest

from fastsim.catalog import default_catalog
from fastsim.sim import ColocatedPlan, simulate, simulate_batch, warmup
from fastsim.stepmodel import step_params

HORIZON_S = 600.0
CAT = default_catalog()
CHAT = CAT.scenario("chat")
PLAN = ColocatedPlan(step_params(CAT.model(CHAT.model), CAT.gpu("B200"), CAT.precision("FP8"), 1), 2, 512)
RATES = np.linspace(10.0, 38.0, 8)


def _unit_draws(seed, n):
    """Common random numbers: unit-rate arrival times and lognormal chat lengths."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1.0, n))
    lengths = []
    for d in (CHAT.prompt, CHAT.output):
        mu = math.log(d.mean) - d.sigma ** 2 / 2.0
        lengths.append(np.maximum(1, np.rint(rng.lognormal(mu, d.sigma, n))).astype(np.int64))
    return t, lengths[0], lengths[1]


def _workload(unit, rate):
    t, p, o = unit
    a = t / rate
    k = int(np.searchsorted(a, HORIZON_S, side="left"))
    return a[:k], p[:k], o[:k]


@pytest.fixture(scope="module")
def warm():
    warmup()


def test_chat_600s_20rps_2xB200(benchmark, warm):
    a, p, o = _workload(_unit_draws(np.random.SeedSequence(2024), 14_000), 20.0)
    kw = dict(horizon_s=HORIZON_S, ttft_slo_s=CHAT.ttft_s, tpot_slo_s=CHAT.tpot_s)
    r = benchmark(simulate, PLAN, a, p, o, **kw)
    assert r.metrics.attainment > 0.9 and not r.metrics.overloaded


def test_batch_16_seeds_x_8_rates(benchmark, warm):
    units = [_unit_draws(s, int(RATES.max() * HORIZON_S * 1.2))
             for s in np.random.SeedSequence(7).spawn(16)]
    works = [_workload(u, r) for r in RATES for u in units]
    kw = dict(horizon_s=HORIZON_S, ttft_slo_s=CHAT.ttft_s, tpot_slo_s=CHAT.tpot_s)
    ms = benchmark(simulate_batch, [PLAN], works, **kw)
    assert len(ms) == 128
    assert not ms[0].overloaded and ms[-1].overloaded
