"""Heterogeneous disaggregation: prefill and decode on different GPU types or precisions, priced per side."""
import json

import numpy as np
import pytest

from cliutil import run
from fastsim.analytic import Demand, ScreenOptions, cost_usd_per_million_output_tokens, screen
from fastsim.catalog import default_catalog
from fastsim.search import SLO, sim_plan, verify
from fastsim.stepmodel import step_params
from fastsim.workload import seeds_for, synthesize

CAT = default_catalog()
CHAT = CAT.scenario("chat")
D = Demand.from_scenario(CHAT)
OPTS = ScreenOptions(heterogeneous=True, modes=("disaggregated",))


@pytest.fixture(scope="module")
def grid():
    return screen(CHAT.model, D, options=OPTS)


def test_screen_adds_pairs_of_sides_priced_each_at_its_own_price(grid):
    het = grid[grid.plan.map(lambda p: p is not None and p.heterogeneous)]
    assert len(het) >= 10
    pairs = {(p.prefill_gpu_name, p.prefill_precision_name, p.gpu, p.precision) for p in het.plan}
    assert ("H100", "FP8", "H200", "FP8") in pairs and ("B200", "FP8", "H200", "FP8") in pairs
    for _, r in het.iterrows():
        p = r.plan
        assert (p.prefill_gpu_name, p.prefill_precision_name) != (p.gpu, p.precision)
        price_p, price_d = CAT.gpu(p.prefill_gpu_name).price_usd_per_hour, CAT.gpu(p.gpu).price_usd_per_hour
        usd_h = p.prefill_tp * p.prefill_instances * price_p + p.decode_tp * p.decode_instances * price_d
        assert p.price_usd_per_hour == pytest.approx(usd_h, rel=1e-12)
        assert r.usd_per_million_output_tokens == pytest.approx(
            usd_h / (D.rate_req_per_s * D.mean_output_tokens * 3600.0) * 1e6, rel=1e-12)
        assert p.prefill_instances * p.prefill_capacity_req_per_s >= D.rate_req_per_s
        assert p.decode_instances * p.decode_capacity_req_per_s >= D.rate_req_per_s
    # each side's capacity is the one its GPU and precision give in the homogeneous rows
    homo = grid[grid.plan.map(lambda p: p is not None and not p.heterogeneous)]
    cap_p = {(p.gpu, p.precision): (p.prefill_tp, p.prefill_capacity_req_per_s) for p in homo.plan}
    for p in het.plan:
        if (p.prefill_gpu_name, p.prefill_precision_name) in cap_p:
            assert (p.prefill_tp, p.prefill_capacity_req_per_s) == cap_p[(p.prefill_gpu_name, p.prefill_precision_name)]


def test_default_screen_has_no_heterogeneous_rows():
    g = screen(CHAT.model, D)
    assert "prefill_gpu" not in g.columns
    assert not any(p is not None and p.heterogeneous for p in g.plan)


def test_simulator_runs_each_side_on_its_own_gpu(grid):
    het = [p for p in grid.plan if p is not None and p.heterogeneous and p.prefill_gpu_name == "B200"
           and p.gpu == "H200"]
    p = het[0]
    sp = sim_plan(p)
    m = CAT.model(p.model)
    want_p = step_params(m, CAT.gpu("B200"), CAT.precision(p.prefill_precision_name), p.prefill_tp)
    want_d = step_params(m, CAT.gpu("H200"), CAT.precision(p.precision), p.decode_tp)
    assert np.array_equal(sp.p_prefill, want_p) and np.array_equal(sp.p_decode, want_d)
    wls = [(w.arrival_s, w.prompt_tokens, w.output_tokens)
           for w in (synthesize(CHAT, CHAT.rate_req_per_s, 600.0, c) for c in seeds_for(0, 2))]
    v = verify(p, wls, SLO(CHAT.ttft_s, CHAT.tpot_s), horizon_s=600.0)
    assert v.passed and v.rejected == 0


def test_cli_heterogeneous_json_and_emit(capsys):
    rc, out, err = run(capsys, "plan", "--scenario", "chat", "--heterogeneous", "--mode", "disaggregated",
                       "--no-verify", "--format", "json", "--emit", "vllm")
    assert rc == 0, err
    plans = json.loads(out)["plans"]
    het = [p for p in plans if "prefill_gpu" in p]
    assert het and all(p["prefill_gpu"] != p["gpu"] or p["prefill_precision"] != p["precision"] for p in het)
    for p in het:       # both sides spelt out: GPUs x price per side is the plan's price per hour
        assert p["decode_gpu"] == p["gpu"] and p["prefill_gpus"] + p["decode_gpus"] == p["gpus"]
        assert p["usd_per_hour"] == pytest.approx(p["prefill_gpus"] * p["prefill_price_usd_per_gpu_hour"]
                                                  + p["decode_gpus"] * p["decode_price_usd_per_gpu_hour"])
    assert all(p["launch"] is None for p in het)
