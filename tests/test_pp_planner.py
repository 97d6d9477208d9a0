"""Pipeline parallelism in plans, the analytic screen, the planner, the sweep and ``--emit``.

A plan's ``pp`` stages of ``tp`` GPUs each make an instance of ``tp x pp`` GPUs; every count and
cost follows. The screen tries ``pp`` 1 where a model's weights fit one node of the GPU, else 1, 2
and 4; it prices a pipelined instance by its steady-state round
(:func:`fastsim.stepmodel.pipeline_round_params`). Disaggregated plans are not pipelined.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from fastsim.analytic import Demand, ScreenOptions, instance_table, plan_for, screen
from fastsim.catalog import default_catalog
from fastsim.emit import launch_commands
from fastsim.errors import FastsimInputError
from fastsim.formulas import cost_usd_per_million_output_tokens
from fastsim.layouts import instance_label
from fastsim.planner import plan_from_record
from fastsim.stepmodel import (P_KV_BUDGET_TOKENS, kv_budget_tokens, pipeline_round_params, stage_params,
                               step_params)
from fastsim.search import pipeline_refusal, sim_plan, unsimulated_reason
from fastsim.sim import ColocatedPlan, PipelinePlan
import fastsim.sweep as SW

from cliutil import run

CAT = default_catalog()
M405, M70 = CAT.model("llama-3.1-405b"), CAT.model("llama-3.1-70b")
H100, FP8, BF16 = CAT.gpu("H100"), CAT.precision("FP8"), CAT.precision("BF16")
CHAT = CAT.scenario("chat")
#: The 405B check's demand: chat lengths at 1.5 req/s, P90 TTFT 3 s and TPOT 200 ms (at chat's own
#: 1 s TTFT no TP16 instance prefills the P90 prompt in time: its all-reduces cross the network).
D405 = Demand.from_scenario(CHAT, rate_req_per_s=1.5, ttft_s=3.0, tpot_s=0.2)


# ---------------------------------------------------------------------------------------------
# The pp axis of the screen
# ---------------------------------------------------------------------------------------------

def test_default_pp_is_one_where_the_weights_fit_a_node():
    o = ScreenOptions()
    # 70B: 141 GB in BF16 against 8 x 0.9 x 80 GB = 576 GB of an H100 node
    assert o.pps_for(M70, H100, BF16) == (1,) and o.pps_for(M70, H100, FP8) == (1,)
    # 405B in FP8 (405 GB) fits a node; in BF16 (810 GB) it does not: 1, 2 and 4 stages
    assert kv_budget_tokens(M405, FP8, H100, 8) > 0 > kv_budget_tokens(M405, BF16, H100, 8)
    assert o.pps_for(M405, H100, FP8) == (1,)
    assert o.pps_for(M405, H100, BF16) == (1, 2, 4)


def test_the_default_grid_of_a_model_that_does_not_fit_a_node_has_its_stages():
    t = instance_table(M405, Demand.from_scenario(CHAT), options=ScreenOptions(gpus=("H100",), precisions=("BF16",)))
    # TP 1, 2, 4, 8 (a dense model's default), each at 1, 2 and 4 stages: every stage TP fits a node
    assert sorted(zip(t.tp, t.pp)) == [(tp, pp) for tp in (1, 2, 4, 8) for pp in (1, 2, 4)]
    assert (t.gpus_per_instance == t.tp * t.pp).all()
    fits = t[t.status != 1]                     # 1: NO_FIT, weights + one request's KV do not fit
    # only pipelines of 16 or 32 GPUs hold 810 GB of BF16 weights and a P90 request's KV
    assert set(zip(fits.tp, fits.pp)) == {(4, 4), (8, 2), (8, 4)}
    t70 = instance_table(M70, Demand.from_scenario(CHAT), options=ScreenOptions(gpus=("H100",)))
    assert set(t70.pp) == {1}


def test_given_stage_counts_may_be_uneven_and_stop_at_the_layers():
    t = instance_table(M70, Demand.from_scenario(CHAT),
                       options=ScreenOptions(gpus=("H100",), precisions=("FP8",), tps=(2,), pps=(3, 80)))
    assert list(t.pp) == [3, 80] and list(t.gpus_per_instance) == [6, 160]
    with pytest.raises(FastsimInputError, match="pp") as e:
        instance_table(M70, Demand.from_scenario(CHAT), options=ScreenOptions(gpus=("H100",), pps=(81,)))
    assert "80 layers" in e.value.allowed
    for bad in ((0,), (True,), (2.0,), (2, 2), ()):
        with pytest.raises(FastsimInputError, match="pp"):
            ScreenOptions(pps=bad)


def test_a_given_stage_tp_above_a_node_is_a_refused_row_and_a_default_one_is_left_out():
    opts = ScreenOptions(gpus=("H100",), precisions=("FP8",), tps=(8, 16), pps=(1, 2))
    t = instance_table(M405, D405, options=opts)
    row = t[(t.tp == 16) & (t.pp == 2)].iloc[0]
    assert row.status == 4 and row.refusal.startswith("TP16 x PP2: a stage of 16 GPUs spans nodes")
    # the default axis of a model that does not fit a node: no TP16 x PP row at all (MoE TPs go to 64)
    m = CAT.model("deepseek-v3")
    t2 = instance_table(m, D405, options=ScreenOptions(gpus=("H100",), precisions=("FP8",)))
    assert set(t2.pp) == {1, 2, 4} and (t2[t2.pp > 1].tp <= 8).all() and (t2[t2.pp == 1].tp == 64).any()


def test_a_pipelined_row_is_its_round():
    """The screen's vector of TP8 x PP2 is the slowest stage's with its weight read, overhead and latencies
    taken twice: the step the kernel prices is the round in which each sequence gets a token."""
    from fastsim.analytic import _grid_arrays
    rows, params = _grid_arrays(M405, CAT, ScreenOptions(gpus=("H100",), precisions=("FP8",), tps=(8,), pps=(1, 2)))
    assert [(r[2], r[5]) for r in rows] == [(8, 1), (8, 2)]
    assert np.array_equal(params[0], step_params(M405, H100, FP8, 8))
    assert np.array_equal(params[1], pipeline_round_params(step_params(M405, H100, FP8, 8, pp=2)))
    t = instance_table(M405, D405, options=ScreenOptions(gpus=("H100",), precisions=("FP8",), tps=(8,), pps=(2,)))
    # the KV budget is the instance's: every stage holds its layers' KV of every sequence
    assert t.kv_budget_tokens.iloc[0] == stage_params(M405, H100, FP8, 8, pp=2)[0, P_KV_BUDGET_TOKENS]


# ---------------------------------------------------------------------------------------------
# GPU counts, costs, labels, records
# ---------------------------------------------------------------------------------------------

def test_gpu_counts_and_costs_double_with_two_stages():
    one = plan_for(M405, D405, gpu="H100", precision="FP8", tp=8, instances=3)
    two = plan_for(M405, D405, gpu="H100", precision="FP8", tp=8, instances=3, pp=2)
    assert (one.gpus_per_instance, one.gpus) == (8, 24) and (two.gpus_per_instance, two.gpus) == (16, 48)
    assert two.price_usd_per_hour == 2 * one.price_usd_per_hour == 48 * 2.0
    assert two.nodes_per_instance == 2 and one.nodes_per_instance == 1
    d = two.to_dict()
    assert (d["pp"], d["gpus"], d["gpus_per_instance"]) == (2, 48, 16) and "pp" not in one.to_dict()
    g = screen(M405, D405, options=ScreenOptions(gpus=("H100",), precisions=("FP8",), tps=(8,), pps=(1, 2),
                                                 modes=("colocated",)))
    r = g[g.pp == 2].iloc[0]
    assert r.gpus == r.instances * 16 and r.gpus_per_instance == 16
    mean_o = D405.within_context(M405.max_context_tokens).mean_output_tokens
    assert r.usd_per_million_output_tokens == pytest.approx(
        float(cost_usd_per_million_output_tokens(r.gpus, 2.0, 1.5, mean_o)), rel=1e-12)
    # the efficiency cost charges one instance's 16 GPUs for its capacity
    assert r.efficiency_usd_per_million_output_tokens == pytest.approx(
        16 * 2.0 / (r.instance_capacity_req_per_s * mean_o * 3600.0) * 1e6, rel=1e-12)


@pytest.mark.parametrize("layout, tp, pp, gpn, want", [
    ("tp", 8, 2, 8, "TP8 x PP2 on 2 nodes"), ("tp", 2, 2, 8, "TP2 x PP2 on 1 node"),
    ("tp", 4, 3, 8, "TP4 x PP3 on 2 nodes"), ("tp+ep", 8, 4, 8, "TP8+EP8 x PP4 on 4 nodes"),
    ("dp+ep", 4, 2, 72, "DP4+EP4 x PP2 on 1 node"), ("tp", 8, 1, 8, "TP8"),
])
def test_labels_say_the_stages_and_the_nodes(layout, tp, pp, gpn, want):
    assert instance_label(layout, tp, pp, gpn) == want


def test_a_plan_describes_its_pipeline():
    p = plan_for(M405, D405, gpu="H100", precision="FP8", tp=8, instances=1, pp=2)
    assert p.describe() == "H100 FP8 colocated, 1 instance of TP8 x PP2 on 2 nodes (16 GPUs)"


def test_a_record_rebuilds_its_pipelined_plan():
    from fastsim.planner import PlannedDeployment
    p = plan_for(M405, D405, gpu="H100", precision="FP8", tp=8, instances=1, pp=2)
    rec = PlannedDeployment(p, None, 1.0, 1.0, 1.5, 250.0).to_dict()
    assert (rec["tp"], rec["pp"], rec["gpus_per_instance"], rec["gpus"]) == (8, 2, 16, 16)
    assert plan_from_record(json.loads(json.dumps(rec)), None, D405) == p
    old = {k: v for k, v in rec.items() if k not in ("pp", "gpus_per_instance")}        # written before pp: 1
    assert plan_from_record(old, None, D405).pp == 1
    with pytest.raises(FastsimInputError, match="plan key pp"):
        plan_from_record(dict(rec, pp=127), None, D405)


# ---------------------------------------------------------------------------------------------
# Disaggregated plans are not pipelined
# ---------------------------------------------------------------------------------------------

def test_disaggregated_plans_with_stages_are_refused():
    with pytest.raises(FastsimInputError, match="pp") as e:
        plan_for(M405, D405, gpu="H100", precision="FP8", mode="disaggregated", tp=8, pp=2)
    assert "disaggregated" in e.value.allowed
    g = screen(M405, D405, options=ScreenOptions(gpus=("H100",), precisions=("FP8",), tps=(8,), pps=(1, 2)))
    dis = g[g["mode"] == "disaggregated"]
    assert len(dis) == 1 and (dis.pp == 1).all() and dis.plan.iloc[0].pp == 1
    # a grid of pipelined instances only has no disaggregated plan to offer
    g2 = screen(M405, D405, options=ScreenOptions(gpus=("H100",), precisions=("FP8",), tps=(8,), pps=(2,)))
    assert set(g2["mode"]) == {"colocated"}


def test_the_cli_refuses_pp_on_disaggregated_plans(capsys):
    rc, _, err = run(capsys, "plan", "--model", "llama-3.1-405b", "--scenario", "chat", "--gpu", "H100",
                     "--mode", "disaggregated", "--pp", "2", "--no-verify")
    assert rc == 2 and "--pp" in err and "--mode disaggregated" in err
    rc, _, err = run(capsys, "simulate", "--model", "llama-3.1-405b", "--scenario", "chat", "--gpu", "H100",
                     "--precision", "FP8", "--mode", "disaggregated", "--pp", "2")
    assert rc == 2 and "--pp" in err
    rc, _, err = run(capsys, "sweep", "--axis", "model=llama-3.1-405b", "--axis", "mode=disaggregated",
                     "--axis", "pp=1,2")
    assert rc == 2 and "axis pp" in err


# ---------------------------------------------------------------------------------------------
# Verification: the simulator's plan
# ---------------------------------------------------------------------------------------------

def test_sim_plan_of_a_pipelined_plan_is_its_stages():
    p = plan_for(M405, D405, gpu="H100", precision="FP8", tp=8, instances=2, pp=2)
    sp = sim_plan(p)
    assert isinstance(sp, PipelinePlan) and sp.n_stages == 2 and sp.n_instances == 2
    assert np.array_equal(sp.stages, stage_params(M405, H100, FP8, 8, pp=2))
    assert (sp.chunk_tokens, sp.max_batch) == (p.chunk_tokens, 0)
    assert isinstance(sim_plan(plan_for(M405, D405, gpu="H100", precision="FP8", tp=8)), ColocatedPlan)


def test_engine_policies_without_a_pipeline_are_refused_by_name():
    p = plan_for(M405, D405, gpu="H100", precision="FP8", tp=8, instances=1, pp=2)
    assert pipeline_refusal(p, None) == "" and pipeline_refusal(p, {"policy": "trtllm"}) == ""
    for pol in ("vllm", "sglang"):
        why = unsimulated_reason(p, {"policy": pol})
        assert f"the {pol} policy" in why and "lecture and trtllm" in why
    from fastsim.search import _engine_kwargs
    with pytest.raises(FastsimInputError, match="engine") as e:
        _engine_kwargs({"policy": "vllm"}, p, CAT, M405, None)
    assert "lecture or trtllm" in e.value.allowed and "TP8 x PP2" in e.value.allowed


def test_the_cli_refuses_a_policy_that_cannot_run_a_pipeline(capsys):
    rc, _, err = run(capsys, "simulate", "--model", "llama-3.1-405b", "--scenario", "chat", "--gpu", "H100",
                     "--precision", "FP8", "--tp", "8", "--pp", "2", "--instances", "1", "--policy", "vllm")
    assert rc == 2 and "--policy" in err and "lecture or trtllm" in err


def test_the_lone_request_crosses_every_stage():
    """A lone request's TTFT and TPOT on a pipeline: every chunk and every decode step runs through
    both stages in turn (a sequence is in one micro-batch at a time), each over its own 63 layers."""
    from fastsim.search.verify import _lone_times
    from fastsim.stepmodel import step_time
    p = plan_for(M405, D405, gpu="H100", precision="FP8", tp=8, instances=1, pp=2, chunk_tokens=1024)
    ttft, tpot = _lone_times(p, 1500.0, 300.0)
    S = stage_params(M405, H100, FP8, 8, pp=2)
    h, hd = M405.attn_dim_prefill, M405.attn_dim_decode
    want_ttft = sum(float(step_time(S[s], 1024.0, 0.0, 2.0 * 63 * h * 1024.0 ** 2, 1.0)
                          + step_time(S[s], 476.0, 1024.0, 2.0 * 63 * h * 476.0 ** 2 + 4.0 * 63 * h * 476.0 * 1024.0, 1.0))
                    for s in range(2))
    ctx = 1500.0 + 150.0
    want_tpot = sum(float(step_time(S[s], 1.0, ctx, 4.0 * 63 * hd * ctx, 1.0)) for s in range(2))
    assert ttft == pytest.approx(want_ttft, rel=1e-12) and tpot == pytest.approx(want_tpot, rel=1e-12)


def test_a_pipeline_is_not_the_same_deployment_as_its_tp_instances():
    from fastsim.verified import same_deployment_key
    a = plan_for(M405, D405, gpu="H100", precision="FP8", tp=8, instances=2, pp=2)
    b = plan_for(M405, D405, gpu="H100", precision="FP8", tp=8, instances=2)
    assert same_deployment_key(a) != same_deployment_key(b)
    assert same_deployment_key(a) == same_deployment_key(plan_for(M405, D405, gpu="H100", precision="FP8", tp=8,
                                                                  instances=2, pp=2))


# ---------------------------------------------------------------------------------------------
# The sweep's pp axis
# ---------------------------------------------------------------------------------------------

def test_the_sweep_has_a_pp_column_and_the_screen_figures():
    axes = dict(model="llama-3.1-405b", gpu="H100", precision="FP8", mode="colocated", tp=[8, 16], pp=[1, 2],
                scenario="chat", rate_req_per_s=1.5, ttft_s=3.0, tpot_s=0.2)
    t = SW.analytic_table(axes)
    assert list(zip(t.tp, t.pp)) == [(8, 1), (8, 2), (16, 1), (16, 2)]
    g = screen(M405, D405, options=ScreenOptions(gpus=("H100",), precisions=("FP8",), tps=(8, 16), pps=(1, 2),
                                                 modes=("colocated",)))
    for tp, pp in ((8, 1), (8, 2), (16, 1)):
        a, b = t[(t.tp == tp) & (t.pp == pp)].iloc[0], g[(g.tp == tp) & (g.pp == pp)].iloc[0]
        assert (a.gpus, a.instances) == (b.gpus, b.instances)
        assert a.instance_capacity_req_per_s == b.instance_capacity_req_per_s
        assert a.usd_per_million_output_tokens == pytest.approx(b.usd_per_million_output_tokens, rel=1e-12)
    bad = t[(t.tp == 16) & (t.pp == 2)].iloc[0]
    assert not bad.feasible and "stage's TP group larger than a node" in bad.reason
    # a plan without stages keeps its id: the grid without the axis lists it under the same one
    t0 = SW.analytic_table({k: v for k, v in axes.items() if k != "pp"})
    assert list(t0.point_id) == list(t[t.pp == 1].point_id)
    # both modes: a disaggregated point has no pp cell and is not repeated over the axis
    t2 = SW.analytic_table(dict(axes, mode=["colocated", "disaggregated"], tp=8))
    assert list(t2["mode"]) == ["colocated", "colocated", "disaggregated"] and t2.pp.isna().tolist()[-1]


def test_the_sweep_table_labels_a_pipeline(capsys):
    rc, out, _ = run(capsys, "sweep", "--axis", "model=llama-3.1-405b", "--axis", "gpu=H100", "--axis",
                     "precision=FP8", "--axis", "mode=colocated", "--axis", "tp=8", "--axis", "pp=2",
                     "--axis", "rate_req_per_s=1.5", "--axis", "ttft_s=3", "--axis", "tpot_s=0.2")
    assert rc == 0 and "TP8 x PP2 on 2 nodes" in out


# ---------------------------------------------------------------------------------------------
# --emit: the multi-node commands
# ---------------------------------------------------------------------------------------------

def _tp8pp2():
    return plan_for(M405, D405, gpu="H100", precision="FP8", tp=8, instances=1, pp=2)


def test_emit_vllm_runs_a_two_node_pipeline_on_ray():
    """vLLM's multi-node guide (docs/serving/parallelism_scaling.md) and its
    examples/online_serving/multi-node-serving.sh: a Ray head on node 0, a worker joining it on node 1,
    then one vllm serve with the stage TP, the stages and the Ray executor on node 0."""
    e = launch_commands(_tp8pp2(), "vllm")
    assert [(x["node_rank"], x["nodes_per_instance"], x["gpus_per_instance"]) for x in e] == [(0, 2, 16), (1, 2, 16),
                                                                                              (0, 2, 16)]
    assert e[0]["command"] == ["ray", "start", "--head", "--port=6379"]
    assert e[1]["command"] == ["ray", "start", "--address=<head-node-ip>:6379", "--block"]
    a = e[2]["command"]
    assert a[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-405B-Instruct"]
    i = a.index("--tensor-parallel-size")
    assert a[i:i + 4] == ["--tensor-parallel-size", "8", "--pipeline-parallel-size", "2"]
    assert a[-2:] == ["--distributed-executor-backend", "ray"]
    assert "--nnodes" not in a and "--headless" not in a


def test_emit_sglang_runs_the_command_on_each_node():
    """SGLang's ServerArgs (--tp-size, --pp-size, --nnodes, --node-rank, --dist-init-addr); its
    _launch_subprocesses (python/sglang/srt/entrypoints/engine.py) runs pp_size / nnodes stages a node."""
    e = launch_commands(_tp8pp2(), "sglang")
    assert [x["node_rank"] for x in e] == [0, 1]
    for r, x in enumerate(e):
        a = x["command"]
        i = a.index("--tp-size")
        assert a[i:i + 4] == ["--tp-size", "8", "--pp-size", "2"]
        assert a[-6:] == ["--nnodes", "2", "--node-rank", str(r), "--dist-init-addr", "<head-node-ip>:20000"]


def test_emit_a_one_node_pipeline_and_refusals():
    p = plan_for(M70, Demand.from_scenario(CHAT), gpu="H100", precision="BF16", tp=2, instances=2, pp=2)
    v = launch_commands(p, "vllm")
    a = v[0]["command"]
    i = a.index("--tensor-parallel-size")
    assert a[i:i + 4] == ["--tensor-parallel-size", "2", "--pipeline-parallel-size", "2"]
    assert "--distributed-executor-backend" not in a and v[0]["nodes_per_instance"] == 1 and v[-1]["role"] == "router"
    s = launch_commands(p, "sglang")[0]["command"]
    assert "--pp-size" in s and "--nnodes" not in s
    # 12 GPUs over 2 nodes of 8: SGLang puts pp_size / nnodes stages on a node, and 3 stages do not split
    odd = plan_for(M70, Demand.from_scenario(CHAT), gpu="H100", precision="BF16", tp=4, instances=1, pp=3)
    with pytest.raises(FastsimInputError, match="--emit") as e:
        launch_commands(odd, "sglang")
    assert "split evenly" in e.value.allowed
    assert launch_commands(odd, "vllm")[-1]["command"][-2:] == ["--distributed-executor-backend", "ray"]


# ---------------------------------------------------------------------------------------------
# The check: Llama-3.1-405B FP8 on 16 H100 (2 nodes), TP8 x PP2 against TP16
# ---------------------------------------------------------------------------------------------

def test_plan_405b_tp8_pp2_against_tp16_analytic(capsys):
    """``plan --tp 8,16 --pp 1,2``: TP8 x PP2 and TP16 both take 16 GPUs (2 nodes); the screen gives
    the pipeline 6.6 times the capacity of the one TP16 instance. Term by term, per step:

    - all-reduces: TP16's group spans the two nodes, so its 2 x 126 all-reduces run at the 50 GB/s
      network per GPU (15 / 16 of each token's 32 KB activation, twice, per all-reduce: ~0.36 ms per
      token of a step); a TP8 stage's 2 x 63 all-reduces stay on the 450 GB/s NVLink (~0.017 ms a
      token for both stages);
    - the stage send: the pipeline pays it instead, 2 x hidden BF16 values a token split over 8
      GPUs over the network once a step (~0.0015 ms a token);
    - weights: each GPU reads a 16th of them in both (a TP16 GPU the 16th of every layer, a TP8
      stage GPU the 8th of half the layers), so a decode step's weight read is the same;
    - KV: TP16 replicates the 8 KV heads (each GPU reads one head of all 126 layers), a TP8 stage
      GPU reads one head of 63 layers: half the KV read per GPU, and twice the KV budget.

    A prefill chunk of c tokens costs TP16 c x 0.36 ms of network all-reduce, so its TTFT and TPOT
    limits allow only a 256-token chunk beside 64 decodes (1.90 req/s), while the pipeline takes a
    2,048-token chunk beside 512 decodes per round (12.6 req/s). At 1.5 req/s each is one 16-GPU
    instance (same integer cost); TP8 x PP2 ranks first by efficiency. TP8 alone (8 GPUs, 6.4
    req/s) is cheaper still: 405B FP8 fits one node.
    """
    rc, out, _ = run(capsys, "plan", "--model", "llama-3.1-405b", "--scenario", "chat", "--rate", "1.5", "--ttft",
                     "3", "--tpot", "0.2", "--gpu", "H100", "--precision", "FP8", "--tp", "8,16", "--pp", "1,2",
                     "--mode", "colocated", "--no-verify", "--format", "json")
    assert rc == 0
    plans = json.loads(out)["plans"]
    got = [(p["tp"], p["pp"], p["instances"], p["gpus"]) for p in plans]
    assert got == [(8, 1, 1, 8), (8, 2, 1, 16), (16, 1, 1, 16)]
    pipe, tp16 = plans[1], plans[2]
    assert pipe["usd_per_million_output_tokens"] == tp16["usd_per_million_output_tokens"]
    assert pipe["efficiency_usd_per_million_output_tokens"] < tp16["efficiency_usd_per_million_output_tokens"]
    assert pipe["instance_capacity_req_per_s"] == pytest.approx(12.615, abs=1e-3)
    assert tp16["instance_capacity_req_per_s"] == pytest.approx(1.902, abs=1e-3)
    rc, out, _ = run(capsys, "plan", "--model", "llama-3.1-405b", "--scenario", "chat", "--rate", "1.5", "--ttft",
                     "3", "--tpot", "0.2", "--gpu", "H100", "--precision", "FP8", "--tp", "8", "--tp", "16",
                     "--pp", "2", "--mode", "colocated", "--no-verify")
    assert rc == 0 and "TP8 x PP2 on 2 nodes" in out


def test_plan_405b_tp8_pp2_against_tp16_verified(capsys):
    """The same question verified in simulation (2 seeds x 300 s, the lecture policy; the pipeline runs
    as a :class:`fastsim.sim.PipelinePlan` of its two stages).

    One TP8 x PP2 instance passes (16 GPUs, 2 nodes). TP16 does not at one instance: the screen's
    1.9 req/s is below what its prefill chunks leave it in simulation at 1.5 req/s (each chunk token
    pays ~0.36 ms of network all-reduce, so a 512-token chunk step takes ~0.2 s and the P90 TTFT nears
    the 3-s target), and the count search needs 2 instances (32 GPUs): twice the pipeline's cost. The
    pipeline is also faster to the first token (its P90 TTFT ~0.3 s against TP16's ~1 s): a stage's
    all-reduces stay on NVLink. TP16 x PP2 is no plan (a stage of 16 GPUs spans nodes).
    """
    rc, out, _ = run(capsys, "plan", "--model", "llama-3.1-405b", "--scenario", "chat", "--rate", "1.5", "--ttft",
                     "3", "--tpot", "0.2", "--gpu", "H100", "--precision", "FP8", "--tp", "8,16", "--pp", "1,2",
                     "--mode", "colocated", "--seeds", "2", "--horizon", "300", "--format", "json")
    assert rc == 0
    doc = json.loads(out)
    plans = {(p["tp"], p["pp"]): p for p in doc["plans"]}
    assert set(plans) == {(8, 1), (8, 2), (16, 1)}
    pipe, tp16 = plans[(8, 2)], plans[(16, 1)]
    assert pipe["verification"]["passed"] and (pipe["instances"], pipe["gpus"]) == (1, 16)
    assert pipe["screen_view"] == "kept"
    assert tp16["verification"]["passed"] and (tp16["instances"], tp16["gpus"]) == (2, 32)
    assert tp16["screen_view"] == "under-sized"
    assert pipe["usd_per_million_output_tokens"] == pytest.approx(tp16["usd_per_million_output_tokens"] / 2, rel=1e-12)
    assert pipe["verification"]["ttft_p90_s"] < tp16["verification"]["ttft_p90_s"] / 2
    assert [(p["tp"], p["pp"]) for p in doc["plans"]] == [(8, 1), (8, 2), (16, 1)]       # by verified cost
    assert any("TP16 x PP2: a stage of 16 GPUs spans nodes" in n for n in doc["notes"])


@pytest.mark.parametrize("policy", ["lecture", "trtllm"])
def test_simulate_runs_a_pipelined_plan_from_flags(capsys, policy):
    rc, out, _ = run(capsys, "simulate", "--model", "llama-3.1-405b", "--scenario", "chat", "--rate", "1.5", "--ttft",
                     "3", "--tpot", "0.2", "--gpu", "H100", "--precision", "FP8", "--tp", "8", "--pp", "2",
                     "--instances", "1", "--seeds", "1", "--horizon", "60", "--policy", policy, "--format", "json")
    assert rc == 0
    r = json.loads(out)["runs"][0]
    assert r["plan"] == "H100 FP8 colocated, 1 instance of TP8 x PP2 on 2 nodes (16 GPUs)"
    assert r["measured"] > 0 and r["attainment"] > 0.9


def test_a_pipelined_record_runs_from_plan(capsys, tmp_path):
    p = plan_for(M405, D405, gpu="H100", precision="FP8", tp=8, instances=1, pp=2)
    from fastsim.planner import PlannedDeployment
    rec = PlannedDeployment(p, None, 1.0, 1.0, 1.5, 250.0, 3.0, 0.2).to_dict()
    f = tmp_path / "plans.json"
    f.write_text(json.dumps({"plans": [rec]}))
    rc, out, _ = run(capsys, "simulate", "--scenario", "chat", "--from-plan", str(f), "--seeds", "1", "--horizon",
                     "60", "--format", "json")
    assert rc == 0 and "TP8 x PP2 on 2 nodes (16 GPUs)" in json.loads(out)["runs"][0]["plan"]
    rc, _, err = run(capsys, "simulate", "--scenario", "chat", "--from-plan", str(f), "--pp", "2")
    assert rc == 2 and "--pp" in err and "--from-plan" in err


def test_the_sweep_verifies_a_pipelined_point():
    axes = dict(model="llama-3.1-405b", gpu="H100", precision="FP8", mode="colocated", tp=8, pp=[1, 2],
                scenario="chat", rate_req_per_s=1.5, ttft_s=3.0, tpot_s=0.2)
    df = SW.run_sweep(axes, settings=SW.SweepSettings(verify="all", seeds=1, horizon_s=120.0))
    assert df.verified.all() and df.sim_passed.all()
    # the same simulation as the plan's own verification: the PipelinePlan of the point's stages
    from fastsim.search import SLO, verify
    from fastsim.sweep.tasks import _workload_seed
    from fastsim import workload as W
    w = W.synthesize(CHAT, 1.5, 120.0, W.seeds_for(_workload_seed(0, "chat"), 1)[0])
    row = df[df.pp == 2].iloc[0]
    p = plan_for(M405, D405, gpu="H100", precision="FP8", tp=8, instances=int(row.instances), pp=2,
                 chunk_tokens=int(row.chunk_tokens))
    v = verify(p, [(w.arrival_s, w.prompt_tokens, w.output_tokens)], SLO(3.0, 0.2), horizon_s=120.0)
    assert v.attainment == row.sim_attainment and v.measured == row.sim_measured


def test_speculation_and_prefix_hits_are_not_pipelined():
    opts = ScreenOptions(gpus=("H100",), precisions=("FP8",), tps=(8,), pps=(1, 2), spec_alpha=0.8, spec_gammas=(2,))
    t = instance_table(M405, D405, options=opts)
    assert sorted(zip(t.pp, t.spec_gamma)) == [(1, 0), (1, 2), (2, 0), (2, 2)]
    spec2 = t[(t.pp == 2) & (t.spec_gamma == 2)].iloc[0]
    assert spec2.status == 4 and "speculative decoding on a pipelined instance" in spec2.refusal
    assert t[(t.pp == 2) & (t.spec_gamma == 0)].iloc[0].refusal == ""
    with pytest.raises(FastsimInputError, match="pp"):
        plan_for(M405, D405, gpu="H100", precision="FP8", tp=8, pp=2, spec_gamma=2, options=opts)
    hit = plan_for(M405, D405, gpu="H100", precision="FP8", tp=8, pp=2, instances=1,
                   options=ScreenOptions(prefix_hit_fraction=0.5))
    assert "pipelined instance" in unsimulated_reason(hit, {"policy": "trtllm"}, prefixes=True)
