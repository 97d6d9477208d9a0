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

from ._command_helpers import (_catalog, _check_plot, _constants, _distinct, _fmt, _int_at_least, _positive,
                               _record_model, _tp, _trace_notes)
from .errors import FastsimInputError, require_positive
from .layouts import LAYOUTS

__all__ = ["main", "build_parser"]


def _gpus(text):
    """GPUs of one instance for the ledger: any integer from 1 to 4096 (EP144 is 18 nodes of 8)."""
    try:
        v = int(text)
    except ValueError:
        v = 0
    if not 1 <= v <= 4096:
        raise argparse.ArgumentTypeError(f"got {text!r}; allowed: an integer from 1 to 4096 (GPUs of the instance)")
    return v


def _pos_int(field):
    """An argparse type: an integer >= 1."""
    return _int_at_least(1)


def _fraction(flag, what):
    """A number in [0, 1) (an acceptance probability, a hit fraction)."""
    def conv(text):
        try:
            v = float(text)
        except ValueError:
            v = math.nan
        if not 0.0 <= v < 1.0:
            raise argparse.ArgumentTypeError(f"got {text!r}; allowed: {what} in [0, 1)")
        return v
    return conv


def _int_list(text):
    """Comma-separated integers >= 1 (``--spec-gamma 2,4``)."""
    try:
        vals = tuple(int(x) for x in text.split(","))
    except ValueError:
        vals = ()
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"got {text!r}; allowed: integers >= 1 separated by commas, e.g. 2,4")
    return vals


def _price(text):
    name, _, usd = text.partition("=")
    try:
        return name, require_positive(f"--price {name}", float(usd))
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}; allowed: GPU=USD_PER_HOUR, e.g. B200=6") from None


def _add_common(sp):
    sp.add_argument("--format", choices=("table", "json", "csv"), default="table", help="output format")
    sp.add_argument("--catalog", action="append", default=[], metavar="FILE",
                    help="TOML/JSON file adding or overriding GPUs, precisions, models, scenarios (repeatable)")
    sp.add_argument("--price", action="append", default=[], type=_price, metavar="GPU=USD",
                    help="override a GPU's price in $/hour (repeatable)")


def _add_calibration(sp):
    sp.add_argument("--calibration", metavar="FILE.toml",
                    help="step-model constants per GPU and precision from `fastsim calibrate` (default: SPEC §3's)")


def _add_workload(sp, require_slo=False):
    src = sp.add_mutually_exclusive_group()
    src.add_argument("--scenario", help="built-in or catalog scenario (chat, coding-agent, offline-batch, low-latency-8b)")
    src.add_argument("--trace", help="azure-conv, azure-code, or a path to an Azure CSV / Mooncake JSONL trace")
    _add_trace_reading(sp)
    sp.add_argument("--model", help="catalog model name or path to a Hugging Face config.json")
    sp.add_argument("--rate", type=_positive("--rate"), help="target rate in req/s (rescales a trace's time axis)")
    sp.add_argument("--ttft", type=_positive("--ttft"), help="P90 TTFT target in seconds")
    sp.add_argument("--tpot", type=_positive("--tpot"), help="P90 TPOT target in seconds")


def _add_trace_reading(sp):
    """--time-unit and --skip-invalid: how a trace file is read."""
    sp.add_argument("--time-unit", choices=("s", "ms"),
                    help="unit of a trace file's numeric timestamps (default: ms for Mooncake JSONL, s for CSV; "
                         "date-time CSV timestamps need none); a warning names an implausible implied rate")
    sp.add_argument("--skip-invalid", action="store_true",
                    help="drop trace rows with prompt or output tokens below 1 (failed requests) and say how many "
                         "and why, instead of refusing the file at the first such row")


def _read_trace(args, name):
    """(workload, notes): a trace read with --time-unit / --skip-invalid, its drops and rate warning noted."""
    from . import workload as W
    wl = W.read_trace(name, time_unit=getattr(args, "time_unit", None),
                      skip_invalid=getattr(args, "skip_invalid", False))
    return wl, _trace_notes(wl)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump) and exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _add_plan_args(sp):
    g = sp.add_argument_group("plan (or --from-plan)")
    g.add_argument("--from-plan", metavar="FILE.json",
                   help="a plan from `fastsim plan --format json` ('-' for stdin): its configuration, model, "
                        "SLO targets and engine policy apply unless given; its rate applies to --scenario, while "
                        "a --trace keeps its own rate unless --rate is given")
    g.add_argument("--plan-index", type=int, default=0, help="which plan of the JSON list (default 0, the best)")
    g.add_argument("--gpu", help="GPU name")
    g.add_argument("--precision", help="BF16 or FP8")
    g.add_argument("--mode", choices=("colocated", "disaggregated"), default=None, help="default colocated")
    g.add_argument("--tp", type=_tp, default=None,
                   help="TP per instance (default 1; disaggregated: the TP of a side without --prefill-tp / "
                        "--decode-tp)")
    g.add_argument("--instances", type=_pos_int("--instances"),
                   help="instances, 1 to 4096 (colocated; default: analytic sizing)")
    g.add_argument("--prefill-tp", type=_tp, help="TP of prefill instances (disaggregated)")
    g.add_argument("--decode-tp", type=_tp, help="TP of decode instances (disaggregated)")
    g.add_argument("--prefill-instances", type=_pos_int("--prefill-instances"), help="1 to 4096 (disaggregated)")
    g.add_argument("--decode-instances", type=_pos_int("--decode-instances"), help="1 to 4096 (disaggregated)")
    g.add_argument("--chunk", type=_pos_int("--chunk"), help="chunked-prefill tokens per step (colocated)")
    g.add_argument("--layout", choices=LAYOUTS, default=None,
                   help="instance layout: tp (default), tp+ep (experts expert-parallel over the instance's GPUs) "
                        "or dp+ep (data-parallel attention + expert parallelism); MoE models only for the EP layouts")


def _add_spec_args(sp):
    g = sp.add_argument_group("speculative decoding (with --policy vllm or sglang)")
    g.add_argument("--spec-alpha", dest="sim_spec_alpha", type=float, metavar="A",
                   help="per-token acceptance probability in [0, 1): turns speculative decoding on")
    g.add_argument("--spec-gamma", dest="sim_spec_gamma", type=_pos_int("--spec-gamma"), default=None, metavar="G",
                   help="draft tokens per round (default 4)")
    g.add_argument("--spec-draft", dest="sim_spec_draft", metavar="NAME",
                   help="draft model (catalog name, config.json, or mtp); default: a smaller model of the "
                        "target's family, else mtp")


def _add_arrival_args(sp, prefixes: bool = True):
    sp.add_argument("--routing", choices=("least-loaded", "round-robin", "prefix-aware"), default="least-loaded",
                    help="request routing across instances (default: fewest outstanding tokens; prefix-aware: "
                         "most cached prefix blocks, SGLang router rules, with --policy vllm or sglang)")
    sp.add_argument("--arrival", choices=("poisson", "gamma"), default="poisson",
                    help="arrival process of synthetic workloads (gamma: burstier with --cv > 1)")
    sp.add_argument("--cv", type=_positive("--cv"), help="inter-arrival coefficient of variation (with --arrival gamma)")
    _add_engine_args(sp, prefixes=prefixes)


