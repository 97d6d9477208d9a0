"""What a command's parsed arguments resolve to: model, Demand, Plan, engine settings, workloads.

``simulate`` and ``capacity`` (and ``plan`` for its workload) start here, after the catalog
(:func:`fastsim._command_helpers._command_catalog`, with ``--catalog`` and ``--price``):

- :func:`_resolve_workload`: ``--scenario`` / ``--trace`` (and a ``--from-plan`` record's rate and
  targets) to the model, the :class:`fastsim.analytic.Demand` (SPEC §5) and the workload source;
- :func:`_plan_from_args`: the plan flags or the ``--from-plan`` record to a
  :class:`fastsim.analytic.Plan`, refused when its weights do not fit;
- :func:`_engine_setup`: the engine-policy and speculation flags to the simulator plan and the
  keywords of :func:`fastsim.sim.simulate` (SPEC §6-7);
- :func:`_synthetic_workloads`: one synthetic workload per seed (``--arrival``, ``--cv``,
  ``--lengths``, shared prefixes and sessions);
- :func:`_screen_infeasible`: why the analytic screen gives a plan no capacity.

Every heavy import is inside a function, so importing this module stays light.
"""
from __future__ import annotations

import math

from .._command_helpers import (_arrival_cv, _constants, _read_plan_json, _read_trace, _record_model)
from ..errors import FastsimInputError


