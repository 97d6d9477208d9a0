"""The ``fastsim sweep`` command: arguments to grid and settings, the run, its summary."""
from __future__ import annotations

import json

from ..errors import FastsimInputError
from .grid import SweepSettings, _tuple, load_grid, make_grid, parse_axis
from .pareto import MAX_PLOTS, _inst_label, questions
from .run import _check_out, _check_settings_used
from .storage import _json_records
from .table import COLUMNS

def cli_sweep(args) -> int:
    """Run ``fastsim sweep`` from parsed arguments (see :mod:`fastsim.commands.sweep`).

    Prints a summary table (or the whole table as JSON / CSV with ``--format`` and no ``--out``).

    Parameters
    ----------
    args : argparse.Namespace
        The parsed ``fastsim sweep`` arguments.

    Returns
    -------
    int
        Exit status 0.

    Raises
    ------
    FastsimInputError
        Bad grid, axis, settings or output (the CLI prints it on one line and exits with 2).
    """
    import sys
    from .._command_helpers import _command_catalog, _fmt, _trace_notes
    # looked up on the package when called, so that a replaced fastsim.sweep.run_sweep is the one run
    from . import run_sweep
    from ..workload import read_trace
    _check_output_flags(args)           # before anything is read or computed
    if args.out:
        _check_out(args.out)            # before a trace is read or anything computed
    cat = _command_catalog(args)
    read_notes = []

    def reader(name):
        wl = read_trace(name, time_unit=getattr(args, "time_unit", None),
                        skip_invalid=getattr(args, "skip_invalid", False))
        read_notes.extend(_trace_notes(wl))
        return wl
    axes, file_settings = load_grid(args.grid) if args.grid else ({}, {})
    for text in args.axis:
        name, values = parse_axis(text)
        axes[name] = values
        if name in ("scenario", "trace"):
            axes.pop("trace" if name == "scenario" else "scenario", None)
    grid = make_grid(axes, cat, read_trace=reader)
    if not any(src.kind == "trace" for src in grid.sources):
        for flag, dest, value in (("--time-unit", "time_unit", getattr(args, "time_unit", None)),
                                  ("--skip-invalid", "skip_invalid", getattr(args, "skip_invalid", False) or None)):
            if value is not None:
                raise FastsimInputError(flag, value, "only with a trace axis (it says how a trace file is read; "
                                        "this grid has no trace): drop it, or sweep a trace axis")
    kw = dict(file_settings)
    flagged = set()
    for flag, key in (("verify", "verify"), ("top_k", "top_k"), ("seeds", "seeds"), ("horizon", "horizon_s"),
                      ("seed", "seed"), ("slo_percentile", "slo_percentile")):
        if getattr(args, flag) is not None:
            kw[key] = getattr(args, flag)
            flagged.add(key)
    if args.capacity:
        kw["capacity"] = True
        flagged.add("capacity")
    if getattr(args, "tol", None) is not None:
        if not (args.capacity or kw.get("capacity")):
            raise FastsimInputError("--tol", args.tol, "only with --capacity (it is the capacity search's relative "
                                    "tolerance): drop it, or add --capacity")
        kw["capacity_tol"] = args.tol
        flagged.add("capacity_tol")
    if "chunk_tokens" in kw:
        kw["chunk_tokens"] = _tuple(kw["chunk_tokens"])
    from .._command_helpers import _constants_choice, _constants_notes
    if _constants_choice(args).kind != "lecture":       # the sweep's runs are the lecture policy's
        kw["constants"] = _constants_choice(args).constants
    read_notes.extend(_constants_notes(args))

    def field(key):
        """The name of a setting where it was given: its flag, or its key in the grid file."""
        flags = {"top_k": "--top-k", "capacity": "--capacity", "verify": "--verify", "seeds": "--seeds",
                 "horizon_s": "--horizon", "seed": "--seed", "slo_percentile": "--slo-percentile",
                 "capacity_tol": "--tol"}
        return flags[key] if key in flagged else f"[sweep] {key} in {args.grid}" if key in file_settings else key

    if kw.get("verify", "none") == "none":
        # the simulation settings with nothing simulated: refused, never ignored
        for key in ("seeds", "horizon_s", "seed"):
            if key in flagged or (key in file_settings and "verify" not in flagged):
                source = f"verify none, from {field('verify')}," if "verify" in kw else "the default --verify none"
                raise FastsimInputError(field(key), kw[key], "only with --verify top-k-per-scenario or --verify all "
                                        f"(it sets the simulation; {source} simulates nothing): drop it, or verify")
    if args.capacity and kw.get("verify", "none") == "none":
        source = f"verify none, from {field('verify')}," if "verify" in kw else "the default --verify none"
        raise FastsimInputError("--capacity", True, "--verify top-k-per-scenario or --verify all beside it (the "
                                f"capacity search runs on the simulated points; {source} simulates none)")
    try:
        settings = SweepSettings(**kw)
    except TypeError as exc:
        raise FastsimInputError("[sweep]", sorted(kw), f"fields of SweepSettings ({exc})") from None
    except FastsimInputError as exc:
        if exc.field in kw and exc.field != field(exc.field):
            raise FastsimInputError(field(exc.field), exc.value, exc.allowed) from None
        raise
    _check_settings_used(grid, settings, top_k=kw.get("top_k"), name=field)
    if args.resume and not args.out:
        raise FastsimInputError("--resume", True, "an --out FILE to resume")
    max_plots = getattr(args, "plot_max", MAX_PLOTS)
    df = run_sweep(grid, settings=settings, out=args.out, resume=args.resume, scheduler=args.scheduler,
                   workers=args.workers, plot_dir=args.plot, max_plots=max_plots)
    plot_note = None
    if args.plot:
        nq = len(questions(df))
        plot_note = f"wrote Pareto plots of {min(nq, max_plots)} of {nq} questions to {args.plot}"
        if nq > max_plots:
            plot_note += (f" (the first {max_plots} in grid order; --plot-max N for more, or plot selected rows "
                          "with fastsim.sweep.plot_sweep)")
    if args.format != "table" and not args.out:
        notes = read_notes + ([plot_note] if plot_note else [])
        for n in notes:
            if not n.startswith("warning: "):       # warnings are on stderr already
                print("note: " + n, file=sys.stderr)
        if args.format == "json":
            # as every other command: one object with the rows and the notes; full precision,
            # NaN / inf / missing as null with the row's null_reasons
            json.dump({"rows": _json_records(df), "notes": notes}, sys.stdout, indent=2, allow_nan=False)
            sys.stdout.write("\n")
        else:
            _csv_frame(df, notes).to_csv(sys.stdout, index=False)
        return 0
    from tabulate import tabulate
    # the analytically feasible points: the simulated ones first (passed, then by cost), then the
    # others by cost; --rows of them
    show = df[df["feasible"]].sort_values(
        ["verified", "sim_passed", "usd_per_million_output_tokens", "efficiency_usd_per_million_output_tokens"],
        ascending=[False, False, True, True], kind="stable")
    rows, caps, searched = [], [], False
    na = {"run": False, "tpot": False, "capacity": False}     # why cells read n/a
    extra = _varying_axes(df)
    for _, r in show.head(args.rows).iterrows():
        tp = (_inst_label(r, r.tp, r.get("pp", 1)) if r["mode"] == "colocated"
              else f"P:{_inst_label(r, r.prefill_tp)} D:{_inst_label(r, r.decode_tp)}")
        inst = str(r.instances) if r["mode"] == "colocated" else f"{r.prefill_instances}+{r.decode_instances}"
        row = [r.workload, f"{r.rate_req_per_s:g}", r.gpu, r.precision, r["mode"], tp, inst, r.gpus,
               _fmt(float(r.usd_per_million_output_tokens), ".3f"),
               _fmt(float(r.efficiency_usd_per_million_output_tokens), ".3f"),
               _fmt(float(r.capacity_req_per_s), ".1f"),
               _fmt(float(r.sim_attainment), ".3f"), _fmt(float(r.sim_ttft_p90_s), ".3f"),
               _fmt(float(r.sim_tpot_p90_s) * 1e3, ".1f"),
               "not run" if not r.verified else ("pass" if r.sim_passed else "FAIL"),
               _fmt(float(r.sim_capacity_req_per_s), ".2f")]
        caps.append(row[15])
        if r.verified and int(r.sim_capacity_probes) > 0:
            # what the search cost: probes, seed-runs simulated, runs stopped early
            row[15] += f" [{int(r.sim_capacity_probes)}p/{int(r.sim_capacity_seed_runs)}r/" \
                       f"{int(r.sim_capacity_stopped_runs)}s]"
            searched = True
        rows.append(row + [_axis_cell(r, c) for c, _ in extra])
        if not r.verified:
            na["run"] = True
        else:
            na["tpot"] |= row[13] == "n/a"
            na["capacity"] |= caps[-1] == "n/a"
    n, nf, nv, npass = len(df), int(df["feasible"].sum()), int(df["verified"].sum()), int(df["sim_passed"].sum())
    more = df[df["verified"] & (df["sim_runs"] > settings.seeds)] if nv and settings.seeds else df.iloc[:0]
    refuted = df[df["verified"] & df["sim_reason"].str.startswith("its simulated capacity")] if nv else df.iloc[:0]
    judged = []
    if len(more):
        judged.append(f"{len(more):,} simulated point{'s' if len(more) != 1 else ''} ran more seeds than the "
                      f"{settings.seeds} asked (sim_runs): the 95% Wilson interval of the pooled attainment held the "
                      "target, so the seeds doubled until it did not, up to 4 x --seeds; a point passes when the "
                      "interval clears the target (fastsim.search.confidence)")
    if len(refuted):
        judged.append(f"{len(refuted):,} point{'s fail' if len(refuted) != 1 else ' fails'} although the attainment "
                      "passes: the point's own simulated capacity's 95% interval lies below its rate (sim_reason)")
    print(f"{n:,} points: {nf:,} analytically feasible, {nv:,} simulated, {npass:,} passed")
    print(tabulate(rows, headers=["workload", "req/s", "GPU", "prec", "mode", "TP", "inst", "GPUs", "$/M out",
                                  "$/M eff", "capacity req/s", "attainment", "TTFT P90 s", "TPOT P90 ms",
                                  "verified", "sim max req/s"] + [h for _, h in extra], disable_numparse=True))
    cells = {c for row in rows for c in row[11:15]} | set(caps)
    why = [text for key, text in (
        ("run", "not simulated (verified 'not run')"),
        ("tpot", "no measured request with more than one output token (TPOT)"),
        ("capacity", "no capacity found (sim max req/s)" if settings.capacity else
         "capacity not searched (sim max req/s; --capacity searches it for each simulated point)")) if na[key]]
    if why:
        print("note: n/a = not applicable: " + ", ".join(why))
    if searched:
        print("note: sim max req/s [Np/Mr/Ks]: the capacity search took N probes and M seed-runs, K of which "
              "stopped early (a run ends once enough of its measured requests surely missed the SLO to fail "
              "its probe)")
    if "inf" in cells:
        print("note: inf = infinite: more than 10% of the measured requests never got that token (P90), or no "
              "capacity probe failed (sim max req/s)")
    for text in judged:
        print("note: " + text)
    if settings.slo_percentile != 90.0:
        print(f"note: targets judged at P{settings.slo_percentile:g} (--slo-percentile): a point passes when "
              f"{settings.slo_percentile:g}% of its measured requests meet both; the TTFT / TPOT columns are the P90s")
    if len(rows) < n:
        print("note: " + _rows_note(len(rows), n, nf, nv, args.rows, bool(args.out)))
    for note in read_notes:
        print("note: " + note)
    if args.out:
        print(f"note: wrote {n:,} rows to {args.out}")
    if plot_note:
        print("note: " + plot_note)
    return 0


