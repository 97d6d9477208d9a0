"""The commands of ``fastsim``, one module each; :mod:`fastsim.cli` builds its parser from :data:`COMMANDS`.

Each command module has ``add_parser(sub)``, which adds its sub-parser (or two: ``ledger`` adds
``ledger`` and ``ladder``) to the command line's sub-parsers and sets ``run`` as the handler, and
``run(args) -> int``, which runs it on the parsed arguments and returns the exit status. A module
imports only argparse, :mod:`fastsim.errors`, :mod:`fastsim.layouts` and
:mod:`fastsim._command_helpers` (argparse types, shared flag groups, the catalog, the ``--from-plan``
reader, printing) at its top, so that building the parser stays fast; the rest is imported inside
``run``.

The modules, in the order the help lists them:

- :mod:`fastsim.commands.plan`: ``plan``, the cheapest verified deployment;
- :mod:`fastsim.commands.simulate`: ``simulate``, one plan at one rate;
- :mod:`fastsim.commands.bench`: ``bench``, the simulator on the standard workloads;
- :mod:`fastsim.commands.capacity`: ``capacity``, the maximum sustainable rate (one plan, several
  instance counts, or a trace's time scale);
- :mod:`fastsim.commands.ledger`: ``ledger`` and ``ladder``, one step's time and the optimization ladder;
- :mod:`fastsim.commands.whatif`: ``whatif``, re-planning while one assumption moves;
- :mod:`fastsim.commands.sweep`: ``sweep``, parsed here and run by :mod:`fastsim.sweep`;
- :mod:`fastsim.commands.calibrate`: ``calibrate``, run by :mod:`fastsim.calibrate`;
- :mod:`fastsim.commands.fleet`: ``fleet``, whose flags :mod:`fastsim.fleet.command` parses;
- :mod:`fastsim.commands.validate`: ``validate``, run by :mod:`fastsim.validate`;
- :mod:`fastsim.commands.catalog`: ``catalog``, what the catalog holds and what fastsim read from a config.json.

Beside them, :mod:`fastsim.commands._resolve` turns ``simulate``'s and ``capacity``'s arguments
(and ``plan``'s workload) into the catalog's model, the demand, the plan, the engine settings
and the workloads.
"""
from __future__ import annotations

from . import bench, calibrate, capacity, catalog, fleet, ledger, plan, simulate, sweep, validate, whatif

#: The command modules, in the order of ``fastsim --help``.
COMMANDS = (plan, simulate, bench, capacity, ledger, whatif, sweep, calibrate, fleet, validate, catalog)

__all__ = ["COMMANDS"]