def _resolve_workload(args, cat):
    """(model, demand, source, notes) from --scenario / --trace and overrides.

    With --from-plan, the plan's own rate and SLO targets apply unless given on the command line.
    """
    from ..analytic import Demand
    planned = _read_plan_json(args)
    trace_rate_note = None
    if planned is not None:
        if args.trace and getattr(args, "rate", None) is None and isinstance(planned.get("rate_req_per_s"),
                                                                            (int, float)):
            # a trace keeps its own arrivals (and rate) unless --rate rescales it
            trace_rate_note = float(planned["rate_req_per_s"])
        if args.trace and not args.model and isinstance(planned.get("model"), str):
            # the plan's model serves the trace (a config.json model from its recorded path)
            args.model = planned.get("model_path") or planned["model"]
        for attr, key in (("rate", "rate_req_per_s"), ("ttft", "ttft_slo_s"), ("tpot", "tpot_slo_s")):
            if attr == "rate" and args.trace:
                continue
            if getattr(args, attr, None) is None and isinstance(planned.get(key), (int, float)) and planned[key] > 0:
                setattr(args, attr, float(planned[key]))
        if getattr(args, "slo_percentile", None) is None and planned.get("slo_percentile") is not None:
            # the plan was made for targets at another percentile than P90: they apply here too
            from ..plans import check_slo_percentile
            args.slo_percentile = check_slo_percentile(planned["slo_percentile"], "--from-plan slo_percentile")
    pct = getattr(args, "slo_percentile", None)
    pct = 90.0 if pct is None else float(pct)
    if hasattr(args, "slo_percentile"):
        args.slo_percentile = pct
    q = None if getattr(args, "mean_lengths", False) else pct / 100.0
    notes = []
    if args.tpot is not None and args.tpot > 1.0:
        notes.append(f"--tpot {args.tpot:g} s per output token is unusually large: targets are in seconds "
                     "(50 ms is --tpot 0.05)")
    horizon = getattr(args, "horizon", None)
    if horizon is not None and horizon < 300.0 and not args.trace:
        notes.append(f"--horizon {horizon:g} s is short: an overloaded system can look stable for minutes "
                     "(its backlog grows slowly at first, so a short run can miss it); 600 s is the default")
    if args.trace:
        _refuse_synthetic_flags(args)
        if not args.model:
            raise FastsimInputError("--model", None, "a model name or config.json path (required with --trace "
                                    "unless --from-plan names the plan's model)")
        for flag, v in (("--ttft", args.ttft), ("--tpot", args.tpot)):
            if v is None:
                raise FastsimInputError(flag, None, "a P90 target in seconds (required with --trace)")
        model = cat.model(args.model)
        wl, read_notes = _read_trace(args, args.trace)
        notes.extend(read_notes)
        burst = wl.n >= 1 and not wl.duration_s > 0
        if hasattr(args, "offline") and (burst or args.offline):
            # an offline burst: every request at t = 0, served until the last finishes (no rate)
            return _offline_trace(args, cat, wl, notes, q, burst, pct)
        if burst and wl.n >= 2:
            # a command that sizes or searches for a rate: a burst has none to size for
            raise FastsimInputError("--trace", args.trace, f"a trace whose requests arrive over a span of time (its "
                                    f"{wl.n:,} requests all arrive at one instant: an offline burst, with no rate to "
                                    "plan or search for; fastsim simulate --trace FILE --instances N serves it as "
                                    "the burst it is)")
        if wl.n < 2:
            raise FastsimInputError("--trace", args.trace, "a trace with at least two requests at distinct "
                                    f"times (it has {wl.n}), so that it has a rate")
        if args.rate:
            wl = wl.rescaled(args.rate)
        too_long = wl.exceeding_context(model.max_context_tokens)
        notes.append(f"trace {wl.name}: {wl.n:,} requests over {wl.duration_s:,.1f} s "
                     f"({wl.mean_rate_req_per_s:.2f} req/s)")
        if trace_rate_note is not None and not math.isclose(trace_rate_note, wl.mean_rate_req_per_s):
            notes.append(f"--from-plan with --trace: the trace replays at its own rate, "
                         f"{wl.mean_rate_req_per_s:.4g} req/s; the plan was made for {trace_rate_note:g} req/s "
                         "(--rate rescales the trace's time axis to another rate)")
        notes.append(f"{too_long:,} requests exceed {model.name}'s context of {model.max_context_tokens:,} tokens "
                     "(prompt + output)" + (": they are rejected and counted, not truncated" if too_long else ""))
        demand = Demand.from_lengths(wl.prompt_tokens, wl.output_tokens, rate_req_per_s=wl.mean_rate_req_per_s,
                                     ttft_s=args.ttft, tpot_s=args.tpot, latency_quantile=q, slo_percentile=pct)
        return model, demand, wl, notes
    if not str(getattr(args, "lengths", "")).startswith("trace:"):
        for flag, v in (("--time-unit", getattr(args, "time_unit", None)),
                        ("--skip-invalid", True if getattr(args, "skip_invalid", False) else None)):
            if v is not None:
                raise FastsimInputError(flag, v, "no value with --scenario: it sets how a trace file is read "
                                        "(--trace, or --lengths trace:FILE of simulate)")
    scen = cat.scenario(args.scenario or "chat")
    model = cat.model(args.model or scen.model)
    demand = Demand.from_scenario(scen, rate_req_per_s=args.rate, ttft_s=args.ttft, tpot_s=args.tpot,
                                  latency_quantile=q, slo_percentile=pct)
    if planned is not None:
        differ = [f"{what} {a:g} (the scenario's {b:g})" for what, a, b in (
            ("rate", demand.rate_req_per_s, scen.rate_req_per_s), ("P90 TTFT s", demand.ttft_s, scen.ttft_s),
            ("P90 TPOT s", demand.tpot_s, scen.tpot_s)) if not math.isclose(a, b)]
        if differ:
            notes.append(f"--from-plan with --scenario {scen.name}: the plan's own " + ", ".join(differ)
                         + f" apply, with {scen.name}'s request lengths; was the plan made for another scenario?")
    return model, demand, scen, notes


def _offline_trace(args, cat, wl, notes, q, burst, pct=90.0):
    """(model, demand, workload, notes) of a trace served as an offline burst (every request at t = 0).

    A trace whose timestamps are all equal is one already; ``--offline`` makes one of any trace.
    It has no rate: ``--rate`` is refused, and the plan's instance counts must be given (no rate
    to size them by). The demand's rate is the requests per second of a one-second window, a
    placeholder no figure of the drained run reads.
    """
    from .. import workload as W
    from ..analytic import Demand
    model = cat.model(args.model)
    if args.rate is not None:
        raise FastsimInputError("--rate", args.rate, "no value with a trace served at once (" + (
            "its requests all arrive at one time" if burst else "--offline") + "): an offline run has no rate")
    _require_counts(args, "a trace whose requests all arrive at once" if burst else "--offline")
    if not burst:
        wl = W.all_at_once(wl)
    notes.append(f"trace {wl.name}: {wl.n:,} requests, all at t = 0 (" + (
        "its timestamps are all equal" if burst else "--offline") + "): an offline burst, simulated until the "
        "last request finishes")
    too_long = wl.exceeding_context(model.max_context_tokens)
    if too_long:
        notes.append(f"{too_long:,} requests exceed {model.name}'s context of {model.max_context_tokens:,} tokens "
                     "(prompt + output): they are rejected and counted, not truncated")
    demand = Demand.from_lengths(wl.prompt_tokens, wl.output_tokens, rate_req_per_s=float(wl.n),
                                 ttft_s=args.ttft, tpot_s=args.tpot, latency_quantile=q, slo_percentile=pct)
    args._offline_burst = True
    return model, demand, wl, notes


