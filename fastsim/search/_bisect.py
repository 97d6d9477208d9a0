"""The machinery of the rate searches: common random numbers, verdicts, the estimator, the bisection.

- ``_CRN``: each seed's requests drawn once at a high rate and rescaled to every probe (SPEC §6);
- ``_probe_verdict``: how a probe is judged from its runs (SPEC §7: pooled attainment, and
  :func:`~fastsim.search.pooled_overload`);
- ``_pooled_figures``, ``_bracket_capacities``, ``_capacity_from``, ``_capacities_from``: the
  capacity estimator over the probes, for all seeds and for each bootstrap resample of them;
- ``_early_verdict``: the sequential test that decides a probe from its first seeds;
- ``_Bisection``: the search of one plan as an ask/tell machine (``next_rate`` / ``next_probe``,
  ``feed``, ``result``), driven by a plain loop for one plan or many in lockstep
  (:mod:`fastsim.search.rate`).
"""
from __future__ import annotations

import math

import numpy as np

from .checks import _max_probe_rate
from .records import SLO, CapacityResult
from .verify import pooled_overload


class _CRN:
    """Per-seed requests drawn once at a high rate and rescaled to each probe (common random numbers).

    Request i of seed s arrives at ``t_i(max_rate) x max_rate / rate``, with the same lengths at
    every rate; the lower rate sees a prefix of the requests (SPEC §6: :func:`synthesize` draws
    the same requests at any rate, only more of them at a higher one). So one draw serves every
    rate up to ``max_rate``, and every plan of the same workload and root seed: each gets the
    requests a draw of its own would give, the arrival times equal to rounding (rescaled from
    another drawn rate). The draw is made on first use at the largest rate noted by
    :meth:`want` or ``growth`` x the rate asked for, and again (higher) when a probe goes past it.
    """

    def __init__(self, dists, seeds, horizon_s, seed=0, arrival="poisson", cv=1.0, first_rate=0.0, growth=2.0):
        from .. import workload as W
        self._W, self.dists, self.horizon_s = W, dists, horizon_s
        self.children = W.seeds_for(seed, seeds)
        self.arrival, self.cv, self.growth = arrival, cv, growth
        self.max_rate, self.base, self.wanted = 0.0, None, float(first_rate)

    def want(self, rate) -> None:
        """Note a rate some search will probe: the next draw covers it."""
        self.wanted = max(self.wanted, float(rate))

    def at(self, rate, s0=0, s1=None):
        """Seeds ``s0 .. s1 - 1``'s workloads at ``rate``: list of (arrival_s, prompt_tokens, output_tokens)."""
        return self.at_seeds(rate, range(len(self.children))[s0:s1])

    def measured(self, rate, window) -> np.ndarray:
        """Every seed's measured requests at ``rate``: int64 (seeds,), the arrivals in the measure window.

        ``window`` is ``(f0, f1)``; the count is the simulator's (:func:`fastsim.sim.simulate_batch`:
        arrivals in ``[f0 x horizon, f1 x horizon)``) of the arrival times :meth:`at` gives.
        """
        lo, hi = window[0] * self.horizon_s, window[1] * self.horizon_s
        self.at_seeds(rate, [])             # the draw covers the rate
        scale = self.max_rate / rate
        return np.array([_first_at_or_above(w.arrival_s, scale, hi) - _first_at_or_above(w.arrival_s, scale, lo)
                         for w in self.base], dtype=np.int64)

    def at_seeds(self, rate, seeds):
        """The workloads of the seeds ``seeds`` (indices) at ``rate``, in that order (as :meth:`at`)."""
        if rate > self.max_rate:
            # at most the workload limit's rate (the searches never probe above it: _max_probe_rate)
            self.max_rate = min(max(self.wanted, rate * self.growth), max(_max_probe_rate(self.horizon_s), rate))
            self.base = [self._W.synthesize(self.dists, self.max_rate, self.horizon_s, s, arrival=self.arrival,
                                            cv=self.cv) for s in self.children]
        out = []
        scale = self.max_rate / rate
        h = self.horizon_s
        for s in seeds:
            w = self.base[s]
            a = w.arrival_s
            # the requests with a x scale < h, found on the unscaled times (only they are scaled)
            k = _first_at_or_above(a, scale, h)
            out.append((a[:k] * scale, w.prompt_tokens[:k], w.output_tokens[:k]))
        return out


