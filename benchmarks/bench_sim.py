"""Benchmarks of the serving simulator (SPEC section 6) on the standard workloads of :mod:`fastsim.bench`.

Run with ``pytest benchmarks/bench_sim.py --benchmark-enable``; under the default
``--benchmark-disable`` each runs once as a test and the two process-start measurements are
skipped. The kernels are compiled (or loaded from the numba cache) before timing: warm figures.
Targets on 2 cores:

- one 600-s chat run at 20 req/s on 2 x B200 FP8 TP1 colocated, chunk 512: <= 5 ms, and >= 5
  million simulated requests per second per core; the same run on 2 prefill + 1 decode
  disaggregated instances: <= 3 ms; a verify run at light load (low-latency-8b at 16 req/s on 16
  x H100 FP8 TP1, nearly all quiet decode steps): figure printed;
- 16 seeds x 8 rates (128 runs) in parallel: <= 0.3 s, and >= 1.7x faster on 2 threads than on 1
  (``numba.set_num_threads`` in the same process, interleaved calls);
- >= 200x the plain-Python reference per simulated request (reference on the first 60 s);
- a fresh process loading the cached kernels and running one simulation: <= 2 s; compiling
  every lecture-policy kernel from an empty cache: <= 30 s (subprocesses with their own
  ``NUMBA_CACHE_DIR``; the engine-policy kernels compile on first use, about 20 s more);
- the engine policies (``fastsim.sim.policy``) on the same chat run: ``vllm`` and ``sglang``,
  figures printed beside the lecture policy's;
- the chat run on the same two GPUs as one pipeline-parallel instance (TP1 x PP2,
  ``fastsim.sim.pipeline``), under the lecture policy and ``trtllm``: figures printed (a plain
  event loop over the micro-batches: about 20 ms under the lecture policy, 70 ms under trtllm,
  against 2.5 ms for the colocated run).
"""
import os
import subprocess
import sys
import textwrap
import time

import numba
import numpy as np
import pytest

from fastsim import bench as B
from fastsim.catalog import default_catalog
from fastsim.sim import simulate, simulate_batch, warmup
from fastsim.sim.reference import simulate_reference

CHAT = default_catalog().scenario("chat")
KW = dict(horizon_s=B.HORIZON_S, ttft_slo_s=CHAT.ttft_s, tpot_slo_s=CHAT.tpot_s)
PLAN = B.standard_plan()


@pytest.fixture(scope="module")
def warm():
    warmup()


@pytest.fixture(scope="module")
def chat():
    return B.chat_workload()


@pytest.fixture(scope="module")
def grid():
    return B.grid_workloads()


def _enabled(request):
    opt = request.config.getoption
    return bool(opt("benchmark_enable", default=False) or not opt("benchmark_disable", default=True))


def test_chat_600s_20rps_2xB200(benchmark, warm, chat):
    w = chat
    r = benchmark(simulate, PLAN, w.arrival_s, w.prompt_tokens, w.output_tokens, **KW)
    assert r.metrics.attainment > 0.9 and not r.metrics.overloaded
    if benchmark.stats is not None and benchmark.stats.stats.rounds > 1:
        med = benchmark.stats.stats.median
        benchmark.extra_info["requests"] = int(w.n)
        benchmark.extra_info["requests_per_s_per_core"] = w.n / med
        benchmark.extra_info["ms_per_run"] = med * 1e3
        print(f"\nchat run: {med * 1e3:.2f} ms, {w.n / med / 1e6:.2f} million requests/s per core")


def test_light_load_16_instances(benchmark, warm):
    """A sweep's verify run at light load: low-latency-8b at its 16 req/s on 16 x H100 FP8 TP1 (600 s).

    Each instance mostly decodes one or two requests alone, so nearly every step is a quiet
    decode step (the kernel's tight loop): about 15 ms a run on 2 cores (23 ms before that loop).
    """
    from fastsim.analytic import Demand, plan_for
    from fastsim.search import sim_plan
    from fastsim.workload import synthesize
    cat = default_catalog()
    s = cat.scenario("low-latency-8b")
    plan = sim_plan(plan_for(s.model, Demand.from_scenario(s), gpu="H100", precision="FP8", tp=1, instances=16,
                             catalog=cat), cat)
    w = synthesize(s, s.rate_req_per_s, B.HORIZON_S, 0)
    r = benchmark(simulate, plan, w.arrival_s, w.prompt_tokens, w.output_tokens, horizon_s=B.HORIZON_S,
                  ttft_slo_s=s.ttft_s, tpot_slo_s=s.tpot_s)
    assert r.metrics.attainment > 0.99 and r.metrics.mean_batch.max() < 4
    if benchmark.stats is not None and benchmark.stats.stats.rounds > 1:
        med = benchmark.stats.stats.median
        benchmark.extra_info["ms_per_run"] = med * 1e3
        print(f"\nlight-load 16-instance run: {med * 1e3:.2f} ms")