class _Given(argparse.Action):
    """Store the value and set ``<dest>_given`` (a flag given on the command line, not its default)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, self.dest + "_given", True)


def _add_engine_args(sp, prefixes: bool):
    g = sp.add_argument_group("engine policy (colocated plans)")
    g.add_argument("--policy", choices=("lecture", "vllm", "sglang"), default="lecture", action=_Given,
                   help="scheduler: lecture (reserve P + O at admission, chunk on top of decodes; default), vllm "
                        "(shared token budget, 16-token KV blocks on demand, preemption) or sglang (prefill first, "
                        "token KV, retraction); the engines' defaults for the plan's GPU")
    g.add_argument("--max-num-batched-tokens", type=_pos_int("--max-num-batched-tokens"), metavar="N",
                   help="vllm: token budget per step; sglang: chunked_prefill_size (default: the engine's)")
    g.add_argument("--max-num-seqs", type=_pos_int("--max-num-seqs"), metavar="N",
                   help="most running requests per instance (default: the engine's)")
    g.add_argument("--no-prefix-caching", action="store_true",
                   help="turn the engine's prefix cache off (on by default in vLLM V1 and SGLang)")
    if not prefixes:
        return
    g.add_argument("--shared-prefix", type=_pos_int("--shared-prefix"), metavar="TOKENS",
                   help="synthetic workloads: a system prompt of TOKENS shared by every request")
    g.add_argument("--session-turns", type=_pos_int("--session-turns"), metavar="K",
                   help="synthetic workloads: multi-turn sessions of K turns, each prompt extending the last")
    g.add_argument("--session-gap", type=_positive("--session-gap"), metavar="S",
                   help="with --session-turns: seconds between a session's turns (default 120, the median gap "
                        "of the Mooncake conversation trace)")


#: ``fastsim simulate --help``: what its columns mean.
SIMULATE_DESCRIPTION = (
    "Simulate one plan at one rate. Measured requests: those arriving in the middle 60% of the arrival "
    "time span (from 20% to 80% of the horizon, or of a trace's duration). Per instance: busy fraction = "
    "share of the horizon in which the instance runs a step (it runs one whenever it holds any request, so "
    "1.00 at moderate load); utilisation = accepted requests routed to the instance per second / its "
    "analytic capacity (0.60 at 60% load; above 1, more than the screen says it can serve within the SLOs). "
    "inf: a percentile past the requests that never got that token; n/a: no such value.")


#: ``fastsim capacity --help``: the two searches.
CAPACITY_DESCRIPTION = (
    "Maximum sustainable load of one plan. With --scenario: bisection on the rate, each probe --seeds "
    "seeds x --horizon s of synthetic arrivals (common random numbers), a 95% bootstrap interval across "
    "seeds. With --trace: bisection on the trace's time scale s (arrival times divided by s: same "
    "requests, order and lengths; equivalent rate = requests / (duration / s)), each probe one replay "
    "over the trace's span at that scale (or over --horizon seconds when shorter; the requests after it "
    "are counted as excluded), 4 scales per round in parallel; a trace is one realisation, so the "
    "bracket is the only interval; --rate centres the first round. A probe passes when the attainment "
    "over the measured requests (middle 60% of the horizon) is >= 0.90 and the run is not overloaded. "
    "With --instance-counts (e.g. 1-4 or 1,2,4,8): the same plan at each instance count (decode instances "
    "of a disaggregated plan), searched together: each count starts from its smaller counts' simulated / "
    "analytic ratio and a probe stops running seeds once a sequential test is sure of its verdict; where "
    "no probe contradicts its bracket the answers equal the one-plan search's to --tol; one row per count "
    "(lecture policy, Poisson arrivals, --scenario only).")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of every sub-command.

    Sub-commands: ``plan``, ``simulate``, ``bench``, ``capacity``, ``ledger``, ``ladder``,
    ``whatif``, ``sweep``, ``calibrate``, ``fleet`` (whose flags :mod:`fastsim.fleet.command`
    parses); each sets ``func`` (the handler) and ``command`` on the parsed
    namespace.

    Returns
    -------
    argparse.ArgumentParser
        Its ``error`` prints one line and exits with status 2 (no usage dump).
    """
    ap = _Parser(prog="fastsim", description="Plan LLM inference deployments: analytic screen, "
                                 "simulation, repair and maximum sustainable rate.")
    from . import __version__
    ap.add_argument("--version", action="version", version=f"fastsim {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)

    sp = sub.add_parser("plan", help="find the cheapest verified deployment")
    _add_workload(sp)
    _add_common(sp)
    sp.add_argument("--gpu", action="append", help="restrict to these GPUs (repeatable; 'all' = every catalog GPU; "
                    "default H100, H200, B200)")
    sp.add_argument("--precision", action="append", choices=None, help="restrict to these precisions (repeatable)")
    sp.add_argument("--tp", action="append", type=_tp, help="GPUs per instance to consider (repeatable; default "
                    "1 2 4 8, and up to 64 for MoE models)")
    sp.add_argument("--layout", action="append", choices=LAYOUTS,
                    help="instance layouts to consider (repeatable; default tp, and all three for MoE models)")
    sp.add_argument("--mode", action="append", choices=("colocated", "disaggregated"), help="restrict the layout")
    sp.add_argument("--top-k", type=_pos_int("--top-k"), default=10, help="plans to verify (default 10)")
    sp.add_argument("--seeds", type=_pos_int("--seeds"), default=None, help="simulation seeds per plan (default 8)")
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
    _add_engine_args(sp, prefixes=False)
    _add_calibration(sp)
    sp.set_defaults(func=_cmd_plan)

    sp = sub.add_parser("simulate", help="simulate one plan at one rate", description=SIMULATE_DESCRIPTION)
    _add_workload(sp)
    _add_common(sp)
    _add_plan_args(sp)
    sp.add_argument("--seeds", type=_pos_int("--seeds"), default=None,
                    help="replications (default 1; a trace replays once)")
    sp.add_argument("--horizon", type=_positive("--horizon"), default=None,
                    help="simulated seconds (default 600; a trace replays over its own duration)")
    sp.add_argument("--seed", type=int, default=0, help="root seed")
    _add_arrival_args(sp)
    sp.add_argument("--lengths", default="lognormal", metavar="lognormal|fixed|trace:NAME",
                    help="length distribution: the scenario's lognormals, their means fixed, or (P, O) pairs "
                         "resampled from a trace (azure-conv, azure-code or a file)")
    sp.add_argument("--plot", metavar="FILE.png", help="TTFT/TPOT CDFs and the queue over time")
    sp.add_argument("--profile", metavar="NAME|FILE.csv",
                    help="time-varying arrivals with the scenario's lengths: a rate profile (m-large, m-mid, m-small, "
                         "deepseek-r1, or a CSV window_start_s,rate_req_per_s); runs over its span unless --horizon "
                         "cuts it; zero-rate windows are gaps (no arrivals)")
    sp.add_argument("--rate-scale", type=_positive("--rate-scale"), default=None, metavar="F",
                    help="with --profile: multiply every rate by F (fit a profile to a fleet size)")
    _add_spec_args(sp)
    _add_calibration(sp)
    sp.set_defaults(func=_cmd_simulate)

    sp = sub.add_parser("bench", help="measure the simulator on the standard workloads")
    sp.add_argument("--format", choices=("table", "json", "csv"), default="table", help="output format")
    sp.add_argument("--quick", action="store_true", help="short horizons and few seeds (a smoke test, seconds)")
    sp.set_defaults(func=_cmd_bench)

    sp = sub.add_parser("capacity", help="maximum sustainable rate of a plan (bisection over seeds), of the plan "
                        "at several instance counts, or time scale of a trace", description=CAPACITY_DESCRIPTION)
    _add_workload(sp)
    _add_common(sp)
    _add_plan_args(sp)
    sp.add_argument("--seeds", type=_pos_int("--seeds"), default=None,
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
    sp.set_defaults(func=_cmd_capacity)
    _add_ledger_commands(sub)
    _add_sweep_command(sub)
    _add_calibrate_command(sub)
    # fleet parses its own flags (fastsim.fleet.command), so building this parser stays light
    sp = sub.add_parser("fleet", help="static, reactive, scheduled and oracle fleets over a rate profile "
                        "(fastsim fleet --help)", add_help=False, prefix_chars="+")
    sp.add_argument("fleet_argv", nargs=argparse.REMAINDER)
    sp.set_defaults(func=_cmd_fleet)
    return ap


def _cmd_fleet(args):
    from .fleet.command import run_fleet
    return run_fleet(args.fleet_argv, _Parser, _add_common, _add_calibration)


def _read_plan_json(args):
    """The plan object chosen by --from-plan / --plan-index (read once), or None."""
    if not getattr(args, "from_plan", None):
        return None
    if getattr(args, "_plan_json", None) is None:
        try:
            text = sys.stdin.read() if args.from_plan == "-" else open(args.from_plan, encoding="utf-8").read()
        except OSError as exc:
            raise FastsimInputError("--from-plan", args.from_plan, f"a readable JSON file ({exc.strerror})") from None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise FastsimInputError("--from-plan", args.from_plan, f"JSON from `fastsim plan --format json` ({exc})") from None
        if isinstance(data, dict):
            data = data["plans"] if isinstance(data.get("plans"), list) else [data]
        if not isinstance(data, list) or not data:
            raise FastsimInputError("--from-plan", args.from_plan, "a non-empty list of plans (the output of "
                                    "`fastsim plan --format json`, or a JSON list of plan objects)")
        if not (0 <= args.plan_index < len(data)):
            raise FastsimInputError("--plan-index", args.plan_index, f"0 to {len(data) - 1}")
        if not isinstance(data[args.plan_index], dict):
            raise FastsimInputError("--from-plan", args.from_plan, "a JSON list of plan objects")
        args._plan_json = data[args.plan_index]
    return args._plan_json


def _resolve_workload(args, cat):
    """(model, demand, source, notes) from --scenario / --trace and overrides.

    With --from-plan, the plan's own rate and SLO targets apply unless given on the command line.
    """
    from .analytic import Demand
    from . import workload as W
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
    q = None if getattr(args, "mean_lengths", False) else 0.9
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
        if wl.n < 2 or not wl.duration_s > 0:
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
                                     ttft_s=args.ttft, tpot_s=args.tpot, latency_quantile=q)
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
                                  latency_quantile=q)
    if planned is not None:
        differ = [f"{what} {a:g} (the scenario's {b:g})" for what, a, b in (
            ("rate", demand.rate_req_per_s, scen.rate_req_per_s), ("P90 TTFT s", demand.ttft_s, scen.ttft_s),
            ("P90 TPOT s", demand.tpot_s, scen.tpot_s)) if not math.isclose(a, b)]
        if differ:
            notes.append(f"--from-plan with --scenario {scen.name}: the plan's own " + ", ".join(differ)
                         + f" apply, with {scen.name}'s request lengths; was the plan made for another scenario?")
    return model, demand, scen, notes


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


