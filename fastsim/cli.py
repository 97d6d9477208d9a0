"""The ``fastsim`` command line.

Every command prints a table by default, or JSON / CSV with ``--format``; times are seconds and
costs US dollars in JSON and CSV. Bad input ends with a one-line error naming the field and what is
allowed, and exit status 2.
"""
from __future__ import annotations

import argparse
import json
import math
import sys

from .errors import FastsimInputError, require_positive, require_tp

__all__ = ["main", "build_parser"]


def _positive(field):
    def conv(text):
        try:
            return require_positive(field, float(text))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{field}: got {text!r}; allowed: a finite number > 0") from None
    return conv


def _tp(text):
    try:
        return require_tp("--tp", int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--tp: got {text!r}; allowed: a power of two from 1 to 64") from None


def _pos_int(field):
    def conv(text):
        try:
            v = int(text)
        except ValueError:
            v = 0
        if v < 1:
            raise argparse.ArgumentTypeError(f"{field}: got {text!r}; allowed: an integer >= 1")
        return v
    return conv


def _price(text):
    name, _, usd = text.partition("=")
    try:
        return name, require_positive(f"--price {name}", float(usd))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--price: got {text!r}; allowed: GPU=USD_PER_HOUR, e.g. B200=6") from None


def _add_common(sp):
    sp.add_argument("--format", choices=("table", "json", "csv"), default="table", help="output format")
    sp.add_argument("--catalog", action="append", default=[], metavar="FILE",
                    help="TOML/JSON file adding or overriding GPUs, precisions, models, scenarios (repeatable)")
    sp.add_argument("--price", action="append", default=[], type=_price, metavar="GPU=USD",
                    help="override a GPU's price in $/hour (repeatable)")


def _add_workload(sp, require_slo=False):
    src = sp.add_mutually_exclusive_group()
    src.add_argument("--scenario", help="built-in or catalog scenario (chat, coding-agent, offline-batch, low-latency-8b)")
    src.add_argument("--trace", help="azure-conv, azure-code, or a path to an Azure CSV / Mooncake JSONL trace")
    sp.add_argument("--model", help="catalog model name or path to a Hugging Face config.json")
    sp.add_argument("--rate", type=_positive("--rate"), help="target rate in req/s (rescales a trace's time axis)")
    sp.add_argument("--ttft", type=_positive("--ttft"), help="P90 TTFT target in seconds")
    sp.add_argument("--tpot", type=_positive("--tpot"), help="P90 TPOT target in seconds")


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump) and exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of every sub-command."""
    ap = _Parser(prog="fastsim", description="Plan LLM inference deployments: analytic screen, "
                                 "simulation, repair and maximum sustainable rate.")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)

    sp = sub.add_parser("plan", help="find the cheapest verified deployment")
    _add_workload(sp)
    _add_common(sp)
    sp.add_argument("--gpu", action="append", help="restrict to these GPUs (repeatable)")
    sp.add_argument("--precision", action="append", choices=None, help="restrict to these precisions (repeatable)")
    sp.add_argument("--tp", action="append", type=_tp, help="TP degrees to consider (repeatable; default 1 2 4 8)")
    sp.add_argument("--mode", action="append", choices=("colocated", "disaggregated"), help="restrict the layout")
    sp.add_argument("--top-k", type=_pos_int("--top-k"), default=10, help="plans to verify (default 10)")
    sp.add_argument("--seeds", type=_pos_int("--seeds"), default=8, help="simulation seeds per plan (default 8)")
    sp.add_argument("--horizon", type=_positive("--horizon"), default=600.0, help="simulated seconds (default 600)")
    sp.add_argument("--seed", type=int, default=0, help="root seed")
    sp.add_argument("--no-verify", action="store_true", help="analytic ranking only")
    sp.add_argument("--mean-lengths", action="store_true",
                    help="screen latency with mean lengths instead of P90 (to show why one should not)")
    sp.set_defaults(func=_cmd_plan)
    return ap


def _catalog(args):
    from .catalog import default_catalog, load_catalog
    cat = load_catalog(args.catalog) if args.catalog else default_catalog()
    if args.price:
        cat = cat.with_prices(dict(args.price))
    return cat


def _resolve_workload(args, cat):
    """(model, demand, source, notes) from --scenario / --trace and overrides."""
    from .analytic import Demand
    from . import workload as W
    q = None if getattr(args, "mean_lengths", False) else 0.9
    notes = []
    if args.trace:
        if not args.model:
            raise FastsimInputError("--model", None, "a model name or config.json path (required with --trace)")
        for flag, v in (("--ttft", args.ttft), ("--tpot", args.tpot)):
            if v is None:
                raise FastsimInputError(flag, None, "a P90 target in seconds (required with --trace)")
        model = cat.model(args.model)
        wl = W.read_trace(args.trace)
        if args.rate:
            wl = wl.rescaled(args.rate)
        too_long = wl.exceeding_context(model.max_context_tokens)
        notes.append(f"trace {wl.name}: {wl.n:,} requests over {wl.duration_s:,.1f} s "
                     f"({wl.mean_rate_req_per_s:.2f} req/s)")
        notes.append(f"{too_long:,} requests exceed {model.name}'s context of {model.max_context_tokens:,} tokens "
                     "(prompt + output)" + (": they are rejected and counted, not truncated" if too_long else ""))
        demand = Demand.from_lengths(wl.prompt_tokens, wl.output_tokens, rate_req_per_s=wl.mean_rate_req_per_s,
                                     ttft_s=args.ttft, tpot_s=args.tpot, latency_quantile=q)
        return model, demand, wl, notes
    scen = cat.scenario(args.scenario or "chat")
    model = cat.model(args.model or scen.model)
    demand = Demand.from_scenario(scen, rate_req_per_s=args.rate, ttft_s=args.ttft, tpot_s=args.tpot,
                                  latency_quantile=q)
    return model, demand, scen, notes


def _fmt(x, spec):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return format(x, spec)


def _emit(args, records, table_rows, headers, notes=()):
    if args.format == "json":
        json.dump(records, sys.stdout, indent=2, default=_json_default)
        sys.stdout.write("\n")
    elif args.format == "csv":
        import pandas as pd
        pd.json_normalize(records).to_csv(sys.stdout, index=False)
    else:
        from tabulate import tabulate
        print(tabulate(table_rows, headers=headers, disable_numparse=True))
        for n in notes:
            print("note: " + n)


def _json_default(o):
    import numpy as np
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.bool_):
        return bool(o)
    raise TypeError(type(o))


def _cmd_plan(args):
    from .analytic import ScreenOptions
    from .planner import plan_deployment
    cat = _catalog(args)
    model, demand, source, notes = _resolve_workload(args, cat)
    opts = ScreenOptions(gpus=tuple(args.gpu) if args.gpu else None,
                         precisions=tuple(args.precision) if args.precision else None,
                         tps=tuple(args.tp) if args.tp else (1, 2, 4, 8),
                         modes=tuple(args.mode) if args.mode else ("colocated", "disaggregated"))
    for g in opts.gpus or ():
        cat.gpu(g)
    for p in opts.precisions or ():
        cat.precision(p)
    bar = None
    if not args.no_verify and args.format == "table" and sys.stderr.isatty():
        from tqdm import tqdm
        bar = tqdm(total=args.top_k, desc="verifying", unit="plan", leave=False, file=sys.stderr)
    report = plan_deployment(model, demand, source, top_k=args.top_k, seeds=args.seeds, horizon_s=args.horizon,
                             verify=not args.no_verify, seed=args.seed, catalog=cat, options=opts,
                             progress=bar.update if bar else None)
    if bar:
        bar.close()
    report.notes.extend(notes)
    records = [d.to_dict() for d in report.deployments]
    rows = []
    for i, (d, r) in enumerate(zip(report.deployments, records), 1):
        v = r["verification"] or {}
        p = d.plan
        tp = f"TP{p.tp}" if p.mode == "colocated" else f"P:TP{p.prefill_tp} D:TP{p.decode_tp}"
        inst = str(p.instances) if p.mode == "colocated" else f"{p.prefill_instances}+{p.decode_instances}"
        rep = v.get("repaired_from_instances")
        rows.append([i, p.gpu, p.precision, p.mode, tp, inst, p.gpus,
                     _fmt(r["usd_per_million_output_tokens"], ".3f"),
                     _fmt(r["analytic_usd_per_million_output_tokens"], ".3f"),
                     _fmt(r["efficiency_usd_per_million_output_tokens"], ".3f"),
                     _fmt(r["capacity_req_per_s"], ".1f"),
                     _fmt(v.get("attainment"), ".3f"), _fmt(v.get("ttft_p90_s"), ".3f"),
                     _fmt(None if v.get("tpot_p90_s") is None else v["tpot_p90_s"] * 1e3, ".1f"),
                     "-" if not v else ("pass" if v["passed"] else "FAIL"),
                     "-" if rep is None else f"{rep} -> {v['instances_after_repair']}"])
    if not records:
        report.notes.append("no configuration of the grid meets these SLOs analytically")
    headers = ["#", "GPU", "prec", "mode", "TP", "inst", "GPUs", "$/M out", "$/M analytic", "$/M eff",
               "capacity req/s", "attainment", "TTFT P90 s", "TPOT P90 ms", "verified", "repaired"]
    d = demand
    head = (f"{model.name}: {d.rate_req_per_s:g} req/s, P90 TTFT <= {d.ttft_s:g} s, P90 TPOT <= {d.tpot_s * 1e3:g} ms; "
            f"prompt mean {d.mean_prompt_tokens:,.0f} / P90 {d.latency_prompt_tokens:,.0f}, "
            f"output mean {d.mean_output_tokens:,.0f} / P90 {d.latency_output_tokens:,.0f} tokens")
    if args.format == "table":
        print(head)
    _emit(args, records, rows, headers, report.notes)
    if args.format != "table":
        for n in report.notes:
            print("note: " + n, file=sys.stderr)
    return 0


def main(argv=None) -> int:
    """Entry point of the ``fastsim`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except FastsimInputError as exc:
        print(f"fastsim {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
