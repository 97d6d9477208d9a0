"""How an expert-parallel MoE layer moves its tokens (StepConstants.moe_dispatch, step model v2).

SPEC §10's all-to-all sends a token's hidden state once per routed expert (``k`` copies). DeepEP
sends it once per rank that holds one of its experts (the expected number of distinct ranks among
``k`` experts drawn without replacement), and TensorRT-LLM's attention-DP MoE at an EP degree up to
``k`` gathers every token on every rank (``G`` copies, whatever the routing). These tests check the
copies' closed forms against an exact enumeration, that the default leaves every step alone to the
bit, what each rule puts in the step's parameters, and that the rule is carried in calibration files
and refused when unknown, naming the field.
"""
from __future__ import annotations

import itertools
from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastsim.catalog import default_catalog
from fastsim.errors import FastsimInputError
from fastsim.formulas import MOE_DISPATCH, dispatch_copies, ep_busiest_rank_factor
from fastsim.stepmodel import P_EP_BW, P_TOPK, StepConstants, step_params, step_parts

CAT = default_catalog()
Q30, H200, FP8 = CAT.model("qwen3-30b-a3b"), CAT.gpu("H200"), CAT.precision("FP8")


def _distinct_ranks_by_enumeration(e, k, g):
    """Mean number of distinct ranks over every set of k experts, the experts dealt to the ranks in turn
    (expert i on rank i mod g: a balanced split, ranks of floor(e/g) or ceil(e/g) experts)."""
    total = sum(len({i % g for i in c}) for c in itertools.combinations(range(e), k))
    return total / comb(e, k)


def test_closed_forms():
    assert dispatch_copies(128, 8, 2, "per_expert") == 8.0
    assert dispatch_copies(128, 8, 2) == 8.0                              # SPEC §10 by default
    assert dispatch_copies(128, 8, 2, "allgather") == 2.0
    assert dispatch_copies(128, 8, 8, "allgather") == 8.0
    # Qwen3-30B-A3B at EP2: a token's 8 experts miss a rank's 64 with probability C(64,8)/C(128,8)
    miss = comb(64, 8) / comb(128, 8)
    assert dispatch_copies(128, 8, 2, "per_rank") == pytest.approx(2 * (1 - miss), rel=1e-13)
    assert dispatch_copies(128, 8, 2, "per_rank") == pytest.approx(1.9938, abs=1e-4)
    assert dispatch_copies(128, 8, 8, "per_rank") == pytest.approx(8 * (1 - comb(112, 8) / comb(128, 8)), rel=1e-13)
    # one expert a token: one rank; every expert: every rank; one rank: one copy
    assert dispatch_copies(64, 1, 8, "per_rank") == pytest.approx(1.0, rel=1e-15)
    assert dispatch_copies(8, 8, 4, "per_rank") == 4.0
    assert dispatch_copies(64, 6, 1, "per_rank") == 1.0


@pytest.mark.parametrize("e, k, g", [(8, 2, 2), (8, 3, 4), (12, 4, 3), (16, 5, 8), (10, 10, 5),
                                     (9, 4, 6), (6, 3, 4), (3, 2, 2), (11, 5, 3)])     # G not dividing E too