def _emit(args, records, table_rows, headers, notes=(), key="rows", row_notes=None):
    """Print the records with the notes, or the table rows and the notes after them.

    JSON: one object ``{key: records, "notes": [...]}`` (strict; see :mod:`fastsim._output`); a
    dict ``records`` is the object itself, with ``notes`` added. CSV: one row per record, the
    notes as a JSON array in a ``notes`` column of every row (``row_notes``: each row's own list).
    """
    from ._output import csv_frame, dumps
    notes = list(notes)
    if args.format == "json":
        doc = dict(records, notes=notes) if isinstance(records, dict) else {key: records, "notes": notes}
        sys.stdout.write(dumps(doc) + "\n")
    elif args.format == "csv":
        csv_frame([records] if isinstance(records, dict) else records, notes,
                  row_notes).to_csv(sys.stdout, index=False)
    else:
        from tabulate import tabulate
        print(tabulate(table_rows, headers=headers, disable_numparse=True))
        for n in notes:
            print("note: " + n)


def _cmd_plan(args):
    from .analytic import ScreenOptions
    cat = _catalog(args)
    unused = []
    if args.no_verify:
        # nothing is simulated: the simulation's flags do not apply (nor the note on a short horizon)
        unused = [f for f, v in (("--seeds", args.seeds), ("--horizon", args.horizon), ("--seed", args.seed))
                  if v is not None]
        args.horizon = None
    model, demand, source, notes = _resolve_workload(args, cat)
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
            from .workload import prefix_reuse_bound
            bound = prefix_reuse_bound(source)
            if args.prefix_hit > bound:
                notes = list(notes) + [f"--prefix-hit {args.prefix_hit:g} is above what even an unbounded cache could "
                                       f"serve on {source.name} ({bound:.3f} of its prompt tokens): the screen "
                                       "sizes plans for hits the trace cannot give"]
    opts = ScreenOptions(gpus=gpus,
                         precisions=tuple(args.precision) if args.precision else None,
                         tps=tuple(args.tp) if args.tp else None,
                         layouts=tuple(args.layout) if args.layout else None,
                         modes=tuple(args.mode) if args.mode else ("colocated", "disaggregated"),
                         constants=_constants(args), queueing=args.screen == "queueing",
                         heterogeneous=args.heterogeneous, **spec_kw)
    for g in opts.gpus or ():
        cat.gpu(g)
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
        if pinned:
            engine["plan_settings"] = True
        notes = list(notes) + [f"verification under the {args.policy} policy ("
                               + ("the settings --emit writes for each plan: its batch and chunk" if pinned else
                                  "its defaults for each plan's GPU" + (", overridden" if len(engine) > 2 else ""))
                               + "; fastsim.sim.policy); disaggregated plans are not simulated under it"]
    d = demand
    head = (f"{model.name}: {d.rate_req_per_s:.4g} req/s, P90 TTFT <= {d.ttft_s:g} s, P90 TPOT <= {d.tpot_s * 1e3:g} ms; "
            + (f"prompt mean {d.mean_prompt_tokens:,.0f} / P90 {d.latency_prompt_tokens:,.0f}, "
               f"output mean {d.mean_output_tokens:,.0f} / P90 {d.latency_output_tokens:,.0f} tokens"
               if not args.mean_lengths else
               f"latency screened with MEAN lengths (prompt {d.mean_prompt_tokens:,.0f}, output "
               f"{d.mean_output_tokens:,.0f} tokens), not P90: a P90 SLO checked with mean lengths "
               "selects plans whose longer requests miss it, whatever their size"))
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
    from .planner import plan_deployment
    if not args.no_verify and engine is None:
        # an empty numba cache: the screen's and the simulations' kernels compile on two cores
        from ._precompile import plan_kernels
        plan_kernels(screen=not opts.screens_extensions)
    bar = None
    if not args.no_verify and args.format == "table" and sys.stderr.isatty():
        from tqdm import tqdm
        bar = tqdm(total=args.top_k, desc="verifying", unit="plan", leave=False, file=sys.stderr)
    report = plan_deployment(model, demand, source, top_k=args.top_k, seeds=args.seeds, horizon_s=args.horizon,
                             verify=not args.no_verify, seed=args.seed, catalog=cat, options=opts,
                             progress=bar.update if bar else None, engine=engine,
                             rejection_budget=args.rejection_budget, search=args.search)
    if bar:
        bar.close()
    report.notes.extend(notes)
    records = [d.to_dict() for d in report.deployments]
    if model.source.startswith("config.json at "):
        # a config.json model: its name is not a catalog name, so record where it came from
        # (simulate / capacity --from-plan load it from there)
        for r in records:
            r["model_path"] = model.source[len("config.json at "):]
    rows = []
    for i, (d, r) in enumerate(zip(report.deployments, records), 1):
        v = r["verification"] or {}
        p = d.plan
        tp = p.label(p.tp) if p.mode == "colocated" else f"P:{p.label(p.prefill_tp)} D:{p.label(p.decode_tp)}"
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
                     _fmt(v.get("attainment"), ".3f"), _fmt(raw.ttft_p90_s if raw else None, ".3f"),
                     _fmt(raw.tpot_p90_s * 1e3 if raw else None, ".1f"),
                     "not run" if not v else ("pass" if v["passed"] else "FAIL"),
                     "no" if rep is None else f"{rep} -> {v['instances_after_repair']}",
                     "not run" if not v else f"{v['rejected_requests']:,}"])

    report.notes.extend(_legend("plan", [(i, (r["verification"] or {}).get("null_reasons", {}))
                                         for i, r in enumerate(records, 1)], _PLAN_LABELS))
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
            report.notes.append(f"plan {i} fails verification: " + (r.reason or "attainment below 0.90"))
        elif r is not None and r.verification.rejected:
            report.notes.append(f"plan {i} passes but rejects {r.verification.rejected:,} requests "
                                "(longer than the model's context or an instance's KV cache)")
    headers = ["#", "GPU", "prec", "mode", "TP", "inst", "GPUs", "$/M out", "$/M analytic", "$/M eff",
               "capacity req/s", "attainment", "TTFT P90 s", "TPOT P90 ms", "verified", "repaired", "rejected"]
    if args.no_verify:  # analytic ranking only: drop the simulation columns
        headers = headers[:11]
        rows = [r[:11] for r in rows]
    if args.search == "verified" and not args.no_verify:   # how the screen saw each verified plan
        headers.append("screen")
        for row, d in zip(rows, report.deployments):
            row.append(d.screen_view or "")
    if spec is not None:   # speculative decoding screened: say which plans use it
        headers.insert(6, "spec dec")
        for row, d in zip(rows, report.deployments):
            row.insert(6, f"gamma {d.plan.spec_gamma}" if d.plan.spec_gamma else "off")
    _emit(args, records, rows, headers, report.notes, key="plans")
    if args.format == "table" and launches:
        print("\n" + "\n\n".join(launches))
    _notes_out(args, report.notes)
    return 0


