"""The ``fastsim calibrate`` command: fit the step model's constants and write a calibration file (SPEC §3).

:func:`add_parser` adds the sub-command and its flags (with light imports only); :func:`run` reads
the inputs, runs :func:`fastsim.calibrate.calibrate` (measured steps, per-operation profiles) or
:func:`fastsim.calibrate.fit_serving` (``--serving``: serving benchmarks, through the simulator),
prints the parameters and the residuals (a table, JSON or CSV), and writes ``--out`` and
``--plot``.
"""
from __future__ import annotations

from .._command_helpers import _add_common, _check_plot, _command_catalog, _fmt, _int_at_least, _tp
from ..errors import FastsimInputError

__all__ = ["add_parser", "run"]


def add_parser(sub):
    """Add the ``calibrate`` sub-command to ``sub`` (an argparse sub-parsers action); its handler is :func:`run`.

    Parameters
    ----------
    sub : argparse._SubParsersAction
        The sub-commands of ``fastsim``'s parser.
    """
    sp = sub.add_parser("calibrate", help="fit the step model's constants to measured steps and/or "
                        "per-operation profiles (least squares), or through the simulator to a serving "
                        "benchmark, and write a calibration file")
    sp.add_argument("--steps", metavar="FILE.csv", help="measured steps: gpu, precision, tp, model, decode_tokens, "
                    "prefill_tokens, kv_tokens, step_s (see README)")
    sp.add_argument("--profiles", action="append", metavar="NAME|PATH",
                    help="Vidur per-operation profiles: vidur-h100 (shipped), a CSV or a directory (repeatable)")
    sp.add_argument("--serving", nargs="+", metavar="FILE.json",
                    help="serving-benchmark results (`vllm bench serve --save-result` JSON, one file per request "
                    "rate or several results per file): fits eta_compute and eta_bw through the simulator")
    sp.add_argument("--gpu", default="H100", help="GPU the profiles or the benchmark were measured on (default H100)")
    sp.add_argument("--precision", default="BF16",
                    help="precision the profile constants apply to, or the benchmark served (default BF16; '*' = "
                    "every precision, profiles only)")
    sp.add_argument("--model", help="--serving: the served model (catalog name or config.json)")
    sp.add_argument("--tp", type=_tp, default=1, help="--serving: GPUs per instance (default 1)")
    sp.add_argument("--instances", type=_int_at_least(1), default=1,
                    help="--serving: instances behind the benchmark's endpoint (default 1)")
    sp.add_argument("--policy", choices=("vllm", "sglang", "trtllm", "lecture"), default="vllm",
                    help="--serving: scheduler simulated (default vllm: the simulator's model of vLLM V1)")
    sp.add_argument("--max-num-batched-tokens", type=_int_at_least(1),
                    help="--serving: the server's token budget per step (default: the engine's)")
    sp.add_argument("--max-num-seqs", type=_int_at_least(1),
                    help="--serving: the server's most running requests (default: the engine's)")
    sp.add_argument("--input-tokens", type=_int_at_least(1),
                    help="--serving: prompt tokens per request when the JSON has no random_input_len "
                    "(default: the measured mean)")
    sp.add_argument("--output-tokens", type=_int_at_least(1),
                    help="--serving: output tokens per request when the JSON has no random_output_len "
                    "(default: the measured mean)")
    sp.add_argument("--fit-overhead", action="store_true", help="--serving: also fit overhead_s (per step)")
    sp.add_argument("--replications", type=_int_at_least(1), default=2,
                    help="--serving: request draws simulated per rate (default 2)")
    sp.add_argument("--seed", type=int, default=0, help="--serving: seed of the simulated requests (default 0)")
    sp.add_argument("--out", metavar="FILE.toml", help="write the calibration file here")
    sp.add_argument("--measurements", metavar="FILE.csv",
                    help="serving measurements in fastsim validate's schema (e.g. fastsim/data/measurements/"
                    "measurements.csv): fits the constants of one --engine through the simulator, every row run as "
                    "its benchmark ran, with leave-one-source-out cross-validation")
    sp.add_argument("--engine", choices=("trtllm", "vllm", "sglang"),
                    help="--measurements: the engine whose rows are fitted (the calibration is tagged with it)")
    sp.add_argument("--fit", metavar="NAME,...",
                    help="--measurements: constants to fit (default: eta_compute, eta_bw, eta_kv, overhead_s, "
                    "overhead_per_seq_s, overhead_per_layer_s, the FP8 / FP4 compute factors of the precisions the rows use, "
                    "moe_compute_factor where rows run a mixture-of-experts model, moe_pad_fraction where they "
                    "run two granularities E/k or more, moe_load_cv where one MoE model runs at two "
                    "expert-parallel degrees or more, request_overhead_s where rows measure TTFT or E2E, and "
                    "eta_pcie where rows run a PCIe GPU at an attention TP > 1 or in a pipeline; of these, the "
                    "host costs and request_overhead_s alone where no GPU is measured by two source families; add "
                    "overhead_s@tensorrt, overhead_per_seq_s@tensorrt, overhead_per_layer_s@tensorrt to fit "
                    "TensorRT-LLM's TensorRT-engine runtime's host costs apart from its PyTorch backend's)")
    sp.add_argument("--max-runs", type=_int_at_least(2), default=150,
                    help="--measurements: at most this many runs per fit, spread over the source families "
                    "(default 150; held-out rows always run in full)")
    sp.add_argument("--no-cv", action="store_true", help="--measurements: skip the leave-one-source-out folds")
    sp.add_argument("--no-prior", action="store_true",
                    help="--measurements: fit the rows' likelihood alone (default: a maximum a posteriori fit, each "
                    "constant with a Gaussian prior on its log centred on its start, fastsim.validate.fit.PRIOR_LOG_SD)")
    sp.add_argument("--gpu-fit", choices=("joint", "sequential"),
                    help="--measurements: how the per-GPU entries are fitted: joint (one hierarchical fit, each GPU's "
                    "efficiencies with a prior around the '*' entry's) or sequential (the '*' entry first, then each "
                    "GPU's from it); default: the engine's, fastsim.validate.fit.ENGINE_GPU_FIT")
    sp.add_argument("--plot", metavar="FILE.png", help="measured vs modelled times")
    sp.add_argument("--detail", action="store_true",
                    help="also fit each profiled model x TP and each all-reduce size on its own")
    _add_common(sp)
    sp.set_defaults(func=run)


