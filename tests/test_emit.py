"""``fastsim plan --emit vllm|sglang``: launch commands with the engines' own flag names (fastsim.emit).

The flag names checked here are those of vLLM ``vllm/engine/arg_utils.py`` and SGLang
``python/sglang/srt/server_args.py`` / ``sglang_router/router_args.py`` (cited in fastsim/emit.py).
The golden files hold the commands of three fixed plans (the chat plan, a disaggregated plan and a
DeepSeek-V3 DP+EP plan over two nodes with its MTP head); regenerate them with
``python tests/test_emit.py`` after a deliberate change and review the diff.
"""
import csv
import io
import json
import os

import pytest

from cliutil import run
from fastsim.analytic import Demand, Plan, ScreenOptions
from fastsim.catalog import default_catalog
from fastsim.emit import HF_CHECKPOINTS, format_launch, launch_commands
from fastsim.errors import FastsimInputError
from fastsim.planner import plan_deployment

GOLDEN = os.path.join(os.path.dirname(__file__), "golden")

CHAT = Plan(model="llama-3.1-70b", gpu="B200", precision="FP8", mode="colocated", tp=1, instances=2,
            chunk_tokens=512, batch=128)
DISAGG = Plan(model="llama-3.1-70b", gpu="H100", precision="FP8", mode="disaggregated", tp=2, instances=1,
              prefill_tp=1, prefill_instances=3, decode_tp=2, decode_instances=1, batch=358)
MOE = Plan(model="deepseek-v3", gpu="H200", precision="FP8", mode="colocated", tp=16, instances=2,
           chunk_tokens=1024, batch=512, layout="dp+ep", spec_gamma=2, spec_alpha=0.8, spec_draft="mtp")


def golden_text(engine):
    return "\n\n".join(format_launch(launch_commands(p, engine), i)
                       for i, p in enumerate((CHAT, DISAGG, MOE), 1)) + "\n"


def flag(argv, name):
    """The value after ``name`` in argv (asserting it occurs once)."""
    assert argv.count(name) == 1, (name, argv)
    return argv[argv.index(name) + 1]


@pytest.fixture(scope="module")
def chat_plans():
    cat = default_catalog()
    scen = cat.scenario("chat")
    rep = plan_deployment(scen.model, Demand.from_scenario(scen), scen, verify=False, catalog=cat)
    return [d.plan for d in rep.deployments]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_golden_files(engine):
    with open(os.path.join(GOLDEN, f"emit_{engine}.txt")) as f:
        assert golden_text(engine) == f.read()


