"""``fastsim simulate``: one plan at one rate, per seed and pooled (:func:`fastsim.sim.simulate`, SPEC §6-7).

The plan comes from the plan flags or ``--from-plan``, the workload from ``--scenario`` (synthetic
arrivals per seed, or a rate ``--profile``) or ``--trace`` (one replay); each instance's
utilisation is its routed traffic against its analytic capacity (SPEC §5) for the lengths
simulated.
"""
from __future__ import annotations

import math

from .._command_helpers import (_add_arrival_args, _add_calibration, _add_common, _add_plan_args, _add_spec_args,
                                _arrival_cv,
                                _add_workload, _check_plot, _command_catalog, _constants, _constants_notes, _emit,
                                _fmt, _legend,
                                _notes_out, _pct, _positive, _read_plan_json, _seeds)
from ..errors import FastsimInputError

#: ``fastsim simulate --help``: what its columns mean.
SIMULATE_DESCRIPTION = (
    "Simulate one plan at one rate. Measured requests: those arriving in the middle 60% of the arrival "
    "time span (from 20% to 80% of the horizon, or of a trace's duration). Per instance: busy fraction = "
    "share of the horizon in which the instance runs a step (it runs one whenever it holds any request, so "
    "1.00 at moderate load); utilisation = accepted requests routed to the instance per second / its "
    "analytic capacity (0.60 at 60% load; above 1, more than the screen says it can serve within the SLOs). "
    "inf: a percentile past the requests that never got that token; n/a: no such value. Means (TTFT, TPOT, "
    "ITL, E2E) are over the same requests, a request that never got the token counting as inf. The benchmarks "
    "people run drain instead (simulated until the last request finishes, every request measured): --requests N "
    "at a rate (vllm bench serve), --requests N --offline all at t = 0 (trtllm-bench, vllm bench throughput, "
    "MLPerf Offline), --trace with --drain; they print the clients' figures over the finished requests: TTFT, "
    "TPOT = (last token - first token) / (O - 1) per request (the first token excluded), ITL = the mean gap "
    "between consecutive tokens over all tokens after the first, E2E, and output tokens/s = output tokens / "
    "makespan (first arrival to last finish).")

_SIM_LABELS = {"ttft_p50_s": "TTFT P50", "ttft_p90_s": "TTFT P90", "ttft_p99_s": "TTFT P99",
               "tpot_p90_s": "TPOT P90", "attainment": "attainment", "utilisation": "utilisation",
               "ttft_mean_s": "TTFT mean", "tpot_mean_s": "TPOT mean", "itl_mean_s": "ITL mean",
               "e2e_mean_s": "E2E mean"}
#: The table's labels of a run that drains.
_DRAIN_LABELS = {"ttft_mean_s": "TTFT mean", "ttft_p50_s": "TTFT P50", "ttft_p90_s": "TTFT P90",
                 "ttft_p99_s": "TTFT P99", "tpot_mean_s": "TPOT mean", "tpot_p50_s": "TPOT P50",
                 "tpot_p90_s": "TPOT P90", "tpot_p99_s": "TPOT P99", "itl_mean_s": "ITL mean",
                 "e2e_mean_s": "E2E mean", "e2e_p90_s": "E2E P90", "makespan_s": "makespan",
                 "output_tokens_per_s": "output tokens/s", "attainment": "attainment"}


def add_parser(sub):
    """Add the ``simulate`` sub-command to ``sub`` (the sub-parsers of :func:`fastsim.cli.build_parser`)."""
    sp = sub.add_parser("simulate", help="simulate one plan at one rate", description=SIMULATE_DESCRIPTION)
    _add_workload(sp)
    _add_common(sp)
    _add_plan_args(sp)
    sp.add_argument("--seeds", type=_seeds, default=None,
                    help="replications (default 1; a trace replays once)")
    sp.add_argument("--horizon", type=_positive("--horizon"), default=None,
                    help="simulated seconds (default 600; a trace replays over its own duration)")
    sp.add_argument("--seed", type=int, default=0, help="root seed")
    _add_arrival_args(sp)
    sp.add_argument("--lengths", default="lognormal", metavar="lognormal|fixed|fixed:P,O|trace:NAME",
                    help="length distribution: the scenario's lognormals, their means fixed, P prompt and O output "
                         "tokens for every request (fixed:1024,128; O counts the first token), or (P, O) pairs "
                         "resampled from a trace (azure-conv, azure-code or a file)")
    g = sp.add_argument_group("benchmarks: runs that drain (simulated until the last request finishes)")
    g.add_argument("--requests", type=int, metavar="N",
                   help="a finite run of N requests (1 to 20,000,000 over all --seeds together: a drained run "
                        "holds about 640 bytes per request, 12 GiB at the bound; time grows with the steps, about "
                        "6 s per million chat requests on 8 H100 instances under --policy vllm), every one "
                        "measured: at --rate (or the "
                        "scenario's), Poisson or --arrival gamma, as vllm bench serve sends them; with --offline "
                        "all at t = 0. No --horizon: the run chooses its own")
    g.add_argument("--offline", action="store_true",
                   help="every request at t = 0 (trtllm-bench, vllm bench throughput, MLPerf Offline): with "
                        "--requests N, or a --trace's requests; no --rate, and --instances is required (a trace "
                        "whose timestamps are all equal runs so without the flag)")
    g.add_argument("--drain", action="store_true",
                   help="with --trace: replay it until every request has finished (default: stop at its last "
                        "arrival and measure the middle 60%%)")
    sp.add_argument("--plot", metavar="FILE.png", help="TTFT/TPOT CDFs and the queue over time")
    sp.add_argument("--profile", metavar="NAME|FILE.csv",
                    help="time-varying arrivals with the scenario's lengths: a rate profile (m-large, m-mid, m-small, "
                         "deepseek-r1, or a CSV window_start_s,rate_req_per_s); runs over its span unless --horizon "
                         "cuts it; zero-rate windows are gaps (no arrivals)")
    sp.add_argument("--rate-scale", type=_positive("--rate-scale"), default=None, metavar="F",
                    help="with --profile: multiply every rate by F (fit a profile to a fleet size)")
    _add_spec_args(sp)
    _add_calibration(sp)
    sp.set_defaults(func=run)


