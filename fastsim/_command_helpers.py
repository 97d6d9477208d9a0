"""Helpers of the commands, shared by :mod:`fastsim.cli`, :mod:`fastsim.commands` and the modules that implement commands.

The argparse types and flag groups several commands share (``--format`` / ``--catalog`` /
``--price``, ``--calibration`` / ``--constants``, the workload, plan, speculation and engine flags,
the parser class with one-line errors), what a command's parsed arguments resolve to (the catalog
with ``--catalog`` / ``--price``, the step constants of ``--constants`` / ``--calibration`` and the
notes that say which, the distinct values of a repeatable flag, the one ``--from-plan`` reader),
the notes on how a trace was read, table cells, how a command prints its records and notes, the
``--plot`` check. :mod:`fastsim.sweep`, :mod:`fastsim.fleet` and :mod:`fastsim.calibrate` use them
without importing the command line (which imports them), and this module imports none of them.
"""
from __future__ import annotations

import argparse
import math
import sys

from .errors import FastsimInputError, require_positive
from .layouts import LAYOUTS


def _tp(text):
    """``--tp``: a power of two from 1 to 64 (argparse type; the error names the flag and the range)."""
    from .errors import require_tp
    try:
        return require_tp("--tp", int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}; allowed: a power of two from 1 to 64") from None


def _tp_list(text):
    """``--tp`` of ``plan``: one TP or a comma list (``8,16``), each a power of two from 1 to 64 (argparse type)."""
    out = [_tp(t.strip()) for t in str(text).split(",") if t.strip()]
    if not out:
        raise argparse.ArgumentTypeError(f"got {text!r}; allowed: powers of two from 1 to 64, e.g. 8 or 8,16")
    return out


def _pp(text):
    """``--pp``: pipeline stages, an integer from 1 to 4096 (argparse type; the model's layers are checked
    once the model is known, :func:`fastsim.plans.check_pp`)."""
    try:
        v = int(str(text).strip())
    except ValueError:
        v = 0
    if not 1 <= v <= 4096:
        raise argparse.ArgumentTypeError(f"got {text!r}; allowed: an integer from 1 to the model's layers "
                                         "(pipeline stages)")
    return v


def _pp_list(text):
    """``--pp`` of ``plan``: one stage count or a comma list (``1,2``), as :func:`_pp` (argparse type)."""
    out = [_pp(t) for t in str(text).split(",") if t.strip()]
    if not out:
        raise argparse.ArgumentTypeError(f"got {text!r}; allowed: integers >= 1, e.g. 2 or 1,2,4")
    return out


def _number(flag, check, allowed):
    """An argparse type: a float that passes ``check``, else an error naming ``allowed``."""
    def conv(text):
        try:
            v = float(text)
        except ValueError:
            v = math.nan
        if not check(v):
            raise argparse.ArgumentTypeError(f"got {text!r}; allowed: {allowed}")
        return v
    return conv


def _positive(flag):
    """An argparse type: a finite number > 0."""
    return _number(flag, lambda v: math.isfinite(v) and v > 0, "a finite number > 0")


def _slo_percentile(text):
    """``--slo-percentile``: a number from 50 to 99.9 (argparse type; the error names the flag and the range)."""
    from .plans import SLO_PERCENTILE_RANGE
    lo, hi = SLO_PERCENTILE_RANGE
    return _number("--slo-percentile", lambda v: lo <= v <= hi,
                   f"a percentile from {lo:g} to {hi:g} (default 90: P90 TTFT and TPOT)")(text)


def _add_slo_percentile(sp):
    """``--slo-percentile P``: the percentile at which TTFT and TPOT are judged (default 90)."""
    sp.add_argument("--slo-percentile", type=_slo_percentile, default=None, metavar="P",
                    help="judge TTFT and TPOT at this percentile, 50 to 99.9 (default 90): a plan passes when P%% "
                         "of its measured requests meet both targets, and the screen checks latency with the P-th "
                         "percentile lengths")


def _int_at_least(lo):
    """An argparse type: an integer >= ``lo``."""
    def conv(text):
        try:
            v = int(text)
        except ValueError:
            v = lo - 1
        if v < lo:
            raise argparse.ArgumentTypeError(f"got {text!r}; allowed: an integer >= {lo}")
        return v
    return conv


