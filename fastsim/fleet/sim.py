"""The fleet simulator: a pool of colocated instances that join, drain and fail over time.

Semantics (the kernels are in :mod:`fastsim.fleet._fleet_nb`):

- Every instance is one colocated instance of ``plan`` (its step parameters, chunk size and
  batch cap) under the lecture's scheduler (SPEC section 6: FCFS admission reserving the full
  P + O of KV, chunked prefill); ``plan.n_instances`` is not used, the schedule says how many
  instances exist when (:class:`~fastsim.fleet.schema.FleetSchedule`).
- An instance joins the router at its lifetime's ``ready_s``. The router sends each arriving
  request to the available (joined, not draining) instance with the fewest outstanding tokens
  (ties to the lowest row), or round-robin over them; with none available the request is not
  served (``rejected_no_instance``). A request whose P + O exceeds the context limit or the
  instance's KV budget is rejected (``rejected_context``), as in :func:`fastsim.sim.simulate`.
- A drain (``END_DRAIN`` at ``end_s``) takes the instance off the router; it serves what it holds
  and is released when it is empty, at the end of its last step (``FleetRun.off_s``), or at
  ``end_s`` if it held nothing.
- A failure (``END_FAIL`` at ``end_s``) releases the instance at once; every request it held
  (waiting, prefilling or decoding) loses its progress and its KV and is routed again at
  ``end_s``, in arrival order, as a new request with its original arrival time: its TTFT runs
  from its arrival to its new first token, its TPOT from that token to its new last one (the
  tokens streamed before the failure are discarded: the client retries, as after a crash
  behind a load balancer). Each such request is counted as recomputed.
- At equal times: membership changes first (joins, then drains, then failures; each in
  lifetime order), then arrivals, then step boundaries.
- Metrics are streamed per window of arrival (``window_s``): counts, SLO attainment and
  log-binned TTFT / TPOT histograms (100 bins per decade from 0.1 ms to 10^4 s, so a
  percentile read from them is within 2.3% of the exact one), never per-request arrays for the
  whole run. Requests still held at ``horizon_s + drain_s`` count as unfinished (misses).

A fleet whose instances are all up from 0 and never leave serves exactly as
:func:`fastsim.sim.simulate` with that many instances: the same per-request times, bit for bit
(the same step boundary code, the same event order).
"""
from __future__ import annotations

import math
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from ..errors import FastsimInputError, require_positive
from ..sim import _kernels as K
from ..sim.engine import ColocatedPlan, _instances, _wheel_size
from ..sim.records import REQ_UNFINISHED
from . import _fleet_nb as F
from .schema import END_DRAIN, END_FAIL, FleetRun, FleetSchedule

__all__ = ["ProfileArrivals", "simulate_fleet", "profile_chunks", "HIST_LO_S", "HIST_BINS_PER_DECADE",
           "HIST_BINS", "window_percentile"]

HIST_LO_S = 1e-4
HIST_BINS_PER_DECADE = 100
HIST_BINS = 8 * HIST_BINS_PER_DECADE      # 1e-4 s .. 1e4 s
_HALF0 = 1 << 17
_ROUTINGS = {"least-loaded": K.ROUTE_LEAST_LOADED, "round-robin": K.ROUTE_ROUND_ROBIN}
_OFF, _UP, _DRAINING = 0, 1, 2
F_EV_JOIN, F_EV_DRAIN, F_EV_FAIL = 0, 1, 2
FLEET_POOL_FULL, FLEET_RING_FULL, FLEET_WHEEL_SMALL = 2, 1, 3


class ProfileArrivals(NamedTuple):
    """A workload streamed chunk by chunk: the arrivals of :func:`fastsim.workload.synthesize_profile`.

    The chunks concatenated are ``synthesize_profile(scenario_or_dists, profile, seed,
    arrival=arrival, cv=cv, rate_scale=rate_scale, horizon_s=horizon_s)``'s arrays, bit for bit,
    without its cap on the number of requests and without holding them all in memory.

    Attributes
    ----------
    scenario_or_dists : Scenario, str or (LengthDist, LengthDist)
        Where the lengths come from.
    profile : RateProfile or str or os.PathLike
        The rate over time (:func:`fastsim.workload.read_rate_profile`).
    seed : int
        Root of the random streams.
    rate_scale : float
        Every rate multiplied by this.
    horizon_s : float or None
        End of the arrivals (s); default the profile's span.
    arrival : {'poisson', 'gamma'}
    cv : float
    """

    scenario_or_dists: object
    profile: object
    seed: int = 0
    rate_scale: float = 1.0
    horizon_s: float | None = None
    arrival: str = "poisson"
    cv: float = 1.0