def _require_counts(args, what: str):
    """Refuse an offline run whose plan has no instance counts (there is no rate to size them by)."""
    if getattr(args, "from_plan", None):
        return
    if (args.mode or "colocated") == "colocated":
        if args.instances is None:
            raise FastsimInputError("--instances", None, f"an instance count with {what}: --instances was not "
                                    "given, and an offline run needs --instances N or --from-plan FILE.json, "
                                    "since no rate sizes the plan")
        return
    for flag, v in (("--prefill-instances", args.prefill_instances), ("--decode-instances", args.decode_instances)):
        if v is None:
            raise FastsimInputError(flag, None, f"an instance count with {what}: {flag} was not given, and an "
                                    "offline disaggregated run needs --prefill-instances N and --decode-instances "
                                    "M or --from-plan FILE.json, since no rate sizes the plan")


def fixed_lengths(text):
    """``--lengths fixed:P,O``: the pair ``(P, O)``, or None for another ``--lengths`` value.

    Raises FastsimInputError naming ``--lengths`` for a ``fixed:`` value that is not two integers >= 1.
    """
    if not isinstance(text, str) or not text.startswith("fixed:"):
        return None
    try:
        p, o = (int(x) for x in text[len("fixed:"):].split(","))
    except ValueError:
        p = o = 0
    if p < 1 or o < 1:
        raise FastsimInputError("--lengths", text, "fixed:P,O with P prompt and O output tokens, integers >= 1 "
                                "(O counts the first token), e.g. fixed:1024,128")
    return p, o


def _fixed_scenario(scenario, kind):
    """The scenario with ``--lengths fixed`` (its means) or ``fixed:P,O`` lengths, else itself."""
    from dataclasses import replace
    from ..catalog import LengthDist
    pair = fixed_lengths(kind)
    if pair is not None:
        return replace(scenario, prompt=LengthDist("fixed", float(pair[0])), output=LengthDist("fixed", float(pair[1])))
    if kind == "fixed":
        return replace(scenario, prompt=replace(scenario.prompt, kind="fixed", sigma=0.0),
                       output=replace(scenario.output, kind="fixed", sigma=0.0))
    return scenario


def _benchmark_workloads(args, scenario, rate):
    """One finite workload per seed for ``simulate --requests N``: at t = 0 (--offline) or at ``rate``.

    The lengths follow ``--lengths`` (the scenario's lognormals, their means or ``fixed:P,O``, or
    pairs resampled from a trace), drawn with the common random numbers of
    :func:`fastsim.workload.offline_requests` / :func:`fastsim.workload.online_requests`.
    """
    from .. import workload as W
    kind = args.lengths
    if kind.startswith("trace:"):
        lengths, read_notes = _read_trace(args, kind[len("trace:"):])
        args._lengths_notes = read_notes
    elif kind in ("lognormal", "fixed") or kind.startswith("fixed:"):
        lengths = _fixed_scenario(scenario, kind)
    else:
        raise FastsimInputError("--lengths", kind, "lognormal, fixed, fixed:P,O or trace:NAME")
    seeds = W.seeds_for(args.seed, args.seeds)
    if args.offline:
        return [W.offline_requests(args.requests, lengths, s) for s in seeds]
    cv = _arrival_cv(args)
    return [W.online_requests(args.requests, rate, lengths, s, arrival=args.arrival, cv=cv) for s in seeds]


def _refuse_synthetic_flags(args):
    """Refuse, with --trace, the flags that shape synthetic workloads only (--lengths, --arrival, --cv).

    A trace replays its own arrivals and lengths; those flags would be silently ignored.
    """
    for flag, v, default in (("--lengths", getattr(args, "lengths", None), "lognormal"),
                             ("--arrival", getattr(args, "arrival", None), "poisson"),
                             ("--cv", getattr(args, "cv", None), None)):
        if v is not None and v != default:
            raise FastsimInputError(flag, v, "no value with --trace (a trace replays its own arrival times and "
                                    "request lengths); synthetic workloads (--scenario) only")


