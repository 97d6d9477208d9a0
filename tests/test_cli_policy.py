"""``--policy`` and its flags on simulate, capacity and plan; the planner under an engine policy."""
import csv
import io
import json

import numpy as np
import pytest

from cliutil import run
from fastsim.analytic import Demand, plan_for
from fastsim.catalog import default_catalog
from fastsim.planner import unsimulated_reason
from fastsim.search import SLO, sim_plan, verify
from fastsim.sim import simulate
from fastsim.workload import seeds_for, synthesize

PLAN = ["--gpu", "B200", "--precision", "FP8", "--instances", "2", "--chunk", "512"]
CAT = default_catalog()


def simulate_json(capsys, *extra):
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", "--horizon", "40", "--format", "json", *PLAN, *extra)
    assert rc == 0, err
    return json.loads(out)


def test_simulate_policy_outputs_match_the_api(capsys):
    # SPEC §3's constants, as the API's default (the vllm policy's own default is vLLM's fit)
    d = simulate_json(capsys, "--policy", "vllm", "--max-num-seqs", "64", "--shared-prefix", "1024",
                      "--constants", "lecture")
    r = d["runs"][0]
    assert r["policy"] == "vllm"
    # the same run through the API
    w = synthesize("chat", 20.0, 40.0, seeds_for(0, 1)[0], shared_prefix_tokens=1024)
    plan = plan_for("llama-3.1-70b", Demand.from_scenario(CAT.scenario("chat")), gpu="B200", precision="FP8",
                    instances=2, chunk_tokens=512)
    from fastsim.sim.policy import engine_policy
    from fastsim.stepmodel import P_KV_BUDGET_TOKENS
    sp = sim_plan(plan)
    pol = engine_policy("vllm", CAT.gpu("B200").hbm_bytes, max_num_seqs=64,
                        kv_budget_tokens=float(sp.p[P_KV_BUDGET_TOKENS]), context_tokens=131072)
    m = simulate(sp, w.arrival_s, w.prompt_tokens, w.output_tokens, horizon_s=40.0, ttft_slo_s=1.0, tpot_slo_s=0.05,
                 policy=pol, prefix=w.prefix).metrics
    assert r["preemptions"] == m.preemptions
    assert r["cached_prompt_tokens"] == m.cached_prompt_tokens > 0
    assert r["cache_hit_fraction"] == pytest.approx(m.cache_hit_fraction)
    assert r["ttft_p90_s"] == pytest.approx(m.ttft_p90_s)
    assert any("max_num_seqs 64" in n for n in d["notes"])


def test_simulate_policy_csv_and_table_columns(capsys):
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", "--horizon", "20", "--format", "csv", *PLAN,
                       "--policy", "sglang")
    assert rc == 0, err
    rows = list(csv.DictReader(io.StringIO(out.split("\n\n")[0])))
    assert rows[0]["policy"] == "sglang" and "preemptions" in rows[0] and "spec_tokens_per_round" in rows[0]
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", "--horizon", "20", *PLAN, "--policy", "vllm")
    assert rc == 0 and "preemptions" in out and "cache hit" in out


def test_simulate_speculative_decoding(capsys):
    d = simulate_json(capsys, "--policy", "vllm", "--spec-alpha", "0.8")
    r = d["runs"][0]
    want = (1 - 0.8 ** 5) / (1 - 0.8)
    assert abs(r["spec_tokens_per_round"] - want) / want < 0.05
    assert any("speculative decoding: gamma 4" in n for n in d["notes"])


@pytest.mark.parametrize("extra, flag", [
    (["--max-num-seqs", "8"], "--max-num-seqs"),                      # engine flags need an engine policy
    (["--spec-alpha", "0.8"], "--spec-alpha"),
    (["--policy", "vllm", "--routing", "prefix-aware", "--mode", "disaggregated"], "--policy"),
])
def test_engine_flag_errors_name_the_flag(capsys, extra, flag):
    args = ["simulate", "--scenario", "chat", "--horizon", "10", "--gpu", "B200", "--precision", "FP8"] + extra
    if "--mode" not in extra:
        args += ["--instances", "1"]
    rc, out, err = run(capsys, *args)
    assert rc == 2 and flag in err


def test_a_disaggregated_plan_under_trtllm_is_refused_naming_every_engine_policy(capsys):
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", "--horizon", "10", "--gpu", "B200", "--precision",
                       "FP8", "--mode", "disaggregated", "--policy", "trtllm")
    assert rc == 2
    assert err.strip().endswith("--policy: got 'trtllm'; allowed: lecture for a disaggregated plan (the vllm, sglang "
                                "and trtllm policies model colocated instances)")


