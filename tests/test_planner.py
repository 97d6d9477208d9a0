"""End to end: the planner finds, verifies and ranks the cheapest deployments (SPEC §5, §7, §9)."""
import json
import os

import numpy as np
import pytest

from fastsim.analytic import Demand, ScreenOptions, screen
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


# --- a plan's JSON record makes the same plan again (`plan --format json` -> `--from-plan`) ---

ROUND_TRIPS = {
    # an MoE model over every layout: dp+ep and tp+ep plans at TP > 1, the TP1 plan under tp
    "moe-layouts": ("qwen3-30b-a3b", ScreenOptions(layouts=("dp+ep", "tp+ep", "tp"), tps=(1, 2, 4, 8))),
    "disaggregated": ("llama-3.1-70b", ScreenOptions(modes=("disaggregated",))),
    "heterogeneous": ("llama-3.1-70b", ScreenOptions(modes=("disaggregated",), heterogeneous=True)),
    "speculative": ("llama-3.1-70b", ScreenOptions(spec_alpha=0.7)),
    "prefix-hits": ("llama-3.1-70b", ScreenOptions(prefix_hit_fraction=0.3)),
    "queueing-screen": ("llama-3.1-70b", ScreenOptions(queueing=True)),
}


@pytest.mark.parametrize("name", sorted(ROUND_TRIPS))
def test_every_record_rebuilds_its_plan_exactly(name):
    from fastsim._output import dumps
    from fastsim.planner import plan_from_record
    cat = default_catalog()
    chat = cat.scenario("chat")
    demand = Demand.from_scenario(chat)
    model, opts = ROUND_TRIPS[name]
    report = plan_deployment(model, demand, chat, top_k=30, verify=False, options=opts, catalog=cat)
    assert len(report.deployments) >= 5
    for d in report.deployments:
        record = json.loads(dumps(d.to_dict()))      # through strict JSON text, as a file holds it
        assert record["layout"] == d.plan.layout and record["max_batch"] == 0
        assert plan_from_record(record, None, demand, catalog=cat) == d.plan
    plans = [d.plan for d in report.deployments]
    if name == "moe-layouts":
        assert {p.layout for p in plans} == {"tp", "tp+ep", "dp+ep"}
    if name == "heterogeneous":
        assert any(p.heterogeneous for p in plans)
    if name == "speculative":
        assert any(p.spec_gamma for p in plans) and any(p.spec_gamma == 0 for p in plans)


def test_record_carries_max_batch_and_the_capped_capacity():
    from dataclasses import replace

    from fastsim.analytic import plan_for
    from fastsim.planner import PlannedDeployment, plan_from_record
    cat = default_catalog()
    demand = Demand.from_scenario(cat.scenario("chat"))
    free = plan_for("llama-3.1-70b", demand, gpu="B200", precision="FP8", tp=1, catalog=cat)
    capped = plan_for("llama-3.1-70b", demand, gpu="B200", precision="FP8", tp=1, catalog=cat, max_batch=8)
    assert capped.max_batch == 8 and capped.batch == 8 < free.batch
    assert capped.instance_capacity_req_per_s < free.instance_capacity_req_per_s
    d = PlannedDeployment(capped, None, 0.5, 0.3, demand.rate_req_per_s, demand.mean_output_tokens)
    assert plan_from_record(d.to_dict(), None, demand, catalog=cat) == capped
    # a record without max_batch (older files) reads as uncapped
    rec = {k: v for k, v in PlannedDeployment(free, None, 0.5, 0.3, 20.0, 250.0).to_dict().items() if k != "max_batch"}
    assert plan_from_record(rec, None, demand, catalog=cat) == replace(free)


def test_record_without_layout_reads_as_tp_only_where_it_can_be_nothing_else():
    from fastsim.errors import FastsimInputError
    from fastsim.planner import plan_from_record
    cat = default_catalog()
    demand = Demand.from_scenario(cat.scenario("chat"))
    old = {"gpu": "H100", "precision": "FP8", "mode": "colocated", "tp": 4, "instances": 1, "chunk_tokens": 2048}
    # a dense model has one layout: tp
    assert plan_from_record(dict(old, model="llama-3.1-70b"), None, demand, catalog=cat).layout == "tp"
    # an MoE plan at TP1 is the plain TP1 plan whatever its layout was
    assert plan_from_record(dict(old, model="qwen3-30b-a3b", tp=1), None, demand, catalog=cat).layout == "tp"
    # an MoE plan at TP4 differs by layout: refused, not read as tp
    with pytest.raises(FastsimInputError, match=r"plan key layout: got None; allowed: tp, tp\+ep or dp\+ep: "
                                                r"qwen3-30b-a3b is a mixture-of-experts model, whose plans at TP4"):
        plan_from_record(dict(old, model="qwen3-30b-a3b"), None, demand, catalog=cat)
    with pytest.raises(FastsimInputError, match=r"plan key layout: got 'ep'; allowed: one of tp, tp\+ep, dp\+ep"):
        plan_from_record(dict(old, model="qwen3-30b-a3b", layout="ep"), None, demand, catalog=cat)
    with pytest.raises(FastsimInputError, match="plan key instances: got None"):
        plan_from_record({k: v for k, v in old.items() if k != "instances"}, "llama-3.1-70b", demand, catalog=cat)