def _resolved_profile(pa: ProfileArrivals):
    from .. import workload as W
    prof = pa.profile if isinstance(pa.profile, W.RateProfile) else W.read_rate_profile(pa.profile)
    prof = prof.scaled(pa.rate_scale)
    horizon = prof.span_s if pa.horizon_s is None else W._check_horizon(pa.horizon_s)
    if horizon > prof.span_s:
        raise FastsimInputError("horizon_s", pa.horizon_s, f"at most the profile's span, {prof.span_s:g} s")
    return prof, horizon


def profile_chunks(pa: ProfileArrivals, chunk_blocks: int = 64):
    """Yield a streamed workload's arrays chunk by chunk (see :class:`ProfileArrivals`).

    Parameters
    ----------
    pa : ProfileArrivals
    chunk_blocks : int
        Draw blocks (:data:`fastsim.workload.DRAW_BLOCK` requests each) per chunk.

    Yields
    ------
    (ndarray(float64), ndarray(int64), ndarray(int64))
        Arrival times (s, ascending, below the horizon), prompt and output tokens of the next
        requests; request i's values are those :func:`fastsim.workload.synthesize_profile` gives
        request i on the same seed.

    Raises
    ------
    FastsimInputError
        A bad profile, scenario, seed, arrival process, cv, rate scale or horizon.
    """
    from .. import workload as W
    wname, pd, od = W._dists(pa.scenario_or_dists)
    prof, horizon = _resolved_profile(pa)
    ss = W._seed_seq(pa.seed)
    arrival, cvf = W._check_arrival(pa.arrival, pa.cv)
    shape = 1.0 / (cvf * cvf)
    carry = 0.0
    b = 0
    while True:
        gaps, pz, oz = [], [], []
        for bb in range(b, b + chunk_blocks):
            g = W._block_rng(ss, W._S_GAPS, bb)
            if arrival == "poisson":
                gaps.append(g.standard_exponential(W.DRAW_BLOCK))
            else:
                gaps.append(g.standard_gamma(shape, W.DRAW_BLOCK) / shape)
            pz.append(W._block_rng(ss, W._S_PROMPT, bb).standard_normal(W.DRAW_BLOCK))
            oz.append(W._block_rng(ss, W._S_OUTPUT, bb).standard_normal(W.DRAW_BLOCK))
        b += chunk_blocks
        g = np.concatenate(gaps)
        g[0] += carry        # the running sum continues exactly as one cumsum over every block
        u = np.cumsum(g)
        carry = float(u[-1])
        t = W._profile_times(prof, u)
        k = int(np.searchsorted(t, horizon, side="left"))
        if k:
            yield t[:k], W._lengths(pd, np.concatenate(pz)[:k]), W._lengths(od, np.concatenate(oz)[:k])
        if k < t.shape[0]:
            return


