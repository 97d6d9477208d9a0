"""Shared helper of the command-line tests: run ``fastsim`` in-process and capture its output."""
from fastsim.cli import main


def run(capsys, *argv):
    """Exit status, stdout and stderr of ``fastsim ARGV`` (argparse errors exit through SystemExit)."""
    try:
        rc = main(list(argv))
    except SystemExit as exc:
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err
