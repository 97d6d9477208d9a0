"""Verification tasks: which points a sweep simulates, and the simulation of one chunk of them.

:func:`_select` picks the points to simulate; :func:`_build_task` packs a chunk of them into a
picklable :class:`_Task` (what a Dask worker receives); :func:`_run_task` simulates it in batches of
(configuration x seed) runs, one :func:`fastsim.sim.simulate_batch` call each, and optionally
bisects each point for its maximum sustainable rate.

Randomness: the workloads of a point come from :func:`_workload_seed`, a function of the root
seed and the point's workload only (common random numbers across configurations and rates).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..catalog import Catalog
from ..stepmodel import N_PARAMS, layout_degrees, stage_params, step_params
from .grid import SweepGrid, SweepSettings, _h64
from .table import _empty_sim, _Tables

def _select(df: pd.DataFrame, s: SweepSettings, grid: SweepGrid | None = None) -> np.ndarray:
    """Boolean mask of the points to simulate.

    Under ``top-k-per-scenario`` with ``grid`` given, the ``top_k`` slots of a question go to
    distinct deployments: a point that is the same deployment for the step model as a cheaper one
    of its question (:func:`_deployment_key`, as :func:`fastsim.verified.same_deployment_key`
    decides it for ``plan``) takes no slot and is not simulated.
    """
    feas = df["feasible"].to_numpy()
    if s.verify == "none":
        return np.zeros(len(df), bool)
    if s.verify == "all":
        return feas.copy()
    f = df[feas]
    order = f.sort_values(["usd_per_million_output_tokens", "efficiency_usd_per_million_output_tokens",
                           "gpus", "point"], kind="stable")
    qcols = ["model", "workload", "rate_req_per_s", "ttft_s", "tpot_s", "price"]
    if grid is None:
        rank = order.groupby(qcols, sort=False).cumcount()
        chosen = order.index[rank.to_numpy() < s.top_k]
    else:
        chosen, taken, seen, cache = [], {}, set(), {}
        for idx, r in zip(order.index, order.itertuples(index=False)):
            q = tuple(getattr(r, c) for c in qcols)
            if taken.get(q, 0) >= s.top_k:
                continue
            key = (q, _deployment_key(r, grid, s, cache))
            if key in seen:
                continue
            seen.add(key)
            taken[q] = taken.get(q, 0) + 1
            chosen.append(idx)
    mask = np.zeros(len(df), bool)
    mask[df.index.get_indexer(chosen)] = True
    return mask


def _deployment_key(r, grid: SweepGrid, s: SweepSettings, cache: dict) -> tuple:
    """What the simulator runs for one point of the table: the step signatures of its instances
    (:func:`fastsim.verified._step_signature`), counts, chunk, batch cap, data-parallel degrees and price."""
    from ..verified import _step_signature
    cat = grid.catalog

    def sig(tp, pp=1):
        key = (r.model, r.gpu, r.precision, int(tp), r.layout, int(pp))
        if key not in cache:
            m = grid.models.get(r.model) or cat.model(r.model)
            dp, ep = layout_degrees(r.layout, int(tp))
            g, pr = cat.gpu(r.gpu), cat.precision(r.precision)
            if pp > 1:       # a pipeline: every stage's vector, in order (as fastsim.verified keys it)
                rows = stage_params(m, g, pr, int(tp), s.constants, pp=int(pp), dp=dp, ep=ep)
                cache[key] = (("pipeline",) + tuple(_step_signature(x) for x in rows), dp)
            else:
                cache[key] = (_step_signature(step_params(m, g, pr, int(tp), s.constants, dp=dp, ep=ep)), dp)
        return cache[key]
    if r.mode == "disaggregated":
        return ("disaggregated", sig(r.prefill_tp), int(r.prefill_instances), sig(r.decode_tp),
                int(r.decode_instances), int(r.max_batch), float(r.price_usd_per_gpu_hour))
    return ("colocated", sig(r.tp, _pp(r)), int(r.instances), int(r.chunk_tokens), int(r.max_batch),
            float(r.price_usd_per_gpu_hour))


def _pp(r) -> int:
    """A table row's pipeline stages (int; 1 where the ``pp`` cell is missing, a disaggregated row)."""
    v = getattr(r, "pp", 1)
    return 1 if v is None or pd.isna(v) else int(v)


def _workload_seed(root: int, label: str) -> np.random.SeedSequence:
    h = int(_h64(f"workload={label}"))
    return np.random.SeedSequence(int(root), spawn_key=(h & 0xFFFFFFFF, h >> 32))


