"""``fastsim plan``: the cheapest verified deployment (:func:`fastsim.planner.plan_deployment`).

The analytic screen (SPEC §5) ranks the grid of GPU x precision x mode x TP x layout, the
simulator (SPEC §6-7) verifies and repairs the candidates; the table, JSON or CSV lists the plans
with their cost, capacity and verification, and ``--emit`` adds each plan's launch commands.
"""
from __future__ import annotations

import sys

from .._command_helpers import (_add_arrival_flags, _add_calibration, _add_common, _add_engine_args, _add_workload,
                                _arrival_cv, _command_catalog, _constants, _constants_choice, _constants_notes,
                                _distinct, _emit, _fmt, _fraction, _int_list, _legend, _notes_out, _pct, _pos_int,
                                _positive, _pp_list, _seeds, _tp_list)
from ..errors import FastsimInputError
from ..layouts import LAYOUTS

_PLAN_LABELS = {"ttft_p90_s": "TTFT P90", "tpot_p90_s": "TPOT P90"}


def _gpu_budget(text):
    """argparse type of ``--max-gpus GPU=N``: ``(gpu name, N)``."""
    import argparse
    name, _, n = text.partition("=")
    try:
        k = int(n)
    except ValueError:
        k = 0
    if not name or k < 1:
        raise argparse.ArgumentTypeError(f"got {text!r}; allowed: GPU=N with N an integer >= 1, e.g. H100=16")
    return name, k


