"""Standard benchmarks of the simulator (``fastsim bench``); the workloads stay fixed across releases.

Four measurements, all warm (the kernels are compiled or loaded from the numba cache first):

- one 600-s chat run: Llama-3.1-70B on 2 x B200 FP8 TP1 colocated instances, chunk 512, Poisson
  arrivals at 20 req/s (:func:`fastsim.workload.synthesize`, seed 2024), one thread;
- a parallel grid: the same plan at 8 rates from 10 to 38 req/s x 16 seeds (128 runs of 600 s,
  common random numbers from seed 7), metrics only, on one thread and on all threads;
- the plain-Python reference (:mod:`fastsim.sim.reference`) on the first 60 s of the chat
  workload, compared per simulated request with the 600-s kernel run;
- a capacity sweep: chat on B200 FP8 at TP 1 and 2 and 1 to 8 colocated instances
  (:data:`CAPACITY_AXES`), every configuration that serves the scenario's rate searched for its
  maximum sustainable rate at 16 seeds x 600 s to 1%, together, as ``fastsim sweep --capacity``
  searches them, on all threads: configurations per second, and the probes and seed-runs a
  search took.

Times are medians of repeated wall-clock measurements (``time.perf_counter``).
"""
from __future__ import annotations

import math
import time

import numpy as np

__all__ = ["CAPACITY_AXES", "CAPACITY_SEEDS", "CAPACITY_TOL", "CHAT_RATE_REQ_PER_S", "GRID_RATES_REQ_PER_S",
           "GRID_SEEDS", "HORIZON_S", "REFERENCE_HORIZON_S", "standard_plan", "chat_workload", "grid_workloads",
           "run_benchmarks", "bench_notes", "render_benchmarks"]

HORIZON_S = 600.0
CHAT_RATE_REQ_PER_S = 20.0
CHAT_SEED = 2024
GRID_RATES_REQ_PER_S = tuple(float(x) for x in np.linspace(10.0, 38.0, 8))
GRID_SEEDS = 16
GRID_SEED = 7
REFERENCE_HORIZON_S = 60.0
#: The capacity sweep's grid (its feasible points are verified and searched) and its settings.
CAPACITY_AXES = {"scenario": "chat", "gpu": "B200", "precision": "FP8", "mode": "colocated", "tp": [1, 2],
                 "instances": list(range(1, 9))}
CAPACITY_SEEDS = 16
CAPACITY_TOL = 0.01
# --quick: the same plan and rates on shorter horizons and fewer seeds (a smoke test, not a figure)
_QUICK = dict(horizon_s=60.0, grid_seeds=2, reference_horizon_s=5.0, repeat_single=3, repeat_grid=1,
              capacity_seeds=8, capacity_instances=[2, 3])
_FULL = dict(horizon_s=HORIZON_S, grid_seeds=GRID_SEEDS, reference_horizon_s=REFERENCE_HORIZON_S,
             repeat_single=41, repeat_grid=9, capacity_seeds=CAPACITY_SEEDS, capacity_instances=None)


def standard_plan(catalog=None):
    """The benchmark plan: Llama-3.1-70B, 2 x B200 FP8 TP1 colocated instances, chunk 512.

    Parameters
    ----------
    catalog : fastsim.catalog.Catalog, optional
        Default: the built-in catalog (the benchmark's figures refer to it).

    Returns
    -------
    fastsim.sim.ColocatedPlan
    """
    from .catalog import default_catalog
    from .sim import ColocatedPlan
    from .stepmodel import step_params
    cat = catalog or default_catalog()
    chat = cat.scenario("chat")
    p = step_params(cat.model(chat.model), cat.gpu("B200"), cat.precision("FP8"), 1)
    return ColocatedPlan(p, 2, 512)


def chat_workload(horizon_s: float = HORIZON_S, rate_req_per_s: float = CHAT_RATE_REQ_PER_S,
                  seed: int = CHAT_SEED):
    """The chat scenario's lengths with Poisson arrivals (:func:`fastsim.workload.synthesize`).

    Parameters
    ----------
    horizon_s : float
        Arrival window (s).
    rate_req_per_s : float
        Arrival rate (req/s).
    seed : int
        Root seed.

    Returns
    -------
    fastsim.workload.Workload
        ``arrival_s`` float64 of shape (n,), ``prompt_tokens`` / ``output_tokens`` int64 of shape (n,).
    """
    from .workload import synthesize
    return synthesize("chat", rate_req_per_s, horizon_s, seed)


def grid_workloads(horizon_s: float = HORIZON_S, n_seeds: int = GRID_SEEDS,
                   rates=GRID_RATES_REQ_PER_S, seed: int = GRID_SEED) -> list:
    """Rate-major list of chat workloads, ``len(rates) * n_seeds``, common random numbers per seed.

    Parameters
    ----------
    horizon_s : float
        Arrival window (s).
    n_seeds : int
        Replications (child seeds of ``seed``).
    rates : sequence of float
        Arrival rates (req/s).
    seed : int
        Root seed.

    Returns
    -------
    list of fastsim.workload.Workload
    """
    from .workload import seeds_for, synthesize
    children = seeds_for(seed, n_seeds)
    return [synthesize("chat", r, horizon_s, s) for r in rates for s in children]


