"""Benchmarks of the fleet simulator (:mod:`fastsim.fleet`): a fortnight of production traffic.

Run with ``pytest benchmarks/bench_fleet.py --benchmark-enable``; under the default
``--benchmark-disable`` it runs once as a test on the profile's first two hours. Target on 2
cores: the whole m-large fortnight (14 days of 600-s windows, about 237 million requests) with
reactive autoscaling, simulated in <= 120 s with <= 4 GB of memory.

The fleet: chat-scenario requests (Llama-3.1-70B, lognormal prompts of mean 1,000 tokens and
outputs of mean 250, P90 TTFT <= 1 s, P90 TPOT <= 50 ms) on B200 FP8 TP1 colocated instances
(chunk 512), the m-large profile as shipped (``rate_scale`` 1: 48 to 583 req/s, mean 196), the
reactive autoscaler of :func:`fastsim.fleet.strategies.reactive_targets` at its defaults on the
capacity curve below, cold start of :func:`fastsim.fleet.strategies.cold_start` for 70.6 GB of
FP8 weights. The capacity curve (req/s of N instances: 1: 15.14, 2: 30.45, 6: 96.47, 16: 258.1,
39: 631.5) was measured by ``fastsim fleet --profile m-large --rate-scale 1 --gpu B200
--precision FP8 --tp 1`` (2 seeds x 600 s per point); it is fixed here so that the benchmark
times the simulation alone. The run happens in a subprocess so that its peak memory is its own.
"""
import json
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import json, resource, sys, time
    from fastsim import bench as B
    from fastsim import workload as W
    from fastsim.catalog import default_catalog
    from fastsim.fleet import ProfileArrivals, simulate_fleet
    from fastsim.fleet import strategies as S

    horizon_s = float(sys.argv[1])
    chat = default_catalog().scenario("chat")
    prof = W.read_rate_profile("m-large")
    curve = S.CapacityCurve.from_points([1, 2, 6, 16, 39], [15.14, 30.45, 96.47, 258.1, 631.5])
    target = S.reactive_targets(prof.window_start_s, prof.rate_req_per_s, curve)
    cold = S.cold_start(70.6e9)
    sch = S.schedule_from_targets(prof.window_start_s, target, cold_start_s=cold.total_s, horizon_s=horizon_s)
    work = ProfileArrivals(chat, prof, seed=0, horizon_s=horizon_s)
    kw = dict(ttft_slo_s=chat.ttft_s, tpot_slo_s=chat.tpot_s)
    simulate_fleet(B.standard_plan(), W.synthesize(chat, 1.0, 10.0), S.static_schedule(1), **kw)   # load the kernels
    t0 = time.perf_counter()
    run = simulate_fleet(B.standard_plan(), work, sch, **kw)
    dt = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps(dict(seconds=dt, requests=run.n_requests, attainment=run.attainment, lifetimes=len(sch.ready_s),
                          max_rss_mb=rss)))
""")


def _enabled(request):
    opt = request.config.getoption
    return bool(opt("benchmark_enable", default=False) or not opt("benchmark_disable", default=True))


def run_fortnight(horizon_s: float) -> dict:
    """Simulate the reactive m-large fleet to ``horizon_s`` in a fresh process; its figures."""
    out = subprocess.run([sys.executable, "-c", SCRIPT, repr(horizon_s)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def warm():
    from fastsim import bench as B
    from fastsim import workload as W
    from fastsim.fleet import simulate_fleet
    from fastsim.fleet import strategies as S
    simulate_fleet(B.standard_plan(), W.synthesize("chat", 1.0, 10.0), S.static_schedule(1), ttft_slo_s=1.0,
                   tpot_slo_s=0.05)


def test_m_large_fortnight_reactive(benchmark, warm, request):
    horizon_s = 14 * 86400.0 if _enabled(request) else 7200.0
    box = {}

    def go():
        box.update(run_fortnight(horizon_s))
    benchmark.pedantic(go, rounds=1, iterations=1)
    benchmark.extra_info.update(box)
    print(f"\nm-large reactive fleet over {horizon_s / 86400:g} days: {box['requests']:,} requests simulated in "
          f"{box['seconds']:.1f} s ({box['requests'] / box['seconds'] / 1e6:.2f} M req/s), attainment "
          f"{box['attainment']:.4f}, {box['lifetimes']} instance lifetimes, peak memory {box['max_rss_mb']:.0f} MB")
    # the profile's expected count over the period, within 0.1% (Poisson: sd 0.002% of 237 M)
    from fastsim import workload as W
    expected = W.read_rate_profile("m-large").expected_requests(horizon_s)
    assert abs(box["requests"] - expected) < 1e-3 * expected + 5 * expected ** 0.5
    assert box["max_rss_mb"] < 4096