def add_parser(sub):
    """Add the ``plan`` sub-command to ``sub`` (the sub-parsers of :func:`fastsim.cli.build_parser`)."""
    sp = sub.add_parser("plan", help="find the cheapest verified deployment")
    _add_workload(sp)
    _add_common(sp)
    sp.add_argument("--gpu", action="append", help="restrict to these GPUs (repeatable; 'all' = every catalog GPU; "
                    "default H100, H200, B200)")
    sp.add_argument("--precision", action="append", choices=None, help="restrict to these precisions (repeatable)")
    sp.add_argument("--tp", action="extend", type=_tp_list, help="GPUs per instance (of one pipeline stage with "
                    "--pp) to consider (repeatable or a comma list, 8,16; default 1 2 4 8, and up to 64 for MoE "
                    "models)")
    sp.add_argument("--pp", action="extend", type=_pp_list, help="pipeline stages per instance to consider "
                    "(repeatable or a comma list, 1,2; any count up to the model's layers; default 1, and 1 2 4 "
                    "where the model's weights do not fit one node of the GPU): an instance has TP x PP GPUs, "
                    "each stage's TP inside a node; colocated plans only")
    sp.add_argument("--layout", action="append", choices=LAYOUTS,
                    help="instance layouts to consider (repeatable; default tp, and all three for MoE models)")
    sp.add_argument("--mode", action="append", choices=("colocated", "disaggregated"), help="restrict the layout")
    sp.add_argument("--top-k", type=_pos_int("--top-k"), default=10, help="plans to verify (default 10)")
    sp.add_argument("--seeds", type=_seeds, default=None, help="simulation seeds per plan (default 8)")
    sp.add_argument("--horizon", type=_positive("--horizon"), default=None, help="simulated seconds (default 600)")
    sp.add_argument("--seed", type=int, default=None, help="root seed (default 0)")
    sp.add_argument("--no-verify", action="store_true",
                    help="analytic ranking only (nothing is simulated: --seeds, --horizon and --seed do not apply)")
    sp.add_argument("--mean-lengths", action="store_true",
                    help="screen latency with mean lengths instead of P90 (to show why one should not)")
    sp.add_argument("--spec-alpha", type=_fraction("--spec-alpha", "a per-token acceptance probability"),
                    metavar="A", help="also screen speculative decoding with this per-token acceptance (each plan "
                                      "without it and with each --spec-gamma)")
    sp.add_argument("--spec-gamma", type=_int_list, metavar="G1,G2",
                    help="draft tokens per round to screen with --spec-alpha (default 2,4)")
    sp.add_argument("--spec-draft", metavar="NAME",
                    help="draft model for --spec-alpha: a catalog name, a config.json path or 'mtp' (a one-layer "
                         "head on the target); default: a smaller model of the target's family, else mtp")
    sp.add_argument("--prefix-hit", type=_fraction("--prefix-hit", "a fraction of the prompt tokens"), metavar="F",
                    help="fraction of prompt tokens served from the prefix cache: their prefill compute is "
                         "skipped (default 0)")
    sp.add_argument("--emit", choices=("vllm", "sglang"),
                    help="also print each plan's launch commands for this engine (JSON/CSV: a 'launch' field "
                         "per plan; fastsim.emit)")
    sp.add_argument("--search", choices=("verified", "screen"), default="verified",
                    help="verified (default): every configuration of the grid that is not provably hopeless at its "
                         "cheapest passing instance count found in simulation, ranked by verified cost, with how the "
                         "screen saw each (kept, over-sized, under-sized, missed); screen: the lecture's pipeline, "
                         "the analytic screen's top-k plans verified and repaired")
    sp.add_argument("--heterogeneous", action="store_true",
                    help="also screen disaggregated plans whose prefill and decode run on different GPU types or "
                         "precisions (e.g. H100 prefill + H200 decode), each side at its own price")
    sp.add_argument("--screen", choices=("lecture", "queueing"), default="lecture",
                    help="analytic screen: lecture (default; throughput, and the P90 prompt's chunks within TTFT / 2) "
                         "or queueing (also the M/G/1 wait of a colocated instance's chunk slot against the TTFT "
                         "target: within 10%% of the simulated capacity on the four scenarios)")
    sp.add_argument("--rejection-budget", type=_fraction("--rejection-budget", "a fraction of the requests"),
                    default=0.0, metavar="F",
                    help="fraction of the requests a plan may reject although they fit the model's context (its "
                         "instances cannot hold their KV) and still pass (default 0: such a plan fails)")
    sp.add_argument("--max-gpus", action="append", type=_gpu_budget, metavar="GPU=N",
                    help="GPUs of this type available (repeatable): no plan shown uses more (a plan that needs "
                         "more is left out, with a note)")
    sp.add_argument("--headroom", action="store_true",
                    help="also search the simulated capacity of each plan shown (fastsim.search."
                         "max_sustainable_rates, the lecture policy, --seeds runs of --horizon s per probe) and its "
                         "headroom over the target rate; costs a capacity search per plan, several verifications' "
                         "worth of simulation each (about 2 to 10 probes)")
    _add_arrival_flags(sp)
    _add_engine_args(sp, prefixes=False)
    _add_calibration(sp)
    sp.set_defaults(func=run)