def test_chat_600s_disaggregated(benchmark, warm, chat):
    """The chat run on a disaggregated plan: 2 prefill + 1 decode B200 FP8 TP1 (target <= 3 ms)."""
    from fastsim.sim import DisaggregatedPlan
    w = chat
    plan = DisaggregatedPlan(PLAN.p, 2, PLAN.p, 1)
    r = benchmark(simulate, plan, w.arrival_s, w.prompt_tokens, w.output_tokens, **KW)
    assert r.metrics.attainment > 0.9 and not r.metrics.overloaded
    if benchmark.stats is not None and benchmark.stats.stats.rounds > 1:
        med = benchmark.stats.stats.median
        benchmark.extra_info["ms_per_run"] = med * 1e3
        print(f"\ndisaggregated chat run: {med * 1e3:.2f} ms")


@pytest.mark.parametrize("policy", ["vllm", "sglang"])
def test_chat_600s_engine_policy(benchmark, warm, chat, policy):
    """The chat run under an engine policy; the issue's floor is 2x the lecture policy's time for vllm."""
    w = chat
    r = benchmark(simulate, PLAN, w.arrival_s, w.prompt_tokens, w.output_tokens, policy=policy, **KW)
    assert r.metrics.policy == policy and r.metrics.finished > 0.9 * w.n
    if benchmark.stats is not None and benchmark.stats.stats.rounds > 1:
        med = benchmark.stats.stats.median
        benchmark.extra_info["ms_per_run"] = med * 1e3
        print(f"\nchat run under {policy}: {med * 1e3:.2f} ms")


@pytest.mark.parametrize("policy", ["lecture", "trtllm"])
def test_chat_600s_pipeline_parallel(benchmark, warm, chat, policy):
    """The chat run on one TP1 x PP2 instance of the standard plan's model and GPU (its two GPUs)."""
    from fastsim.sim import PipelinePlan
    from fastsim.stepmodel import stage_params
    cat = default_catalog()
    plan = PipelinePlan(stage_params(cat.model("llama-3.1-70b"), cat.gpu("B200"), cat.precision("FP8"), 1, pp=2),
                        1, PLAN.chunk_tokens)
    w = chat
    r = benchmark(simulate, plan, w.arrival_s, w.prompt_tokens, w.output_tokens, policy=policy, **KW)
    assert r.metrics.finished > 0.9 * w.n and not r.metrics.overloaded
    if benchmark.stats is not None and benchmark.stats.stats.rounds > 1:
        med = benchmark.stats.stats.median
        benchmark.extra_info["ms_per_run"] = med * 1e3
        print(f"\nchat run on TP1 x PP2 under {policy}: {med * 1e3:.1f} ms")


def test_mooncake_prefix_caching(benchmark, warm):
    """The 12,031-request Mooncake trace on 4 x H100 FP8 TP1 (Llama-3.1-8B), vllm, prefix-aware routing."""
    from fastsim.sim import ColocatedPlan
    from fastsim.stepmodel import step_params
    from fastsim.workload import read_trace
    cat = default_catalog()
    wl = read_trace("mooncake-conv")
    plan = ColocatedPlan(step_params(cat.model("llama-3.1-8b"), cat.gpu("H100"), cat.precision("FP8"), 1), 4, 512)
    kw = dict(horizon_s=float(np.nextafter(wl.horizon_s, np.inf)), ttft_slo_s=2.0, tpot_slo_s=0.1, policy="vllm",
              routing="prefix-aware", prefix=wl.prefix)
    r = benchmark(simulate, plan, wl.arrival_s, wl.prompt_tokens, wl.output_tokens, **kw)
    assert r.metrics.cache_hit_fraction > 0.1
    if benchmark.stats is not None and benchmark.stats.stats.rounds > 1:
        med = benchmark.stats.stats.median
        benchmark.extra_info["ms_per_run"] = med * 1e3
        print(f"\nmooncake with prefix caching: {med * 1e3:.1f} ms")


