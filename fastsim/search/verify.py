"""Verification and repair of one plan in simulation (SPEC section 7; lecture §2.3).

:func:`verify` simulates a plan on a set of workloads (one per seed, common random numbers) at
the target rate and pools the measured requests (``_pooled``); a plan passes when its SLO
attainment surely reaches the target (0.90 for a P90 SLO: the 95% Wilson interval's lower end, with
seeds added while the interval holds the target, :mod:`fastsim.search.confidence`) and the runs,
judged together, are not overloaded (:func:`pooled_overload`).
:func:`repair` adds whole instances, on the failing side for disaggregated plans (decode when TPOT
fails, prefill when TTFT fails), until the plan passes, and says so when no count can pass: a
request that alone, on an idle instance, misses its SLO is not helped by more machines
(:func:`lone_request_check`, the SPEC §3 step model). The same lone request sets the shortest
horizon a capacity search accepts (:func:`horizon_floor`). :func:`unsimulated_reason` says which
plans the simulator cannot run as the screen sized them; the planner and the verified search
both ask it.
"""
from __future__ import annotations

import math

import numpy as np

from ..analytic import Plan
from ..catalog import Catalog, Model
from ..errors import FastsimInputError
from ..stepmodel import P_KVPG, P_NET_BW, StepConstants, step_params, step_time
from .adapter import _plan_model, _simulated
from .records import SLO, HorizonFloor, RepairResult, Verification


def pooled_overload(metrics, horizon_s: float) -> bool:
    """Whether a set of replications of one plan at one rate is overloaded, judged together.

    The simulator flags a single run when the least-squares slope ``b`` of its number of requests
    in system over the second half exceeds ``OVERLOAD_SLOPE_FRACTION x lambda`` and adds at least
    ``OVERLOAD_MIN_GROWTH`` requests (:mod:`fastsim.sim.engine`). Across seeds the same test is
    applied to the mean slope and the mean accepted rate: a stable system's backlog drifts up in
    some seeds and down in others, and a one-seed drift flagged per run would fail a stable plan
    more often the more seeds it is given (at 16 seeds, 2 of 16 runs of the offline-batch plan at
    86% load are flagged; the mean slope is 0.4% of lambda), while a real overload raises every
    seed's backlog.

    Parameters
    ----------
    metrics : sequence of SimMetrics
        One per replication, non-empty.
    horizon_s : float
        Simulated seconds of each run.

    Returns
    -------
    bool
        With one run, that run's own flag.

    Raises
    ------
    IndexError
        ``metrics`` is empty (nothing is validated otherwise).
    """
    from ..sim import OVERLOAD_MIN_GROWTH, OVERLOAD_SLOPE_FRACTION
    if len(metrics) == 1:
        return bool(metrics[0].overloaded)
    b = float(np.mean([m.queue_slope_req_per_s for m in metrics]))
    lam = float(np.mean([m.arrival_rate_req_per_s for m in metrics]))
    return bool(b > OVERLOAD_SLOPE_FRACTION * lam and b * horizon_s / 2.0 >= OVERLOAD_MIN_GROWTH)


def _p90(a: np.ndarray) -> float:
    """P90 by linear interpolation with +inf allowed, the same arithmetic as the simulator's kernel."""
    return _quantile(a, 0.9)


def _quantile(a: np.ndarray, q: float) -> float:
    """The ``q`` quantile by linear interpolation with +inf allowed (the kernel's arithmetic at 0.9)."""
    n = a.size
    if n == 0:
        return float("nan")
    pos = q * (n - 1)
    lo = int(np.floor(pos))
    frac = pos - lo
    srt = np.sort(a)
    x, y = srt[lo], srt[min(lo + 1, n - 1)]
    if frac == 0.0 or x == y:
        return float(x)
    if np.isinf(y):
        return float("inf")
    return float(x + (y - x) * frac)