def test_moe_dp_ep_plan_round_trips_through_simulate_from_plan(capsys, tmp_path):
    from cliutil import run
    rc, out, err = run(capsys, "plan", "--scenario", "chat", "--model", "qwen3-30b-a3b", "--layout", "dp+ep", "--tp",
                       "4", "--format", "json", "--seeds", "2", "--horizon", "60")
    assert rc == 0, err
    (best, *_) = json.loads(out)["plans"]
    assert (best["layout"], best["tp"], best["instances"]) == ("dp+ep", 4, 1)
    assert best["capacity_req_per_s"] == pytest.approx(188.2, abs=0.05)
    f = tmp_path / "moe.json"
    f.write_text(out)
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", "--model", "qwen3-30b-a3b", "--from-plan", str(f),
                       "--horizon", "30", "--format", "json")
    assert rc == 0, err
    assert json.loads(out)["runs"][0]["plan"] == "H100 FP8 colocated, 1 instance of DP4+EP4 (4 GPUs)"
    # the plan file fixes the plan: plan flags beside it are refused, --layout and --tp among them
    for flag, v in (("--layout", "tp"), ("--tp", "4"), ("--mode", "colocated")):
        rc, _, err = run(capsys, "simulate", "--scenario", "chat", "--from-plan", str(f), flag, v)
        assert rc == 2 and f"{flag}: got " in err and "no value with --from-plan" in err
    # a file of the old format (no layout) on this MoE plan is refused, naming the key
    old = json.loads(f.read_text())
    del old["plans"][0]["layout"]
    f.write_text(json.dumps(old))
    rc, _, err = run(capsys, "simulate", "--scenario", "chat", "--from-plan", str(f))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "--from-plan: got" in err and "plan key layout: got None" in err


def test_disaggregated_plan_round_trips_through_simulate_from_plan(capsys, tmp_path):
    from cliutil import run
    rc, out, err = run(capsys, "plan", "--scenario", "chat", "--mode", "disaggregated", "--heterogeneous",
                       "--no-verify", "--format", "json")
    assert rc == 0, err
    plans = json.loads(out)["plans"]
    f = tmp_path / "disagg.json"
    f.write_text(out)
    k = next(i for i, p in enumerate(plans) if "prefill_gpu" in p and p["prefill_gpu"] != p["gpu"])
    h = next(i for i, p in enumerate(plans) if "prefill_gpu" not in p)
    for i in (h, k):
        p = plans[i]
        rc, out, err = run(capsys, "simulate", "--scenario", "chat", "--from-plan", str(f), "--plan-index", str(i),
                           "--horizon", "20", "--format", "json")
        assert rc == 0, err
        described = json.loads(out)["runs"][0]["plan"]

        def inst(n, tp):
            return f"{n} instance{'s' if n != 1 else ''} of TP{tp}"
        sides = (f"{inst(p['prefill_instances'], p['prefill_tp'])} + decode "
                 f"{p['gpu']} {p['precision']} {inst(p['decode_instances'], p['decode_tp'])} ({p['gpus']} GPUs)")
        if i == k:     # the prefill side on its own GPU (it used to be simulated on the decode side's)
            assert described == f"disaggregated, prefill {p['prefill_gpu']} {p['prefill_precision']} {sides}"
        else:
            assert described == (f"{p['gpu']} {p['precision']} disaggregated, prefill "
                                 f"{inst(p['prefill_instances'], p['prefill_tp'])} + decode "
                                 f"{inst(p['decode_instances'], p['decode_tp'])} ({p['gpus']} GPUs)")


def test_verified_cost_divides_by_the_served_output_as_the_screen_does():
    """'$/M out' counted the output tokens of requests the context rejects ('$/M analytic' did not)."""
    from fastsim.analytic import Demand
    from fastsim.catalog import default_catalog
    from fastsim.planner import plan_deployment
    cat = default_catalog()
    sc = cat.scenario("coding-agent")
    d = Demand.from_scenario(sc)
    served = d.within_context(cat.model(sc.model).max_context_tokens)
    assert 0.9999 < served.served_fraction < 1.0
    rep = plan_deployment(sc.model, d, sc, verify=False, top_k=3, search="screen")
    assert rep.deployments
    for p in rep.deployments:
        assert p.served_fraction == served.served_fraction
        assert p.usd_per_million_output_tokens == p.analytic_usd_per_million_output_tokens