def test_per_rank_is_the_exact_mean_of_distinct_ranks(e, k, g):
    assert dispatch_copies(e, k, g, "per_rank") == pytest.approx(_distinct_ranks_by_enumeration(e, k, g), rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(g=st.sampled_from([1, 2, 3, 4, 8, 16]), per=st.integers(1, 32), extra=st.integers(0, 15),
       k=st.integers(1, 16))
def test_per_rank_between_one_and_the_smaller_of_k_and_g(g, per, extra, k):
    e = g * per + extra % g                        # G need not divide E
    k = min(k, e)
    v = dispatch_copies(e, k, g, "per_rank")
    assert 1.0 - 1e-12 <= v <= min(k, g) + 1e-12
    if k < e:                                      # one more expert a token reaches no fewer ranks
        assert dispatch_copies(e, k + 1, g, "per_rank") >= v - 1e-12


def test_bad_input_is_refused_naming_the_field():
    with pytest.raises(FastsimInputError, match="moe_dispatch: got 'per_token'"):
        dispatch_copies(128, 8, 2, "per_token")
    with pytest.raises(FastsimInputError, match="experts_per_token"):
        dispatch_copies(8, 9, 2)
    with pytest.raises(FastsimInputError, match="ep: got 16"):
        dispatch_copies(8, 2, 16)
    with pytest.raises(FastsimInputError, match="moe_dispatch: got 'a2a'; allowed: one of per_expert, per_rank, allgather"):
        StepConstants(moe_dispatch="a2a")
    assert MOE_DISPATCH == ("per_expert", "per_rank", "allgather")


def test_default_is_spec_10_to_the_bit_and_each_rule_sets_the_volume():
    base = StepConstants(moe_load_cv=1.0)
    p0 = step_params(Q30, H200, FP8, 8, base, dp=8, ep=8)
    pe = step_params(Q30, H200, FP8, 8, StepConstants(moe_load_cv=1.0, moe_dispatch="per_expert"), dp=8, ep=8)
    np.testing.assert_array_equal(p0, pe)
    assert p0[P_TOPK] == 8.0
    busiest = ep_busiest_rank_factor(128, 8, 1.0)
    ag = step_params(Q30, H200, FP8, 8, StepConstants(moe_load_cv=1.0, moe_dispatch="allgather"), dp=8, ep=8)
    pr = step_params(Q30, H200, FP8, 8, StepConstants(moe_load_cv=1.0, moe_dispatch="per_rank"), dp=8, ep=8)
    assert ag[P_TOPK] == 8.0 and pr[P_TOPK] == dispatch_copies(128, 8, 8, "per_rank")
    # an AllGather's volume does not follow the routing: no busiest rank in its bandwidth
    assert ag[P_EP_BW] == pytest.approx(p0[P_EP_BW] * busiest, rel=1e-15)
    assert pr[P_EP_BW] == p0[P_EP_BW]
    # the all-to-all part scales with the copies (its latency term aside): EP2 gathers 2 copies, not 8
    two = {d: step_params(Q30, H200, FP8, 2, StepConstants(moe_dispatch=d), dp=2, ep=2) for d in MOE_DISPATCH}
    a2a = {d: float(step_parts(p, 4096.0, 0.0, 0.0)[4]) for d, p in two.items()}
    lat = float(step_parts(two["per_expert"], 1e-9, 0.0, 0.0)[4])
    assert (a2a["allgather"] - lat) / (a2a["per_expert"] - lat) == pytest.approx(2 / 8, rel=1e-9)
    # every other parameter is the same
    for d in ("per_rank", "allgather"):
        diff = np.flatnonzero(two[d] != two["per_expert"])
        assert set(diff) <= {P_TOPK}, d
    # a dense model has no dispatch
    m8 = CAT.model("llama-3.1-8b")
    np.testing.assert_array_equal(step_params(m8, H200, FP8, 2, StepConstants(moe_dispatch="allgather")),
                                  step_params(m8, H200, FP8, 2, StepConstants()))


def test_carried_in_calibration_files(tmp_path):
    from fastsim.constants import Calibration, CalibrationEntry, load_calibration
    path = tmp_path / "c.toml"
    Calibration((CalibrationEntry("*", "*", StepConstants(moe_dispatch="allgather")),), engine="trtllm").write(path)
    assert 'moe_dispatch = "allgather"' in path.read_text(encoding="utf-8")
    assert load_calibration(path).step_constants("H200", "FP8", 1).moe_dispatch == "allgather"
    assert "moe_dispatch =" not in Calibration((CalibrationEntry("*", "*", StepConstants()),)).to_toml()
    bad = tmp_path / "bad.toml"
    for value, msg in (('"ring"', "moe_dispatch: got 'ring'; allowed: one of per_expert"),
                       ("2", "moe_dispatch: got 2; allowed: a string: per_expert, per_rank or allgather")):
        bad.write_text(f'format_version = 1\n\n[[constants]]\ngpu = "*"\nprecision = "*"\nmoe_dispatch = {value}\n',
                       encoding="utf-8")
        with pytest.raises(FastsimInputError, match=msg):
            load_calibration(bad)


def test_the_trtllm_fit_gathers_and_the_others_keep_spec_10s_dispatch():
    """TensorRT-LLM's attention-DP MoE gathers every token on every rank up to an EP degree of top-k (every
    shipped row): its fit starts from and keeps ``allgather``; vLLM and SGLang keep SPEC §10's."""
    from fastsim.constants import shipped_calibration
    from fastsim.validate.fit import ENGINE_MOE_DISPATCH
    assert ENGINE_MOE_DISPATCH == {"vllm": "per_expert", "sglang": "per_expert", "trtllm": "allgather"}
    for engine in ("trtllm", "vllm"):
        assert {e.constants.moe_dispatch for e in shipped_calibration(engine).entries} == {ENGINE_MOE_DISPATCH[engine]}


def test_an_allgather_calibration_moves_fewer_bytes_on_an_ep2_pcie_row(tmp_path):
    """The RTX PRO 6000 (PCIe) runs Qwen3-30B-A3B at EP2: gathering 2 copies of each token instead of
    sending 8 makes the step faster, so the throughput rises."""
    from dataclasses import replace
    from fastsim.catalog import load_catalog
    from fastsim.validate import SHIPPED_CATALOG, SHIPPED_MEASUREMENTS, read_measurements, run_measurements
    cat = load_catalog([str(SHIPPED_CATALOG)])
    (m,) = [m for m in read_measurements(SHIPPED_MEASUREMENTS, cat) if m.id == "T-q30-RTXPRO6000-tp2pp1-NVFP4-1000-1000"]
    c = StepConstants(step_form="classes", moe_load_cv=1.0)
    per_expert, allgather = (run_measurements([m], cat, replace(c, moe_dispatch=d))[0].predicted
                             for d in ("per_expert", "allgather"))
    assert allgather > 1.2 * per_expert


def test_the_ledger_notes_the_dispatch_and_its_all_to_all_column_shrinks(capsys, tmp_path):
    import json
    from cliutil import run
    path = tmp_path / "ag.toml"
    path.write_text('format_version = 1\n\n[[constants]]\ngpu = "*"\nprecision = "*"\nmoe_dispatch = "allgather"\n',
                    encoding="utf-8")
    argv = ("ledger", "--model", "qwen3-30b-a3b", "--gpu", "H200", "--precision", "FP8", "--tp", "2",
            "--layout", "dp+ep", "--format", "json")
    rc, out, err = run(capsys, *argv, "--calibration", str(path))
    assert rc == 0, err
    ag = json.loads(out)
    rc, out, err = run(capsys, *argv, "--constants", "lecture")
    assert rc == 0, err
    spec = json.loads(out)
    assert any(n.startswith("MoE dispatch: allgather, the all-to-all column moves each token to every") for n in ag["notes"])
    assert not any(n.startswith("MoE dispatch") for n in spec["notes"])
    big = [(a, b) for a, b in zip(ag["rows"], spec["rows"]) if b["alltoall_s"] > 1e-4]
    assert big and all(a["alltoall_s"] < b["alltoall_s"] for a, b in big)