def run(args):
    """Run ``fastsim simulate``: one plan at one rate, a row per seed and the pooled verdict; the exit status."""
    from ._resolve import _engine_setup, _plan_from_args, _resolve_workload, _screen_infeasible, _synthetic_workloads
    import numpy as np
    from ..sim import measured_means, simulate
    from .. import workload as W
    _check_plot(args)
    _check_benchmark_flags(args)
    cat = _command_catalog(args)
    profile = _simulate_profile(args)
    model, demand, source, notes = _resolve_workload(args, cat)
    bench = _benchmark_kind(args)
    plan, model = _plan_from_args(args, cat, model, demand)
    if bench is not None:
        return _run_drained(args, cat, bench, plan, model, demand, source, notes)
    if profile is not None:
        wls, horizon, pnotes = _profile_workloads(args, source, profile, demand)
        notes = list(notes) + pnotes + [_arrival_note(args, None)]
    elif isinstance(source, W.Workload):
        if args.seeds is not None or args.horizon is not None:
            notes = list(notes) + ["a trace replays once over its own duration: --seeds and --horizon do not apply"]
        wls = [source]
        horizon = float(np.nextafter(source.duration_s, np.inf))
    else:
        args.seeds = 1 if args.seeds is None else args.seeds
        args.horizon = 600.0 if args.horizon is None else args.horizon
        wls = _synthetic_workloads(args, source, demand.rate_req_per_s)
        notes = list(notes) + getattr(args, "_lengths_notes", []) + [_arrival_note(args, demand.rate_req_per_s)]
        horizon = args.horizon
    plan, sp, ekw, enotes = _engine_setup(args, plan, model, cat, demand,
                                          prefixes=any(getattr(w, "prefix", None) is not None for w in wls))
    notes = list(notes) + enotes + _prefix_note(wls, ekw)
    priced, unotes = (plan, []) if isinstance(source, W.Workload) else \
        _priced_for_workloads(args, cat, model, plan, demand, wls)
    notes = list(notes) + unotes
    results = [simulate(sp, w.arrival_s, w.prompt_tokens, w.output_tokens, horizon_s=horizon,
                        ttft_slo_s=demand.ttft_s, tpot_slo_s=demand.tpot_s,
                        max_context_tokens=model.max_context_tokens,
                        prefix=getattr(w, "prefix", None) if "policy" in ekw else None, **ekw) for w in wls]
    engine = "policy" in ekw
    from .._output import null_reasons
    from ..search import SLO, _pooled, attainment_verdict
    slo = SLO(demand.ttft_s, demand.tpot_s, demand.slo_attainment)
    pct = demand.slo_percentile
    records = []
    util_why = None
    for i, r in enumerate(results):
        m = r.metrics
        # the verdict of one run: its attainment surely at the target (95% Wilson bound), not overloaded
        verdict, lo, hi = attainment_verdict(round(m.attainment * m.measured) if m.measured else 0, int(m.measured),
                                             slo.attainment)
        rec = {"seed_index": i, "plan": plan.describe(), "rate_req_per_s": demand.rate_req_per_s,
               "horizon_s": horizon, "requests": int(m.n_requests), "measured": int(m.measured),
               "attainment": m.attainment, "ttft_p50_s": m.ttft_p50_s, "ttft_p90_s": m.ttft_p90_s,
               "ttft_p99_s": m.ttft_p99_s, "tpot_p50_s": m.tpot_p50_s, "tpot_p90_s": m.tpot_p90_s,
               "tpot_p99_s": m.tpot_p99_s, "throughput_tokens_per_s": m.throughput_tokens_per_s,
               "rejected": int(m.rejected), "unfinished": int(m.unfinished), "overloaded": bool(m.overloaded),
               "busy_fraction": [float(x) for x in m.utilisation],
               "utilisation": (_utilisation(r, priced, horizon) if priced is not None
                               else [math.nan] * len(m.utilisation)), "mean_batch": [float(x) for x in m.mean_batch],
               "passed": bool(verdict == "pass" and not m.overloaded),
               "attainment_ci95_lo": lo, "attainment_ci95_hi": hi,
               "decided": bool(verdict != "undecided" or m.overloaded),
               "policy": m.policy, "preemptions": int(m.preemptions),
               "cached_prompt_tokens": int(m.cached_prompt_tokens),
               "cache_hit_fraction": m.cache_hit_fraction,
               "cache_hit_fraction_per_instance": (None if m.cache_hit_fraction_per_instance is None else
                                                   [float(x) for x in m.cache_hit_fraction_per_instance]),
               "spec_tokens_per_round": m.spec_tokens_per_round}
        rec.update(_means_record(measured_means(r, horizon)), drained=False)
        if pct != 90.0:       # TTFT and TPOT at the SLO's percentile, as the pooled verdict reads them
            one = _pooled([r], slo, (0.2, 0.8), horizon)
            rec.update(slo_percentile=pct, ttft_at_percentile_s=one.ttft_at_percentile_s,
                       tpot_at_percentile_s=one.tpot_at_percentile_s)
        if util_why is None and not all(math.isfinite(u) for u in rec["utilisation"]):
            util_why = (unotes[0].split(": ", 1)[1] if priced is None and unotes else
                        _screen_infeasible(priced, model, demand, cat, _constants(args)))
        rec["null_reasons"] = null_reasons(rec, _sim_reason(rec, util_why or ""))
        records.append(rec)
    rows = [[r["seed_index"], r["requests"], r["measured"], _fmt(r["attainment"], ".3f"),
             _fmt(r["ttft_p50_s"], ".3f"), _fmt(r["ttft_p90_s"], ".3f"), _fmt(r["ttft_p99_s"], ".3f"),
             _fmt(r["tpot_p90_s"] * 1e3, ".1f")] + _mean_cells(r) + [
             _fmt(r["throughput_tokens_per_s"], ",.0f"), r["rejected"], r["unfinished"],
             "yes" if r["overloaded"] else "no", " ".join(f"{u:.2f}" for u in r["busy_fraction"]),
             " ".join(_fmt(u, ".2f") for u in r["utilisation"]),
             _verdict_cell(r)] + ([r["preemptions"], _fmt(r["cache_hit_fraction"], ".3f"),
                                   _fmt(r["spec_tokens_per_round"], ".2f")] if engine else [])
            + _percentile_cells(r, pct) for r in records]
    if len(results) > 1:
        # the verdict over all seeds together, as `plan` and `capacity` judge a plan
        v = _pooled(results, slo, (0.2, 0.8), horizon, model.max_context_tokens)
        pooled = {"seed_index": "all", "plan": plan.describe(), "rate_req_per_s": demand.rate_req_per_s,
                  "horizon_s": horizon, "requests": sum(r["requests"] for r in records), "measured": v.measured,
                  "attainment": v.attainment, "ttft_p90_s": v.ttft_p90_s, "tpot_p90_s": v.tpot_p90_s,
                  "rejected": v.rejected, "unfinished": sum(r["unfinished"] for r in records),
                  "overloaded": v.overloaded, "passed": v.passed, "attainment_ci95_lo": v.attainment_ci95_lo,
                  "attainment_ci95_hi": v.attainment_ci95_hi, "decided": v.decided}
        if pct != 90.0:
            pooled.update(slo_percentile=pct, ttft_at_percentile_s=v.ttft_at_percentile_s,
                          tpot_at_percentile_s=v.tpot_at_percentile_s)
        pooled.update(_means_record(measured_means(_concatenated(results), horizon)))
        if engine:
            rounds = [m.spec_tokens_per_round for m in (r.metrics for r in results)]
            pooled.update(policy=v.policy, preemptions=v.preemptions, cache_hit_fraction=v.cache_hit_fraction,
                          spec_tokens_per_round=(float(np.nanmean(rounds)) if not all(map(math.isnan, rounds))
                                                 else math.nan))
        pooled["null_reasons"] = null_reasons(pooled, _sim_reason(pooled))
        records.append(pooled)
        rows.append(["all", pooled["requests"], v.measured, _fmt(v.attainment, ".3f"), "", _fmt(v.ttft_p90_s, ".3f"),
                     "", _fmt(v.tpot_p90_s * 1e3, ".1f")] + _mean_cells(pooled) + ["", v.rejected,
                     sum(r["unfinished"] for r in records[:-1]), "yes" if v.overloaded else "no", "", "",
                     _verdict_cell(pooled)] + ([v.preemptions, _fmt(v.cache_hit_fraction, ".3f"),
                                                _fmt(pooled["spec_tokens_per_round"], ".2f")] if engine else [])
                    + _percentile_cells(pooled, pct))
        notes = list(notes) + ["row 'all' pools the seeds: attainment over all measured requests, overload "
                               "judged on the mean backlog slope (as plan and capacity judge a plan)"]
    headers = ["seed", "requests", "measured", "attainment", "TTFT P50 s", "TTFT P90 s", "TTFT P99 s",
               "TPOT P90 ms", "TTFT mean s", "TPOT mean ms", "ITL mean ms", "E2E mean s", "tokens/s", "rejected", "unfinished", "overloaded", "busy fraction", "utilisation",
               "SLO"] + (["preemptions", "cache hit", "tokens/round"] if engine else []) + (
                   [f"TTFT {_pct(pct)} s"] if pct not in (50.0, 90.0, 99.0) else []) + (
                   [f"TPOT {_pct(pct)} ms"] if pct != 90.0 else [])
    if any(not r["passed"] and not r["decided"] for r in records):
        notes = list(notes) + [
            f"SLO unsure: the attainment's 95% Wilson interval holds the target {slo.attainment:g} (a verdict on "
            "these runs would be a coin toss); more seeds decide it (--seeds; fastsim plan adds them itself, "
            "fastsim.search.confidence)"]
    if engine:
        notes = list(notes) + [
            "preemptions: requests preempted (vllm) or retracted (sglang) and recomputed later; cache hit: prompt "
            "tokens served from the prefix cache at the requests' first admission / prompt tokens admitted (n/a: "
            "no prefix cache; 0 when no two requests share a prefix block); tokens/round: output tokens a "
            "request gains per verify step (n/a: no speculative decoding)"]
    rej = sum(r["rejected"] for r in records if r["seed_index"] != "all")
    if rej and not isinstance(source, W.Workload):
        notes = list(notes) + [f"{rej:,} requests rejected: prompt + output above {model.name}'s context of "
                               f"{model.max_context_tokens:,} tokens, or their KV above an instance's whole KV cache"]
    if args.format == "table":
        rate_text = (f"profile {profile.name} (mean {profile.mean_rate_req_per_s:,.4g} req/s)" if profile is not None
                     else f"{demand.rate_req_per_s:g} req/s" + ("" if isinstance(source, W.Workload)
                                                                 else f", {_arrival_words(args)}"))
        print(f"{plan.describe()} on {model.name}: {rate_text}, {horizon:g} s; "
              f"{_pct(pct)} TTFT <= {demand.ttft_s:g} s, {_pct(pct)} TPOT <= {demand.tpot_s * 1e3:g} ms")
    labels = dict(_SIM_LABELS, ttft_at_percentile_s=f"TTFT {_pct(pct)}", tpot_at_percentile_s=f"TPOT {_pct(pct)}")
    notes = list(notes) + _legend("seed", [(r["seed_index"], r["null_reasons"]) for r in records], labels)
    notes = list(notes) + _constants_notes(args)
    _emit(args, records, rows, headers, notes, key="runs")
    _notes_out(args, notes)
    if args.plot:
        from ..plots import plot_simulation
        plot_simulation(results, args.plot, ttft_slo_s=demand.ttft_s, tpot_slo_s=demand.tpot_s, horizon_s=horizon,
                        title=f"{plan.describe()}, {demand.rate_req_per_s:g} req/s")
    return 0