def _emit_launch(args, report, records, cat, model):
    """Add each plan's ``launch`` commands (:func:`fastsim.emit.launch_commands`) to its record; the
    table's text blocks. A plan the engine cannot run gets ``launch`` None and a note saying why."""
    from .emit import format_launch, launch_commands
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
        report.notes.append(f"--emit pins each plan's analytic batch and chunk; the verification ran under the "
                            f"{getattr(args, 'policy', 'lecture')} policy (--policy {args.emit} verifies these "
                            "settings)")
    return blocks


def _nonneg_int(field):
    def conv(text):
        try:
            v = int(text)
        except ValueError:
            v = -1
        if v < 0:
            raise argparse.ArgumentTypeError(f"got {text!r}; allowed: an integer >= 0")
        return v
    return conv


def _add_ledger_commands(sub):
    """The ``ledger``, ``ladder`` and ``whatif`` sub-commands."""
    sp = sub.add_parser("ledger", help="where the time of one step goes (token ledger)")
    _add_common(sp)
    sp.add_argument("--model", default="llama-3.1-70b", help="catalog model or config.json path (default 70B)")
    sp.add_argument("--gpu", default="H100", help="catalog GPU (default H100)")
    sp.add_argument("--precision", default="BF16", help="catalog precision (default BF16)")
    sp.add_argument("--tp", type=_gpus, default=8, help="GPUs of the instance: the TP degree of the tp layout "
                    "(default 8; must divide the attention heads); any count up to 4096 for dp+ep (e.g. 144)")
    sp.add_argument("--layout", choices=LAYOUTS, default="tp",
                    help="instance layout (MoE models): tp (default), tp+ep or dp+ep over the --tp GPUs")
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
    sp.set_defaults(func=_cmd_ledger)

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
    sp.set_defaults(func=_cmd_ladder)

    sp = sub.add_parser("whatif", help="re-plan while one assumption moves (TPOT, FP8, prices, model, traffic)")
    _add_common(sp)
    sp.add_argument("--study", action="append", choices=("tpot", "fp8", "prices", "model-size", "traffic", "all"),
                    help="study to run (repeatable; default all)")
    sp.add_argument("--no-verify", action="store_true",
                    help="analytic screen only (default: verify when the simulator is available)")
    sp.add_argument("--seeds", type=_pos_int("--seeds"), default=2, help="simulation seeds per plan (default 2)")
    sp.add_argument("--horizon", type=_positive("--horizon"), default=600.0, help="simulated seconds (default 600)")
    sp.add_argument("--top-k", type=_pos_int("--top-k"), default=3, help="plans verified per setting (default 3)")
    sp.add_argument("--seed", type=_nonneg_int("--seed"), default=0, help="root seed (default 0)")
    sp.add_argument("--plot", metavar="DIR", help="write one PNG per study into DIR")
    sp.set_defaults(func=_cmd_whatif)


def _records(df, explain=None):
    """DataFrame -> list of dicts, each with ``null_reasons`` for the fields JSON writes as null.

    ``explain(field, value)`` gives a field's reason (None: ``infinite`` / ``not applicable``).
    """
    from ._output import null_reasons
    out = []
    for rec in df.to_dict(orient="records"):
        rec["null_reasons"] = null_reasons(rec, explain)
        out.append(rec)
    return out


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


def _notes_out(args, notes):
    """Notes after the table on stdout, or on stderr when stdout carries JSON / CSV."""
    if args.format != "table":
        for n in notes:
            print("note: " + n, file=sys.stderr)


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


def _whatif_reason(k, v):
    """``explain`` of the what-if studies' null fields."""
    if k.startswith("lecture_"):
        return ("not applicable: lecture 16 of the course fastsim reproduces prints no figure for this setting "
                "(see docs/REPRODUCTION.md)")
    return None


def _cmd_ledger(args):
    from .ledger import ledger_table, plot_ledger
    _check_plot(args)
    cat = _catalog(args)
    model, gpu, prec = cat.model(args.model), cat.gpu(args.gpu), cat.precision(args.precision)
    _check_context("--context", args.context, model)
    _check_context("--prefill", args.prefill, model)
    from .stepmodel import layout_refusal
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
                      output_tokens=args.output_tokens, constants=_constants(args))
    rows, notes = [], []
    if getattr(args, "calibration", None):
        from .stepmodel import resolve_constants
        k = resolve_constants(_constants(args), gpu, prec, args.tp)
        notes.append(f"--calibration: its efficiencies and all-reduce constants apply here; its per-step overhead "
                     f"({k.overhead_s * 1e3:.3g} ms) does not: the ledger's launch column is --kernels-per-layer x "
                     "--launch-us per layer (SPEC §4), while plan, simulate and capacity add the overhead")
    moe = model.is_moe
    for _, r in df.iterrows():
        kind = f"prefill {r.prefill_tokens}" if r.prefill_tokens else f"decode ctx {r.context_tokens}"
        row = [r.gpu, r.precision, r.tp, r.batch, kind] + [_fmt(r[c] * 1e3, ".3f") for c in (
            ("weight_read_s", "expert_read_s", "kv_read_s", "compute_s", "allreduce_s", "alltoall_s", "launch_s",
             "step_s") if moe else
            ("weight_read_s", "kv_read_s", "compute_s", "allreduce_s", "launch_s", "step_s"))]
        row += [r.binding, _fmt(r.tokens_per_s_per_gpu, ",.1f"), "yes" if r.fits else "NO"]
        what = f"batch {r.batch}, {kind}"
        if not r.fits:
            notes.append(_memory_note(what, r.memory_per_gpu_bytes, r.memory_limit_per_gpu_bytes, gpu))
        if args.rate:
            unstable = r.utilization >= 1.0
            row += [_fmt(r.utilization, ".2f"), "unstable" if unstable else _fmt(r.queue_wait_s * 1e3, ".3f")]
            if unstable and r.prefill_tokens:
                notes.append(f"{what}: the load of {args.rate:g} req/s exceeds the step's service rate of "
                             f"{r.batch / r.step_s:,.1f} prompts/s (utilization {r.utilization:.2f} >= 1): the queue "
                             "is unstable and its wait grows without bound")
            elif unstable:
                notes.append(f"{what}: the load of {args.rate:g} req/s x {args.output_tokens:g} output tokens exceeds "
                             f"the {r.batch / r.step_s:,.1f} tokens/s this step delivers (utilization "
                             f"{r.utilization:.2f} >= 1): the backlog grows without bound")
        rows.append(row)
    headers = (["GPU", "prec", "TP", "batch", "step", "weight ms", "of it experts ms", "KV ms", "compute ms",
                "all-reduce ms", "all-to-all ms", "launch ms", "step ms", "binding", "tokens/s/GPU", "fits"] if moe else
               ["GPU", "prec", "TP", "batch", "step", "weight ms", "KV ms", "compute ms", "all-reduce ms",
                "launch ms", "step ms", "binding", "tokens/s/GPU", "fits"])
    if args.rate:
        headers += ["utilization", "queue wait ms"]
        if any(not p for p in args.prefill):
            notes.append("queue wait n/a for decode rows: a batched decode admits a waiting request at its next "
                         "step, which is not an M/D/1 queue; utilization says whether the step keeps up")
    if args.format == "table":
        print(f"{model.name}: {args.kernels_per_layer} kernels/layer x {args.launch_us:g} us per launch; "
              + ("step = max(weight (dense + experts touched) + KV, compute) + all-reduce + all-to-all + launch; "
                 f"layout {args.layout}" if moe else "step = max(weight + KV, compute) + all-reduce + launch"))
    _emit(args, _records(df, _ledger_reason(args.rate)), rows, headers, notes)
    _notes_out(args, notes)
    if args.plot:
        plot_ledger(df, args.plot, title=f"{model.name}, {gpu.name} {prec.name} TP{args.tp}")
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


def _cmd_ladder(args):
    from .ledger import ladder
    cat = _catalog(args)
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


