"""The ``fastsim validate`` command: fastsim beside real engines, row by row (:mod:`fastsim.validate`).

:func:`add_parser` adds the sub-command and its flags (with light imports only); :func:`run` reads
the measurement file, runs every row the way its benchmark ran on its engine's policy (on the step
constants of ``--constants`` / ``--calibration``: by default each engine's shipped fit, in sample on
the shipped set, which a note says; SPEC §3's for an engine without one), and prints
per row the real figure, fastsim's and their ratio, then the median absolute percentage error and
the geometric-mean ratio per metric, engine and source family (a table, JSON or CSV), and draws
``--plot``.
"""
from __future__ import annotations

from .._command_helpers import _add_constants, _check_plot, _command_catalog, _fmt
from ..errors import FastsimInputError

__all__ = ["add_parser", "run"]

_ENGINES = ("trtllm", "vllm", "sglang")


def add_parser(sub):
    """Add the ``validate`` sub-command to ``sub`` (an argparse sub-parsers action); its handler is :func:`run`.

    Parameters
    ----------
    sub : argparse._SubParsersAction
        The sub-commands of ``fastsim``'s parser.
    """
    sp = sub.add_parser("validate", help="run published measurements of real engines (TensorRT-LLM, vLLM, SGLang) "
                        "the way their benchmarks ran and print fastsim's figure beside each, with the median "
                        "error per metric, engine and source")
    sp.add_argument("measurements", nargs="?", metavar="MEASUREMENTS.csv",
                    help="measurement file (schema: fastsim/data/measurements/README.md; relative model and trace "
                    "paths resolve against it); default: the shipped set, fastsim/data/measurements/measurements.csv, "
                    "read with its user GPU entries (gpus_custom.toml beside it), as is a copy of it (the same bytes); "
                    "another file needs --catalog for GPUs fastsim does not ship)")
    sp.add_argument("--format", choices=("table", "json", "csv"), default="table", help="output format")
    sp.add_argument("--catalog", action="append", default=[], metavar="FILE",
                    help="TOML/JSON file adding or overriding GPUs, precisions, models (repeatable)")
    sp.add_argument("--calibration", action="append", default=[], metavar="FILE.toml",
                    help="step-model constants from `fastsim calibrate` (repeatable: a file tagged with an engine "
                    "applies to that engine's rows, an untagged one to every other row)")
    _add_constants(sp, "fitted (default): the calibrations fitted to the shipped set (fastsim/data/calibrations/, "
                       "one per engine whose fit beat SPEC §3's on held-out rows), each on its engine's rows, SPEC "
                       "§3's on the other rows; on the shipped set those rows are in sample (the held-out errors are "
                       "in docs/VALIDATION.md); lecture: SPEC §3's on every row")
    sp.add_argument("--plot", metavar="FILE.png", help="predicted against real, log-log, coloured by engine")
    sp.add_argument("--engine", action="append", choices=_ENGINES, metavar="ENGINE",
                    help="only the rows of this engine: trtllm, vllm or sglang (repeatable)")
    sp.add_argument("--only", nargs="+", metavar="ID", help="only the rows with these ids")
    sp.set_defaults(func=run, price=[])


def _rows_table(recs):
    def val(r, k):
        v = r[k]
        if v is None:
            return "n/a"
        return _fmt(v, ",.1f") if r["metric"] == "output_tokens_per_s" else _fmt(v * 1e3, ",.2f")
    return [[r["id"], r["engine"], r["benchmark"], r["metric"] + (" (tok/s)" if r["metric"] == "output_tokens_per_s"
                                                                    else " (ms)"), r["stat"], val(r, "real"),
             val(r, "predicted"), _fmt(r["ratio"], ".3f"), _fmt(r["abs_pct_error"], ".1f"),
             "" if r["reason"] is None else "not expressed: " + r["reason"]] for r in recs]


def _summary_rows(summary):
    out = []
    for kind, key in (("overall", None), ("metric", "per_metric"), ("engine", "per_engine"),
                      ("source family", "per_family"), ("metric / engine", "per_metric_engine")):
        groups = {"all": summary["overall"]} if key is None else summary[key]
        for name, g in groups.items():
            out.append([kind, name, g["rows"], _fmt(g["median_abs_pct_error"], ".1f"), _fmt(g["geomean_ratio"], ".3f")])
    return out


def _engine_choices(constants, engines, shipped: bool):
    """The step constants of each engine's rows (``--constants``) and the notes that say which.

    Each engine's choice is :func:`fastsim.constants.choose_step_constants`'s for its policy, as a
    planning command on that policy would run. With the fitted constants, the shipped set's rows of
    an engine whose fit ships are the rows it was fitted on: in sample, which the note says.

    Parameters
    ----------
    constants : {"fitted", "lecture"} or None
        ``--constants`` (None: fitted).
    engines : list of str
        The engines of the rows run.
    shipped : bool
        Whether the rows are the shipped measurement set's.

    Returns
    -------
    (dict, list of str)
        ``{engine: constants}`` for :func:`fastsim.validate.run_measurements`, and the notes.
    """
    from ..constants import ENGINES, choose_step_constants
    choices = {e: choose_step_constants(e, constants) for e in ENGINES}
    table = {e: c.constants for e, c in choices.items()}
    fitted = [e for e in engines if choices[e].kind == "fitted"]
    if not fitted:
        how = "--constants lecture" if constants == "lecture" else f"no {', '.join(engines)} fit ships"
        return table, [f"step constants: SPEC §3's on every row ({how})"]
    rest = [e for e in engines if e not in fitted]
    notes = [choices[e].note.replace("step constants:", f"step constants of the {e} rows:", 1)
             .replace("; --constants lecture for SPEC §3's", "") for e in fitted]
    if rest:
        notes.append(f"step constants of the {', '.join(rest)} rows: SPEC §3's (no {', '.join(rest)} fit ships)")
    which = ", ".join(fitted)
    if shipped:
        notes.append(f"with fitted constants the {which} rows are IN SAMPLE: the calibration was fitted on these very "
                     "rows, so their errors here flatter it; the held-out errors (each source family run on constants "
                     "fitted without it) are in docs/VALIDATION.md, \"Constants fitted to these rows, "
                     "cross-validated\"; --constants lecture runs SPEC §3's on every row")
    else:
        notes.append(f"the {which} rows run on constants fitted to the shipped measurement set, not to these rows; "
                     "--constants lecture runs SPEC §3's on every row")
    return table, notes