def _workload_seed_int(root: int, label: str) -> int:
    """An integer root seed (63 bits) for the capacity search of a workload: a hash of root and workload."""
    h = hashlib.blake2b(f"capacity:{int(root)}:workload={label}".encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(h, "little") >> 1


@dataclass(frozen=True)
class _Task:
    """One chunk of points to simulate (picklable, sent to Dask workers as is)."""

    points: np.ndarray          # int64 grid index
    mode: np.ndarray            # 1 = disaggregated
    p_a: np.ndarray             # (k, N_PARAMS) colocated / decode params
    p_b: np.ndarray             # (k, N_PARAMS) prefill params
    stages: tuple               # per point: None, or the (pp, N_PARAMS) stage rows of a pipelined instance
    n_a: np.ndarray             # colocated instances / decode instances
    n_b: np.ndarray             # prefill instances
    chunk: np.ndarray
    max_batch: np.ndarray
    src: np.ndarray             # index into sources
    rate: np.ndarray
    ttft: np.ndarray
    tpot: np.ndarray
    max_ctx: np.ndarray
    capacity_analytic: np.ndarray
    plans: tuple                # analytic Plan per point (capacity search only)
    sources: tuple
    models: tuple               # Model per point (capacity search only)
    settings: SweepSettings
    catalog: Catalog | None
    max_requests_per_call: int


def _build_task(df: pd.DataFrame, rows: np.ndarray, grid: SweepGrid, T: _Tables, s: SweepSettings,
                max_requests_per_call: int) -> _Task:
    from ..analytic import Plan
    sub = df.iloc[rows]
    cat = grid.catalog
    k = len(sub)
    p_a = np.zeros((k, N_PARAMS))
    p_b = np.zeros((k, N_PARAMS))
    plans, models, stages = [], [], []
    src_index = {x.label: i for i, x in enumerate(grid.sources)}
    cache = {}
    for j, r in enumerate(sub.itertuples(index=False)):
        m = grid.models.get(r.model) or cat.model(r.model)
        def prm(tp):
            key = (r.model, r.gpu, r.precision, int(tp), r.layout)
            if key not in cache:
                dp, ep = layout_degrees(r.layout, int(tp))
                cache[key] = step_params(m, cat.gpu(r.gpu), cat.precision(r.precision), int(tp), s.constants,
                                         dp=dp, ep=ep)
            return cache[key]
        dis = r.mode == "disaggregated"
        pp = 1 if dis else _pp(r)
        if pp > 1:
            key = (r.model, r.gpu, r.precision, int(r.tp), r.layout, pp)
            if key not in cache:
                dp, ep = layout_degrees(r.layout, int(r.tp))
                cache[key] = stage_params(m, cat.gpu(r.gpu), cat.precision(r.precision), int(r.tp), s.constants,
                                          pp=pp, dp=dp, ep=ep)
            stages.append(cache[key])
            p_a[j] = p_b[j] = cache[key][0]         # not read: the stages are the plan
        else:
            stages.append(None)
            p_a[j] = prm(r.decode_tp if dis else r.tp)
            p_b[j] = prm(r.prefill_tp) if dis else p_a[j]
        models.append(m)
        if s.capacity:
            if dis:
                plans.append(Plan(model=r.model, gpu=r.gpu, precision=r.precision, mode="disaggregated",
                                  tp=int(r.decode_tp), instances=int(r.decode_instances),
                                  prefill_tp=int(r.prefill_tp), prefill_instances=int(r.prefill_instances),
                                  decode_tp=int(r.decode_tp), decode_instances=int(r.decode_instances),
                                  batch=int(r.batch), prefill_capacity_req_per_s=float(r.prefill_capacity_req_per_s),
                                  decode_capacity_req_per_s=float(r.decode_capacity_req_per_s),
                                  instance_capacity_req_per_s=float(r.decode_capacity_req_per_s),
                                  price_usd_per_gpu_hour=float(r.price_usd_per_gpu_hour), layout=r.layout,
                                  max_batch=int(r.max_batch)))
            else:
                plans.append(Plan(model=r.model, gpu=r.gpu, precision=r.precision, mode="colocated", tp=int(r.tp),
                                  instances=int(r.instances), chunk_tokens=int(r.chunk_tokens), batch=int(r.batch),
                                  instance_capacity_req_per_s=float(r.instance_capacity_req_per_s),
                                  price_usd_per_gpu_hour=float(r.price_usd_per_gpu_hour), layout=r.layout,
                                  max_batch=int(r.max_batch), pp=pp))
    dis = (sub["mode"] == "disaggregated").to_numpy()
    return _Task(
        points=sub["point"].to_numpy(np.int64), mode=dis.astype(np.int64), p_a=p_a, p_b=p_b, stages=tuple(stages),
        n_a=np.where(dis, _ints(sub["decode_instances"]), _ints(sub["instances"])),
        n_b=_ints(sub["prefill_instances"]), chunk=_ints(sub["chunk_tokens"]),
        max_batch=sub["max_batch"].to_numpy(np.int64),
        src=np.array([src_index[w] for w in sub["workload"]], dtype=np.int64),
        rate=sub["rate_req_per_s"].to_numpy(np.float64), ttft=sub["ttft_s"].to_numpy(np.float64),
        tpot=sub["tpot_s"].to_numpy(np.float64),
        max_ctx=np.array([m.max_context_tokens for m in models], dtype=np.int64),
        capacity_analytic=sub["capacity_req_per_s"].to_numpy(np.float64),
        plans=tuple(plans), sources=grid.sources, models=tuple(models) if s.capacity else (),
        settings=s, catalog=cat if s.capacity else None, max_requests_per_call=int(max_requests_per_call))


def _ints(col: pd.Series) -> np.ndarray:
    """A nullable integer column as int64, missing values as 0 (the kernels' "does not apply")."""
    return col.fillna(0).to_numpy(np.int64)


def _run_task(task: _Task) -> dict:
    """Simulate the points of a task: batches of (configuration x seed) runs, one kernel call each.

    Each point is judged as ``fastsim plan`` judges a plan (:func:`fastsim.search._pooled`, the
    95% Wilson bound of :mod:`fastsim.search.confidence`); a point the bound cannot decide gets
    more seeds, doubling up to ``MAX_SEED_FACTOR x seeds`` (:func:`fastsim.search.next_seed_count`;
    a trace is replayed once), in further batches of the undecided points only. With the
    capacity search, a point whose capacity's 95% interval lies below its rate does not pass
    (:func:`fastsim.search.capacity_refutation`).

    Returns a dict of simulation columns (arrays aligned with ``task.points``) plus ``point``.
    """
    from .. import workload as W
    from ..search import SLO, MAX_SEED_FACTOR, _pooled, capacity_refutation, next_seed_count
    from ..sim import ColocatedPlan, DisaggregatedPlan, simulate_batch
    s = task.settings
    k = task.points.shape[0]
    out = _empty_sim(k)
    out["point"] = task.points
    window = (0.2, 0.8)
    att = s.slo_percentile / 100.0
    wl_cache: dict = {}

    def workloads(i, n=None):
        """The point's first ``n`` workloads (``s.seeds`` by default; a trace: its one replay) and horizon."""
        src = task.sources[task.src[i]]
        key = (int(task.src[i]), float(task.rate[i]))
        if key not in wl_cache:
            if src.kind == "trace":
                wl = src.obj if key[1] == src.rate_req_per_s else src.obj.rescaled(key[1])
                wl_cache[key] = ([(wl.arrival_s, wl.prompt_tokens, wl.output_tokens)],
                                 float(np.nextafter(wl.duration_s, np.inf)), None)
            else:
                kids = W.seeds_for(_workload_seed(s.seed, src.label), MAX_SEED_FACTOR * s.seeds)
                wl_cache[key] = ([], s.horizon_s, kids)
        wls, hz, kids = wl_cache[key]
        if kids is None:
            return wls, hz
        n = s.seeds if n is None else n
        while len(wls) < n:
            w = W.synthesize(src.obj, key[1], s.horizon_s, kids[len(wls)])
            wls.append((w.arrival_s, w.prompt_tokens, w.output_tokens))
        return wls[:n], hz

    def plan_of(i):
        if task.stages[i] is not None:
            from ..sim import PipelinePlan
            return PipelinePlan(task.stages[i], int(task.n_a[i]), int(task.chunk[i]), int(task.max_batch[i]))
        if task.mode[i]:
            return DisaggregatedPlan(task.p_b[i], int(task.n_b[i]), task.p_a[i], int(task.n_a[i]),
                                     decode_max_batch=int(task.max_batch[i]))
        return ColocatedPlan(task.p_a[i], int(task.n_a[i]), int(task.chunk[i]), int(task.max_batch[i]))

    def record(i, v):
        out["verified"][i] = True
        out["sim_runs"][i] = v.runs
        out["sim_measured"][i] = v.measured
        out["sim_rejected"][i] = v.rejected
        out["sim_attainment"][i] = v.attainment
        out["sim_attainment_ci95_lo"][i] = v.attainment_ci95_lo
        out["sim_attainment_ci95_hi"][i] = v.attainment_ci95_hi
        out["sim_ttft_p90_s"][i] = v.ttft_p90_s
        out["sim_tpot_p90_s"][i] = v.tpot_p90_s
        out["sim_overloaded"][i] = v.overloaded
        out["sim_passed"][i] = v.passed
        out["sim_reason"][i] = v.reason

    pending: dict = {}      # point -> (its results so far, seeds run): undecided, more seeds to come

    def simulate_points(todo):
        """Simulate ``todo``, a list of (point, first seed, last seed), in batches; pool and judge each
        point with its earlier runs; the undecided ones with seeds left stay in ``pending``."""
        # group runs by (horizon, max context): simulate_batch takes one of each per call
        groups: dict = {}
        for i, a, b in todo:
            _, hz = workloads(i)
            groups.setdefault((hz, int(task.max_ctx[i])), []).append((i, a, b))
        for (hz, ctx), idx in groups.items():
            batch_plans, batch_works, owners = [], [], []
            n_req = 0

            def flush():
                if not batch_plans:
                    return
                res = simulate_batch(batch_plans, batch_works, horizon_s=hz, ttft_slo_s=1.0, tpot_slo_s=1.0,
                                     max_context_tokens=ctx, measure_window=window, full=True)
                start = 0
                for i, nrun in owners:
                    runs = pending.pop(i, ([], 0))[0] + list(res[start:start + nrun])
                    start += nrun
                    trace = task.sources[task.src[i]].kind == "trace"
                    v = _pooled(runs, SLO(float(task.ttft[i]), float(task.tpot[i]), att), window, hz,
                                int(task.max_ctx[i]), runs_asked=1 if trace else s.seeds)
                    if next_seed_count(len(runs), s.seeds, v.decided, not trace):
                        pending[i] = (runs, len(runs))
                    else:
                        if not v.decided:
                            from dataclasses import replace
                            v = replace(v, reason=v.reason + (
                                "; a trace replays once (no seeds to add)" if trace else
                                f"; still so at {len(runs)} seeds ({MAX_SEED_FACTOR} x the {s.seeds} asked)"))
                        record(i, v)
                batch_plans.clear()
                batch_works.clear()
                owners.clear()

            for i, a, b in idx:
                plan = plan_of(i)
                wls, _ = workloads(i, b if b else None)
                wls = wls[a:]
                for w in wls:
                    batch_plans.append(plan)
                    batch_works.append(w)
                    n_req += w[0].shape[0]
                owners.append((i, len(wls)))
                if n_req >= task.max_requests_per_call:
                    flush()
                    n_req = 0
            flush()

    simulate_points([(i, 0, 0) for i in range(k)])
    while pending:      # the undecided points, with their next seeds
        simulate_points([(i, ran, next_seed_count(ran, s.seeds, False)) for i, (_, ran) in pending.items()])
    if s.capacity:
        # every point's bisection at once (max_sustainable_rates: one batch of runs per round,
        # the same answers as a max_sustainable_rate call per point)
        from ..search import max_sustainable_rates
        rows = [i for i in range(k) if task.sources[task.src[i]].kind == "scenario"]
        if rows:
            res = max_sustainable_rates(
                [task.plans[i] for i in rows], [task.sources[task.src[i]].obj for i in rows],
                [SLO(float(task.ttft[i]), float(task.tpot[i]), att) for i in rows], seeds=s.seeds,
                horizon_s=s.horizon_s, rel_tol=s.capacity_tol,
                seeds_root=[_workload_seed_int(s.seed, task.sources[task.src[i]].label) for i in rows],
                catalog=task.catalog, constants=s.constants, models=[task.models[i] for i in rows])
            for i, r in zip(rows, res):
                out["sim_capacity_req_per_s"][i] = r.rate_req_per_s
                out["sim_capacity_ci95_lo_req_per_s"][i] = r.ci95[0]
                out["sim_capacity_ci95_hi_req_per_s"][i] = r.ci95[1]
                out["sim_capacity_probes"][i] = len(r.probes)
                out["sim_capacity_seed_runs"][i] = r.seed_runs
                out["sim_capacity_stopped_runs"][i] = r.stopped_runs
                why = capacity_refutation(r.ci95, float(task.rate[i]))
                if why and out["sim_passed"][i]:
                    # the point's own capacity says the rate is more than it sustains: no pass
                    out["sim_passed"][i] = False
                    out["sim_reason"][i] = why
    return out
