"""The records of verification and the capacity searches: what they take and what they return.

In the order a search meets them:

- :class:`SLO`: the P90 TTFT and TPOT targets and the pass threshold (SPEC §1), checked at
  construction;
- :class:`Verification`: one plan simulated on its seeds, the measured requests pooled (SPEC §7);
  :class:`RepairResult`: a plan after instances were added until it passed;
- :class:`HorizonFloor`: how long a capacity search's horizon must be for its measured requests
  (:func:`fastsim.search.horizon_floor`);
- :class:`CapacityResult`: the maximum sustainable rate of a plan (SPEC §7), its bracket,
  bootstrap interval, probes and notes;
- :class:`ScaleProbe` and :class:`TraceCapacityResult`: the time-scale search on a real trace;
- ``_Replay`` and ``_RunFigures``: a replayed stretch of a trace, and what a probe reads of one run.

Frozen dataclasses and named tuples; each ``to_dict`` is JSON-ready, a non-finite value becoming
None with its reason in ``null_reasons`` (:mod:`fastsim._output`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..analytic import Plan
from ..errors import FastsimInputError


@dataclass(frozen=True)
class SLO:
    """Latency targets and the pass threshold (SPEC §1: a P90 SLO passes at attainment >= 0.90).

    Attributes
    ----------
    ttft_s, tpot_s : float
        TTFT and TPOT targets (s), each a finite number > 0, judged at :attr:`percentile`.
    attainment : float
        Fraction of measured requests that must meet both targets, in (0, 1] (0.90 for the
        default P90 SLO; ``P / 100`` for ``--slo-percentile P``).

    Raises
    ------
    FastsimInputError
        At construction (also through :func:`dataclasses.replace`): a target that is not a finite
        number > 0 (``SLO.ttft_s``, ``SLO.tpot_s``), or an attainment outside (0, 1]
        (``SLO.attainment``; NaN included); booleans and strings are refused, not converted.
        The fields are stored as floats.
    """

    ttft_s: float
    tpot_s: float
    attainment: float = 0.90

    def __post_init__(self):
        for name in ("ttft_s", "tpot_s", "attainment"):
            v = getattr(self, name)
            ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
            f = float(v) if ok else math.nan
            if name == "attainment":
                if not (0.0 < f <= 1.0):
                    raise FastsimInputError("SLO.attainment", v, "a fraction of the measured requests in (0, 1] "
                                            "(0.9: 90% must meet both targets)")
            elif not (0.0 < f < math.inf):
                raise FastsimInputError(f"SLO.{name}", v, f"a finite number of seconds > 0 (the P90 "
                                        f"{name[:4].upper()} target)")
            object.__setattr__(self, name, f)

    @property
    def percentile(self) -> float:
        """The percentile at which TTFT and TPOT are judged (float, 50 to 100): ``100 x attainment``
        (SPEC §1: a P90 SLO passes at attainment >= 0.90; ``--slo-percentile P`` sets ``P / 100``)."""
        return round(100.0 * self.attainment, 9)


@dataclass(frozen=True)
class Verification:
    """The result of simulating one plan.

    Attributes
    ----------
    attainment : float
        Pooled SLO attainment over the measured requests of all runs.
    ttft_p90_s, tpot_p90_s : float
        P90 over the pooled measured requests (inf when a measured request never got a token).
    passed : bool
        The attainment surely meets ``SLO.attainment`` (its 95% Wilson interval's lower end is
        >= the target, :mod:`fastsim.search.confidence`), the runs, judged together, are not
        overloaded, and no more requests that fit the model's context are rejected than the
        rejection budget allows.
    overloaded : bool
        The runs, judged together by :func:`pooled_overload`, show the number of requests in
        the system growing without bound.
    runs : int
        Simulations pooled (seeds).
    measured, rejected : int
        Measured requests; requests rejected (too long for the instance or the model).
    requests : int
        All requests simulated.
    policy : str
        The simulator's engine policy (``lecture``, ``vllm`` or ``sglang``).
    preemptions : int
        Preemptions (vLLM) or retractions (SGLang) over all runs; 0 under the lecture policy.
    cache_hit_fraction : float
        Prompt tokens served from the prefix cache / prompt tokens admitted, over all runs
        (nan without prefix caching): what the simulation reached, beside a plan's sized
        ``prefix_hit_fraction``.
    rejected_in_context : int
        Rejected requests whose prompt + output fit the model's context: the plan's instances
        cannot hold their KV (a valid request the plan cannot serve).
    rejection_budget : float
        The fraction of all requests that may be rejected within the context before the plan
        fails (0 by default: a plan that cannot serve a valid request does not pass).
    reason : str
        Why the plan fails ("" when it passes): each failed criterion, in words.
    attainment_ci95_lo, attainment_ci95_hi : float
        The 95% Wilson score interval of ``attainment`` over the pooled counts
        (:func:`fastsim.search.confidence.wilson_interval`); a pass needs its lower end >= the
        target (:func:`~fastsim.search.confidence.attainment_verdict`). NaN when not computed.
    decided : bool
        Whether the verdict is sure: the interval lies wholly on one side of the target, or another
        criterion (overload, rejections) fails the plan. An undecided verification does not pass;
        :func:`fastsim.search.verify` adds seeds to decide it (:mod:`fastsim.search.confidence`).
    runs_asked : int
        Seeds asked for (``runs`` exceeds it when seeds were added); 0 when not recorded.
    slo_percentile : float
        The SLO's percentile (:attr:`SLO.percentile`, 90 by default).
    ttft_at_percentile_s, tpot_at_percentile_s : float
        TTFT and TPOT at that percentile over the pooled measured requests (equal to the P90s at
        90; NaN when not computed).
    """

    attainment: float
    ttft_p90_s: float
    tpot_p90_s: float
    passed: bool
    overloaded: bool
    runs: int
    measured: int
    rejected: int
    requests: int = 0
    policy: str = "lecture"
    preemptions: int = 0
    cache_hit_fraction: float = float("nan")
    rejected_in_context: int = 0
    rejection_budget: float = 0.0
    reason: str = ""
    attainment_ci95_lo: float = float("nan")
    attainment_ci95_hi: float = float("nan")
    decided: bool = True
    runs_asked: int = 0
    slo_percentile: float = 90.0
    ttft_at_percentile_s: float = float("nan")
    tpot_at_percentile_s: float = float("nan")

    def to_dict(self) -> dict:
        """The fields as a JSON-ready dict.

        Returns
        -------
        dict
            Every field; non-finite floats (inf, nan) become None.
        """
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class RepairResult:
    """A plan after repair.

    Attributes
    ----------
    plan : Plan
        The plan that passed (or the last one tried).
    verification : Verification
        Its simulation result.
    passed : bool
        The final plan passes its verification.
    repaired_from_instances : int or None
        Total instances before repair (None when the plan passed as planned).
    reason : str
        Why no instance count can pass ('' otherwise).
    history : list of (Plan, Verification)
        Every count tried.
    """

    plan: Plan
    verification: Verification
    passed: bool
    repaired_from_instances: int | None
    reason: str = ""
    history: list = field(default_factory=list)


@dataclass(frozen=True)
class CapacityResult:
    """The maximum sustainable rate of a plan (SPEC §7).

    Attributes
    ----------
    rate_req_per_s : float
        The capacity estimate: the estimator the bootstrap resamples (:func:`_capacities_from`)
        applied to all seeds over every probe (the search's and those added for the interval),
        i.e. the rate between the largest passing probe below the smallest failing one and that
        failing probe where the failing criterion (pooled attainment, or the backlog slope)
        crosses its threshold by linear interpolation. It lies inside ``bracket``; 0 when no
        probe passed below the smallest failing one, the largest passing rate when none failed;
        NaN (undetermined, said in ``notes``) when no probe measured a request.
    bracket : (float, float)
        The estimator's (pass, fail) rates over every probe: the largest passing rate below the
        smallest failing one (0 when there is none), and that failing rate (inf when none
        failed). ``(hi - lo) / lo <= rel_tol`` unless the probe budget ran out or a probe added
        for the interval contradicted the search's bracket (:attr:`contradicting_probes`: the
        smallest failing rate then bounds the capacity). ``(nan, nan)`` when undetermined.
    ci95 : (float, float)
        95% bootstrap interval across seeds: seeds are resampled with replacement (2,000
        resamples); for each resample the pooled attainment and backlog slope at every probed rate
        are recomputed from the per-seed results already simulated, and its capacity is found
        between the largest passing and the smallest failing probe by linear interpolation of the
        failing criterion (:func:`_capacities_from`), the same estimator on the same probes as
        ``rate_req_per_s``. No extra simulation is run. ``(nan, nan)`` with one seed. With 2
        seeds half of the resamples are the full sample, so the estimate lies inside; with more,
        a percentile interval can, rarely, leave it out where the estimator jumps (a resample
        that flips one probe's verdict moves the capacity to another pair of probes):
        :attr:`estimate_in_ci`.
    probes : list of (rate, attainment, overloaded, passed)
        Every probe in order; attainment NaN when its runs measured no request (such a probe,
        unless overloaded, has no verdict and ends the search).
    per_seed_attainment : ndarray(float64) of shape (probes, seeds)
        Attainment of each seed's run at each probe (0 when it measured nothing; nan for the
        seeds a probe decided early by the sequential test did not run).
    analytic_req_per_s : float
        The analytic capacity of the plan; ``analytic_ratio`` = analytic / simulated.
    seeds : int
        Replications per probe.
    horizon_s : float
        Simulated seconds per run.
    probe_seeds : tuple of int
        Seeds each probe ran: ``seeds``, or fewer when :func:`max_sustainable_rates`' sequential
        test decided the probe early (in ``to_dict`` as each probe's ``seeds_run``).
    probe_measured : tuple of int
        Measured requests of each probe over the seeds it ran (in ``to_dict`` as each probe's
        ``measured``); empty when not recorded.
    notes : tuple of str
        What the figures need said: a horizon that understates the capacity
        (:func:`horizon_floor`), a search that stopped at a probe that measured nothing, an
        undetermined result, a search that reached the largest rate it probes.
    search_bracket : (float, float)
        The search's own bracket before the probes added for the interval: its largest passing
        and smallest failing rate (0 when none passed, inf when none failed); empty when not
        recorded. It differs from ``bracket`` only when the result is :attr:`unstable`.
    probe_runs : tuple of int
        Runs each probe simulated: its seeds run, plus the runs an early stop cut short that were
        simulated again whole (:func:`max_sustainable_rates`); empty when not recorded.
    probe_stopped : tuple of int
        Runs of each probe that an early stop ended before the horizon (their figures are those
        of what they simulated); empty when not recorded.

    Notes
    -----
    When the probes contradict each other (a failing probe below a passing one:
    :attr:`contradicting_probes`), the result is :attr:`unstable`: the search has no single answer
    at these seeds and horizon. ``rate_req_per_s``, ``bracket`` and ``ci95`` still hold the
    estimator's (conservative) figures, bounded by the smallest failing probe, but
    :meth:`to_dict` reports no estimate, interval or ratio (null, with the reason), and
    :attr:`analytic_ratio` and :attr:`simulated_ratio` are NaN.
    """

    rate_req_per_s: float
    bracket: tuple
    ci95: tuple
    probes: list
    per_seed_attainment: np.ndarray
    analytic_req_per_s: float
    seeds: int
    horizon_s: float
    probe_seeds: tuple = ()
    probe_measured: tuple = ()
    notes: tuple = ()
    search_bracket: tuple = ()
    probe_runs: tuple = ()
    probe_stopped: tuple = ()

    @property
    def seed_runs(self) -> int:
        """Runs simulated over all probes (int): ``sum(probe_runs)``, else ``sum(probe_seeds)``."""
        return int(sum(self.probe_runs if self.probe_runs else self.probe_seeds))

    @property
    def stopped_runs(self) -> int:
        """Runs an early stop ended before the horizon, over all probes (int)."""
        return int(sum(self.probe_stopped))

    @property
    def undetermined(self) -> bool:
        """Whether no probe gave a verdict, so there is no estimate (bool; ``rate_req_per_s`` NaN)."""
        return not math.isfinite(self.rate_req_per_s)

    @property
    def unstable(self) -> bool:
        """Whether the probes contradict each other, so the search has no single answer (bool).

        True when a probe failed below a passing one (:attr:`contradicting_probes` is not empty):
        the attainment or the backlog slope fluctuates around its threshold at these seeds and
        horizon, and another order of probes would give another answer. A longer horizon or more
        seeds steady it. The estimator's figures bound the capacity conservatively (the smallest
        failing probe); :attr:`conflict` and :attr:`unstable_reason` say where the probes disagree.
        """
        return bool(self.contradicting_probes)

    @property
    def conflict(self):
        """Where the probes disagree: ``((fail_lo, fail_hi), (pass_lo, pass_hi))`` or None when stable.

        Returns
        -------
        tuple of two (float, float) or None
            The lowest and highest rate of the probes that failed at or below the largest passing
            rate, and of those that passed at or above the smallest failing rate (probes without a
            verdict left out); None when no probe contradicts another (:attr:`unstable` False).
        """
        if not self.unstable:
            return None
        judged = [p for p in self.probes if not (p[1] != p[1] and not p[2])]
        top_pass = max(p[0] for p in judged if p[3])
        low_fail = min(p[0] for p in judged if not p[3])
        fails = [p[0] for p in judged if not p[3] and p[0] <= top_pass]
        passes = [p[0] for p in judged if p[3] and p[0] >= low_fail]
        return (min(fails), max(fails)), (min(passes), max(passes))

    @property
    def unstable_detail(self) -> str:
        """Where and why an :attr:`unstable` result's probes disagree (str; empty when stable).

        Names the rates that fail and pass, why the failing ones failed (flagged overloaded,
        perhaps with the attainment as high as the passing probes', or the attainment or slope at
        its threshold), the conservative end (the estimator's bound: ``bracket``) and the search's
        own bracket (:attr:`search_bracket`).
        """
        c = self.conflict
        if c is None:
            return ""
        (f0, f1), (p0, p1) = c
        judged = [p for p in self.probes if not (p[1] != p[1] and not p[2])]
        failing = [p for p in judged if not p[3] and p[0] <= p1]
        if all(p[2] for p in failing):
            pass_att = [p[1] for p in judged if p[3] and p[1] == p[1]]
            high = bool(pass_att) and all(p[1] == p[1] and p[1] >= min(pass_att) for p in failing)
            why = ("the failing ones flagged overloaded by the backlog-slope test, which is noisy at this horizon "
                   "and these seeds" + (", their attainment as high as the passing ones'" if high else ""))
        else:
            why = "the attainment or the backlog slope hovers at its threshold"

        def span(a, b):
            return f"{a:.3f}" if a == b else f"{a:.3f}-{b:.3f}"
        lo, hi = self.bracket
        cons = (f"below {hi:.3f} req/s" if lo == 0 else
                f"{self.rate_req_per_s:.3f} req/s (between {lo:.3f} and {hi:.3f})")
        sb = ""
        if len(self.search_bracket) == 2:
            a, b = self.search_bracket
            sb = f", the search's bracket is [{a:.3f}, {b:.3f}]" if math.isfinite(b) else \
                f", the search's bracket is [{a:.3f}, inf)"
        return f"probes at {span(f0, f1)} req/s fail while {span(p0, p1)} pass ({why}); the conservative end is {cons}{sb}"

    @property
    def unstable_reason(self) -> str:
        """Why an :attr:`unstable` result has no single answer (str; empty when stable): :attr:`unstable_detail`
        prefixed with the seeds and horizon, followed by what steadies it."""
        if not self.unstable:
            return ""
        return (f"no stable answer at a {self.horizon_s:g}-s horizon and {self.seeds} seed"
                f"{'s' if self.seeds != 1 else ''}: {self.unstable_detail}; a longer horizon (or more seeds) "
                "steadies it")

    @property
    def ci_censored(self) -> bool:
        """Whether the interval's lower end is censored at the lowest probe (bool).

        True when the result is stable with an estimate above 0 but more than 2.5% of the
        bootstrap resamples pass at no probe below their smallest failing one (their capacity,
        estimated as 0, lies below the lowest probe): ``ci95[0]`` is then 0, which is no rate the
        plan sustains but "below the lowest probe". :meth:`to_dict` reports that end as null with
        the reason.
        """
        lo, hi = self.ci95
        return bool(math.isfinite(lo) and math.isfinite(hi) and lo <= 0.0 and not self.undetermined
                    and not self.unstable and self.rate_req_per_s > 0 and self.probes)

    @property
    def estimate_in_ci(self):
        """Whether ``rate_req_per_s`` lies inside ``ci95`` (bool; None without an interval or an estimate)."""
        lo, hi = self.ci95
        if not (math.isfinite(lo) and math.isfinite(hi)) or self.undetermined:
            return None
        return bool(lo <= self.rate_req_per_s <= hi)

    @property
    def analytic_ratio(self) -> float:
        """Analytic capacity / simulated capacity (float; > 1: the analytic screen is optimistic); inf at 0.

        NaN when the result is undetermined or :attr:`unstable` (no single simulated capacity).
        """
        if self.undetermined or self.unstable:
            return float("nan")
        return self.analytic_req_per_s / self.rate_req_per_s if self.rate_req_per_s > 0 else float("inf")

    @property
    def contradicting_probes(self) -> list:
        """Probes whose verdict contradicts the bracket: failed below its lower end, or passed above its upper end.

        Returns
        -------
        list of (rate, attainment, overloaded, passed)
            Empty when the verdicts are monotone in rate over the probes (a probe without a
            verdict, which measured nothing, contradicts nothing). Otherwise the answer depends
            on the order of the probes (two searches of the same seeds may then differ by more
            than the tolerance): the attainment or the backlog slope fluctuates around its
            threshold at these seeds and horizon, and more seeds or a longer horizon steady it.
        """
        lo, hi = self.bracket
        return [p for p in self.probes if not (p[1] != p[1] and not p[2])
                and ((p[0] < lo and not p[3]) or (p[0] > hi and p[3]))]

    @property
    def simulated_ratio(self) -> float:
        """Simulated capacity / analytic capacity: the direction of the lecture's figures.

        The lecture (§2.3, §6) measured 0.91 chat, 1.11 offline batch, 0.69 coding agent, and says
        the analytic capacity of the coding agent is 1/0.69 times the simulated one, so its figures
        are simulated / analytic (see docs/REPRODUCTION.md). Returns a float, nan when the
        analytic capacity is 0 or the result is undetermined or :attr:`unstable`.
        """
        if self.unstable:
            return float("nan")
        return self.rate_req_per_s / self.analytic_req_per_s if self.analytic_req_per_s > 0 else float("nan")

    def to_dict(self) -> dict:
        """The result as a JSON-ready dict.

        Returns
        -------
        dict
            ``rate_req_per_s``, ``bracket_req_per_s``, ``ci95_req_per_s``, ``probes`` (list of
            dicts, each with ``seeds_run``, ``measured``, when recorded ``runs`` and
            ``stopped_runs`` (:attr:`probe_runs`, :attr:`probe_stopped`) and, where its
            attainment is null, ``null_reasons``), ``analytic_req_per_s``, ``analytic_ratio``, ``simulated_ratio``,
            ``seeds``, ``horizon_s``, ``estimate_method``, ``ci_method``, ``estimate_in_ci``,
            ``contradicting_probes``, ``undetermined``, ``unstable``, ``unstable_reason``,
            ``search_bracket_req_per_s`` (when recorded) and ``notes``; non-finite values (an
            unbounded bracket, a missing interval, a ratio to 0) become None, each explained in
            ``null_reasons`` (field -> reason starting with ``infinite`` or ``not applicable``);
            ``per_seed_attainment`` is left out. An :attr:`unstable` result reports no
            ``rate_req_per_s``, ``ci95_req_per_s``, ratios or ``estimate_in_ci`` (null, the
            reason pointing to ``unstable_reason``); its ``bracket_req_per_s`` is the conservative
            bound. ``estimate_in_ci`` is null without an interval or an estimate. A
            :attr:`ci_censored` interval's lower end is null (below the lowest probe).
        """
        from .._output import null_reasons, strict
        probes = []
        for i, (r, a, o, p) in enumerate(self.probes):
            q = dict(rate_req_per_s=r, attainment=a, overloaded=o, passed=p,
                     seeds_run=int(self.probe_seeds[i]) if i < len(self.probe_seeds) else self.seeds)
            if i < len(self.probe_measured):
                q["measured"] = int(self.probe_measured[i])
            if i < len(self.probe_runs):
                q["runs"] = int(self.probe_runs[i])
                q["stopped_runs"] = int(self.probe_stopped[i])
            if a != a:
                q["null_reasons"] = {"attainment": "not applicable: the probe's runs measured no request"}
            probes.append(q)
        d = {"rate_req_per_s": self.rate_req_per_s, "bracket_req_per_s": list(self.bracket),
             "ci95_req_per_s": list(self.ci95), "probes": probes,
             "analytic_req_per_s": self.analytic_req_per_s,
             "analytic_ratio": self.analytic_ratio if self.analytic_req_per_s > 0 else math.nan,
             "simulated_ratio": self.simulated_ratio,
             "seeds": self.seeds, "horizon_s": self.horizon_s,
             "estimate_method": ("interpolated between the largest passing probe below the smallest failing one and "
                                 "that probe, where the failing criterion crosses its threshold, over all seeds and "
                                 "every probe"),
             "ci_method": ("bootstrap over seeds of the pooled probe results (2,000 resamples), same estimator on "
                           "the same probes"),
             "estimate_in_ci": self.estimate_in_ci,
             "contradicting_probes": len(self.contradicting_probes),
             "undetermined": self.undetermined,
             "unstable": self.unstable,
             "unstable_reason": self.unstable_reason or None,
             "notes": list(self.notes)}
        if len(self.search_bracket) == 2:
            d["search_bracket_req_per_s"] = list(self.search_bracket)
        unstable = ("not applicable: unstable, the probes contradict each other, so there is no single answer at "
                    "these seeds and horizon (see unstable_reason)")
        if self.unstable:
            d.update(rate_req_per_s=math.nan, ci95_req_per_s=[math.nan, math.nan], estimate_in_ci=None)
        low_probe = min((p[0] for p in self.probes), default=math.nan)
        if self.ci_censored:
            d["ci95_req_per_s"] = [math.nan, self.ci95[1]]
        undetermined = "not applicable: undetermined, no probe measured a request (see notes)"

        def explain(k, v):
            if self.undetermined and k in ("rate_req_per_s", "bracket_req_per_s", "ci95_req_per_s",
                                           "analytic_ratio", "simulated_ratio", "estimate_in_ci"):
                return undetermined
            if self.unstable and k in ("rate_req_per_s", "ci95_req_per_s", "analytic_ratio", "simulated_ratio",
                                       "estimate_in_ci"):
                return unstable
            if k == "unstable_reason":
                return "not applicable: the probes' verdicts are monotone in rate (no probe contradicts another)"
            if k == "estimate_in_ci":
                return ("not applicable: one seed gives no interval (use 2 seeds or more)" if self.seeds < 2 else
                        "not applicable: no interval was resampled (no probe passed, or bootstrap=0)")
            if k == "search_bracket_req_per_s":
                return "infinite: no probe of the search failed, so its bracket has no upper end"
            if k == "bracket_req_per_s":
                return "infinite: no probe failed, so the bracket has no upper end"
            if k == "ci95_req_per_s" and self.ci_censored:
                return (f"not applicable: the lower end is censored: more than 2.5% of the resamples of the seeds "
                        f"pass at no probe below their smallest failing one, so their capacity lies below the "
                        f"lowest probe, {low_probe:.4g} req/s (a longer horizon or more seeds steady the verdicts)")
            if k == "ci95_req_per_s":
                return ("not applicable: one seed gives no interval (use 2 seeds or more)" if self.seeds < 2 else
                        "not applicable: no interval was resampled (no probe passed, or bootstrap=0)")
            if k == "analytic_ratio":
                return ("not applicable: the analytic screen finds the plan infeasible (analytic capacity 0)"
                        if not self.analytic_req_per_s > 0 else "infinite: no probed rate passed (simulated capacity 0)")
            if k == "simulated_ratio":
                return "not applicable: the analytic screen finds the plan infeasible (analytic capacity 0)"
            return None
        d["null_reasons"] = null_reasons(d, explain)
        return strict(d)


class HorizonFloor(NamedTuple):
    """How long a capacity search's horizon must be for its measured requests: :func:`horizon_floor`.

    Attributes
    ----------
    prompt_tokens, output_tokens : float
        The mean request's lengths (tokens).
    lone_s : float
        Its latency alone on an idle instance of the plan (s): TTFT alone + (O - 1) x TPOT alone
        (the step model of :func:`lone_request_check`).
    slo_pace_s : float
        The time its SLO allows it (s): TTFT target + (O - 1) x TPOT target; near capacity a
        request takes about this long.
    min_horizon_s : float
        The shortest horizon a search accepts (s): ``lone_s / ((1 - b) + (1 - attainment)(b - a))``
        for the measure window ``(a, b)``.
    full_horizon_s : float
        The horizon below which the capacity is understated (s): ``slo_pace_s / (1 - b)``
        (inf when the window ends at the horizon).
    """

    prompt_tokens: float
    output_tokens: float
    lone_s: float
    slo_pace_s: float
    min_horizon_s: float
    full_horizon_s: float

    def refusal(self, field: str, horizon_s: float, measure_window=(0.2, 0.8)) -> FastsimInputError:
        """The error a horizon below :attr:`min_horizon_s` gets.

        Parameters
        ----------
        field : str
            The caller's name for the horizon (``horizon_s``, ``--horizon``).
        horizon_s : float
            The horizon refused (s).
        measure_window : (float, float)
            The search's measure window (fractions of the horizon).

        Returns
        -------
        FastsimInputError
            Naming ``field``, the horizon and the shortest one accepted, with the reason.
        """
        b = measure_window[1]
        return FastsimInputError(field, horizon_s, (
            f"a horizon of at least {self.min_horizon_s:.3g} s for this plan and workload: a mean request "
            f"({self.prompt_tokens:,.0f} + {self.output_tokens:,.0f} tokens) takes {self.lone_s:.3g} s alone on an "
            f"idle instance, and measured requests still running at the horizon count as misses (a run does "
            f"not drain), so at {horizon_s:g} s those arriving in the last part of the measured window (which "
            f"ends at {b:.0%} of the horizon) could not finish even alone: no rate could pass and the search "
            f"would measure the horizon, not the plan; at least {self.full_horizon_s:.3g} s keeps the capacity "
            "from being understated"))

    def note(self, horizon_s: float, measure_window=(0.2, 0.8)) -> str:
        """The note on a horizon below :attr:`full_horizon_s` ('' at or above it).

        Parameters
        ----------
        horizon_s : float
            The search's horizon (s).
        measure_window : (float, float)
            The search's measure window (fractions of the horizon).

        Returns
        -------
        str
            The note, or ``''``.
        """
        if not horizon_s < self.full_horizon_s:
            return ""
        b = measure_window[1]
        return (f"a horizon of {horizon_s:g} s understates the capacity: a mean request ({self.prompt_tokens:,.0f} "
                f"+ {self.output_tokens:,.0f} tokens) may take {self.slo_pace_s:.3g} s within its targets "
                f"(TTFT target + (O - 1) x TPOT target; near capacity it takes about that long), longer than the "
                f"{(1 - b) * horizon_s:.3g} s from the end of the measured window ({b:.0%} of the horizon) to the "
                "horizon; measured requests still running at the horizon count as misses (a run does not drain), "
                f"so the probes fail early; a horizon of at least {self.full_horizon_s:.3g} s measures the plan")


class ScaleProbe(NamedTuple):
    """One probe of :func:`max_sustainable_scale`: the trace replayed once at one time scale.

    Attributes
    ----------
    scale : float
        Time scale s (dimensionless, > 0): arrival times are divided by s.
    rate_req_per_s : float
        Equivalent mean rate, ``n / (duration_s / s)`` (req/s; ``n`` and ``duration_s`` of the
        whole trace).
    horizon_s : float
        Simulated seconds: the replayed span ``duration_s / s`` (to the next float up, so that the
        last arrival lies inside it, as ``fastsim simulate --trace`` replays), or the caller's
        ``horizon_s`` when that is shorter.
    requests : int
        Requests replayed (arriving by the horizon).
    excluded_requests : int
        Requests of the trace arriving after the horizon: not simulated (0 unless a horizon cuts
        the replay).
    measured : int
        Replayed requests arriving in the measured window (the middle 60% of the horizon).
    attainment : float
        Fraction of the measured requests that met both targets (0 when none was measured).
    overloaded : bool
        The run's overload flag (:func:`pooled_overload` of one run).
    passed : bool
        ``attainment >= slo.attainment and not overloaded``, the rule of
        :func:`max_sustainable_rate`.
    ttft_p90_s, tpot_p90_s : float
        P90 TTFT and TPOT of the measured requests (s; inf past the requests that never got
        the token, nan with nothing to measure).
    rejected, unfinished : int
        Replayed requests rejected at arrival, and accepted ones without their last token by the
        horizon.
    round : int
        The search round (from 0) whose parallel batch simulated the probe.
    """

    scale: float
    rate_req_per_s: float
    horizon_s: float
    requests: int
    excluded_requests: int
    measured: int
    attainment: float
    overloaded: bool
    passed: bool
    ttft_p90_s: float
    tpot_p90_s: float
    rejected: int
    unfinished: int
    round: int

    def to_dict(self) -> dict:
        """The probe as a JSON-ready dict.

        Returns
        -------
        dict
            Every field; a non-finite P90 becomes None, explained in ``null_reasons``.
        """
        from .._output import null_reasons, percentile_reason, strict
        d = self._asdict()
        d["null_reasons"] = null_reasons(d, lambda k, v: percentile_reason(k[:4].upper(), 0.9, v, self.measured)
                                         if k in ("ttft_p90_s", "tpot_p90_s") else None)
        return strict(d)


@dataclass(frozen=True)
class TraceCapacityResult:
    """The maximum sustainable time scale of a plan on a real trace (SPEC §7, on a trace).

    A time scale s replays the trace with its arrival times divided by s (same requests, order
    and lengths); its equivalent mean rate is ``n / (duration_s / s)``.

    Attributes
    ----------
    scale : float
        The estimate: between the largest passing scale below the smallest failing one
        (``bracket[0]``) and that failing scale (``bracket[1]``), where the failing criterion
        (attainment, or the overload flag at the midpoint) crosses its threshold by linear
        interpolation, the estimator of :class:`CapacityResult` on one run per probe. 0 when every
        probe failed; the largest passing scale when none failed.
    bracket : (float, float)
        (pass, fail) scales: the largest passing scale below the smallest failing one, and that
        one; ``(hi - lo) / lo <= rel_tol`` unless the probe budget ran out. ``(0, hi)`` when no
        scale below ``hi`` passed, ``(lo, inf)`` when none failed. The only interval: a trace is
        one realisation.
    probes : list of ScaleProbe
        Every probe, in the order simulated (ascending scale within a round).
    trace : str
        The trace's name.
    requests : int
        Requests in the trace.
    duration_s : float
        The trace's span at scale 1 (s): its ``duration_s``.
    analytic_req_per_s : float
        The plan's analytic capacity (req/s; 0 when the screen finds it infeasible).
    horizon_limit_s : float
        The caller's horizon (s), inf when none: it cuts every replay whose span exceeds it.
    horizon_s : float
        The horizon at ``scale`` (s): ``min(duration_s / scale, horizon_limit_s)``; nan at scale 0.
    excluded_requests : int or None
        Requests of the trace arriving after ``horizon_s`` at ``scale`` (not simulated); None at
        scale 0.
    rel_tol : float
        Relative bracket width asked for.
    probes_per_round : int
        Scales simulated together in each round's parallel batch.
    notes : tuple of str
        What the figures need said: one realisation (no seeds, no confidence interval), a
        horizon that cuts the replay, probes that pass above a failing scale, a budget or
        search range that ran out.
    """

    scale: float
    bracket: tuple
    probes: list
    trace: str
    requests: int
    duration_s: float
    analytic_req_per_s: float
    horizon_limit_s: float
    horizon_s: float
    excluded_requests: int | None
    rel_tol: float
    probes_per_round: int
    notes: tuple = ()

    @property
    def native_rate_req_per_s(self) -> float:
        """The trace's own mean rate, ``requests / duration_s`` (float, req/s)."""
        return self.requests / self.duration_s

    @property
    def rate_req_per_s(self) -> float:
        """Equivalent mean rate at ``scale``: ``requests / (duration_s / scale)`` (float, req/s)."""
        return self.native_rate_req_per_s * self.scale

    @property
    def bracket_req_per_s(self) -> tuple:
        """``bracket`` as equivalent mean rates (tuple of two floats, req/s; inf for an open end)."""
        return tuple(self.native_rate_req_per_s * s for s in self.bracket)

    @property
    def analytic_scale(self) -> float:
        """The scale whose equivalent rate is the analytic capacity (float; 0 when it is 0)."""
        return self.analytic_req_per_s / self.native_rate_req_per_s

    @property
    def analytic_ratio(self) -> float:
        """Analytic capacity / equivalent simulated rate (float; > 1: the screen is optimistic); inf at 0."""
        return self.analytic_req_per_s / self.rate_req_per_s if self.rate_req_per_s > 0 else float("inf")

    @property
    def simulated_ratio(self) -> float:
        """Equivalent simulated rate / analytic capacity (float; nan when the analytic capacity is 0)."""
        return self.rate_req_per_s / self.analytic_req_per_s if self.analytic_req_per_s > 0 else float("nan")

    def to_dict(self) -> dict:
        """The result as a JSON-ready dict.

        Returns
        -------
        dict
            ``scale``, ``bracket_scale``, ``rate_req_per_s``, ``bracket_req_per_s``,
            ``native_rate_req_per_s``, ``trace``, ``requests``, ``trace_duration_s``,
            ``horizon_s``, ``horizon_limit_s``, ``excluded_requests``, ``probes`` (list of
            :meth:`ScaleProbe.to_dict`), ``analytic_req_per_s``, ``analytic_scale``,
            ``analytic_ratio``, ``simulated_ratio``, ``rel_tol``, ``probes_per_round``,
            ``estimate_method``, ``ci_method`` and ``notes``; non-finite values become None,
            each explained in ``null_reasons`` (reasons start with ``infinite`` or
            ``not applicable``).
        """
        from .._output import null_reasons, strict
        feasible = self.analytic_req_per_s > 0
        d = {"scale": self.scale, "bracket_scale": list(self.bracket), "rate_req_per_s": self.rate_req_per_s,
             "bracket_req_per_s": list(self.bracket_req_per_s),
             "native_rate_req_per_s": self.native_rate_req_per_s, "trace": self.trace, "requests": self.requests,
             "trace_duration_s": self.duration_s, "horizon_s": self.horizon_s,
             "horizon_limit_s": self.horizon_limit_s, "excluded_requests": self.excluded_requests,
             "probes": [p.to_dict() for p in self.probes],
             "analytic_req_per_s": self.analytic_req_per_s,
             "analytic_scale": self.analytic_scale if feasible else math.nan,
             "analytic_ratio": self.analytic_ratio if feasible else math.nan,
             "simulated_ratio": self.simulated_ratio, "rel_tol": self.rel_tol,
             "probes_per_round": self.probes_per_round,
             "estimate_method": ("interpolated between the largest passing and the smallest failing scale where "
                                 "the failing criterion crosses its threshold, one replay per probe"),
             "ci_method": "none: a trace is one realisation (no seeds); the bisection bracket is the only interval",
             "notes": list(self.notes)}
        no_pass = "not applicable: no probed scale passed (estimate 0)"

        def explain(k, v):
            if k in ("bracket_scale", "bracket_req_per_s"):
                return "infinite: no probe failed, so the bracket has no upper end"
            if k == "horizon_limit_s":
                return "not applicable: no horizon given; each probe replays the whole trace"
            if k in ("horizon_s", "excluded_requests"):
                return no_pass
            if k in ("analytic_scale", "simulated_ratio") or (k == "analytic_ratio" and not feasible):
                return "not applicable: the analytic screen finds the plan infeasible (analytic capacity 0)"
            if k == "analytic_ratio":
                return "infinite: no probed scale passed (simulated capacity 0)"
            return None
        d["null_reasons"] = null_reasons(d, explain)
        return strict(d)


class _Replay(NamedTuple):
    """A replayed stretch of a trace, with its prefix blocks (what :func:`fastsim.sim.simulate_batch` reads)."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    prefix: object = None


class _RunFigures(NamedTuple):
    """What a capacity probe reads of one run (the :class:`~fastsim.sim.SimMetrics` fields it uses)."""

    attainment: float
    measured: int
    n_requests: int
    rejected: int
    unfinished: int
    ttft_p90_s: float
    tpot_p90_s: float
    queue_slope_req_per_s: float
    arrival_rate_req_per_s: float
    overloaded: bool