def run(args):
    """Run ``fastsim plan``: screen, verify and rank the deployments, print them; the exit status."""
    from ._resolve import _engine_dict, _resolve_workload
    from ..analytic import ScreenOptions
    from ..plans import ttft_tail_for
    cat = _command_catalog(args)
    unused = []
    if args.no_verify:
        # nothing is simulated: the simulation's flags do not apply (nor the note on a short horizon)
        unused = [f for f, v in (("--seeds", args.seeds), ("--horizon", args.horizon), ("--seed", args.seed))
                  if v is not None]
        args.horizon = None
    if args.headroom and args.no_verify:
        raise FastsimInputError("--headroom", True, "without --no-verify (the headroom is searched in simulation)")
    cv = _arrival_cv(args)
    if args.no_verify and args.arrival != "poisson":
        unused.append("--arrival")
    model, demand, source, notes = _resolve_workload(args, cat)
    if model.checkpoint_note:
        notes = list(notes) + [model.checkpoint_note]       # a quantised checkpoint: its one precision
    from ..workload import Workload
    if args.headroom and isinstance(source, Workload):
        raise FastsimInputError("--headroom", True, "with --scenario or synthetic lengths only (a trace has its own "
                                "arrivals: fastsim capacity --trace scales it)")
    if unused:
        notes = list(notes) + [f"--no-verify ranks the plans analytically and simulates nothing: "
                               f"{', '.join(unused)} {'do' if len(unused) > 1 else 'does'} not apply"]
    args.seeds = 8 if args.seeds is None else args.seeds
    args.horizon = 600.0 if args.horizon is None else args.horizon
    args.seed = 0 if args.seed is None else args.seed
    # 'all' names every catalog GPU (so a GPU named beside it is named twice)
    gpus = _distinct("--gpu", args.gpu, lambda g: list(cat.gpus) if g.strip().lower() == "all"
                     else [cat.gpu(g).name]) if args.gpu else None
    args.precision = (list(_distinct("--precision", args.precision, lambda v: [cat.precision(v).name]))
                      if args.precision else None)
    args.tp = list(_distinct("--tp", args.tp)) if args.tp else None
    args.pp = list(_distinct("--pp", args.pp)) if args.pp else None
    notes = list(notes) + _pp_notes(args, model)
    args.layout = list(_distinct("--layout", args.layout)) if args.layout else None
    args.mode = list(_distinct("--mode", args.mode)) if args.mode else None
    if args.spec_gamma:
        _distinct("--spec-gamma", args.spec_gamma)
    for flag, v in (("--spec-gamma", args.spec_gamma), ("--spec-draft", args.spec_draft)):
        if v is not None and args.spec_alpha is None:
            raise FastsimInputError(flag, v if isinstance(v, str) else ",".join(map(str, v)),
                                    "only with --spec-alpha (the per-token acceptance of speculative decoding)")
    spec_kw = {}
    if args.spec_alpha is not None:
        spec_kw.update(spec_alpha=args.spec_alpha, spec_draft=args.spec_draft)
        if args.spec_gamma:
            spec_kw["spec_gammas"] = tuple(args.spec_gamma)
    if args.prefix_hit:
        spec_kw["prefix_hit_fraction"] = args.prefix_hit
        if getattr(source, "prefix", None) is not None:
            from ..workload import prefix_reuse_bound
            bound = prefix_reuse_bound(source)
            if args.prefix_hit > bound:
                notes = list(notes) + [f"--prefix-hit {args.prefix_hit:g} is above what even an unbounded cache could "
                                       f"serve on {source.name} ({bound:.3f} of its prompt tokens): the screen "
                                       "sizes plans for hits the trace cannot give"]
    opts = ScreenOptions(gpus=gpus,
                         precisions=tuple(args.precision) if args.precision else None,
                         tps=tuple(args.tp) if args.tp else None,
                         pps=tuple(args.pp) if args.pp else None,
                         layouts=tuple(args.layout) if args.layout else None,
                         modes=tuple(args.mode) if args.mode else ("colocated", "disaggregated"),
                         constants=_constants(args), queueing=args.screen == "queueing",
                         heterogeneous=args.heterogeneous, ttft_tail=ttft_tail_for(demand.slo_percentile), **spec_kw)
    for g in opts.gpus or ():
        cat.gpu(g)
    max_gpus = None
    if args.max_gpus:
        grid_gpus = {cat.gpu(g).name for g in (opts.gpus or cat.default_gpus())}
        max_gpus = {}
        for g, n in args.max_gpus:
            name = cat.gpu(g).name
            if name in max_gpus:
                raise FastsimInputError("--max-gpus", f"{g}={n}", f"one budget per GPU ({name} already has "
                                        f"{max_gpus[name]})")
            if name not in grid_gpus:
                raise FastsimInputError("--max-gpus", f"{g}={n}", "a GPU of the plan's grid (" +
                                        ", ".join(sorted(grid_gpus)) + "; --gpu adds GPUs to it)")
            max_gpus[name] = n
    for p in opts.precisions or ():
        cat.precision(p)
    try:
        spec = opts.spec_for(model, cat)      # resolves and checks the draft before any work
    except FastsimInputError as exc:
        raise FastsimInputError("--spec-draft", args.spec_draft if args.spec_draft is not None else exc.value,
                                exc.allowed) from None
    engine = _engine_dict(args)
    if engine is not None:
        pinned = getattr(args, "emit", None) == args.policy
        given = [f for f, k in (("--max-num-seqs", "max_num_seqs"), ("--max-num-batched-tokens", "max_num_batched_tokens"))
                 if k in engine]
        if getattr(args, "emit", None) and given:
            # the emitted command carries each plan's own batch and chunk (fastsim.emit): a plan verified
            # under other settings would be launched with settings nothing verified
            raise FastsimInputError(given[0], getattr(args, given[0][2:].replace("-", "_")),
                                    f"not with --emit {args.emit}: the emitted command carries each plan's own "
                                    "batch and chunk, which --policy with --emit verifies; drop the override, or "
                                    "drop --emit to verify under it")
        if pinned:
            engine["plan_settings"] = True
        notes = list(notes) + ([f"--no-verify: nothing is simulated; the screen's plans would verify under the "
                                f"{args.policy} policy (drop --no-verify to verify them)"] if args.no_verify else
                               [f"verification under the {args.policy} policy ("
                               + ("the settings --emit writes for each plan: its batch and chunk" if pinned else
                                  "its defaults for each plan's GPU" + (", overridden" if len(engine) > 2 else ""))
                               + "; fastsim.sim.policy); disaggregated plans are not simulated under it"])
    d = demand
    P = _pct(d.slo_percentile)
    head = (f"{model.name}: {d.rate_req_per_s:.4g} req/s, {P} TTFT <= {d.ttft_s:g} s, {P} TPOT <= {d.tpot_s * 1e3:g} ms; "
            + (f"prompt mean {d.mean_prompt_tokens:,.0f} / {P} {d.latency_prompt_tokens:,.0f}, "
               f"output mean {d.mean_output_tokens:,.0f} / {P} {d.latency_output_tokens:,.0f} tokens"
               if not args.mean_lengths else
               f"latency screened with MEAN lengths (prompt {d.mean_prompt_tokens:,.0f}, output "
               f"{d.mean_output_tokens:,.0f} tokens), not {P}: a {P} SLO checked with mean lengths "
               "selects plans whose longer requests miss it, whatever their size"))
    if args.arrival != "poisson":
        head += f"; gamma arrivals (cv {cv:g})"
    if spec is not None:
        head += (f"; speculative decoding screened: alpha {spec.alpha:g}, draft {spec.draft}, gamma "
                 + "/".join(str(g) for g in (0,) + tuple(dict.fromkeys(opts.spec_gammas))) + " (0 = off)")
    if opts.prefix_hit_fraction:
        head += f"; prefix-cache hits {opts.prefix_hit_fraction:.0%} of prompt tokens"
    served = d.within_context(model.max_context_tokens)
    if served is not d:
        # the screen prices the requests within the context (fastsim.analytic.Demand.within_context)
        head += (f"; {served.served_fraction:.4%} of the requests fit the {model.max_context_tokens:,}-token "
                 f"context (the rest are rejected): served means prompt {served.mean_prompt_tokens:,.0f}, "
                 f"output {served.mean_output_tokens:,.0f} tokens")
    if args.format == "table":
        # the table's first line now, before the screen and the simulations (and, on a first
        # run, the compilation of their kernels)
        print(head, flush=True)
    from ..planner import plan_deployment
    if not args.no_verify and engine is None:
        # an empty numba cache: the screen's and the simulations' kernels compile on two cores
        from .._precompile import plan_kernels
        plan_kernels(screen=not opts.screens_extensions)
    bar = None
    if not args.no_verify and args.format == "table" and sys.stderr.isatty():
        from tqdm import tqdm
        # its total is set to the configurations the planner verifies, once it knows them
        bar = tqdm(total=None, desc="verifying", unit=" configurations", leave=False, file=sys.stderr)
    report = plan_deployment(model, demand, source, top_k=args.top_k, seeds=args.seeds, horizon_s=args.horizon,
                             verify=not args.no_verify, seed=args.seed, catalog=cat, options=opts,
                             progress=bar.update if bar else None, engine=engine,
                             rejection_budget=args.rejection_budget, search=args.search,
                             on_total=_bar_total(bar) if bar else None, max_gpus=max_gpus,
                             spec_policy="vllm",   # speculative plans: a policy that simulates them
                             arrival=args.arrival, cv=cv)
    if bar:
        bar.close()
    report.notes.extend(notes)
    caps = _headroom_capacities(args, report, cat, model, demand, source, opts, cv) if args.headroom else None
    if caps is not None:
        caps = _refuted_by_capacity(report, caps, demand)
    records = [d.to_dict() for d in report.deployments]
    if model.source.startswith("config.json at "):
        # a config.json model: its name is not a catalog name, so record where it came from
        # (simulate / capacity --from-plan load it from there)
        for r in records:
            r["model_path"] = model.source[len("config.json at "):]
    if args.headroom:
        _add_headroom(args, report, records, caps, demand)
    choice = _constants_choice(args)
    if choice.kind != "lecture":
        report.notes.extend(_calibration_notes(choice.path, opts.constants, report.deployments))
    rows = []
    for i, (d, r) in enumerate(zip(report.deployments, records), 1):
        v = r["verification"] or {}
        p = d.plan
        tp = " / ".join(d.layout_labels)     # every layout that is this deployment for the step model
        inst = str(p.instances) if p.mode == "colocated" else f"{p.prefill_instances}+{p.decode_instances}"
        rep = v.get("repaired_from_instances")
        raw = d.repair.verification if d.repair is not None else None   # inf stays inf in the table
        gpu_s, prec_s = p.gpu, p.precision
        if p.heterogeneous:
            gpu_s = f"P:{p.prefill_gpu_name} D:{p.gpu}" if p.prefill_gpu_name != p.gpu else p.gpu
            prec_s = (f"P:{p.prefill_precision_name} D:{p.precision}" if p.prefill_precision_name != p.precision
                      else p.precision)
        rows.append([i, gpu_s, prec_s, p.mode, tp, inst, p.gpus,
                     _fmt(r["usd_per_million_output_tokens"], ".3f"),
                     _fmt(r["analytic_usd_per_million_output_tokens"], ".3f"),
                     _fmt(r["efficiency_usd_per_million_output_tokens"], ".3f"),
                     _fmt(r["capacity_req_per_s"], ".1f"),
                     _fmt(v.get("attainment"), ".3f"), _fmt(_at(raw, "ttft", d.slo_percentile), ".3f"),
                     _fmt(_at(raw, "tpot", d.slo_percentile) * 1e3 if raw else None, ".1f"),
                     "not run" if not v else ("pass" if v["passed"] else "FAIL"),
                     "no" if rep is None else f"{rep} -> {v['instances_after_repair']}",
                     "not run" if not v else f"{v['rejected_requests']:,}"])

    labels = (_PLAN_LABELS if demand.slo_percentile == 90.0 else
              {"ttft_at_percentile_s": f"TTFT {P}", "tpot_at_percentile_s": f"TPOT {P}"})
    report.notes.extend(_legend("plan", [(i, (r["verification"] or {}).get("null_reasons", {}))
                                         for i, r in enumerate(records, 1)], labels))
    report.notes.extend(_seed_notes(report.deployments))
    launches = _emit_launch(args, report, records, cat, model) if args.emit else []
    if not records:
        reasons = report.grid["reason"].value_counts() if len(report.grid) else {}
        report.notes.append("no configuration of the grid meets these SLOs analytically"
                            + ("; most common reasons: " + "; ".join(f"{r} ({n} configurations)"
                                                                     for r, n in list(reasons.items())[:3])
                               if len(reasons) else ""))
    for i, d in enumerate(report.deployments, 1):
        r = d.repair
        if r is not None and not r.passed:
            report.notes.append(f"plan {i} fails verification: " + (r.reason or f"attainment below "
                                                                          f"{demand.slo_attainment:g}"))
        elif r is not None and r.verification.rejected:
            report.notes.append(f"plan {i} passes but rejects {r.verification.rejected:,} requests "
                                "(longer than the model's context or an instance's KV cache)")
    headers = ["#", "GPU", "prec", "mode", "TP", "inst", "GPUs", "$/M out", "$/M analytic", "$/M eff",
               "analytic capacity req/s", "attainment", f"TTFT {P} s", f"TPOT {P} ms", "verified", "repaired",
               "rejected"]
    if args.no_verify:  # analytic ranking only: drop the simulation columns
        headers = headers[:11]
        rows = [r[:11] for r in rows]
    if args.search == "verified" and not args.no_verify:   # how the screen saw each verified plan
        headers.append("screen")
        for row, d in zip(rows, report.deployments):
            row.append(d.screen_view or "")
    if args.headroom:      # after the analytic capacity
        headers[11:11] = ["sim capacity req/s", "headroom"]
        for row, r in zip(rows, records):
            row[11:11] = [_fmt(r["simulated_capacity_req_per_s"], ".2f"),
                          _fmt(r["headroom"] * 100 if r["headroom"] is not None else None, "+.1f") + (
                              "%" if r["headroom"] is not None else "")]
    if spec is not None:   # speculative decoding screened: say which plans use it
        headers.insert(6, "spec dec")
        for row, d in zip(rows, report.deployments):
            row.insert(6, f"gamma {d.plan.spec_gamma}" if d.plan.spec_gamma else "off")
    report.notes.extend(_constants_notes(args))
    _emit(args, records, rows, headers, report.notes, key="plans")
    if args.format == "table" and launches:
        print("\n" + "\n\n".join(launches))
    _notes_out(args, report.notes)
    return 0