def _pos_int(field):
    """An argparse type: an integer >= 1."""
    return _int_at_least(1)

#: Most replications ``--seeds`` takes. The seeds' workloads are drawn and held together (each up to
#: :data:`fastsim.workload.MAX_REQUESTS` requests, the bound ``--horizon`` meets through the rate) and
#: simulated one after another, so the seeds multiply both; 1,024 seeds narrow an interval across seeds
#: to 1/32 of one seed's spread (1/sqrt(n)), past which a longer ``--horizon`` is the cheaper precision.
MAX_SEEDS = 1024


class _FlagValueError(FastsimInputError, argparse.ArgumentTypeError):
    """A :class:`FastsimInputError` raised by an argparse type: argparse prints ``argument FLAG: got
    ...; allowed: ...`` on one line and exits with status 2."""

    def __str__(self):
        return f"got {self.value!r}; allowed: {self.allowed}"


def _seeds(text):
    """``--seeds``: an integer from 1 to :data:`MAX_SEEDS` (argparse type; the error names the flag,
    the value and the range)."""
    try:
        v = int(text)
    except ValueError:
        v = 0
    if not 1 <= v <= MAX_SEEDS:
        raise _FlagValueError("--seeds", text, f"an integer from 1 to {MAX_SEEDS:,} (replications are drawn and "
                                               "held together; a longer --horizon narrows the interval further)")
    return v


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

def _gpus(text):
    """GPUs of one instance for the ledger: any integer from 1 to 4096 (EP144 is 18 nodes of 8)."""
    try:
        v = int(text)
    except ValueError:
        v = 0
    if not 1 <= v <= 4096:
        raise argparse.ArgumentTypeError(f"got {text!r}; allowed: an integer from 1 to 4096 (GPUs of the instance)")
    return v

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


def _distinct(flag, values, canon=None):
    """The values of a repeatable flag, each once; a value named twice is refused, as ``sweep`` refuses it.

    Parameters
    ----------
    flag : str
        The flag, for the error.
    values : sequence
        Its values as given.
    canon : callable, optional
        ``canon(value)``: the list of values a given one names (``["B200"]`` for ``b200``, every
        catalog GPU for ``all``); default ``[value]``.

    Returns
    -------
    tuple
        The values named, in order.

    Raises
    ------
    FastsimInputError
        Naming the flag and the first value that names one named before it (also spelled otherwise).
    """
    from .errors import FastsimInputError
    seen = {}
    for v in values:
        for c in (canon(v) if canon else [v]):
            if c in seen:
                first = seen[c]
                raise FastsimInputError(flag, v, "distinct values (this one is repeated" + (
                    f": {first!r} and {v!r} both name {c})" if str(first) != str(v) else ")"))
            seen[c] = v
    return tuple(seen)


# ---------------------------------------------------------------------------- the parser and shared flag groups

class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump) and exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")