def _percentile_cells(rec, pct: float) -> list:
    """The table's cells of TTFT and TPOT at an SLO percentile other than 90 (TTFT only where the P50 /
    P90 / P99 columns do not already show it)."""
    cells = []
    if pct not in (50.0, 90.0, 99.0):
        cells.append(_fmt(rec["ttft_at_percentile_s"], ".3f"))
    if pct != 90.0:
        x = rec["tpot_at_percentile_s"]
        cells.append(_fmt(x * 1e3 if x is not None else None, ".1f"))
    return cells


def _sure_pass(met, measured, target: float) -> bool:
    """Whether an attainment of ``met`` of ``measured`` requests surely reaches ``target`` (its 95% Wilson
    interval's lower end, :func:`fastsim.search.attainment_verdict`)."""
    from ..search import attainment_verdict
    return attainment_verdict(round(float(met)), int(measured), target)[0] == "pass"


def _verdict_cell(rec) -> str:
    """The SLO cell of a run (or of the pooled row): ``pass``, ``FAIL``, or ``unsure`` when the attainment's
    95% Wilson interval holds the target (:func:`fastsim.search.attainment_verdict`)."""
    if rec["passed"]:
        return "pass"
    return "FAIL" if rec.get("decided", True) else "unsure"


def _arrival_words(args) -> str:
    """The arrival process of a run at a rate: ``Poisson arrivals`` or ``gamma arrivals (cv C)``."""
    if getattr(args, "arrival", "poisson") == "gamma":
        return f"gamma arrivals (cv {args.cv:g})"
    return "Poisson arrivals"


