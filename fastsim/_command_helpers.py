"""Helpers of the commands, shared by :mod:`fastsim.cli` and the modules that implement commands.

What a command's parsed arguments resolve to (the catalog with ``--catalog`` / ``--price``, the
step constants of ``--calibration``, the distinct values of a repeatable flag), the notes on how a
trace was read, table cells, the ``--plot`` check. :mod:`fastsim.sweep` and :mod:`fastsim.calibrate`
use them without importing the command line (which imports them), and this module imports neither.
"""
from __future__ import annotations

import argparse
import math
import sys


def _tp(text):
    """``--tp``: a power of two from 1 to 64 (argparse type; the error names the flag and the range)."""
    from .errors import require_tp
    try:
        return require_tp("--tp", int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}; allowed: a power of two from 1 to 64") from None


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


def _constants(args):
    """The step constants of a command: StepConstants(), or the calibration read from --calibration."""
    from .stepmodel import StepConstants
    if not getattr(args, "calibration", None):
        return StepConstants()
    if getattr(args, "_calibration", None) is None:
        from .constants import load_calibration
        args._calibration = load_calibration(args.calibration, catalog=_catalog(args))
    return args._calibration


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


def _fmt(x, spec):
    """A table cell: ``inf`` for +inf, ``n/a`` for a missing or undefined value (see :mod:`fastsim._output`)."""
    from ._output import cell
    return cell(x, spec)


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