def _pp_notes(args, model) -> list:
    """``--pp`` checked against the model's layers and the modes; the note for a grid of both modes.

    Pipeline parallelism applies to colocated plans (:attr:`fastsim.plans.Plan.pp`): ``--pp`` above
    1 with ``--mode disaggregated`` alone is refused, and with both modes the disaggregated plans
    are screened without pipeline stages (a note says so).
    """
    from ..plans import check_pp
    if not args.pp:
        return []
    for v in args.pp:
        check_pp(v, "--pp", model.layers)
    piped = [v for v in args.pp if v > 1]
    if not piped:
        return []
    if args.mode and "colocated" not in args.mode:
        raise FastsimInputError("--pp", ",".join(map(str, args.pp)), "1 with --mode disaggregated alone (pipeline "
                                "parallelism applies to colocated instances; a disaggregated plan's pools are TP "
                                "instances): add --mode colocated, or drop --pp")
    if not args.mode or "disaggregated" in args.mode:
        return [f"--pp {','.join(map(str, args.pp))}: pipeline stages apply to colocated plans; disaggregated plans "
                "are screened without them"]
    return []


def _at(v, kind: str, percentile: float):
    """A verification's TTFT or TPOT at the SLO percentile (the P90 by default; None when not run)."""
    if v is None:
        return None
    if percentile == 90.0:
        return v.ttft_p90_s if kind == "ttft" else v.tpot_p90_s
    return v.ttft_at_percentile_s if kind == "ttft" else v.tpot_at_percentile_s


