"""Step model v2's busiest expert-parallel rank (moe_load_cv): the order statistic against its closed forms
and Harter's table, the rank's load against a Monte Carlo draw of the routing, the step's parameters by
hand, SPEC §10 to the bit at 0 and under tensor-sharded experts, and the fit's handling of it."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fastsim.catalog import default_catalog
from fastsim.constants import load_calibration
from fastsim.errors import FastsimInputError
from fastsim.formulas import ep_busiest_rank_factor, expected_max_std_normal
from fastsim.stepmodel import P_EP_BW, P_MATMUL, StepConstants, step_params
from fastsim.validate.fit import START_MOE_LOAD_CV, _fold_names, default_names

CAT = default_catalog()
H200, FP8 = CAT.gpu("H200"), CAT.precision("FP8")
QWEN = CAT.model("qwen3-235b-a22b")


def test_the_expected_maximum_of_normals_closed_forms_and_table():
    assert expected_max_std_normal(1) == 0.0
    assert expected_max_std_normal(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-10)
    assert expected_max_std_normal(3) == pytest.approx(3 / (2 * math.sqrt(math.pi)), abs=1e-10)
    # Harter (1961), Biometrika 48, expected values of normal order statistics
    for n, z in ((4, 1.029375), (5, 1.162964), (8, 1.423600), (10, 1.538753), (20, 1.867475)):
        assert expected_max_std_normal(n) == pytest.approx(z, abs=2e-6)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "8", [8]])
def test_the_order_statistic_refuses_a_bad_count(bad):
    with pytest.raises(FastsimInputError) as info:
        expected_max_std_normal(bad)
    assert info.value.field == "n"


def test_the_busiest_rank_by_hand_and_its_identities():
    assert ep_busiest_rank_factor(128, 8, 1.0) == pytest.approx(1 + 1.4236003 * math.sqrt(8 / 128), rel=1e-7)
    assert ep_busiest_rank_factor(128, 1, 2.0) == 1.0                  # tensor-sharded: no rank waits
    assert ep_busiest_rank_factor(256, 8, 0.0) == 1.0                  # uniform routing, SPEC §10
    assert ep_busiest_rank_factor(128, 2, 0.5) < ep_busiest_rank_factor(128, 4, 0.5) < ep_busiest_rank_factor(128, 8, 0.5)
    # more experts per rank average out: DeepSeek-R1's 256 experts at EP8 wait less than Qwen3's 128
    assert ep_busiest_rank_factor(256, 8, 1.0) < ep_busiest_rank_factor(128, 8, 1.0)
    for field, args in (("n_experts", (0, 8, 1.0)), ("ep", (128, 0, 1.0)), ("ep", (8, 16, 1.0)),
                        ("expert_load_cv", (128, 8, -0.1)), ("expert_load_cv", (128, 8, float("nan"))),
                        ("expert_load_cv", (128, 8, True))):
        with pytest.raises(FastsimInputError) as info:
            ep_busiest_rank_factor(*args)
        assert info.value.field == field


@pytest.mark.parametrize("experts, ep, cv", [(128, 8, 0.5), (256, 8, 0.5), (128, 4, 1.0), (128, 2, 0.5), (8, 2, 0.5)])
def test_the_busiest_rank_against_a_monte_carlo_draw_of_the_routing(experts, ep, cv):
    # each expert's routed tokens in a step: gamma-distributed with the given CV; the ranks hold
    # consecutive blocks of E / G experts; the busiest rank's load over the step's mean rank load
    rng = np.random.default_rng(7)
    x = rng.gamma(1 / cv ** 2, 1.0, size=(40_000, experts))
    ranks = x.reshape(-1, ep, experts // ep).sum(axis=2)
    busiest = (ranks.max(axis=1) / ranks.mean(axis=1)).mean()
    got = ep_busiest_rank_factor(experts, ep, cv)
    # the excess over the mean within 5% of the draw's (a normal approximation of a gamma sum)
    assert got - 1 == pytest.approx(busiest - 1, rel=0.05)
    # the constraint that the ranks share one total is not a second correction: the independent
    # maximum's excess, z_G x cv sqrt(G / E), is what the draw gives
    assert abs((got - 1) - (busiest - 1)) < abs(expected_max_std_normal(ep) * cv * math.sqrt((ep - 1) / experts)
                                               - (busiest - 1))


def test_the_step_parameters_by_hand():
    cv, f = 0.8, 0.7
    base = step_params(QWEN, H200, FP8, 8, StepConstants(), dp=8, ep=8)
    assert base[P_MATMUL] == QWEN.active_matmul_params                  # SPEC §10 to the bit
    got = step_params(QWEN, H200, FP8, 8, StepConstants(moe_load_cv=cv, moe_compute_factor=f), dp=8, ep=8)
    b = 1 + expected_max_std_normal(8) * cv * math.sqrt(8 / 128)
    active_expert = QWEN.moe_layers * QWEN.experts_per_token * QWEN.expert_params
    assert got[P_MATMUL] == pytest.approx(QWEN.active_matmul_params + active_expert * (b / f - 1), rel=1e-12)
    assert got[P_EP_BW] == pytest.approx(base[P_EP_BW] / b, rel=1e-12)  # the busiest rank's all-to-all
    # tensor-sharded experts: every GPU computes a slice of every expert, no rank waits
    tp = step_params(QWEN, H200, FP8, 8, StepConstants(moe_load_cv=cv))
    assert np.array_equal(tp, step_params(QWEN, H200, FP8, 8, StepConstants()))
    dense = CAT.model("llama-3.1-70b")
    assert np.array_equal(step_params(dense, H200, FP8, 8, StepConstants(moe_load_cv=cv)),
                          step_params(dense, H200, FP8, 8, StepConstants()))


def test_bad_values_name_the_field():
    for bad in (-0.5, float("inf"), float("nan")):
        with pytest.raises(FastsimInputError, match="moe_load_cv"):
            StepConstants(moe_load_cv=bad)


def test_the_calibration_file_round_trip(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('format_version = 1\n[[constants]]\ngpu = "*"\nprecision = "*"\nmoe_load_cv = 0.75\n')
    cal = load_calibration(p)
    assert cal.step_constants("H200", "FP8").moe_load_cv == 0.75
    assert "moe_load_cv = 0.75" in cal.to_toml()
    p.write_text('format_version = 1\n[[constants]]\ngpu = "*"\nprecision = "*"\nmoe_load_cv = -1\n')
    with pytest.raises(FastsimInputError, match="moe_load_cv"):
        load_calibration(p)


def test_the_fit_fits_it_only_with_one_model_at_two_expert_parallel_degrees():
    from fastsim.catalog import load_catalog
    from fastsim.validate import SHIPPED_CATALOG, SHIPPED_MEASUREMENTS, read_measurements
    cat = load_catalog([str(SHIPPED_CATALOG)])
    ms = [m for m in read_measurements(SHIPPED_MEASUREMENTS, cat) if m.engine == "trtllm"]
    qwen = [m for m in ms if m.model == "qwen3-235b-a22b"]
    ep8 = [m for m in qwen if m.layout == "dp+ep" and m.tp == 8]
    ep4 = [m for m in qwen if m.layout == "dp+ep" and m.tp == 4]
    mixtral_tp = [m for m in ms if m.model == "mixtral-8x7b"]
    assert ep8 and ep4 and mixtral_tp
    qwen_tp1 = [m for m in ms if m.model == "qwen3-30b-a3b" and m.layout == "tp"]
    qwen_ep8 = [m for m in ms if m.model == "qwen3-30b-a3b" and m.layout == "dp+ep" and m.tp == 8]
    assert qwen_tp1 and qwen_ep8
    assert "moe_load_cv" not in default_names(ep8, cat)                 # one degree: a ratio with moe_compute_factor
    assert "moe_load_cv" not in default_names(mixtral_tp, cat)          # no expert parallelism at all
    assert "moe_load_cv" in default_names(ep8 + ep4, cat)
    assert "moe_load_cv" in default_names(qwen_ep8 + qwen_tp1, cat)     # EP8 beside the same model's tensor-sharded experts
    # two models, one degree each: each model's granularity and degree move together, so no
    assert "moe_load_cv" not in default_names(ep8 + mixtral_tp[:1], cat)
    # a fold whose rows cannot pin it keeps SPEC §10's 0, never a value read off the held-out rows
    start = StepConstants(moe_load_cv=START_MOE_LOAD_CV)
    names, fold_start = _fold_names(("eta_compute", "moe_load_cv"), start, ep8, cat)
    assert names == ("eta_compute",) and fold_start.moe_load_cv == 0.0
    assert START_MOE_LOAD_CV == 0.5