def _background(chunks, depth: int = 3):
    """Iterate ``chunks`` while a thread draws the next ones (numpy's draws release the GIL, and so
    does the simulator's kernel: on two cores the draws cost almost no time). The chunks and their
    order are those of ``chunks``; an exception in the thread is raised here."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def produce():
        try:
            for c in chunks:
                while not stop.is_set():
                    try:
                        q.put(c, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(done)
        except BaseException as exc:     # handed to the consumer
            q.put(exc)

    th = threading.Thread(target=produce, name="fastsim-fleet-draws", daemon=True)
    th.start()
    try:
        while True:
            c = q.get()
            if c is done:
                return
            if isinstance(c, BaseException):
                raise c
            yield c
    finally:
        stop.set()


def _schedule(schedule) -> tuple:
    """Validated lifetimes as float64 / int8 arrays."""
    if not isinstance(schedule, FleetSchedule):
        raise FastsimInputError("schedule", type(schedule).__name__, "a FleetSchedule")
    try:
        prov = np.asarray(schedule.provision_s, dtype=np.float64).ravel()
        ready = np.asarray(schedule.ready_s, dtype=np.float64).ravel()
        end = np.asarray(schedule.end_s, dtype=np.float64).ravel()
        kind = np.asarray(schedule.end_kind).ravel()
    except (TypeError, ValueError):
        raise FastsimInputError("schedule", "non-numeric arrays", "float times and END_* kinds") from None
    m = prov.shape[0]
    for name, a in (("ready_s", ready), ("end_s", end), ("end_kind", kind)):
        if a.shape[0] != m:
            raise FastsimInputError(f"schedule.{name}", f"length {a.shape[0]}", f"length {m} (as provision_s)")
    if m and not (np.all(np.isfinite(prov)) and np.all(prov >= 0.0)):
        raise FastsimInputError("schedule.provision_s", "negative or non-finite times", "finite times >= 0")
    if m and not (np.all(np.isfinite(ready)) and np.all(ready >= prov)):
        bad = int(np.flatnonzero(~(np.isfinite(ready) & (ready >= prov)))[0])
        raise FastsimInputError("schedule.ready_s", float(ready[bad]), f"a finite time >= provision_s "
                                f"({float(prov[bad]):g}) (lifetime {bad})")
    if m and not np.all(end > ready):
        bad = int(np.flatnonzero(~(end > ready))[0])
        raise FastsimInputError("schedule.end_s", float(end[bad]), f"a time > ready_s ({float(ready[bad]):g}) "
                                f"or inf (lifetime {bad})")
    if m and not np.all(np.isin(kind, (END_DRAIN, END_FAIL))):
        raise FastsimInputError("schedule.end_kind", "an unknown kind", f"END_DRAIN ({END_DRAIN}) or "
                                f"END_FAIL ({END_FAIL})")
    return prov, ready, end, kind.astype(np.int64)


def _events(ready, end, kind):
    """Membership events sorted by (time, kind: join, drain, fail; lifetime)."""
    m = ready.shape[0]
    life = np.arange(m, dtype=np.int64)
    fin = np.isfinite(end)
    t = np.concatenate([ready, end[fin]])
    lv = np.concatenate([life, life[fin]])
    kv = np.concatenate([np.full(m, F_EV_JOIN, np.int64),
                         np.where(kind[fin] == END_FAIL, F_EV_FAIL, F_EV_DRAIN).astype(np.int64)])
    order = np.lexsort((lv, kv, t))
    return np.ascontiguousarray(t[order]), np.ascontiguousarray(lv[order]), np.ascontiguousarray(kv[order])


def _max_concurrent(ready, end) -> int:
    """Most lifetimes between their ready and end times at once (the pool's floor)."""
    if ready.shape[0] == 0:
        return 1
    t = np.concatenate([ready, end])
    d = np.concatenate([np.ones(ready.shape[0], np.int64), -np.ones(end.shape[0], np.int64)])
    order = np.lexsort((d, t))      # at equal times, an end before a start
    return max(1, int(np.cumsum(d[order]).max()))


def _likely_longest(d, n_requests: float) -> int:
    """An output length that ``n_requests`` draws of ``d`` pass with probability below 1e-3 (tokens).

    Sizes the timing wheel of a streamed workload (a longer output found on the way reruns the
    fleet with the wheel of the context limit, so this only sets the speed, never the results).
    """
    if d.kind == "fixed":
        return max(int(round(d.mean)), 1)
    from scipy.stats import norm
    z = float(norm.isf(1e-3 / max(float(n_requests), 1.0)))
    return int(math.ceil(math.exp(d.mu + d.sigma * z)))


def _workload_source(workload):
    """``(chunk iterator factory, horizon_s or None, longest output or None)`` of a workload."""
    if isinstance(workload, ProfileArrivals):
        from .. import workload as W
        prof, horizon = _resolved_profile(workload)
        od = W._dists(workload.scenario_or_dists)[2]
        return (lambda: _background(profile_chunks(workload))), horizon, \
            _likely_longest(od, prof.expected_requests(horizon)), None
    from ..sim.engine import _workload
    a, p, o = _workload(workload, math.inf)
    horizon = getattr(workload, "horizon_s", None)

    def chunks():
        yield a, p, o
    return chunks, horizon if horizon is not None else (float(a[-1]) if a.size else 0.0), \
        (int(o.max()) if o.size else 1), a.shape[0]


def simulate_fleet(plan, workload, schedule, *, ttft_slo_s: float, tpot_slo_s: float,
                   horizon_s: float | None = None, window_s: float = 600.0, drain_s: float | None = None,
                   max_context_tokens: int = 131072, routing: str = "least-loaded", _keep=None) -> FleetRun:
    """Simulate a fleet of colocated instances whose membership changes over time (module docstring).

    Parameters
    ----------
    plan : fastsim.sim.ColocatedPlan
        The instance type (step parameters, chunk size, batch cap); ``n_instances`` is not used.
    workload : Workload, (arrival_s, prompt_tokens, output_tokens) or ProfileArrivals
        The requests: arrays (arrival times in s ascending, >= 0; token counts >= 1), or a
        streamed profile workload (:class:`ProfileArrivals`; hundreds of millions of requests
        in bounded memory).
    schedule : FleetSchedule
        The instance lifetimes (provisioned, ready, end and how it ends).
    ttft_slo_s, tpot_slo_s : float
        P90 targets (s, > 0) a request must meet (both) to count as met.
    horizon_s : float, optional
        End of the arrival window (s); default the workload's (its ``horizon_s``, a profile's
        span, or the last arrival). At most the workload's own horizon when it states one (a
        :class:`ProfileArrivals`, a ``Workload`` with ``horizon_s``).
    window_s : float, default 600
        Width of the metric windows (s, > 0).
    drain_s : float, optional
        How long past the horizon the run goes on to finish the requests in flight (s, >= 0);
        default ``window_s``.
    max_context_tokens : int, default 131072
        Requests with P + O above this are rejected.
    routing : {'least-loaded', 'round-robin'}

    Returns
    -------
    FleetRun
        Per-window counts and histograms, per-lifetime release times.

    Raises
    ------
    FastsimInputError
        A plan that is not a ColocatedPlan, a bad workload, schedule, SLO, horizon, window,
        drain time, context limit or routing (naming the field).
    """
    if not isinstance(plan, ColocatedPlan):
        hint = (": a planner Plan becomes one with fastsim.search.sim_plan(plan, catalog)"
                if type(plan).__name__ == "Plan" else "")
        raise FastsimInputError("plan", type(plan).__name__, "a ColocatedPlan (the fleet simulator serves "
                                "colocated instances under the lecture scheduler)" + hint)
    ttft_slo_s = require_positive("ttft_slo_s", ttft_slo_s)
    tpot_slo_s = require_positive("tpot_slo_s", tpot_slo_s)
    window_s = require_positive("window_s", window_s)
    if routing not in _ROUTINGS:
        raise FastsimInputError("routing", routing, " or ".join(_ROUTINGS))
    max_ctx = int(max_context_tokens) if isinstance(max_context_tokens, (int, np.integer)) else -1
    if max_ctx < 2:
        raise FastsimInputError("max_context_tokens", max_context_tokens, "an integer >= 2")
    prov, ready, end, kind = _schedule(schedule)
    chunks, w_horizon, w_max_out, w_n = _workload_source(workload)
    horizon = w_horizon if horizon_s is None else require_positive("horizon_s", horizon_s)
    stated = isinstance(workload, ProfileArrivals) or getattr(workload, "horizon_s", None) is not None
    if stated and horizon_s is not None and horizon > w_horizon * (1 + 1e-12):
        raise FastsimInputError("horizon_s", horizon_s, f"at most the workload's own horizon, {w_horizon:g} s "
                                "(its arrivals stop there: the windows after it would be empty); extend the "
                                "workload's horizon_s instead")
    if not (horizon > 0.0):
        raise FastsimInputError("horizon_s", horizon, "a time > 0 (the workload has no span)")
    drain = window_s if drain_s is None else float(drain_s)
    if not (math.isfinite(drain) and drain >= 0.0):
        raise FastsimInputError("drain_s", drain_s, "a finite time >= 0")
    n_win = max(1, int(math.ceil(horizon / window_s)))
    ev = _events(ready, end, kind)
    pool = _max_concurrent(ready, end) + 4
    half = _HALF0 if w_n is None else min(_HALF0, 1 << max(10, int(w_n - 1).bit_length()))
    wheel = _wheel_size(min(w_max_out if w_max_out is not None else max_ctx, max_ctx))
    while True:
        res = _run(plan, chunks, ev, prov.shape[0], pool, half, wheel, max_ctx, _ROUTINGS[routing],
                   horizon, horizon + drain, window_s, n_win, ttft_slo_s, tpot_slo_s, _keep)
        if res == FLEET_POOL_FULL:
            pool *= 2
        elif res == FLEET_WHEEL_SMALL:
            wheel = _wheel_size(max_ctx)
        elif res == FLEET_RING_FULL:
            half *= 4
        elif isinstance(res, int):
            raise RuntimeError(f"fleet kernel failed with status {res}; this is a bug in fastsim")
        else:
            break
    acc, h_ttft, h_tpot, life_off, life_recomp, life_row_state = res
    off = np.where(life_row_state, np.nan, life_off)
    arrived = int(acc[:, F.A_ARRIVED].sum())
    att = float(acc[:, F.A_MET].sum()) / arrived if arrived else math.nan
    edges = HIST_LO_S * 10.0 ** (np.arange(HIST_BINS + 1) / HIST_BINS_PER_DECADE)
    return FleetRun(np.arange(n_win, dtype=np.float64) * window_s, float(window_s), acc, h_ttft, h_tpot,
                    edges, off, life_recomp, att, arrived, float(horizon), acc[:, F.A_MET_TOKENS].copy())


class _Ring:
    """The per-request arrays of a fleet run: a ring of two halves of slots, global request g in
    slot ``g & (2 x half - 1)``; read-only views for the kernel's inputs (one compiled version)."""

    def __init__(self, half: int):
        n = 2 * half
        self.half = half
        self.mask = n - 1
        self.arrival = np.zeros(n, np.float64)
        self.prompt = np.ones(n, np.int64)
        self.output = np.ones(n, np.int64)
        self.ro = tuple(_readonly(x) for x in (self.arrival, self.prompt, self.output))
        self.first = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.inst = np.full(n, -1, np.int32)
        self.dinst = np.full(n, -1, np.int32)
        self.status = np.zeros(n, np.int8)
        self.nxt = np.full(n, -1, np.int32)
        self.done = np.zeros(n, np.int32)
        self.wnext = np.full(n, -1, np.int32)
        self.xnext = np.full(n, -1, np.int32)
        self.gid = np.zeros(n, np.int64)
        self.recomp = np.zeros(n, np.int64)
        self.scratch = np.empty(n, np.int64)

    def reset(self, lo: int, hi: int) -> None:
        """Slots [lo, hi) made ready for new requests."""
        self.first[lo:hi] = np.nan
        self.finish[lo:hi] = np.nan
        self.inst[lo:hi] = -1
        self.dinst[lo:hi] = -1
        self.status[lo:hi] = REQ_UNFINISHED
        self.done[lo:hi] = 0
        self.recomp[lo:hi] = 0


def _readonly(a):
    v = a.view()
    v.flags.writeable = False
    return v


def _run(plan, chunks, ev, m, pool, half, wheel, max_ctx, routing, horizon, t_stop, window_s, n_win,
         ttft_slo, tpot_slo, keep=None):
    """One attempt of a fleet run with ``pool`` instance rows and a ring of ``2 x half`` slots.

    Returns the metrics, or ``FLEET_POOL_FULL`` / ``FLEET_RING_FULL`` when the pool or the ring
    is too small (the caller retries with more).
    """
    pp, cfg, _, _, max_total, max_prompt = _instances(
        ColocatedPlan(plan.p, pool, plan.chunk_tokens, plan.max_batch), max_ctx)
    ist = cfg.copy()
    ist[:, K.I_WHEEL_MASK] = wheel - 1
    ist[:, K.I_WHEEL_OFF] = np.arange(pool, dtype=np.int64) * (2 * wheel)
    fst = np.zeros((pool, K.N_FCOLS), np.float64)
    for i in range(pool):
        K.init_row_nb(i, pp, ist, fst)
    ist[:, K.I_UNROUTED] = 1
    wh = np.full(pool * 2 * wheel, -1, np.int32)
    row_state = np.zeros(pool, np.int64)          # _OFF, _UP, _DRAINING
    row_life = np.full(pool, -1, np.int64)
    life_off = np.full(m, np.nan, np.float64)
    life_recomp = np.zeros(m, np.int64)
    rg = _Ring(half)
    if keep is not None:
        keep["ring"] = rg       # per-request results, for the tests (slot = request index below half)
    rr = np.zeros(1, np.int64)
    no_stop = K.NO_STOP.copy()          # no early stop: a fleet run serves its whole day
    tr_t = np.zeros(1, np.float64)
    tr_r = np.zeros(1, np.int32)
    e_i64 = np.zeros(0, np.int64)
    acc = np.zeros((n_win, F.N_ACOLS), np.int64)
    h_ttft = np.zeros((n_win, HIST_BINS), np.int64)
    h_tpot = np.zeros((n_win, HIST_BINS), np.int64)
    metric_args = (int(max_total), float(window_s), acc, h_ttft, h_tpot, math.log10(HIST_LO_S),
                   float(HIST_BINS_PER_DECADE), float(ttft_slo), float(tpot_slo))
    fold_args = (ist, rg.arrival, rg.prompt, rg.output, rg.first, rg.finish, rg.status, rg.recomp) + metric_args
    cfg0 = ist[:1].copy()      # the configuration columns fold_nb reads (the kernel writes only state)
    # a full half is folded from a copy on a worker thread (fold_nb releases the GIL) while the
    # kernel serves the other half; the folds run one at a time, in order
    folder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fastsim-fleet-fold")
    folds = []
    ev_t, ev_l, ev_k = ev
    n_ev = ev_t.shape[0]

    def serve(ia0: int, ia1: int, until: float) -> None:
        """Run arrivals in slots [ia0, ia1) and every boundary at or before ``until``."""
        code = K._run_nb(pp, ist, fst, *rg.ro, rg.first, rg.finish, rg.inst, rg.dinst, rg.status, rg.nxt,
                         rg.done, wh, rg.wnext, rg.xnext, tr_t, tr_r, e_i64, e_i64, e_i64, pool, routing,
                         int(max_total), int(max_prompt), float(until), 1.0, False, ia0, ia1, rr, True,
                         no_stop)
        if code != 0:
            raise RuntimeError(f"simulator kernel failed with status {int(code)} in a fleet run; this is a bug "
                               "in fastsim")
        for i in np.flatnonzero(row_state == _DRAINING):
            if fst[i, K.F_NEXT_T] == np.inf:
                row_state[i] = _OFF
                lf = row_life[i]
                life_off[lf] = max(life_off[lf], fst[i, K.F_IDLE_T])

    def membership(e: int) -> int:
        t = float(ev_t[e])
        lf = int(ev_l[e])
        kind = int(ev_k[e])
        if kind == F_EV_JOIN:
            free = np.flatnonzero(row_state == _OFF)
            if free.size == 0:
                return FLEET_POOL_FULL
            b = int(free[0])
            K.init_row_nb(b, pp, ist, fst)
            row_state[b] = _UP
            row_life[b] = lf
            return 0
        b = int(np.flatnonzero(row_life == lf)[0]) if np.any((row_life == lf) & (row_state != _OFF)) else -1
        if b < 0:
            return 0        # already released (cannot happen with one end per lifetime)
        if kind == F_EV_DRAIN:
            ist[b, K.I_UNROUTED] = 1
            life_off[lf] = t
            row_state[b] = _OFF if fst[b, K.F_NEXT_T] == np.inf else _DRAINING
        else:
            life_recomp[lf] += F.fail_row_nb(b, t, pp, ist, fst, rg.prompt, rg.output, rg.first, rg.status,
                                             rg.inst, rg.nxt, rg.done, wh, rg.wnext, rg.xnext, rg.gid,
                                             rg.recomp, rg.scratch, rg.mask, pool, routing, rr)
            row_state[b] = _OFF
            life_off[lf] = t
        return 0

    gid = 0            # global index of the next request
    run0 = 0           # first slot of the current half not yet served
    pos = 0            # slots of the current half filled
    cur = 0            # the current half
    used = [True, False]
    filled = [0, 0]    # slots of each half holding requests (fewer than half when closed at a tie)
    e = 0
    src = iter(chunks())
    ahead = []         # the next non-empty chunk when it was looked at early

    def next_chunk():
        return ahead.pop() if ahead else next((c for c in src if c[0].shape[0]), None)

    pa = None
    k = 0
    while True:
        if pa is None or k >= pa.shape[0]:
            pa = next_chunk()
            if pa is not None:
                pa, pp_, po = pa
                k = 0
                if min(int(po.max()), max_ctx) > wheel:
                    folder.shutdown()
                    return FLEET_WHEEL_SMALL
                if pa[0] > horizon:
                    pa = None
        te = float(ev_t[e]) if e < n_ev else math.inf
        base = cur * half
        full = pos == half
        if pa is not None and not full:
            lim = min(te, float(np.nextafter(horizon, np.inf)))
            j = int(np.searchsorted(pa, lim, side="left"))
            if j - k >= half - pos:
                j = k + half - pos
                full = True
                if j < pa.shape[0]:
                    t_next = pa[j]
                else:           # the half ends with the chunk: the next chunk's first arrival
                    if not ahead:
                        ahead.append(next_chunk())
                    t_next = ahead[0][0][0] if ahead[0] is not None else math.inf
                if t_next == pa[j - 1]:
                    # keep arrivals at one time in one call (a later arrival at the time of the
                    # half's last one must come before the boundaries at that time)
                    j = max(k, int(np.searchsorted(pa, pa[j - 1], side="left")))
            if j > k:
                n = j - k
                s0 = base + pos
                rg.reset(s0, s0 + n)
                rg.arrival[s0:s0 + n] = pa[k:j]
                rg.prompt[s0:s0 + n] = pp_[k:j]
                rg.output[s0:s0 + n] = po[k:j]
                rg.gid[s0:s0 + n] = np.arange(gid, gid + n, dtype=np.int64)
                gid += n
                pos += n
                k = j
            if not full and k < pa.shape[0] and pa[k] > horizon:
                pa = None
            if not full and (pa is None or k >= pa.shape[0]):
                continue        # the next chunk
        if full:
            if pos == 0:
                raise FastsimInputError("workload", f"more than {half:,} requests at one time",
                                        "fewer simultaneous arrivals")
            if pos > run0:
                serve(base + run0, base + pos, float(rg.arrival[base + pos - 1]))
            # a half closed before its end (arrivals at one time kept together) skips the global
            # indices of its unused slots: request g stays in slot g & mask (fail_row_nb's map)
            gid += half - pos
            filled[cur] = pos
            cur ^= 1
            if used[cur]:
                lo, hi = cur * half, cur * half + filled[cur]
                if np.any(rg.status[lo:hi] == REQ_UNFINISHED):
                    folder.shutdown()
                    return FLEET_RING_FULL
                snap = tuple(x[lo:hi].copy() for x in (rg.arrival, rg.prompt, rg.output, rg.first, rg.finish,
                                                        rg.status, rg.recomp))
                folds.append(folder.submit(F.fold_nb, 0, hi - lo, cfg0, *snap, *metric_args, False))
            used[cur] = True
            run0 = pos = 0
            continue
        # no arrival before the next membership change (or none left): serve to just before it
        if e < n_ev and te <= t_stop:
            serve(base + run0, base + pos, float(np.nextafter(te, -np.inf)))
            run0 = pos
            code = membership(e)
            if code:
                folder.shutdown()
                return code
            e += 1
            continue
        serve(base + run0, base + pos, float(t_stop))
        run0 = pos
        break
    # fold everything still held, after the folds under way
    folder.shutdown(wait=True)
    for f in folds:
        f.result()          # raises here what a fold raised there
    if used[cur ^ 1]:
        F.fold_nb((cur ^ 1) * half, (cur ^ 1) * half + filled[cur ^ 1], *fold_args, True)
    F.fold_nb(cur * half, cur * half + pos, *fold_args, True)
    still = np.zeros(m, dtype=bool)
    still[row_life[row_state != _OFF]] = True
    return acc, h_ttft, h_tpot, life_off, life_recomp, still


def window_percentile(hist: np.ndarray, edges_s: np.ndarray, q: float) -> np.ndarray:
    """Per-row percentile of log-binned histograms, read as the upper edge of the bin that holds it.

    Parameters
    ----------
    hist : ndarray(int64) of shape (w, n_bins)
        Counts per bin (``FleetRun.ttft_hist`` or ``tpot_hist``, or sums of their rows).
    edges_s : ndarray(float64) of shape (n_bins + 1,)
    q : float
        Percentile in (0, 100].

    Returns
    -------
    ndarray(float64) of shape (w,)
        The smallest bin edge at or above the q-th percentile of each row (s; an upper bound
        within one bin, 2.3%, of the exact value); ``nan`` for an empty row.

    Raises
    ------
    FastsimInputError
        q outside (0, 100].
    """
    if not (0.0 < q <= 100.0):
        raise FastsimInputError("q", q, "a percentile in (0, 100]")
    h = np.atleast_2d(np.asarray(hist))
    tot = h.sum(axis=1)
    cum = np.cumsum(h, axis=1)
    need = np.ceil(q / 100.0 * tot)
    idx = np.argmax(cum >= np.maximum(need, 1)[:, None], axis=1)
    out = edges_s[idx + 1].astype(np.float64)
    out[tot == 0] = np.nan
    return out