def _seed_notes(deployments) -> list:
    """A note naming the plans whose verification added seeds (the Wilson bound could not decide at
    --seeds: :mod:`fastsim.search.confidence`), with the seeds each ran."""
    added = [f"{i} ({d.repair.verification.runs})" for i, d in enumerate(deployments, 1)
             if d.repair is not None and d.repair.verification.runs_asked
             and d.repair.verification.runs > d.repair.verification.runs_asked]
    if not added:
        return []
    asked = next(d.repair.verification.runs_asked for d in deployments
                 if d.repair is not None and d.repair.verification.runs_asked)
    return [f"plan{'s' if len(added) > 1 else ''} {', '.join(added)}: verified on more seeds than the {asked} asked "
            "(seeds run in brackets): at --seeds the 95% Wilson interval of the pooled attainment held the target, "
            "so the seeds doubled until it did not, up to 4 x --seeds; a pass is one whose interval clears the "
            "target (fastsim.search.confidence)"]


def _headroom_capacities(args, report, cat, model, demand, source, opts, cv) -> list:
    """``--headroom``: each shown plan's simulated capacity (a :class:`~fastsim.search.CapacityResult`, or
    the reason it has none, a str), from :func:`fastsim.search.max_sustainable_rates` (batched, the
    lecture policy, Poisson arrivals) or, with ``--arrival gamma``, :func:`fastsim.search.max_sustainable_rate`
    per plan on those arrivals."""
    from ..search import SLO, max_sustainable_rate, max_sustainable_rates, unsimulated_reason
    slo = SLO(demand.ttft_s, demand.tpot_s, demand.slo_attainment)
    out, idx, plans = [], [], []
    for i, d in enumerate(report.deployments):
        why = unsimulated_reason(d.plan)
        out.append(why)
        if not why:
            idx.append(i)
            plans.append(d.plan)
    if args.arrival == "poisson":
        res = max_sustainable_rates(plans, source, slo, seeds=args.seeds, horizon_s=args.horizon,
                                    seeds_root=args.seed, catalog=cat, constants=opts.constants,
                                    models=[model] * len(plans)) if plans else []
    else:
        res = [max_sustainable_rate(p, source, slo, seeds=args.seeds, horizon_s=args.horizon, seed=args.seed,
                                    catalog=cat, constants=opts.constants, model=model, arrival=args.arrival, cv=cv)
               for p in plans]
    for i, c in zip(idx, res):
        out[i] = c
    return out


