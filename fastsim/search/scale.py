"""The maximum sustainable time scale of a plan on a real trace (SPEC §7, on a trace).

:func:`max_sustainable_scale` replays the trace once per probe (a trace is one realisation: no
seeds), its arrival times divided by the scale, several scales per round in one parallel batch
whose shorter runs are read off the longest (``_figures_at``), and judges each probe by the rule
of the rate search (``_probe_verdict``); the estimate is the rate search's estimator on one run
per probe (``_capacity_from``).
"""
from __future__ import annotations

import math

import numpy as np

from ..analytic import Plan
from ..catalog import Catalog, Model
from ..errors import FastsimInputError
from ..stepmodel import StepConstants
from ._bisect import _capacity_from, _probe_verdict
from .adapter import _plan_model, _simulated
from .checks import MAX_RATE_REQ_PER_S, _check_slo, _checked_floor, check_plan_instances
from .records import SLO, ScaleProbe, TraceCapacityResult, _Replay, _RunFigures
from .verify import _p90


#: Longest replay (simulated seconds) the scale search probes by default: scales below
#: ``duration_s / MAX_REPLAY_SPAN_S`` are not tried unless ``min_scale`` says otherwise.
MAX_REPLAY_SPAN_S = 1e6
_SCALE_STEP = 1.25          # bracketing factor, as the rate bisection's


def _figures_at(res, horizon_s: float, slo: SLO, measure_window, sample_dt_s: float) -> _RunFigures:
    """The metrics the simulator reports for a run with horizon ``horizon_s``, read off a longer run.

    ``res`` is the :class:`~fastsim.sim.SimResult` (``full``) of the same plan and workload
    simulated to a later horizon. Events up to ``horizon_s`` are the same in both runs (a horizon
    only stops the event loop), and so are the samples before it, so the measured window,
    attainment, P90s, backlog slope and overload flag follow from the definitions of
    :mod:`fastsim.sim.engine`, in the kernel's order of float operations: a token after
    ``horizon_s`` was not reached, a request without its last token by then is unfinished.
    """
    from ..sim import OVERLOAD_MIN_GROWTH, OVERLOAD_SLOPE_FRACTION
    from ..sim.records import REQ_FINISHED, REQ_REJECTED
    a, o_all, status = res.arrival_s, res.output_tokens, res.status
    n = int(a.shape[0])
    rejected = int(np.count_nonzero(status == REQ_REJECTED))
    with np.errstate(invalid="ignore"):
        fin = (status == REQ_FINISHED) & (res.finish_s <= horizon_s)
        first = np.where(res.first_token_s <= horizon_s, res.first_token_s, np.nan)
    lo_t, hi_t = measure_window[0] * horizon_s, measure_window[1] * horizon_s
    sel = (a >= lo_t) & (a < hi_t)
    nm = int(np.count_nonzero(sel))
    ttft = first[sel] - a[sel]
    ttft[np.isnan(ttft)] = np.inf
    o, f_sel, done = o_all[sel], first[sel], fin[sel]
    tpot = np.full(o.shape, np.inf)
    ok_t = done & (o > 1)
    tpot[ok_t] = (res.finish_s[sel][ok_t] - f_sel[ok_t]) / (o[ok_t] - 1).astype(np.float64)
    good = done & (ttft <= slo.ttft_s) & ((o == 1) | (tpot <= slo.tpot_s))
    attainment = int(np.count_nonzero(good)) / nm if nm > 0 else math.nan
    # least-squares slope of the number in system over the samples at t >= horizon / 2, summed
    # left to right as the kernel sums (add.accumulate is sequential)
    ns = max(1, int(math.ceil(horizon_s / sample_dt_s)))
    tk = np.arange(ns, dtype=np.float64) * sample_dt_s
    keep = tk >= 0.5 * horizon_s
    tk, ys = tk[keep], res.in_system[:ns][keep].astype(np.float64)
    slope = 0.0
    cnt = int(tk.shape[0])
    if cnt >= 3:
        tm = float(np.add.accumulate(tk)[-1]) / cnt
        ym = float(np.add.accumulate(ys)[-1]) / cnt
        tc = tk - tm
        num = float(np.add.accumulate(tc * (ys - ym))[-1])
        den = float(np.add.accumulate(tc * tc)[-1])
        slope = num / den
    rate = (n - rejected) / horizon_s
    over = bool(slope > OVERLOAD_SLOPE_FRACTION * rate and slope * 0.5 * horizon_s >= OVERLOAD_MIN_GROWTH)
    return _RunFigures(attainment, nm, n, rejected, n - rejected - int(np.count_nonzero(fin)), _p90(ttft),
                       _p90(tpot[o > 1]), slope, rate, over)


