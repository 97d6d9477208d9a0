"""End to end: the planner finds, verifies and ranks the cheapest deployments (SPEC §5, §7, §9)."""
import json
import os

import numpy as np
import pytest

from fastsim.analytic import Demand, screen
from fastsim.catalog import default_catalog
from fastsim.cli import main
from fastsim.planner import plan_deployment
from fastsim.workload import read_trace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MOONCAKE = os.path.join(ROOT, "..", "shared", "data", "traces", "mooncake_conversation_trace.jsonl")


@pytest.fixture(scope="module")
def chat_report():
    cat = default_catalog()
    chat = cat.scenario("chat")
    return plan_deployment(chat.model, Demand.from_scenario(chat), chat, top_k=3, seeds=4, horizon_s=600.0,
                           search="screen")


def test_chat_ranks_b200_first_and_both_plans_pass(chat_report):
    best = chat_report.deployments[0]
    p = best.plan
    assert (p.gpu, p.precision, p.mode, p.tp, p.instances) == ("B200", "FP8", "colocated", 1, 2)
    assert best.usd_per_million_output_tokens == pytest.approx(0.444, rel=0.01)
    assert best.repair.passed and best.repair.repaired_from_instances is None
    h100 = [d for d in chat_report.deployments if d.plan.gpu == "H100"]
    assert h100, "4 x H100 FP8 TP2 must be listed"
    h = h100[0]
    assert (h.plan.precision, h.plan.tp, h.plan.instances, h.plan.gpus) == ("FP8", 2, 2, 4)
    assert h.usd_per_million_output_tokens == pytest.approx(best.usd_per_million_output_tokens, rel=1e-9)
    assert h.repair.passed


def test_every_verified_plan_met_attainment(chat_report):
    for d in chat_report.deployments:
        v = d.repair.verification
        assert v.passed == (v.attainment >= 0.90 and not v.overloaded)
        if d.repair.passed:
            assert v.attainment >= 0.90
        assert v.runs == 4 and v.measured > 4 * 0.6 * 600 * 20 * 0.9


def test_ranked_by_verified_cost(chat_report):
    costs = [d.usd_per_million_output_tokens for d in chat_report.deployments if d.repair.passed]
    assert costs == sorted(costs)


def test_json_format_fields(capsys):
    rc = main(["plan", "--scenario", "chat", "--top-k", "2", "--seeds", "2", "--horizon", "300", "--format", "json"])
    assert rc == 0
    plans = json.loads(capsys.readouterr().out)["plans"]
    assert len(plans) == 2
    for p in plans:
        for key in ("gpu", "precision", "mode", "gpus", "usd_per_million_output_tokens",
                    "efficiency_usd_per_million_output_tokens", "capacity_req_per_s", "verification"):
            assert key in p
        assert ("tp" in p and "instances" in p) or ("prefill_tp" in p and "decode_instances" in p)
        for key in ("attainment", "ttft_p90_s", "tpot_p90_s", "passed", "repaired_from_instances"):
            assert key in p["verification"]
        if p["verification"]["passed"]:
            assert p["verification"]["attainment"] >= 0.9


def test_csv_format(capsys):
    rc = main(["plan", "--scenario", "low-latency-8b", "--top-k", "1", "--seeds", "1", "--horizon", "120", "--format", "csv"])
    assert rc == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("model,gpu,precision,mode")
    assert "verification.attainment" in out[0]
    assert len(out) == 2


def test_azure_conv_replays_every_request():
    wl = read_trace("azure-conv")
    assert wl.n == 19_366
    d = Demand.from_lengths(wl.prompt_tokens, wl.output_tokens, rate_req_per_s=wl.mean_rate_req_per_s,
                            ttft_s=1.0, tpot_s=0.05)
    assert d.latency_prompt_tokens == pytest.approx(2734.5, abs=0.5)
    grid = screen("llama-3.1-70b", d)
    plan = grid[grid.feasible].iloc[0].plan
    from fastsim.search import sim_plan
    from fastsim.sim import simulate
    r = simulate(sim_plan(plan), wl.arrival_s, wl.prompt_tokens, wl.output_tokens,
                 horizon_s=float(np.nextafter(wl.duration_s, np.inf)), ttft_slo_s=1.0, tpot_slo_s=0.05)
    assert r.metrics.n_requests == 19_366
    assert r.metrics.rejected == 0
    # every request was admitted and got its first token
    assert np.isfinite(r.first_token_s).sum() + r.metrics.unfinished >= 19_366 - 5


def test_trace_rate_rescaling_moves_the_plan(capsys):
    rc = main(["plan", "--trace", "azure-code", "--model", "llama-3.1-70b", "--ttft", "2", "--tpot", "0.05",
               "--rate", "12", "--no-verify", "--format", "json", "--top-k", "1"])
    assert rc == 0
    out = capsys.readouterr()
    plan = json.loads(out.out)["plans"][0]
    assert plan["capacity_req_per_s"] >= 12
    assert "8,819 requests" in out.err


@pytest.mark.skipif(not os.path.exists(MOONCAKE), reason="Mooncake trace not beside the repository")
def test_mooncake_reports_requests_over_context(tmp_path, capsys):
    cat_file = tmp_path / "short.toml"
    cat_file.write_text('[models."llama-8k"]\nlayers = 80\nhidden = 8192\nheads = 64\nkv_heads = 8\n'
                        'head_dim = 128\nffn = 28672\nvocab = 128256\nmax_context_tokens = 8192\n')
    rc = main(["plan", "--trace", MOONCAKE, "--model", "llama-8k", "--catalog", str(cat_file), "--ttft", "2",
               "--tpot", "0.05", "--top-k", "1", "--seeds", "1", "--format", "json", "--search", "screen"])
    assert rc == 0
    out = capsys.readouterr()
    assert "5,570 requests exceed llama-8k's context of 8,192 tokens" in out.err
    # 46% of the requests can never be served: no plan can meet a P90 SLO, and the planner says why
    doc = json.loads(out.out)
    assert doc["plans"] == []
    assert "longer than llama-8k's context" in out.err
    assert any("longer than llama-8k's context" in n for n in doc["notes"])
    rc = main(["plan", "--trace", MOONCAKE, "--model", "llama-3.1-70b", "--ttft", "2", "--tpot", "0.05",
               "--no-verify", "--top-k", "1"])
    assert rc == 0
    assert "0 requests exceed llama-3.1-70b's context of 131,072" in capsys.readouterr().out
