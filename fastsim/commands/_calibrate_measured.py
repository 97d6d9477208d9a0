"""``fastsim calibrate --measurements FILE.csv --engine E``: step constants fitted to serving measurements
through the simulator, with leave-one-source-out cross-validation (:func:`fastsim.validate.fit.fit_measurements`)."""
from __future__ import annotations

from .._command_helpers import _fmt
from ..errors import FastsimInputError

__all__ = ["run_measured"]


def _show(name, v):
    if v is None or v != v:
        return "n/a"
    return _fmt(v * 1e3, ".4f") if name.endswith("_s") else _fmt(v, ".4f")


def _stat(g):
    if not g or not g["rows"]:
        return "n/a"
    return f"{_fmt(g['median_abs_pct_error'], '.1f')}% ({_fmt(g['geomean_ratio'], '.3f')}, {g['rows']:,} rows)"


def run_measured(args, cat) -> int:
    """Fit one engine's constants to a measurement file, print them with their intervals and the in-sample
    and held-out errors (a table, JSON or CSV), and write ``--out`` (a calibration tagged with the engine).

    Parameters
    ----------
    args : argparse.Namespace
        ``calibrate``'s arguments with ``--measurements``.
    cat : Catalog
        The command's catalog (``--catalog``; the shipped set's user GPUs are added for the shipped file).

    Returns
    -------
    int
        Exit status 0.

    Raises
    ------
    FastsimInputError
        No ``--engine``; flags of the other inputs given with it; the reader's and the fit's errors.
    """
    import sys
    from pathlib import Path
    from .._output import csv_frame, dumps
    from ..validate import SHIPPED_CATALOG, is_shipped_set, read_measurements
    from ..validate.fit import BOUNDS, GPU_FITTED, HOST_FITTED, fit_measurements, host_only
    if not args.engine:
        raise FastsimInputError("--engine", None, "the engine whose rows are fitted (trtllm, vllm or sglang), "
                                "with --measurements")
    for flag in ("steps", "serving", "model"):
        if getattr(args, flag, None):
            raise FastsimInputError("--" + flag, getattr(args, flag), "not with --measurements (fit them in a "
                                    "separate run)")
    if args.profiles:
        raise FastsimInputError("--profiles", args.profiles, "not with --measurements (fit them in a separate run)")
    path = Path(args.measurements)
    if is_shipped_set(path):
        from ..catalog import load_catalog
        cat = load_catalog([str(SHIPPED_CATALOG)] + list(getattr(args, "catalog", []) or []))
    ms = read_measurements(path, cat)
    names = None
    if args.fit:
        names = [n.strip() for n in args.fit.split(",") if n.strip()]
    fit = fit_measurements(ms, cat, engine=args.engine, names=names, max_runs=args.max_runs,
                           cross_validate=not args.no_cv, prior_log_sd=None if getattr(args, "no_prior", False) else "default",
                           gpu_fit=getattr(args, "gpu_fit", None))
    notes = [f"{fit.rows:,} rows of {args.engine} fitted ({fit.evaluations:,} simulator passes); every row run "
             "as its benchmark ran, on the engine's policy"]
    notes.append("likelihood alone (--no-prior)" if getattr(args, "no_prior", False) else
                 "maximum a posteriori: each constant's log has a Gaussian prior centred on its start "
                 "(fastsim.validate.fit.PRIOR_LOG_SD), so a constant the rows do not pin stays near it")
    from ..validate.run import unexpressible
    rows_e = [m for m in ms if m.engine == args.engine and unexpressible(m) is None]     # the rows fit_measurements fits
    if names is None and host_only(rows_e):
        notes.append("the engine's own constants alone (" + ", ".join(HOST_FITTED) + "): no GPU is measured by two "
                     "of these rows' source families, so no held-out family could judge a GPU's efficiencies; they "
                     "keep their start (fastsim.validate.fit.host_only; --fit to choose the constants)")
    if not any(n in GPU_FITTED for n in fit.names):
        notes.append("no per-GPU entries: no efficiency is fitted")
    else:
        notes.append(f"per-GPU entries fitted {fit.gpu_fit}ly, {len(fit.entries) - 1} GPU(s) with enough rows" + (
            " (one hierarchical fit: each GPU's efficiencies with a prior around the '*' entry's, "
            "fastsim.validate.fit.GPU_LOG_SD)" if fit.gpu_fit == "joint" else
            " (the '*' entry first, then each GPU's refitted on its rows from it)"))
    at_bound = sorted({f"{e.gpu}: {n} = {getattr(e.constants, n):.4g}" for e in fit.entries for n in fit.names
                       if "@" not in n and n in BOUNDS and any(
                           abs(getattr(e.constants, n) / b - 1.0) < 1e-3 for b in BOUNDS[n])})
    if at_bound:
        notes.append("at a bound of fastsim.validate.fit.BOUNDS (the rows push it out of its physical range: the "
                     "error lies in another term): " + "; ".join(at_bound))
    if not fit.folds:
        notes.append("one source family: no held-out figure (cross-validation needs two)")
    else:
        notes.append("held out: each source family's rows run with the constants fitted on the other families")
        u = fit.held_out.get("unfitted")
        if u and u.get("rows"):
            notes.append(f"held out unfitted (each fold's start: the step form, the engine's KV-pool rule and the "
                         f"documented starts, nothing read off a row): {_stat(u)}, against fitted "
                         f"{_stat(fit.held_out['fitted'])}")
    if fit.start.step_form == "classes":
        notes.append("step form: classes, a roofline per kernel class summed (max(weight read, GEMM) + max(KV read, "
                     "attention)), not fitted but the model's shape (fastsim.validate.fit.ENGINE_STEP_FORM; SPEC §3's "
                     "figures take one roofline over the step)")
    if fit.start.moe_dispatch != "per_expert":
        notes.append(f"MoE dispatch: {fit.start.moe_dispatch}, the copies of a token an expert-parallel layer moves "
                     "(fastsim.formulas.dispatch_copies), not fitted but the engine's communication "
                     "(fastsim.validate.fit.ENGINE_MOE_DISPATCH; SPEC §10 sends one copy per routed expert)")
    source = (f"fastsim calibrate --measurements {path.name} --engine {args.engine}: in-sample "
              f"{_stat(fit.in_sample['fitted'])}; held out {_stat(fit.held_out['fitted'])}")
    if args.out:
        fit.calibration(source).write(args.out)
        notes.append(f"wrote {args.out} (tagged engine = {args.engine}): use it with --calibration {args.out}")
    else:
        notes.append("no --out given: the calibration was not written")
    from ..stepmodel import StepConstants
    spec = StepConstants()

    def value(c, n):
        if n == "eta_pcie":
            return c.link_efficiency("pcie")                             # eta_pcie None: eta_nvlink's
        return c.kv_efficiency if n == "eta_kv" else getattr(c, n)      # eta_kv None: eta_bw's
    # "default": where the fit started (SPEC §3's timing constants with the engine's KV-pool rule and
    # the starts of the v2 overheads, fastsim.validate.fit); "spec": SPEC §3's own value
    params = [{"gpu": e.gpu, "rows": e.rows, "parameter": n, "value": getattr(e.constants, n), "ci95_low": lo,
               "ci95_high": hi, "default": value(fit.start, n), "spec": value(spec, n)}
              for e in fit.entries for n, lo, hi in e.interval95]
    # the host costs of the engine's other runtimes ([[runtime]] tables: fastsim.validate.fit, "Runtimes")
    params += [{"gpu": f"* ({r.name} runtime)", "rows": fit.rows, "parameter": n, "value": dict(r.constants)[n],
                "ci95_low": lo, "ci95_high": hi, "default": value(fit.start, n), "spec": value(spec, n)}
               for r in fit.runtimes for n, lo, hi in r.interval95]
    if args.format == "json":
        doc = fit.to_dict()
        doc.update(parameters=params, calibration_file=args.out, notes=notes)
        sys.stdout.write(dumps(doc) + "\n")
        return 0
    if args.format == "csv":
        recs = [dict(r, record="parameter") for r in params]
        recs += [dict(record="fold", family=f.family, rows=f.rows, median_abs_pct_error=f.median_abs_pct_error,
                      geomean_ratio=f.geomean_ratio) for f in fit.folds]
        csv_frame(recs, notes).to_csv(sys.stdout, index=False)
        return 0
    from tabulate import tabulate
    print(tabulate([[p["gpu"], p["rows"], p["parameter"] + (" (ms)" if p["parameter"].endswith("_s") else ""),
                     _show(p["parameter"], p["value"]),
                     (f"{_show(p['parameter'], p['ci95_low'])} - {_show(p['parameter'], p['ci95_high'])}"
                      if p["ci95_low"] == p["ci95_low"] else "not identified"),
                     _show(p["parameter"], p["default"]), _show(p["parameter"], p["spec"])] for p in params],
                   headers=["GPU", "rows", "parameter", "fitted", "95% interval", "start", "SPEC §3"],
                   disable_numparse=True))
    print()
    rows = [["in sample", _stat(fit.in_sample["start"]), _stat(fit.in_sample["fitted"])],
            ["held out (all folds)", _stat(fit.held_out["start"]), _stat(fit.held_out["fitted"])]]
    rows += [[f"held out: {m}", _stat(v["start"]), _stat(v["fitted"])] for m, v in fit.held_out["per_metric"].items()]
    print(tabulate(rows, headers=["rows", "SPEC §3 constants: median |err| (geo. mean ratio)", "fitted"],
                   disable_numparse=True))
    if fit.folds:
        print()
        print(tabulate([[f.family, f.rows, _fmt(f.median_abs_pct_error, ".1f"), _fmt(f.geomean_ratio, ".3f")]
                        for f in fit.folds], headers=["held-out family", "rows", "median |err| %", "geo. mean ratio"],
                       disable_numparse=True))
    for n in notes:
        print("note: " + n)
    return 0
