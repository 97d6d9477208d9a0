"""Launch commands pass the engines' start-up checks; simulate / calibrate refuse what an engine refuses.

The rules (``fastsim/engine_rules.py``, each tested against its source in
``tests/test_engine_rules.py``):

* vLLM ``vllm/v1/core/kv_cache_utils.py`` ``check_enough_kv_cache_memory`` (commit 001cabc1): one
  request of ``max_model_len`` needs ``cdiv(max_model_len, 16)`` blocks
  (``FullAttentionSpec.max_memory_usage_bytes``), which must fit the blocks the engine allocates
  (``get_num_blocks``, less the null block of ``BlockPool.__init__``).
* vLLM ``vllm/config/scheduler.py`` ``SchedulerConfig.verify_max_model_len`` (commit 01230b40):
  ``max_num_batched_tokens >= max_num_seqs``.
* SGLang ``python/sglang/srt/configs/model_config.py`` ``ModelConfig._derive_context_length``
  (commit 001adf56), ``python/sglang/srt/server_args.py`` ``ServerArgs.check_server_args``, and the
  KV pool of ``ModelRunner.init_memory_pool``.
"""
from __future__ import annotations

import json

import pytest
from cliutil import run

from fastsim.analytic import Plan
from fastsim.catalog import default_catalog, load_catalog
from fastsim.emit import launch_commands
from fastsim.engine_rules import sglang_refusal, vllm_max_model_len, vllm_refusal
from fastsim.errors import FastsimInputError
from fastsim.stepmodel import StepConstants, kv_budget_tokens

CAT = default_catalog()
PLANS = {
    "chat": Plan(model="llama-3.1-70b", gpu="B200", precision="FP8", mode="colocated", tp=1, instances=2,
                 chunk_tokens=512, batch=128),
    "disagg": Plan(model="llama-3.1-70b", gpu="H100", precision="FP8", mode="disaggregated", tp=2, instances=1,
                   prefill_tp=1, prefill_instances=3, decode_tp=2, decode_instances=1, batch=358),
    "moe": Plan(model="deepseek-v3", gpu="H200", precision="FP8", mode="colocated", tp=16, instances=2,
                chunk_tokens=1024, batch=512, layout="dp+ep", spec_gamma=2, spec_alpha=0.8, spec_draft="mtp"),
    # a long-context model whose KV does not hold its 131,072-token context: 8,827 tokens on 2 x H100
    "long": Plan(model="llama-3.1-70b", gpu="H100", precision="BF16", mode="colocated", tp=2, instances=1,
                 chunk_tokens=256, batch=8),
    "spec": Plan(model="qwen3-235b-a22b", gpu="H200", precision="BF16", mode="colocated", tp=8, instances=1,
                 chunk_tokens=256, batch=64, layout="tp+ep", spec_gamma=4, spec_alpha=0.8, spec_draft="qwen3-30b-a3b"),
    # a decode batch above vLLM's default budget (8,192 on an H100): the budget must be written
    "bigdecode": Plan(model="llama-3.1-8b", gpu="H100", precision="FP8", mode="disaggregated", tp=1, instances=1,
                      prefill_tp=1, prefill_instances=1, decode_tp=1, decode_instances=1, batch=9000),
}


def flags(argv):
    """``{flag: value or True}`` of an argv."""
    out = {}
    for i, a in enumerate(argv):
        if a.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out[a] = nxt if nxt is not None and not nxt.startswith("--") else True
    return out


def rank_kv(plan, entry, cat=CAT):
    gpus = entry["gpus_per_instance"]
    m, g, p = cat.model(plan.model), cat.gpu(plan.gpu), cat.precision(plan.precision)
    dp = gpus if plan.layout == "dp+ep" else 1
    kv = int(kv_budget_tokens(m, p, g, gpus, StepConstants(), **plan.layout_kwargs(gpus)))
    return kv // dp if dp > 1 else kv


