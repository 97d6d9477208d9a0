"""``fastsim ledger`` and ``fastsim ladder``: where one step's time goes, and the optimization ladder.

``ledger`` prints the token ledger of :func:`fastsim.ledger.ledger_table` (the roofline step of
SPEC §3-4: weight and KV reads, compute, all-reduce, all-to-all, launches), with ``--rate`` the
utilization and M/D/1 wait; ``ladder`` prints :func:`fastsim.ledger.ladder` (levels 0-5 and a
control row).
"""
from __future__ import annotations

import math
import sys

from .._command_helpers import (_add_calibration, _add_common, _check_plot, _command_catalog, _constants,
                                _constants_choice, _constants_notes, _emit, _fmt, _gpus, _nonneg_int, _notes_out,
                                _pos_int, _positive, _records, _tp)
from ..errors import FastsimInputError
from ..layouts import LAYOUTS


def add_parser(sub):
    """Add the ``ledger`` and ``ladder`` sub-commands to ``sub`` (the sub-parsers of :func:`fastsim.cli.build_parser`)."""
    sp = sub.add_parser("ledger", help="where the time of one step goes (token ledger)")
    _add_common(sp)
    sp.add_argument("--model", default="llama-3.1-70b", help="catalog model or config.json path (default 70B)")
    sp.add_argument("--gpu", default="H100", help="catalog GPU (default H100)")
    sp.add_argument("--precision", default="BF16", help="catalog precision (default BF16)")
    sp.add_argument("--tp", type=_gpus, default=8, help="GPUs of the instance: the TP degree of the tp layout "
                    "(default 8; must divide the attention heads); any count up to 4096 for dp+ep (e.g. 144)")
    sp.add_argument("--layout", choices=LAYOUTS, default="tp",
                    help="instance layout (MoE models): tp (default), tp+ep or dp+ep over the --tp GPUs")
    sp.add_argument("--pp", type=_pos_int("--pp"), default=1,
                    help="pipeline stages (default 1): --tp is then the GPUs of one stage (at most a node), the "
                         "instance has --tp x --pp GPUs, and the ledger has a row per stage for a micro-batch of "
                         "batch / min(batch, pp) sequences, with the pipeline's round after it")
    sp.add_argument("--batch", type=_pos_int("--batch"), nargs="+", default=[1, 64],
                    help="sequences per step (one or more; default 1 64)")
    sp.add_argument("--context", type=_nonneg_int("--context"), nargs="+", default=[4096],
                    help="cached tokens per sequence for decode (default 4096)")
    sp.add_argument("--prefill", type=_nonneg_int("--prefill"), nargs="+", default=[0],
                    help="prompt tokens of a prefill step; 0 = decode (default 0; e.g. 0 2048)")
    sp.add_argument("--kernels-per-layer", type=_nonneg_int("--kernels-per-layer"), default=12,
                    help="kernel launches per layer (27 unfused, 12 fused; default 12)")
    sp.add_argument("--launch-us", type=_positive("--launch-us"), default=1.0,
                    help="microseconds per launch (4 eager, 1 CUDA graphs; default 1)")
    sp.add_argument("--rate", type=_positive("--rate"),
                    help="arrival rate (req/s): adds the load each step must carry. utilization = rate x output tokens "
                         "x step / batch for decode (a request takes --output-tokens steps of a batch), rate x step / "
                         "batch for prefill; the queue wait is the M/D/1 wait of prefill steps (n/a for decode)")
    sp.add_argument("--output-tokens", type=_positive("--output-tokens"),
                    help="mean output tokens per request (required with --rate for decode rows)")
    sp.add_argument("--plot", metavar="FILE.png", help="also draw the ledger as stacked bars")
    _add_calibration(sp)
    sp.set_defaults(func=run)

    sp = sub.add_parser("ladder", help="the optimization ladder (levels 0-5 and a control row)")
    _add_common(sp)
    sp.add_argument("--model", default="llama-3.1-70b", help="target model (default 70B)")
    sp.add_argument("--draft-model", default=None,
                    help="draft of level 5: a catalog model or config.json with the target's vocabulary, or mtp "
                         "(default: as plan and simulate choose)")
    sp.add_argument("--gpu", default="H100", help="catalog GPU (default H100)")
    sp.add_argument("--tp", type=_tp, default=8, help="tensor parallelism (default 8)")
    sp.add_argument("--context", type=_nonneg_int("--context"), default=4096, help="cached tokens per sequence")
    sp.add_argument("--acceptance", type=float, default=0.8, help="draft acceptance probability in [0, 1)")
    sp.add_argument("--gamma", type=_pos_int("--gamma"), default=4, help="draft tokens per round (default 4)")
    sp.add_argument("--power-w", type=_positive("--power-w"), help="board power per GPU in W (default: catalog)")
    sp.set_defaults(func=run)