def _refuted_by_capacity(report, caps, demand) -> list:
    """A passing plan whose own simulated capacity's 95% interval lies below the target rate does not pass
    (:func:`fastsim.search.capacity_refutation`): its verification is marked failed with that reason and
    it moves among the failing plans. Reorders ``report.deployments``; returns ``caps`` in the new order."""
    from dataclasses import replace
    from ..search import capacity_refutation
    deps = list(report.deployments)
    for i, (d, c) in enumerate(zip(deps, caps)):
        if isinstance(c, str) or d.repair is None or not d.repair.passed:
            continue
        why = capacity_refutation(c.ci95, demand.rate_req_per_s)
        if why:
            v = replace(d.repair.verification, passed=False, reason=why)
            deps[i] = replace(d, repair=replace(d.repair, passed=False, verification=v, reason=why))
    failing = [d.repair is not None and not d.repair.passed for d in deps]
    order = sorted(range(len(deps)), key=lambda i: failing[i])     # stable: the rest keep their order
    report.deployments = [deps[i] for i in order]
    return [caps[i] for i in order]


def _add_headroom(args, report, records, caps, demand) -> None:
    """``--headroom``: each shown plan's simulated capacity (``caps``, :func:`_headroom_capacities`) and
    headroom over the target rate, into its record, with a note."""
    for r, c in zip(records, caps):
        if isinstance(c, str):
            r["simulated_capacity_req_per_s"] = r["headroom"] = r["simulated_capacity_ci95_req_per_s"] = None
            r.setdefault("null_reasons", {}).update(
                simulated_capacity_ci95_req_per_s="not applicable: no simulated capacity",
                simulated_capacity_req_per_s=f"not applicable: the capacity search runs the lecture policy, which "
                                             f"cannot simulate this plan ({c})",
                headroom="not applicable: no simulated capacity")
            continue
        cap = c.rate_req_per_s
        ok = cap == cap
        r["simulated_capacity_req_per_s"] = float(cap) if ok else None
        r["simulated_capacity_ci95_req_per_s"] = [float(x) for x in c.ci95] if ok and c.ci95[0] == c.ci95[0] else None
        if r["simulated_capacity_ci95_req_per_s"] is None:
            r.setdefault("null_reasons", {})["simulated_capacity_ci95_req_per_s"] = (
                "not applicable: the bootstrap found no interval")
        r["headroom"] = float(cap / demand.rate_req_per_s - 1.0) if ok else None
        if not ok:
            r.setdefault("null_reasons", {}).update(simulated_capacity_req_per_s="not applicable: the capacity "
                                                    "search found no rate", headroom="not applicable: no capacity")
    how = ("fastsim.search.max_sustainable_rates, lecture policy" if args.arrival == "poisson" else
           f"fastsim.search.max_sustainable_rate per plan, lecture policy, gamma arrivals cv {args.cv:g}")
    report.notes.append("--headroom: sim capacity req/s is the most requests per second each plan sustains in "
                        f"simulation ({how}, {args.seeds} seeds x "
                        f"{args.horizon:g} s per probe); headroom = sim capacity / {demand.rate_req_per_s:g} req/s - 1; "
                        "the analytic capacity is the screen's (SPEC §5); a plan whose simulated capacity's 95% "
                        "interval lies below the target rate does not pass (fastsim.search.capacity_refutation)")