def _plan_from_args(args, cat, model, demand):
    """(plan, model): the plan named on the command line or read with --from-plan, and its model."""
    plan, model = _plan_from_args_inner(args, cat, model, demand)
    from ..stepmodel import P_KV_BUDGET_TOKENS, kv_budget_tokens, stage_params
    g, pr = cat.gpu(plan.gpu), cat.precision(plan.precision)
    tps = (plan.prefill_tp, plan.decode_tp) if plan.mode == "disaggregated" else (plan.tp,)
    pp = int(plan.pp)
    for tp in tps:
        kv = (stage_params(model, g, pr, tp, pp=pp, **plan.layout_kwargs(tp))[0, P_KV_BUDGET_TOKENS] if pp > 1
              else kv_budget_tokens(model, pr, g, tp, **plan.layout_kwargs(tp)))
        if kv < 1:
            need = model.total_params * pr.weight_bytes / (tp * pp) / 1e9
            raise FastsimInputError("plan", plan.describe(),
                                    f"a configuration whose weights fit: {model.name} in {pr.name} needs "
                                    f"{need:,.1f} GB per GPU at TP{tp}" + (f" x PP{pp}" if pp > 1 else "")
                                    + f", {g.name} offers {0.9 * g.hbm_bytes / 1e9:,.1f} GB usable; raise TP"
                                    + (" or PP" if pp > 1 or tp >= int(getattr(g, "gpus_per_node", 8)) else "")
                                    + (" or use FP8" if pr.weight_bytes > 1.0 else ""))
    return plan, model


def _plan_from_args_inner(args, cat, model, demand):
    from ..analytic import MAX_INSTANCES, plan_for
    from ..planner import plan_from_record
    if not args.from_plan and getattr(args, "plan_index", 0):
        raise FastsimInputError("--plan-index", args.plan_index, "0 without --from-plan (it picks a plan of the file)")
    if args.from_plan:
        for flag in ("gpu", "precision", "mode", "tp", "pp", "layout", "instances", "prefill_tp", "decode_tp",
                     "prefill_instances", "decode_instances", "chunk"):
            v = getattr(args, flag, None)
            if v is not None:
                raise FastsimInputError(f"--{flag.replace('_', '-')}", v, "no value with --from-plan (the plan "
                                        "file fixes the plan; drop --from-plan to name a plan with flags)")
        d = _read_plan_json(args)
        _apply_plan_policy(args, d)
        if d.get("model") is not None:
            model = _record_model(args, cat, d)
        try:
            # everything that makes the plan comes with it: layout, counts, chunk, max_batch,
            # speculative decoding, prefix-hit sizing, a heterogeneous prefill side, the screen
            return plan_from_record(d, model, demand, catalog=cat, options=_options(args)), model
        except FastsimInputError as exc:
            if not exc.field.startswith("plan key "):
                raise
            raise FastsimInputError("--from-plan", args.from_plan, f"plan objects with a valid "
                                    f"{exc.field[len('plan key '):]} ({exc})") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise FastsimInputError("--from-plan", args.from_plan, f"plan objects of `fastsim plan --format json` "
                                    f"({type(exc).__name__}: {exc})") from None
    missing = [f for f, v in (("--gpu", args.gpu), ("--precision", args.precision)) if not v]
    if missing:
        raise FastsimInputError(" and ".join(missing), None, "a catalog name (or --from-plan FILE.json)")
    mode = args.mode or "colocated"
    wrong = ([f for f, v in (("--prefill-tp", args.prefill_tp), ("--decode-tp", args.decode_tp),
                             ("--prefill-instances", args.prefill_instances),
                             ("--decode-instances", args.decode_instances)) if v is not None]
             if mode == "colocated" else
             [f for f, v in (("--instances", args.instances), ("--chunk", args.chunk)) if v is not None])
    if wrong:
        raise FastsimInputError(wrong[0], getattr(args, wrong[0][2:].replace("-", "_")),
                                f"no value with --mode {mode} (" + (
                                    "use --instances, --tp and --chunk" if mode == "colocated" else
                                    "use --prefill-tp/--decode-tp and --prefill-instances/--decode-instances") + ")")
    if mode == "disaggregated" and args.tp is not None and args.prefill_tp is not None and args.decode_tp is not None:
        raise FastsimInputError("--tp", args.tp, "no value with both --prefill-tp and --decode-tp (--tp is the TP of "
                                "a side they leave out; here they set both)")
    for flag, v in (("--instances", args.instances), ("--prefill-instances", args.prefill_instances),
                    ("--decode-instances", args.decode_instances)):
        if v is not None and v > MAX_INSTANCES:
            raise FastsimInputError(flag, v, f"an integer from 1 to {MAX_INSTANCES:,} (the most instances of a kind a "
                                    "plan may have, as for capacity --instance-counts)")
    pp = getattr(args, "pp", None)
    if pp is not None:
        from ..plans import check_pp
        check_pp(pp, "--pp", model.layers)
        if pp > 1 and mode != "colocated":
            raise FastsimInputError("--pp", pp, "no value above 1 with --mode disaggregated (pipeline parallelism "
                                    "applies to colocated instances; a disaggregated plan's pools are TP instances)")
        from ..stepmodel import pp_refusal
        g = cat.gpu(args.gpu)
        why = pp_refusal(model, g, args.tp or 1, pp) if pp > 1 else None
        if why and (args.tp or 1) > g.gpus_per_node:
            raise FastsimInputError("--tp", args.tp, f"at most the {g.gpus_per_node} GPUs of one {g.name} node with "
                                    f"--pp {pp} (--tp is the TP of one stage: {why})")
        if why:
            raise FastsimInputError("--pp", pp, f"a pipeline {model.name} can run on TP{args.tp or 1} stages ({why})")
    layout = args.layout or "tp"
    if layout != "tp" and not model.is_moe:
        raise FastsimInputError("--layout", layout, f"tp: {model.name} is dense (expert parallelism and "
                                "data-parallel attention apply to mixture-of-experts models only)")
    return plan_for(model, demand, gpu=args.gpu, precision=args.precision, mode=mode, tp=args.tp or 1,
                    instances=args.instances, prefill_tp=args.prefill_tp, decode_tp=args.decode_tp,
                    prefill_instances=args.prefill_instances, decode_instances=args.decode_instances,
                    chunk_tokens=args.chunk, catalog=cat, layout=layout, options=_options(args), pp=pp or 1), model