def test_chat_plan_vllm_flags(chat_plans):
    p = chat_plans[0]
    assert p.mode == "colocated" and p.layout == "tp" and p.precision == "FP8"
    entries = launch_commands(p, "vllm")
    inst = [e for e in entries if e["role"] == "colocated"]
    assert len(inst) == 1 and inst[0]["instances"] == p.instances and inst[0]["gpus_per_instance"] == p.tp
    a = inst[0]["command"]
    assert a[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct"]
    assert flag(a, "--tensor-parallel-size") == str(p.tp)
    assert flag(a, "--max-num-seqs") == str(p.batch)
    assert "--enable-chunked-prefill" in a
    assert flag(a, "--max-num-batched-tokens") == str(p.batch + p.chunk_tokens)   # decodes + the chunk
    assert flag(a, "--quantization") == "fp8"
    assert flag(a, "--kv-cache-dtype") == "fp8"
    assert flag(a, "--gpu-memory-utilization") == "0.9"
    assert flag(a, "--max-model-len") == "131072"
    for absent in ("--enable-expert-parallel", "--data-parallel-size", "--speculative-config",
                   "--kv-transfer-config", "--nnodes"):
        assert absent not in a
    router = entries[-1]
    assert router["role"] == "router" and router["command"] == []
    assert all(f"http://<colocated-{i}>:8000" in router["notes"][0] for i in range(p.instances))


def test_chat_plan_sglang_flags(chat_plans):
    p = chat_plans[0]
    entries = launch_commands(p, "sglang")
    a = entries[0]["command"]
    assert a[:5] == ["python", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-70B-Instruct"]
    assert flag(a, "--tp-size") == str(p.tp)
    assert flag(a, "--max-running-requests") == str(p.batch)
    assert flag(a, "--chunked-prefill-size") == str(p.chunk_tokens)
    assert flag(a, "--quantization") == "fp8"
    assert flag(a, "--kv-cache-dtype") == "fp8_e4m3"
    assert flag(a, "--mem-fraction-static") == "0.9"
    assert flag(a, "--context-length") == "131072"
    r = entries[-1]["command"]
    assert r[:3] == ["python", "-m", "sglang_router.launch_router"]
    assert flag(r, "--policy") == "cache_aware"
    i = r.index("--worker-urls")
    assert r[i + 1:i + 1 + p.instances] == [f"http://<colocated-{k}>:30000" for k in range(p.instances)]


def test_disaggregated_plan_roles_and_kv_transfer():
    v = launch_commands(DISAGG, "vllm")
    assert [(e["role"], e["instances"], e["gpus_per_instance"]) for e in v] == [
        ("prefill", 3, 1), ("decode", 1, 2), ("router", 1, 0)]
    pre, dec = v[0]["command"], v[1]["command"]
    assert json.loads(flag(pre, "--kv-transfer-config")) == {"kv_connector": "NixlConnector", "kv_role": "kv_producer"}
    assert json.loads(flag(dec, "--kv-transfer-config")) == {"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}
    assert flag(dec, "--max-num-seqs") == "358" and "--max-num-seqs" not in pre
    assert flag(dec, "--tensor-parallel-size") == "2" and flag(pre, "--tensor-parallel-size") == "1"
    assert "--max-num-batched-tokens" not in pre + dec          # no chunk in a disaggregated plan
    assert any("default" in n for n in v[0]["notes"])           # the engine default applies, said
    s = launch_commands(DISAGG, "sglang")
    pre, dec = s[0]["command"], s[1]["command"]
    assert flag(pre, "--disaggregation-mode") == "prefill" and flag(dec, "--disaggregation-mode") == "decode"
    assert flag(pre, "--disaggregation-transfer-backend") == flag(dec, "--disaggregation-transfer-backend") == "mooncake"
    assert flag(pre, "--disaggregation-bootstrap-port") == "8998"
    assert flag(dec, "--max-running-requests") == "358"
    r = s[2]["command"]
    assert "--pd-disaggregation" in r and flag(r, "--policy") == "cache_aware"
    assert r.count("--prefill") == 3 and r.count("--decode") == 1
    i = r.index("--prefill")
    assert r[i + 1:i + 3] == ["http://<prefill-0>:30000", "8998"]


def test_moe_dp_ep_plan_over_two_nodes():
    v = launch_commands(MOE, "vllm")
    nodes = [e for e in v if e["role"] == "colocated"]
    assert [(e["node_rank"], e["nodes_per_instance"]) for e in nodes] == [(0, 2), (1, 2)]
    head, other = nodes[0]["command"], nodes[1]["command"]
    assert head[2] == "deepseek-ai/DeepSeek-V3"
    assert flag(head, "--tensor-parallel-size") == "1" and flag(head, "--data-parallel-size") == "16"
    assert "--enable-expert-parallel" in head
    assert flag(head, "--data-parallel-size-local") == "8"
    assert "--headless" not in head and "--headless" in other and flag(other, "--data-parallel-start-rank") == "8"
    assert flag(head, "--max-num-seqs") == "32"                          # 512 over 16 DP engines
    assert flag(head, "--max-num-batched-tokens") == "160"               # (512 x 3 + 1024) / 16
    assert json.loads(flag(head, "--speculative-config")) == {"method": "mtp", "num_speculative_tokens": 2}
    assert "--quantization" not in head                                  # the FP8 checkpoint carries its own
    s = launch_commands(MOE, "sglang")
    nodes = [e["command"] for e in s if e["role"] == "colocated"]
    for r, a in enumerate(nodes):
        assert flag(a, "--tp-size") == flag(a, "--dp-size") == flag(a, "--ep-size") == "16"
        assert "--enable-dp-attention" in a
        assert flag(a, "--nnodes") == "2" and flag(a, "--node-rank") == str(r)
        assert flag(a, "--dist-init-addr") == "<head-node-ip>:20000"
        assert flag(a, "--max-running-requests") == "512" and flag(a, "--chunked-prefill-size") == "1024"
        assert flag(a, "--speculative-algorithm") == "EAGLE"
        assert flag(a, "--speculative-num-steps") == "2" and flag(a, "--speculative-num-draft-tokens") == "3"


def test_tp_ep_and_draft_model():
    p = Plan(model="qwen3-235b-a22b", gpu="H200", precision="BF16", mode="colocated", tp=8, instances=1,
             chunk_tokens=256, batch=64, layout="tp+ep", spec_gamma=4, spec_alpha=0.8, spec_draft="qwen3-30b-a3b")
    a = launch_commands(p, "vllm")[0]["command"]
    assert flag(a, "--tensor-parallel-size") == "8" and "--enable-expert-parallel" in a
    assert "--quantization" not in a and "--kv-cache-dtype" not in a
    assert flag(a, "--max-num-batched-tokens") == str(64 * 5 + 256)
    assert json.loads(flag(a, "--speculative-config")) == {
        "method": "draft_model", "model": "Qwen/Qwen3-30B-A3B", "num_speculative_tokens": 4}
    s = launch_commands(p, "sglang")[0]["command"]
    assert flag(s, "--ep-size") == "8" and "--enable-dp-attention" not in s
    assert flag(s, "--speculative-algorithm") == "STANDALONE"
    assert flag(s, "--speculative-draft-model-path") == "Qwen/Qwen3-30B-A3B"
    assert flag(s, "--speculative-eagle-topk") == "1" and flag(s, "--speculative-num-draft-tokens") == "5"


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("plan, why", [
    (Plan(model="deepseek-v3", gpu="H200", precision="BF16", mode="colocated", tp=16, instances=1,
          chunk_tokens=256, batch=8), "ships FP8 weights"),
    (Plan(model="llama-3.1-70b", gpu="B200", precision="NVFP4", mode="colocated", tp=1, instances=1,
          chunk_tokens=256, batch=8), "ships BF16 weights"),
    (Plan(model="llama-3.1-70b", gpu="H100", precision="FP8", mode="colocated", tp=8, instances=1,
          chunk_tokens=256, batch=8, spec_gamma=2, spec_alpha=0.8, spec_draft="mtp"), "MTP layer"),
])
def test_refusals_name_emit_and_the_plan(engine, plan, why):
    with pytest.raises(FastsimInputError) as exc:
        launch_commands(plan, engine)
    assert exc.value.field == "--emit"
    assert engine in exc.value.value and plan.gpu in exc.value.value and plan.precision in exc.value.value
    assert why in exc.value.allowed


def test_unknown_engine_and_checkpoints():
    with pytest.raises(FastsimInputError) as exc:
        launch_commands(CHAT, "trtllm")
    assert exc.value.field == "--emit" and exc.value.value == "trtllm"
    assert set(HF_CHECKPOINTS) == set(default_catalog().models)         # every built-in model is mapped
    a = launch_commands(CHAT, "vllm", checkpoint="my-org/llama-70b-fp8")[0]["command"]
    assert a[2] == "my-org/llama-70b-fp8"


def test_config_json_model_serves_its_directory(tmp_path):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
           "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
           "num_hidden_layers": 32, "vocab_size": 128256, "max_position_embeddings": 8192}
    path = tmp_path / "m" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    m = default_catalog().model(str(path))
    p = Plan(model=m.name, gpu="H100", precision="FP8", mode="colocated", tp=1, instances=1,
             chunk_tokens=256, batch=16)
    e = launch_commands(p, "sglang", model=m)[0]
    assert flag(e["command"], "--model-path") == str(path.parent)
    assert flag(e["command"], "--context-length") == "8192"
    assert any("assumes" in n for n in e["notes"])                      # --quantization fp8 on an unknown checkpoint


def test_cli_json_csv_and_table(capsys, chat_plans):
    rc, out, _ = run(capsys, "plan", "--scenario", "chat", "--no-verify", "--emit", "vllm", "--format", "json")
    assert rc == 0
    plans = json.loads(out)["plans"]
    assert len(plans) == len(chat_plans)
    for rec, p in zip(plans, chat_plans):
        assert rec["launch"] == launch_commands(p, "vllm")
        for e in rec["launch"]:
            assert set(e) >= {"role", "instances", "gpus_per_instance", "command", "notes"}
    rc, out, _ = run(capsys, "plan", "--scenario", "chat", "--no-verify", "--emit", "sglang", "--format", "csv")
    assert rc == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert json.loads(rows[0]["launch"]) == launch_commands(chat_plans[0], "sglang")
    rc, out, _ = run(capsys, "plan", "--scenario", "chat", "--no-verify", "--emit", "sglang")
    assert rc == 0
    assert out.index("# plan 1, colocated") > out.index("capacity req/s")
    assert format_launch(launch_commands(chat_plans[0], "sglang"), 1) in out


def test_cli_refused_plan_is_a_note(capsys):
    rc, out, err = run(capsys, "plan", "--scenario", "chat", "--no-verify", "--gpu", "H200", "--precision", "BF16",
                       "--mode", "colocated", "--model", "deepseek-v3", "--top-k", "1", "--emit", "vllm",
                       "--format", "json")
    assert rc == 0
    doc = json.loads(out)
    assert doc["plans"][0]["launch"] is None
    assert doc["plans"][0]["null_reasons"]["launch"].startswith("not applicable")
    assert any(n.startswith("plan 1: no vllm command (--emit:") for n in doc["notes"])


def test_cli_bad_emit_value_names_the_flag(capsys):
    rc, out, err = run(capsys, "plan", "--scenario", "chat", "--no-verify", "--emit", "trtllm")
    assert rc == 2 and out == ""
    assert "--emit" in err and "trtllm" in err and len(err.strip().splitlines()) == 1


def test_module_documented():
    import fastsim.emit
    from test_public_api import _problems
    problems = [p for name in fastsim.emit.__all__ for p in _problems(f"fastsim.emit.{name}", getattr(fastsim.emit, name))]
    assert not problems, "\n".join(problems)


if __name__ == "__main__":      # regenerate the golden files
    for eng in ("vllm", "sglang"):
        with open(os.path.join(GOLDEN, f"emit_{eng}.txt"), "w") as f:
            f.write(golden_text(eng))