def _calibration_notes(path, calibration, deployments) -> list:
    """A note naming the plans whose GPU and precision the calibration has no entry for (they keep
    SPEC §3's default constants), e.g. FP8 rows under a calibration fitted on H100 BF16 only."""
    entries = getattr(calibration, "entries", ())
    def covered(gpu, prec):
        g, p = str(gpu).upper(), str(prec).upper()
        return any((e.gpu, e.precision) in ((g, p), (g, "*"), ("*", p), ("*", "*")) for e in entries)
    missing = {}
    for i, d in enumerate(deployments, 1):
        p = d.plan
        sides = [(p.gpu, p.precision)]
        if p.heterogeneous:
            sides.append((p.prefill_gpu_name, p.prefill_precision_name))
        for g, pr in sides:
            if not covered(g, pr):
                missing.setdefault(f"{g} {pr}", []).append(str(i))
    return [f"plan{'s' if len(ix) > 1 else ''} {', '.join(dict.fromkeys(ix))}: the calibration {path} has no "
            f"constants for {pair}, so {'these rows use' if len(ix) > 1 else 'this row uses'} the default step "
            "constants (SPEC §3)" for pair, ix in missing.items()]


def _bar_total(bar):
    """``on_total`` of :func:`fastsim.planner.plan_deployment` for a tqdm bar: sets its total."""
    def set_total(n):
        bar.total = int(n)
        bar.refresh()
    return set_total