def _median_time(fn, repeat: int) -> float:
    ts = []
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def run_benchmarks(quick: bool = False) -> dict:
    """Measure the simulator on the standard workloads.

    Parameters
    ----------
    quick : bool
        Shorter horizons (60 s), 2 seeds, one repetition of the grid: a few seconds, for smoke
        tests. The figures of a quick run are not comparable with a full one.

    Returns
    -------
    dict
        ``threads`` (numba threads available), ``horizon_s``, ``chat_requests``,
        ``chat_run_ms`` (median ms per chat run, one thread), ``requests_per_s_per_core``
        (simulated requests per second of one core, chat run), ``grid_runs``,
        ``grid_requests``, ``grid_s_1_thread``, ``grid_s_all_threads`` (median s per grid),
        ``parallel_speedup`` (1 thread / all threads), ``grid_requests_per_s_per_core``,
        ``reference_requests``, ``reference_s``, ``reference_us_per_request``,
        ``kernel_us_per_request``, ``reference_ratio`` (reference / kernel cost per request),
        ``capacity_configs`` (configurations of the capacity sweep), ``capacity_seeds``,
        ``capacity_sweep_s`` (its wall time), ``capacity_configs_per_s``,
        ``capacity_probes_per_search``, ``capacity_seed_runs_per_search``,
        ``capacity_stopped_fraction`` (runs stopped early / runs), ``quick``.
    """
    import numba

    from .sim import simulate, simulate_batch, warmup
    from .sim.reference import simulate_reference

    cfg = _QUICK if quick else _FULL
    horizon = cfg["horizon_s"]
    cat_plan = standard_plan()
    from .catalog import default_catalog
    chat = default_catalog().scenario("chat")
    kw = dict(horizon_s=horizon, ttft_slo_s=chat.ttft_s, tpot_slo_s=chat.tpot_s)
    warmup()
    w = chat_workload(horizon)
    simulate(cat_plan, w.arrival_s, w.prompt_tokens, w.output_tokens, **kw)
    single = _median_time(lambda: simulate(cat_plan, w.arrival_s, w.prompt_tokens, w.output_tokens, **kw),
                          cfg["repeat_single"])
    works = grid_workloads(horizon, cfg["grid_seeds"])
    n_grid = int(sum(x.n for x in works))
    threads = int(numba.config.NUMBA_NUM_THREADS)
    before = numba.get_num_threads()
    t1, tn = [], []
    try:
        simulate_batch([cat_plan], works, **kw)
        # interleaved, so that a second core busy for a while with other work hits both sides
        for _ in range(max(1, cfg["repeat_grid"])):
            for t, acc in ((1, t1), (threads, tn)):
                numba.set_num_threads(t)
                t0 = time.perf_counter()
                simulate_batch([cat_plan], works, **kw)
                acc.append(time.perf_counter() - t0)
    finally:
        numba.set_num_threads(before)
    grid_1 = float(np.median(t1))
    grid_n = float(np.median(tn))
    # the reference on the first part of the same chat workload
    rh = cfg["reference_horizon_s"]
    k = int(np.searchsorted(w.arrival_s, rh, side="left"))
    t0 = time.perf_counter()
    simulate_reference("colocated", w.arrival_s[:k], w.prompt_tokens[:k], w.output_tokens[:k], horizon=rh,
                       dt=1.0, max_context=131072, routing="least-loaded", p=cat_plan.p,
                       n_instances=cat_plan.n_instances, chunk=cat_plan.chunk_tokens)
    ref_s = time.perf_counter() - t0
    ref_us = ref_s / max(k, 1) * 1e6
    kern_us = single / max(w.n, 1) * 1e6
    cap = _capacity_sweep(horizon, cfg)
    return {
        "threads": threads,
        "horizon_s": horizon,
        "chat_requests": int(w.n),
        "chat_run_ms": single * 1e3,
        "requests_per_s_per_core": w.n / single,
        "grid_runs": len(works),
        "grid_requests": n_grid,
        "grid_s_1_thread": grid_1,
        "grid_s_all_threads": grid_n,
        "parallel_speedup": grid_1 / grid_n,
        "grid_requests_per_s_per_core": n_grid / grid_n / threads,
        "reference_requests": k,
        "reference_s": ref_s,
        "reference_us_per_request": ref_us,
        "kernel_us_per_request": kern_us,
        "reference_ratio": ref_us / kern_us if kern_us > 0 else math.nan,
        **cap,
        "quick": bool(quick),
    }


