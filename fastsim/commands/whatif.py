"""``fastsim whatif``: re-plan while one assumption moves (:mod:`fastsim.whatif`)."""
from __future__ import annotations

import sys

from .._command_helpers import (_add_common, _check_plot, _command_catalog, _nonneg_int, _notes_out, _pos_int,
                                _positive, _records, _seeds)
from ..errors import FastsimInputError


def add_parser(sub):
    """Add the ``whatif`` sub-command to ``sub`` (the sub-parsers of :func:`fastsim.cli.build_parser`)."""
    sp = sub.add_parser("whatif", help="re-plan while one assumption moves (TPOT, FP8, prices, model, traffic)")
    _add_common(sp)
    sp.add_argument("--study", action="append", choices=("tpot", "fp8", "prices", "model-size", "traffic", "all"),
                    help="study to run (repeatable; default all)")
    sp.add_argument("--no-verify", action="store_true",
                    help="analytic screen only (default: verify when the simulator is available)")
    sp.add_argument("--seeds", type=_seeds, default=2, help="simulation seeds per plan (default 2)")
    sp.add_argument("--horizon", type=_positive("--horizon"), default=600.0, help="simulated seconds (default 600)")
    sp.add_argument("--top-k", type=_pos_int("--top-k"), default=3, help="plans verified per setting (default 3)")
    sp.add_argument("--seed", type=_nonneg_int("--seed"), default=0, help="root seed (default 0)")
    sp.add_argument("--plot", metavar="DIR", help="write one PNG per study into DIR")
    sp.set_defaults(func=run)


def run(args):
    """Run ``fastsim whatif``: the studies named by ``--study``, their tables or records; the exit status."""
    import os
    from .. import whatif as W
    studies = args.study or ["all"]
    studies = list(W.STUDIES) if "all" in studies else list(dict.fromkeys(studies))
    _check_plot(args, "dir", files=[f"whatif_{k}.png" for k in studies])
    cat = _command_catalog(args)
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
        from .._output import dumps
        sys.stdout.write(dumps({"studies": {k: _records(v, _whatif_reason) for k, v in frames.items()},
                                "notes": notes}) + "\n")
    elif args.format == "csv":
        from .._output import csv_frame
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


def _whatif_reason(k, v):
    """``explain`` of the what-if studies' null fields."""
    if k.startswith("lecture_"):
        return ("not applicable: lecture 16 of the course fastsim reproduces prints no figure for this setting "
                "(see docs/REPRODUCTION.md)")
    return None
