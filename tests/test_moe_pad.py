"""Step model v2's routing-granularity term (moe_pad_fraction): the GEMM's parameters by hand, SPEC §10 to the
bit at 0, fine-grained models charged more than coarse ones, and the fit's handling of it."""
from __future__ import annotations

import pytest

from fastsim.catalog import default_catalog
from fastsim.errors import FastsimInputError
from fastsim.stepmodel import P_MATMUL, StepConstants, step_params
from fastsim.validate.fit import START_MOE_PAD_FRACTION, default_names, fit_measurements

CAT = default_catalog()
H100, FP8 = CAT.gpu("H100"), CAT.precision("FP8")


def _matmul(model, c):
    return step_params(model, H100, FP8, 8, c)[P_MATMUL]


@pytest.mark.parametrize("name", ["qwen3-235b-a22b", "mixtral-8x7b"])
def test_the_padded_expert_flops_by_hand(name):
    m = CAT.model(name)
    base = _matmul(m, StepConstants())
    assert base == m.active_matmul_params                               # SPEC §10 to the bit
    q, f = 0.02, 0.8
    got = _matmul(m, StepConstants(moe_pad_fraction=q, moe_compute_factor=f))
    active_expert = m.moe_layers * m.experts_per_token * m.expert_params
    want = m.active_matmul_params + active_expert * ((1 + q * m.n_experts / m.experts_per_token) / f - 1)
    assert got == pytest.approx(want, rel=1e-12)


def test_a_fine_grained_model_pays_more_than_a_coarse_one():
    c = StepConstants(moe_pad_fraction=0.02)

    def slowdown(name):
        m = CAT.model(name)
        extra = _matmul(m, c) - m.active_matmul_params
        return 1 + extra / (m.moe_layers * m.experts_per_token * m.expert_params)

    assert slowdown("qwen3-235b-a22b") == pytest.approx(1 + 0.02 * 128 / 8, rel=1e-12)     # 1.32
    assert slowdown("mixtral-8x7b") == pytest.approx(1 + 0.02 * 8 / 2, rel=1e-12)          # 1.08
    dense = CAT.model("llama-3.1-70b")
    assert _matmul(dense, c) == dense.active_matmul_params


def test_bad_values_name_the_field():
    with pytest.raises(FastsimInputError, match="moe_pad_fraction"):
        StepConstants(moe_pad_fraction=-0.1)
    with pytest.raises(FastsimInputError, match="moe_pad_fraction"):
        StepConstants(moe_pad_fraction=float("nan"))


def test_the_fit_fits_it_with_moe_rows_only():
    from fastsim.validate import SHIPPED_CATALOG, SHIPPED_MEASUREMENTS, read_measurements
    from fastsim.catalog import load_catalog
    cat = load_catalog([str(SHIPPED_CATALOG)])
    ms = [m for m in read_measurements(SHIPPED_MEASUREMENTS, cat) if m.engine == "trtllm"]
    def is_moe(m):
        try:
            return cat.model(m.model).is_moe
        except FastsimInputError:          # a model fastsim refuses (chunked attention): its rows are not expressed
            return None

    moe = [m for m in ms if is_moe(m)]
    dense = [m for m in ms if is_moe(m) is False]
    assert {"moe_compute_factor", "moe_pad_fraction"} <= set(default_names(moe, cat))
    assert not {"moe_compute_factor", "moe_pad_fraction"} & set(default_names(dense, cat))
    # one granularity E/k: the term and moe_compute_factor enter only as their ratio, so it is not fitted
    qwen = [m for m in moe if m.model.startswith("qwen3")]
    assert {cat.model(m.model).n_experts / cat.model(m.model).experts_per_token for m in qwen} == {16.0}
    names = default_names(qwen, cat)
    assert "moe_compute_factor" in names and "moe_pad_fraction" not in names
    mixed = qwen + [m for m in moe if m.model == "mixtral-8x7b"][:1]
    assert "moe_pad_fraction" in default_names(mixed, cat)
    # a fit's start: the documented 0.02 where it fits the term
    fit = fit_measurements(moe[:40], cat, engine="trtllm", names=("moe_pad_fraction",), max_runs=8, max_nfev=1,
                           cross_validate=False)
    assert fit.start.moe_pad_fraction == START_MOE_PAD_FRACTION