@pytest.mark.parametrize("threads", ["all", 1])
def test_batch_16_seeds_x_8_rates(benchmark, warm, grid, threads):
    before = numba.get_num_threads()
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS if threads == "all" else threads)
    try:
        ms = benchmark(simulate_batch, [PLAN], grid, **KW)
    finally:
        numba.set_num_threads(before)
    assert len(ms) == 128
    assert not ms[0].overloaded and ms[-1].overloaded
    n = sum(w.n for w in grid)
    if benchmark.stats is not None and benchmark.stats.stats.rounds > 1:
        med = benchmark.stats.stats.median
        t = numba.config.NUMBA_NUM_THREADS if threads == "all" else threads
        benchmark.extra_info["requests"] = int(n)
        benchmark.extra_info["requests_per_s_per_core"] = n / med / t


def test_parallel_speedup(request, warm, grid):
    """The grid on 2 threads against 1 thread, same process: medians of interleaved calls.

    Target (2 cores): speed-up >= 1.7 and <= 0.3 s on 2 threads; the figures are printed, and
    asserted loosely (a second core busy with other work lowers them) only when benchmarking.
    """
    rounds = 9 if _enabled(request) else 1
    t2 = min(2, numba.config.NUMBA_NUM_THREADS)
    t1, tn = [], []
    before = numba.get_num_threads()
    try:
        simulate_batch([PLAN], grid, **KW)
        for _ in range(rounds):
            for t, acc in ((1, t1), (t2, tn)):
                numba.set_num_threads(t)
                t0 = time.perf_counter()
                simulate_batch([PLAN], grid, **KW)
                acc.append(time.perf_counter() - t0)
    finally:
        numba.set_num_threads(before)
    speedup = np.median(t1) / np.median(tn)
    print(f"\ngrid: {np.median(t1):.3f} s on 1 thread, {np.median(tn):.3f} s on {t2}; "
          f"speed-up {speedup:.2f}x")
    if _enabled(request) and t2 >= 2:
        assert speedup > 1.2


def test_reference_ratio(benchmark, warm, chat):
    """The plain-Python reference on the first 60 s of the chat run, per simulated request."""
    w = chat
    k = int(np.searchsorted(w.arrival_s, B.REFERENCE_HORIZON_S))
    args = (w.arrival_s[:k], w.prompt_tokens[:k], w.output_tokens[:k])
    kw = dict(horizon=B.REFERENCE_HORIZON_S, dt=1.0, max_context=131072, routing="least-loaded",
              p=PLAN.p, n_instances=PLAN.n_instances, chunk=PLAN.chunk_tokens)
    benchmark.pedantic(simulate_reference, args=("colocated",) + args, kwargs=kw, rounds=1, iterations=1)
    ref = benchmark.stats.stats.median / k if benchmark.stats is not None else None
    ts = []
    for _ in range(11):
        t0 = time.perf_counter()
        simulate(PLAN, w.arrival_s, w.prompt_tokens, w.output_tokens, **KW)
        ts.append(time.perf_counter() - t0)
    kern = float(np.median(ts)) / w.n
    if ref is not None:
        benchmark.extra_info["reference_us_per_request"] = ref * 1e6
        benchmark.extra_info["kernel_us_per_request"] = kern * 1e6
        benchmark.extra_info["ratio"] = ref / kern
        print(f"\nreference {ref * 1e6:.1f} us/request, kernels {kern * 1e6:.3f} us/request: {ref / kern:.0f}x")


_ONE_RUN = textwrap.dedent("""
    import time
    t0 = time.perf_counter()
    from fastsim.sim import simulate, warmup
    from fastsim import bench as B
    {warm}
    plan = B.standard_plan()
    w = B.chat_workload()
    r = simulate(plan, w.arrival_s, w.prompt_tokens, w.output_tokens, horizon_s=600.0, ttft_slo_s=1.0,
                 tpot_slo_s=0.05)
    assert r.metrics.finished > 0
    print(time.perf_counter() - t0)
""")


def _process(cache_dir, warm_all):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    code = _ONE_RUN.format(warm="warmup(engine_policies=False)" if warm_all else "")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, timeout=600)
    return time.perf_counter() - t0


def test_cold_compile_and_cached_start(request, tmp_path):
    """Compile every simulator kernel into an empty cache; then a fresh process runs one simulation."""
    if not _enabled(request):
        pytest.skip("process-start figures only with --benchmark-enable (about 30 s)")
    cold = _process(tmp_path, warm_all=True)
    cached = min(_process(tmp_path, warm_all=False) for _ in range(3))
    print(f"\ncold compile + one run: {cold:.1f} s; cached start + one run: {cached:.2f} s")
    assert cold <= 30.0
    assert cached <= 2.0