def _apply_plan_policy(args, record):
    """Run a --from-plan record under the engine policy it was verified under, unless --policy is given.

    The record's ``verification.policy`` (vllm or sglang) replaces the default lecture policy,
    with the engine's defaults (the record does not hold engine flags); a note says so, or says
    that an explicit ``--policy`` differs from the record's. The notes go to
    ``args._plan_notes`` (:func:`_engine_setup` reports them).

    Parameters
    ----------
    args : argparse.Namespace
    record : dict
        The plan object of --from-plan.
    """
    ver = record.get("verification")
    pol = ver.get("policy") if isinstance(ver, dict) else None
    if not hasattr(args, "policy") or pol not in ("lecture", "vllm", "sglang", "trtllm"):
        return
    notes = args.__dict__.setdefault("_plan_notes", [])
    if not getattr(args, "policy_given", False):
        if pol != "lecture":
            args.policy = pol
            notes.append(f"--from-plan: the plan was verified under the {pol} policy, which applies here (the "
                         "engine's defaults; --policy lecture runs the lecture scheduler instead)")
    elif args.policy != pol:
        notes.append(f"--from-plan: the plan was verified under the {pol} policy; --policy {args.policy} "
                     "runs instead")


def _options(args):
    """ScreenOptions with the command's step constants (--calibration)."""
    from ..analytic import ScreenOptions
    return ScreenOptions(constants=_constants(args))


