"""Step model v2's PCIe all-reduce efficiency (eta_pcie, GPU.tp_link): the ring's time by hand, where it applies
and where it does not, its file round trip and what a fit does with it."""
from __future__ import annotations

import dataclasses

import pytest

from fastsim.catalog import default_catalog, load_catalog
from fastsim.constants import Calibration, CalibrationEntry, load_calibration
from fastsim.errors import FastsimInputError
from fastsim.stepmodel import (P_ALPHA, P_EP_BW, P_ETA_NV, P_HIDDEN, P_N_AR, P_NVLINK, P_TP, StepConstants,
                               step_params, step_parts)
from fastsim.validate import SHIPPED_CATALOG, SHIPPED_MEASUREMENTS, read_measurements
from fastsim.validate.fit import START_ETA_PCIE, _fold_names, _start_value, default_names

CAT = load_catalog([str(SHIPPED_CATALOG)])
L40S, H100 = CAT.gpu("L40S"), CAT.gpu("H100")
M70, FP8 = CAT.model("llama-3.1-70b"), CAT.precision("FP8")


def test_the_shipped_pcie_cards_and_the_builtin_nvlink_ones():
    assert {g: CAT.gpu(g).tp_link for g in ("L40S", "RTXPRO6000", "RTX4090")} == dict.fromkeys(
        ("L40S", "RTXPRO6000", "RTX4090"), "pcie")
    assert {g.tp_link for g in default_catalog().gpus.values()} == {"nvlink"}


def test_a_bad_tp_link_names_the_field_and_the_choices():
    with pytest.raises(FastsimInputError, match=r"gpu\.L40S\.tp_link.*nvlink, pcie"):
        dataclasses.replace(L40S, tp_link="infiniband")
    with pytest.raises(FastsimInputError, match="eta_pcie"):
        StepConstants(eta_pcie=0.0)
    with pytest.raises(FastsimInputError, match="eta_pcie"):
        StepConstants(eta_pcie=True)


def test_the_ring_allreduce_over_pcie_by_hand():
    c = StepConstants(eta_pcie=0.5)
    p = step_params(M70, L40S, FP8, 8, c)
    assert p[P_ETA_NV] == 0.5 and p[P_NVLINK] == 32e9
    n = 512.0
    ar = float(step_parts(p, n, 0.0, 0.0)[3])
    one = 2 * 7 * 0.43e-6 + 2 * 7 / 8 * (n * M70.hidden * 2.0) / (0.5 * 32e9)
    assert ar == pytest.approx(p[P_N_AR] * one, rel=1e-12)
    assert p[P_N_AR] == 2 * M70.layers and p[P_TP] == 8 and p[P_HIDDEN] == M70.hidden and p[P_ALPHA] == 0.43e-6
    # SPEC §3: eta_pcie None is eta_nvlink's, to the bit
    q = step_params(M70, L40S, FP8, 8, StepConstants())
    assert q[P_ETA_NV] == 0.85
    assert float(step_parts(q, n, 0.0, 0.0)[3]) == pytest.approx(ar * 0.5 / 0.85, rel=0.01)
    spec = 2 * 7 * 0.43e-6 + 2 * 7 / 8 * (n * M70.hidden * 2.0) / (0.85 * 32e9)
    assert float(step_parts(q, n, 0.0, 0.0)[3]) == pytest.approx(q[P_N_AR] * spec, rel=1e-12)
    assert (q == step_params(M70, L40S, FP8, 8, StepConstants(eta_pcie=None))).all()


def test_eta_pcie_leaves_nvlink_gpus_and_the_all_to_all_alone():
    a = step_params(M70, H100, FP8, 8, StepConstants())
    b = step_params(M70, H100, FP8, 8, StepConstants(eta_pcie=0.3))
    assert (a == b).all()
    moe = CAT.model("qwen3-30b-a3b")
    nv = step_params(moe, CAT.gpu("RTXPRO6000"), CAT.precision("NVFP4"), 4, StepConstants(), dp=4, ep=4)
    pc = step_params(moe, CAT.gpu("RTXPRO6000"), CAT.precision("NVFP4"), 4, StepConstants(eta_pcie=0.4), dp=4, ep=4)
    assert pc[P_ETA_NV] == 0.4
    # the all-to-all is charged at P_ETA_NV x P_EP_BW: still eta_nvlink x the link
    assert pc[P_ETA_NV] * pc[P_EP_BW] == pytest.approx(nv[P_ETA_NV] * nv[P_EP_BW], rel=1e-15)
    assert nv[P_ETA_NV] * nv[P_EP_BW] == pytest.approx(0.85 * 64e9, rel=1e-15)


