"""The ``fastsim`` command line: the parser of every command, and :func:`main`.

Every command prints a table by default, or JSON / CSV with ``--format``; times are seconds and
costs US dollars in JSON and CSV. Bad input ends with a one-line error naming the field and what is
allowed, and exit status 2.

The commands themselves are the modules of :mod:`fastsim.commands` (one each, in
:data:`fastsim.commands.COMMANDS`); their shared flags and helpers are in
:mod:`fastsim._command_helpers`. This module builds the parser from them, runs one, and names a
library parameter's error by the command's flag.
"""
from __future__ import annotations

import argparse
import sys

from ._command_helpers import _Parser
from .commands import COMMANDS
from .errors import FastsimInputError

__all__ = ["main", "build_parser"]

# Besides __all__: names that code and tests reach for here, where the command line held them
# before the commands moved to fastsim.commands (the same objects as there).
from ._command_helpers import _catalog, _check_plot, _constants, _fmt, _trace_notes  # noqa: E402,F401
from .commands.capacity import (CAPACITY_DESCRIPTION, MAX_INSTANCE_COUNT, MAX_INSTANCE_COUNTS,  # noqa: E402,F401
                                _capacity_notes, _capacity_summary, _instance_counts, _ProbeProgress)
from .commands.simulate import SIMULATE_DESCRIPTION  # noqa: E402,F401


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of every sub-command.

    Sub-commands: ``plan``, ``simulate``, ``bench``, ``capacity``, ``ledger``, ``ladder``,
    ``whatif``, ``sweep``, ``calibrate``, ``fleet`` (whose flags :mod:`fastsim.fleet.command`
    parses), each added by its module of :data:`fastsim.commands.COMMANDS`; each sets ``func``
    (the handler, the module's ``run``) and ``command`` on the parsed namespace.

    Returns
    -------
    argparse.ArgumentParser
        Its ``error`` prints one line and exits with status 2 (no usage dump).
    """
    ap = _Parser(prog="fastsim", description="Plan LLM inference deployments: analytic screen, "
                                 "simulation, repair and maximum sustainable rate.")
    from . import __version__
    ap.add_argument("--version", action="version", version=f"fastsim {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS:
        command.add_parser(sub)
    return ap


#: Library parameters whose errors a command names by its flag (when the command has that flag).
_PARAM_FLAGS = {"time_unit": "--time-unit", "routing": "--routing", "horizon_s": "--horizon",
                "skip_invalid": "--skip-invalid"}



def _as_flag(exc: FastsimInputError, parser, command: str) -> FastsimInputError:
    """``exc`` naming the command's flag instead of the library parameter it sets (:data:`_PARAM_FLAGS`)."""
    flag = _PARAM_FLAGS.get(exc.field)
    if flag is None:
        return exc
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    sp = sub.choices.get(command) if sub is not None else None
    if sp is None or not any(flag in a.option_strings for a in sp._actions):
        return exc
    return FastsimInputError(flag, exc.value, exc.allowed)


def main(argv=None) -> int:
    """Entry point of the ``fastsim`` console script (also ``python -m fastsim``).

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments without the program name; default ``sys.argv[1:]``.

    Returns
    -------
    int
        Exit status: the handler's (0 on success), 2 after a :class:`FastsimInputError` (printed
        on one line to stderr), 0 on a broken pipe, 130 on Ctrl-C.

    Raises
    ------
    SystemExit
        From argparse: status 2 on a malformed command line, 0 after ``--help``.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    # the commands read the catalog through this module's _catalog, looked up as the command starts
    # (fastsim._command_helpers._command_catalog), so that replacing it here reaches every command
    args._read_catalog = _catalog
    from ._compile_notice import compile_notice
    try:
        with compile_notice():
            return int(args.func(args) or 0)
    except FastsimInputError as exc:
        print(f"fastsim {args.command}: error: {_as_flag(exc, parser, args.command)}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print(f"fastsim {args.command}: interrupted" + ("; rerun with --resume to continue"
                                                        if args.command == "sweep" else ""), file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