def _synthetic_workloads(args, scenario, rate):
    """One workload per seed for ``simulate``: --arrival / --cv and --lengths applied."""
    from .. import workload as W
    cv = _arrival_cv(args)
    seeds = W.seeds_for(args.seed, args.seeds)
    kind = args.lengths
    if kind.startswith("trace:"):
        trace, read_notes = _read_trace(args, kind[len("trace:"):])
        args._lengths_notes = read_notes
        return [W.synthesize_from_trace(trace, rate, args.horizon, s, arrival=args.arrival, cv=cv) for s in seeds]
    if kind in ("fixed", "lognormal") or kind.startswith("fixed:"):
        scenario = _fixed_scenario(scenario, kind)
    else:
        raise FastsimInputError("--lengths", kind, "lognormal, fixed, fixed:P,O or trace:NAME")
    pre = {}
    if getattr(args, "shared_prefix", None):
        pre["shared_prefix_tokens"] = args.shared_prefix
    if getattr(args, "session_turns", None):
        pre["session_turns"] = args.session_turns
    if getattr(args, "session_gap", None) is not None:
        if not getattr(args, "session_turns", None):
            raise FastsimInputError("--session-gap", args.session_gap, "with --session-turns only")
        pre["session_gap_s"] = args.session_gap
    policy = getattr(args, "policy", "lecture")
    if pre and policy != "lecture":
        # the ids match at the engine's KV block / page, so hits count in its units (SGLang: tokens)
        from ..sim.policy import ENGINE_BLOCK_TOKENS
        pre["prefix_block_tokens"] = ENGINE_BLOCK_TOKENS[policy]
    try:
        return [W.synthesize(scenario, rate, args.horizon, s, arrival=args.arrival, cv=cv, **pre) for s in seeds]
    except FastsimInputError as exc:
        if exc.field != "prefix_block_tokens" or not pre:
            raise
        # the prefix blocks of the whole run exceed the simulator's table: name the flag that made them
        flag, v = (("--shared-prefix", args.shared_prefix) if getattr(args, "shared_prefix", None)
                   else ("--session-turns", args.session_turns))
        raise FastsimInputError(flag, v, f"prompts whose prefix blocks total at most {W.MAX_PREFIX_BLOCKS:,} over "
                                f"the run ({exc.allowed.split('(', 1)[-1].rstrip(')')}): a smaller {flag}, a "
                                "shorter --horizon or a lower --rate") from None


def _engine_dict(args):
    """The ``engine`` of :mod:`fastsim.search` from the engine flags (None: the lecture policy)."""
    over = [(f, v) for f, v in (("--max-num-batched-tokens", args.max_num_batched_tokens),
                                ("--max-num-seqs", args.max_num_seqs),
                                ("--no-prefix-caching", True if args.no_prefix_caching else None)) if v is not None]
    if args.policy == "lecture":
        if over:
            raise FastsimInputError(over[0][0], over[0][1], "with --policy vllm, sglang or trtllm only")
        return None
    engine = {"policy": args.policy, "spec_seed": int(getattr(args, "seed", 0) or 0)}
    if args.max_num_batched_tokens is not None:
        engine["max_num_batched_tokens"] = args.max_num_batched_tokens
    if args.max_num_seqs is not None:
        engine["max_num_seqs"] = args.max_num_seqs
    if args.no_prefix_caching:
        engine["prefix_caching"] = False
    if args.max_num_batched_tokens is not None and args.max_num_seqs is not None:
        # both given: the engine's start-up rules apply to them whatever the GPU (fastsim.engine_rules)
        from types import SimpleNamespace
        from ..engine_rules import check_engine_policy
        check_engine_policy(SimpleNamespace(name=args.policy, max_num_batched_tokens=args.max_num_batched_tokens,
                                            max_num_seqs=args.max_num_seqs), _ENGINE_FLAGS)
    return engine


#: The engine settings' flags, for fastsim.engine_rules.check_engine_policy's errors.
_ENGINE_FLAGS = {"max_num_batched_tokens": "--max-num-batched-tokens", "max_num_seqs": "--max-num-seqs"}


