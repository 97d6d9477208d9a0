"""README claims about machine outputs that the code must keep true."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_plan_json_field_list_documents_screen_and_screen_view():
    from fastsim.verified import SCREEN_VIEWS
    para = " ".join(README.split("`plan --format json` prints one object")[1].split("\n\n")[0].split())
    assert "`screen_view`" in para and "`screen_reason`" in para
    assert '`"lecture"`' in para and '`"queueing"`' in para
    for v in SCREEN_VIEWS:
        assert f'`"{v}"`' in para, v


def test_every_command_takes_the_formats_the_readme_says():
    assert "`--format table|json|csv`" in README
    from fastsim.cli import build_parser
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, sp in sub.choices.items():
        fmt = [a for a in sp._actions if "--format" in a.option_strings]
        if fmt and fmt[0].choices is not None and {"table", "json"} <= set(fmt[0].choices):
            assert set(fmt[0].choices) == {"table", "json", "csv"}, name