def run(args) -> int:
    """Run ``fastsim validate``: :func:`fastsim.validate.validate` on the measurement file.

    Prints one line per row (id, engine, benchmark, metric, statistic, real, fastsim, ratio,
    absolute % error, or why the row is not expressed) and the summary, or one JSON object
    ``{"rows": [...], "summary": {...}, "notes": [...]}`` (a row fastsim cannot express has
    ``predicted: null`` and its ``reason``), or CSV (one row per measurement, the notes in a
    column); writes ``--plot``.

    Returns
    -------
    int
        Exit status 0.

    Raises
    ------
    FastsimInputError
        Bad input (the CLI prints one line and exits with status 2): the reader's errors, an
        ``--only`` id the file does not have, a filter that leaves no row, ``--constants`` with
        ``--calibration``.
    """
    import sys
    from pathlib import Path
    from .._output import csv_frame, dumps
    from ..validate import SHIPPED_CATALOG, SHIPPED_MEASUREMENTS, is_shipped_set, read_measurements, validate
    _check_plot(args)
    path = Path(args.measurements) if args.measurements else SHIPPED_MEASUREMENTS
    notes = []
    if is_shipped_set(path):
        given = {Path(c).resolve() for c in args.catalog}
        if SHIPPED_CATALOG.resolve() not in given:
            args.catalog = [str(SHIPPED_CATALOG)] + list(args.catalog)
        notes.append("the shipped measurement set, read with its user GPU entries (gpus_custom.toml beside it)")
    cat = _command_catalog(args)
    if args.constants is not None and args.calibration:
        raise FastsimInputError("--constants", args.constants, "no value with --calibration (the files give the "
                                "constants: a tagged file its engine's rows, an untagged one every other row)")
    if args.calibration:
        from ..constants import load_calibration
        constants = [load_calibration(f, catalog=cat) for f in args.calibration]
    ms = read_measurements(path, cat)
    if args.only:
        ids = {m.id for m in ms}
        bad = [i for i in args.only if i not in ids]
        if bad:
            raise FastsimInputError("--only", bad[0], f"ids of {path.name} ({len(ids):,} rows)")
        keep = set(args.only)
        ms = [m for m in ms if m.id in keep]
    if args.engine:
        ms = [m for m in ms if m.engine in args.engine]
        if not ms:
            raise FastsimInputError("--engine", ",".join(args.engine), "an engine with rows in the selection")
    if not args.calibration:
        constants, cnotes = _engine_choices(args.constants, sorted({m.engine for m in ms}), is_shipped_set(path))
        notes += cnotes
    report = validate(ms, cat, constants)
    doc = report.to_dict()
    notes += doc["notes"]
    if args.calibration:
        notes.append("step constants from " + ", ".join(args.calibration) + ": a file tagged with an engine on "
                     "that engine's rows only, an untagged one on every other row (the rest on SPEC §3's)")
    left = doc["summary"]["not_expressed"]
    if left:
        why = "; ".join(f"{h}: {n:,}" for h, n in doc["summary"]["not_expressed_reasons"].items())
        notes.append(f"{left:,} of {doc['summary']['rows']:,} rows not expressed (each with its reason; {why}); "
                     f"they enter no error figure, which is over the {doc['summary']['expressed']:,} expressed")
    doc["notes"] = notes
    if args.format == "json":
        sys.stdout.write(dumps(doc) + "\n")
    elif args.format == "csv":
        # each row's notes column: its own notes, then those of the whole run
        recs = [{k: v for k, v in r.items() if k != "notes"} for r in doc["rows"]]
        csv_frame(recs, notes, [list(r["notes"]) + notes for r in doc["rows"]]).to_csv(sys.stdout, index=False)
    else:
        from tabulate import tabulate
        print(tabulate(_rows_table(doc["rows"]), headers=["id", "engine", "benchmark", "metric", "stat", "real",
                                                          "fastsim", "ratio", "|err| %", "reason"], disable_numparse=True))
        print()
        print(tabulate(_summary_rows(doc["summary"]), headers=["by", "group", "rows", "median |err| %",
                                                               "fastsim / real (geo. mean)"], disable_numparse=True))
        for n in notes:
            print("note: " + n)
    if args.format != "table":
        for n in notes:
            print("note: " + n, file=sys.stderr)
    if args.plot:
        from ..validate import plot_validation
        plot_validation(doc["rows"], args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0
