"""The maximum sustainable rate of a plan on a synthetic workload, one plan or many (SPEC §7).

:func:`max_sustainable_rate` drives one ``_Bisection`` (:mod:`fastsim.search._bisect`), each probe
one parallel batch of its seeds; :func:`max_sustainable_rates` drives many in lockstep, every
round's probes of all plans in batches of at most ``_BATCH_REQUESTS`` requests (each run with its
plan's SLO), with warm starts along families of plans and their groups, probes in stages decided
early, runs stopped early and regula falsi inside a bracket. Both open with the same checks
(:mod:`fastsim.search.checks`) and give the same answer for a plan with ``warm_start=False``
and ``early_stop_alpha=0``.

``_BATCH_REQUESTS`` is read through :mod:`fastsim.search` and ``simulate_batch`` through
:mod:`fastsim.sim` when a search runs, so that replacing them there takes effect.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..analytic import Plan
from ..catalog import Catalog, Model, default_catalog
from ..errors import FastsimInputError
from ..stepmodel import StepConstants
from ._bisect import _CRN, _Bisection
from .adapter import _plan_model, _simulated, sim_plan
from .checks import _check_budget, _check_seed, _check_slo, _floor_of, _max_probe_rate, _mean_lengths, _search_inputs
from .records import SLO, CapacityResult


def max_sustainable_rate(plan: Plan, dists, slo: SLO, *, seeds: int = 16, horizon_s: float = 600.0,
                         rel_tol: float = 0.01, rate_hint_req_per_s: float | None = None, seed: int = 0,
                         catalog: Catalog | None = None, constants: StepConstants = StepConstants(),
                         model: Model | None = None, measure_window=(0.2, 0.8), routing: str = "least-loaded",
                         arrival: str = "poisson", cv: float = 1.0, max_probes: int = 40,
                         bootstrap: int = 2000, on_probe_start=None, on_runs=None, on_probe=None,
                         engine: dict | None = None) -> CapacityResult:
    """Bisect for the largest rate a plan sustains while passing its SLOs (SPEC §7).

    Each probe simulates every seed (``horizon_s`` each) in one parallel batch with common random
    numbers: all probes of a seed see the same requests, their arrival times scaled by 1 / rate.
    A probe passes when the attainment over all seeds' measured requests is >= ``slo.attainment``
    and the seeds together are not overloaded (:func:`pooled_overload`). The bracket starts at the analytic capacity (or
    ``rate_hint_req_per_s``) and grows or shrinks by 1.25x until it straddles the answer, then
    bisects to ``rel_tol``. The 95% interval is a bootstrap over seeds of the same probe results
    (see :class:`CapacityResult`); the estimate and the bracket are the same estimator on the same
    probes, all seeds at once, so with 2 seeds (half of the resamples are the full sample) the
    estimate always lies inside the interval.

    The horizon. A run does not drain: a measured request still running at the horizon is a miss.
    So a horizon below :func:`horizon_floor`'s ``min_horizon_s`` (a mean request, alone on an
    idle instance, could not finish in time from the last part of the measure window, so no rate
    could pass) is refused, and one below its ``full_horizon_s`` (shorter than a mean request's
    SLO pace, TTFT target + (O - 1) x TPOT target, over ``1 - measure_window[1]``) gets a note in
    ``CapacityResult.notes``: it understates the capacity. A probe whose runs measured no request
    has no attainment (NaN) and, unless overloaded, no verdict: the search stops there, and when
    no probe measured anything the result is undetermined (``rate_req_per_s`` NaN, with a note),
    never a rate of about 0. No probe goes above :data:`MAX_RATE_REQ_PER_S` or the rate whose
    horizon holds :data:`fastsim.workload.MAX_REQUESTS` requests per seed.

    Parameters
    ----------
    plan : Plan
    dists : Scenario, str or (LengthDist, LengthDist)
        Length distributions of the synthetic workload (as for
        :func:`fastsim.workload.synthesize`).
    slo : SLO
    seeds : int
        Replications per probe (>= 1; >= 2 for an interval).
    horizon_s : float
        Simulated seconds per run (600 by default: lecture §2.3 lesson three).
    rel_tol : float
        Relative width of the final bracket, in (0, 1).
    rate_hint_req_per_s : float or None, optional
        First probe (req/s): a finite number > 0 within :func:`check_rate_hint`'s bound (at most
        :data:`MAX_RATE_REQ_PER_S`, and ``MAX_REQUESTS / (2 x horizon_s)``); None (default) the
        plan's analytic capacity (1 req/s when it is 0).
    seed : int
        Root seed of the per-seed workloads and of the bootstrap (an integer >= 0).
    catalog : Catalog, optional
        Defaults to the built-in catalog.
    constants : StepConstants
        Step-model constants (SPEC §3).
    model : Model, optional
        The model, when it is not a catalog entry.
    measure_window : (float, float)
        Fractions of the horizon bounding the measured requests (SPEC §1).
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
    arrival : {'poisson', 'gamma'}
        Arrival process, with inter-arrival coefficient of variation ``cv`` (1 for Poisson).
    cv : float
    max_probes : int
        Probe budget; the bracket reached is reported when it runs out (up to three more probes
        may extend the bootstrap below the lowest probe).
    bootstrap : int
        Bootstrap resamples for the interval; 0 skips it.
    on_probe_start : callable(rate_req_per_s: float, runs: int), optional
        Called before each probe with its rate and its number of runs (``seeds``).
    on_runs : callable(n: int), optional
        Called as runs of the current probe finish, with how many just finished. When given, the
        seeds of a probe run in batches of as many runs as numba has threads (the results are
        identical; a large batch balances uneven runs a little better).
    on_probe : callable(rate_req_per_s: float, attainment: float, overloaded: bool, passed: bool), optional
        Called after each probe with its entry of ``probes``.

    Returns
    -------
    CapacityResult
        ``rate_req_per_s`` interpolated inside the final bracket (see :class:`CapacityResult`);
        0 and bracket ``(0, hi)`` when no probe passed below the smallest failing one; ``hi``
        inf when none failed; NaN (``undetermined``) when no probe measured a request.

    Raises
    ------
    FastsimInputError
        ``slo`` not an :class:`SLO`, ``seeds`` not an integer >= 1, ``rel_tol`` outside (0, 1),
        a non-positive horizon, a horizon below :func:`horizon_floor`'s ``min_horizon_s``
        (``horizon_s``), a rate hint that is not None or a finite number > 0 within
        :func:`check_rate_hint`'s bound (``rate_hint_req_per_s``), an analytic capacity whose
        first draw exceeds the workload limit (``horizon_s``), a plan with more than
        :data:`fastsim.analytic.MAX_INSTANCES` instances on a side (``plan.instances``,
        ``plan.prefill_instances``, ``plan.decode_instances``), ``seed`` not an integer >= 0,
        ``max_probes`` below 1, ``bootstrap`` neither 0 nor at least 20, unknown names in the
        plan, a bad length distribution, measure window, arrival process or cv, or anything
        :func:`fastsim.sim.simulate_batch` rejects.
    RuntimeError
        A simulator kernel reported an internal failure.
    """
    from ..sim import simulate_batch
    catalog, model = _plan_model(plan, catalog, model)
    _check_slo("slo", slo)
    S, r, analytic = _search_inputs(plan, seeds, rel_tol, horizon_s, rate_hint_req_per_s)
    _check_seed("seed", seed)
    _check_budget(max_probes, bootstrap)
    from ..sim.engine import measure_fractions
    window = measure_fractions(measure_window)
    floor = _floor_of(plan, dists, slo, float(horizon_s), window, catalog, constants, model)
    sp, ekw = _simulated(plan, engine, catalog, constants, model)
    crn = _CRN(dists, S, float(horizon_s), seed, arrival, cv, first_rate=2.0 * r)
    bis = _Bisection(r, S, float(rel_tol), int(max_probes), int(bootstrap), seed, slo, float(horizon_s), analytic,
                     max_rate=_max_probe_rate(float(horizon_s)), floor=floor, measure_window=window)
    while True:
        rate = bis.next_rate()
        if rate is None:
            break
        wls = crn.at(rate)
        if on_probe_start is not None:
            on_probe_start(float(rate), len(wls))
        step = len(wls)
        if on_runs is not None:
            from .._threads import num_threads
            step = num_threads()
        ms = []
        for k in range(0, len(wls), step):
            ms += simulate_batch([sp], wls[k:k + step], horizon_s=horizon_s, ttft_slo_s=slo.ttft_s,
                                 tpot_slo_s=slo.tpot_s, max_context_tokens=model.max_context_tokens, routing=routing,
                                 measure_window=measure_window, **ekw)
            if on_runs is not None:
                on_runs(len(wls[k:k + step]))
        bis.feed(rate, ms)
        if on_probe is not None:
            on_probe(*bis.probes[-1])
    return bis.result()


#: Requests one batch of simulations of :func:`max_sustainable_rates` may hold (its runs'
#: rescaled arrivals, about 24 bytes each): a larger round is simulated in several batches.
_BATCH_REQUESTS = 20_000_000

#: Seeds a probe of :func:`max_sustainable_rates` runs before its sequential test
#: (:func:`_early_verdict`), and the test's one-sided error level per criterion.
FIRST_SEEDS = 4
EARLY_STOP_ALPHA = 1e-3

#: First relative step of the galloping search from the analytic capacity (no sibling solved
#: yet), in units of ``rel_tol``.
_STEP_COLD = 4.0
#: Half-width, in units of ``rel_tol``, of the range a family's solved siblings predict a plan's
#: simulated / analytic ratio to lie in (their trend misses it by a median 0.06%, at most 1%, on
#: the default grid of H200 FP8 configurations at 16 seeds x 600 s): the first probe is at its
#: low end, the second at its high end, a bracket of ``rel_tol``.
_HALF_WIDTH_SIBLINGS = 0.5


def _family_key(plan: Plan):
    """Plans that differ only in one instance count share a key (their searches warm-start each other).

    The count is ``instances`` of a colocated plan and ``decode_instances`` of a disaggregated one
    (whose prefill side stays in the key: plans with another prefill count are another family).
    """
    return replace(plan, instances=0, decode_instances=0)


def _family_count(plan: Plan) -> int:
    """The instance count that varies along a family (:func:`_family_key`)."""
    return int(plan.decode_instances if plan.mode == "disaggregated" else plan.instances)


def _predicted_ratio(done, count):
    """Simulated / analytic capacity of a plan of ``count`` instances from its solved smaller siblings.

    ``done`` is ``[(count, ratio), ...]`` in order of count, at least two. The last two are
    extrapolated linearly in 1 / count (a pool of more instances queues less, so the ratio rises
    towards a limit); the change is at most the last one when the counts are evenly spaced.
    """
    (n2, r2), (n1, r1) = done[-2], done[-1]
    if n1 == n2 or count == n1:
        return r1
    return r1 + (r1 - r2) * (1.0 / count - 1.0 / n1) / (1.0 / n1 - 1.0 / n2)


def max_sustainable_rates(plans, dists, slos, *, seeds: int = 16, horizon_s: float = 600.0, rel_tol: float = 0.01,
                          rate_hints_req_per_s=None, seeds_root=0, catalog: Catalog | None = None,
                          constants: StepConstants = StepConstants(), models=None, measure_window=(0.2, 0.8),
                          routing: str = "least-loaded", max_probes: int = 40, bootstrap: int = 2000,
                          warm_start: bool = True, first_seeds: int = FIRST_SEEDS,
                          early_stop_alpha: float = EARLY_STOP_ALPHA, on_round=None) -> list:
    """The maximum sustainable rates of many plans, their searches advancing together (SPEC §7).

    Each round simulates the next probe of every plan still searching in batches of parallel
    runs (plans x seeds), longest first, so the threads stay busy across plans and the per-probe
    overhead is paid once per round. Every plan keeps its own common random numbers (those of
    :func:`max_sustainable_rate` with ``seed`` = its ``seeds_root``), drawn once for all plans of
    the same workload and root.

    With ``warm_start=False`` and ``early_stop_alpha=0`` each plan gets exactly
    :func:`max_sustainable_rate`'s search (the same probes and estimator, so the same
    :class:`CapacityResult`). By default two things make it several times cheaper, with the
    answer the same to the tolerance whenever the verdicts are monotone in rate (both final
    brackets then hold the same crossing; :attr:`CapacityResult.contradicting_probes` lists the
    probes that show they are not, as happens when few seeds or a short horizon leave the
    attainment or the backlog slope hovering at its threshold over a range of rates). On the
    default grid at 16 seeds x 600 s, seven searches in ten end in two probes:

    - Warm start. Plans that differ only in their instance count (colocated) or decode instance
      count (disaggregated) form a family, searched in order of that count. A family's plan
      with solved siblings expects its simulated / analytic ratio within ``rel_tol / 2`` of
      their prediction (the solved sibling's ratio, or the trend of the last two, linear in
      1 / count): its first probe is at the low end of that range, the next one step of
      ``rel_tol`` above, a bracket of ``rel_tol`` about the answer whose ends, each about
      ``rel_tol / 2`` from it, are decided on fewer seeds. The first plan of a family starts
      at its analytic capacity, galloping in steps of ``4 x rel_tol``. (Another family's
      ratio, of another TP, GPU or precision on the same workload, predicts it no better
      than the analytic capacity does: on the H200 FP8 grid of the four scenarios it was
      closer for 5 of 10 families and farther for 3, and a 54-instance TP1 plan's 1.39 sent
      the 2-instance plans of the default grid 40% too high.) From its first probe a search
      gallops (the step doubling until the verdict turns, or jumping along the secant of the
      attainment once two probes give it), then interpolates to ``rel_tol``: a start within
      ``rel_tol / 2`` of the answer ends in two probes.
    - Sequential probes. A probe runs its seeds in stages of ``first_seeds`` (``first_seeds``,
      twice as many, ..., then all ``seeds``) and ends at the first stage that decides it: when its misses surely
      exceed what the pooled attainment of all ``seeds`` can tolerate, whatever the others give
      (exact), or when :func:`_early_verdict` is sure of the verdict all ``seeds`` would give
      (one-sided level ``early_stop_alpha`` per criterion: nominally at most about ``2 x
      early_stop_alpha`` per look of the probes it decides are decided otherwise than with
      every seed). Such a probe's pooled figures, and its part in the bootstrap, are its seeds';
      ``CapacityResult.probe_seeds`` says how many ran.
    - Early stop of runs. A run ends as soon as its measured requests that surely missed the SLO
      (:func:`fastsim.sim.simulate_batch`'s ``stop_after_misses``; a request's TPOT is judged
      a mean request's SLO time, ``ttft + tpot x (mean output - 1)``, after its arrival) reach
      what fails the probe: in a probe's first stage each run's share of the probe's
      tolerable misses (if every run of the stage stops, the probe surely fails; a run that
      stopped in a stage left undecided runs again, whole, in the next), in later stages the
      misses that fail the probe on their own with those already known. A stopped run counts
      as overloaded, its attainment that of what it simulated (a lower bound). A probe
      decided so is a fail whatever its other seeds would give. ``CapacityResult.probe_runs``
      and ``probe_stopped`` count the runs simulated and stopped.

    Parameters
    ----------
    plans : sequence of Plan
        Colocated or disaggregated plans (lecture scheduler), k of them.
    dists : Scenario, str, (LengthDist, LengthDist), or a sequence of k of them
        Each plan's length distributions (one for all, or one per plan).
    slos : SLO or sequence of k SLO
    seeds, horizon_s, rel_tol, max_probes, bootstrap, measure_window, routing, catalog, constants
        As for :func:`max_sustainable_rate`, shared by all plans.
    rate_hints_req_per_s : float, or sequence of k float or None, optional
        First probe of each plan: a finite number > 0 within :func:`check_rate_hint`'s bound, or
        None for its analytic capacity (or its family's prediction).
    seeds_root : int or sequence of k int
        Each plan's ``seed`` of :func:`max_sustainable_rate` (its workloads and bootstrap), an
        integer >= 0.
    models : sequence of k Model or None, optional
        Models that are not catalog entries.
    warm_start : bool
        Warm-start each family's searches from its solved siblings and gallop (True), or run
        :func:`max_sustainable_rate`'s bisection from each plan's analytic capacity (False).
    first_seeds : int
        Seeds of a probe's first stage (the sequential probes), at least 2; ``>= seeds`` or 0
        turns the stages and the early stop of runs off.
    early_stop_alpha : float
        The sequential test's one-sided level per criterion, in [0, 0.5); 0 turns the stages
        and the early stop of runs off.
    on_round : callable(round: int, searching: int, runs: int), optional
        Called before each round with the plans probing in it and the runs it simulates.

    Returns
    -------
    list of CapacityResult
        One per plan, in order (a plan given twice with the same workload, SLO, seeds and hint
        is searched once and gets the same result).

    Raises
    ------
    FastsimInputError
        As :func:`max_sustainable_rate`, with the caller's parameter names: an entry of a
        sequence is named with its index (``rate_hints_req_per_s[1]``, ``seeds_root[0]``,
        ``slos[2]``; the parameter itself when one value was given for all plans), a plan's
        instance count or a horizon below a plan's floor names the plan (``plans[3].instances``;
        ``horizon_s`` with ``plans[3]`` and the plan in the message). Also a single Plan instead
        of a sequence, sequences whose length is not k, ``first_seeds`` not 0 or an integer >= 2,
        ``early_stop_alpha`` not a number in [0, 0.5), or ``warm_start`` not a bool.
    RuntimeError
        A simulator kernel reported an internal failure.
    """
    from ..sim import simulate_batch
    from . import _BATCH_REQUESTS       # read on the package, where it may be replaced
    catalog = catalog or default_catalog()
    if isinstance(plans, Plan):
        raise FastsimInputError("plans", "a single Plan", "a sequence of Plan (use max_sustainable_rate for one)")
    plans = list(plans)
    k = len(plans)

    def scalar(v, kind=SLO):
        return v is None or isinstance(v, (kind, str, int, float, np.integer, np.floating))

    def per_plan(field, v, kind):
        if scalar(v, kind):
            return [v] * k
        try:
            v = list(v)
        except TypeError:
            raise FastsimInputError(field, v, f"one value, or a sequence of one per plan ({k})") from None
        if len(v) != k:
            raise FastsimInputError(field, f"{len(v)} entries", f"one, or one per plan ({k})")
        return v
    dl = [dists] * k if not isinstance(dists, (list, tuple)) or (len(dists) == 2 and not isinstance(dists[0], str)
                                                                 and hasattr(dists[0], "kind")) else list(dists)
    if len(dl) != k:
        raise FastsimInputError("dists", f"{len(dl)} entries", f"one, or one per plan ({k})")
    sl = per_plan("slos", slos, SLO)
    hints = per_plan("rate_hints_req_per_s", rate_hints_req_per_s, float)
    roots = per_plan("seeds_root", seeds_root, int)
    ml = per_plan("models", models, Model)

    def name(field, v, i):
        """The caller's name of plan i's entry: the parameter, indexed when a sequence was given."""
        return field if scalar(v) else f"{field}[{i}]"
    for i in range(k):
        _check_slo(name("slos", slos, i), sl[i])
        _check_seed(name("seeds_root", seeds_root, i), roots[i])
    if not isinstance(first_seeds, (int, np.integer)) or isinstance(first_seeds, bool) or first_seeds < 0:
        raise FastsimInputError("first_seeds", first_seeds, "an integer >= 0 (0: no sequential test)")
    if 0 < first_seeds < 2:
        raise FastsimInputError("first_seeds", first_seeds, "0 (no sequential test) or an integer >= 2 (the test "
                                "needs the spread of at least two seeds)")
    if not isinstance(early_stop_alpha, (int, float, np.floating)) or isinstance(early_stop_alpha, bool) \
            or not (0.0 <= float(early_stop_alpha) < 0.5):
        raise FastsimInputError("early_stop_alpha", early_stop_alpha, "a level in [0, 0.5) (0: no sequential test)")
    if not isinstance(warm_start, (bool, np.bool_)):
        raise FastsimInputError("warm_start", warm_start, "True or False")
    _check_budget(max_probes, bootstrap)
    from ..sim.engine import measure_fractions
    window = measure_fractions(measure_window)
    checked, floors = [], []
    for i, plan in enumerate(plans):
        model = ml[i] or catalog.model(plan.model)
        try:
            checked.append((model, *_search_inputs(plan, seeds, rel_tol, horizon_s, hints[i],
                                                   name("rate_hints_req_per_s", rate_hints_req_per_s, i))))
            floors.append(_floor_of(plan, dl[i], sl[i], float(horizon_s), window, catalog, constants, model))
        except FastsimInputError as exc:
            if exc.field.startswith("plan.") or exc.field == "horizon_s":
                # say which plan: the caller passed a list
                raise FastsimInputError(exc.field.replace("plan.", f"plans[{i}].", 1), exc.value,
                                        f"{exc.allowed} (plans[{i}]: {plan.describe()})") from None
            raise
    S = int(seeds)
    tol = float(rel_tol)
    # a plan given twice (with the same workload, SLO, seeds, model and hint) is searched once;
    # a disaggregated plan's ``tp`` plays no part in its simulation
    first_of: dict = {}
    same_as = []
    for i, plan in enumerate(plans):
        sim_key = replace(plan, tp=0) if plan.mode == "disaggregated" else plan
        same_as.append(first_of.setdefault((sim_key, id(dl[i]), sl[i], roots[i], checked[i][0].name, hints[i]), i))
    uniq = [i for i in range(k) if same_as[i] == i]
    # families: plans that differ only in instance counts (same workload, SLO, model), by size
    families: dict = {}
    for i in uniq:
        key = (_family_key(plans[i]), id(dl[i]), sl[i], checked[i][0].name) if warm_start and hints[i] is None else i
        families.setdefault(key, []).append(i)
    chains = [sorted(m, key=lambda i: (_family_count(plans[i]), i)) for m in families.values()]
    crns: dict = {}
    exact = not warm_start and not early_stop_alpha > 0
    for i in uniq:
        if exact:       # the one-plan search's own draws, bit for bit
            crns[i] = _CRN(dl[i], S, float(horizon_s), roots[i], first_rate=2.0 * checked[i][2])
            continue
        c = crns.get((id(dl[i]), roots[i]))
        if c is None:
            c = crns[(id(dl[i]), roots[i])] = _CRN(dl[i], S, float(horizon_s), roots[i], growth=1.5)
        # the largest rate a plan is likely to probe: its first rate, or its analytic capacity
        # with the margin of the simulated / analytic ratios seen (lecture §6: 0.69 to 1.11)
        c.want(1.25 * max(checked[i][2], checked[i][3]))
    crn_of = {i: i if exact else (id(dl[i]), roots[i]) for i in uniq}
    sp_of = {}
    lags = {}
    results = [None] * k
    active: dict = {}        # plan -> its _Bisection
    solved = [[] for _ in chains]   # per chain: (count, simulated / analytic) of its solved plans
    pos = [0] * len(chains)

    def start(c):
        i = chains[c][pos[c]]
        model, _, r, analytic = checked[i]
        step0 = None
        if warm_start:
            done = [d for d in solved[c] if d[1] is not None]
            step0 = _STEP_COLD * tol
            pred = hw = None
            if done and analytic > 0:
                pred = done[-1][1]
                if len(done) >= 2:
                    pred = _predicted_ratio(done, _family_count(plans[i]))
                    pred = pred if pred > 0 else done[-1][1]
                hw = _HALF_WIDTH_SIBLINGS * tol
            if pred is not None:
                # the expected crossing within pred x (1 +- hw): the first probe at its low end, the
                # galloping step to its high end (a bracket of rel_tol about the crossing when
                # hw is half of it, each end far enough from it to be decided on fewer seeds)
                r = pred * (1.0 - hw) * analytic
                step0 = tol if hw <= 0.5 * tol else 2.0 * hw / (1.0 - hw)
            step0 *= 1.0 - 1e-9          # a bracket of one step is within rel_tol despite rounding
        sp_of[i] = sim_plan(plans[i], catalog, constants, model)
        fs = int(first_seeds) if early_stop_alpha > 0 else 0
        r = min(r, _max_probe_rate(float(horizon_s)))     # a sibling's prediction may overshoot the limit
        crn = crns[crn_of[i]]
        active[i] = _Bisection(r, S, tol, int(max_probes), int(bootstrap), roots[i], sl[i], float(horizon_s),
                               analytic, step0=step0, first_seeds=fs, alpha=float(early_stop_alpha),
                               max_rate=_max_probe_rate(float(horizon_s)), floor=floors[i], measure_window=window,
                               measured_fn=lambda rate, crn=crn: crn.measured(rate, window))
        # the early stop judges a request's TPOT a mean request's SLO time after its arrival
        lags[i] = sl[i].ttft_s + sl[i].tpot_s * max(_mean_lengths(dl[i])[1] - 1.0, 0.0)

    chain_of = {i: c for c, m in enumerate(chains) for i in m}
    for c in range(len(chains)):
        start(c)
    rnd = 0
    while active:
        todo = []
        for i, b in list(active.items()):
            nxt = b.next_probe()
            if nxt is None:
                results[i] = b.result()
                del active[i]
                sp_of.pop(i, None)
                if exact:
                    crns.pop(i, None)
                c = chain_of[i]
                res = results[i]
                ok = res.analytic_req_per_s > 0 and res.rate_req_per_s > 0 and math.isfinite(res.bracket[1])
                solved[c].append((_family_count(plans[i]), res.rate_req_per_s / res.analytic_req_per_s if ok else None))
                pos[c] += 1
                if pos[c] < len(chains[c]):
                    start(c)
                    nxt = active[chains[c][pos[c]]].next_probe()
                    todo.append((chains[c][pos[c]], nxt))
                continue
            todo.append((i, nxt))
        if not todo:
            break
        # one batch per context limit (each run with its plan's SLO), cut at _BATCH_REQUESTS
        # requests: every run of the round on the threads at once
        batches: dict = {}
        for i, (rate, seeds, stops) in todo:
            batches.setdefault(checked[i][0].max_context_tokens, []).append((i, rate, seeds, stops))
        if on_round is not None:
            on_round(rnd, len(todo), sum(len(seeds) for _, (_, seeds, _) in todo))
        for ctx, owners in batches.items():
            at = 0
            while at < len(owners):
                ps, ws, fed, load, cut, lag, ttft, tpot = [], [], [], 0, [], [], [], []
                while at < len(owners) and (not fed or load < _BATCH_REQUESTS):
                    i, rate, seeds, stops = owners[at]
                    wl = crns[crn_of[i]].at_seeds(rate, seeds)
                    ps += [sp_of[i]] * len(wl)
                    ws += wl
                    cut += list(stops) if stops is not None else [0] * len(wl)
                    lag += [lags.get(i, 0.0)] * len(wl)
                    ttft += [sl[i].ttft_s] * len(wl)
                    tpot += [sl[i].tpot_s] * len(wl)
                    load += sum(w[0].shape[0] for w in wl)
                    fed.append((i, rate, seeds))
                    at += 1
                stop_kw = dict(stop_after_misses=cut, stop_lag_s=lag) if any(cut) else {}
                ms = simulate_batch(ps, ws, horizon_s=horizon_s, ttft_slo_s=ttft, tpot_slo_s=tpot,
                                    max_context_tokens=ctx, routing=routing, measure_window=measure_window, **stop_kw)
                del ps, ws
                j = 0
                for i, rate, seeds in fed:
                    active[i].feed(rate, ms[j:j + len(seeds)], seeds)
                    j += len(seeds)
        rnd += 1
    for i in range(k):
        if results[i] is None:
            results[i] = results[same_as[i]]
    return results