#: Axes of the grid the table's fixed columns do not show, with their headers: each becomes a
#: column when it varies over the grid's rows (so that the rows it tells apart read apart).
_AXIS_COLUMNS = (("model", "model"), ("ttft_s", "TTFT SLO s"), ("tpot_s", "TPOT SLO s"), ("price", "price"),
                 ("chunk_tokens", "chunk"), ("max_batch", "max_batch"))


def _varying_axes(df) -> list:
    """``(column, header)`` of the axes of :data:`_AXIS_COLUMNS` with more than one value in ``df``
    (missing values, a disaggregated row's chunk, count as a value of their own)."""
    return [(c, h) for c, h in _AXIS_COLUMNS if c in df.columns and df[c].astype(object).nunique(dropna=False) > 1]


def _axis_cell(r, column: str) -> str:
    """One cell of a varying axis: the value, ``-`` where it does not apply (a disaggregated row's chunk),
    ``0 (no cap)`` for a max_batch of 0."""
    import pandas as pd
    v = r[column]
    if not isinstance(v, str) and pd.isna(v):
        return "-"
    if column == "max_batch" and int(v) == 0:
        return "0 (no cap)"
    return f"{v:g}" if isinstance(v, float) else str(v)


#: argparse defaults of the flags that only some outputs use (the ``sweep`` parser of fastsim.commands.sweep)
_DEFAULT_ROWS, _DEFAULT_PLOT_MAX = 20, 12


