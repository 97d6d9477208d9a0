"""``fastsim fleet``: fleets over a rate profile (:mod:`fastsim.fleet`).

The sub-parser only collects the arguments after ``fleet``; :func:`fastsim.fleet.command.run_fleet`
parses them, so that building the command line's parser does not import the fleet simulator.
"""
from __future__ import annotations

import argparse

from .._command_helpers import _add_calibration, _add_common, _Parser


def add_parser(sub):
    """Add the ``fleet`` sub-command to ``sub`` (its flags are parsed by :mod:`fastsim.fleet.command`)."""
    # fleet parses its own flags (fastsim.fleet.command), so building this parser stays light
    sp = sub.add_parser("fleet", help="static, reactive, scheduled and oracle fleets over a rate profile "
                        "(fastsim fleet --help)", add_help=False, prefix_chars="+")
    sp.add_argument("fleet_argv", nargs=argparse.REMAINDER)
    sp.set_defaults(func=run)


def run(args):
    """Run ``fastsim fleet`` on the arguments after ``fleet`` (:func:`fastsim.fleet.command.run_fleet`)."""
    from ..fleet.command import run_fleet
    return run_fleet(args.fleet_argv, _Parser, _add_common, _add_calibration)