def test_capacity_under_vllm(capsys):
    rc, out, err = run(capsys, "capacity", "--scenario", "chat", "--gpu", "B200", "--precision", "FP8",
                       "--instances", "1", "--seeds", "2", "--horizon", "60", "--tol", "0.05", "--format", "json",
                       "--policy", "vllm", "--max-num-batched-tokens", "2048", "--constants", "lecture")
    assert rc == 0, err
    d = json.loads(out)
    assert any("policy vllm" in n and "max_num_batched_tokens 2048" in n for n in d["notes"])
    # the same search through the API
    from fastsim.search import max_sustainable_rate
    sc = CAT.scenario("chat")
    plan = plan_for("llama-3.1-70b", Demand.from_scenario(sc), gpu="B200", precision="FP8", instances=1)
    res = max_sustainable_rate(plan, sc, SLO(sc.ttft_s, sc.tpot_s), seeds=2, horizon_s=60.0, rel_tol=0.05,
                               engine={"policy": "vllm", "max_num_batched_tokens": 2048, "spec_seed": 0})
    assert d["rate_req_per_s"] == pytest.approx(res.rate_req_per_s, rel=1e-12) and res.rate_req_per_s > 0
    lecture = max_sustainable_rate(plan, sc, SLO(sc.ttft_s, sc.tpot_s), seeds=2, horizon_s=60.0, rel_tol=0.05)
    assert lecture.rate_req_per_s != res.rate_req_per_s


def test_unsimulated_reason_follows_the_policy():
    d = Demand.from_scenario(CAT.scenario("chat"))
    spec = plan_for("llama-3.1-70b", d, gpu="B200", precision="FP8", instances=2, spec_gamma=0)
    from dataclasses import replace
    spec = replace(spec, spec_gamma=2, spec_alpha=0.8, spec_draft="llama-3.1-8b")
    hit = replace(spec, spec_gamma=0, prefix_hit_fraction=0.5)
    assert "speculative" in unsimulated_reason(spec)
    assert unsimulated_reason(spec, {"policy": "vllm"}) == ""
    assert "prefix" in unsimulated_reason(hit, {"policy": "vllm"}, prefixes=False)
    assert unsimulated_reason(hit, {"policy": "vllm"}, prefixes=True) == ""
    dis = plan_for("llama-3.1-70b", d, gpu="B200", precision="FP8", mode="disaggregated", prefill_tp=1, decode_tp=1,
                   prefill_instances=1, decode_instances=1)
    assert "disaggregated" in unsimulated_reason(dis, {"policy": "vllm"})


def test_verify_refuses_a_speculative_plan_under_the_lecture_policy():
    from dataclasses import replace
    from fastsim.errors import FastsimInputError
    d = Demand.from_scenario(CAT.scenario("chat"))
    p = replace(plan_for("llama-3.1-70b", d, gpu="B200", precision="FP8", instances=2),
                spec_gamma=2, spec_alpha=0.8, spec_draft="llama-3.1-8b")
    w = synthesize("chat", 5.0, 20.0, 0)
    with pytest.raises(FastsimInputError, match="engine"):
        verify(p, [w], SLO(1.0, 0.05), horizon_s=20.0)
    v = verify(p, [w], SLO(1.0, 0.05), horizon_s=20.0, engine={"policy": "vllm"})
    assert v.runs == 1 and v.attainment > 0.9


def test_from_plan_keeps_the_plans_speculative_decoding(capsys, tmp_path):
    rc, out, err = run(capsys, "plan", "--scenario", "chat", "--spec-alpha", "0.8", "--no-verify", "--format", "json",
                       "--top-k", "3", "--gpu", "B200", "--precision", "FP8")
    assert rc == 0, err
    plans = json.loads(out)["plans"]
    k = next(i for i, p in enumerate(plans) if p.get("spec_gamma"))
    f = tmp_path / "plans.json"
    f.write_text(out)
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", "--from-plan", str(f), "--plan-index", str(k),
                       "--horizon", "30", "--policy", "vllm", "--format", "json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["runs"][0]["spec_tokens_per_round"] > 1.0
    assert any(f"gamma {plans[k]['spec_gamma']}" in n for n in d["notes"])
    # its own speculation and the flag's cannot both apply
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", "--from-plan", str(f), "--plan-index", str(k),
                       "--horizon", "30", "--policy", "vllm", "--spec-alpha", "0.5")
    assert rc == 2 and "--spec-alpha" in err


