"""docs/DEEPSEEK.md stays in step with tools/make_deepseek.py, and its figures are what the step model gives.

The generator's core (``compute``) runs once per module; the page is rendered from it and compared
with the committed one. The headline figures are re-derived here by hand from the model and GPU
attributes (SPEC §3, §10), so a change in the step model or the catalog shows up as a failure.
"""
import importlib.util
import math
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "DEEPSEEK.md"


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("make_deepseek", ROOT / "tools" / "make_deepseek.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def R(gen):
    return gen.compute()


@pytest.fixture(scope="module")
def page(gen, R):
    return gen.render(R) + "\n"


def test_committed_page_is_current(page):
    assert DOC.read_text(encoding="utf-8") == page, "docs/DEEPSEEK.md is stale: run python tools/make_deepseek.py"


def _summary_row(page, phase):
    rows = [line for line in page.splitlines() if line.startswith(f"| {phase} ")]
    assert len(rows) == 1
    return rows[0]


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_ratio_within_target_or_the_page_says_it_is_not(R, page, phase):
    r = R[f"{phase}_ratio"]
    row = _summary_row(page, phase)
    assert f"| {r:.2f} |" in row
    if 0.65 <= r <= 1.35:
        assert row.endswith("| yes |")
        assert f"fastsim's {phase} figure is outside" not in page
    else:
        assert "outside the 35% target" in row
        assert f"fastsim's {phase} figure is outside the 35% target ({r:.2f} of the published figure)" in page


def test_headline_ratios(R):
    # fastsim's serial step at 21 tokens/s per user, and the communication-bound prefill (see the page)
    assert R["decode_ratio"] == pytest.approx(0.96, abs=0.02)
    assert R["prefill_ratio"] == pytest.approx(0.67, abs=0.02)
    assert 0.65 <= R["decode_ratio"] <= 1.35 and 0.65 <= R["prefill_ratio"] <= 1.35


def test_decode_step_by_hand(gen, R):
    """The headline decode step from the model's and the GPU's attributes (SPEC §3 and §10's formulas)."""
    S = R["setup"]
    m, g = S.model, S.gpu
    b, G, ctx = R["decode_batch"], 144, 4989
    bw = 0.8 * g.hbm_bw_bytes_per_s
    dense = m.dense_matmul_params / bw                                   # FP8: 1 byte per weight
    experts = m.routed_expert_params * 2 / 256 / bw                      # 2 experts per GPU, all touched
    kv = b * ctx * m.layers * (512 + 64) / bw                            # 1-byte MLA latent cache
    compute = b * (2 * m.active_matmul_params + 4 * m.layers * ctx * 128 * (2 * 512 + 64) / 2) / (0.6 * 1979e12)
    a2a = 58 * 2 * ((G - 1) * 0.43e-6 + (G - 1) / G * b * 8 * 7168 * 2 / (0.85 * 50e9))
    step = max(dense + experts + kv, compute) + a2a + 61 * 12 * 1e-6
    d = R["decode"]
    assert d["expert_read_s"] == pytest.approx(experts, rel=1e-9)
    assert d["weight_read_s"] == pytest.approx(dense + experts, rel=1e-9)
    assert d["alltoall_s"] == pytest.approx(a2a, rel=1e-9)
    assert d["step_s"] == pytest.approx(step, rel=1e-9)
    assert 20.0 <= 1.0 / step <= 22.0
    assert d["node_tokens_per_s"] == pytest.approx(8 * b / step, rel=1e-12)
    assert d["fits"] and R["decode_ledger"].binding == "communication"


def test_prefill_accounting(R):
    S = R["setup"]
    assert (S.prompt_tokens, S.computed_tokens, S.cached_tokens) == (4096, 1790, 2306)
    assert S.computed_tokens == round(4096 * (1 - 0.563))
    p = R["prefill"]
    assert p["node_tokens_per_s"] == pytest.approx(p["node_computed_tokens_per_s"] * 4096 / 1790, rel=1e-12)
    led = R["prefill_ledger"]
    assert p["node_tokens_per_s"] == pytest.approx(led.tokens_per_s_per_gpu * 8 * 4096 / 1790, rel=1e-12)
    assert led.binding == "communication" and led.fits


def test_ablations_move_the_way_their_mechanism_says(R):
    by, d, p = R["by_key"], R["decode"], R["prefill"]
    node = lambda key, phase: by[key][phase]["node_tokens_per_s"]  # noqa: E731
    for key in ("max", "dbo", "fp8_dispatch"):                        # less communication on the step
        assert node(key, "decode") > d["node_tokens_per_s"] * 1.1
        assert node(key, "prefill") > p["node_tokens_per_s"] * 1.1
    assert node("dedup", "prefill") > node("fp8_dispatch", "prefill") * 1.5
    for key in ("bf16_mla", "imbalance"):                             # more work or a slower GPU
        assert node(key, "decode") < d["node_tokens_per_s"] * 0.95
    assert node("prefix", "prefill") < p["node_tokens_per_s"]
    assert by["attn_off"]["decode"]["step_s"] == pytest.approx(d["step_s"], rel=1e-12)   # compute under memory
    mtp = by["mtp"]["decode"]
    assert mtp["user_tokens_per_s"] == pytest.approx(1.85 / mtp["step_s"])
    assert d["step_s"] < mtp["step_s"] < 2 * d["step_s"]
    # each sensitivity row moves one constant and leaves the others at fastsim's defaults
    assert by["overhead=0.001"]["decode"]["step_s"] == pytest.approx(d["step_s"] - d["fixed_s"] + 1e-3, rel=1e-12)


def test_operating_point(R):
    """At the concurrency the published figures imply, fastsim's serial step with MTP is DeepSeek's step."""
    assert R["implied_batch"] == 88
    op = {k: r for k, _, r in R["operating_point"]}
    assert op["mtp"]["step_s"] == pytest.approx(1.85 / 21, rel=0.05)
    assert op["deployed_dec"]["user_tokens_per_s"] > 1.3 * 21        # an ideal overlap would be much faster


def test_expert_placement(gen, R):
    m = R["setup"].model
    _, load = gen.slot_loads(m.n_experts, 144, 2)
    assert load.max() == 2.0 and load.sum() == pytest.approx(256.0)
    _, load = gen.slot_loads(m.n_experts, 32, 9)
    assert load.min() == load.max() == 8.0
    imb = R["by_key"]["imbalance"]["decode"]["imbalance"]
    assert 2.0 / (256 / 144) <= imb < 1.4                          # structural 1.125 plus the multinomial spread
    assert gen.expected_remote_nodes(m, 32, 8) == pytest.approx(3 * (1 - math.comb(192, 8) / math.comb(256, 8)))


def test_page_sections_and_main(gen, page, tmp_path):
    heads = [line for line in page.splitlines() if re.match(r"^## ", line)]
    assert heads == ["## Summary", "## 1. What DeepSeek published, and what fastsim is given",
                     "## 2. Decode: EP144, 18 nodes", "## 3. Prefill: EP32, 4 nodes",
                     "## 4. Where the differences come from: ablations", "## 5. Reproducing the figures",
                     "## 6. Sources", "## 7. What fastsim does not model here"]
    out = tmp_path / "d.md"
    gen.main(["--out", str(out)])
    assert out.read_text(encoding="utf-8") == page