def _arrival_note(args, rate) -> str:
    """The note that names a rate run's arrival process (its gaps and vllm bench serve's burstiness)."""
    at = "" if rate is None else f" at {rate:g} req/s"
    if getattr(args, "arrival", "poisson") == "gamma":
        return (f"arrivals: gamma{at}, the gaps between arrivals gamma-distributed with coefficient of variation "
                f"{args.cv:g} (vllm bench serve --burstiness {1.0 / args.cv ** 2:.4g}; Poisson is cv 1)")
    return f"arrivals: Poisson{at} (exponential gaps, cv 1; --arrival gamma --cv C for burstier ones)"


def _simulate_profile(args):
    """``simulate --profile``: the rate profile (scaled by --rate-scale), or None; sizes the plan at its peak."""
    from .. import workload as W
    name = getattr(args, "profile", None)
    if name is None:
        if getattr(args, "rate_scale", None) is not None:
            raise FastsimInputError("--rate-scale", args.rate_scale, "with --profile only")
        return None
    if args.trace:
        raise FastsimInputError("--profile", name, "with --scenario (its request lengths), not --trace")
    prof = W.read_rate_profile(name).scaled(1.0 if args.rate_scale is None else args.rate_scale)
    if args.rate is None and not args.from_plan:
        args.rate = prof.peak_rate_req_per_s
        args._profile_rate_note = (f"the plan's rate is the profile's peak, {prof.peak_rate_req_per_s:,.4g} req/s"
                                   + ("" if getattr(args, "instances", None) else
                                      " (give --instances or --rate to size it otherwise)"))
    return prof


def _profile_workloads(args, scenario, prof, demand):
    """(workloads, horizon, notes) of ``simulate --profile``: one per seed, the scenario's lengths."""
    from ._resolve import _fixed_scenario
    from .. import workload as W
    cv = _arrival_cv(args)
    for flag, v in (("--shared-prefix", getattr(args, "shared_prefix", None)),
                    ("--session-turns", getattr(args, "session_turns", None)),
                    ("--session-gap", getattr(args, "session_gap", None))):
        if v is not None:
            raise FastsimInputError(flag, v, "no value with --profile (sessions are drawn at a constant rate)")
    kind = args.lengths
    if kind in ("fixed", "lognormal") or kind.startswith("fixed:"):
        scenario = _fixed_scenario(scenario, kind)
    else:
        raise FastsimInputError("--lengths", kind, "lognormal, fixed or fixed:P,O with --profile")
    args.seeds = 1 if args.seeds is None else args.seeds
    notes = [prof.describe() + (f" ({prof.source.rsplit('; ', 1)[-1]})" if args.rate_scale not in (None, 1.0)
                                else "")]
    horizon = prof.span_s
    if args.horizon is not None and args.horizon < prof.span_s:
        horizon = args.horizon
        notes.append(f"--horizon {horizon:g} s cuts the profile's span of {prof.span_s:g} s: only its first "
                     f"{horizon:g} s are simulated")
    elif args.horizon is not None:
        notes.append(f"--horizon {args.horizon:g} s is past the profile's span: the run stops at its end, "
                     f"{prof.span_s:g} s")
    if getattr(args, "_profile_rate_note", None):
        notes.append(args._profile_rate_note)
    elif not math.isclose(demand.rate_req_per_s, prof.peak_rate_req_per_s):
        notes.append(f"the plan is sized for {demand.rate_req_per_s:g} req/s; the profile's peak is "
                     f"{prof.peak_rate_req_per_s:,.4g} req/s")
    args.horizon = horizon
    wls = [W.synthesize_profile(scenario, prof, s, arrival=args.arrival, cv=cv, horizon_s=horizon)
           for s in W.seeds_for(args.seed, args.seeds)]
    return wls, horizon, notes


def _utilisation(result, plan, horizon_s):
    """Per instance: accepted requests routed to it per second / its analytic capacity (NaN at capacity 0).

    Prefill instances first for a disaggregated plan, each against the screen's prefill capacity,
    then decode instances against the decode capacity. 0.6 at 60% of the analytic capacity; above 1
    the instance gets more traffic than the screen says it can serve within the SLOs.
    """
    import numpy as np
    from ..sim.records import REQ_REJECTED
    ok = result.status != REQ_REJECTED
    if plan.mode == "colocated":
        counts = np.bincount(result.instance[ok], minlength=plan.instances)[:plan.instances]
        caps = np.full(plan.instances, plan.instance_capacity_req_per_s)
    else:
        npf, nd = plan.prefill_instances, plan.decode_instances
        dec = result.decode_instance[ok]
        counts = np.concatenate([np.bincount(result.instance[ok], minlength=npf)[:npf],
                                 np.bincount(dec[dec >= 0] - npf, minlength=nd)[:nd]])
        caps = np.concatenate([np.full(npf, plan.prefill_capacity_req_per_s),
                               np.full(nd, plan.decode_capacity_req_per_s)])
    with np.errstate(divide="ignore", invalid="ignore"):
        u = np.where(caps > 0, counts / horizon_s / np.where(caps > 0, caps, 1.0), np.nan)
    return [float(x) for x in u]