class _Given(argparse.Action):
    """Store the value and set ``<dest>_given`` (a flag given on the command line, not its default)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, self.dest + "_given", True)

def _add_common(sp):
    sp.add_argument("--format", choices=("table", "json", "csv"), default="table", help="output format")
    sp.add_argument("--catalog", action="append", default=[], metavar="FILE",
                    help="TOML/JSON file adding or overriding GPUs, precisions, models, scenarios (repeatable)")
    sp.add_argument("--price", action="append", default=[], type=_price, metavar="GPU=USD",
                    help="override a GPU's price in $/hour (repeatable)")

def _add_calibration(sp):
    """``--calibration FILE`` and ``--constants fitted|lecture``: the step constants (read with :func:`_constants`)."""
    sp.add_argument("--calibration", metavar="FILE.toml",
                    help="step-model constants per GPU and precision from `fastsim calibrate` (replaces --constants; "
                         "a file tagged with another engine than the run's policy is noted)")
    _add_constants(sp, "fitted (default): a run on an engine's policy (--policy trtllm, vllm, sglang) uses the "
                       "calibration fitted to that engine's measurements where one ships (fastsim/data/calibrations/), "
                       "else SPEC §3's; the lecture policy keeps SPEC §3's; lecture: SPEC §3's everywhere")


def _add_constants(sp, text):
    """``--constants fitted|lecture`` (default None: not given, which is ``fitted``;
    :data:`fastsim.constants.CONSTANTS_CHOICES`, not imported here to keep the parser light)."""
    sp.add_argument("--constants", choices=("fitted", "lecture"), default=None, help=text + " (not with --calibration)")

def _add_workload(sp, require_slo=False):
    src = sp.add_mutually_exclusive_group()
    src.add_argument("--scenario", help="built-in or catalog scenario (chat, coding-agent, offline-batch, low-latency-8b)")
    src.add_argument("--trace", help="azure-conv, azure-code, or a path to an Azure CSV / Mooncake JSONL trace")
    _add_trace_reading(sp)
    sp.add_argument("--model", help="catalog model name or path to a Hugging Face config.json")
    sp.add_argument("--rate", type=_positive("--rate"), help="target rate in req/s (rescales a trace's time axis)")
    sp.add_argument("--ttft", type=_positive("--ttft"), help="P90 TTFT target in seconds")
    sp.add_argument("--tpot", type=_positive("--tpot"), help="P90 TPOT target in seconds")
    _add_slo_percentile(sp)

def _add_trace_reading(sp):
    """--time-unit and --skip-invalid: how a trace file is read."""
    sp.add_argument("--time-unit", choices=("s", "ms"),
                    help="unit of a trace file's numeric timestamps (default: ms for Mooncake JSONL, s for CSV; "
                         "date-time CSV timestamps need none); a warning names an implausible implied rate")
    sp.add_argument("--skip-invalid", action="store_true",
                    help="drop trace rows with prompt or output tokens below 1 (failed requests) and say how many "
                         "and why, instead of refusing the file at the first such row")

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
                        "--decode-tp); with --pp, the TP of one pipeline stage (at most a node)")
    g.add_argument("--pp", type=_pp, default=None,
                   help="pipeline stages per instance (colocated; default 1): the instance has --tp x --pp GPUs, "
                        "simulated under the lecture or trtllm policy")
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
    _add_arrival_flags(sp)
    _add_engine_args(sp, prefixes=prefixes)

def _add_arrival_flags(sp):
    """``--arrival`` and ``--cv``: the arrival process of synthetic workloads (read with :func:`_arrival_cv`)."""
    sp.add_argument("--arrival", choices=("poisson", "gamma"), default="poisson",
                    help="arrival process of synthetic workloads (gamma: burstier with --cv > 1)")
    sp.add_argument("--cv", type=_positive("--cv"), help="inter-arrival coefficient of variation (with --arrival gamma)")


def _arrival_cv(args) -> float:
    """The inter-arrival coefficient of variation of ``--arrival`` / ``--cv``, checked: 1 for Poisson.

    Raises
    ------
    FastsimInputError
        ``--arrival gamma`` without ``--cv``, or a ``--cv`` other than 1 with Poisson arrivals.
    """
    if args.arrival == "gamma" and args.cv is None:
        raise FastsimInputError("--cv", None, "a coefficient of variation > 0 (required with --arrival gamma)")
    if args.arrival == "poisson" and args.cv not in (None, 1.0):
        raise FastsimInputError("--cv", args.cv, "1 for Poisson arrivals (or --arrival gamma)")
    return 1.0 if args.cv is None else float(args.cv)


def _pct(percentile) -> str:
    """The label of an SLO percentile: ``P90``, ``P99``, ``P99.9``."""
    return f"P{float(90.0 if percentile is None else percentile):g}"


def _add_engine_args(sp, prefixes: bool):
    g = sp.add_argument_group("engine policy (colocated plans)")
    g.add_argument("--policy", choices=("lecture", "vllm", "sglang", "trtllm"), default="lecture", action=_Given,
                   help="scheduler: lecture (reserve P + O at admission, chunk on top of decodes; default), vllm "
                        "(shared token budget, 16-token KV blocks on demand, preemption), sglang (prefill first, "
                        "token KV, retraction) or trtllm (GUARANTEED_NO_EVICT); the engines' defaults for the plan's "
                        "GPU, and the step constants fitted to the engine's measurements where they ship (trtllm; "
                        "--constants lecture: SPEC §3's)")
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


def _catalog(args):
    """The catalog of a command: ``--catalog`` files (default: the built-in one) with ``--price`` overrides."""
    from .catalog import default_catalog, load_catalog
    cat = load_catalog(args.catalog) if args.catalog else default_catalog()
    if args.price:
        # one price per GPU (names compare as the catalog resolves them): a second one is refused
        seen = {}
        for gpu, usd in args.price:
            try:
                key = cat.gpu(gpu).name
            except Exception:    # noqa: BLE001  (an unknown name: with_prices names it below)
                key = str(gpu)
            if key in seen:
                from .errors import FastsimInputError
                raise FastsimInputError("--price", f"{gpu}={usd:g}", f"one price per GPU ({key} already has "
                                        f"--price {seen[key]})")
            seen[key] = f"{gpu}={usd:g}"
        cat = cat.with_prices(dict(args.price))
    return cat


def _command_catalog(args):
    """The catalog of a command being run: ``args._read_catalog(args)`` where :func:`fastsim.cli.main`
    set it, else :func:`_catalog`.

    ``main`` sets ``args._read_catalog`` to the ``_catalog`` of :mod:`fastsim.cli`, looked up when the
    command starts, so that a replaced ``fastsim.cli._catalog`` is the one every command reads (a
    test replaces it to see that each command checks its flags before any work).

    Parameters
    ----------
    args : argparse.Namespace

    Returns
    -------
    Catalog
    """
    return getattr(args, "_read_catalog", _catalog)(args)


def _constants_choice(args, policy=None):
    """The step constants of a command's run and its notes (:func:`fastsim.constants.choose_step_constants`).

    Parameters
    ----------
    args : argparse.Namespace
        ``--calibration``, ``--constants`` and ``--policy`` (absent: the lecture policy, as in
        ``ledger``, ``sweep`` and ``fleet``, whose runs have no engine).
    policy : str, optional
        The run's policy where it is not ``args.policy``.

    Returns
    -------
    fastsim.constants.ConstantsChoice
        One per policy and command (kept on ``args``: a calibration file is read once, and
        :func:`_constants_notes` says what every run of the command used).
    """
    from .constants import choose_step_constants
    policy = policy or getattr(args, "policy", None) or "lecture"
    made = args.__dict__.setdefault("_constants_choices", {})
    if policy not in made:
        path = getattr(args, "calibration", None) or None
        made[policy] = choose_step_constants(policy, getattr(args, "constants", None), path,
                                             catalog=_catalog(args) if path else None,
                                             policy_flag=hasattr(args, "policy"))
    return made[policy]


def _constants(args, policy=None):
    """The step constants of a command: :func:`_constants_choice`'s (SPEC §3's, a shipped fit, or --calibration's)."""
    return _constants_choice(args, policy).constants


