"""The ``fastsim fleet`` command: its flags, output and ``--plot`` of :func:`fastsim.fleet.api.fleet`.

:mod:`fastsim.cli` hands the arguments after ``fleet`` to :func:`run_fleet`, which parses them
here, so that building the command line's parser does not import the fleet simulator (numba). This
module does not import the command line (see ``tests/test_import_structure.py``); the command
line passes its parser class and shared flags in.
"""
from __future__ import annotations

import argparse
import math
import sys

import numpy as np

from .._command_helpers import (_catalog, _check_plot, _constants, _constants_notes, _fmt, _int_at_least, _number,
                                _positive, _read_plan_json, _record_model, _slo_percentile, _tp)
from ..errors import FastsimInputError
from . import strategies as S

__all__ = ["run_fleet", "add_fleet_args", "cmd_fleet", "fleet_record", "FLEET_DESCRIPTION"]

FLEET_DESCRIPTION = """\
Fleets of one instance type over a day-and-week rate profile: static provisioning for the peak
(or a quantile of the windows), reactive autoscaling (a decision every control interval, cold
start = weights / load bandwidth + fixed start, downscale stabilisation), scheduled scaling from
the previous day, and the oracle (each window's own rate, ready at its start with no cold
start: the fewest GPU-hours of a fleet never short of what the windows' rates need; a strategy
that falls short, e.g. reactive behind a rise, can cost less at lower attainment). Every
strategy sizes at the same --target-utilisation (1 = exact capacity). Each is simulated on the same arrivals; the output gives GPU-hours (reserved /
on-demand), $ per million output tokens and per million SLO-met output tokens, SLO attainment
overall and per window, requests rejected (context / KV limit) and unserved (no instance), the
worst windows, and the spares N + k that keep the attainment target through one failure at the
peak. The capacity of N instances comes from
`fastsim capacity`'s bisection at a few N (or --capacity N=RATE). By default the profile is scaled
so that its peak is the scenario's rate, or the plan's with --from-plan (--rate to choose the peak,
--rate-scale to scale the profile's own rates)."""