def _capacity_sweep(horizon_s: float, cfg: dict) -> dict:
    """Time the capacity searches of :data:`CAPACITY_AXES` (``capacity_*`` keys of :func:`run_benchmarks`).

    The configurations are the analytic plans of the grid that serve the chat scenario's rate
    (:func:`fastsim.analytic.plan_for` at each TP and instance count; those that do not, the
    sweep's infeasible rows, are left out), searched together as ``fastsim sweep --capacity``
    searches a chunk (:func:`fastsim.search.max_sustainable_rates`, warm starts and sequential
    probes on). A small search of two of them (2 seeds x 30 s) runs first, untimed.
    """
    from .analytic import Demand, plan_for
    from .catalog import default_catalog
    from .search import SLO, max_sustainable_rates
    cat = default_catalog()
    a = CAPACITY_AXES
    chat = cat.scenario(a["scenario"])
    counts = cfg["capacity_instances"] or a["instances"]
    plans = [plan_for(chat.model, Demand.from_scenario(chat), gpu=a["gpu"], precision=a["precision"], tp=tp,
                      instances=n, catalog=cat) for tp in a["tp"] for n in counts]
    plans = [p for p in plans if p.capacity_req_per_s >= chat.rate_req_per_s]
    slo = SLO(chat.ttft_s, chat.tpot_s)
    max_sustainable_rates(plans[:2], chat, slo, seeds=2, horizon_s=30.0, rel_tol=CAPACITY_TOL)
    t0 = time.perf_counter()
    res = max_sustainable_rates(plans, chat, slo, seeds=cfg["capacity_seeds"], horizon_s=horizon_s,
                                rel_tol=CAPACITY_TOL)
    sweep_s = time.perf_counter() - t0
    n = len(res)
    runs = sum(r.seed_runs for r in res)
    return {
        "capacity_configs": n,
        "capacity_seeds": int(cfg["capacity_seeds"]),
        "capacity_sweep_s": sweep_s,
        "capacity_configs_per_s": n / sweep_s if sweep_s > 0 else math.nan,
        "capacity_probes_per_search": sum(len(r.probes) for r in res) / n if n else math.nan,
        "capacity_seed_runs_per_search": runs / n if n else math.nan,
        "capacity_stopped_fraction": sum(r.stopped_runs for r in res) / runs if runs else math.nan,
    }


def bench_notes(res: dict) -> list:
    """The notes of a benchmark result (what its figures need to be read right).

    Parameters
    ----------
    res : dict
        :func:`run_benchmarks`.

    Returns
    -------
    list of str
    """
    return ["--quick: short horizons, not comparable with a full run"] if res.get("quick") else []


def render_benchmarks(res: dict, fmt: str = "table") -> str:
    """What ``fastsim bench --format FMT`` prints for a benchmark result.

    Parameters
    ----------
    res : dict
        :func:`run_benchmarks`.
    fmt : {'table', 'json', 'csv'}
        ``json``: one object, the result with ``null_reasons`` and ``notes``; ``csv``: the same
        record as one row (the project's CSV convention, :func:`fastsim._output.csv_frame`: one
        column per key, ``null_reasons`` flattened to ``null_reasons.FIELD`` columns, the notes as
        a JSON array in a ``notes`` column, non-finite values empty); ``table``: the measures,
        then the notes as ``note:`` lines.

    Returns
    -------
    str
        The text, ending with a newline.

    Raises
    ------
    ValueError
        An unknown format.
    """
    notes = bench_notes(res)
    if fmt in ("json", "csv"):
        from ._output import csv_frame, dumps, null_reasons
        rec = dict(res, null_reasons=null_reasons(res))
        if fmt == "json":
            return dumps(dict(rec, notes=notes)) + "\n"
        return csv_frame([rec], notes).to_csv(index=False)
    if fmt != "table":
        raise ValueError(f"format {fmt!r}: table, json or csv")
    from tabulate import tabulate
    rows = [
        ["600-s chat run" if not res["quick"] else f"{res['horizon_s']:g}-s chat run",
         f"{res['chat_run_ms']:.2f} ms", f"{res['chat_requests']:,} requests, one thread"],
        ["simulated requests / s / core", f"{res['requests_per_s_per_core'] / 1e6:.2f} M",
         f"grid: {res['grid_requests_per_s_per_core'] / 1e6:.2f} M on {res['threads']} threads"],
        [f"grid of {res['grid_runs']} runs", f"{res['grid_s_all_threads']:.3f} s",
         f"{res['threads']} threads; {res['grid_s_1_thread']:.3f} s on one"],
        ["parallel speed-up", f"{res['parallel_speedup']:.2f}x", f"1 vs {res['threads']} threads"],
        ["vs plain-Python reference", f"{res['reference_ratio']:,.0f}x",
         f"{res['reference_us_per_request']:.1f} vs {res['kernel_us_per_request']:.3f} us per request"],
    ]
    if "capacity_configs_per_s" in res:
        rows.append(["capacity sweep", f"{res['capacity_configs_per_s']:.2f} configurations/s",
                     f"{res['capacity_configs']} configurations x {res['capacity_seeds']} seeds x "
                     f"{res['horizon_s']:g} s to {CAPACITY_TOL:.0%}: {res['capacity_sweep_s']:.1f} s; "
                     f"{res['capacity_probes_per_search']:.1f} probes, {res['capacity_seed_runs_per_search']:.0f} "
                     f"seed-runs a search, {res['capacity_stopped_fraction']:.0%} of runs stopped early"])
    out = [tabulate(rows, headers=["measure", "value", "detail"], disable_numparse=True)]
    out += ["note: " + n for n in notes]
    return "\n".join(out) + "\n"