def _constants_notes(args) -> list:
    """The notes on the step constants a command used: each run's choice (the current policy's at least)."""
    _constants_choice(args)
    out = []
    for choice in args._constants_choices.values():
        out += [n for n in choice.notes if n not in out]
    return out


def _trace_notes(wl):
    """Notes on how a trace was read: rows dropped by --skip-invalid, a rate that suggests the wrong unit."""
    notes = []
    if wl.dropped:
        kinds = {}
        for line, why in wl.dropped:
            for part in why.split(", "):
                kinds.setdefault(part, []).append(line)
        notes.append(f"trace {wl.name}: --skip-invalid dropped {len(wl.dropped):,} rows: " + "; ".join(
            f"{len(lines):,} with {what} (first at line {lines[0]})" for what, lines in kinds.items()))
    if wl.n > 1:
        import numpy as np
        _, counts = np.unique(wl.arrival_s, return_counts=True)
        shared = int(counts[counts > 1].sum())
        if shared > 0.1 * wl.n:
            notes.append(f"trace {wl.name}: {shared:,} of {wl.n:,} requests share their arrival time with another "
                         f"(up to {int(counts.max())} at one instant, {counts.shape[0]:,} distinct times): those "
                         "bursts stay bursts at every time scale (a slower replay cannot spread them)")
    from .workload import trace_rate_warning
    warn = trace_rate_warning(wl)
    if warn:
        print("warning: " + warn, file=sys.stderr)
        notes.append("warning: " + warn)
    return notes