def _prefix_note(wls, ekw) -> list:
    """A note on the prefix blocks a run's cache matches (their size sets the unit of the hits)."""
    pol = ekw.get("policy")
    pre = next((w.prefix for w in wls if getattr(w, "prefix", None) is not None), None)
    if pol is None or pre is None or not pol.prefix_caching:
        return []
    bt = pre.block_tokens
    what = ("each request's prompt and answer (an answer is cached when its request finishes, and the next "
            "turn hits it)" if pre.spans_output else "the prompts only (a trace's ids do not cover the outputs)")
    unit = ("the engine's own" if bt == pol.block_tokens
            else f"a multiple of the engine's {pol.block_tokens}-token blocks")
    return [f"prefix cache: ids of {bt}-token blocks over {what}; hits count in whole {bt}-token blocks ({unit})"]


def _variant_flags(args) -> list:
    """The flags that make a synthetic workload's lengths differ from its scenario's (``simulate``)."""
    out = []
    if getattr(args, "lengths", "lognormal") != "lognormal":
        out.append(f"--lengths {args.lengths}")
    for flag, attr in (("--shared-prefix", "shared_prefix"), ("--session-turns", "session_turns")):
        if getattr(args, attr, None):
            out.append(f"{flag} {getattr(args, attr)}")
    return out


def _priced_for_workloads(args, cat, model, plan, demand, wls):
    """(plan, notes): ``plan`` with its analytic capacities for the lengths of ``wls``.

    The utilisation column compares each instance's traffic with its analytic capacity; that
    capacity must be the one for the request lengths actually simulated. A ``--trace`` plan is
    sized from the trace's lengths already, and so is a plain scenario run; with ``--lengths
    fixed`` / ``trace:NAME``, ``--shared-prefix`` or ``--session-turns`` the simulated prompts and
    outputs differ from the scenario's, so the plan is re-priced (same configuration and counts)
    for a :class:`fastsim.analytic.Demand` of the simulated lengths.

    Parameters
    ----------
    args : argparse.Namespace
        ``simulate``'s arguments.
    cat : Catalog
    model : Model
    plan : Plan
        The plan simulated (with any speculative decoding of the flags).
    demand : Demand
        The demand the plan was sized for (rate and targets are kept).
    wls : list of Workload
        The simulated workloads (one per seed).

    Returns
    -------
    tuple
        ``(plan, notes)``: the re-priced plan, or ``plan`` itself when no flag changes the lengths;
        ``plan`` None when it cannot be priced (utilisation then n/a), with a note saying why.
    """
    from ._resolve import _options
    import numpy as np
    from ..analytic import Demand
    from ..planner import plan_from_record
    flags = _variant_flags(args)
    if not flags:
        return plan, []
    p = np.concatenate([np.asarray(w.prompt_tokens, dtype=np.float64) for w in wls])
    o = np.concatenate([np.asarray(w.output_tokens, dtype=np.float64) for w in wls])
    if p.size == 0:
        return None, [f"utilisation n/a: the simulated workload ({', '.join(flags)}) has no request to price"]
    q = None if getattr(args, "mean_lengths", False) else 0.9
    d2 = Demand.from_lengths(p, o, rate_req_per_s=demand.rate_req_per_s, ttft_s=demand.ttft_s,
                             tpot_s=demand.tpot_s, latency_quantile=q)
    rec = plan.to_dict()
    planned = _read_plan_json(args)
    if planned is not None and planned.get("screen"):
        rec["screen"] = planned["screen"]
    try:
        priced = plan_from_record(rec, model, d2, catalog=cat, options=_options(args))
    except FastsimInputError as exc:
        return None, [f"utilisation n/a: the analytic screen cannot price this plan for the simulated lengths "
                      f"({', '.join(flags)}): {exc}"]
    note = (f"utilisation: against the analytic capacity for the lengths simulated ({', '.join(flags)}: mean "
            f"prompt {d2.mean_prompt_tokens:,.0f}, output {d2.mean_output_tokens:,.0f} tokens), "
            f"{priced.instance_capacity_req_per_s:,.3g} req/s per instance instead of the scenario's "
            f"{plan.instance_capacity_req_per_s:,.3g}")
    if getattr(args, "policy", "lecture") != "lecture" and not getattr(args, "no_prefix_caching", False) \
            and (getattr(args, "shared_prefix", None) or getattr(args, "session_turns", None)):
        note += "; it prices every prompt token (prefix-cache hits are not taken off)"
    return priced, [note]


