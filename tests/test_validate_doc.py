"""docs/VALIDATION.md is what tools/make_validation.py writes from the shipped measurements, and the generator runs."""
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from test_validate import row, write_csv

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "VALIDATION.md"


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("make_validation", ROOT / "tools" / "make_validation.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _sections(text):
    """{heading: section text} of a document, split at its '## ' headings."""
    parts = re.split(r"(?m)^(?=## )", text)
    return {p.splitlines()[0]: p.strip() for p in parts if p.startswith("## ")}


def test_doc_has_the_generators_sections_in_order(gen):
    text = DOC.read_text(encoding="utf-8")
    assert [line for line in text.splitlines() if line.startswith("## ")] == [h for _, h in gen.SECTIONS]
    assert (ROOT / "docs" / "validation.png").read_bytes()[:4] == b"\x89PNG"


def test_doc_sections_are_what_the_generator_writes(gen):
    """Every figure of the document comes from the shipped set by the tool: regenerate and compare."""
    committed = _sections(DOC.read_text(encoding="utf-8"))
    fresh = _sections(gen.build())
    for _, head in gen.SECTIONS:
        assert committed[head] == fresh[head], f"section '{head}' of docs/VALIDATION.md is stale: run " \
                                               "python tools/make_validation.py"


def test_generator_runs_on_a_small_subset(gen, tmp_path):
    csv = write_csv(tmp_path / "m.csv", row(id="A1"), row(id="A2", metric="ttft_s", stat="p50", value="0.5"),
                    row(id="PP1", pp="2"))
    out = tmp_path / "V.md"
    assert gen.main(["--measurements", str(csv), "--out", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert [line for line in text.splitlines() if line.startswith("## ")] == [h for _, h in gen.SECTIONS]
    assert (tmp_path / "validation.png").read_bytes()[:4] == b"\x89PNG"
    assert "3 rows (1 engines, 1 GPU types); 2 expressed, 1 not (pipeline parallelism: 1)" in text
    assert "| PP1 | vllm | offline | output_tokens_per_s total | 5,000.0 tok/s | n/a | n/a | n/a | pipeline " \
           "parallelism (pp 2) under the vllm policy: fastsim simulates pipelines under lecture and trtllm only |" in text
    assert gen.build(str(csv)) == text                    # deterministic