def _engine_setup(args, plan, model, cat, demand=None, prefixes=None):
    """The plan (with the speculation flags), simulator plan, simulate keywords and notes of the engine flags.

    ``prefixes`` says whether the workload carries prefix block ids (None: judged from the flags;
    a trace is then assumed to). ``--routing prefix-aware`` is refused with
    ``--no-prefix-caching`` (nothing cached to route on) and noted on a workload without prefix
    blocks (every request then goes to the least-loaded instance).

    Returns ``(plan, sim plan, kwargs for simulate / simulate_batch, notes)``.
    """
    from dataclasses import replace
    from ..search import _engine_kwargs, sim_plan
    from ..stepmodel import P_KV_BUDGET_TOKENS
    engine = _engine_dict(args)
    notes = list(getattr(args, "_plan_notes", []))
    spec_alpha = getattr(args, "sim_spec_alpha", None)
    for flag, v in (("--spec-gamma", getattr(args, "sim_spec_gamma", None)),
                    ("--spec-draft", getattr(args, "sim_spec_draft", None))):
        if v is not None and spec_alpha is None:
            raise FastsimInputError(flag, v, "with --spec-alpha only (it turns speculative decoding on)")
    if spec_alpha is not None and plan.spec_gamma:
        raise FastsimInputError("--spec-alpha", spec_alpha, f"no value: the plan from --from-plan has its own "
                                f"speculative decoding (gamma {plan.spec_gamma}, alpha {plan.spec_alpha:g})")
    for flag, v in (("--shared-prefix", getattr(args, "shared_prefix", None)),
                    ("--session-turns", getattr(args, "session_turns", None))):
        if v is not None and getattr(args, "trace", None):
            raise FastsimInputError(flag, v, "no value with --trace (a trace brings its own prompts and, in "
                                    "hash_ids, its own prefix blocks); synthetic workloads (--scenario) only")
    if (getattr(args, "shared_prefix", None) or getattr(args, "session_turns", None)) and engine is None:
        notes.append("the lecture policy has no prefix cache: --shared-prefix / --session-turns only make the "
                     "prompts longer (--policy vllm or sglang serves the shared blocks from a cache)")
    if spec_alpha is not None and plan.pp > 1:
        raise FastsimInputError("--spec-alpha", spec_alpha, f"no value with a pipelined plan (TP{plan.tp} x "
                                f"PP{plan.pp}): speculative decoding is not simulated on a pipeline")
    if engine is not None:
        from ..search import pipeline_refusal
        why = pipeline_refusal(plan, engine)
        if why:
            raise FastsimInputError("--policy", args.policy, f"lecture or trtllm for a pipelined plan ({why})")
    if spec_alpha is not None:
        if engine is None:
            raise FastsimInputError("--spec-alpha", spec_alpha, "with --policy vllm, sglang or trtllm (the lecture policy "
                                    "does not simulate speculative decoding)")
        from ..specdec import spec_decoding
        try:
            spec = spec_decoding(args.sim_spec_gamma or 4, spec_alpha, args.sim_spec_draft, model, catalog=cat)
        except FastsimInputError as exc:
            if exc.field not in ("model", "draft", "spec_draft", "draft_model"):
                raise
            raise FastsimInputError("--spec-draft", args.sim_spec_draft if args.sim_spec_draft is not None
                                    else exc.value, exc.allowed) from None
        if demand is not None and plan.mode == "colocated":
            # the plan re-sized with its draft (analytic capacity, KV budget), as `plan --spec-alpha` sizes it
            from ..analytic import plan_for
            opts = replace(_options(args), spec_alpha=spec.alpha, spec_gammas=(spec.gamma,), spec_draft=spec.draft)
            plan = plan_for(model, demand, gpu=plan.gpu, precision=plan.precision, tp=plan.tp,
                            instances=plan.instances, chunk_tokens=plan.chunk_tokens, catalog=cat,
                            layout=plan.layout, options=opts, spec_gamma=spec.gamma)
        else:
            plan = replace(plan, spec_gamma=spec.gamma, spec_alpha=spec.alpha, spec_draft=spec.draft)
    if getattr(args, "routing", None) == "prefix-aware" and getattr(args, "no_prefix_caching", False):
        raise FastsimInputError("--routing", "prefix-aware", "least-loaded or round-robin with --no-prefix-caching "
                                "(prefix-aware routing sends a request where its prefix blocks are cached; with "
                                "the cache off there is nothing to route on)")
    if getattr(args, "routing", None) == "prefix-aware" and args.policy == "trtllm":
        raise FastsimInputError("--routing", "prefix-aware", "least-loaded or round-robin with --policy trtllm (its "
                                "KV block reuse is off, as trtllm-bench runs it: nothing cached to route on)")
    if engine is not None and plan.mode != "colocated":
        raise FastsimInputError("--policy", args.policy, "lecture for a disaggregated plan (the vllm, sglang and "
                                "trtllm policies model colocated instances)")
    if engine is not None and plan.max_batch:
        # the plan's batch cap (--from-plan) becomes the engine's max_num_seqs / max_batch_size
        if engine.get("max_num_seqs", plan.max_batch) != plan.max_batch:
            raise FastsimInputError("--max-num-seqs", engine["max_num_seqs"], f"no value, or the plan's cap "
                                    f"{plan.max_batch} (the plan from --from-plan caps its batch at {plan.max_batch})")
        engine["max_num_seqs"] = int(plan.max_batch)
        notes.append(f"--from-plan: the plan's batch cap of {plan.max_batch} requests is the {args.policy} "
                     "policy's max_num_seqs here")
        plan = replace(plan, max_batch=0)
    sp = sim_plan(plan, cat, _constants(args), model=model)
    if plan.spec_gamma and not sp.p[P_KV_BUDGET_TOKENS] > 0:
        raise FastsimInputError("--spec-draft", plan.spec_draft, f"a draft that fits beside {model.name} on "
                                f"{plan.tp} x {plan.gpu} (the pair leaves no KV)")
    kw = dict(_engine_kwargs(engine, plan, cat, model, _constants(args)), routing=args.routing)
    if engine is not None:
        pol = kw["policy"]
        # settings the engine itself refuses to start with are refused (fastsim.engine_rules)
        from ..engine_rules import check_engine_policy
        check_engine_policy(pol, _ENGINE_FLAGS, given=vars(args))
        if plan.spec_gamma:
            notes.append(f"speculative decoding: gamma {plan.spec_gamma}, alpha {plan.spec_alpha:g}, draft "
                         f"{plan.spec_draft}; KV budget {int(sp.p[P_KV_BUDGET_TOKENS]):,} tokens with the draft resident")
        from ..sim.window import NO_WINDOW, kv_window
        windowed = kv_window(sp.p)[0] != NO_WINDOW
        cache = "off" if not pol.prefix_caching else (
            "on" if not windowed else "on in the engine but not modelled for a sliding-window model (a preempted "
            "request recomputes its whole prompt; prefix blocks are refused)")
        if pol.name == "trtllm":
            notes.append(f"policy trtllm (GUARANTEED_NO_EVICT): max_num_tokens {pol.max_num_batched_tokens} "
                         f"(--max-num-batched-tokens), max_batch_size {pol.max_num_seqs} (--max-num-seqs), KV "
                         f"blocks of {pol.block_tokens} tokens, chunked context "
                         f"{'on' if pol.chunked_context else 'off'}, block reuse {cache} ({pol.source}); the "
                         "plan's chunk does not apply")
        else:
            notes.append(f"policy {pol.name}: max_num_batched_tokens {pol.max_num_batched_tokens}, max_num_seqs "
                         f"{pol.max_num_seqs}, KV blocks of {pol.block_tokens} token(s), prefix caching "
                         f"{cache} ({pol.source}); the plan's chunk does not apply")
        if prefixes is None:
            prefixes = bool(getattr(args, "shared_prefix", None) or getattr(args, "session_turns", None)
                            or args.trace)
        if args.routing == "prefix-aware" and not prefixes:
            notes.append("--routing prefix-aware: this workload shares no prefix blocks" +
                         (" (the trace has no hash_ids)" if args.trace else "") +
                         ", so every request goes to the least-loaded instance")
    return plan, sp, kw, notes