def check_entry(plan, engine, e, cat=CAT):
    """The entry's command passes the engine's rules, and its context is the longest that fits."""
    f = flags(e["command"])
    kv = rank_kv(plan, e, cat)
    model_ctx = cat.model(plan.model).max_context_tokens
    if engine == "vllm":
        ctx = int(f["--max-model-len"])
        seqs = int(f["--max-num-seqs"]) if "--max-num-seqs" in f else None
        budget = int(f["--max-num-batched-tokens"]) if "--max-num-batched-tokens" in f else None
        if seqs and budget is None:
            budget = 8192 if cat.gpu(plan.gpu).hbm_bytes >= 70 * 2 ** 30 else 2048      # vLLM's default
        assert vllm_refusal(max_num_seqs=seqs, max_num_batched_tokens=budget, max_model_len=ctx,
                            kv_tokens=kv, kv_cache_dtype=f.get("--kv-cache-dtype", "auto")) is None, e
        if ctx < model_ctx:                      # lowered: whole blocks, and one block more is refused
            assert ctx % 16 == 0 and ctx == vllm_max_model_len(kv)
            assert vllm_refusal(max_model_len=ctx + 1, kv_tokens=kv) is not None
    else:
        ctx = int(f["--context-length"])
        chunk = int(f["--chunked-prefill-size"]) if "--chunked-prefill-size" in f else None
        assert sglang_refusal(max_running_requests=int(f.get("--max-running-requests", 1)), chunked_prefill_size=chunk,
                              context_length=ctx, model_context_length=model_ctx, kv_tokens=kv,
                              kv_cache_dtype=f.get("--kv-cache-dtype", "auto")) is None, e
        assert ctx == min(model_ctx, kv)
    return ctx


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("name", sorted(PLANS))
def test_emitted_commands_pass_the_rules(engine, name):
    plan = PLANS[name]
    for e in launch_commands(plan, engine):
        if e["role"] != "router":
            check_entry(plan, engine, e)


def test_long_context_is_lowered_to_whole_blocks():
    e = launch_commands(PLANS["long"], "vllm")[0]
    assert flags(e["command"])["--max-model-len"] == "8800"           # 8,827 tokens: 551 blocks, 550 usable
    assert any("550 blocks of 16 tokens" in n and "check_enough_kv_cache_memory" in n for n in e["notes"])
    s = launch_commands(PLANS["long"], "sglang")[0]
    assert flags(s["command"])["--context-length"] == "8827"          # SGLang's pool is whole 1-token pages


def test_decode_budget_written_when_the_default_is_below_the_cap():
    d = [e for e in launch_commands(PLANS["bigdecode"], "vllm") if e["role"] == "decode"][0]
    f = flags(d["command"])
    assert f["--max-num-seqs"] == "9000" and f["--max-num-batched-tokens"] == "9000"
    assert any("below --max-num-seqs 9000" in n for n in d["notes"])
    # a decode batch within the default budget keeps vLLM's default
    small = [e for e in launch_commands(PLANS["disagg"], "vllm") if e["role"] == "decode"][0]
    assert "--max-num-batched-tokens" not in small["command"]


def test_plan_deployment_commands_pass_the_rules(capsys):
    rc, out, err = run(capsys, "plan", "--scenario", "chat", "--no-verify", "--top-k", "5", "--format", "json")
    assert rc == 0, err
    from fastsim.planner import plan_deployment
    from fastsim.analytic import Demand
    scen = CAT.scenario("chat")
    rep = plan_deployment(scen.model, Demand.from_scenario(scen), scen, verify=False, catalog=CAT)
    for d in rep.deployments:
        for engine in ("vllm", "sglang"):
            for e in launch_commands(d.plan, engine):
                if e["role"] != "router":
                    check_entry(d.plan, engine, e)


def test_bf16_weights_with_an_fp8_kv_cache(tmp_path):
    """A precision of BF16 weights and 1-byte KV emits the engine's FP8 KV flag, no weight quantization."""
    f = tmp_path / "kv8.toml"
    f.write_text('[precisions.BF16-KV8]\nweight_bytes = 2\nkv_bytes = 1\nflops_key = "bf16"\n')
    cat = load_catalog([str(f)])
    plan = Plan(model="llama-3.1-70b", gpu="H100", precision="BF16-KV8", mode="colocated", tp=2, instances=1,
                chunk_tokens=256, batch=8)
    v = launch_commands(plan, "vllm", catalog=cat)[0]
    fv = flags(v["command"])
    assert fv["--kv-cache-dtype"] == "fp8" and "--quantization" not in fv
    assert any("BF16 weights with an FP8 KV cache" in n for n in v["notes"])
    s = launch_commands(plan, "sglang", catalog=cat)[0]
    assert flags(s["command"])["--kv-cache-dtype"] == "fp8_e4m3" and "--quantization" not in s["command"]
    # twice the KV tokens of BF16 KV on the same GPUs: the context the rules allow grows with it
    ctx8 = check_entry(plan, "vllm", v, cat)
    ctx16 = int(flags(launch_commands(PLANS["long"], "vllm")[0]["command"])["--max-model-len"])
    assert ctx8 > 1.9 * ctx16
    # an FP8-weight checkpoint cannot be served as BF16 weights: still refused by name of its format
    with pytest.raises(FastsimInputError) as exc:
        launch_commands(Plan(model="deepseek-v3", gpu="H200", precision="BF16-KV8", mode="colocated", tp=16,
                             instances=1, chunk_tokens=256, batch=8), "vllm", catalog=cat)
    assert "ships FP8 weights" in exc.value.allowed


