"""``fastsim capacity``: the maximum sustainable load of one plan (:mod:`fastsim.search`, SPEC §8).

Three searches share the plan and workload flags:

- with ``--scenario``: bisection on the rate over seeds (:func:`fastsim.search.max_sustainable_rate`),
  a probe per row as it finishes, the estimate, its 95% bootstrap interval and the analytic ratio;
- with ``--instance-counts``: the plan at several instance counts searched together
  (:func:`fastsim.search.max_sustainable_rates`), one row per count;
- with ``--trace``: bisection on the trace's time scale (:func:`fastsim.search.max_sustainable_scale`),
  4 scales per round.
"""
from __future__ import annotations

import math
import sys

from .._command_helpers import (_add_arrival_args, _add_calibration, _add_common, _add_plan_args, _add_spec_args,
                                _arrival_cv,
                                _add_workload, _check_plot, _command_catalog, _constants, _constants_notes, _emit,
                                _fmt, _legend,
                                _notes_out, _pct, _positive, _seeds)
from ..errors import FastsimInputError

#: ``fastsim capacity --help``: the two searches.
CAPACITY_DESCRIPTION = (
    "Maximum sustainable load of one plan. With --scenario: bisection on the rate, each probe --seeds "
    "seeds x --horizon s of synthetic arrivals (common random numbers), a 95% bootstrap interval across "
    "seeds. With --trace: bisection on the trace's time scale s (arrival times divided by s: same "
    "requests, order and lengths; equivalent rate = requests / (duration / s)), each probe one replay "
    "over the trace's span at that scale (or over --horizon seconds when shorter; the requests after it "
    "are counted as excluded), 4 scales per round in parallel; a trace is one realisation, so the "
    "bracket is the only interval; --rate centres the first round. A probe passes when the attainment "
    "over the measured requests (middle 60% of the horizon) is >= 0.90 (P / 100 with --slo-percentile P) and the "
    "run is not overloaded. "
    "With --instance-counts (e.g. 1-4 or 1,2,4,8): the same plan at each instance count (decode instances "
    "of a disaggregated plan), searched together: each count starts from its smaller counts' simulated / "
    "analytic ratio and a probe stops running seeds once a sequential test is sure of its verdict; where "
    "no probe contradicts its bracket the answers equal the one-plan search's to --tol; one row per count "
    "(lecture policy, Poisson arrivals, --scenario only).")


def add_parser(sub):
    """Add the ``capacity`` sub-command to ``sub`` (the sub-parsers of :func:`fastsim.cli.build_parser`)."""
    sp = sub.add_parser("capacity", help="maximum sustainable rate of a plan (bisection over seeds), of the plan "
                        "at several instance counts, or time scale of a trace", description=CAPACITY_DESCRIPTION)
    _add_workload(sp)
    _add_common(sp)
    _add_plan_args(sp)
    sp.add_argument("--seeds", type=_seeds, default=None,
                    help="seeds per probe (default 16; a trace replays once per probe)")
    sp.add_argument("--horizon", type=_positive("--horizon"), default=None,
                    help="simulated seconds per run (default 600; with --trace, each probe's replayed span, "
                         "which a shorter --horizon cuts). Measured requests still running at the horizon are "
                         "misses, so a horizon too short for a mean request to finish alone is refused, and one "
                         "shorter than its SLO pace (TTFT + (O - 1) x TPOT targets) / 0.2 gets a note: it "
                         "understates the capacity")
    sp.add_argument("--tol", type=_positive("--tol"), default=0.01, help="relative tolerance (default 0.01)")
    sp.add_argument("--seed", type=int, default=None, help="root seed (default 0; not used with --trace)")
    _add_arrival_args(sp, prefixes=False)
    _add_spec_args(sp)
    sp.add_argument("--plot", metavar="FILE.png", help="attainment vs rate with the probes and the interval")
    sp.add_argument("--instance-counts", metavar="LIST",
                    help="the plan's capacity at each of these instance counts (decode instances of a "
                         "disaggregated plan), searched together: integers >= 1, ranges and commas, e.g. 1-4 or "
                         "1,2,4,8; not with --trace, --rate, --plot, --policy vllm/sglang, speculative decoding or "
                         "--arrival gamma")
    _add_calibration(sp)
    sp.set_defaults(func=run)