def _first_at_or_above(a, scale: float, t: float) -> int:
    """The first index k of the ascending times ``a`` with ``a[k] x scale >= t`` (float64 products, as scaled)."""
    k = int(np.searchsorted(a, t / scale, side="left"))
    while k > 0 and a[k - 1] * scale >= t:
        k -= 1
    while k < a.shape[0] and a[k] * scale < t:
        k += 1
    return k


def _pooled_figures(met, mea, over, horizon_s):
    """Pooled attainment, backlog-slope ratio and overload flag over the last (seed) axis.

    ``met`` / ``mea`` (..., S) counts, ``over`` (..., S, 3) = backlog slope, accepted rate, run
    flag; each probe judged as the search judges it (pooled attainment, :func:`pooled_overload`:
    the mean slope against ``OVERLOAD_SLOPE_FRACTION`` x the mean accepted rate, a single run by
    its own flag). Returns three arrays of shape (...,): attainment (NaN where the seeds measured
    no request), slope / threshold (2 or 0 for one run), flagged.
    """
    from ..sim import OVERLOAD_MIN_GROWTH, OVERLOAD_SLOPE_FRACTION
    m = mea.sum(axis=-1)
    att = np.where(m > 0, met.sum(axis=-1) / np.maximum(m, 1.0), np.nan)
    if over.shape[-2] == 1:
        flagged = over[..., 0, 2] > 0
        return att, np.where(flagged, 2.0, 0.0), flagged
    b = over[..., 0].mean(axis=-1)
    lam = over[..., 1].mean(axis=-1)
    ratio = b / np.maximum(OVERLOAD_SLOPE_FRACTION * lam, 1e-300)
    return att, ratio, (ratio > 1.0) & (b * horizon_s / 2.0 >= OVERLOAD_MIN_GROWTH)


def _bracket_capacities(rates, att, ratio, flagged, target, bracket: bool = False):
    """The capacity of each row of pooled probe figures (shape (B, k) each; rates (k,)): float64 (B,).

    A probe passes when its attainment is >= ``target`` and it is not flagged; it fails when it
    is flagged or its attainment is below the target; a probe that measured nothing (attainment
    NaN) and is not flagged has no verdict and is passed over. A row's answer lies between the
    largest passing rate below the smallest failing one (lo) and that failing rate (hi),
    interpolated linearly on whichever criterion fails at hi: the attainment's crossing of the
    target, or the backlog slope's crossing of its threshold. 0 when no probe passes below the
    smallest failing one (the capacity lies below it); the largest passing rate when none fails.
    Ties in rate go to the first probe. With ``bracket``, returns ``(capacities, lo, hi)``: lo 0
    when nothing passed below hi, hi inf when nothing failed.
    """
    with np.errstate(invalid="ignore"):
        ok = (att >= target) & ~flagged
        fail = flagged | (att < target)
    rows = np.arange(ok.shape[0])
    any_fail = fail.any(axis=1)
    j = np.where(fail, rates, np.inf).argmin(axis=1)              # the smallest failing rate
    below = ok & ((rates < rates[j][:, None]) | ~any_fail[:, None])
    i = np.where(below, rates, -np.inf).argmax(axis=1)           # the largest passing rate below it
    ai, aj, qi, qj = att[rows, i], att[rows, j], ratio[rows, i], ratio[rows, j]
    with np.errstate(divide="ignore", invalid="ignore"):
        t_att = np.where((aj < target) & (ai > aj), (ai - target) / (ai - aj), 1.0)
        t_over = np.where(flagged[rows, j] & (qj > qi), (1.0 - qi) / (qj - qi), 1.0)
    t = np.clip(np.minimum(np.minimum(1.0, t_att), t_over), 0.0, 1.0)
    passed = below.any(axis=1)
    caps = np.where(passed, np.where(any_fail, rates[i] + t * (rates[j] - rates[i]), rates[i]), 0.0)
    if not bracket:
        return caps
    return caps, np.where(passed, rates[i], 0.0), np.where(any_fail, rates[j], np.inf)


def _capacity_from(rates, met, measured, over, target, horizon_s):
    """Capacity of one (re)sample of seeds from the probes already simulated (float).

    rates (k,); met / measured (k, S) counts; over (k, S, 3) = backlog slope, accepted rate, run
    flag: :func:`_pooled_figures` per probe, then :func:`_bracket_capacities`.
    """
    att, ratio, flagged = _pooled_figures(met, measured, over, horizon_s)
    return float(_bracket_capacities(rates, att[None], ratio[None], flagged[None], target)[0])