def run(args):
    """Run ``fastsim ledger`` or ``fastsim ladder`` (``args.command``); the exit status."""
    return _ladder(args) if args.command == "ladder" else _ledger(args)


def _ledger(args):
    """``fastsim ledger``: the token ledger of the steps named, with ``--rate`` their load."""
    from ..ledger import ledger_table, plot_ledger
    _check_plot(args)
    cat = _command_catalog(args)
    model, gpu, prec = cat.model(args.model), cat.gpu(args.gpu), cat.precision(args.precision)
    _check_context("--context", args.context, model)
    _check_context("--prefill", args.prefill, model)
    from ..stepmodel import layout_refusal
    why = layout_refusal(model, gpu, args.layout, args.tp)
    if why:
        raise FastsimInputError("--tp" if args.layout == "tp" else "--layout",
                                args.tp if args.layout == "tp" else args.layout, why)
    if args.rate and args.output_tokens is None and any(not p for p in args.prefill):
        raise FastsimInputError("--output-tokens", None, "the mean output tokens per request (required with --rate "
                                "for decode rows: a request takes that many decode steps; or --prefill T only)")
    df = ledger_table(model, gpu, prec, args.tp, batch=args.batch, context_tokens=args.context,
                      prefill_tokens=args.prefill, kernels_per_layer=args.kernels_per_layer,
                      launch_s=args.launch_us * 1e-6, arrival_rate_req_per_s=args.rate, layout=args.layout,
                      output_tokens=args.output_tokens, constants=_constants(args), pp=args.pp)
    rows, notes = [], []
    from ..stepmodel import resolve_constants
    k = resolve_constants(_constants(args), gpu, prec, args.tp)
    if _constants_choice(args).kind != "lecture":
        notes.append(f"--calibration: its efficiencies and all-reduce constants apply here"
                     + (f", and its host time per sequence ({k.overhead_per_seq_s * 1e6:.3g} us, the host column)"
                        if k.overhead_per_seq_s > 0 else "")
                     + f"; its per-step overhead ({(k.overhead_s + model.layers * k.overhead_per_layer_s) * 1e3:.3g} ms"
                     + (f": {k.overhead_s * 1e3:.3g} ms + {model.layers} layers x "
                        f"{k.overhead_per_layer_s * 1e6:.3g} us" if k.overhead_per_layer_s > 0 else "")
                     + ") does not: the ledger's launch column "
                     "is --kernels-per-layer x --launch-us per layer (SPEC §4), while plan, simulate and capacity "
                     "add the overhead")
    moe = model.is_moe
    pipe = args.pp > 1
    host = bool((df.host_s > 0).any()) if "host_s" in df else False
    classes = k.step_form == "classes"
    if classes:
        notes.append("step form: classes (a roofline per kernel class, summed): the step adds max(weight, GEMM) "
                     "and max(KV, attention), where the compute column is GEMM + attention"
                     + (f"; with gemm_blend_p {k.gemm_blend_p:g} the GEMM class is (weight^p + GEMM^p)^(1/p), "
                        "more than either near the ridge" if k.gemm_blend_p is not None else ""))
    if moe and k.moe_dispatch != "per_expert":
        notes.append(f"MoE dispatch: {k.moe_dispatch}, the all-to-all column moves "
                     + ("each token to every expert-parallel rank (an AllGather and a ReduceScatter)"
                        if k.moe_dispatch == "allgather" else "each token once to each rank holding one of its "
                        "experts") + " instead of once per routed expert (SPEC §10; fastsim.formulas.dispatch_copies)")
    for _, r in df.iterrows():
        kind = f"prefill {r.prefill_tokens}" if r.prefill_tokens else f"decode ctx {r.context_tokens}"
        row = [r.gpu, r.precision, r.tp] + ([f"{r.stage + 1}/{r.pp}"] if pipe else []) + [r.batch, kind]
        row += [_fmt(r[c] * 1e3, ".3f") for c in (
            ("weight_read_s", "expert_read_s", "kv_read_s", "compute_s", "allreduce_s", "alltoall_s")
            + (("p2p_s",) if pipe else ()) + ("launch_s",) + (("host_s",) if host else ()) + ("step_s",) if moe else
            ("weight_read_s", "kv_read_s", "compute_s", "allreduce_s") + (("p2p_s",) if pipe else ())
            + ("launch_s",) + (("host_s",) if host else ()) + ("step_s",))]
        row += [r.binding, _fmt(r.tokens_per_s_per_gpu, ",.1f"), "yes" if r.fits else "NO"]
        what = f"batch {r.batch}, {kind}" + (f", stage {r.stage + 1} of {r.pp}" if pipe else "")
        seqs = r.batch / min(r.batch, r.pp) if pipe else r.batch          # a stage's micro-batch
        if not r.fits:
            notes.append(_memory_note(what, r.memory_per_gpu_bytes, r.memory_limit_per_gpu_bytes, gpu))
        if args.rate:
            unstable = r.utilization >= 1.0
            row += [_fmt(r.utilization, ".2f"), "unstable" if unstable else _fmt(r.queue_wait_s * 1e3, ".3f")]
            if unstable and r.prefill_tokens:
                notes.append(f"{what}: the load of {args.rate:g} req/s exceeds the step's service rate of "
                             f"{seqs / r.step_s:,.1f} prompts/s (utilization {r.utilization:.2f} >= 1): the queue "
                             "is unstable and its wait grows without bound")
            elif unstable:
                notes.append(f"{what}: the load of {args.rate:g} req/s x {args.output_tokens:g} output tokens exceeds "
                             f"the {seqs / r.step_s:,.1f} tokens/s this step delivers (utilization "
                             f"{r.utilization:.2f} >= 1): the backlog grows without bound")
        rows.append(row)
    stage_h = ["stage"] if pipe else []
    p2p_h = ["stage send ms"] if pipe else []
    host_h = ["host ms"] if host else []
    headers = (["GPU", "prec", "TP"] + stage_h + ["batch", "step", "weight ms", "of it experts ms", "KV ms",
                                                  "compute ms", "all-reduce ms", "all-to-all ms"] + p2p_h
               + ["launch ms"] + host_h + ["step ms", "binding", "tokens/s/GPU", "fits"] if moe else
               ["GPU", "prec", "TP"] + stage_h + ["batch", "step", "weight ms", "KV ms", "compute ms", "all-reduce ms"]
               + p2p_h + ["launch ms"] + host_h + ["step ms", "binding", "tokens/s/GPU", "fits"])
    if pipe:
        from ..ledger import pipeline_round_s
        for _, q in pipeline_round_s(df).iterrows():
            kind = f"prefill {q.prefill_tokens}" if q.prefill_tokens else f"decode ctx {q.context_tokens}"
            m = min(int(q.batch), args.pp)
            notes.append(f"{q.gpu} {q.precision} TP{q.tp} x PP{q.pp}, batch {q.batch}, {kind}: {m} micro-batch"
                         f"{'es' if m > 1 else ''} of {q.batch / m:.3g} sequences; the pipeline's round is "
                         f"{q.round_s * 1e3:.3f} ms (max({m} x stage {q.slowest_stage + 1}'s step, the "
                         f"{q.latency_s * 1e3:.3f} ms across the stages)), {q.tokens_per_s_per_gpu:,.1f} tokens/s/GPU "
                         f"over the {q.tp * q.pp} GPUs")
    if args.rate:
        headers += ["utilization", "queue wait ms"]
        if any(not p for p in args.prefill):
            notes.append("queue wait n/a for decode rows: a batched decode admits a waiting request at its next "
                         "step, which is not an M/D/1 queue; utilization says whether the step keeps up")
    if args.format == "table":
        print(f"{model.name}: {args.kernels_per_layer} kernels/layer x {args.launch_us:g} us per launch; "
              + (("step = max(weight (dense + experts touched), GEMM) + max(KV, attention) + all-reduce + all-to-all"
                  " + launch" if moe else "step = max(weight, GEMM) + max(KV, attention) + all-reduce + launch")
                 if classes else
                 ("step = max(weight (dense + experts touched) + KV, compute) + all-reduce + all-to-all + launch"
                  if moe else "step = max(weight + KV, compute) + all-reduce + launch"))
              + (" + host (the host time of the step's sequences)" if host else "")
              + (f"; layout {args.layout}" if moe else "")
              + ("; per pipeline stage, + the stage's send to the next" if pipe else ""))
    notes += _constants_notes(args)
    _emit(args, _records(df, _ledger_reason(args.rate)), rows, headers, notes)
    _notes_out(args, notes)
    if args.plot:
        plot_ledger(df, args.plot, title=f"{model.name}, {gpu.name} {prec.name} TP{args.tp}"
                    + (f" x PP{args.pp}" if pipe else ""))
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