@pytest.mark.parametrize("extra, flag", [
    (["--spec-gamma", "3"], "--spec-gamma"),
    (["--spec-draft", "mtp"], "--spec-draft"),
    (["--session-gap", "5"], "--session-gap"),
])
def test_flags_that_need_another_flag(capsys, extra, flag):
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", "--horizon", "10", *PLAN, "--policy", "vllm", *extra)
    assert rc == 2 and flag in err


def test_shared_prefix_is_refused_on_a_trace_and_noted_under_lecture(capsys):
    rc, out, err = run(capsys, "simulate", "--trace", "azure-conv", "--model", "llama-3.1-8b", "--ttft", "1",
                       "--tpot", "0.05", "--gpu", "H100", "--precision", "FP8", "--instances", "1",
                       "--policy", "vllm", "--shared-prefix", "512")
    assert rc == 2 and "--shared-prefix" in err
    d = simulate_json(capsys, "--shared-prefix", "256")
    assert any("lecture policy has no prefix cache" in n for n in d["notes"])


def test_prefix_hit_above_the_traces_bound_is_noted(capsys):
    rc, out, err = run(capsys, "plan", "--trace", "mooncake-conv", "--model", "llama-3.1-8b", "--ttft", "2",
                       "--tpot", "0.1", "--prefix-hit", "0.9", "--no-verify", "--top-k", "1", "--format", "json")
    assert rc == 0, err
    notes = json.loads(out)["notes"]
    assert any("above what even an unbounded cache could serve" in n and "0.373" in n for n in notes)


def test_plan_settings_are_the_emitted_ones():
    """With plan_settings (plan --policy X --emit X), the verification runs the settings --emit writes."""
    from fastsim.emit import launch_commands
    from fastsim.search import _engine_kwargs
    from fastsim.stepmodel import StepConstants
    d = Demand.from_scenario(CAT.scenario("chat"))
    plan = plan_for("llama-3.1-70b", d, gpu="B200", precision="FP8", instances=2, chunk_tokens=512)
    assert plan.batch > 0
    model = CAT.model("llama-3.1-70b")
    for name, budget in (("vllm", plan.batch + 512), ("sglang", 512)):
        kw = _engine_kwargs({"policy": name, "plan_settings": True}, plan, CAT, model, StepConstants())
        pol = kw["policy"]
        assert (pol.max_num_seqs, pol.max_num_batched_tokens) == (plan.batch, budget)
        argv = launch_commands(plan, name, CAT, model)[0]["command"]
        flag_seqs = "--max-num-seqs" if name == "vllm" else "--max-running-requests"
        flag_budget = "--max-num-batched-tokens" if name == "vllm" else "--chunked-prefill-size"
        assert argv[argv.index(flag_seqs) + 1] == str(plan.batch)
        assert argv[argv.index(flag_budget) + 1] == str(budget)


def test_from_plan_of_another_scenario_is_noted(capsys, tmp_path):
    rc, out, err = run(capsys, "plan", "--scenario", "coding-agent", "--no-verify", "--format", "json", "--top-k", "1")
    assert rc == 0, err
    f = tmp_path / "ca.json"
    f.write_text(out)
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", "--from-plan", str(f), "--horizon", "20",
                       "--format", "json")
    assert rc == 0, err
    notes = json.loads(out)["notes"]
    assert any("rate 4 (the scenario's 20)" in n and "chat's request lengths" in n for n in notes)


def test_no_verify_with_a_policy_says_nothing_was_simulated(capsys):
    rc, out, err = run(capsys, "plan", "--scenario", "chat", "--policy", "trtllm", "--no-verify", "--top-k", "1",
                       "--format", "json")
    assert rc == 0, err
    notes = json.loads(out)["notes"]
    assert any(n.startswith("--no-verify: nothing is simulated") and "trtllm" in n for n in notes)
    assert not any(n.startswith("verification under") for n in notes)
    rc, out, err = run(capsys, "plan", "--scenario", "chat", "--policy", "trtllm", "--top-k", "1", "--format", "json",
                       "--horizon", "30", "--seeds", "1")
    assert rc == 0, err
    assert any(n.startswith("verification under the trtllm policy") for n in json.loads(out)["notes"])