def _capacities_from(rates, met, mea, over, idx, target, horizon_s, bracket: bool = False):
    """:func:`_capacity_from` of many resamples of the seeds at once: float64 (B,).

    ``idx`` (B, S) holds each resample's seed indices; each capacity is the value
    :func:`_capacity_from` gives for ``met[:, idx[b]]``, ``mea[:, idx[b]]``, ``over[:, idx[b]]``
    (a mean slope may differ in its last bit, as numpy sums the seeds of another array shape in
    another order). The point estimate is this function at ``idx = arange(S)[None]``, so it is
    computed exactly as each resample is. With ``bracket``, ``(capacities, lo, hi)`` as
    :func:`_bracket_capacities` gives them.
    """
    figures = [_pooled_figures(met[j][idx], mea[j][idx], over[j][idx], horizon_s) for j in range(rates.shape[0])]
    att, ratio, flagged = (np.stack(f, axis=1) for f in zip(*figures))
    return _bracket_capacities(rates, att, ratio, flagged, target, bracket)


def _probe_verdict(ms, slo: SLO, horizon_s: float):
    """How a capacity search judges one probe from its runs (one per seed, or one trace replay).

    ``ms`` are the runs' :class:`~fastsim.sim.SimMetrics` (or objects with the same
    ``attainment``, ``measured``, ``queue_slope_req_per_s``, ``arrival_rate_req_per_s`` and
    ``overloaded``). Returns ``(met, measured, over, attainment, overloaded, passed)``: per run
    the measured requests that met the SLO (float, ``attainment x measured``, 0 when nothing was
    measured), the measured count, and (slope, accepted rate, own flag); then the attainment over
    all runs' measured requests (0 when none), :func:`pooled_overload`, and the verdict
    ``attainment >= slo.attainment and not overloaded``.
    """
    met = np.array([m.attainment * m.measured if m.measured else 0.0 for m in ms])
    mea = np.array([float(m.measured) for m in ms])
    over = np.array([[m.queue_slope_req_per_s, m.arrival_rate_req_per_s, float(m.overloaded)] for m in ms])
    pooled = float(met.sum() / max(mea.sum(), 1.0))
    pooled_over = pooled_overload(ms, horizon_s)
    passed = bool(pooled >= slo.attainment and not pooled_over)
    return met, mea, over, pooled, pooled_over, passed


#: Floors of the per-seed spreads in :func:`_early_verdict`'s test: of the attainment, and of the
#: backlog slope as a fraction of the arrival rate (a few seeds that happen to agree exactly must
#: not make a probe look certain).
EARLY_ATTAINMENT_SD_FLOOR = 0.01
EARLY_SLOPE_SD_FLOOR = 0.002


def _early_verdict(met, mea, over, S: int, target: float, horizon_s: float, alpha: float):
    """The verdict ``S`` seeds would give a probe, from its first ``k`` seeds, when a test is sure of it.

    The pooled attainment of all ``S`` seeds is ``(k A_k + m A_m) / S`` (``m = S - k`` seeds not
    run, equal measured counts), which differs from the ``k`` seeds' ``A_k`` by
    ``(m / S)(A_m - A_k)``; with per-seed attainments independent with spread ``s``, that
    difference has standard deviation ``(m / S) s sqrt(1/m + 1/k)``. The verdict is taken when
    ``A_k`` is farther from the target than ``t_{k-1}(1 - alpha)`` of those deviations (Student's
    t with the seeds' sample spread, floored at :data:`EARLY_ATTAINMENT_SD_FLOOR`), and the same
    test on the mean backlog slope against the overload threshold of :func:`pooled_overload`
    (spread floored at :data:`EARLY_SLOPE_SD_FLOOR` x the arrival rate) agrees: a fail when
    either criterion surely fails, a pass when both surely pass. Under that normal model a
    probe decided early has the ``S``-seed verdict but with probability at most about
    ``2 alpha``.

    Parameters
    ----------
    met, mea : ndarray(float64) of shape (k,)
        Per seed, measured requests that met the SLO and measured requests.
    over : ndarray(float64) of shape (k, 3)
        Per seed, backlog slope (req/s), accepted rate (req/s) and the run's own overload flag.
    S : int
        Seeds of the full probe (> k).
    target : float
        SLO attainment target.
    horizon_s : float
        Simulated seconds per run.
    alpha : float
        One-sided error level of each criterion, in (0, 0.5).

    Returns
    -------
    bool or None
        The verdict (True: passes), or None when the other seeds are needed (also when fewer
        than two seeds were run or a seed measured nothing).
    """
    from scipy.special import stdtrit       # Student's t quantile (lighter to import than scipy.stats)
    from ..sim import OVERLOAD_MIN_GROWTH, OVERLOAD_SLOPE_FRACTION
    k = int(met.shape[0])
    m = S - k
    if k < 2 or m < 1 or not (mea > 0).all():
        return None
    q = float(stdtrit(k - 1, 1.0 - alpha)) * (m / S) * math.sqrt(1.0 / m + 1.0 / k)
    a = met / mea
    pooled = float(met.sum() / mea.sum())
    att_margin = q * max(float(a.std(ddof=1)), EARLY_ATTAINMENT_SD_FLOOR)
    lam = float(over[:, 1].mean())
    b = over[:, 0]
    threshold = max(OVERLOAD_SLOPE_FRACTION * lam, 2.0 * OVERLOAD_MIN_GROWTH / horizon_s)
    b_margin = q * max(float(b.std(ddof=1)), EARLY_SLOPE_SD_FLOOR * lam)
    if pooled < target - att_margin or float(b.mean()) > threshold + b_margin:
        return False
    if pooled >= target + att_margin and float(b.mean()) < threshold - b_margin:
        return True
    return None