def _ladder(args):
    """``fastsim ladder``: the optimization ladder of one model on one GPU type."""
    from ..ledger import ladder
    cat = _command_catalog(args)
    gpu = cat.gpu(args.gpu)
    model = cat.model(args.model)
    _check_context("--context", [args.context], model)
    # ladder (fastsim.ledger.ladder_draft) picks, checks and names the draft; its errors name the flags
    flags = {"model": "--draft-model", "draft_model": "--draft-model", "acceptance": "--acceptance",
             "gamma": "--gamma", "power_w": "--power-w"}
    try:
        df = ladder(model, gpu, args.tp, args.context, draft_model=args.draft_model, catalog=cat,
                    acceptance=args.acceptance, gamma=args.gamma, power_w=args.power_w)
    except FastsimInputError as exc:
        if exc.field not in flags or (exc.field == "model" and args.draft_model is None):
            raise
        raise FastsimInputError(flags[exc.field], exc.value, exc.allowed) from None
    rows, unfit = [], {}
    for _, r in df.iterrows():
        level = f"{r.level} control" if r.control else str(r.level)
        rows.append([level, r.change, r.batch, r.precision, f"{r.kernels_per_layer} x {r.launch_us:g} us",
                     _fmt(r.step_s * 1e3, ".2f"), _fmt(r.tokens_per_step, ".2f"), _fmt(r.tokens_per_s_per_gpu, ",.1f"),
                     _fmt(r.usd_per_million_tokens, ".3f"), _fmt(r.joules_per_token, ".3f"),
                     _fmt(r.speedup_vs_level0, ".1f"), "yes" if r.fits else "NO"])
        if not r.fits:
            key = (r.precision, r.batch, r.memory_per_gpu_bytes, r.memory_limit_per_gpu_bytes)
            unfit.setdefault(key, []).append(level)
    notes = [_memory_note(f"level{'s' if len(lv) > 1 else ''} {', '.join(lv)} ({prec}, batch {b})", used, limit,
                          gpu, plural=len(lv) > 1) for (prec, b, used, limit), lv in unfit.items()]
    headers = ["level", "change", "batch", "prec", "launch", "step ms", "tokens/step", "tokens/s/GPU",
               "$/M tokens", "J/token", "x level 0", "fits"]
    if args.format == "table":
        drafts = [d for d in dict.fromkeys(df["draft"]) if isinstance(d, str) and d] if "draft" in df else []
        print(f"{model.name} on {args.tp} x {gpu.name} (${gpu.price_usd_per_hour:g}/GPU-hour), "
              f"context {args.context}" + (f"; speculative draft {', '.join(drafts)}" if drafts else ""))
    _emit(args, _records(df), rows, headers, notes, key="levels")
    _notes_out(args, notes)
    return 0