def run(args):
    """Run ``fastsim capacity``: the one-plan rate search, or ``--instance-counts`` or ``--trace``; the exit status."""
    from ._resolve import _screen_infeasible
    from ..search import check_rate_hint, max_sustainable_rate
    if args.instance_counts is not None:
        return _cmd_capacity_counts(args)
    _check_plot(args)
    if args.trace:
        return _cmd_capacity_trace(args)
    if args.rate is not None:       # before anything is sized at it
        check_rate_hint("--rate", args.rate, 600.0 if args.horizon is None else args.horizon)
    cat, model, demand, source, notes, plan = _capacity_setup(args)
    plan, engine = _capacity_engine(args, plan, model, cat, notes, demand)
    _capacity_horizon_check(args, plan, source.prompt.mean, source.output.mean, demand, cat, model)
    cv = _arrival_cv(args)
    table = args.format == "table"
    screen_why = _screen_infeasible(plan, model, demand, cat, _constants(args)) if not plan.capacity_req_per_s > 0 else ""
    if table:
        P = _pct(demand.slo_percentile)
        print(f"{plan.describe()} on {model.name}; {P} TTFT <= {demand.ttft_s:g} s, {P} TPOT <= {demand.tpot_s * 1e3:g} ms; "
              f"{args.seeds} seed{'s' if args.seeds > 1 else ''} x {args.horizon:g} s per probe", flush=True)
        print(_PROBE_HEAD, flush=True)
    live = _ProbeProgress(table)
    try:
        res = max_sustainable_rate(plan, source, _slo(demand), seeds=args.seeds,
                                   horizon_s=args.horizon, rel_tol=args.tol, seed=args.seed, catalog=cat, model=model,
                                   rate_hint_req_per_s=args.rate, routing=args.routing, arrival=args.arrival,
                                   cv=cv, on_probe_start=live.start,
                                   on_runs=live.runs if live.bar_wanted else None, on_probe=live.done,
                                   engine=engine,
                                   constants=_constants(args))
    finally:
        live.close()
    notes = list(notes) + list(res.notes) + _capacity_notes(res)
    _capacity_output(args, res, plan, screen_why, notes, _capacity_summary)
    if args.plot:
        from ..plots import plot_capacity
        plot_capacity(res, args.plot, title=plan.describe())
    return 0


def _slo(demand):
    """The SLO of a demand: its targets at its percentile (``--slo-percentile``, P90 by default)."""
    from ..search import SLO
    return SLO(demand.ttft_s, demand.tpot_s, demand.slo_attainment)


# ---------------------------------------------------------------------------- one plan, synthetic arrivals

_PROBE_HEAD = ("probe    rate req/s    attainment  overloaded    SLO\n"
               "-------  ------------  ----------  ------------  -----")