def _sim_reason(rec, utilisation_why: str = ""):
    """``explain`` for :func:`fastsim._output.null_reasons` of one simulate record.

    ``utilisation_why``: why the utilisation is n/a (the screen's reason), when known.
    """
    from .._output import percentile_reason

    drained = bool(rec.get("drained"))

    def explain(k, v):
        if k in _MEAN_KEYS:
            decode = k.startswith(("tpot", "itl"))
            if drained:
                return ("not applicable: no finished request has more than one output token (TPOT needs two)"
                        if decode else "not applicable: no request finished")
            if isinstance(v, float) and math.isinf(v):
                return ("infinite: a measured request got no first token by the horizon (rejected or unfinished)"
                        if k.startswith("ttft") else
                        "infinite: a measured request" + (" with more than one output token" if decode else "")
                        + " did not finish by the horizon (rejected or unfinished)")
            if not rec.get("measured"):
                return "not applicable: no request arrived in the measured window"
            return "not applicable: no measured request has more than one output token (TPOT needs two)"
        if k == "horizon_s" and drained:
            return ("not applicable: the run drains (simulated until its last request finished, not to a horizon); "
                    + ("each seed's length is the makespan_s of its row" if rec.get("seed_index") == "all"
                       else "its length is makespan_s"))
        if k == "makespan_s" and drained and rec.get("seed_index") == "all" and rec.get("finished"):
            return ("not applicable: the seeds are separate runs, each with its own makespan (in its row); "
                    "output_tokens_per_s here is the mean of the seeds' output tokens/s")
        if k in ("makespan_s", "output_tokens_per_s"):
            return "not applicable: no request finished"
        if k == "rate_req_per_s" and drained:
            return "not applicable: an offline run sends every request at t = 0"
        if k == "utilisation" and drained:
            return "not applicable: a run that drains has no steady rate to compare with the analytic capacity"
        if k in ("ttft_at_percentile_s", "tpot_at_percentile_s"):
            return percentile_reason(k[:4].upper(), rec["slo_percentile"] / 100.0, v, rec["measured"])
        if k.startswith(("ttft_p", "tpot_p")):
            return percentile_reason(k[:4].upper(), int(k[6:8]) / 100.0, v, rec["measured"])
        if k == "utilisation":
            return ("not applicable: the analytic screen gives the instance no capacity to compare with"
                    + (f" ({utilisation_why})" if utilisation_why else ""))
        if k == "mean_batch":
            idle = [i for i, x in enumerate(v) if not math.isfinite(x)]
            return "not applicable for instance " + ", ".join(map(str, idle)) + ": it ran no step"
        if k == "attainment":
            return "not applicable: no request arrived in the measured window"
        return None
    return explain


# ---------------------------------------------------------------------------- the benchmarks: runs that drain

_MEAN_KEYS = ("ttft_mean_s", "tpot_mean_s", "itl_mean_s", "e2e_mean_s", "e2e_p50_s", "e2e_p90_s", "e2e_p99_s")


def _means_record(means: dict) -> dict:
    """The mean fields of a record, from :func:`fastsim.sim.measured_means` (or benchmark figures)."""
    return {k: float(means[k]) for k in _MEAN_KEYS}


def _mean_cells(rec) -> list:
    """The table cells of the means: TTFT s, TPOT ms, ITL ms, E2E s."""
    return [_fmt(rec["ttft_mean_s"], ".3f"), _fmt(rec["tpot_mean_s"] * 1e3, ".1f"),
            _fmt(rec["itl_mean_s"] * 1e3, ".1f"), _fmt(rec["e2e_mean_s"], ".3f")]


def _concatenated(results):
    """The per-request arrays of several runs, end to end (for figures over all their requests)."""
    import numpy as np
    from types import SimpleNamespace
    return SimpleNamespace(**{k: np.concatenate([getattr(r, k) for r in results])
                              for k in ("arrival_s", "output_tokens", "first_token_s", "finish_s", "status")})


def _check_benchmark_flags(args):
    """Refuse, before any work, the flags that make no sense for (or are ignored by) a run that drains."""
    from ._resolve import fixed_lengths
    from ..workload import MAX_REQUESTS
    from ..sim.drain import MAX_DRAIN_REQUESTS
    fixed_lengths(args.lengths)
    n = args.requests
    if n is not None and not 1 <= n <= MAX_REQUESTS:
        raise FastsimInputError("--requests", n, f"an integer from 1 to {MAX_REQUESTS:,} (the most requests one "
                                "synthetic workload holds, the bound of --rate x --horizon); for a drained run 1 "
                                f"to {MAX_DRAIN_REQUESTS:,} ({_drain_memory_words()})")
    k = 1 if args.seeds is None else args.seeds
    if n is not None and n * k > MAX_DRAIN_REQUESTS:
        most = MAX_DRAIN_REQUESTS // k
        raise FastsimInputError("--requests", n, f"1 to {most:,} for a drained run"
                                + ("" if k == 1 else f" of {k} seeds") + f" ({_drain_memory_words()})")
    if n is not None and args.trace:
        raise FastsimInputError("--requests", n, "no value with --trace (a trace brings its own requests; --drain "
                                "replays them all until the last finishes)")
    if args.offline and n is None and not args.trace:
        raise FastsimInputError("--offline", True, "with --requests N (N requests at t = 0) or --trace (its "
                                "requests at t = 0)")
    if args.drain and not args.trace:
        raise FastsimInputError("--drain", True, "with --trace only (--requests N runs drain already)")
    if args.drain and args.offline:
        raise FastsimInputError("--drain", True, "no value with --offline (an offline run drains already)")
    if n is None and not args.drain and not args.offline:
        return
    flag = "--requests" if n is not None else ("--offline" if args.offline else "--drain")
    if args.horizon is not None:
        raise FastsimInputError("--horizon", args.horizon, f"no value with {flag} (a run that drains is simulated "
                                "until its last request finishes: it chooses its own horizon)")
    if getattr(args, "profile", None) is not None:
        raise FastsimInputError("--profile", args.profile, f"no value with {flag} (a profile runs over its span; "
                                "a run that drains sends N requests at one rate)")
    if args.offline and args.rate is not None:
        raise FastsimInputError("--rate", args.rate, "no value with --offline (every request arrives at t = 0; "
                                "give --instances to size the plan)")
    if args.offline:
        for f, v, default in (("--arrival", args.arrival, "poisson"), ("--cv", args.cv, None)):
            if v != default:
                raise FastsimInputError(f, v, "no value with --offline (every request arrives at t = 0)")
    for f, attr in (("--shared-prefix", "shared_prefix"), ("--session-turns", "session_turns"),
                    ("--session-gap", "session_gap")):
        if getattr(args, attr, None) is not None:
            raise FastsimInputError(f, getattr(args, attr), f"no value with {flag} (shared prefixes and sessions "
                                    "are drawn over a horizon; a run of --requests N draws none)")
    if args.seeds is not None and args.seeds > 1:
        if args.trace:
            raise FastsimInputError("--seeds", args.seeds, f"1 with --trace (a trace replays once: every seed "
                                    "would be the same run)")
        if args.offline and fixed_lengths(args.lengths) is not None or args.offline and args.lengths == "fixed":
            raise FastsimInputError("--seeds", args.seeds, "1 with --offline and fixed lengths (nothing is drawn: "
                                    "every seed would be the same run)")
    if args.offline:
        from ._resolve import _require_counts
        _require_counts(args, "--offline")