#: How far above the highest probe a galloping search probes for its interval's upper end, in
#: units of ``rel_tol``: far enough that on a shallow attainment curve the probe fails clearly,
#: on its first seeds and with its runs stopped early (at 4 x it took 8 to 12 of 16 seeds on
#: the coding-agent grid of H200 FP8 configurations).
_BOOT_UP_STEP = 8.0


def _stopped(m) -> bool:
    """Whether a run ended early (:func:`fastsim.sim.simulate_batch`'s ``stop_after_misses``)."""
    t = getattr(m, "stopped_at_s", math.nan)
    return t == t


def _miss_bound(m) -> int:
    """The misses a run surely has: all of them for a whole run, those counted by its stop for a stopped one."""
    if _stopped(m):
        return int(m.sure_misses)
    return int(m.measured) - int(round(m.attainment * m.measured)) if m.measured else 0


def _allowed_misses(M, target: float):
    """The most misses a probe of measured counts ``M`` (int64 (S,)) can have and still pass (int), or None.

    The largest m with ``(sum(M) - m) / sum(M) >= target - 1e-9``: a probe with more misses has
    a pooled attainment below its target (the margin covers the rounding of the figures the
    verdict pools); None when nothing is measured.
    """
    total = int(np.sum(M))
    if total <= 0:
        return None
    m = int(math.floor(total * (1.0 - target)))
    while m + 1 <= total and (total - (m + 1)) / total >= target - 1e-9:
        m += 1
    while m >= 0 and (total - m) / total < target - 1e-9:
        m -= 1
    return m