def _screen_infeasible(plan, model, demand, cat, constants=None) -> str:
    """Why the analytic screen gives the plan no capacity (its reason for the plan's instances)."""
    from dataclasses import replace
    from ..analytic import ScreenOptions, _REASONS, instance_table
    tps = (plan.tp,) if plan.mode == "colocated" else tuple(sorted({plan.prefill_tp, plan.decode_tp}))
    opts = replace(ScreenOptions(), gpus=(plan.gpu,), precisions=(plan.precision,), tps=tps, layouts=(plan.layout,),
                   pps=(int(plan.pp),))
    if constants is not None:
        opts = replace(opts, constants=constants)
    t = instance_table(model, demand, catalog=cat, options=opts).set_index("tp")
    if plan.mode == "colocated":
        why = t.loc[plan.tp].refusal or _REASONS.get(int(t.loc[plan.tp].colocated_status), "")
    else:
        parts = []
        for side, tp, col in (("prefill", plan.prefill_tp, "prefill_capacity_req_per_s"),
                              ("decode", plan.decode_tp, "decode_capacity_req_per_s")):
            if not t.loc[tp][col] > 0:
                parts.append(f"{side}: " + (t.loc[tp].refusal or _REASONS.get(int(t.loc[tp].status), "")
                                            or "no capacity within the targets"))
        why = "; ".join(parts)
    return why or "no capacity within the targets"