def _given(args, dest: str, default) -> bool:
    """Whether a flag with a default was given: ``<dest>_given`` where the parser records it
    (``fastsim._command_helpers._Given``), else a value other than the default."""
    flag = getattr(args, dest + "_given", None)
    if flag is not None:
        return bool(flag)
    value = getattr(args, dest, None)
    return value is not None and value != default


def _check_output_flags(args) -> None:
    """Refuse an output flag the sweep would ignore: ``--rows`` where no table is printed (``--format
    json`` / ``csv`` without ``--out`` print every row), ``--plot-max`` without ``--plot``.

    Raises
    ------
    FastsimInputError
        Naming the flag.
    """
    if getattr(args, "format", "table") != "table" and not args.out and _given(args, "rows", _DEFAULT_ROWS):
        raise FastsimInputError("--rows", args.rows, f"only with the table output (--format {args.format} prints "
                                "every row): drop it, or --format table")
    if not args.plot and _given(args, "plot_max", _DEFAULT_PLOT_MAX):
        raise FastsimInputError("--plot-max", args.plot_max, "only with --plot DIR (it limits the questions "
                                "plotted): drop it, or add --plot DIR")


def _rows_note(shown: int, n: int, nf: int, nv: int, limit: int, wrote: bool) -> str:
    """The note under the table when it shows fewer rows than the sweep has: which, and how to see the rest.

    Parameters
    ----------
    shown, n, nf, nv : int
        Rows shown, points, analytically feasible points, simulated points.
    limit : int
        ``--rows``.
    wrote : bool
        Whether ``--out`` wrote the whole table.
    """
    if nf == 0:
        text = "rows shown: none, no point is analytically feasible"
    else:
        which = (f"{shown:,} of the {nf:,} analytically feasible points" if shown < nf
                 else f"all {nf:,} analytically feasible points")
        order = ", the simulated ones first (passed, then by cost), then the others by cost" if nv else ", by cost"
        text = f"rows shown: {which}{order}"
    if shown < nf:
        text += f" (--rows {limit}; --rows N shows more)"
    if nf < n:
        text += f"; the {n - nf:,} infeasible points are not shown"
    return text + ("; every point, with its reason, is in the --out file" if wrote
                   else "; every point, with its reason: --format csv or json, or --out FILE")


def _csv_frame(df, notes):
    """The table as CSV rows, as every command writes CSV (:func:`fastsim._output.csv_frame`).

    NaN, infinite and missing cells are empty, each explained in a ``null_reasons.FIELD`` column
    (a reason starting with ``infinite``, such as an infeasible point's cost, or ``not
    applicable``), and a ``notes`` column holds the notes as a JSON array. Integer columns stay
    integers (an empty cell where missing, never ``2.0``).
    """
    from .._output import csv_frame
    frame = csv_frame(_json_records(df), notes)
    for c, d in COLUMNS:
        if d in ("int64", "Int64") and c in frame.columns:
            frame[c] = frame[c].astype("Int64")
    return frame
