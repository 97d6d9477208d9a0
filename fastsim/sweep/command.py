"""The ``fastsim sweep`` command: arguments to grid and settings, the run, its summary."""
from __future__ import annotations

import json

from ..errors import FastsimInputError
from .grid import SweepSettings, _tuple, load_grid, make_grid, parse_axis
from .pareto import MAX_PLOTS, _inst_label, questions
from .storage import _json_records

def cli_sweep(args) -> int:
    """Run ``fastsim sweep`` from parsed arguments (see :func:`fastsim.cli.build_parser`).

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
    from .._command_helpers import _catalog, _fmt, _trace_notes
    # looked up on the package when called, so that a replaced fastsim.sweep.run_sweep is the one run
    from . import run_sweep
    from ..workload import read_trace
    cat = _catalog(args)
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
    kw = dict(file_settings)
    for flag, key in (("verify", "verify"), ("top_k", "top_k"), ("seeds", "seeds"), ("horizon", "horizon_s"),
                      ("seed", "seed")):
        if getattr(args, flag) is not None:
            kw[key] = getattr(args, flag)
    if args.capacity:
        kw["capacity"] = True
    if "chunk_tokens" in kw:
        kw["chunk_tokens"] = _tuple(kw["chunk_tokens"])
    if getattr(args, "calibration", None):
        from .._command_helpers import _constants
        kw["constants"] = _constants(args)
    try:
        settings = SweepSettings(**kw)
    except TypeError as exc:
        raise FastsimInputError("[sweep]", sorted(kw), f"fields of SweepSettings ({exc})") from None
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
            df.assign(notes=json.dumps(notes)).to_csv(sys.stdout, index=False, na_rep="")
        return 0
    from tabulate import tabulate
    show = df[df["feasible"]]
    if show["verified"].any():
        show = show[show["verified"]].sort_values(["sim_passed", "usd_per_million_output_tokens"],
                                                  ascending=[False, True], kind="stable")
    else:
        show = show.sort_values(["usd_per_million_output_tokens", "efficiency_usd_per_million_output_tokens"],
                                kind="stable")
    rows = []
    for _, r in show.head(args.rows).iterrows():
        tp = (_inst_label(r, r.tp) if r["mode"] == "colocated"
              else f"P:{_inst_label(r, r.prefill_tp)} D:{_inst_label(r, r.decode_tp)}")
        inst = str(r.instances) if r["mode"] == "colocated" else f"{r.prefill_instances}+{r.decode_instances}"
        rows.append([r.workload, f"{r.rate_req_per_s:g}", r.gpu, r.precision, r["mode"], tp, inst, r.gpus,
                     _fmt(float(r.usd_per_million_output_tokens), ".3f"),
                     _fmt(float(r.efficiency_usd_per_million_output_tokens), ".3f"),
                     _fmt(float(r.capacity_req_per_s), ".1f"),
                     _fmt(float(r.sim_attainment), ".3f"), _fmt(float(r.sim_ttft_p90_s), ".3f"),
                     _fmt(float(r.sim_tpot_p90_s) * 1e3, ".1f"),
                     "not run" if not r.verified else ("pass" if r.sim_passed else "FAIL"),
                     _fmt(float(r.sim_capacity_req_per_s), ".2f")])
    n, nf, nv, npass = len(df), int(df["feasible"].sum()), int(df["verified"].sum()), int(df["sim_passed"].sum())
    print(f"{n:,} points: {nf:,} analytically feasible, {nv:,} simulated, {npass:,} passed")
    print(tabulate(rows, headers=["workload", "req/s", "GPU", "prec", "mode", "TP", "inst", "GPUs", "$/M out",
                                  "$/M eff", "capacity req/s", "attainment", "TTFT P90 s", "TPOT P90 ms",
                                  "verified", "sim max req/s"], disable_numparse=True))
    cells = {c for row in rows for c in row[11:]}
    if "n/a" in cells:
        print("note: n/a = not applicable: not simulated (verified 'not run'), no measured request with more than "
              "one output token (TPOT), or capacity not searched (sim max req/s: --capacity)")
    if "inf" in cells:
        print("note: inf = infinite: more than 10% of the measured requests never got that token (P90), or no "
              "capacity probe failed (sim max req/s)")
    for note in read_notes:
        print("note: " + note)
    if args.out:
        print(f"note: wrote {n:,} rows to {args.out}")
    if plot_note:
        print("note: " + plot_note)
    return 0