def _pooled(results, slo: SLO, measure_window, horizon_s, max_context_tokens=None, rejection_budget: float = 0.0,
            runs_asked: int = 0):
    """The :class:`Verification` of runs judged together (SPEC §7).

    ``max_context_tokens`` (the model's) separates the rejections: a request rejected although
    its prompt + output fits the context is one the plan's instances cannot hold, and more of
    them than ``rejection_budget`` x requests fails the plan. Without it (None) rejections count
    only as misses. The attainment passes only when its 95% Wilson interval's lower end reaches
    the target (:func:`fastsim.search.confidence.attainment_verdict`): the one rule of ``plan``,
    ``simulate`` and the sweep.
    """
    from .confidence import attainment_verdict
    ttft_all, tpot_all = [], []
    met = measured = rejected = requests = in_ctx = 0
    overloaded = pooled_overload([r.metrics for r in results], horizon_s) if results else False
    for r in results:
        rejected += int(r.metrics.rejected)
        requests += int(r.metrics.n_requests)
        if max_context_tokens is not None and r.metrics.rejected:
            rej = r.status == 2
            in_ctx += int(np.count_nonzero(rej & (r.prompt_tokens + r.output_tokens <= max_context_tokens)))
        lo, hi = measure_window[0] * horizon_s, measure_window[1] * horizon_s
        sel = (r.arrival_s >= lo) & (r.arrival_s < hi)
        first, fin, o = r.first_token_s[sel], r.finish_s[sel], r.output_tokens[sel]
        # a request that never reached its first (last) token counts as +inf, never as nan
        ttft = np.where(np.isnan(first), np.inf, first - r.arrival_s[sel])
        served = ~np.isnan(first) & ~np.isnan(fin) & (o > 1)
        tpot = np.full(o.shape, np.inf)
        tpot[served] = (fin[served] - first[served]) / (o[served] - 1)
        tpot[o == 1] = 0.0
        ok = (ttft <= slo.ttft_s) & ((o == 1) | (tpot <= slo.tpot_s))
        met += int(ok.sum())
        measured += int(sel.sum())
        ttft_all.append(ttft)
        tpot_all.append(tpot[o > 1])
    ttft_all = np.concatenate(ttft_all) if ttft_all else np.empty(0)
    tpot_all = np.concatenate(tpot_all) if tpot_all else np.empty(0)
    q = _p90
    att = met / measured if measured else 0.0
    verdict, lo, hi = attainment_verdict(met, measured, slo.attainment)
    ms = [r.metrics for r in results]
    policy = ms[0].policy if ms else "lecture"
    cached = sum(m.cached_prompt_tokens for m in ms)
    admitted = sum(m.prompt_tokens_admitted for m in ms)
    caching = any(m.cache_hit_fraction_per_instance is not None for m in ms)
    why = []
    if verdict == "fail" or att < slo.attainment:
        why.append(f"attainment {att:.3f} below {slo.attainment:g}")
    elif verdict == "undecided":
        why.append(f"attainment {att:.3f} is not surely >= {slo.attainment:g}: its 95% Wilson interval "
                   f"{lo:.4f}-{hi:.4f} over {measured:,} measured requests holds the target")
    decided = verdict != "undecided"
    if overloaded:
        why.append("overloaded (the queue grows without bound)")
    decided = decided or overloaded or in_ctx > rejection_budget * requests
    if in_ctx > rejection_budget * requests:
        why.append(f"rejects {in_ctx:,} of {requests:,} requests that fit the model's context (an instance's KV "
                   "cache cannot hold them)" + (f"; the rejection budget allows {rejection_budget:g} of the requests"
                                                if rejection_budget > 0 else "; allow some with a rejection budget"))
    return Verification(attainment=att, ttft_p90_s=q(ttft_all), tpot_p90_s=q(tpot_all),
                        passed=not why, overloaded=overloaded,
                        runs=len(results), measured=measured, rejected=rejected, requests=requests,
                        policy=policy, preemptions=sum(int(m.preemptions) for m in ms),
                        cache_hit_fraction=cached / admitted if caching and admitted else float("nan"),
                        rejected_in_context=in_ctx, rejection_budget=float(rejection_budget), reason="; ".join(why),
                        attainment_ci95_lo=lo, attainment_ci95_hi=hi, decided=bool(decided),
                        runs_asked=int(runs_asked or len(results)), slo_percentile=slo.percentile,
                        ttft_at_percentile_s=_quantile(ttft_all, slo.attainment),
                        tpot_at_percentile_s=_quantile(tpot_all, slo.attainment))