def _check_context(flag, values, model):
    """Tokens per sequence past the model's context window are an input error naming ``flag``."""
    for v in values:
        if v > model.max_context_tokens:
            raise FastsimInputError(flag, v, f"at most {model.max_context_tokens:,} tokens, the context window "
                                             f"of {model.name}")


def _memory_note(what, used_bytes, limit_bytes, gpu, plural=False):
    """A note for a setup whose weights and KV cache do not fit in HBM."""
    share = limit_bytes / gpu.hbm_bytes
    return (f"{what} {'do' if plural else 'does'} not fit in memory: {used_bytes / 1e9:,.1f} GB per GPU "
            f"of weights and KV cache against {limit_bytes / 1e9:,.1f} GB usable "
            f"({share:g} x {gpu.hbm_bytes / 1e9:g} GB of {gpu.name}), {(used_bytes - limit_bytes) / 1e9:,.1f} GB over: {'their' if plural else 'its'} figures are for a "
            "setup that cannot run")


def _ledger_reason(rate):
    """``explain`` of the ledger's null fields, for a ledger printed with ``--rate rate`` (or None)."""
    def explain(k, v):
        if k in ("utilization", "queue_wait_s"):
            if isinstance(v, float) and v == math.inf:
                return "infinite: utilization >= 1, the queue grows without bound"
            if k == "queue_wait_s" and rate:
                return "not applicable: a batched decode step is not an M/D/1 queue (see utilization)"
            return "not applicable: no --rate given"
        return None
    return explain