def _cmd_whatif(args):
    import os
    from . import whatif as W
    studies = args.study or ["all"]
    studies = list(W.STUDIES) if "all" in studies else list(dict.fromkeys(studies))
    _check_plot(args, "dir", files=[f"whatif_{k}.png" for k in studies])
    cat = _catalog(args)
    verify = False if args.no_verify else None
    notes = []
    if verify is None and not W.simulator_available():
        verify = False
        notes.append("the simulator is not available: analytic screen only (plans not verified)")
    try:
        frames = W.run_studies(studies, verify=verify, seeds=args.seeds, horizon_s=args.horizon,
                               top_k=args.top_k, seed=args.seed, catalog=cat)
    except FastsimInputError as exc:
        if exc.field != "horizon_s":
            raise
        raise FastsimInputError("--horizon", exc.value, exc.allowed) from None
    if args.format != "table":
        # the table prints each study's notes under it (format_study); JSON and CSV carry them here
        notes += [f"{k}: {n}" for k, v in frames.items() for n in v.attrs.get("notes", [])]
    if args.format == "json":
        from ._output import dumps
        sys.stdout.write(dumps({"studies": {k: _records(v, _whatif_reason) for k, v in frames.items()},
                                "notes": notes}) + "\n")
    elif args.format == "csv":
        from ._output import csv_frame
        recs = [dict(r, study=k) for k, v in frames.items() for r in _records(v, _whatif_reason)]
        csv_frame(recs, notes).to_csv(sys.stdout, index=False)
    else:
        print("\n\n".join(W.format_study(v) for v in frames.values()))
        for n in notes:
            print("note: " + n)
    if args.plot:
        for k, v in frames.items():
            W.plot_study(v, os.path.join(args.plot, f"whatif_{k}.png"))
        print(f"wrote {len(frames)} PNG files to {args.plot}", file=sys.stderr)
    _notes_out(args, notes)
    return 0


def _add_sweep_command(sub):
    """The ``sweep`` sub-command (implemented in :func:`fastsim.sweep.cli_sweep`)."""
    sp = sub.add_parser("sweep", help="analytic table (and verification) of a Cartesian grid of configurations")
    sp.add_argument("grid", nargs="?", metavar="GRID.toml", help="grid file: an [axes] table and an optional [sweep] table")
    sp.add_argument("--axis", action="append", default=[], metavar="NAME=V1,V2",
                    help="an axis of the grid (repeatable; overrides the file's): model, gpu, precision, mode, tp, "
                         "prefill_tp, decode_tp, layout, chunk_tokens, max_batch, instances, prefill_instances, "
                         "decode_instances, "
                         "scenario, trace, rate_req_per_s, ttft_s, tpot_s, price")
    _add_common(sp)
    _add_trace_reading(sp)
    sp.add_argument("--verify", choices=("none", "top-k-per-scenario", "all"),
                    help="points to simulate (default none, or the grid file's)")
    sp.add_argument("--top-k", type=_pos_int("--top-k"), help="points per scenario group for top-k-per-scenario (default 3)")
    sp.add_argument("--seeds", type=_pos_int("--seeds"), help="simulation seeds per point (default 4)")
    sp.add_argument("--horizon", type=_positive("--horizon"), help="simulated seconds (default 600)")
    sp.add_argument("--seed", type=_nonneg_int("--seed"), help="root seed (default 0)")
    sp.add_argument("--capacity", action="store_true", help="also bisect each verified point for its max sustainable rate")
    sp.add_argument("--out", metavar="FILE", help="write the table: .parquet (needs pyarrow), .csv, .jsonl/.json (JSON Lines)")
    sp.add_argument("--resume", action="store_true", help="keep the points already in --out and do the rest")
    sp.add_argument("--plot", metavar="DIR", help="write Pareto plots (PNG) to this directory, one per question")
    sp.add_argument("--plot-max", type=_pos_int("--plot-max"), default=12, metavar="N",
                    help="plot the first N questions (workload x rate x TTFT x TPOT x price) only (default 12)")
    sp.add_argument("--scheduler", metavar="ADDRESS", help="Dask scheduler address, e.g. tcp://10.0.0.5:8786")
    sp.add_argument("--workers", type=_pos_int("--workers"), help="start a local Dask cluster of N worker processes")
    sp.add_argument("--rows", type=_pos_int("--rows"), default=20, help="rows shown in the table output (default 20)")
    _add_calibration(sp)
    sp.set_defaults(func=_cmd_sweep)


def _add_calibrate_command(sub):
    """The ``calibrate`` sub-command (implemented in :mod:`fastsim.commands.calibrate`)."""
    from .commands.calibrate import add_parser
    add_parser(sub)


def _cmd_sweep(args):
    from .sweep import cli_sweep
    _check_plot(args, "dir")
    return cli_sweep(args)


#: Library parameters whose errors a command names by its flag (when the command has that flag).
_PARAM_FLAGS = {"time_unit": "--time-unit", "routing": "--routing", "horizon_s": "--horizon",
                "skip_invalid": "--skip-invalid"}


def _as_flag(exc: FastsimInputError, parser, command: str) -> FastsimInputError:
    """``exc`` naming the command's flag instead of the library parameter it sets (:data:`_PARAM_FLAGS`)."""
    flag = _PARAM_FLAGS.get(exc.field)
    if flag is None:
        return exc
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    sp = sub.choices.get(command) if sub is not None else None
    if sp is None or not any(flag in a.option_strings for a in sp._actions):
        return exc
    return FastsimInputError(flag, exc.value, exc.allowed)