def verify(plan: Plan, workloads, slo: SLO, *, horizon_s: float, catalog: Catalog | None = None,
           constants: StepConstants = StepConstants(), model: Model | None = None,
           measure_window=(0.2, 0.8), routing: str = "least-loaded", drain_s: float = 0.0,
           engine: dict | None = None, rejection_budget: float = 0.0) -> Verification:
    """Simulate a plan on each workload and pool the measured requests (SPEC §7).

    Parameters
    ----------
    plan : Plan
    workloads : sequence of (arrival_s, prompt_tokens, output_tokens), or SeedWorkloads
        One per seed: ``ndarray(float64) of shape (n,)`` ascending arrival times (s) and two
        ``ndarray(int64) of shape (n,)`` token counts. A
        :class:`~fastsim.search.confidence.SeedWorkloads` (what the planner passes) can grow: an
        undecided verdict (the attainment's 95% Wilson interval holds the target) doubles the
        seeds, up to :data:`~fastsim.search.confidence.MAX_SEED_FACTOR` x the seeds asked for
        (:func:`~fastsim.search.confidence.next_seed_count`); a plain sequence is judged as it is.
    slo : SLO
        Targets and the attainment a pass needs (its percentile: :attr:`SLO.percentile`).
    horizon_s : float
        Arrival window simulated (s).
    catalog : Catalog, optional
        Defaults to the built-in catalog.
    constants : StepConstants
        Step-model constants (SPEC §3).
    model : Model, optional
        The model, when it is not a catalog entry.
    measure_window : (float, float)
        Fractions of the arrival window bounding the measured requests (SPEC §1).
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
    drain_s : float
        Extra simulated time after the last arrival so that the measured requests can finish
        (default 0: the run ends with the arrival window, as SPEC §6 defines it). The measured
        requests stay those of the middle of the arrival window.
    rejection_budget : float
        Fraction of the requests (in [0, 1)) that may be rejected although they fit the model's
        context (their KV does not fit an instance) before the plan fails; default 0.

    Returns
    -------
    Verification
        Pooled over the runs; ``attainment`` is 0 when nothing was measured; ``reason`` says
        why it fails (an attainment still undecided after the seeds it may add fails: a pass is
        sure, :mod:`fastsim.search.confidence`).

    Raises
    ------
    FastsimInputError
        A negative or non-finite ``drain_s``, a rejection budget outside [0, 1); unknown names in the plan; anything
        :func:`fastsim.sim.simulate` rejects (bad arrays, horizon, SLO targets, window, routing).
    RuntimeError
        A simulator kernel reported an internal failure.
    """
    from ..errors import require_positive
    from ..sim import simulate_batch
    catalog, model = _plan_model(plan, catalog, model)
    if drain_s:
        require_positive("drain_s", drain_s)
    rejection_budget = _rejection_budget(rejection_budget)
    from .confidence import MAX_SEED_FACTOR, SeedWorkloads, next_seed_count
    sp, ekw = _simulated(plan, engine, catalog, constants, model)
    total = horizon_s + drain_s
    window = (measure_window[0] * horizon_s / total, measure_window[1] * horizon_s / total)

    def run(wls):
        # every seed in one parallel kernel call; results are identical to one simulate() per seed
        return simulate_batch([sp], list(wls), horizon_s=total, ttft_slo_s=slo.ttft_s, tpot_slo_s=slo.tpot_s,
                              max_context_tokens=model.max_context_tokens, routing=routing, **ekw,
                              measure_window=window, full=True)

    grows = isinstance(workloads, SeedWorkloads)
    wls = list(workloads)
    asked = len(wls)
    results = run(wls)
    v = _pooled(results, slo, window, total, model.max_context_tokens, rejection_budget, asked)
    while True:
        n = next_seed_count(len(wls), asked, v.decided, grows)
        if not n:
            break
        more = workloads.first(n)[len(wls):]
        results = list(results) + list(run(more))
        wls = wls + more
        v = _pooled(results, slo, window, total, model.max_context_tokens, rejection_budget, asked)
    if not v.decided:
        from dataclasses import replace
        tail = (f"; still so at {len(wls)} seeds ({MAX_SEED_FACTOR} x the {asked} asked, the most a verification "
                "adds)" if grows else "; no seeds to add (a trace replays once; a fixed set of workloads is judged "
                "as it is)")
        v = replace(v, reason=v.reason + tail)
    return v