def test_no_whole_block_is_refused_with_the_engines_reason():
    """An instance whose KV holds less than two blocks: vLLM would not start."""
    plan = Plan(model="llama-3.1-70b", gpu="H100", precision="FP8", mode="colocated", tp=1, instances=1,
                chunk_tokens=256, batch=8)
    args = CAT.model(plan.model), CAT.precision("FP8"), CAT.gpu("H100"), 1
    k9, k8 = (kv_budget_tokens(*args, StepConstants(memory_utilization=u)) for u in (0.9, 0.8))
    tight = StepConstants(memory_utilization=0.9 - (k9 - 20.0) / ((k9 - k8) / 0.1))   # 20 KV tokens left
    kv = kv_budget_tokens(*args, tight)
    assert 1 <= kv < 32
    with pytest.raises(FastsimInputError) as exc:
        launch_commands(plan, "vllm", constants=tight)
    assert exc.value.field == "--emit" and "no available memory for the cache blocks" in exc.value.allowed
    assert "--context-length" in launch_commands(plan, "sglang", constants=tight)[0]["command"]


# --- simulate / capacity / calibrate refuse engine settings the engine refuses ----------------------

PLAN = ["--gpu", "B200", "--precision", "FP8", "--instances", "1", "--chunk", "512"]


@pytest.mark.parametrize("extra, field, value", [
    (["--max-num-batched-tokens", "100", "--max-num-seqs", "256"], "--max-num-batched-tokens / --max-num-seqs",
     "100 / 256"),
    (["--max-num-batched-tokens", "100"], "--max-num-batched-tokens / --max-num-seqs (vLLM's default)",
     "100 / 1024"),
])
def test_simulate_refuses_a_budget_below_the_sequence_cap(capsys, extra, field, value):
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", "--horizon", "10", *PLAN, "--policy", "vllm", *extra)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert f"{field}: got '{value}'" in err
    assert "must be greater than or equal to max_num_seqs" in err and "SchedulerConfig.verify_max_model_len" in err


def test_capacity_refuses_a_budget_below_the_sequence_cap(capsys):
    rc, out, err = run(capsys, "capacity", "--scenario", "chat", *PLAN[:-2], "--seeds", "1", "--horizon", "10",
                       "--policy", "vllm", "--max-num-batched-tokens", "64", "--max-num-seqs", "128")
    assert rc == 2 and "--max-num-batched-tokens / --max-num-seqs: got '64 / 128'" in err


def test_plan_refuses_a_budget_below_the_sequence_cap(capsys):
    rc, out, err = run(capsys, "plan", "--scenario", "chat", "--policy", "vllm", "--max-num-batched-tokens", "64",
                       "--max-num-seqs", "128")
    assert rc == 2 and "--max-num-batched-tokens / --max-num-seqs: got '64 / 128'" in err


def test_calibrate_refuses_a_budget_below_the_sequence_cap(capsys, tmp_path):
    from test_calibrate_serving import VLLM_RESULT
    f = tmp_path / "ok.json"
    f.write_text(json.dumps(VLLM_RESULT))
    rc, out, err = run(capsys, "calibrate", "--serving", str(f), "--model", "llama-3.1-8b", "--gpu", "H100",
                       "--precision", "BF16", "--policy", "vllm", "--max-num-batched-tokens", "32",
                       "--max-num-seqs", "64")
    assert rc == 2 and "--max-num-batched-tokens / --max-num-seqs: got '32 / 64'" in err
    assert "SchedulerConfig.verify_max_model_len" in err


# --- --seeds has a bound, as --horizon has ------------------------------------------------------------

@pytest.mark.parametrize("command", ["simulate", "plan", "capacity", "sweep", "whatif"])
@pytest.mark.parametrize("value", ["100000", "1025", "0"])
def test_seeds_bound(capsys, command, value):
    rc, out, err = run(capsys, command, "--seeds", value)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert f"--seeds: got '{value}'; allowed: an integer from 1 to 1,024" in err


def test_seeds_at_the_bound_parse():
    from fastsim._command_helpers import MAX_SEEDS, _seeds
    from fastsim.cli import build_parser
    assert MAX_SEEDS == 1024 and _seeds("1024") == 1024
    with pytest.raises(FastsimInputError) as exc:
        _seeds("1025")
    assert exc.value.field == "--seeds" and exc.value.value == "1025" and "1 to 1,024" in exc.value.allowed
    args = build_parser().parse_args(["simulate", "--scenario", "chat", "--seeds", "1024"])
    assert args.seeds == 1024
