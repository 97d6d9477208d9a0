"""Benchmarks of sweeps (fastsim.sweep).

Run with ``python -m pytest benchmarks/bench_sweep.py --benchmark-enable``; under the default
``--benchmark-disable`` each runs once as a test (the verification one on a 60-s horizon, so the
test suite stays fast). Kernels are compiled (or loaded from the numba cache) before timing.

- the analytic table of a 110,592-point grid (eight GPUs x 2 precisions x TP 1-8 x 3 batch caps
  x 4 scenarios x 8 rates x 3 TPOT targets, colocated at 5 chunk choices and disaggregated, which
  has no chunk axis: each distinct plan once): target <= 1 s on 2 cores;
- the verification of a realistic chat grid (every catalog GPU x FP8/BF16 x colocated /
  disaggregated x TP 1-8 x 4 batch caps x 10/20/30 req/s: 1,536 points, 1,200 of them
  analytically feasible, all simulated) with 4 seeds x 600 s each, i.e. 4,800 simulations in
  batched ``simulate_batch`` calls: target <= 30 s for 1,000 configurations on 2 cores;
- the capacity sweep of 1,171 configurations (4 scenarios x H100 / H200 / B200 x BF16 / FP8 x TP
  1-8 x 1-16 instances) at 16 seeds x 600 s to 1%: target <= 120 s on 2 cores (skipped under
  ``--benchmark-disable``: a pass takes many minutes).
"""
import pytest

from fastsim import sweep as SW

# the eight GPUs the sweep figures were first measured on (``all`` grows with the catalog)
GPUS = ["H100", "H200", "B200", "A100", "H20", "MI300X", "B300", "GB200"]
ANALYTIC_AXES = {
    "gpu": GPUS, "precision": ["BF16", "FP8"], "mode": ["colocated", "disaggregated"], "tp": [1, 2, 4, 8],
    "chunk_tokens": ["auto", 256, 512, 1024, 2048], "max_batch": [0, 64, 128],
    "scenario": ["chat", "coding-agent", "offline-batch", "low-latency-8b"],
    "rate_req_per_s": [1, 2, 5, 10, 20, 30, 50, 100], "tpot_s": [0.02, 0.05, 0.1],
}
VERIFY_AXES = {
    "scenario": "chat", "gpu": GPUS, "precision": ["FP8", "BF16"], "mode": ["colocated", "disaggregated"],
    "tp": [1, 2, 4, 8], "max_batch": [0, 64, 128, 256], "rate_req_per_s": [10, 20, 30],
}


@pytest.fixture(scope="module")
def warm():
    SW.run_sweep({"gpu": "B200", "precision": "FP8", "tp": 1}, verify="all", seeds=1, horizon_s=10.0)


def test_bench_analytic_100k_points(benchmark, warm):
    grid = SW.make_grid(ANALYTIC_AXES)
    assert grid.n_points == 110_592      # 8 x 2 x 4 x 3 x 4 x 8 x 3 x (5 + 1)
    df = benchmark(SW.analytic_table, grid)
    assert len(df) == grid.n_points and df.point_id.is_unique
    if not benchmark.disabled:
        assert benchmark.stats.stats.median <= 1.0


# MoE models with the expert-parallel axis (issue: >= 1e6 configurations per second)
EP_AXES = {
    "model": ["deepseek-v3", "qwen3-235b-a22b", "qwen3-30b-a3b", "mixtral-8x7b"], "gpu": ["H100", "H200", "B200", "H800"],
    "precision": ["BF16", "FP8"], "mode": ["colocated", "disaggregated"], "tp": [1, 2, 4, 8, 16, 32, 64],
    "layout": ["tp", "tp+ep", "dp+ep"], "chunk_tokens": ["auto", 512, 2048], "max_batch": [0, 128],
    "scenario": ["chat", "coding-agent", "offline-batch"], "rate_req_per_s": [2, 5, 10, 20, 50],
    "tpot_s": [0.02, 0.05, 0.1],
}


def test_bench_analytic_moe_ep_axis(benchmark, warm):
    grid = SW.make_grid(EP_AXES)
    assert grid.n_points == 218_880      # each distinct plan once (no chunk axis disaggregated; an MoE TP1 plan once, not per layout)
    df = benchmark(SW.analytic_table, grid)
    assert len(df) == grid.n_points and df.point_id.is_unique
    assert set(df.layout[df.feasible]) == {"tp", "tp+ep", "dp+ep"}
    if not benchmark.disabled:
        assert grid.n_points / benchmark.stats.stats.median >= 1e6


def test_bench_verify_1200_configs_4_seeds_600s(benchmark, warm):
    horizon = 60.0 if benchmark.disabled else 600.0
    grid = SW.make_grid(VERIFY_AXES)
    df = benchmark.pedantic(SW.run_sweep, args=(grid,), kwargs=dict(verify="all", seeds=4, horizon_s=horizon),
                            rounds=1, iterations=1)
    # 4 seeds each, doubled (to 8, then 16) where the Wilson bound cannot decide the pass (fastsim.search.confidence)
    assert df.verified.sum() == 1200 and df.sim_runs[df.verified].isin([4, 8, 16]).all()
    if not benchmark.disabled:
        assert benchmark.stats.stats.median <= 30.0 * 1200 / 1000


# the capacity grid: 4 scenarios x 3 GPUs x 2 precisions x TP 1-8 x 1-16 instances,
# colocated; 1,171 of its 1,536 points are analytically feasible, each verified and searched
CAPACITY_AXES = {"scenario": ["chat", "coding-agent", "offline-batch", "low-latency-8b"],
                 "gpu": ["H100", "H200", "B200"], "precision": ["BF16", "FP8"], "tp": [1, 2, 4, 8],
                 "mode": "colocated", "instances": list(range(1, 17))}


def test_bench_capacity_1000_configs_16_seeds_600s(benchmark, warm):
    """``sweep --verify all --capacity --seeds 16 --tol 0.01`` over the issue's grid (1,171 feasible
    configurations x 16 seeds x 600 s): target <= 120 s on 2 cores. One pass takes many minutes
    on 2 cores (about 20 before the early stops and warm starts, measured at 1.07 s a
    configuration), so it is skipped under the default ``--benchmark-disable``; run it with
    ``--benchmark-enable``. Records the probes, seed-runs and early-stopped runs a search took."""
    if benchmark.disabled:
        pytest.skip("one pass takes many minutes on 2 cores: run with --benchmark-enable")
    grid = SW.make_grid(CAPACITY_AXES)
    df = benchmark.pedantic(SW.run_sweep, args=(grid,), kwargs=dict(verify="all", seeds=16, horizon_s=600.0,
                                                                    capacity=True, capacity_tol=0.01),
                            rounds=1, iterations=1)
    done = df[df.verified]
    assert len(done) >= 1000 and (done.sim_capacity_req_per_s > 0).all()
    benchmark.extra_info["configurations"] = int(len(done))
    benchmark.extra_info["probes_per_search"] = float(done.sim_capacity_probes.mean())
    benchmark.extra_info["seed_runs_per_search"] = float(done.sim_capacity_seed_runs.mean())
    benchmark.extra_info["stopped_runs_fraction"] = float(done.sim_capacity_stopped_runs.sum()
                                                          / done.sim_capacity_seed_runs.sum())
    benchmark.extra_info["configurations_per_s"] = len(done) / benchmark.stats.stats.median
