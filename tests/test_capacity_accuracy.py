"""The sweep's capacity search gives the one-plan search's answer, to its tolerance or inside its 95% interval.

``fastsim sweep --capacity`` searches every point with :func:`fastsim.search.max_sustainable_rates`:
families warm-started along their instance counts and from their group's peers, probes in stages
decided early (an exact bound, and the sequential test), runs stopped once their misses fail the
probe, regula falsi inside a bracket. On 64 configurations of the four scenarios (H100 and B200
FP8, TP 1 and 2, 1 to 6 instances: every analytically feasible one), each estimate must lie within
``--tol`` of :func:`fastsim.search.max_sustainable_rate`'s (the plain bisection, every seed of every
probe, whole runs) with the same seeds, horizon and tolerance, or inside its 95% interval. Eight
seeds x 150 s keep it affordable on 2 cores (about a minute); both searches use the same.
"""
import numpy as np

from fastsim import sweep as SW
from fastsim.catalog import default_catalog
from fastsim.search import SLO, max_sustainable_rate
from fastsim.sweep.tasks import _workload_seed_int

AXES = {"scenario": ["chat", "coding-agent", "offline-batch", "low-latency-8b"], "gpu": ["H100", "B200"],
        "precision": "FP8", "mode": "colocated", "tp": [1, 2], "instances": [1, 2, 3, 4, 5, 6]}
SEEDS, HORIZON_S, TOL, ROOT = 8, 150.0, 0.02, 5


def _plan(row):
    from fastsim.analytic import Plan
    return Plan(model=row.model, gpu=row.gpu, precision=row.precision, mode="colocated", tp=int(row.tp),
                instances=int(row.instances), chunk_tokens=int(row.chunk_tokens), batch=int(row.batch),
                instance_capacity_req_per_s=float(row.instance_capacity_req_per_s),
                price_usd_per_gpu_hour=float(row.price_usd_per_gpu_hour), layout=row.layout,
                max_batch=int(row.max_batch))


def test_sweep_capacity_equals_the_one_plan_search_on_64_configurations():
    cat = default_catalog()
    df = SW.run_sweep(AXES, verify="all", seeds=SEEDS, horizon_s=HORIZON_S, seed=ROOT, capacity=True,
                      capacity_tol=TOL)
    done = df[df["verified"]]
    assert len(done) >= 48
    off, outside, saved = [], [], 0
    for row in done.itertuples(index=False):
        s = cat.scenario(row.workload)
        one = max_sustainable_rate(_plan(row), s, SLO(s.ttft_s, s.tpot_s), seeds=SEEDS, horizon_s=HORIZON_S,
                                   rel_tol=TOL, seed=_workload_seed_int(ROOT, row.workload))
        a, b = float(row.sim_capacity_req_per_s), one.rate_req_per_s
        assert a > 0 and b > 0
        rel = abs(a - b) / max(a, b)
        off.append(rel)
        if rel > TOL and not (one.ci95[0] <= a <= one.ci95[1]):
            outside.append((row.workload, row.tp, row.gpu, row.instances, a, b, one.ci95))
        saved += sum(one.probe_seeds) - int(row.sim_capacity_seed_runs)
    assert not outside, outside
    # the answers agree far better than the tolerance on most configurations ...
    assert np.median(off) <= 0.25 * TOL
    # ... for far fewer runs than the plain bisection's
    assert saved > 0.3 * sum(int(r) for r in done["sim_capacity_seed_runs"])
