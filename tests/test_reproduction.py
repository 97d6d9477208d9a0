"""docs/REPRODUCTION.md stays in step with tools/make_reproduction.py, and the generator still runs.

The full generator simulates for minutes; here it runs with ``--fast`` (tiny simulations) and the
committed report is checked against the generator's section list and its simulation-free sections.
"""
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from fastsim.whatif import simulator_available

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "docs" / "REPRODUCTION.md"


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("make_reproduction", ROOT / "tools" / "make_reproduction.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _headings(text):
    return [line for line in text.splitlines() if re.match(r"^## ", line)]


def test_report_has_the_generators_sections_in_order(gen):
    text = REPORT.read_text(encoding="utf-8")
    assert _headings(text) == [h for _, h in gen.SECTIONS]
    assert "Reduced effort" not in text, "the committed report was made with --fast"


def test_report_simulation_free_sections_are_current(gen):
    """The ledger and ladder sections need no simulation: regenerate them and compare verbatim."""
    text = REPORT.read_text(encoding="utf-8")
    fresh = gen.build(gen.Config(), only=["ledger", "ladder"])
    for key in ("ledger", "ladder"):
        head = gen.HEADING[key]
        start = fresh.index(head)
        nxt = fresh.find("\n## ", start + 1)
        section = fresh[start:nxt if nxt >= 0 else None].strip()
        assert section in text, f"section '{head}' of docs/REPRODUCTION.md is stale: run tools/make_reproduction.py"


def test_fast_run_writes_every_section(gen, tmp_path):
    out = tmp_path / "r.md"
    gen.main(["--fast", "--out", str(out)])
    text = out.read_text(encoding="utf-8")
    assert _headings(text) == [h for _, h in gen.SECTIONS]
    assert "Reduced effort" in text
    for s in ("0.444", "1.389", "0.556", "0.139", "16.41", "0.271", "6.48 ms", "163x",
              "1,260.8, the lecture's 1,261"):
        assert s in text
    assert "16.57" not in text, "the figure of the screen before SPEC §5's revision"
    if simulator_available():
        for s in ("analytic / simulated", "simulated / analytic", "attainment only", "overloaded",
                  "no instance count can pass", "round-robin", "verified search"):
            assert s in text


def test_lecture_rows_use_the_lecture_pipeline(gen):
    """Every `fastsim plan` command that verifies a lecture figure names --search screen; the verified
    search's rows are the only ones without it."""
    text = REPORT.read_text(encoding="utf-8")
    for line in text.splitlines():
        for cmd in re.findall(r"`(fastsim plan [^`]*)`", line):
            if "--no-verify" in cmd:
                continue
            if "--search screen" not in cmd:
                assert line.startswith("| ") and "verified search" in line.split("|")[1], line[:120]


def test_report_figures_of_the_revised_screen():
    """The committed report states the revised screen's figures beside the lecture's (SPEC §9)."""
    text = REPORT.read_text(encoding="utf-8")
    assert "| one B200 FP8 TP1 chat instance, analytic req/s | 16.2 | 16.41 |" in text
    assert "| B200 efficiency cost, chat | 0.274 | 0.271 |" in text
    assert "| FP8 forbidden, chat | 2.00x | 2.00x" in text
    assert "Of the top 6 analytic plans 3 need a repair (lecture: 3 of 6)" in text
    for stale in ("16.57", "fastsim 1.50x", "same 1-2% capacity difference"):
        assert stale not in text


def test_only_writes_the_named_sections(gen, tmp_path):
    out = tmp_path / "r.md"
    gen.main(["--fast", "--only", "ledger", "planner", "--out", str(out)])
    assert _headings(out.read_text(encoding="utf-8")) == [gen.HEADING["ledger"], gen.HEADING["planner"]]
    with pytest.raises(SystemExit):
        gen.main(["--only", "no-such-section", "--out", str(out)])