def test_a_calibration_file_round_trips_eta_pcie(tmp_path):
    cal = Calibration((CalibrationEntry("*", "*", StepConstants(eta_pcie=0.45), ("eta_pcie",)),), "test", "trtllm")
    text = cal.to_toml()
    assert "eta_pcie = 0.45" in text
    path = tmp_path / "c.toml"
    cal.write(path)
    back = load_calibration(path, CAT)
    assert back.entries[0].constants.eta_pcie == 0.45
    none = Calibration((CalibrationEntry("*", "*", StepConstants(), ()),), "", "")
    assert "eta_pcie" not in none.to_toml()


def test_the_fit_fits_eta_pcie_only_on_pcie_rows_at_tp_above_one():
    ms = [m for m in read_measurements(SHIPPED_MEASUREMENTS, CAT) if m.engine == "trtllm"]
    t17 = [m for m in ms if m.family == "T17"]
    assert "eta_pcie" in default_names(t17, CAT)                                    # L40S at TP 4 and 8
    single = [m for m in t17 if m.gpu == "L40S" and m.tp == 1]
    assert single and "eta_pcie" not in default_names(single, CAT)
    # dp+ep runs no ring (attention TP 1): those rows cannot pin it; a pipeline's send over PCIe can
    dpep = [m for m in ms if m.gpu == "RTXPRO6000" and m.layout == "dp+ep" and m.pp == 1]
    assert dpep and {m.tp for m in dpep} >= {2, 4, 8} and "eta_pcie" not in default_names(dpep, CAT)
    pipe = [m for m in ms if m.gpu == "RTXPRO6000" and m.layout == "tp" and m.tp == 1 and m.pp > 1]
    assert pipe and "eta_pcie" in default_names(pipe, CAT)
    nvlink = [m for m in ms if m.gpu == "H100"]
    assert "eta_pcie" not in default_names(nvlink, CAT)
    # a fold without such rows keeps the start's published figure, not SPEC §3's None
    start = StepConstants(eta_pcie=START_ETA_PCIE)
    names, start_f = _fold_names(("eta_compute", "eta_pcie"), start, nvlink, CAT)
    assert names == ("eta_compute",) and start_f.eta_pcie == START_ETA_PCIE == 0.5
    assert _start_value(StepConstants(), "eta_pcie") == 0.85 and _start_value(start, "eta_pcie") == 0.5


def test_the_rtx_4090_entry_reports_what_nvidia_smi_shows():
    # 24,564 MiB: the memory vLLM sizes its pool from on an RTX 4090 (torch.cuda.mem_get_info's total)
    assert CAT.gpu("RTX4090").reported_hbm_bytes == 24564 * 2 ** 20
    assert CAT.gpu("RTX4090").hbm_bytes == 24e9


def test_a_pipeline_send_over_pcie_runs_at_eta_pcie():
    from fastsim.stepmodel import P_P2P_S_PER_TOKEN, stage_params
    rtx = CAT.gpu("RTXPRO6000")
    a = stage_params(M70, rtx, CAT.precision("NVFP4"), 1, StepConstants(), pp=2)
    b = stage_params(M70, rtx, CAT.precision("NVFP4"), 1, StepConstants(eta_pcie=0.425), pp=2)
    assert a[0, P_P2P_S_PER_TOKEN] > 0.0 and a[1, P_P2P_S_PER_TOKEN] == 0.0          # the last stage sends nothing
    assert b[0, P_P2P_S_PER_TOKEN] == pytest.approx(2.0 * a[0, P_P2P_S_PER_TOKEN], rel=1e-12)   # 0.85 / 0.425