class _Bisection:
    """The capacity search of one plan as a state machine: which rate to probe next, given the probes so far.

    :func:`max_sustainable_rate` drives one; :func:`max_sustainable_rates` drives many in
    lockstep, all their probes of a round in one batch of simulations. The sequence of probes
    depends only on the probes' verdicts, so both give the same answer for a plan.

    Search: the bracket grows or shrinks by 1.25x from the first rate until it straddles the
    answer (or, given ``step0``, by steps of ``step0`` that double each time: galloping, with a
    secant jump once two probes on one side tell the attainment's slope, :meth:`_secant`), then
    bisects to ``rel_tol`` (a galloping search interpolates instead, :meth:`_regula_falsi`; at
    most ``max_probes`` probes), never above ``max_rate``. Interval:
    the bootstrap over seeds of the probes' results; a resample that fails at every probed rate
    has its capacity below the lowest probe, so up to three more probes go lower (each 1 / 1.1 of
    the lowest) until the interval's lower end is not censored; a galloping search likewise goes
    higher (each ``_BOOT_UP_STEP x rel_tol`` above the highest probe) while its upper end is censored at the
    highest probe.

    Sequential probes (``first_seeds`` and ``alpha``): a probe runs its seeds in stages of
    ``first_seeds`` seeds (``first_seeds``, twice as many, ... then all ``S``), and ends at the first stage whose runs
    decide it: surely failing (:meth:`_sure_misses` exceed what the pooled attainment over all
    ``S`` seeds can tolerate, whatever the seeds not run give: no error) or decided by
    :func:`_early_verdict` (an error of at most about ``2 alpha`` per look). Given
    ``measured_fn`` (rate -> every seed's measured requests, int64 (S,)) its runs also stop
    early (:func:`fastsim.sim.simulate_batch`'s ``stop_after_misses``): in the first stage each
    run at its share of the misses that would fail the probe if every run of the stage reached
    its own (a run of a stage that stays undecided is then simulated again, whole, in the next
    stage), in later stages a run at the misses that fail the probe with those already known.

    A probe whose runs measured no request (and are not overloaded) has no verdict: its
    attainment is NaN, it counts as neither passing nor failing, and the search stops there
    (lower rates measure fewer requests still); see :meth:`result`.
    """

    def __init__(self, r0, S, rel_tol, max_probes, bootstrap, seed, slo, horizon_s, analytic, step0=None,
                 first_seeds=0, alpha=0.0, max_rate=math.inf, floor=None, measure_window=(0.2, 0.8),
                 measured_fn=None):
        self.r, self.S, self.rel_tol, self.max_probes = r0, S, rel_tol, max_probes
        self.bootstrap, self.seed, self.slo, self.horizon_s, self.analytic = bootstrap, seed, slo, horizon_s, analytic
        self.step = step0
        self.first_seeds = first_seeds if 0 < first_seeds < S and alpha > 0 else 0
        self.alpha = alpha
        self.max_rate = max_rate
        self.floor, self.window = floor, measure_window
        self.measured_fn = measured_fn if self.first_seeds else None
        self._cur = None                # the probe in progress (sequential probes)
        self._boot_up = False
        self.lo = self.hi = None
        self.probes, self.mets, self.meas, self.overs, self.seeds_run = [], [], [], [], []
        self.runs_simulated, self.runs_stopped = [], []     # per probe: runs (reruns included), stopped early
        self.phase = "search"
        self.boot_rounds = 0
        self.caps = None
        self.unmeasured_at = None       # the rate of the probe that measured nothing, where the search stopped
        self.capped = False             # the search passed at max_rate and could go no higher
        self._sides = []                # regula falsi: the verdicts since the bracket formed
        self._aim = None                # regula falsi: the first probe of an aimed pair

    def next_probe(self):
        """``(rate, seeds, stop_after_misses)`` of the runs to simulate next, or None when done.

        ``seeds`` are seed indices; ``stop_after_misses`` is None (whole runs) or one threshold
        per seed (:func:`fastsim.sim.simulate_batch`). Without sequential probes every seed at
        once, whole; with them the next stage's seeds (see the class docstring).
        """
        rate = self.next_rate()
        if rate is None:
            return None
        if not self.first_seeds:
            return rate, list(range(self.S)), None
        cur = self._cur
        if cur is None or cur["rate"] != rate:
            M = self.measured_fn(rate) if self.measured_fn is not None else None
            cur = self._cur = dict(rate=rate, M=M, runs={}, stage=0, fresh=0, simulated=0, stopped=0,
                                   allowed=_allowed_misses(M, self.slo.attainment) if M is not None else None)
        stages = self._stages()
        end = stages[min(cur["stage"], len(stages) - 1)]
        again = sorted(k for k, m in cur["runs"].items() if _stopped(m))
        seeds = again + list(range(cur["fresh"], end))
        if cur["allowed"] is None:
            return rate, seeds, None
        M, allowed = cur["M"], cur["allowed"]
        if cur["stage"] == 0:
            # each run's share of the misses that fail the probe, should every run reach its own
            share = M[seeds] / max(int(M[seeds].sum()), 1)
            stops = [max(1, int(math.ceil((allowed + 1) * f))) for f in share]
        else:
            # the misses that, with those already known, fail the probe on their own
            known = sum(_miss_bound(m) for k, m in cur["runs"].items() if k not in again)
            stops = [max(1, allowed + 1 - known)] * len(seeds)
        return rate, seeds, stops

    def _stages(self):
        """Seeds run by the end of each stage of a sequential probe: first_seeds, twice, three times ... then S."""
        k = self.first_seeds
        return list(range(k, self.S, k)) + [self.S] if k else [self.S]

    def next_rate(self):
        """The next rate to probe (req/s), or None when the search and its interval are done."""
        if self.phase == "search":
            return self.r
        if self.phase == "boot":
            if self._boot_up:
                return min(max(p[0] for p in self.probes) * (1.0 + _BOOT_UP_STEP * self.rel_tol), self.max_rate)
            return min(p[0] for p in self.probes) / 1.1
        return None

    def feed(self, rate, ms, seeds=None) -> None:
        """Record the runs of :meth:`next_probe`'s ``seeds`` at ``rate`` (all seeds when None) and move on."""
        ms = list(ms)
        simulated = stopped_now = 0
        if self.first_seeds:
            cur = self._cur
            for k, m in zip(seeds, ms):
                cur["runs"][int(k)] = m
            cur["fresh"] = max([cur["fresh"]] + [int(k) + 1 for k in seeds])
            cur["simulated"] += len(ms)
            cur["stopped"] += sum(1 for m in ms if _stopped(m))
            runs = cur["runs"]
            ms = [runs[k] for k in sorted(runs)]
            simulated, stopped_now = cur["simulated"], cur["stopped"]
        else:
            simulated = len(ms)
        met, mea, over, pooled, pooled_over, passed = _probe_verdict(ms, self.slo, self.horizon_s)
        k = len(ms)
        if self.first_seeds:
            cut = any(_stopped(m) for m in ms)
            early = None
            if cur["allowed"] is not None and sum(_miss_bound(m) for m in ms) > cur["allowed"]:
                early = False           # surely failing, whatever the other seeds give
            elif not cut and k < self.S:
                early = _early_verdict(met, mea, over, self.S, self.slo.attainment, self.horizon_s, self.alpha)
            if early is None and (cut or k < self.S):
                cur["stage"] += 1       # undecided: the next stage (and the stopped runs, whole)
                return
            self._cur = None
            if early is not None:
                passed = early
        if k < self.S:
            # the seeds not run are stood in for by the ones run, in turn, so that the pooled
            # figures (and the bootstrap's resamples) are those of the k seeds run
            fill = np.arange(self.S) % k
            met, mea, over = met[fill], mea[fill], over[fill]
        unmeasured = not mea.sum() > 0
        if unmeasured:
            pooled = math.nan           # no attainment without a measured request
        self.probes.append((float(rate), pooled, pooled_over, passed))
        self.mets.append(met), self.meas.append(mea), self.overs.append(over)
        self.seeds_run.append(k)
        self.runs_simulated.append(simulated)
        self.runs_stopped.append(stopped_now)
        if unmeasured and not pooled_over:
            # no verdict, and lower rates measure fewer requests still: the search ends here
            self.unmeasured_at = float(rate)
            if self.phase == "search":
                self._after_search()
            else:
                self.caps = self._bootstrap()     # the interval over every probe, as the estimate
                self.phase = "done"
            return
        if self.phase == "search":
            if passed:
                self.lo = rate if self.lo is None else max(self.lo, rate)
            else:
                self.hi = rate if self.hi is None else min(self.hi, rate)
            lo, hi = self.lo, self.hi
            if (lo is not None and hi is not None and hi - lo <= self.rel_tol * lo) \
                    or len(self.probes) >= self.max_probes:
                self._after_search()
                return
            if lo is not None and hi is not None:
                self.r = 0.5 * (lo + hi) if self.step is None else self._regula_falsi(lo, hi, passed)
            elif self.step is None:
                self.r = hi / 1.25 if lo is None else lo * 1.25
            else:       # galloping from a warm start: the step doubles until the verdict turns
                self.r = self._secant(lo, hi)
                self.step *= 2.0
            if self.r > self.max_rate:
                if lo is not None and lo >= self.max_rate:      # passed at the largest rate there is
                    self.capped = True
                    self._after_search()
                    return
                self.r = self.max_rate
        else:
            self._boot_step()

    def _secant(self, lo, hi) -> float:
        """The next gallop of a search without a bracket yet (``lo`` or ``hi`` None).

        The gallop's step from the nearest probe (``hi / (1 + step)`` or ``lo x (1 + step)``),
        unless the two probes nearest the crossing on that side both have an attainment strictly
        between 0.5% and 99.9% on the target's far side: then the secant of the log-odds of the
        attainment against the log of the rate through them gives the crossing ``c``, and the
        next probe aims just across it (``c (1 - rel_tol / 2)`` from above, ``c (1 + rel_tol /
        2)`` from below: a bracket about ``c`` on the verdict), kept between one ``rel_tol`` and
        two steps from the nearest probe.
        """
        above = lo is None
        near = hi if above else lo
        gallop = near / (1.0 + self.step) if above else near * (1.0 + self.step)
        target = self.slo.attainment
        side = [(p[0], p[1]) for p in self.probes if (not p[3]) == above and 0.005 < p[1] < 0.999
                and (p[1] < target if above else p[1] > target)]
        if len(side) < 2:
            return gallop
        (r1, a1), (r2, a2) = sorted(side, reverse=not above)[:2]

        def logit(x):
            return math.log(x / (1.0 - x))
        x1, x2 = math.log(r1), math.log(r2)
        if x1 == x2 or not (logit(a1) - logit(a2)) * (x1 - x2) < 0:
            return gallop           # the attainment must fall as the rate rises
        c = math.exp(x1 + (logit(target) - logit(a1)) * (x1 - x2) / (logit(a1) - logit(a2)))
        tol = self.rel_tol
        if above:
            return min(max(c * (1.0 - 0.5 * tol), near / (1.0 + 2.0 * self.step)), near / (1.0 + tol))
        return max(min(c * (1.0 + 0.5 * tol), near * (1.0 + 2.0 * self.step)), near * (1.0 + tol))

    def _regula_falsi(self, lo: float, hi: float, passed: bool) -> float:
        """The next rate inside a bracket ``(lo, hi)`` wider than ``rel_tol``: interpolated, not halved.

        The crossing ``c`` of the failing criterion between the two probes (with common random
        numbers the pooled attainment and the backlog slope are smooth in the rate): of the
        pooled attainment interpolated in log-odds when it fails at ``hi`` (the curve falls off
        a cliff past the capacity, so a linear interpolation from a far failing probe lands
        short), else the estimator's linear interpolation (:func:`_bracket_capacities`) on these
        two probes alone. The search aims at a bracket of ``rel_tol`` about ``c``: a probe at
        ``c (1 - rel_tol / 2)``, then, if it passed, one ``rel_tol`` above it (if it failed, one
        ``rel_tol`` below), which closes the bracket when ``c`` was right. In a bracket at most
        ``2 x rel_tol`` wide the aim is the probe ``rel_tol`` from the end farther from ``c``.
        Every probe stays at least an eighth of the bracket (in ratio) inside it. Halving
        instead when the interpolation is undefined, or when an aimed pair missed twice (the
        last three probes on the same side: Illinois' safeguard against a one-sided run).
        """
        tol = self.rel_tol
        mid = 0.5 * (lo + hi)
        step = tol * (1.0 - 1e-9)
        self._sides.append(bool(passed))
        if len(self._sides) >= 4 and self._sides[-1] == self._sides[-2] == self._sides[-3]:
            self._aim = None
            return mid
        w = hi / lo - 1.0
        q = 1.0 + 0.125 * w
        if self._aim is not None and self._aim in (lo, hi):
            # the second probe of an aimed pair: rel_tol from the first, across the crossing
            r = self._aim * (1.0 + step) if passed else self._aim / (1.0 + step)
            self._aim = None
            if lo < r < hi:
                return r
        i = max(k for k, p in enumerate(self.probes) if p[0] == lo)
        j = max(k for k, p in enumerate(self.probes) if p[0] == hi)
        a_lo, a_hi, target = self.probes[i][1], self.probes[j][1], self.slo.attainment
        if a_hi < target <= a_lo:
            def logit(x):
                x = min(max(x, 1e-4), 1.0 - 1e-4)
                return math.log(x / (1.0 - x))
            c = lo + (logit(a_lo) - logit(target)) / (logit(a_lo) - logit(a_hi)) * (hi - lo)
        else:
            c = _capacity_from(np.array([lo, hi]), np.array([self.mets[i], self.mets[j]]),
                               np.array([self.meas[i], self.meas[j]]), np.array([self.overs[i], self.overs[j]]),
                               target, self.horizon_s)
        if not (lo < c < hi):
            return mid
        if w <= 2.0 * tol * (1.0 + 1e-9):
            r = lo * (1.0 + step) if c <= mid else hi / (1.0 + step)
        else:
            r = min(max(c * (1.0 - 0.5 * tol), lo * q), hi / q)
            self._aim = r
        return r if lo < r < hi else mid

    def _after_search(self) -> None:
        if self.S >= 2 and self.bootstrap > 0 and self.lo is not None:
            self.phase = "boot"
            self._boot_step(first=True)
        else:
            self.phase = "done"

    def _boot_step(self, first: bool = False) -> None:
        # up to four resamplings, each but a good one and the fourth followed by a probe lower (or
        # higher); the interval is the last resampling's, over every probe (the estimate's probes)
        self.caps = self._bootstrap()
        self.boot_rounds += 1
        if self.boot_rounds >= 4:
            self.phase = "done"
            return
        low_ok = bool(np.quantile(self.caps, 0.025) > 0)
        high_ok = True
        if self.step is not None and self.hi is not None:
            # a galloping search may end with its bracket as its only probes near the answer: a
            # resample that passes at the highest probe is censored there (its capacity lies
            # above), so up to three more probes go higher (each _BOOT_UP_STEP x rel_tol above the highest)
            high_ok = bool(np.quantile(self.caps, 0.975) < max(p[0] for p in self.probes))
        self._boot_up = low_ok and not high_ok
        if self._boot_up and max(p[0] for p in self.probes) >= self.max_rate:
            self._boot_up, high_ok = False, True        # no higher rate to probe
        if (low_ok and high_ok) or len(self.probes) >= self.max_probes + 3:
            self.phase = "done"

    def _arrays(self):
        rates = np.array([p[0] for p in self.probes])
        return rates, np.array(self.mets), np.array(self.meas), np.array(self.overs)

    def _bootstrap(self):
        rates, met_a, mea_a, over_a = self._arrays()
        rng = np.random.default_rng(np.random.SeedSequence(self.seed).spawn(1)[0])
        S = self.S
        # one (B, S) draw: the same indices as B draws of S in turn (numpy's bounded integers
        # consume the generator element by element), drawn at once
        idx = rng.integers(0, S, (self.bootstrap, S))
        return _capacities_from(rates, met_a, mea_a, over_a, idx, self.slo.attainment, self.horizon_s)

    def result(self) -> "CapacityResult":
        """The :class:`CapacityResult` once :meth:`next_rate` is None.

        The estimate and the bracket are the bootstrap's estimator (:func:`_capacities_from`)
        applied to all seeds over every probe, the interval's probes included: the same
        estimator on the same probes as each resample of the interval. ``rate_req_per_s`` is NaN
        (undetermined) when no probe has a verdict (every probe measured nothing).
        """
        ci = (float("nan"), float("nan"))
        if self.caps is not None:
            ci = (float(np.quantile(self.caps, 0.025)), float(np.quantile(self.caps, 0.975)))
        rates, met_a, mea_a, over_a = self._arrays()
        per_seed_att = np.where(mea_a > 0, met_a / np.maximum(mea_a, 1.0), 0.0)
        for i, k_run in enumerate(self.seeds_run):
            per_seed_att[i, k_run:] = np.nan       # seeds a sequential test did not need
        measured = tuple(int(m[:k_run].sum()) for m, k_run in zip(mea_a, self.seeds_run))
        decided = [not (math.isnan(p[1]) and not p[2]) for p in self.probes]
        notes = []
        if self.floor is not None:
            n = self.floor.note(self.horizon_s, self.window)
            if n:
                notes.append(n)
        if not any(decided):
            estimate, bracket = math.nan, (math.nan, math.nan)
            notes.append(f"undetermined: no probe measured a request (the first, at {self.probes[0][0]:.4g} req/s, "
                         f"measured none in {self.S} seed{'s' if self.S > 1 else ''} x the measure window of a "
                         f"{self.horizon_s:g}-s horizon), so there is no capacity to report: a capacity needs measured "
                         "requests, from a longer horizon (horizon_s, --horizon) or a higher first rate "
                         "(rate_hint_req_per_s, --rate)")
        else:
            est, lo, hi = _capacities_from(rates, met_a, mea_a, over_a, np.arange(self.S)[None], self.slo.attainment,
                                           self.horizon_s, bracket=True)
            estimate, bracket = float(est[0]), (float(lo[0]), float(hi[0]))
            if self.unmeasured_at is not None:
                notes.append(f"the search stopped at {self.unmeasured_at:.4g} req/s, whose runs measured no request "
                             f"({self.S} seed{'s' if self.S > 1 else ''} x the measure window of a "
                             f"{self.horizon_s:g}-s horizon): no verdict there, and lower rates measure fewer still"
                             + (f"; the capacity lies below the smallest failing probe, {bracket[1]:.4g} req/s"
                                if bracket[0] == 0 and math.isfinite(bracket[1]) else ""))
            if self.capped:
                notes.append(f"the search passed at {self.max_rate:.6g} req/s, the largest rate it probes at a "
                             f"{self.horizon_s:g}-s horizon (a seed's draw is at most fastsim.workload.MAX_REQUESTS "
                             "requests; fastsim.search.MAX_RATE_REQ_PER_S): the capacity lies above it")
        search_bracket = (float(self.lo) if self.lo is not None else 0.0,
                          float(self.hi) if self.hi is not None else math.inf)
        return CapacityResult(estimate, bracket, ci, self.probes, per_seed_att, self.analytic, self.S,
                              float(self.horizon_s), tuple(self.seeds_run), measured, tuple(notes), search_bracket,
                              tuple(self.runs_simulated), tuple(self.runs_stopped))