def _rejection_budget(v) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        f = math.nan
    if not (0.0 <= f < 1.0):
        raise FastsimInputError("rejection_budget", v, "a fraction of the requests in [0, 1)")
    return f


def _lone_times(plan: Plan, prompt_tokens: float, output_tokens: float, catalog: Catalog | None = None,
                constants: StepConstants = StepConstants(), model: Model | None = None,
                prefill_gpu: bool = False) -> tuple:
    """``(ttft_s, tpot_s)`` of one request alone on an idle instance of the plan (SPEC §3 step model).

    TTFT alone = the prompt's prefill steps (chunks of ``chunk_tokens`` for colocated plans, one
    step plus the KV transfer for disaggregated ones); TPOT alone = one decode step at context
    ``P + O / 2``. A pipelined plan (``pp > 1``) takes every step through its stages in turn: the sum
    of the stage steps (:func:`fastsim.stepmodel.stage_params`, each over its own layers, its
    activation send included). ``prefill_gpu``: a disaggregated plan's prefill side on its own GPU and
    precision (as the simulator runs it); False prices it on the decode GPU (what
    :func:`lone_request_check` has always done). Raises FastsimInputError for unknown names or a
    colocated plan with ``chunk_tokens`` < 1.
    """
    catalog, model = _plan_model(plan, catalog, model)
    g, pr = catalog.gpu(plan.gpu), catalog.precision(plan.precision)
    L, h, hd = model.layers, model.attn_dim_prefill, model.attn_dim_decode
    P, O = float(prompt_tokens), float(output_tokens)
    if plan.mode == "disaggregated":
        gp, prp = ((catalog.gpu(plan.prefill_gpu_name), catalog.precision(plan.prefill_precision_name))
                   if prefill_gpu else (g, pr))
        pp = step_params(model, gp, prp, plan.prefill_tp, constants, **plan.layout_kwargs(plan.prefill_tp))
        ttft = float(step_time(pp, P, 0.0, 2.0 * L * h * P * P, 1.0)) + P * pp[P_KVPG] / pp[P_NET_BW]
        pd_ = step_params(model, g, pr, plan.decode_tp, constants, **plan.layout_kwargs(plan.decode_tp))
    elif int(getattr(plan, "pp", 1)) > 1:
        # a pipelined instance: the request's micro-batch crosses every stage in turn (a sequence is in
        # one micro-batch at a time), each stage over its own layers, its send to the next included
        from ..stepmodel import P_LAYERS, stage_params
        S = stage_params(model, g, pr, plan.tp, constants, pp=int(plan.pp), **plan.layout_kwargs(plan.tp))
        c = float(plan.chunk_tokens)
        if not c >= 1.0:
            raise FastsimInputError("chunk_tokens", plan.chunk_tokens, "an integer >= 1 (a colocated plan)")
        Ls = S[:, P_LAYERS]
        ttft, done = 0.0, 0.0
        while done < P:
            x = min(c, P - done)
            ttft += float(step_time(S, x, done, 2.0 * Ls * h * x * x + 4.0 * Ls * h * x * done, 1.0).sum())
            done += x
        ctx = float(model.kv_tokens_held(P + O / 2.0))
        return ttft, float(step_time(S, 1.0, ctx, 4.0 * Ls * hd * ctx, 1.0).sum())
    else:
        pd_ = step_params(model, g, pr, plan.tp, constants, **plan.layout_kwargs(plan.tp))
        c = float(plan.chunk_tokens)
        if not c >= 1.0:        # a zero chunk would never finish the prompt
            raise FastsimInputError("chunk_tokens", plan.chunk_tokens, "an integer >= 1 (a colocated plan)")
        ttft, done = 0.0, 0.0
        while done < P:
            x = min(c, P - done)
            ttft += float(step_time(pd_, x, done, 2.0 * L * h * x * x + 4.0 * L * h * x * done, 1.0))
            done += x
    ctx = float(model.kv_tokens_held(P + O / 2.0))
    tpot = float(step_time(pd_, 1.0, ctx, 4.0 * L * hd * ctx, 1.0))
    return ttft, tpot