def _drain_memory_words() -> str:
    """Why a drained run holds at most MAX_DRAIN_REQUESTS requests: its memory per request."""
    from ..sim.drain import DRAIN_BYTES_PER_REQUEST, DRAIN_MEMORY_BYTES, MAX_DRAIN_REQUESTS
    return (f"memory: about {DRAIN_BYTES_PER_REQUEST} bytes per request, every seed's requests held at once, "
            f"{MAX_DRAIN_REQUESTS * DRAIN_BYTES_PER_REQUEST / 2 ** 30:.1f} GiB at {MAX_DRAIN_REQUESTS:,} requests, "
            f"within the {DRAIN_MEMORY_BYTES / 2 ** 30:.0f} GiB a run may take, half of a 24 GiB machine; time grows with the steps "
            "simulated, about 6 s per million chat requests on 8 H100 instances under --policy vllm, more on "
            "fewer instances")


def _benchmark_kind(args):
    """``"offline"``, ``"online"`` or ``"trace"`` for a run that drains, None for a horizon run."""
    if getattr(args, "_offline_burst", False):
        if args.horizon is not None:
            raise FastsimInputError("--horizon", args.horizon, "no value with a trace whose requests all arrive at "
                                    "once (an offline burst is simulated until its last request finishes)")
        if args.seeds is not None and args.seeds > 1:
            raise FastsimInputError("--seeds", args.seeds, "1 with --trace (a trace replays once)")
        return "offline"
    if args.requests is not None:
        return "offline" if args.offline else "online"
    return "trace" if args.drain else None


def _run_drained(args, cat, bench, plan, model, demand, source, notes):
    """``simulate`` of a run that drains: one row per seed (and the pooled row), the clients' figures."""
    from ._resolve import _benchmark_workloads, _engine_setup
    import numpy as np
    from ..sim import benchmark_figures, simulate_drained
    from .. import workload as W
    from .._output import null_reasons
    if isinstance(source, W.Workload):
        wls = [source]
    else:
        args.seeds = 1 if args.seeds is None else args.seeds
        wls = _benchmark_workloads(args, source, demand.rate_req_per_s)
        notes = list(notes) + getattr(args, "_lengths_notes", [])
        if bench == "online":
            notes.append(_arrival_note(args, demand.rate_req_per_s))
    plan, sp, ekw, enotes = _engine_setup(args, plan, model, cat, demand,
                                          prefixes=any(getattr(w, "prefix", None) is not None for w in wls))
    notes = list(notes) + enotes + _prefix_note(wls, ekw)
    engine = "policy" in ekw
    results = [simulate_drained(sp, w.arrival_s, w.prompt_tokens, w.output_tokens, ttft_slo_s=demand.ttft_s,
                                tpot_slo_s=demand.tpot_s, max_context_tokens=model.max_context_tokens,
                                prefix=getattr(w, "prefix", None) if engine else None, **ekw) for w in wls]
    rate = math.nan if bench == "offline" else (float(wls[0].mean_rate_req_per_s) if bench == "trace"
                                                else demand.rate_req_per_s)
    records = []
    for i, (w, r) in enumerate(zip(wls, results)):
        records.append(_drained_record(i, plan, bench, rate, r, benchmark_figures(r), engine, demand.slo_attainment))
    if len(results) > 1:
        f = benchmark_figures(_concatenated(results))
        seeds = [benchmark_figures(r) for r in results]
        pooled = _drained_record("all", plan, bench, rate, None, f, engine, demand.slo_attainment)
        pooled.update(_pooled_throughput(seeds))
        ms = [r.metrics for r in results]
        meas = sum(m.measured for m in ms)
        pooled.update(measured=int(meas),
                      attainment=(sum(m.attainment * m.measured for m in ms) / meas if meas else math.nan),
                      unfinished=0, overloaded=False, preemptions=sum(int(m.preemptions) for m in ms))
        pooled["passed"] = _sure_pass(sum(m.attainment * m.measured for m in ms), meas, demand.slo_attainment)
        for k in ("busy_fraction", "utilisation", "mean_batch", "throughput_tokens_per_s", "cache_hit_fraction",
                  "cache_hit_fraction_per_instance", "spec_tokens_per_round", "cached_prompt_tokens"):
            pooled.pop(k, None)
        records.append(pooled)
        notes.append("row 'all' pools the seeds: " + _POOLED_DRAIN_NOTE)
    for rec in records:
        rec["null_reasons"] = null_reasons(rec, _sim_reason(rec))
    what = {"offline": "every request at t = 0", "online": f"{rate:g} req/s",
            "trace": f"the trace's arrivals ({rate:.4g} req/s)"}[bench]
    notes.append(f"a run that drains ({bench}: {what}): simulated until every request finished, every request "
                 "measured; latency figures over the finished requests as benchmark clients report them (TTFT; "
                 "TPOT = (last token - first token) / (O - 1), the first token excluded; ITL = the mean gap "
                 "between consecutive tokens over all tokens after the first; E2E = finish - arrival); output "
                 "tokens/s = output tokens / makespan (first arrival to last finish); attainment counts a rejected "
                 "request as a miss")
    rej = sum(r["rejected"] for r in records if r["seed_index"] != "all")
    if rej:
        notes.append(f"{rej:,} requests rejected: prompt + output above {model.name}'s context of "
                     f"{model.max_context_tokens:,} tokens, or their KV above an instance's whole KV cache; they "
                     "are left out of the latency figures and the output tokens")
    headers = ["seed", "requests", "finished", "rejected", "makespan s", "output tokens/s", "TTFT mean s",
               "TTFT P50 s", "TTFT P90 s", "TTFT P99 s", "TPOT mean ms", "TPOT P50 ms", "TPOT P90 ms", "TPOT P99 ms",
               "ITL mean ms", "E2E mean s", "E2E P90 s", "attainment", "SLO"] + (["preemptions"] if engine else [])
    rows = [[r["seed_index"], r["requests"], r["finished"], r["rejected"], _fmt(r["makespan_s"], ",.2f"),
             _fmt(r["output_tokens_per_s"], ",.0f"), _fmt(r["ttft_mean_s"], ".3f"), _fmt(r["ttft_p50_s"], ".3f"),
             _fmt(r["ttft_p90_s"], ".3f"), _fmt(r["ttft_p99_s"], ".3f")]
            + [_fmt(r[k] * 1e3, ".1f") for k in ("tpot_mean_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s",
                                                  "itl_mean_s")]
            + [_fmt(r["e2e_mean_s"], ".3f"), _fmt(r["e2e_p90_s"], ".3f"), _fmt(r["attainment"], ".3f"),
               "pass" if r["passed"] else "FAIL"] + ([r["preemptions"]] if engine else []) for r in records]
    if args.format == "table":
        print(f"{plan.describe()} on {model.name}: {bench} benchmark, {wls[0].n:,} requests"
              + ("" if bench == "offline" else f" at {rate:.4g} req/s")
              + (f", {_arrival_words(args)}" if bench == "online" else "")
              + f"; {_pct(demand.slo_percentile)} TTFT <= {demand.ttft_s:g} s, "
              f"{_pct(demand.slo_percentile)} TPOT <= {demand.tpot_s * 1e3:g} ms")
    notes = list(notes) + _legend("seed", [(r["seed_index"], r["null_reasons"]) for r in records], _DRAIN_LABELS)
    notes = list(notes) + _constants_notes(args)
    _emit(args, records, rows, headers, notes, key="runs")
    _notes_out(args, notes)
    if args.plot:
        from ..plots import plot_simulation
        plot_simulation(results, args.plot, ttft_slo_s=demand.ttft_s, tpot_slo_s=demand.tpot_s,
                        horizon_s=max(_simulated_horizon(r) for r in results), measure_window=(0.0, 1.0),
                        end_s=_last_finish(results), title=f"{plan.describe()}, {bench} benchmark")
    return 0