def _nonneg(flag):
    return _number(flag, lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0")


def _unit(flag):
    return _number(flag, lambda v: 0 < v <= 1, "a fraction in (0, 1]")


def _reserved(text):
    if text in ("none", "auto"):
        return text
    try:
        v = int(text)
    except ValueError:
        v = -1
    if v < 0:
        raise argparse.ArgumentTypeError(f"got {text!r}; allowed: an integer >= 0, none or auto")
    return v


def _capacity_point(text):
    n, _, r = text.partition("=")
    try:
        ni, rv = int(n), float(r)
    except ValueError:
        ni, rv = 0, math.nan
    if ni < 1 or not (math.isfinite(rv) and rv > 0):
        raise argparse.ArgumentTypeError(f"got {text!r}; allowed: INSTANCES=REQ_PER_S, e.g. 4=58.2")
    return ni, rv


def run_fleet(argv, parser_class, add_common, add_calibration) -> int:
    """Parse the arguments of ``fastsim fleet`` and run it.

    Parameters
    ----------
    argv : list of str
        The arguments after ``fleet``.
    parser_class : type
        The command line's ``argparse.ArgumentParser`` subclass (one-line errors, exit 2).
    add_common, add_calibration : callable(parser)
        The command line's ``--format`` / ``--catalog`` / ``--price`` and ``--calibration`` flags.

    Returns
    -------
    int
        Exit status (0).

    Raises
    ------
    SystemExit
        From argparse: 2 on a malformed command line, 0 after ``--help``.
    FastsimInputError
        Bad input, naming the flag.
    """
    sp = parser_class(prog="fastsim fleet", description=FLEET_DESCRIPTION)
    add_fleet_args(sp, add_common, add_calibration)
    return cmd_fleet(sp.parse_args(list(argv)))


def add_fleet_args(sp, add_common, add_calibration):
    """Add the flags of ``fastsim fleet`` to a parser.

    Parameters
    ----------
    sp : argparse.ArgumentParser
    add_common, add_calibration : callable(parser)
        As for :func:`run_fleet`.

    Returns
    -------
    argparse.ArgumentParser
        ``sp``.
    """
    w = sp.add_argument_group("workload")
    w.add_argument("--profile", metavar="NAME|FILE.csv", required=True,
                   help="rate profile: m-large, m-mid, m-small, deepseek-r1 or a CSV window_start_s,rate_req_per_s")
    w.add_argument("--scenario", help="request lengths and SLOs (default chat)")
    w.add_argument("--model", help="catalog model name or config.json (default: the scenario's)")
    w.add_argument("--rate", type=_positive("--rate"), metavar="R",
                   help="the profile is scaled so that its peak is R req/s (default: the scenario's rate)")
    w.add_argument("--rate-scale", type=_positive("--rate-scale"), metavar="F",
                   help="instead of --rate: multiply the profile's own rates by F (1 = as shipped)")
    w.add_argument("--ttft", type=_positive("--ttft"), help="P90 TTFT target in seconds")
    w.add_argument("--tpot", type=_positive("--tpot"), help="P90 TPOT target in seconds")
    w.add_argument("--attainment", type=_unit("--attainment"), default=None,
                   help="attainment target per window and overall (default 0.9, or P / 100 with --slo-percentile)")
    w.add_argument("--slo-percentile", type=_slo_percentile, default=None, metavar="P",
                   help="judge TTFT and TPOT at this percentile, 50 to 99.9 (default 90): the attainment target is "
                        "P / 100 and the instance is sized with the P-th percentile lengths")
    w.add_argument("--days", type=_positive("--days"), help="simulate the profile's first D days only")
    w.add_argument("--horizon", type=_positive("--horizon"), help="simulate the profile's first S seconds only")
    w.add_argument("--seed", type=int, default=0, help="seed of the arrivals, the failures and the capacity runs")
    w.add_argument("--routing", choices=("least-loaded", "round-robin"), default="least-loaded")
    add_common(sp)
    p = sp.add_argument_group("instance type (or --from-plan)")
    p.add_argument("--from-plan", metavar="FILE.json", help="a plan from `fastsim plan --format json` ('-' for stdin)")
    p.add_argument("--plan-index", type=_int_at_least(0), default=0, help="which plan of the JSON list (default 0)")
    p.add_argument("--gpu", help="GPU name")
    p.add_argument("--precision", help="BF16, FP8, ...")
    p.add_argument("--tp", type=_tp, help="GPUs per instance (default 1)")
    p.add_argument("--chunk", type=_int_at_least(1), help="chunked-prefill tokens per step (default: the screen's)")
    p.add_argument("--layout", choices=("tp", "tp+ep", "dp+ep"), help="default tp")
    g = sp.add_argument_group("strategies")
    g.add_argument("--target-utilisation", type=_unit("--target-utilisation"), default=S.TARGET_UTILISATION,
                   metavar="U", help="every strategy: rate / capacity it sizes for, the same headroom for all "
                   f"(default {S.TARGET_UTILISATION:g}; 1 = exact capacity)")
    g.add_argument("--scale-down-delay", type=_nonneg("--scale-down-delay"), default=S.SCALE_DOWN_DELAY_S,
                   metavar="S", help="reactive: scale down only to the highest count wanted in the last S seconds "
                   f"(default {S.SCALE_DOWN_DELAY_S:g}: three 600-s decisions; Kubernetes' HPA uses 300 s but "
                   "decides every 15 s)")
    g.add_argument("--control-interval", type=_positive("--control-interval"), metavar="S",
                   help=f"reactive: seconds between decisions (default {S.CONTROL_INTERVAL_S:g}, or the profile's "
                   "smallest window when shorter)")
    g.add_argument("--static-quantile", type=_unit("--static-quantile"), default=1.0, metavar="Q",
                   help="static: size for this quantile of the window rates (default 1, the peak)")
    g.add_argument("--min-instances", type=_int_at_least(0), default=1, metavar="N",
                   help="floor of every strategy's count (default 1)")
    g.add_argument("--load-bandwidth", type=_positive("--load-bandwidth"), default=S.LOAD_BW_BYTES_PER_S,
                   metavar="B/S", help=f"cold start: weight load bandwidth in bytes/s (default {S.LOAD_BW_BYTES_PER_S:g})")
    g.add_argument("--start-time", type=_nonneg("--start-time"), default=S.FIXED_START_S, metavar="S",
                   help=f"cold start: fixed engine start on top of the load, s (default {S.FIXED_START_S:g})")
    g.add_argument("--cold-start", type=_nonneg("--cold-start"), metavar="S",
                   help="the cold start itself in seconds, instead of --load-bandwidth and --start-time")
    c = sp.add_argument_group("prices")
    c.add_argument("--reserved", type=_reserved, default="none", metavar="N|auto|none",
                   help="instances reserved for the whole period (auto: the cheapest reservation per strategy)")
    c.add_argument("--reserved-price", type=_positive("--reserved-price"), metavar="USD",
                   help="reserved price per GPU-hour (default: the on-demand price, the GPU's catalog price)")
    f = sp.add_argument_group("failures")
    f.add_argument("--mtbf", type=_positive("--mtbf"), metavar="S",
                   help="instance failures as a Poisson process with this mean time between failures (s)")
    f.add_argument("--repair", type=_nonneg("--repair"), default=0.0, metavar="S",
                   help="from a failure to its replacement's provisioning, s (default 0; then its cold start). "
                   "static: provisioned then; reactive, scheduled, oracle: at the autoscaler's next decision from then")
    f.add_argument("--fail-at", type=_nonneg("--fail-at"), action="append", default=[], metavar="T",
                   help="an instance fails at T seconds (repeatable)")
    f.add_argument("--no-spares", action="store_true", help="skip the N + k search through one failure at peak")
    m = sp.add_argument_group("capacity and run")
    m.add_argument("--capacity", type=_capacity_point, action="append", default=[], metavar="N=REQ_PER_S",
                   help="capacity of N instances (repeatable), instead of measuring it")
    m.add_argument("--capacity-seeds", type=_int_at_least(1), default=2, help="seeds per capacity probe (default 2)")
    m.add_argument("--capacity-points", type=_int_at_least(1), default=5,
                   help="instance counts whose capacity is measured (default 5)")
    m.add_argument("--workers", type=_int_at_least(1), help="processes for the strategies (default: by size)")
    m.add_argument("--worst", type=_int_at_least(0), default=5, help="worst windows listed per strategy (default 5)")
    m.add_argument("--plot", metavar="FILE.png", help="rate, instances and attainment over time")
    add_calibration(sp)
    return sp


def _read_plan(args, cat):
    """(gpu, precision, tp, chunk, layout, model name or None, the plan object) of --from-plan."""
    d = _read_plan_json(args, empty="a non-empty list of plans")
    if d.get("mode", "colocated") != "colocated":
        raise FastsimInputError("--from-plan", args.from_plan, "a colocated plan (the fleet simulator serves "
                                "colocated instances)")
    try:
        return (d["gpu"], d["precision"], int(d["tp"]), d.get("chunk_tokens"), d.get("layout", "tp"), d.get("model"),
                d)
    except (KeyError, TypeError, ValueError) as exc:
        raise FastsimInputError("--from-plan", args.from_plan, f"plan objects with key {exc}") from None


def _inputs(args):
    """(plan, scenario, model, slo, profile, rate_scale, horizon, notes) from the command line."""
    from dataclasses import replace
    from ..analytic import Demand, ScreenOptions, plan_for
    from ..search import SLO
    from ..workload import read_rate_profile
    cat = _catalog(args)
    notes = []
    scen = cat.scenario(args.scenario or "chat")
    pd = None           # the --from-plan object
    ttft, tpot, plan_rate, plan_price = args.ttft, args.tpot, None, None
    if args.from_plan:
        gpu, prec, tp, chunk, layout, pmodel, pd = _read_plan(args, cat)
        for flag, v, what in (("--gpu", args.gpu, "GPU"), ("--precision", args.precision, "precision"),
                              ("--tp", args.tp, "TP"), ("--layout", args.layout, "layout")):
            if v is not None:
                raise FastsimInputError(flag, v, f"no value with --from-plan (the plan names its {what})")
        # the record's model: its model_path (a config.json model) or catalog name, --model the same one
        model = _record_model(args, cat, pd) if pmodel else cat.model(args.model or scen.model)
        # what the fleet simulator cannot take from a record is refused, never dropped
        # (fastsim.planner.plan_from_record reads the same record rule for the other commands)
        if "layout" not in pd and model.is_moe and tp > 1:
            raise FastsimInputError("--from-plan", args.from_plan, "a plan record with its layout: an MoE plan at TP > 1 "
                                    "differs by layout (tp, tp+ep, dp+ep), and this record, written before plans "
                                    "recorded it, does not say which; write it again with fastsim plan --format json")
        for key, what in (("max_batch", "a batch cap"), ("spec_gamma", "speculative decoding"),
                          ("prefix_hit_fraction", "prefix-cache hits")):
            v = pd.get(key)
            if v not in (None, 0, 0.0):
                raise FastsimInputError("--from-plan", args.from_plan, f"a plan without {what} (plan key {key} = {v!r}): "
                                        "the fleet simulator runs the lecture scheduler without it, so its answers "
                                        "would be another plan's")
        if pd.get("pp") not in (None, 1):
            raise FastsimInputError("--from-plan", args.from_plan, f"a plan without pipeline parallelism (plan key "
                                    f"pp = {pd.get('pp')!r}): the fleet simulator serves instances of one stage")
        if args.chunk and chunk and args.chunk != chunk:
            notes.append(f"--chunk {args.chunk} replaces the plan's {chunk}-token chunks")
        chunk = args.chunk or chunk

        def num(key):
            v = pd.get(key)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None
        p_ttft, p_tpot, plan_rate, plan_price = (num("ttft_slo_s"), num("tpot_slo_s"), num("rate_req_per_s"),
                                                 num("price_usd_per_gpu_hour"))
        for flag, given, planned in (("--ttft", args.ttft, p_ttft), ("--tpot", args.tpot, p_tpot)):
            if given is not None and planned is not None and not math.isclose(given, planned):
                notes.append(f"{flag} {given:g} s replaces the plan's P90 target of {planned:g} s")
        ttft = args.ttft if args.ttft is not None else p_ttft
        tpot = args.tpot if args.tpot is not None else p_tpot
        if scen.model != model.name:
            notes.append(f"the plan is for {model.name}; scenario {scen.name} is for {scen.model}: {scen.name}'s "
                         f"request lengths are used with {model.name} (was the plan made for another scenario?)")
        differ = [f"{what} {a:g} (scenario {scen.name}'s {b:g})" for what, a, b in (
            ("P90 TTFT s", ttft, scen.ttft_s), ("P90 TPOT s", tpot, scen.tpot_s),
            ("rate req/s", plan_rate, scen.rate_req_per_s)) if a is not None and not math.isclose(a, b)]
        if differ:
            notes.append("the plan's " + ", ".join(differ) + f" apply, with {scen.name}'s request lengths; was the "
                         "plan made for another scenario?")
        ver = pd.get("verification") if isinstance(pd.get("verification"), dict) else {}
        policy = ver.get("policy")
        if policy not in (None, "lecture"):
            notes.append(f"the plan was verified under the {policy} policy; the fleet simulator runs the lecture "
                         "scheduler (FCFS, full P + O KV reservation), so its capacity and attainment here are the "
                         f"lecture scheduler's, not {policy}'s")
    else:
        missing = [f for f, v in (("--gpu", args.gpu), ("--precision", args.precision)) if not v]
        if missing:
            raise FastsimInputError(" and ".join(missing), None, "a catalog name (or --from-plan FILE.json)")
        gpu, prec, chunk = args.gpu, args.precision, args.chunk
        tp, layout = args.tp or 1, args.layout or "tp"
        model = cat.model(args.model or scen.model)
    if model.name != scen.model and not args.from_plan:
        notes.append(f"--model {model.name}: scenario {scen.name}'s request lengths and SLOs (made for {scen.model}) "
                     f"apply" + ("" if args.rate or args.rate_scale is not None else
                                 f", and the profile's peak is the scenario's rate ({scen.rate_req_per_s:g} req/s); "
                                 "--rate sets the peak for this model"))
    scen = replace(scen, model=model.name) if model.name != scen.model else scen
    pct = args.slo_percentile
    if pct is None and pd is not None and pd.get("slo_percentile") is not None:
        # the plan was made for targets at another percentile: they apply here too
        from ..plans import check_slo_percentile
        pct = check_slo_percentile(pd["slo_percentile"], "--from-plan slo_percentile")
        notes.append(f"--from-plan: the plan's targets are judged at P{pct:g}, as here")
    if pct is not None and args.attainment is not None and not math.isclose(args.attainment, pct / 100.0):
        raise FastsimInputError("--attainment", args.attainment, f"no value with --slo-percentile {pct:g} (its "
                                f"attainment target is {pct / 100.0:g}), or {pct / 100.0:g}")
    attainment = args.attainment if args.attainment is not None else 0.9 if pct is None else pct / 100.0
    slo = SLO(ttft or scen.ttft_s, tpot or scen.tpot_s, attainment)
    demand = Demand.from_scenario(scen, ttft_s=slo.ttft_s, tpot_s=slo.tpot_s,
                                  latency_quantile=(90.0 if pct is None else pct) / 100.0,
                                  slo_percentile=90.0 if pct is None else pct)
    plan = plan_for(model, demand, gpu=gpu, precision=prec, tp=tp, instances=1, chunk_tokens=chunk, catalog=cat,
                    layout=layout, options=ScreenOptions(constants=_constants(args)))
    if plan_price is not None and not math.isclose(plan_price, plan.price_usd_per_gpu_hour):
        notes.append(f"the plan's price, ${plan_price:g} per GPU-hour, applies (the catalog's {plan.gpu} is "
                     f"${plan.price_usd_per_gpu_hour:g})")
        plan = replace(plan, price_usd_per_gpu_hour=plan_price)
    prof = read_rate_profile(args.profile)
    if args.rate_scale is not None and args.rate is not None:
        raise FastsimInputError("--rate-scale", args.rate_scale, "no value with --rate (one or the other scales "
                                "the profile)")
    if args.rate_scale is not None:
        scale = args.rate_scale
        if scale != 1.0:
            notes.append(f"profile {prof.name}: every rate x {scale:g} (--rate-scale)")
    else:
        peak = args.rate or plan_rate or scen.rate_req_per_s
        scale = peak / prof.peak_rate_req_per_s
        src = ("--rate" if args.rate else "the plan's rate, --from-plan" if plan_rate
               else f"scenario {scen.name}'s rate")
        notes.append(f"profile {prof.name} scaled by {scale:.4g} so that its peak is {peak:g} req/s ({src}"
                     + ("" if args.rate else "; --rate or --rate-scale to change it") + ")")
    if args.days is not None and args.horizon is not None:
        raise FastsimInputError("--days", args.days, "no value with --horizon (one or the other cuts the profile)")
    horizon = args.horizon if args.days is None else args.days * 86400.0
    if horizon is not None and horizon > prof.span_s:
        flag, v = ("--days", args.days) if args.days is not None else ("--horizon", args.horizon)
        raise FastsimInputError(flag, v, f"at most the profile's span, {prof.span_s:g} s "
                                f"({prof.span_s / 86400:g} days)")
    period = prof.span_s if horizon is None else horizon
    window = float(np.median(prof.window_s))
    if period < window:
        flag, v = ("--days", args.days) if args.days is not None else ("--horizon", args.horizon)
        raise FastsimInputError(flag, v, f"a period of at least one of the profile's {window:g}-s windows "
                                f"({window / 86400:.4g} days): a shorter one has no complete window to report")
    for t in args.fail_at:
        if t >= period:
            raise FastsimInputError("--fail-at", t, f"a time in [0, {period:g}) s, inside the period simulated")
    return cat, plan, scen, model, slo, prof, scale, horizon, notes


def fleet_record(result, worst: int = 5) -> dict:
    """The JSON object ``fastsim fleet`` prints, without ``notes``.

    Parameters
    ----------
    result : FleetResult
    worst : int
        Worst windows per strategy.

    Returns
    -------
    dict
        :meth:`FleetResult.to_dict` with ``null_reasons`` on the record (cold start, spares) and
        on each strategy (before :func:`fastsim._output.strict`).
    """
    from .._output import null_reasons
    rec = result.to_dict(worst)

    def explain(k, v):
        if k == "window_attainment":
            return "not applicable: windows without arrivals (gaps) have no attainment"
        if k == "usd_per_million_output_tokens":
            return "not applicable: no output tokens were served"
        if k == "usd_per_million_met_output_tokens":
            return "not applicable: no request met its SLOs (no SLO-met output tokens)"
        if k == "load_bw_bytes_per_s":
            return "not applicable: --cold-start gives the cold start itself"
        return None
    for s in rec["strategies"]:
        s["null_reasons"] = null_reasons(s, explain)
    rec["null_reasons"] = {k: v for k, v in null_reasons(rec["cold_start"], explain).items()}
    if rec["spares"] is None:
        rec["null_reasons"]["spares"] = "not applicable: --no-spares"
    elif rec["spares"]["instances"] is None:
        rec["null_reasons"]["spares.instances"] = "not applicable: no count up to 2N kept the target"
    if rec["settings"]["mtbf_s"] is None:
        rec["null_reasons"]["settings.mtbf_s"] = "not applicable: no random failures (no --mtbf)"
    return rec


def _table(rows, headers):
    from tabulate import tabulate
    return tabulate(rows, headers=headers, disable_numparse=True)


def cmd_fleet(args) -> int:
    """Run ``fastsim fleet`` on parsed arguments (see :data:`FLEET_DESCRIPTION`).

    Parameters
    ----------
    args : argparse.Namespace
        From the parser of :func:`add_fleet_args`.

    Returns
    -------
    int
        Exit status (0).

    Raises
    ------
    FastsimInputError
        Bad input, naming the flag.
    """
    from .._output import csv_frame, dumps
    from .api import fleet, plot_fleet
    _check_plot(args)
    cat, plan, scen, model, slo, prof, scale, horizon, notes = _inputs(args)
    capacity = None
    if args.capacity:
        ns = [n for n, _ in args.capacity]
        if len(set(ns)) != len(ns):
            raise FastsimInputError("--capacity", args.capacity, "one rate per instance count")
        try:
            capacity = S.CapacityCurve.from_points(ns, [r for _, r in args.capacity])
        except FastsimInputError as exc:
            raise FastsimInputError("--capacity", exc.value, exc.allowed) from None
    if args.cold_start is not None and (args.load_bandwidth != S.LOAD_BW_BYTES_PER_S
                                        or args.start_time != S.FIXED_START_S):
        raise FastsimInputError("--cold-start", args.cold_start, "no value with --load-bandwidth or --start-time")
    try:
        res = fleet(plan, scen, prof, slo, rate_scale=scale, horizon_s=horizon, catalog=cat,
                    constants=_constants(args), model=model, capacity=capacity, capacity_seeds=args.capacity_seeds,
                    capacity_points=args.capacity_points, load_bw_bytes_per_s=args.load_bandwidth,
                    fixed_start_s=args.start_time, cold_start_s=args.cold_start,
                    target_utilisation=args.target_utilisation, scale_down_delay_s=args.scale_down_delay,
                    control_interval_s=args.control_interval, static_quantile=args.static_quantile,
                    min_instances=args.min_instances, reserved_instances=args.reserved,
                    reserved_usd_per_gpu_hour=args.reserved_price, mtbf_s=args.mtbf, repair_s=args.repair,
                    fail_times_s=tuple(args.fail_at), spares=not args.no_spares, seed=args.seed,
                    routing=args.routing, workers=args.workers)
    except FastsimInputError as exc:
        if exc.field not in ("profile", "peak_req_per_s"):
            raise
        how = ("--rate-scale" if args.rate_scale is not None else "--rate" if args.rate
               else "the default peak (--rate, --rate-scale)")
        raise FastsimInputError(f"--profile {args.profile} scaled by {scale:.4g} ({how})", exc.value,
                                exc.allowed) from None
    notes = notes + _notes(res, capacity is None)
    rec = fleet_record(res, args.worst)
    sp = res.spares
    if sp is not None and args.format == "csv":      # the CSV rows are the strategies: the spares go in a note
        notes.append(f"one failure at the peak ({sp.rate_req_per_s:,.4g} req/s): "
                     + (f"N + k = {sp.base_instances} + {sp.spares} instances keep every 60-s window >= {sp.target:g}"
                        if sp.spares >= 0 else f"no N + k up to 2 x {sp.base_instances} keeps every window >= "
                        f"{sp.target:g}"))
    if args.plot:
        plot_fleet(res, args.plot, title=f"{prof.name} x {scale:.4g}, {scen.name} on {_fleet_span(res, plan)}")
        notes.append(f"plot written to {args.plot}")
    notes += _constants_notes(args)
    if args.format == "json":
        sys.stdout.write(dumps(dict(rec, notes=notes)) + "\n")
    elif args.format == "csv":
        csv_frame(rec["strategies"], notes).to_csv(sys.stdout, index=False)
    else:
        print(_render(res, rec, args.worst))
        for n in notes:
            print("note: " + n)
    if args.format != "table":
        for n in notes:
            print("note: " + n, file=sys.stderr)
    return 0


def _fleet_span(res, plan) -> str:
    """The plot title's fleet: the instance range the strategies run (ready instances per window, the
    fewest to the most), e.g. ``B200 FP8 TP1, 1 to 2 instances (1 to 2 GPUs)``; not the one plan's count."""
    counts = np.concatenate([np.asarray(s.window_instances, np.float64) for s in res.strategies])
    counts = counts[np.isfinite(counts)]
    gpi = int(plan.gpus_per_instance)
    head = f"{plan.gpu} {plan.precision} {plan.label(plan.tp)}"
    if not counts.size:
        return head
    lo, hi = int(np.floor(counts.min() + 1e-9)), int(np.ceil(counts.max() - 1e-9))
    if lo == hi:
        return f"{head}, {_plural(lo, 'instance')} ({_plural(lo * gpi, 'GPU')})"
    return f"{head}, {lo} to {hi} instances ({lo * gpi} to {hi * gpi} GPUs)"


def _notes(res, measured: bool) -> list:
    cap = res.capacity
    cs = res.cold_start
    p = res.profile
    out = [p.describe(),
           f"period {res.horizon_s / 3600:,.4g} h in {res.window_s:g}-s windows"
           + ("" if math.isclose(res.horizon_s, p.span_s) else f" (the profile's first {res.horizon_s:g} s)"),
           "capacity of N instances (req/s): " + ", ".join(f"{n}: {r:,.4g}" for n, r in zip(cap.instances, cap.rate_req_per_s))
           + (f" (max sustainable rate, {res.settings['capacity_seeds']} seeds x "
              f"{res.settings['capacity_horizon_s']:g} s; interpolated per instance in log2 N)" if measured
              else " (--capacity)"),
           (f"cold start {cs.total_s:,.1f} s = {cs.weight_bytes / 1e9:,.1f} GB of weights"
            + (f" ({cs.checkpoint})" if cs.checkpoint else "") + " at "
            f"{cs.load_bw_bytes_per_s / 1e9:g} GB/s ({cs.load_s:,.1f} s) + {cs.fixed_start_s:g} s start"
            if math.isfinite(cs.load_bw_bytes_per_s) else f"cold start {cs.total_s:g} s (--cold-start)"),
           f"every strategy sized at target utilisation {res.settings['target_utilisation']:g} (rate / capacity; "
           "--target-utilisation 1 = exact capacity); the oracle has each window's count ready at its start "
           "with no cold start: the fewest GPU-hours of a fleet never short of it, not a bound on a strategy "
           "that falls short (at lower attainment)",
           f"static: {_plural(res.settings['static_instances'], 'instance')} (quantile "
           f"{res.settings['static_quantile']:g} of the window rates / {res.settings['target_utilisation']:g}); "
           "scheduled uses that count on the first day (no previous day)",
           f"reactive decides every {res.settings['control_interval_s']:g} s"]
    st = res.settings
    out.append(f"prices: on-demand ${st['on_demand_usd_per_gpu_hour']:g}/GPU-h"
               + (f", reserved ${st['reserved_usd_per_gpu_hour']:g}/GPU-h, reservation {st['reserved']}"
                  if st["reserved"] != "none" else "") + f" ({res.plan.gpu})")
    for s in res.strategies:
        if s.failures:
            out.append(f"{s.name}: {len(s.failures)} failure(s) at "
                       + ", ".join(f"{f.time_s:,.0f} s" for f in s.failures[:8])
                       + (" ..." if len(s.failures) > 8 else ""))
    return out + list(res.notes)


def _plural(n, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _render(res, rec, worst: int) -> str:
    from .api import format_time
    tgt = res.settings["attainment_target"]
    rows = []
    for s in rec["strategies"]:
        rows.append([s["strategy"], f"{s['instances_min']}-{s['instances_max']}", _fmt(s["instances_mean"], ".2f"),
                     _fmt(s["gpu_hours"], ",.1f"), f"{s['reserved_instances']:,}", _fmt(s["reserved_gpu_hours"], ",.1f"),
                     _fmt(s["on_demand_gpu_hours"], ",.1f"), _fmt(s["usd"], ",.2f"),
                     _fmt(s["usd_per_million_output_tokens"], ".4f"),
                     _fmt(s["usd_per_million_met_output_tokens"], ".4f"), _fmt(s["attainment"], ".4f"),
                     f"{s['rejected_context']:,}", f"{s['rejected_no_instance']:,}",
                     f"{s['windows_below_target']:,}", _fmt(s["min_window_attainment"], ".3f")])
    out = [_table(rows, ["strategy", "instances", "mean ready", "GPU-h", "reserved", "reserved GPU-h*",
                         "on-demand GPU-h", "$", "$/M out tok", "$/M SLO-met tok", "attainment", "rejected (context)",
                         "unserved", f"windows < {tgt:g}", "worst window"]),
           "* reserved GPU-h: the reserved instances x the period, idle reserved hours included (reserved + "
           "on-demand can exceed GPU-h)"]
    if worst:
        wrows = []
        none = []
        for s in rec["strategies"]:
            if not s["worst_windows"]:
                none.append(s["strategy"])
            for w in s["worst_windows"]:
                wrows.append([s["strategy"], format_time(w["window_start_s"]), _fmt(w["rate_req_per_s"], ",.2f"),
                              _fmt(w["instances"], ".2f"), _fmt(w["attainment"], ".3f")])
        out += ["", f"worst windows (below {tgt:g})"]
        if wrows:
            out.append(_table(wrows, ["strategy", "window", "rate req/s", "mean ready", "attainment"]))
        if none:
            out.append(", ".join(none) + f": no window below {tgt:g}")
    sp = rec["spares"]
    if sp is not None:
        srows = [[t["instances"], _fmt(t["min_window_attainment"], ".3f"), _fmt(t["attainment"], ".3f"),
                  f"{t['recomputed']:,}"] for t in sp["trials"]]
        head = (f"one failure at the peak ({sp['rate_req_per_s']:,.4g} req/s), N = {sp['base_instances']}: "
                + (f"N + {sp['spares']} = {_plural(sp['instances'], 'instance')} keep every window >= {sp['target']:g}"
                   if sp["instances"] is not None else f"no N + k up to 2N keeps every window >= {sp['target']:g}"))
        tr = sp["trials"][0]
        out += ["", head, f"(failure at {tr['fail_at_s']:g} s, replacement ready at {tr['recovered_s']:,.1f} s, "
                "60-s windows to 600 s after it)",
                _table(srows, ["instances", "worst window after failure", "attainment after failure", "recomputed"])]
    return "\n".join(out)