def lone_request_check(plan: Plan, prompt_tokens: float, output_tokens: float, slo: SLO,
                       catalog: Catalog | None = None, constants: StepConstants = StepConstants(),
                       model: Model | None = None) -> str:
    """Why a request of these lengths misses its SLO even alone on an idle instance ('' if it does not).

    TTFT alone = the prompt's prefill steps (chunks of ``chunk_tokens`` for colocated plans, one
    step plus the KV transfer for disaggregated ones); TPOT alone = one decode step at context
    ``P + O / 2`` (SPEC §3 step model). More instances cannot fix either (lecture §2.3, lesson
    one).

    Parameters
    ----------
    plan : Plan
        A colocated plan must have ``chunk_tokens >= 1``.
    prompt_tokens, output_tokens : float
        Lengths of the request (tokens; the latency quantiles in :func:`repair`).
    slo : SLO
    catalog : Catalog, optional
        Defaults to the built-in catalog.
    constants : StepConstants
        Step-model constants (SPEC §3).
    model : Model, optional
        The model, when it is not a catalog entry.

    Returns
    -------
    str
        The reasons, joined by ``"; "``, or ``""`` when the lone request meets both targets.

    Raises
    ------
    FastsimInputError
        Unknown names, a TP that is not a power of two, a GPU without a peak for the
        precision, or a colocated plan with ``chunk_tokens`` < 1.
    """
    ttft, tpot = _lone_times(plan, prompt_tokens, output_tokens, catalog, constants, model)
    P, O = float(prompt_tokens), float(output_tokens)
    why = []
    if ttft > slo.ttft_s:
        why.append(f"a {P:.0f}-token prompt alone takes {ttft:.2f} s to its first token (TTFT target {slo.ttft_s:g} s)")
    if O > 1 and tpot > slo.tpot_s:
        why.append(f"one decode step alone takes {tpot * 1e3:.1f} ms (TPOT target {slo.tpot_s * 1e3:g} ms)")
    return "; ".join(why)


def _instances(plan: Plan) -> int:
    return plan.prefill_instances + plan.decode_instances if plan.mode == "disaggregated" else plan.instances