def _figures_of(m) -> _RunFigures:
    """The same figures from a run's own :class:`~fastsim.sim.SimMetrics`."""
    return _RunFigures(m.attainment, int(m.measured), int(m.n_requests), int(m.rejected), int(m.unfinished),
                       m.ttft_p90_s, m.tpot_p90_s, m.queue_slope_req_per_s, m.arrival_rate_req_per_s,
                       bool(m.overloaded))


def _replay_horizon(duration_s: float, scale: float, limit_s: float) -> float:
    """Simulated seconds of a replay at ``scale``: its span (next float up), or ``limit_s`` when shorter."""
    span = float(np.nextafter(duration_s / scale, np.inf))
    return min(span, limit_s)


def max_sustainable_scale(plan: Plan, trace, slo: SLO, *, horizon_s: float | None = None, rel_tol: float = 0.01,
                          scale_hint: float | None = None, probes_per_round: int = 4, max_probes: int = 40,
                          min_scale: float | None = None, catalog: Catalog | None = None,
                          constants: StepConstants = StepConstants(), model: Model | None = None,
                          measure_window=(0.2, 0.8), routing: str = "least-loaded", engine: dict | None = None,
                          on_round_start=None,
                          on_probe=None) -> TraceCapacityResult:
    """Search for the largest time scale at which a plan serves a real trace within its SLOs (SPEC §7).

    A time scale s >= 0 replays the trace with its arrival times divided by s: s = 2 is twice as
    fast, with the same requests in the same order with the same lengths, an equivalent mean
    rate of ``n / (duration_s / s)``. Each probe replays the trace once (a trace is one
    realisation: there are no seeds) over its span at that scale, ``duration_s / s`` simulated
    seconds, or ``horizon_s`` when that is shorter (the requests arriving after it are counted
    in the probe's ``excluded_requests``, never dropped unsaid); the measured requests are those
    arriving in the middle 60% of the horizon. A probe passes by the rule of
    :func:`max_sustainable_rate`: attainment >= ``slo.attainment`` and not overloaded.

    The search runs in rounds of ``probes_per_round`` scales, simulated together in one parallel
    :func:`fastsim.sim.simulate_batch` call. The first round spreads around ``scale_hint`` by
    factors of 1.25; while every probe passes (fails) the next round steps up (down) by further
    factors of 1.25; once a scale passes below the smallest failing one, each round splits the
    bracket evenly, until ``(hi - lo) <= rel_tol x lo``. The batch shares one horizon, the
    round's longest; a run whose own horizon is shorter is read off at its own horizon (events
    and samples before a horizon do not depend on it), so every probe equals a
    :func:`fastsim.sim.simulate` of its replay, whatever else its round holds.

    Parameters
    ----------
    plan : Plan
    trace : Workload, str or os.PathLike
        The trace (:class:`fastsim.workload.Workload`: ``arrival_s`` ndarray(float64) of shape
        (n,), ascending, in s; token counts ndarray(int64) of shape (n,)), or a name or path
        for :func:`fastsim.workload.read_trace`. Its ``duration_s`` is its span at scale 1.
    slo : SLO
    horizon_s : float, optional
        Longest replay (simulated s); default none: every probe replays the whole trace.
    rel_tol : float
        Relative width of the final bracket, in (0, 1).
    scale_hint : float, optional
        Centre of the first round; default the scale whose equivalent rate is the plan's analytic
        capacity (1 when that is 0). At least ``min_scale``; at most the largest scale probed: an
        equivalent rate of :data:`MAX_RATE_REQ_PER_S`, and a replay span ``duration_s / s`` no
        shorter than :func:`horizon_floor`'s ``min_horizon_s`` (no scale above it is probed).
    probes_per_round : int
        Scales per round (>= 1; 4 by default, fixed so that the probes, and the answer, do not
        depend on the machine's thread count; up to 4 threads run them at once).
    max_probes : int
        Probe budget (>= 1); the bracket reached is reported when it runs out.
    min_scale : float, optional
        Smallest scale tried (> 0); default ``duration_s / MAX_REPLAY_SPAN_S`` (a replay of at
        most 1e6 s). Must keep the replay within the simulator's 1e7 samples (``duration_s /
        1e7``).
    catalog : Catalog, optional
        Defaults to the built-in catalog.
    constants : StepConstants
        Step-model constants (SPEC §3).
    model : Model, optional
        The model, when it is not a catalog entry.
    measure_window : (float, float)
        Fractions of each probe's horizon bounding the measured requests (SPEC §1).
    routing : {"least-loaded", "round-robin", "prefix-aware"}
    engine : dict, optional
        An engine policy for the simulations (:mod:`fastsim.sim.policy`): ``{"policy": "vllm"}``.
        A name takes the engine's defaults for the plan's GPU and KV pool, with the optional
        overrides ``max_num_batched_tokens``, ``max_num_seqs`` and ``prefix_caching``, or with
        ``plan_settings: True`` the settings ``fastsim plan --emit`` writes for the plan (its decode
        batch; a budget of its decodes' tokens plus its chunk for vLLM, its chunk for SGLang); an
        :class:`~fastsim.sim.policy.EnginePolicy` is used as it is. Optionally ``spec_seed``. A
        plan sized with speculative decoding brings its draft (``plan.spec``). None: the lecture
        policy, which refuses such a plan.
    on_round_start : callable(round: int, scales: list of float), optional
        Called before each round's batch.
    on_probe : callable(probe: ScaleProbe), optional
        Called after each round for each of its probes, in ascending scale.

    Returns
    -------
    TraceCapacityResult
        ``scale`` inside ``bracket``; the equivalent rates, the analytic capacity and ratios as
        properties; ``notes`` saying that the bracket is the only interval, and anything else
        the figures need said (a horizon at the estimate shorter than :func:`horizon_floor`'s
        ``full_horizon_s``, which understates the scale; a search that reached the largest
        scale).

    Raises
    ------
    FastsimInputError
        A trace with fewer than two requests or no span (``trace``), ``rel_tol`` outside
        (0, 1), a non-positive ``horizon_s``, ``scale_hint`` or ``min_scale``, a ``horizon_s``
        below :func:`horizon_floor`'s ``min_horizon_s`` (at the trace's mean lengths), a
        ``scale_hint`` below ``min_scale`` or above the largest scale, a plan with more than
        :data:`fastsim.analytic.MAX_INSTANCES` instances on a side, ``slo`` not an :class:`SLO`,
        a ``min_scale`` whose replay exceeds 1e7 s or lies above the largest scale,
        ``probes_per_round`` or ``max_probes`` not an integer >= 1, unknown names in the plan, an
        unreadable trace, or anything :func:`fastsim.sim.simulate_batch` rejects (routing).
    RuntimeError
        A simulator kernel reported an internal failure.
    """
    from .. import workload as W
    from ..errors import require_positive
    from ..sim import simulate_batch
    from ..sim.engine import auto_sample_dt
    catalog, model = _plan_model(plan, catalog, model)
    wl = trace if isinstance(trace, W.Workload) else W.read_trace(trace)
    if wl.n < 2 or not wl.duration_s > 0:
        raise FastsimInputError("trace", wl.name, f"a trace with at least two requests at distinct times "
                                f"(it has {wl.n} over {wl.duration_s:g} s), so that it has a rate")
    if not (0 < rel_tol < 1):
        raise FastsimInputError("rel_tol", rel_tol, "a fraction in (0, 1)")
    for name, v in (("probes_per_round", probes_per_round), ("max_probes", max_probes)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise FastsimInputError(name, v, "an integer >= 1")
    limit = math.inf if horizon_s is None else require_positive("horizon_s", horizon_s)
    D, n = float(wl.duration_s), wl.n
    native = n / D
    floor_scale = D / 1e7
    if min_scale is None:
        min_scale = D / MAX_REPLAY_SPAN_S
    else:
        min_scale = require_positive("min_scale", min_scale)
        if min_scale < floor_scale:
            raise FastsimInputError("min_scale", min_scale, f">= {floor_scale:.6g} (a replay of at most 1e7 s: "
                                    "the simulator's sample limit at 1-s samples)")
    check_plan_instances(plan)
    _check_slo("slo", slo)
    from ..sim.engine import measure_fractions
    window = measure_fractions(measure_window)
    analytic = float(plan.capacity_req_per_s)
    floor = _checked_floor(plan, float(np.mean(wl.prompt_tokens)), float(np.mean(wl.output_tokens)), slo, limit,
                           window, catalog, constants, model)
    # the largest scale: an equivalent rate of MAX_RATE_REQ_PER_S, and a replay no shorter than the
    # shortest horizon the floor accepts (a shorter replay measures the horizon, not the plan)
    max_scale = min(MAX_RATE_REQ_PER_S / native, D / floor.min_horizon_s)
    why_max = (f"an equivalent rate of at most {native * max_scale:.6g} req/s: " + (
        f"fastsim.search.MAX_RATE_REQ_PER_S ({wl.name} runs at {native:.4g} req/s at scale 1)"
        if max_scale == MAX_RATE_REQ_PER_S / native else
        f"a faster replay spans less than {floor.min_horizon_s:.3g} s, too short for a mean request "
        f"({floor.prompt_tokens:,.0f} + {floor.output_tokens:,.0f} tokens, {floor.lone_s:.3g} s alone) to finish in "
        "the measure window (fastsim.search.horizon_floor)"))
    if scale_hint is not None:
        s0 = require_positive("scale_hint", scale_hint)
        if s0 > max_scale:
            raise FastsimInputError("scale_hint", scale_hint, f"a scale > 0 of at most {max_scale:.6g}: {why_max}")
    else:
        s0 = min(analytic / native if analytic > 0 else 1.0, max_scale)
    if scale_hint is not None and s0 < min_scale:
        raise FastsimInputError("scale_hint", scale_hint, f">= min_scale ({min_scale:.6g})")
    if min_scale > max_scale:
        raise FastsimInputError("min_scale", min_scale, f"at most {max_scale:.6g}: {why_max}")
    s0 = max(s0, min_scale)
    sp, ekw = _simulated(plan, engine, catalog, constants, model)
    a, P, O = wl.arrival_s, wl.prompt_tokens, wl.output_tokens
    m = int(probes_per_round)
    probes: list = []
    mets, meas, overs = [], [], []

    def _round(scales, rnd):
        if on_round_start is not None:
            on_round_start(rnd, list(scales))
        hz = [_replay_horizon(D, s, limit) for s in scales]
        wls, kept = [], []
        for s, h in zip(scales, hz):
            t = a / s
            k = int(np.searchsorted(t, h, side="right"))
            pre = None
            if wl.prefix is not None:
                off = wl.prefix.offsets[:k + 1]
                pre = wl.prefix._replace(offsets=off, ids=wl.prefix.ids[:int(off[-1])])
            wls.append(_Replay(t[:k], P[:k], O[:k], pre))
            kept.append(k)
        H = max(hz)
        # the longest replay's sampling step (1 s up to 1e7 s, coarser beyond: auto_sample_dt); a
        # shorter probe read from its samples must be one its own run would sample on that step
        dt = auto_sample_dt(H)
        full = any(h != H for h in hz)
        runs = simulate_batch([sp], wls, horizon_s=H, ttft_slo_s=slo.ttft_s, tpot_slo_s=slo.tpot_s,
                              max_context_tokens=model.max_context_tokens, routing=routing, **ekw,
                              measure_window=measure_window, sample_dt_s=dt, full=full)
        for i, (s, h, k, r) in enumerate(zip(scales, hz, kept, runs)):
            if h == H:
                fig = _figures_of(r.metrics if full else r)
            elif auto_sample_dt(h) == dt:
                fig = _figures_at(r, h, slo, measure_window, sample_dt_s=dt)
            else:       # its own run samples on a finer step: simulate it alone
                fig = _figures_of(simulate_batch([sp], [wls[i]], horizon_s=h, ttft_slo_s=slo.ttft_s,
                                                 tpot_slo_s=slo.tpot_s, max_context_tokens=model.max_context_tokens,
                                                 routing=routing, **ekw, measure_window=measure_window)[0])
            met, mea, over, att, overloaded, passed = _probe_verdict([fig], slo, h)
            p = ScaleProbe(float(s), native * float(s), float(h), k, n - k, fig.measured, att, overloaded, passed,
                           float(fig.ttft_p90_s), float(fig.tpot_p90_s), fig.rejected, fig.unfinished, rnd)
            probes.append(p)
            mets.append(met), meas.append(mea), overs.append(over)
            if on_probe is not None:
                on_probe(p)

    def _bracket():
        fails = [p.scale for p in probes if not p.passed]
        hi = min(fails) if fails else None
        below = [p.scale for p in probes if p.passed and (hi is None or p.scale < hi)]
        return (max(below) if below else None), hi

    scales = sorted({min(max(s0 * _SCALE_STEP ** k, min_scale), max_scale) for k in range(-(m // 2), m - m // 2)})
    rnd = 0
    exhausted_low = capped = False
    while True:
        scales = scales[:max_probes - len(probes)]
        _round(scales, rnd)
        rnd += 1
        lo, hi = _bracket()
        if lo is not None and hi is not None and hi - lo <= rel_tol * lo:
            break
        left = max_probes - len(probes)
        if left <= 0:
            break
        done = {p.scale for p in probes}
        if hi is None:
            if lo >= max_scale:
                capped = True
                break
            scales = [min(lo * _SCALE_STEP ** k, max_scale) for k in range(1, m + 1)]
        elif lo is None:
            scales = [hi / _SCALE_STEP ** k for k in range(1, m + 1) if hi / _SCALE_STEP ** k >= min_scale]
            if not scales and min_scale < hi and min_scale not in done:
                scales = [min_scale]
            if not scales:
                exhausted_low = True
                break
        else:
            k = min(m, left)
            scales = [lo + (hi - lo) * j / (k + 1) for j in range(1, k + 1)]
        scales = sorted(s for s in set(scales) if s not in done)
        if not scales:
            break
    lo, hi = _bracket()
    rates = np.array([p.scale for p in probes])
    estimate = 0.0
    if lo is not None:
        # mets / meas (probes, 1) and overs (probes, 1, 3): one run per probe
        estimate = _capacity_from(rates, np.array(mets), np.array(meas), np.array(overs), slo.attainment, math.nan)
        estimate = min(max(estimate, lo), hi if hi is not None else math.inf)
    bracket = (float(lo or 0.0), float(hi if hi is not None else math.inf))

    notes = [f"a trace is one realisation: each probe replays {wl.name} once, so there are no seeds and no "
             "confidence interval; the bisection bracket "
             f"(scales {bracket[0]:.4g} - {bracket[1]:.4g}) is the only interval"]
    h_est = _replay_horizon(D, estimate, limit) if estimate > 0 else math.nan
    excl = int(n - np.searchsorted(a / estimate, h_est, side="right")) if estimate > 0 else None
    if math.isfinite(limit):
        cut = [p for p in probes if p.excluded_requests]
        notes.append(f"a horizon of {limit:g} s cuts the replay at scales below {D / limit:.4g} (where the trace's "
                     f"span, {D:,.1f} s at scale 1, exceeds it): a probe at scale s then replays only the trace's "
                     f"first {limit:g} x s seconds, a different part at each scale; "
                     + (f"{len(cut)} of {len(probes)} probes left out the requests arriving after it "
                        f"(up to {max(p.excluded_requests for p in cut):,} of {n:,}), counted per probe"
                        if cut else "no probe was cut")
                     + (f"; at the estimate {excl:,} requests would arrive after it" if excl else ""))
    if hi is not None:
        above = sorted(p.scale for p in probes if p.passed and p.scale > hi)
        if above:
            notes.append(f"{len(above)} probe(s) passed above the smallest failing scale {hi:.4g} (at "
                         + ", ".join(f"{s:.4g}" for s in above[:5]) + ("..." if len(above) > 5 else "")
                         + "): one realisation need not pass or fail monotonically in the scale; the bracket is "
                           "taken below the smallest failing scale")
    if lo is None:
        notes.append(f"every probe failed, down to scale {min(p.scale for p in probes):.4g}"
                     + (f" (the smallest tried: min_scale {min_scale:.4g})" if exhausted_low else
                        f" (the probe budget of {max_probes} ran out)"))
    elif hi is None:
        notes.append(f"no probe failed, up to scale {lo:.4g}: "
                     + (f"the largest scale probed ({why_max})" if capped else
                        f"the probe budget of {max_probes} ran out") + "; the capacity lies above it")
    elif hi - lo > rel_tol * lo:
        notes.append(f"the bracket is {100 * (hi - lo) / lo:.2g}% wide, wider than rel_tol {rel_tol:g}: the probe "
                     f"budget of {max_probes} ran out")
    short = floor.note(h_est, window) if estimate > 0 else ""
    if short:
        notes.append("at the estimate, " + short)
    return TraceCapacityResult(float(estimate), bracket, probes, wl.name, n, D, analytic, float(limit),
                               float(h_est), excl, float(rel_tol), m, tuple(notes))