def main(argv=None) -> int:
    """Entry point of the ``fastsim`` console script (also ``python -m fastsim``).

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments without the program name; default ``sys.argv[1:]``.

    Returns
    -------
    int
        Exit status: the handler's (0 on success), 2 after a :class:`FastsimInputError` (printed
        on one line to stderr), 0 on a broken pipe, 130 on Ctrl-C.

    Raises
    ------
    SystemExit
        From argparse: status 2 on a malformed command line, 0 after ``--help``.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    from ._compile_notice import compile_notice
    try:
        with compile_notice():
            return int(args.func(args) or 0)
    except FastsimInputError as exc:
        print(f"fastsim {args.command}: error: {_as_flag(exc, parser, args.command)}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print(f"fastsim {args.command}: interrupted" + ("; rerun with --resume to continue"
                                                        if args.command == "sweep" else ""), file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())


def _plan_from_args(args, cat, model, demand):
    """(plan, model): the plan named on the command line or read with --from-plan, and its model."""
    plan, model = _plan_from_args_inner(args, cat, model, demand)
    from .stepmodel import kv_budget_tokens
    g, pr = cat.gpu(plan.gpu), cat.precision(plan.precision)
    tps = (plan.prefill_tp, plan.decode_tp) if plan.mode == "disaggregated" else (plan.tp,)
    for tp in tps:
        if kv_budget_tokens(model, pr, g, tp, **plan.layout_kwargs(tp)) < 1:
            need = model.total_params * pr.weight_bytes / tp / 1e9
            raise FastsimInputError("plan", plan.describe(),
                                    f"a configuration whose weights fit: {model.name} in {pr.name} needs "
                                    f"{need:,.1f} GB per GPU at TP{tp}, {g.name} offers "
                                    f"{0.9 * g.hbm_bytes / 1e9:,.1f} GB usable; raise TP"
                                    + (" or use FP8" if pr.weight_bytes > 1.0 else ""))
    return plan, model


def _plan_from_args_inner(args, cat, model, demand):
    from .analytic import MAX_INSTANCES, plan_for
    from .planner import plan_from_record
    if not args.from_plan and getattr(args, "plan_index", 0):
        raise FastsimInputError("--plan-index", args.plan_index, "0 without --from-plan (it picks a plan of the file)")
    if args.from_plan:
        for flag in ("gpu", "precision", "mode", "tp", "layout", "instances", "prefill_tp", "decode_tp",
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
    layout = args.layout or "tp"
    if layout != "tp" and not model.is_moe:
        raise FastsimInputError("--layout", layout, f"tp: {model.name} is dense (expert parallelism and "
                                "data-parallel attention apply to mixture-of-experts models only)")
    return plan_for(model, demand, gpu=args.gpu, precision=args.precision, mode=mode, tp=args.tp or 1,
                    instances=args.instances, prefill_tp=args.prefill_tp, decode_tp=args.decode_tp,
                    prefill_instances=args.prefill_instances, decode_instances=args.decode_instances,
                    chunk_tokens=args.chunk, catalog=cat, layout=layout, options=_options(args)), model


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
    if not hasattr(args, "policy") or pol not in ("lecture", "vllm", "sglang"):
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
    from .analytic import ScreenOptions
    return ScreenOptions(constants=_constants(args))


def _synthetic_workloads(args, scenario, rate):
    """One workload per seed for ``simulate``: --arrival / --cv and --lengths applied."""
    from dataclasses import replace
    from . import workload as W
    if args.arrival == "gamma" and args.cv is None:
        raise FastsimInputError("--cv", None, "a coefficient of variation > 0 (required with --arrival gamma)")
    if args.arrival == "poisson" and args.cv not in (None, 1.0):
        raise FastsimInputError("--cv", args.cv, "1 for Poisson arrivals (or --arrival gamma)")
    cv = 1.0 if args.cv is None else args.cv
    seeds = W.seeds_for(args.seed, args.seeds)
    kind = args.lengths
    if kind.startswith("trace:"):
        trace, read_notes = _read_trace(args, kind[len("trace:"):])
        args._lengths_notes = read_notes
        return [W.synthesize_from_trace(trace, rate, args.horizon, s, arrival=args.arrival, cv=cv) for s in seeds]
    if kind == "fixed":
        scenario = replace(scenario, prompt=replace(scenario.prompt, kind="fixed", sigma=0.0),
                           output=replace(scenario.output, kind="fixed", sigma=0.0))
    elif kind != "lognormal":
        raise FastsimInputError("--lengths", kind, "lognormal, fixed or trace:NAME")
    pre = {}
    if getattr(args, "shared_prefix", None):
        pre["shared_prefix_tokens"] = args.shared_prefix
    if getattr(args, "session_turns", None):
        pre["session_turns"] = args.session_turns
    if getattr(args, "session_gap", None) is not None:
        if not getattr(args, "session_turns", None):
            raise FastsimInputError("--session-gap", args.session_gap, "with --session-turns only")
        pre["session_gap_s"] = args.session_gap
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


def _simulate_profile(args):
    """``simulate --profile``: the rate profile (scaled by --rate-scale), or None; sizes the plan at its peak."""
    from . import workload as W
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
    from dataclasses import replace
    from . import workload as W
    if args.arrival == "gamma" and args.cv is None:
        raise FastsimInputError("--cv", None, "a coefficient of variation > 0 (required with --arrival gamma)")
    if args.arrival == "poisson" and args.cv not in (None, 1.0):
        raise FastsimInputError("--cv", args.cv, "1 for Poisson arrivals (or --arrival gamma)")
    for flag, v in (("--shared-prefix", getattr(args, "shared_prefix", None)),
                    ("--session-turns", getattr(args, "session_turns", None)),
                    ("--session-gap", getattr(args, "session_gap", None))):
        if v is not None:
            raise FastsimInputError(flag, v, "no value with --profile (sessions are drawn at a constant rate)")
    kind = args.lengths
    if kind == "fixed":
        scenario = replace(scenario, prompt=replace(scenario.prompt, kind="fixed", sigma=0.0),
                           output=replace(scenario.output, kind="fixed", sigma=0.0))
    elif kind != "lognormal":
        raise FastsimInputError("--lengths", kind, "lognormal or fixed with --profile")
    cv = 1.0 if args.cv is None else args.cv
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


def _engine_dict(args):
    """The ``engine`` of :mod:`fastsim.search` from the engine flags (None: the lecture policy)."""
    over = [(f, v) for f, v in (("--max-num-batched-tokens", args.max_num_batched_tokens),
                                ("--max-num-seqs", args.max_num_seqs),
                                ("--no-prefix-caching", True if args.no_prefix_caching else None)) if v is not None]
    if args.policy == "lecture":
        if over:
            raise FastsimInputError(over[0][0], over[0][1], "with --policy vllm or sglang only")
        return None
    engine = {"policy": args.policy, "spec_seed": int(getattr(args, "seed", 0) or 0)}
    if args.max_num_batched_tokens is not None:
        engine["max_num_batched_tokens"] = args.max_num_batched_tokens
    if args.max_num_seqs is not None:
        engine["max_num_seqs"] = args.max_num_seqs
    if args.no_prefix_caching:
        engine["prefix_caching"] = False
    return engine


def _engine_setup(args, plan, model, cat, demand=None, prefixes=None):
    """The plan (with the speculation flags), simulator plan, simulate keywords and notes of the engine flags.

    ``prefixes`` says whether the workload carries prefix block ids (None: judged from the flags;
    a trace is then assumed to). ``--routing prefix-aware`` is refused with
    ``--no-prefix-caching`` (nothing cached to route on) and noted on a workload without prefix
    blocks (every request then goes to the least-loaded instance).

    Returns ``(plan, sim plan, kwargs for simulate / simulate_batch, notes)``.
    """
    from dataclasses import replace
    from .search import _engine_kwargs, sim_plan
    from .stepmodel import P_KV_BUDGET_TOKENS
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
    if spec_alpha is not None:
        if engine is None:
            raise FastsimInputError("--spec-alpha", spec_alpha, "with --policy vllm or sglang (the lecture policy "
                                    "does not simulate speculative decoding)")
        from .specdec import spec_decoding
        try:
            spec = spec_decoding(args.sim_spec_gamma or 4, spec_alpha, args.sim_spec_draft, model, catalog=cat)
        except FastsimInputError as exc:
            if exc.field not in ("model", "draft", "spec_draft", "draft_model"):
                raise
            raise FastsimInputError("--spec-draft", args.sim_spec_draft if args.sim_spec_draft is not None
                                    else exc.value, exc.allowed) from None
        if demand is not None and plan.mode == "colocated":
            # the plan re-sized with its draft (analytic capacity, KV budget), as `plan --spec-alpha` sizes it
            from .analytic import plan_for
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
    if engine is not None and plan.mode != "colocated":
        raise FastsimInputError("--policy", args.policy, "lecture for a disaggregated plan (the vllm and sglang "
                                "policies model colocated instances)")
    sp = sim_plan(plan, cat, _constants(args), model=model)
    if plan.spec_gamma and not sp.p[P_KV_BUDGET_TOKENS] > 0:
        raise FastsimInputError("--spec-draft", plan.spec_draft, f"a draft that fits beside {model.name} on "
                                f"{plan.tp} x {plan.gpu} (the pair leaves no KV)")
    kw = dict(_engine_kwargs(engine, plan, cat, model, _constants(args)), routing=args.routing)
    if engine is not None:
        pol = kw["policy"]
        if plan.spec_gamma:
            notes.append(f"speculative decoding: gamma {plan.spec_gamma}, alpha {plan.spec_alpha:g}, draft "
                         f"{plan.spec_draft}; KV budget {int(sp.p[P_KV_BUDGET_TOKENS]):,} tokens with the draft resident")
        from .sim.window import NO_WINDOW, kv_window
        windowed = kv_window(sp.p)[0] != NO_WINDOW
        cache = "off" if not pol.prefix_caching else (
            "on" if not windowed else "on in the engine but not modelled for a sliding-window model (a preempted "
            "request recomputes its whole prompt; prefix blocks are refused)")
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


def _cmd_bench(args):
    from .bench import render_benchmarks, run_benchmarks
    sys.stdout.write(render_benchmarks(run_benchmarks(quick=args.quick), args.format))
    return 0


_SIM_LABELS = {"ttft_p50_s": "TTFT P50", "ttft_p90_s": "TTFT P90", "ttft_p99_s": "TTFT P99",
               "tpot_p90_s": "TPOT P90", "attainment": "attainment", "utilisation": "utilisation"}
_PLAN_LABELS = {"ttft_p90_s": "TTFT P90", "tpot_p90_s": "TPOT P90"}


def _legend(kind, rows, labels):
    """Notes that say what each ``inf`` and ``n/a`` cell of a table means, one per distinct reason.

    ``rows`` is a list of (row label, the row's ``null_reasons``); ``labels`` maps the fields the
    table shows to their column names (other fields are not in the table and need no legend).
    """
    groups = {}
    for who, reasons in rows:
        for k, why in reasons.items():
            if k in labels:
                groups.setdefault((labels[k], why), []).append(str(who))
    out = []
    for (label, why), whos in groups.items():
        sign = "inf" if why.startswith("infinite") else "n/a"
        out.append(f"{label} {sign} ({kind}{'s' if len(whos) > 1 else ''} {', '.join(whos)}): {why}")
    return out


def _utilisation(result, plan, horizon_s):
    """Per instance: accepted requests routed to it per second / its analytic capacity (NaN at capacity 0).

    Prefill instances first for a disaggregated plan, each against the screen's prefill capacity,
    then decode instances against the decode capacity. 0.6 at 60% of the analytic capacity; above 1
    the instance gets more traffic than the screen says it can serve within the SLOs.
    """
    import numpy as np
    from .sim.records import REQ_REJECTED
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
    import numpy as np
    from .analytic import Demand
    from .planner import plan_from_record
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
    from ._output import percentile_reason

    def explain(k, v):
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


def _cmd_simulate(args):
    import numpy as np
    from .search import sim_plan
    from .sim import simulate
    from . import workload as W
    _check_plot(args)
    cat = _catalog(args)
    profile = _simulate_profile(args)
    model, demand, source, notes = _resolve_workload(args, cat)
    plan, model = _plan_from_args(args, cat, model, demand)
    if profile is not None:
        wls, horizon, pnotes = _profile_workloads(args, source, profile, demand)
        notes = list(notes) + pnotes
    elif isinstance(source, W.Workload):
        if args.seeds is not None or args.horizon is not None:
            notes = list(notes) + ["a trace replays once over its own duration: --seeds and --horizon do not apply"]
        wls = [source]
        horizon = float(np.nextafter(source.duration_s, np.inf))
    else:
        args.seeds = 1 if args.seeds is None else args.seeds
        args.horizon = 600.0 if args.horizon is None else args.horizon
        wls = _synthetic_workloads(args, source, demand.rate_req_per_s)
        notes = list(notes) + getattr(args, "_lengths_notes", [])
        horizon = args.horizon
    plan, sp, ekw, enotes = _engine_setup(args, plan, model, cat, demand,
                                          prefixes=any(getattr(w, "prefix", None) is not None for w in wls))
    notes = list(notes) + enotes
    priced, unotes = (plan, []) if isinstance(source, W.Workload) else \
        _priced_for_workloads(args, cat, model, plan, demand, wls)
    notes = list(notes) + unotes
    results = [simulate(sp, w.arrival_s, w.prompt_tokens, w.output_tokens, horizon_s=horizon,
                        ttft_slo_s=demand.ttft_s, tpot_slo_s=demand.tpot_s,
                        max_context_tokens=model.max_context_tokens,
                        prefix=getattr(w, "prefix", None) if "policy" in ekw else None, **ekw) for w in wls]
    engine = "policy" in ekw
    from ._output import null_reasons, percentile_reason
    records = []
    util_why = None
    for i, r in enumerate(results):
        m = r.metrics
        rec = {"seed_index": i, "plan": plan.describe(), "rate_req_per_s": demand.rate_req_per_s,
               "horizon_s": horizon, "requests": int(m.n_requests), "measured": int(m.measured),
               "attainment": m.attainment, "ttft_p50_s": m.ttft_p50_s, "ttft_p90_s": m.ttft_p90_s,
               "ttft_p99_s": m.ttft_p99_s, "tpot_p50_s": m.tpot_p50_s, "tpot_p90_s": m.tpot_p90_s,
               "tpot_p99_s": m.tpot_p99_s, "throughput_tokens_per_s": m.throughput_tokens_per_s,
               "rejected": int(m.rejected), "unfinished": int(m.unfinished), "overloaded": bool(m.overloaded),
               "busy_fraction": [float(x) for x in m.utilisation],
               "utilisation": (_utilisation(r, priced, horizon) if priced is not None
                               else [math.nan] * len(m.utilisation)), "mean_batch": [float(x) for x in m.mean_batch],
               "passed": bool(m.attainment >= 0.9 and not m.overloaded),
               "policy": m.policy, "preemptions": int(m.preemptions),
               "cached_prompt_tokens": int(m.cached_prompt_tokens),
               "cache_hit_fraction": m.cache_hit_fraction,
               "cache_hit_fraction_per_instance": (None if m.cache_hit_fraction_per_instance is None else
                                                   [float(x) for x in m.cache_hit_fraction_per_instance]),
               "spec_tokens_per_round": m.spec_tokens_per_round}
        if util_why is None and not all(math.isfinite(u) for u in rec["utilisation"]):
            util_why = (unotes[0].split(": ", 1)[1] if priced is None and unotes else
                        _screen_infeasible(priced, model, demand, cat, _constants(args)))
        rec["null_reasons"] = null_reasons(rec, _sim_reason(rec, util_why or ""))
        records.append(rec)
    rows = [[r["seed_index"], r["requests"], r["measured"], _fmt(r["attainment"], ".3f"),
             _fmt(r["ttft_p50_s"], ".3f"), _fmt(r["ttft_p90_s"], ".3f"), _fmt(r["ttft_p99_s"], ".3f"),
             _fmt(r["tpot_p90_s"] * 1e3, ".1f"),
             _fmt(r["throughput_tokens_per_s"], ",.0f"), r["rejected"], r["unfinished"],
             "yes" if r["overloaded"] else "no", " ".join(f"{u:.2f}" for u in r["busy_fraction"]),
             " ".join(_fmt(u, ".2f") for u in r["utilisation"]),
             "pass" if r["passed"] else "FAIL"] + ([r["preemptions"], _fmt(r["cache_hit_fraction"], ".3f"),
                                                    _fmt(r["spec_tokens_per_round"], ".2f")] if engine else [])
            for r in records]
    if len(results) > 1:
        # the verdict over all seeds together, as `plan` and `capacity` judge a plan
        from .search import SLO, _pooled
        v = _pooled(results, SLO(demand.ttft_s, demand.tpot_s), (0.2, 0.8), horizon, model.max_context_tokens)
        pooled = {"seed_index": "all", "plan": plan.describe(), "rate_req_per_s": demand.rate_req_per_s,
                  "horizon_s": horizon, "requests": sum(r["requests"] for r in records), "measured": v.measured,
                  "attainment": v.attainment, "ttft_p90_s": v.ttft_p90_s, "tpot_p90_s": v.tpot_p90_s,
                  "rejected": v.rejected, "unfinished": sum(r["unfinished"] for r in records),
                  "overloaded": v.overloaded, "passed": v.passed}
        if engine:
            rounds = [m.spec_tokens_per_round for m in (r.metrics for r in results)]
            pooled.update(policy=v.policy, preemptions=v.preemptions, cache_hit_fraction=v.cache_hit_fraction,
                          spec_tokens_per_round=(float(np.nanmean(rounds)) if not all(map(math.isnan, rounds))
                                                 else math.nan))
        pooled["null_reasons"] = null_reasons(pooled, _sim_reason(pooled))
        records.append(pooled)
        rows.append(["all", pooled["requests"], v.measured, _fmt(v.attainment, ".3f"), "", _fmt(v.ttft_p90_s, ".3f"),
                     "", _fmt(v.tpot_p90_s * 1e3, ".1f"), "", v.rejected,
                     sum(r["unfinished"] for r in records[:-1]), "yes" if v.overloaded else "no", "", "",
                     "pass" if v.passed else "FAIL"] + ([v.preemptions, _fmt(v.cache_hit_fraction, ".3f"),
                                                         _fmt(pooled["spec_tokens_per_round"], ".2f")]
                                                        if engine else []))
        notes = list(notes) + ["row 'all' pools the seeds: attainment over all measured requests, overload "
                               "judged on the mean backlog slope (as plan and capacity judge a plan)"]
    headers = ["seed", "requests", "measured", "attainment", "TTFT P50 s", "TTFT P90 s", "TTFT P99 s",
               "TPOT P90 ms", "tokens/s", "rejected", "unfinished", "overloaded", "busy fraction", "utilisation",
               "SLO"] + (["preemptions", "cache hit", "tokens/round"] if engine else [])
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
                     else f"{demand.rate_req_per_s:g} req/s")
        print(f"{plan.describe()} on {model.name}: {rate_text}, {horizon:g} s; "
              f"P90 TTFT <= {demand.ttft_s:g} s, P90 TPOT <= {demand.tpot_s * 1e3:g} ms")
    notes = list(notes) + _legend("seed", [(r["seed_index"], r["null_reasons"]) for r in records], _SIM_LABELS)
    _emit(args, records, rows, headers, notes, key="runs")
    _notes_out(args, notes)
    if args.plot:
        from .plots import plot_simulation
        plot_simulation(results, args.plot, ttft_slo_s=demand.ttft_s, tpot_slo_s=demand.tpot_s, horizon_s=horizon,
                        title=f"{plan.describe()}, {demand.rate_req_per_s:g} req/s")
    return 0


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


def _screen_infeasible(plan, model, demand, cat, constants=None) -> str:
    """Why the analytic screen gives the plan no capacity (its reason for the plan's instances)."""
    from dataclasses import replace
    from .analytic import ScreenOptions, _REASONS, instance_table
    tps = (plan.tp,) if plan.mode == "colocated" else tuple(sorted({plan.prefill_tp, plan.decode_tp}))
    opts = replace(ScreenOptions(), gpus=(plan.gpu,), precisions=(plan.precision,), tps=tps, layouts=(plan.layout,))
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
    from .search import SLO, horizon_floor
    floor = horizon_floor(plan, prompt_tokens, output_tokens, SLO(demand.ttft_s, demand.tpot_s), catalog=cat,
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
    if not args.tol < 1.0:
        raise FastsimInputError("--tol", args.tol, "a fraction in (0, 1)")
    args.seeds = 16 if args.seeds is None else args.seeds
    args.horizon = 600.0 if args.horizon is None else args.horizon
    args.seed = 0 if args.seed is None else args.seed
    cat = _catalog(args)
    model, demand, source, notes = _resolve_workload(args, cat)
    plan, model = _plan_from_args(args, cat, model, demand)
    return cat, model, demand, source, notes, plan


def _cmd_capacity(args):
    from .search import SLO, check_rate_hint, max_sustainable_rate
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
    if args.arrival == "gamma" and args.cv is None:
        raise FastsimInputError("--cv", None, "a coefficient of variation > 0 (required with --arrival gamma)")
    if args.arrival == "poisson" and args.cv not in (None, 1.0):
        raise FastsimInputError("--cv", args.cv, "1 for Poisson arrivals (or --arrival gamma)")
    table = args.format == "table"
    screen_why = _screen_infeasible(plan, model, demand, cat, _constants(args)) if not plan.capacity_req_per_s > 0 else ""
    if table:
        print(f"{plan.describe()} on {model.name}; P90 TTFT <= {demand.ttft_s:g} s, P90 TPOT <= {demand.tpot_s * 1e3:g} ms; "
              f"{args.seeds} seed{'s' if args.seeds > 1 else ''} x {args.horizon:g} s per probe", flush=True)
        print(_PROBE_HEAD, flush=True)
    live = _ProbeProgress(table)
    try:
        res = max_sustainable_rate(plan, source, SLO(demand.ttft_s, demand.tpot_s), seeds=args.seeds,
                                   horizon_s=args.horizon, rel_tol=args.tol, seed=args.seed, catalog=cat, model=model,
                                   rate_hint_req_per_s=args.rate, routing=args.routing, arrival=args.arrival,
                                   cv=1.0 if args.cv is None else args.cv, on_probe_start=live.start,
                                   on_runs=live.runs if live.bar_wanted else None, on_probe=live.done,
                                   engine=engine,
                                   constants=_constants(args))
    finally:
        live.close()
    rec = res.to_dict()
    rec["plan"] = plan.describe()
    _add_screen_verdict(rec, screen_why)
    notes = list(notes) + list(res.notes) + _capacity_notes(res)
    if table:
        print(_capacity_summary(res, screen_why))
        for n in notes:
            print("note: " + n)
    else:
        _emit(args, rec, [], [], notes)
        _notes_out(args, notes)
    if args.plot:
        from .plots import plot_capacity
        plot_capacity(res, args.plot, title=plan.describe())
    return 0


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
    from dataclasses import replace
    from .search import EARLY_STOP_ALPHA, FIRST_SEEDS, SLO, max_sustainable_rates
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
        print(f"{_plan_without_count(base)} on {model.name}; {label} {_counts_text(counts)}; P90 TTFT <= "
              f"{demand.ttft_s:g} s, P90 TPOT <= {demand.tpot_s * 1e3:g} ms; {args.seeds} "
              f"seed{'s' if args.seeds > 1 else ''} x {args.horizon:g} s per probe", flush=True)
    live = _RoundProgress(len(plans))
    try:
        results = max_sustainable_rates(plans, source, SLO(demand.ttft_s, demand.tpot_s), seeds=args.seeds,
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
        seed_runs = int(sum(res.probe_seeds))
        rec = {key: n}
        if disagg:
            rec["prefill_instances"] = plan.prefill_instances
        rec.update(gpus=plan.gpus, plan=plan.describe(), **res.to_dict())
        del rec["notes"]        # the output's notes hold them, tagged with the count
        rec["seed_runs"] = seed_runs
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
    test = (f"a probe first ran {FIRST_SEEDS} of its {args.seeds} seeds and stopped there when a sequential test "
            f"was sure of the verdict all {args.seeds} would give (one-sided level {EARLY_STOP_ALPHA:g} per "
            "criterion; seed-runs: the runs simulated)" if args.seeds > FIRST_SEEDS else
            f"every probe ran {'all ' if args.seeds > 1 else ''}{seeds_word} (the sequential test looks first at "
            f"{FIRST_SEEDS} seeds, so it needs more --seeds)")
    together = (f"the {len(counts)} counts were searched together: the smallest from its analytic capacity, each "
                "larger one from its analytic capacity times the simulated / analytic ratio of the smaller counts "
                "(the trend of the last two)" if len(counts) > 1 else "the count was searched from its analytic "
                "capacity")
    notes.append(f"{together}, galloping then bisecting to --tol {args.tol:g}; {test}; where no probe contradicts "
                 f"its bracket, each answer equals the one-plan search's (--{key.replace('_', '-')} N without "
                 f"--instance-counts{', with --policy lecture' if plan_notes else ''}) to within --tol")
    headers = [label, "GPUs", "analytic req/s", "simulated req/s", "bracket req/s", "95% CI req/s",
               "sim / analytic", "probes", "seed-runs"]
    # a CSV row: the notes about every count, its own, and the legend of its own cells
    row_notes = [[t for o, t in tagged if o is None or o == i] + notes[len(tagged):legend_at]
                 + _legend("count", [(n, r["null_reasons"])], shown) + notes[legend_end:]
                 for i, (n, r) in enumerate(zip(counts, records))]
    _emit(args, records, rows, headers, notes, key="capacities", row_notes=row_notes)
    _notes_out(args, notes)
    return 0


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
    from .search import MAX_REPLAY_SPAN_S, SLO, check_rate_hint, max_sustainable_scale
    cat = _catalog(args)
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
        print(f"{plan.describe()} on {model.name}; P90 TTFT <= {demand.ttft_s:g} s, P90 TPOT <= "
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
    res = max_sustainable_scale(plan, source, SLO(demand.ttft_s, demand.tpot_s), horizon_s=args.horizon,
                                rel_tol=args.tol, scale_hint=scale_hint, catalog=cat, model=model,
                                routing=args.routing, on_probe=shown,
                                engine=engine, constants=_constants(args))
    rec = res.to_dict()
    rec["plan"] = plan.describe()
    rec["analytic_feasible"] = not screen_why
    rec["analytic_infeasible_reason"] = screen_why or None
    if not screen_why:
        rec["null_reasons"]["analytic_infeasible_reason"] = "not applicable: the analytic screen finds the plan feasible"
    notes = notes + list(res.notes)
    if table:
        print(_scale_summary(res, screen_why))
        for n in notes:
            print("note: " + n)
    else:
        _emit(args, rec, [], [], notes)
        _notes_out(args, notes)
    if args.plot:
        from types import SimpleNamespace
        from .plots import plot_capacity
        # the rate plot in equivalent rates: one replay per probe, no interval
        view = SimpleNamespace(probes=[(p.rate_req_per_s, p.attainment, p.overloaded, p.passed) for p in res.probes],
                               rate_req_per_s=res.rate_req_per_s, ci95=(math.nan, math.nan),
                               analytic_req_per_s=res.analytic_req_per_s)
        plot_capacity(view, args.plot, title=f"{plan.describe()}; {source.name}")
    return 0