def _read_trace(args, name):
    """(workload, notes): a trace read with --time-unit / --skip-invalid, its drops and rate warning noted."""
    from . import workload as W
    wl = W.read_trace(name, time_unit=getattr(args, "time_unit", None),
                      skip_invalid=getattr(args, "skip_invalid", False))
    return wl, _trace_notes(wl)


def _fmt(x, spec):
    """A table cell: ``inf`` for +inf, ``n/a`` for a missing or undefined value (see :mod:`fastsim._output`)."""
    from ._output import cell
    return cell(x, spec)


# ---------------------------------------------------------------------------- printing records and notes

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

def _notes_out(args, notes):
    """Notes after the table on stdout, or on stderr when stdout carries JSON / CSV."""
    if args.format != "table":
        for n in notes:
            print("note: " + n, file=sys.stderr)

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


def _check_plot(args, kind="file", files=()):
    """Check ``--plot`` before any work (one-line error, exit 2, instead of a traceback after the run)."""
    if getattr(args, "plot", None) is not None:
        from .plots import check_plot_path
        check_plot_path(args.plot, kind, files=files)


def _record_model(args, cat, record):
    """The model of a --from-plan record: its ``model_path`` (a config.json model) or catalog name.

    ``--model`` may name the same model (a catalog name, or a config.json path whose model has
    the record's name); another model is refused.

    Parameters
    ----------
    args : argparse.Namespace
    cat : Catalog
    record : dict
        The plan object (``model``, and ``model_path`` for a model read from a config.json).

    Returns
    -------
    Model

    Raises
    ------
    FastsimInputError
        ``--model`` names another model, or the record's model can be loaded neither from its
        ``model_path`` nor from the catalog (then ``--model PATH`` is the way to give it).
    """
    from .errors import FastsimInputError
    name = record["model"]
    if args.model:
        given = cat.model(args.model)
        if given.name != name:
            raise FastsimInputError("--model", args.model, f"the plan's own model {name!r} (or no --model)")
        return given
    path = record.get("model_path")
    if isinstance(path, str) and path:
        try:
            return cat.model(path)
        except FastsimInputError as exc:
            raise FastsimInputError("--from-plan", args.from_plan, f"a plan whose model_path {path!r} can be read "
                                    f"({exc}); or give --model PATH to the config.json of {name!r}") from None
    try:
        return cat.model(name)
    except FastsimInputError:
        raise FastsimInputError("--from-plan", args.from_plan, f"a plan whose model {name!r} is a catalog name "
                                "(a config.json model needs its model_path in the record, or --model PATH to "
                                "that config.json)") from None


def _read_plan_json(args, empty: str = "a non-empty list of plans (the output of `fastsim plan --format json`, or a "
                    "JSON list of plan objects)"):
    """The plan object chosen by --from-plan / --plan-index (read once), or None.

    The one reader of ``--from-plan`` (``simulate``, ``capacity`` and ``fleet``): a file, or ``-``
    for stdin, holding the output of ``fastsim plan --format json`` (``{"plans": [...]}``), one
    plan object, or a JSON list of plan objects. The object is kept in ``args._plan_json``, so
    stdin is read once.

    Parameters
    ----------
    args : argparse.Namespace
        With ``from_plan`` and ``plan_index``.
    empty : str, optional
        What is allowed, in the error for an empty list (each command words it its own way).

    Returns
    -------
    dict or None
        The plan object; None without ``--from-plan``.

    Raises
    ------
    FastsimInputError
        An unreadable file, text that is not JSON, an empty list, a ``--plan-index`` past the
        list, or an entry that is not an object.
    """
    if not getattr(args, "from_plan", None):
        return None
    if getattr(args, "_plan_json", None) is None:
        import json
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
            raise FastsimInputError("--from-plan", args.from_plan, empty)
        if not (0 <= args.plan_index < len(data)):
            raise FastsimInputError("--plan-index", args.plan_index, f"0 to {len(data) - 1}")
        if not isinstance(data[args.plan_index], dict):
            raise FastsimInputError("--from-plan", args.from_plan, "a JSON list of plan objects")
        args._plan_json = data[args.plan_index]
    return args._plan_json
