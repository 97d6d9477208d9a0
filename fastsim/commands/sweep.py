"""``fastsim sweep``: the analytic table (and verification) of a Cartesian grid (:mod:`fastsim.sweep`).

The flags are parsed here; :func:`fastsim.sweep.cli_sweep` runs the sweep and prints its summary.
"""
from __future__ import annotations

from .._command_helpers import (_add_calibration, _add_common, _add_slo_percentile, _add_trace_reading, _check_plot,
                                _nonneg_int, _pos_int, _positive, _seeds)


def add_parser(sub):
    """Add the ``sweep`` sub-command to ``sub`` (implemented in :func:`fastsim.sweep.cli_sweep`)."""
    sp = sub.add_parser("sweep", help="analytic table (and verification) of a Cartesian grid of configurations")
    sp.add_argument("grid", nargs="?", metavar="GRID.toml", help="grid file: an [axes] table and an optional [sweep] table")
    sp.add_argument("--axis", action="append", default=[], metavar="NAME=V1,V2",
                    help="an axis of the grid (repeatable; overrides the file's): model, gpu, precision, mode, tp, "
                         "pp, prefill_tp, decode_tp, layout, chunk_tokens, max_batch, instances, prefill_instances, "
                         "decode_instances, "
                         "scenario, trace, rate_req_per_s, ttft_s, tpot_s, price")
    _add_common(sp)
    _add_trace_reading(sp)
    sp.add_argument("--verify", choices=("none", "top-k-per-scenario", "all"),
                    help="points to simulate (default none, or the grid file's)")
    sp.add_argument("--top-k", type=_pos_int("--top-k"), help="points per scenario group for top-k-per-scenario (default 3)")
    sp.add_argument("--seeds", type=_seeds, help="simulation seeds per point (default 4; a point whose attainment the "
                    "95%% Wilson bound cannot decide gets more, doubling up to 4 x --seeds)")
    sp.add_argument("--horizon", type=_positive("--horizon"), help="simulated seconds (default 600)")
    sp.add_argument("--seed", type=_nonneg_int("--seed"), help="root seed (default 0)")
    sp.add_argument("--capacity", action="store_true", help="also bisect each verified point for its max sustainable "
                    "rate (a point whose capacity's 95%% interval lies below its rate then does not pass)")
    sp.add_argument("--tol", type=_positive("--tol"), metavar="FRACTION",
                    help="relative tolerance of the --capacity search (default 0.02, or the grid file's capacity_tol)")
    _add_slo_percentile(sp)
    sp.add_argument("--out", metavar="FILE", help="write the table: .parquet (needs pyarrow), .csv, .jsonl/.json (JSON Lines)")
    sp.add_argument("--resume", action="store_true", help="keep the points already in --out and do the rest")
    sp.add_argument("--plot", metavar="DIR", help="write Pareto plots (PNG) to this directory, one per question")
    sp.add_argument("--plot-max", type=_pos_int("--plot-max"), default=12, metavar="N",
                    help="plot the first N questions (workload x rate x TTFT x TPOT x price) only (default 12)")
    sp.add_argument("--scheduler", metavar="ADDRESS", help="Dask scheduler address, e.g. tcp://10.0.0.5:8786")
    sp.add_argument("--workers", type=_pos_int("--workers"), help="start a local Dask cluster of N worker processes")
    sp.add_argument("--rows", type=_pos_int("--rows"), default=20, help="rows shown in the table output (default 20)")
    _add_calibration(sp)
    sp.set_defaults(func=run)


def run(args):
    """Run ``fastsim sweep``: ``--plot`` checked first, then :func:`fastsim.sweep.cli_sweep`; the exit status."""
    from ..sweep import cli_sweep
    _check_plot(args, "dir")
    return cli_sweep(args)