def run(args) -> int:
    """Run ``fastsim calibrate``: :func:`fastsim.calibrate.calibrate`, or :func:`fastsim.calibrate.fit_serving`
    with ``--serving``.

    Prints the parameters (value, 95% interval, default) and the residuals (median and worst
    relative error per operation and size band) as a table, or one JSON object
    ``{"parameters": [...], "residuals": [...], "calibration_file": ..., "notes": [...]}``, or
    CSV (parameter and residual records, a ``record`` column telling them apart); writes the
    calibration to ``--out`` and the plot to ``--plot``.

    Returns
    -------
    int
        Exit status 0.

    Raises
    ------
    FastsimInputError
        Bad inputs (the CLI prints one line and exits with status 2).
    """
    import sys
    from .._output import csv_frame, dumps
    from ..calibrate import calibrate, plot_calibration
    _check_plot(args)
    cat = _command_catalog(args)
    if getattr(args, "measurements", None):
        from ._calibrate_measured import run_measured
        return run_measured(args, cat)
    for flag in ("engine", "fit"):
        if getattr(args, flag, None) is not None:
            raise FastsimInputError("--" + flag, getattr(args, flag), "with --measurements only")
    if getattr(args, "serving", None):
        return _run_serving(args, cat)
    for flag in ("model", "input_tokens", "output_tokens", "max_num_batched_tokens", "max_num_seqs"):
        if getattr(args, flag, None) is not None:
            raise FastsimInputError("--" + flag.replace("_", "-"), getattr(args, flag), "with --serving only")
    report = calibrate(args.steps, args.profiles or (), gpu=args.gpu, precision=args.precision, catalog=cat,
                       detail=args.detail)
    notes = list(report.notes)
    if args.out:
        report.calibration.write(args.out)
        notes.append(f"wrote {args.out}: use it with --calibration {args.out}")
    else:
        notes.append("no --out given: the calibration was not written")
    params, resid = report.parameter_records(), report.residual_records()
    if args.format == "json":
        sys.stdout.write(dumps({"parameters": params, "residuals": resid, "calibration_file": args.out,
                                "calibration": report.calibration.to_toml(), "notes": notes}) + "\n")
    elif args.format == "csv":
        recs = [dict(r, record="parameter") for r in params] + [dict(r, record="residual") for r in resid]
        csv_frame(recs, notes).to_csv(sys.stdout, index=False)
    else:
        from tabulate import tabulate

        def show(name, v):
            if v is None:
                return "n/a"
            return _fmt(v * 1e6, ".3f") if name.endswith("_s") else _fmt(v, ".4f")
        rows = [[r["fit"], r["gpu"], r["precision"],
                 r["parameter"] + (" (us)" if r["parameter"].endswith("_s") else ""), show(r["parameter"], r["value"]),
                 (f"{show(r['parameter'], r['ci95_low'])} - {show(r['parameter'], r['ci95_high'])}"
                  if r["ci95_low"] is not None else "not identified"),
                 show(r["parameter"], r["default"]), "yes" if r["used"] else "no"] for r in params]
        print(tabulate(rows, headers=["fit", "GPU", "prec", "parameter", "value", "95% interval", "default",
                                      "in file"], disable_numparse=True))
        print()
        main = {f.label for f in {f.kind: f for f in reversed(report.fits)}.values()}
        rrows = [[r["fit"], r["operation"], r["size_band"], r["points"], _fmt(r["median_rel_error"] * 100, ".1f"),
                  _fmt(r["worst_rel_error"] * 100, "+.1f"), _fmt(r["worst_size"], ",.0f")]
                 for r in resid if r["fit"] in main or r["size_band"] == "all"]
        print(tabulate(rrows, headers=["fit", "operation", "size", "points", "median |err| %", "worst err %",
                                       "worst at (tokens / bytes)"], disable_numparse=True))
        for n in notes:
            print("note: " + n)
    if args.format != "table":
        for n in notes:
            print("note: " + n, file=sys.stderr)
    if args.plot:
        plot_calibration(report, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


def _run_serving(args, cat) -> int:
    """``fastsim calibrate --serving``: :func:`fastsim.calibrate.fit_serving`, its parameters and its residual per
    rate and metric."""
    import sys
    from .._output import csv_frame, dumps
    from ..calibrate import fit_serving, plot_serving, read_serving_benchmark
    if args.steps or args.profiles:
        raise FastsimInputError("--serving", " ".join(args.serving), "no --steps or --profiles with it (fit them "
                                "in a separate run)")
    if not args.model:
        raise FastsimInputError("--model", None, "the served model (catalog name or config.json), with --serving")
    if args.precision == "*":
        raise FastsimInputError("--precision", "*", "the precision the benchmark served (a catalog name)")
    ms = read_serving_benchmark(args.serving)
    g = cat.gpu(args.gpu)
    policy = args.policy
    if policy != "lecture" and (args.max_num_batched_tokens or args.max_num_seqs):
        from ..sim.policy import engine_policy
        from ..stepmodel import P_KV_BUDGET_TOKENS, step_params
        model = cat.model(args.model)
        kv = float(step_params(model, g, cat.precision(args.precision), args.tp)[P_KV_BUDGET_TOKENS])
        policy = engine_policy(policy, g.hbm_bytes, kv_budget_tokens=kv, context_tokens=model.max_context_tokens,
                               max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs)
        # settings the engine itself refuses to start with are refused (fastsim.engine_rules)
        from ..engine_rules import check_engine_policy
        from ._resolve import _ENGINE_FLAGS
        check_engine_policy(policy, _ENGINE_FLAGS, given=vars(args))
    elif policy == "lecture" and (args.max_num_batched_tokens or args.max_num_seqs):
        raise FastsimInputError("--max-num-batched-tokens / --max-num-seqs", "given", "with --policy vllm or sglang")
    report = fit_serving(ms, args.model, args.gpu, args.precision, args.tp, instances=args.instances, policy=policy,
                         input_tokens=args.input_tokens, output_tokens=args.output_tokens,
                         fit_overhead=args.fit_overhead, replications=args.replications, seed=args.seed,
                         catalog=cat)
    fit = report.fits[0]
    notes = list(report.notes)
    if args.out:
        report.calibration.write(args.out)
        notes.append(f"wrote {args.out}: use it with --calibration {args.out}")
    else:
        notes.append("no --out given: the calibration was not written")
    params = report.parameter_records()
    points = fit.points.to_dict(orient="records")
    if args.format == "json":
        sys.stdout.write(dumps({"parameters": params, "points": points, "residuals": report.residual_records(),
                                "calibration_file": args.out, "calibration": report.calibration.to_toml(),
                                "notes": notes}) + "\n")
    elif args.format == "csv":
        recs = [dict(r, record="parameter") for r in params] + [dict(r, record="point") for r in points]
        csv_frame(recs, notes).to_csv(sys.stdout, index=False)
    else:
        from tabulate import tabulate

        def show(name, v):
            if v is None:
                return "n/a"
            return _fmt(v * 1e3, ".3f") if name.endswith("_s") else _fmt(v, ".4f")
        rows = [[r["parameter"] + (" (ms)" if r["parameter"].endswith("_s") else ""), show(r["parameter"], r["value"]),
                 (f"{show(r['parameter'], r['ci95_low'])} - {show(r['parameter'], r['ci95_high'])}"
                  if r["ci95_low"] is not None else "not identified"), show(r["parameter"], r["default"]),
                 "yes" if r["used"] else "no"] for r in params]
        print(fit.label)
        print(tabulate(rows, headers=["parameter", "value", "95% interval", "default", "in file"],
                       disable_numparse=True))
        print()

        def val(r, k):
            x = r[k] * (1e3 if r["unit"] != "tokens/s" else 1.0)
            return _fmt(x, ",.1f" if r["unit"] == "tokens/s" else ".2f")
        prow = [[_fmt(r["rate_req_per_s"], "g"), r["metric"], "tokens/s" if r["unit"] == "tokens/s" else "ms",
                 val(r, "measured"), val(r, "simulated"), _fmt(r["rel_error"] * 100, "+.1f")] for r in points]
        print(tabulate(prow, headers=["rate (req/s)", "metric", "unit", "measured", "simulated", "error %"],
                       disable_numparse=True))
        for n in notes:
            print("note: " + n)
    if args.format != "table":
        for n in notes:
            print("note: " + n, file=sys.stderr)
    if args.plot:
        plot_serving(fit, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0