#: How row 'all' of a run that drains pools its seeds (the JSON's note and the README say so).
_POOLED_DRAIN_NOTE = (
    "the latency figures over all their finished requests, attainment over all their requests; requests, "
    "finished, rejected and output_tokens are sums over the seeds; output_tokens_per_s is the mean of the "
    "seeds' output tokens/s (each its own output tokens / its own makespan, as a benchmark repeated K times "
    "is averaged); makespan_s is n/a (each seed is a separate run with its own makespan, in its row), so no "
    "quotient of the row's own fields stands for its throughput")


def _pooled_throughput(seeds) -> dict:
    """The pooled row's throughput fields from each seed's :class:`fastsim.sim.BenchmarkFigures`.

    Output tokens/s is the mean of the seeds' (each its output tokens over its makespan); the
    makespan has no pooled value (each seed is a separate run), so it is NaN (JSON null, with a
    reason) rather than a figure whose quotient with the summed output tokens would contradict
    the throughput.
    """
    import numpy as np
    return {"makespan_s": math.nan, "output_tokens_per_s": float(np.mean([x.output_tokens_per_s for x in seeds]))}


def _simulated_horizon(result) -> float:
    """Where a drained run's simulation stopped (s): the end of its sample grid."""
    t = result.sample_t_s
    return float(t.size * (t[1] - t[0])) if t.size > 1 else math.inf


def _last_finish(results) -> float:
    """The last finish time over ``results`` (s): where a drained run's load-over-time ends."""
    import numpy as np
    ends = [float(np.nanmax(r.finish_s)) for r in results if np.isfinite(r.finish_s).any()]
    return max(ends) if ends else 0.0


def _drained_record(seed_index, plan, bench, rate, result, f, engine, target: float = 0.9) -> dict:
    """One record of a run that drains: the keys of a horizon run's record, and the clients' figures ``f``.

    The percentile keys are the clients' (over the finished requests), as are the means; the
    throughput is output tokens over the makespan and the busy fraction busy time over the
    makespan (the horizon of a run that drains is only where the simulation stopped).
    """
    rec = {"seed_index": seed_index, "plan": plan.describe(), "rate_req_per_s": rate, "benchmark": bench,
           "drained": True}
    if result is not None:
        m = result.metrics
        rec.update(horizon_s=None, requests=int(m.n_requests), measured=int(m.measured), attainment=m.attainment,
                   throughput_tokens_per_s=float(f.output_tokens_per_s), rejected=int(m.rejected),
                   unfinished=int(m.unfinished), overloaded=bool(m.overloaded),
                   busy_fraction=[float(b / f.makespan_s) if f.makespan_s > 0 else math.nan for b in result.busy_s],
                   utilisation=[math.nan] * len(m.utilisation),
                   mean_batch=[float(x) for x in m.mean_batch],
                   passed=_sure_pass(m.attainment * m.measured if m.measured else 0.0, m.measured, target),
                   policy=m.policy, preemptions=int(m.preemptions), cached_prompt_tokens=int(m.cached_prompt_tokens),
                   cache_hit_fraction=m.cache_hit_fraction,
                   cache_hit_fraction_per_instance=(None if m.cache_hit_fraction_per_instance is None else
                                                    [float(x) for x in m.cache_hit_fraction_per_instance]),
                   spec_tokens_per_round=m.spec_tokens_per_round)
    else:
        rec.update(horizon_s=None, requests=f.requests, rejected=f.rejected)
    for k in ("ttft", "tpot", "e2e"):
        d = getattr(f, f"{k}_s")
        for s in ("mean", "p50", "p90", "p99"):
            rec[f"{k}_{s}_s"] = float(d[s])
    rec.update(itl_mean_s=float(f.itl_mean_s), finished=f.finished, output_tokens=f.output_tokens,
               makespan_s=float(f.makespan_s), output_tokens_per_s=float(f.output_tokens_per_s))
    return rec