def repair(plan: Plan, workloads, slo: SLO, *, horizon_s: float, latency_prompt_tokens: float,
           latency_output_tokens: float, max_added: int | None = None, catalog: Catalog | None = None,
           constants: StepConstants = StepConstants(), model: Model | None = None,
           measure_window=(0.2, 0.8), routing: str = "least-loaded", engine: dict | None = None,
           rejection_budget: float = 0.0) -> RepairResult:
    """Verify a plan and add instances until it passes (SPEC §7).

    Colocated plans gain one instance at a time; disaggregated plans gain a decode instance when
    the TPOT at the SLO's percentile (P90 by default) misses its target, a prefill instance when the
    TTFT does (both when both do).
    Before adding anything, a request of the latency-quantile lengths is checked alone on an idle
    instance: if it already misses the SLO, no count can pass and the plan is reported unrepairable.

    A plan is also reported unrepairable when more than ``1 - slo.attainment`` of its requests
    are rejected (longer than the context or an instance's KV cache), or when it rejects
    requests that fit the model's context beyond ``rejection_budget`` (more instances of the
    same kind hold no more KV per request).

    Parameters
    ----------
    plan : Plan
    workloads : sequence of (arrival_s, prompt_tokens, output_tokens)
        As for :func:`verify`.
    slo : SLO
    horizon_s : float
        Arrival window simulated (s).
    latency_prompt_tokens, latency_output_tokens : float
        Lengths for the lone-request check (the P90s).
    max_added : int, optional
        Instance-adding rounds before giving up; default ``max(8, instances)`` (up to a doubling
        of a large plan).
    catalog, constants, model, measure_window, routing, engine, rejection_budget
        As for :func:`verify` (with an engine policy the lone-request check, which follows the
        lecture's chunking, is skipped).

    Returns
    -------
    RepairResult
        ``passed`` False with a ``reason`` when no count can pass or the rounds ran out.

    Raises
    ------
    FastsimInputError
        As for :func:`verify`.
    RuntimeError
        A simulator kernel reported an internal failure.
    """
    catalog, model = _plan_model(plan, catalog, model)
    kw = dict(horizon_s=horizon_s, catalog=catalog, constants=constants, model=model,
              measure_window=measure_window, routing=routing, engine=engine, rejection_budget=rejection_budget)
    v = verify(plan, workloads, slo, **kw)
    history = [(plan, v)]
    if v.passed:
        return RepairResult(plan, v, True, None, "", history)
    # the lone-request check follows the lecture's chunking; an engine policy chunks by its own budget
    why = "" if engine is not None else lone_request_check(plan, latency_prompt_tokens, latency_output_tokens, slo,
                                                           catalog, constants, model)
    if not why and v.rejected_in_context > v.rejection_budget * v.requests:
        why = (f"{v.rejected_in_context:,} requests that fit {model.name}'s context of {model.max_context_tokens:,} "
               "tokens are rejected (an instance's KV cache cannot hold them): more instances of the same kind "
               "cannot serve them")
    if not why and v.requests and v.rejected / v.requests > 1.0 - slo.attainment:
        why = (f"{v.rejected:,} requests are rejected (longer than {model.name}'s context of "
               f"{model.max_context_tokens:,} tokens or than an instance's KV cache): more instances of the "
               "same kind cannot serve them")
    if why:
        return RepairResult(plan, v, False, None, "no instance count can pass: " + why, history)
    start = _instances(plan)
    if max_added is None:
        max_added = max(8, start)
    cur = plan
    for _ in range(max_added):
        if cur.mode == "disaggregated":
            # the side whose latency at the SLO's percentile misses (the P90s by default)
            add_d = v.tpot_at_percentile_s > slo.tpot_s or not (v.ttft_at_percentile_s > slo.ttft_s)
            add_p = v.ttft_at_percentile_s > slo.ttft_s
            cur = cur.with_instances(prefill_instances=cur.prefill_instances + int(add_p),
                                     decode_instances=cur.decode_instances + int(add_d))
        else:
            cur = cur.with_instances(instances=cur.instances + 1)
        v = verify(cur, workloads, slo, **kw)
        history.append((cur, v))
        if v.passed:
            return RepairResult(cur, v, True, start, "", history)
    return RepairResult(cur, v, False, start, f"still failing after adding {max_added} instances", history)


