"""``fastsim bench``: the simulator on the standard workloads (:mod:`fastsim.bench`)."""
from __future__ import annotations

import sys


def add_parser(sub):
    """Add the ``bench`` sub-command to ``sub`` (the sub-parsers of :func:`fastsim.cli.build_parser`)."""
    sp = sub.add_parser("bench", help="measure the simulator on the standard workloads")
    sp.add_argument("--format", choices=("table", "json", "csv"), default="table", help="output format")
    sp.add_argument("--quick", action="store_true", help="short horizons and few seeds (a smoke test, seconds)")
    sp.set_defaults(func=run)


def run(args):
    """Run ``fastsim bench`` and print its measurements; the exit status."""
    from ..bench import render_benchmarks, run_benchmarks
    sys.stdout.write(render_benchmarks(run_benchmarks(quick=args.quick), args.format))
    return 0