def _emit_launch(args, report, records, cat, model):
    """Add each plan's ``launch`` commands (:func:`fastsim.emit.launch_commands`) to its record; the
    table's text blocks. A plan the engine cannot run gets ``launch`` None and a note saying why."""
    from ..emit import format_launch, launch_commands
    blocks = []
    for i, (d, r) in enumerate(zip(report.deployments, records), 1):
        try:
            r["launch"] = launch_commands(d.plan, args.emit, cat, model)
            blocks.append(format_launch(r["launch"], i))
        except FastsimInputError as exc:
            r["launch"] = None
            r.setdefault("null_reasons", {})["launch"] = "not applicable: " + exc.allowed
            report.notes.append(f"plan {i}: no {args.emit} command ({exc})")
    if getattr(args, "policy", "lecture") != args.emit and not getattr(args, "no_verify", False):
        piped = [i for i, d in enumerate(report.deployments, 1) if getattr(d.plan, "pp", 1) > 1]
        also = (f"; pipelined plans ({', '.join(map(str, piped))}) are simulated under the lecture and trtllm "
                f"policies only, so --policy {args.emit} cannot verify them") if piped else ""
        report.notes.append(f"--emit pins each plan's analytic batch and chunk; the verification ran under the "
                            f"{getattr(args, 'policy', 'lecture')} policy (--policy {args.emit} verifies these "
                            f"settings{also})")
    return blocks