def horizon_floor(plan: Plan, prompt_tokens: float, output_tokens: float, slo: SLO, *,
                  measure_window=(0.2, 0.8), catalog: Catalog | None = None,
                  constants: StepConstants = StepConstants(), model: Model | None = None) -> HorizonFloor:
    """The horizons below which a capacity search of a plan measures its horizon rather than the plan.

    The rule (SPEC §7 judges a probe on the requests arriving in the measure window ``(a, b)`` of
    the horizon H, and a request still running at the horizon is a miss: a run does not drain):

    - Refused below ``min_horizon_s``. A mean-length request takes ``lone_s`` alone on an idle
      instance. The measured requests arriving in the last ``lone_s - (1 - b) H`` seconds of the
      window cannot finish even alone; when they are more than ``1 - attainment`` of the window
      (``H < lone_s / ((1 - b) + (1 - attainment)(b - a))``), no rate can pass.
    - Understated below ``full_horizon_s``. Near capacity a request takes about what its SLO
      allows, ``slo_pace_s`` = TTFT target + (O - 1) x TPOT target; when that exceeds the
      ``(1 - b) H`` seconds after the window, the last measured requests are cut off at the
      horizon and the probes fail below the capacity (chat on 2 x B200 FP8 TP1, 4 seeds: 31.0
      req/s at 70 s, 17.1 at 40 s, 15.0 at 20 s, 2.2 at 10 s; 31.3 at 100 s and 30.4 at 400 s).

    Parameters
    ----------
    plan : Plan
    prompt_tokens, output_tokens : float
        The workload's mean lengths (tokens, > 0).
    slo : SLO
    measure_window : (float, float)
        Fractions of the horizon bounding the measured requests.
    catalog : Catalog, optional
        Defaults to the built-in catalog.
    constants : StepConstants
        Step-model constants (SPEC §3).
    model : Model, optional
        The model, when it is not a catalog entry.

    Returns
    -------
    HorizonFloor
        The mean request's lone latency and SLO pace, and the two horizons (s).

    Raises
    ------
    FastsimInputError
        Unknown names in the plan, or a colocated plan with ``chunk_tokens`` < 1.
    """
    a, b = float(measure_window[0]), float(measure_window[1])
    P, O = float(prompt_tokens), float(output_tokens)
    ttft, tpot = _lone_times(plan, P, O, catalog, constants, model, prefill_gpu=True)
    more = max(O - 1.0, 0.0)
    lone = ttft + more * tpot
    pace = slo.ttft_s + more * slo.tpot_s
    room = (1.0 - b) + (1.0 - slo.attainment) * (b - a)
    return HorizonFloor(P, O, lone, pace, lone / room if room > 0 else math.inf,
                        pace / (1.0 - b) if b < 1.0 else math.inf)


def unsimulated_reason(plan: Plan, engine: dict | None = None, prefixes: bool = False) -> str:
    """Why the planner's verification cannot simulate a plan as the screen sized it ("" when it can).

    The lecture policy of the simulator has neither speculative decoding nor a prefix cache; the
    engine policies (:mod:`fastsim.sim.policy`) have both, the cache only for a workload that
    carries prefix block ids (a trace with ``hash_ids``, such as ``mooncake-conv``). A pipelined
    plan (``pp > 1``, :class:`fastsim.sim.PipelinePlan`) runs under the lecture and trtllm policies
    only, without a prefix cache (:func:`fastsim.search.pipeline_refusal`).

    Parameters
    ----------
    plan : Plan
    engine : dict, optional
        The verification's engine policy (``engine`` of :func:`fastsim.search.verify`).
    prefixes : bool
        Whether the verification workload carries prefix block ids.

    Returns
    -------
    str
        A reason, or "" when the plan can be verified.
    """
    if engine is not None and plan.mode == "disaggregated":
        return "a disaggregated plan, which the engine policies do not simulate (they model colocated instances)"
    from .adapter import pipeline_refusal
    why = pipeline_refusal(plan, engine)
    if why:
        return why
    if int(getattr(plan, "pp", 1)) > 1 and plan.prefix_hit_fraction:
        return (f"sized for {plan.prefix_hit_fraction:.0%} prefix-cache hits on a pipelined instance, which the "
                "simulator's pipeline does not cache")
    if plan.spec_gamma and engine is None:
        return ("speculative decoding, which the lecture policy of the verification does not simulate "
                "(--policy vllm or sglang does)")
    if plan.prefix_hit_fraction and (engine is None or not prefixes):
        return (f"sized for {plan.prefix_hit_fraction:.0%} prefix-cache hits, which the verification simulates "
                "only under an engine policy (--policy vllm or sglang) on a workload with prefix blocks (a trace "
                "with hash_ids, such as mooncake-conv)")
    return ""