class _ProbeProgress:
    """Capacity probes as they finish: a row each in table mode, a bar per probe on a terminal (stderr)."""

    def __init__(self, table: bool):
        self.table = table
        self.bar_wanted = sys.stderr.isatty()
        self.bar = None
        self.n = 0

    def start(self, rate, runs):
        self.n += 1
        if self.bar_wanted:
            from tqdm import tqdm
            self.bar = tqdm(total=runs, desc=f"probe {self.n} at {rate:.3f} req/s", unit="run", leave=False,
                            file=sys.stderr)

    def runs(self, k):
        if self.bar is not None:
            self.bar.update(k)

    def done(self, rate, attainment, overloaded, passed):
        self.close()
        if self.table:
            # a probe that measured no request has no attainment and no verdict (fastsim.search)
            measured = attainment == attainment
            att = f"{attainment:<10.3f}" if measured else f"{'n/a':<10}"
            verdict = ("pass" if passed else "FAIL") if measured else "no verdict (no request measured)"
            print(f"{self.n:<7d}  {rate:<12.3f}  {att}  {'yes' if overloaded else 'no':<12}  {verdict}", flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _capacity_summary(res, screen_why: str = "") -> str:
    """The line under the probes: the estimate, where it comes from, the interval, the analytic ratio."""
    lo, hi = res.bracket
    if res.undetermined:
        est = (f"max sustainable rate: undetermined (no probe measured a request in {res.seeds} "
               f"seed{'s' if res.seeds > 1 else ''} x {res.horizon_s:g} s; a longer --horizon or a higher --rate "
               "measures some)")
    elif res.unstable:
        est = (f"max sustainable rate: no stable answer at --horizon {res.horizon_s:g} s and --seeds {res.seeds}: "
               f"{res.unstable_detail}; a longer --horizon (or more --seeds) steadies it")
    elif not res.probes or not any(p[3] for p in res.probes):
        est = f"max sustainable rate: below {hi:.3f} req/s (every probe failed)"
    elif lo == 0:
        above = sum(1 for p in res.probes if p[3] and p[0] > hi)
        est = (f"max sustainable rate: below {hi:.3f} req/s (the smallest failing probe: no probe below it passed, "
               f"{above} above it did, see the note)")
    elif not math.isfinite(hi):
        est = f"max sustainable rate: at least {lo:.3f} req/s (no probe failed)"
    else:
        est = (f"max sustainable rate: {res.rate_req_per_s:.3f} req/s (interpolated between the largest passing "
               f"probe, {lo:.3f}, and the smallest failing one, {hi:.3f})")
    ci = ("95% CI across seeds n/a (the probes contradict each other, so the resamples bound no single answer)"
          if res.unstable else
          (f"95% CI across seeds below {min(p[0] for p in res.probes):.3f} - {res.ci95[1]:.3f} (the lower end is "
           "censored: more than 2.5% of the resamples pass at no probe below their smallest failing one, so their "
           "capacity lies below the lowest probe; "
           "a longer --horizon or more --seeds steady it)") if res.ci_censored else
          f"95% CI across seeds {res.ci95[0]:.3f} - {res.ci95[1]:.3f}" if math.isfinite(res.ci95[0])
          else "no interval with one seed (use --seeds >= 2)" if res.seeds < 2 else "no interval")
    if screen_why:
        return f"{est}; {ci}; the analytic screen finds this plan infeasible ({screen_why}), so there is no ratio"
    return (f"{est}; {ci}; analytic {res.analytic_req_per_s:.3f} req/s, "
            f"analytic / simulated = {_fmt(res.analytic_ratio, '.2f')} "
            f"(simulated / analytic = {_fmt(res.simulated_ratio, '.2f')})")


def _capacity_notes(res) -> list:
    """Notes on a capacity result: probes that contradict the bracket, an estimate outside its own interval.

    The result's own notes (:attr:`fastsim.search.CapacityResult.notes`) are not repeated here.
    """
    out = []
    bad = res.contradicting_probes
    if bad:
        lo, hi = res.bracket
        shown = 3
        said = ", ".join(f"{'failed' if not p[3] else 'passed'} at {p[0]:.3f} req/s" for p in bad[:shown])
        if len(bad) > shown:
            said += f", and {len(bad) - shown} more not listed"
        out.append(f"{len(bad)} probe{'s' if len(bad) > 1 else ''} contradict{'' if len(bad) > 1 else 's'} the "
                   f"bracket {lo:.3f} - {hi:.3f} ({said}): the verdict is not monotone in rate at these seeds and "
                   "horizon (the attainment or the backlog slope hovers at its threshold), so no estimate, interval "
                   "or ratio is reported: the estimator's bound, the smallest failing probe, depends on which rates "
                   "were probed and another search may differ by more than --tol; more --seeds or a longer "
                   "--horizon steady it")
    if res.estimate_in_ci is False and not res.unstable:
        out.append(f"the estimate {res.rate_req_per_s:.3f} req/s lies outside the 95% interval "
                   f"{res.ci95[0]:.3f} - {res.ci95[1]:.3f}: both come from the same estimator on the same probes, "
                   f"the interval over 2,000 resamples of the {res.seeds} seeds; the estimator jumps where a resample "
                   "flips a probe's verdict (its capacity moves to another pair of probes), and fewer than 2.5% of "
                   "the resamples keep the full sample's verdicts: they hang on one or two seeds; more --seeds "
                   "steady them")
    return out


def _capacity_horizon_check(args, plan, prompt_tokens, output_tokens, demand, cat, model):
    """Refuse a ``--horizon`` shorter than :func:`fastsim.search.horizon_floor` accepts for the plan, naming the flag.

    Returns the :class:`fastsim.search.HorizonFloor` (the trace search bounds ``--rate`` by it too).
    """
    from ..search import horizon_floor
    floor = horizon_floor(plan, prompt_tokens, output_tokens, _slo(demand), catalog=cat,
                          constants=_constants(args), model=model)
    if args.horizon is not None and args.horizon < floor.min_horizon_s:
        raise floor.refusal("--horizon", args.horizon)
    return floor


def _add_screen_verdict(rec: dict, screen_why: str) -> dict:
    """Add to a capacity record whether the analytic screen finds the plan feasible: ``analytic_feasible``
    and ``analytic_infeasible_reason`` (null where feasible, with its reason in ``null_reasons``)."""
    rec["analytic_feasible"] = not screen_why
    rec["analytic_infeasible_reason"] = screen_why or None
    if not screen_why:
        rec["null_reasons"]["analytic_infeasible_reason"] = "not applicable: the analytic screen finds the plan feasible"
    return rec


def _capacity_engine(args, plan, model, cat, notes, demand, prefixes=None):
    """``(plan, engine)`` of the capacity searches from the engine and speculation flags (engine None: lecture).

    ``prefixes``: whether the workload carries prefix block ids (:func:`_engine_setup`).
    """
    from ._resolve import _engine_dict, _engine_setup
    plan, _, _, enotes = _engine_setup(args, plan, model, cat, demand, prefixes)   # checks the flags, states the policy
    notes.extend(enotes)
    return plan, _engine_dict(args)


def _capacity_setup(args):
    """The rate searches' common start: ``--tol`` checked, the defaults of ``--seeds`` (16),
    ``--horizon`` (600 s) and ``--seed`` (0) filled in, then ``(catalog, model, demand, source,
    notes, plan)`` from the workload and plan flags.

    Raises
    ------
    FastsimInputError
        ``--tol`` of 1 or more, or anything the workload and plan flags are refused for.
    """
    from ._resolve import _plan_from_args, _resolve_workload
    if not args.tol < 1.0:
        raise FastsimInputError("--tol", args.tol, "a fraction in (0, 1)")
    args.seeds = 16 if args.seeds is None else args.seeds
    args.horizon = 600.0 if args.horizon is None else args.horizon
    args.seed = 0 if args.seed is None else args.seed
    cat = _command_catalog(args)
    model, demand, source, notes = _resolve_workload(args, cat)
    plan, model = _plan_from_args(args, cat, model, demand)
    return cat, model, demand, source, notes, plan


def _capacity_output(args, res, plan, screen_why, notes, summary):
    """Print a one-plan search's result: the summary line and the notes (table), or its record (JSON / CSV).

    The record is ``res.to_dict()`` with the plan's description and the screen's verdict
    (:func:`_add_screen_verdict`).

    Parameters
    ----------
    args : argparse.Namespace
        The ``capacity`` arguments (``--format``).
    res : CapacityResult or ScaleResult
        The search's result.
    plan : Plan
        The plan searched.
    screen_why : str
        Why the analytic screen finds the plan infeasible ('' where it is feasible).
    notes : list of str
        The notes to print.
    summary : callable
        ``summary(res, screen_why)``: the table's line under the probes (:func:`_capacity_summary`,
        :func:`_scale_summary`).
    """
    rec = res.to_dict()
    rec["plan"] = plan.describe()
    _add_screen_verdict(rec, screen_why)
    notes = list(notes) + _constants_notes(args)
    if args.format == "table":
        print(summary(res, screen_why))
        for n in notes:
            print("note: " + n)
    else:
        _emit(args, rec, [], [], notes)
        _notes_out(args, notes)


# ---------------------------------------------------------------------------- --instance-counts

#: Most instance counts one ``capacity --instance-counts`` searches (each is a search of its own).
MAX_INSTANCE_COUNTS = 64
#: Largest instance count ``capacity --instance-counts`` takes (as ``--instances`` of a fleet of GPUs).
MAX_INSTANCE_COUNT = 4096


def _instance_counts(text) -> tuple:
    """The counts of ``--instance-counts``: integers >= 1 given as ranges and commas.

    Parameters
    ----------
    text : str
        E.g. ``"1,2,4,8"``, ``"1-8"`` or ``"1-4,8"``.

    Returns
    -------
    tuple of int
        The counts in increasing order.

    Raises
    ------
    FastsimInputError
        A part that is not an integer or a range ``A-B`` with ``1 <= A <= B <=``
        :data:`MAX_INSTANCE_COUNT`, a count given twice (also through overlapping ranges), or more
        than :data:`MAX_INSTANCE_COUNTS` counts.
    """
    flag = "--instance-counts"
    allowed = "integers >= 1 without duplicates, as ranges and commas, e.g. 1-4 or 1,2,4,8"
    out = []
    for part in str(text).split(","):
        part = part.strip()
        first, dash, last = part.partition("-")
        try:
            a = int(first)
            b = int(last) if dash else a
        except ValueError:
            raise FastsimInputError(flag, text, f"{allowed} ({part!r} is not an integer or a range A-B)") from None
        if min(a, b) < 1:
            raise FastsimInputError(flag, text, f"{allowed} ({part!r} has a count below 1)")
        if b < a:
            raise FastsimInputError(flag, text, f"{allowed} ({part!r} runs backwards: {b}-{a})")
        if b > MAX_INSTANCE_COUNT:
            raise FastsimInputError(flag, text, f"{allowed} ({part!r} goes past {MAX_INSTANCE_COUNT} instances)")
        if len(out) + b - a + 1 > MAX_INSTANCE_COUNTS:
            raise FastsimInputError(flag, text, f"{allowed}; at most {MAX_INSTANCE_COUNTS} counts")
        out.extend(range(a, b + 1))
    seen, twice = set(), []
    for n in out:
        if n in seen and n not in twice:
            twice.append(n)
        seen.add(n)
    if twice:
        raise FastsimInputError(flag, text, f"{allowed} ({', '.join(map(str, sorted(twice)))} given more than once)")
    return tuple(sorted(out))


def _counts_text(counts) -> str:
    """Sorted counts as ranges and commas (``1-4, 8``; runs of three or more as a range)."""
    parts, i = [], 0
    while i < len(counts):
        j = i
        while j + 1 < len(counts) and counts[j + 1] == counts[j] + 1:
            j += 1
        parts += [f"{counts[i]}-{counts[j]}"] if j - i >= 2 else [str(n) for n in counts[i:j + 1]]
        i = j + 1
    return ", ".join(parts)


def _refuse_with_counts(args):
    """Refuse the ``capacity`` flags that :func:`fastsim.search.max_sustainable_rates` does not take.

    Raises
    ------
    FastsimInputError
        Naming the first such flag given with ``--instance-counts``, its value and what is allowed.
    """
    with_counts = "no value with --instance-counts"
    lecture = ("the searches of --instance-counts simulate the lecture policy, without speculative decoding "
               "or engine settings; use one count with --instances")
    given = [
        ("--trace", args.trace, f"{with_counts} (the counts are searched on synthetic arrivals: use --scenario; "
                                "for a trace, one plan's time-scale search without --instance-counts)"),
        ("--rate", args.rate, f"{with_counts} (each count's search starts at its analytic capacity, or at its "
                              "smaller counts' simulated / analytic ratio)"),
        ("--plot", args.plot, f"{with_counts} (the plot shows one plan's probes: use one count with --instances)"),
        ("--instances", args.instances, f"{with_counts} (it sets the instances)"),
        ("--decode-instances", args.decode_instances, f"{with_counts} (it sets the decode instances)"),
        ("--spec-alpha", args.sim_spec_alpha, f"{with_counts} ({lecture})"),
        ("--spec-gamma", args.sim_spec_gamma, f"{with_counts} ({lecture})"),
        ("--spec-draft", args.sim_spec_draft, f"{with_counts} ({lecture})"),
        ("--max-num-batched-tokens", args.max_num_batched_tokens, f"{with_counts} ({lecture})"),
        ("--max-num-seqs", args.max_num_seqs, f"{with_counts} ({lecture})"),
        ("--no-prefix-caching", True if args.no_prefix_caching else None, f"{with_counts} ({lecture})"),
    ]
    for flag, v, allowed in given:
        if v is not None:
            raise FastsimInputError(flag, v, allowed)
    if args.policy != "lecture":
        raise FastsimInputError("--policy", args.policy, f"lecture with --instance-counts ({lecture})")
    if args.arrival != "poisson":
        raise FastsimInputError("--arrival", args.arrival, "poisson with --instance-counts (its searches draw "
                                "Poisson arrivals; use one count with --instances for gamma arrivals)")
    if args.cv not in (None, 1.0):
        raise FastsimInputError("--cv", args.cv, "1 with --instance-counts (Poisson arrivals)")
    if args.routing == "prefix-aware":
        raise FastsimInputError("--routing", args.routing, "least-loaded or round-robin with --instance-counts "
                                "(prefix-aware routing needs an engine policy's prefix cache)")


def _plan_without_count(plan) -> str:
    """The plan's description (:meth:`fastsim.analytic.Plan.describe`) without the count ``--instance-counts`` sets.

    E.g. ``B200 FP8 colocated, instances of TP1`` or ``H200 FP8 disaggregated, prefill 3 instances
    of TP1 + decode instances of TP4``.
    """
    extra = f", {plan.prefix_hit_fraction:.0%} prefix-cache hits" if plan.prefix_hit_fraction else ""
    if plan.mode != "disaggregated":
        return f"{plan.gpu} {plan.precision} colocated, instances of {plan.label(plan.tp)}{extra}"
    n = plan.prefill_instances
    prefill = f"{n} instance{'s' if n != 1 else ''} of {plan.label(plan.prefill_tp)}"
    decode = f"instances of {plan.label(plan.decode_tp)}"
    if plan.heterogeneous:
        return (f"disaggregated, prefill {plan.prefill_gpu_name} {plan.prefill_precision_name} {prefill} + decode "
                f"{plan.gpu} {plan.precision} {decode}{extra}")
    return f"{plan.gpu} {plan.precision} disaggregated, prefill {prefill} + decode {decode}{extra}"


class _RoundProgress:
    """The batched capacity search's rounds as a bar on stderr when it is a terminal (as :class:`_ProbeProgress`).

    Parameters
    ----------
    counts : int
        Instance counts searched (for the bar's text).
    """

    def __init__(self, counts: int):
        self.counts = counts
        self.bar_wanted = sys.stderr.isatty()
        self.bar = None

    def __call__(self, round_index, searching, runs):
        """``on_round`` of :func:`fastsim.search.max_sustainable_rates`: a round starts (the one before is done)."""
        if not self.bar_wanted:
            return
        if self.bar is None:
            from tqdm import tqdm
            self.bar = tqdm(desc="capacity search", unit="round", leave=False, file=sys.stderr)
        else:
            self.bar.update(1)
        self.bar.set_postfix_str(f"round {round_index + 1}: {searching} of {self.counts} counts probing, "
                                 f"{runs} runs")

    def close(self):
        """Count the last round and remove the bar."""
        if self.bar is not None:
            self.bar.update(1)
            self.bar.close()
            self.bar = None


def _cmd_capacity_counts(args):
    """``capacity --instance-counts``: one plan's capacity at several instance counts, searched together.

    Each count's plan is the command line's plan with ``instances`` (colocated) or
    ``decode_instances`` and ``instances`` (disaggregated; the prefill side as given) replaced, so
    that its analytic capacity follows the count; :func:`fastsim.search.max_sustainable_rates`
    searches them in one call with the one-plan search's seeds, horizon, tolerance, root seed and
    routing. Prints one row (table) or record (JSON / CSV) per count.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed ``capacity`` command line with ``instance_counts`` set.

    Returns
    -------
    int
        0.

    Raises
    ------
    FastsimInputError
        A bad ``--instance-counts`` list, a flag the batched search does not take
        (:func:`_refuse_with_counts`), a plan with speculative decoding from ``--from-plan``, a
        ``--from-plan`` plan verified under an engine policy (vllm, sglang) without an explicit
        ``--policy lecture`` (the counts' searches simulate the lecture policy, its one-plan search
        that engine), or anything the one-plan path refuses.
    """
    from ._resolve import _screen_infeasible
    from dataclasses import replace
    from ..search import EARLY_STOP_ALPHA, FIRST_SEEDS, max_sustainable_rates
    counts = _instance_counts(args.instance_counts)
    _refuse_with_counts(args)
    cat, model, demand, source, notes, base = _capacity_setup(args)
    if args.policy != "lecture":
        # --from-plan of a plan verified under an engine policy set it (without --policy): the counts'
        # searches would run the lecture scheduler, and the one-plan search runs that engine
        raise FastsimInputError("--from-plan", args.from_plan,
                                f"a plan verified under the lecture policy with --instance-counts (this one was "
                                f"verified under the {args.policy} policy, which its one-plan search, "
                                f"--instances N without --instance-counts, runs; the searches of --instance-counts "
                                f"simulate the lecture policy only): give --policy lecture to search the counts "
                                f"under the lecture scheduler, or search one count at a time")
    # an explicit --policy lecture over a record verified under another policy: said in the notes
    plan_notes = list(getattr(args, "_plan_notes", []))
    notes = list(notes) + plan_notes
    if base.spec_gamma:
        raise FastsimInputError("--from-plan", args.from_plan, "a plan without speculative decoding with "
                                "--instance-counts (its searches simulate the lecture policy)")
    disagg = base.mode == "disaggregated"
    # a disaggregated plan's ``instances`` repeats its decode side (fastsim.analytic.Plan)
    plans = [replace(base, decode_instances=n, instances=n) if disagg else replace(base, instances=n)
             for n in counts]
    # the horizon's floor depends on the instance type, not on the count
    _capacity_horizon_check(args, base, source.prompt.mean, source.output.mean, demand, cat, model)
    label, key = ("decode instances", "decode_instances") if disagg else ("instances", "instances")
    table = args.format == "table"
    # a count scales the plan's capacity: the screen gives every count capacity 0 or none
    screen_why = (_screen_infeasible(plans[0], model, demand, cat, _constants(args))
                  if not plans[0].capacity_req_per_s > 0 else "")
    if table:
        P = _pct(demand.slo_percentile)
        print(f"{_plan_without_count(base)} on {model.name}; {label} {_counts_text(counts)}; {P} TTFT <= "
              f"{demand.ttft_s:g} s, {P} TPOT <= {demand.tpot_s * 1e3:g} ms; {args.seeds} "
              f"seed{'s' if args.seeds > 1 else ''} x {args.horizon:g} s per probe", flush=True)
    live = _RoundProgress(len(plans))
    try:
        results = max_sustainable_rates(plans, source, _slo(demand), seeds=args.seeds,
                                        horizon_s=args.horizon, rel_tol=args.tol, seeds_root=args.seed, catalog=cat,
                                        constants=_constants(args), models=model, routing=args.routing,
                                        on_round=live)
    finally:
        live.close()
    # notes about every count (owner None) and about one count (its index): the JSON and the table
    # print them all once; a CSV row carries those about every count and its own
    # a search's own note that every count's search has (the horizon's) is said once, about every count
    shared = [t for t in results[0].notes if all(t in r.notes for r in results)]
    records, rows, tagged = [], [], [(None, t) for t in list(notes) + shared]
    for i, (n, plan, res) in enumerate(zip(counts, plans, results)):
        seed_runs = res.seed_runs       # the runs simulated: the probes' seeds, and stopped runs run again
        rec = {key: n}
        if disagg:
            rec["prefill_instances"] = plan.prefill_instances
        rec.update(gpus=plan.gpus, plan=plan.describe(), **res.to_dict())
        del rec["notes"]        # the output's notes hold them, tagged with the count
        rec["seed_runs"] = seed_runs
        rec["stopped_runs"] = res.stopped_runs
        records.append(_add_screen_verdict(rec, screen_why))
        lo, hi = res.bracket
        c0, c1 = res.ci95
        rows.append([n, plan.gpus, _fmt(res.analytic_req_per_s, ".3f"),
                     "unstable" if res.unstable else _fmt(res.rate_req_per_s, ".3f"),
                     f"{_fmt(lo, '.3f')} - {_fmt(hi, '.3f')}",
                     f"below {min(p[0] for p in res.probes):.3f} - {c1:.3f}" if res.ci_censored else
                     f"{c0:.3f} - {c1:.3f}" if math.isfinite(c0) and math.isfinite(c1) and not res.unstable
                     else _fmt(math.nan, ""),
                     _fmt(res.simulated_ratio, ".2f"), len(res.probes), seed_runs])
        if res.undetermined:
            tagged.append((i, f"{label} {n}: undetermined: no probe measured a request"))
        elif res.unstable:
            tagged.append((i, f"{label} {n}: unstable: no stable answer at --horizon {res.horizon_s:g} s and --seeds "
                              f"{res.seeds}: {res.unstable_detail}; a longer --horizon (or more --seeds) steadies it"))
        elif not res.probes or not any(p[3] for p in res.probes):
            tagged.append((i, f"{label} {n}: every probe failed: the capacity is below {hi:.3f} req/s"))
        elif lo == 0:
            tagged.append((i, f"{label} {n}: no probe passed below the smallest failing one: the capacity is below "
                              f"{hi:.3f} req/s"))
        tagged += [(i, f"{label} {n}: {t}") for t in list(res.notes) + _capacity_notes(res) if t not in shared]
    notes = [t for _, t in tagged]
    if screen_why:
        notes.append(f"the analytic screen finds this plan infeasible at every count ({screen_why}), so there is "
                     "no ratio")
    shown = {"bracket_req_per_s": "bracket", "ci95_req_per_s": "95% CI", "simulated_ratio": "sim / analytic"}
    legend_at = len(notes)
    notes += _legend("count", [(n, r["null_reasons"]) for n, r in zip(counts, records)], shown)
    legend_end = len(notes)
    seeds_word = f"{args.seeds} seed{'s' if args.seeds > 1 else ''}"
    test = (f"a probe ran its {args.seeds} seeds {FIRST_SEEDS} at a time and stopped when its misses surely "
            f"failed it or a sequential test was sure of the verdict all {args.seeds} would give (one-sided level "
            f"{EARLY_STOP_ALPHA:g} per criterion), a run stopping once enough of its requests surely missed the SLO "
            "to fail its probe (seed-runs: the runs simulated)" if args.seeds > FIRST_SEEDS else
            f"every probe ran {'all ' if args.seeds > 1 else ''}{seeds_word} (the sequential test looks first at "
            f"{FIRST_SEEDS} seeds, so it needs more --seeds)")
    together = (f"the {len(counts)} counts were searched together: the smallest from its analytic capacity, each "
                "larger one about its analytic capacity times the simulated / analytic ratio of the smaller counts "
                "(the trend of the last two), its first two probes --tol apart about it" if len(counts) > 1
                else "the count was searched from its analytic capacity")
    notes.append(f"{together}, galloping then interpolating to --tol {args.tol:g}; {test}; where no probe contradicts "
                 f"its bracket, each answer equals the one-plan search's (--{key.replace('_', '-')} N without "
                 f"--instance-counts{', with --policy lecture' if plan_notes else ''}) to within --tol")
    headers = [label, "GPUs", "analytic req/s", "simulated req/s", "bracket req/s", "95% CI req/s",
               "sim / analytic", "probes", "seed-runs"]
    # a CSV row: the notes about every count, its own, and the legend of its own cells
    notes += _constants_notes(args)
    row_notes = [[t for o, t in tagged if o is None or o == i] + notes[len(tagged):legend_at]
                 + _legend("count", [(n, r["null_reasons"])], shown) + notes[legend_end:]
                 for i, (n, r) in enumerate(zip(counts, records))]
    _emit(args, records, rows, headers, notes, key="capacities", row_notes=row_notes)
    _notes_out(args, notes)
    return 0


# ---------------------------------------------------------------------------- --trace: the time-scale search

_SCALE_HEAD = ("probe    round    scale       rate req/s    horizon s    requests    excluded    measured    "
               "attainment  overloaded    SLO\n"
               "-------  -------  ----------  ------------  -----------  ----------  ----------  ----------  "
               "----------  ------------  -----")


def _scale_row(n, p) -> str:
    """One probe of the trace search as a table row (printed as its round finishes)."""
    return (f"{n:<7d}  {p.round:<7d}  {p.scale:<10.4g}  {p.rate_req_per_s:<12.3f}  {p.horizon_s:<11,.1f}  "
            f"{p.requests:<10,d}  {p.excluded_requests:<10,d}  {p.measured:<10,d}  {p.attainment:<10.3f}  "
            f"{'yes' if p.overloaded else 'no':<12}  {'pass' if p.passed else 'FAIL'}")


def _scale_summary(res, screen_why: str = "") -> str:
    """The line under the trace search's probes: scale, equivalent rate, native rate, analytic ratio."""
    lo, hi = res.bracket
    rlo, rhi = res.bracket_req_per_s
    if not any(p.passed for p in res.probes) or res.scale <= 0:
        est = (f"max sustainable scale: below {hi:.4g} ({rhi:.3f} req/s; every probe failed)")
    elif not math.isfinite(hi):
        est = f"max sustainable scale: at least {lo:.4g} ({rlo:.3f} req/s; no probe failed)"
    else:
        est = (f"max sustainable scale: {res.scale:.4g} = {res.rate_req_per_s:.3f} req/s (interpolated between the "
               f"largest passing probe, {lo:.4g} = {rlo:.3f} req/s, and the smallest failing one, {hi:.4g} = "
               f"{rhi:.3f} req/s)")
    est += f"; the trace's own rate {res.native_rate_req_per_s:.3f} req/s (scale 1)"
    if res.scale > 0:
        est += (f"; horizon at the estimate {res.horizon_s:,.1f} s"
                + (f", {res.excluded_requests:,} requests after it excluded" if res.excluded_requests else ""))
    if screen_why:
        return f"{est}; the analytic screen finds this plan infeasible ({screen_why}), so there is no ratio"
    return (f"{est}; analytic {res.analytic_req_per_s:.3f} req/s (scale {res.analytic_scale:.4g}), "
            f"analytic / simulated = {_fmt(res.analytic_ratio, '.2f')} "
            f"(simulated / analytic = {_fmt(res.simulated_ratio, '.2f')})")


def _cmd_capacity_trace(args):
    """``capacity --trace``: bisection on the trace's time scale (:func:`fastsim.search.max_sustainable_scale`)."""
    from ._resolve import _plan_from_args, _resolve_workload, _screen_infeasible
    from ..search import MAX_REPLAY_SPAN_S, check_rate_hint, max_sustainable_scale
    cat = _command_catalog(args)
    hint_rate = args.rate
    if hint_rate is not None:       # an equivalent rate (fastsim.search.MAX_RATE_REQ_PER_S)
        check_rate_hint("--rate", hint_rate)
    # 0.0, not None: _resolve_workload then replays the trace at its own rate, and --from-plan does not
    # put the plan's rate there; --rate here only centres the first round of the search
    args.rate = 0.0
    try:
        model, demand, source, notes = _resolve_workload(args, cat)
    finally:
        args.rate = hint_rate
    plan, model = _plan_from_args(args, cat, model, demand)
    plan, engine = _capacity_engine(args, plan, model, cat, notes, demand,
                                    prefixes=getattr(source, "prefix", None) is not None)
    if not args.tol < 1:
        raise FastsimInputError("--tol", args.tol, "a fraction in (0, 1)")
    floor = _capacity_horizon_check(args, plan, float(source.prompt_tokens.mean()),
                                    float(source.output_tokens.mean()), demand, cat, model)
    scale_hint = None
    if hint_rate:
        if hint_rate > source.n / floor.min_horizon_s:
            raise FastsimInputError("--rate", hint_rate, f"at most {source.n / floor.min_horizon_s:.6g} req/s for "
                                    f"{source.name}: its {source.n:,} requests replayed faster span less than "
                                    f"{floor.min_horizon_s:.3g} s, too short for a mean request ({floor.lone_s:.3g} s "
                                    "alone) to finish in the measure window (fastsim.search.horizon_floor)")
        scale_hint = hint_rate / source.mean_rate_req_per_s
        if scale_hint < source.duration_s / MAX_REPLAY_SPAN_S:
            raise FastsimInputError("--rate", hint_rate, f">= {source.n / MAX_REPLAY_SPAN_S:.3g} req/s (a replay of "
                                    f"{source.name} within {MAX_REPLAY_SPAN_S:g} s)")
    unused = [flag for flag, v in (("--seeds", args.seeds), ("--seed", args.seed)) if v is not None]
    notes = list(notes)
    if unused:
        notes.append("a trace replays its own arrivals once per probe: " + ", ".join(unused)
                     + (" do" if len(unused) > 1 else " does") + " not apply")
    table = args.format == "table"
    screen_why = _screen_infeasible(plan, model, demand, cat, _constants(args)) if not plan.capacity_req_per_s > 0 else ""
    if table:
        P = _pct(demand.slo_percentile)
        print(f"{plan.describe()} on {model.name}; {P} TTFT <= {demand.ttft_s:g} s, {P} TPOT <= "
              f"{demand.tpot_s * 1e3:g} ms; trace {source.name}: {source.n:,} requests over "
              f"{source.duration_s:,.1f} s ({source.mean_rate_req_per_s:.3f} req/s), each probe one replay at "
              "time scale s (arrival times / s)"
              + (f", cut at --horizon {args.horizon:g} s" if args.horizon is not None else "")
              + "; 4 scales per round in parallel", flush=True)
        print(_SCALE_HEAD, flush=True)
    count = [0]

    def shown(p):
        count[0] += 1
        if table:
            print(_scale_row(count[0], p), flush=True)
    res = max_sustainable_scale(plan, source, _slo(demand), horizon_s=args.horizon,
                                rel_tol=args.tol, scale_hint=scale_hint, catalog=cat, model=model,
                                routing=args.routing, on_probe=shown,
                                engine=engine, constants=_constants(args))
    notes = notes + list(res.notes)
    _capacity_output(args, res, plan, screen_why, notes, _scale_summary)
    if args.plot:
        from types import SimpleNamespace
        from ..plots import plot_capacity
        # the rate plot in equivalent rates: one replay per probe, no interval
        view = SimpleNamespace(probes=[(p.rate_req_per_s, p.attainment, p.overloaded, p.passed) for p in res.probes],
                               rate_req_per_s=res.rate_req_per_s, ci95=(math.nan, math.nan),
                               analytic_req_per_s=res.analytic_req_per_s)
        plot_capacity(view, args.plot, title=f"{plan.describe()}; {source.name}")
    return 0
