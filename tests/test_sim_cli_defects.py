"""``fastsim simulate`` / ``capacity`` defects of the second trial: utilisation priced for the lengths
simulated, flags that do not apply refused, --from-plan applying what the plan records."""
import json

import numpy as np
import pytest

from cliutil import run
from fastsim.analytic import Demand, plan_for
from fastsim.catalog import default_catalog
from fastsim.workload import read_trace, seeds_for, synthesize_from_trace

PLAN = ["--gpu", "B200", "--precision", "FP8", "--tp", "1", "--instances", "2"]


def sim(capsys, *extra, rc_expected=0):
    rc, out, err = run(capsys, "simulate", "--format", "json", *extra)
    assert rc == rc_expected, err
    return json.loads(out) if rc == 0 else err


def test_utilisation_uses_the_lengths_simulated(capsys):
    doc = sim(capsys, "--scenario", "chat", *PLAN, "--horizon", "60", "--lengths", "trace:azure-code")
    run0 = doc["runs"][0]
    # the analytic capacity of the same plan for the lengths drawn from azure-code
    wl = synthesize_from_trace(read_trace("azure-code"), 20.0, 60.0, seeds_for(0, 1)[0])
    d = Demand.from_lengths(wl.prompt_tokens, wl.output_tokens, rate_req_per_s=20.0, ttft_s=1.0, tpot_s=0.05)
    cap = plan_for("llama-3.1-70b", d, gpu="B200", precision="FP8", tp=1, instances=2).instance_capacity_req_per_s
    assert len(run0["utilisation"]) == 2
    # accepted requests / horizon / capacity, summed over instances
    accepted = run0["requests"] - run0["rejected"]
    assert sum(run0["utilisation"]) == pytest.approx(accepted / 60.0 / cap, rel=1e-9)
    assert sum(run0["utilisation"]) > 1.6           # ~1.0 each, not the scenario's ~0.6
    assert any("analytic capacity for the lengths simulated" in n for n in doc["notes"])


@pytest.mark.parametrize("extra, kw", [(["--session-turns", "3"], {"session_turns": 3}),
                                       (["--shared-prefix", "2048"], {"shared_prefix_tokens": 2048})])
def test_utilisation_prices_prefixes_and_sessions(capsys, extra, kw):
    from fastsim.workload import synthesize
    doc = sim(capsys, "--scenario", "chat", *PLAN, "--horizon", "60", *extra)
    run0 = doc["runs"][0]
    wl = synthesize("chat", 20.0, 60.0, seeds_for(0, 1)[0], **kw)
    d = Demand.from_lengths(wl.prompt_tokens, wl.output_tokens, rate_req_per_s=20.0, ttft_s=1.0, tpot_s=0.05)
    cap = plan_for("llama-3.1-70b", d, gpu="B200", precision="FP8", tp=1, instances=2).instance_capacity_req_per_s
    scen = plan_for("llama-3.1-70b", Demand.from_scenario(default_catalog().scenario("chat")),
                    gpu="B200", precision="FP8", tp=1, instances=2).instance_capacity_req_per_s
    assert cap < scen                       # longer prompts: a smaller capacity
    accepted = run0["requests"] - run0["rejected"]
    assert sum(run0["utilisation"]) == pytest.approx(accepted / 60.0 / cap, rel=1e-9)
    assert any(extra[0] in n and "lengths simulated" in n for n in doc["notes"])


TRACE = ["--trace", "azure-conv", "--model", "llama-3.1-70b", "--ttft", "1", "--tpot", "0.05", *PLAN]


@pytest.mark.parametrize("cmd", ["simulate", "capacity"])
@pytest.mark.parametrize("extra, flag, value", [
    (["--lengths", "fixed"], "--lengths", "'fixed'"),
    (["--lengths", "trace:azure-code"], "--lengths", "'trace:azure-code'"),
    (["--arrival", "gamma", "--cv", "2"], "--arrival", "'gamma'"),
    (["--cv", "2"], "--cv", "2.0"),
])
def test_trace_refuses_synthetic_flags(capsys, cmd, extra, flag, value):
    if cmd == "capacity" and flag == "--lengths":
        pytest.skip("capacity has no --lengths")
    rc, out, err = run(capsys, cmd, *TRACE, *extra)
    assert rc == 2
    assert err.count("\n") == 1
    assert f"error: {flag}: got {value}; allowed: no value with --trace" in err


@pytest.mark.parametrize("cmd", ["simulate", "capacity", "plan"])
@pytest.mark.parametrize("extra, flag", [(["--time-unit", "ms"], "--time-unit"), (["--skip-invalid"], "--skip-invalid")])
def test_scenario_refuses_trace_reading_flags(capsys, cmd, extra, flag):
    plan = PLAN if cmd != "plan" else ["--gpu", "B200", "--precision", "FP8", "--no-verify"]
    rc, out, err = run(capsys, cmd, "--scenario", "chat", *plan, *extra)
    assert rc == 2
    assert f"error: {flag}: got" in err and "no value with --scenario" in err


def test_trace_reading_flags_allowed_with_trace_lengths(capsys):
    doc = sim(capsys, "--scenario", "chat", *PLAN, "--horizon", "30", "--lengths", "trace:azure-code",
              "--skip-invalid")
    assert doc["runs"][0]["requests"] > 0


def test_prefix_aware_routing_without_cache_refused(capsys):
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", *PLAN, "--horizon", "30", "--policy", "vllm",
                       "--routing", "prefix-aware", "--no-prefix-caching")
    assert rc == 2 and "error: --routing: got 'prefix-aware'; allowed: least-loaded or round-robin" in err


def test_prefix_aware_routing_on_trace_without_hash_ids_noted(capsys):
    doc = sim(capsys, *TRACE, "--policy", "vllm", "--routing", "prefix-aware")
    assert any("prefix-aware" in n and "no hash_ids" in n for n in doc["notes"])


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    import io
    import contextlib
    from fastsim.cli import main
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["plan", "--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--tp", "1",
                     "--no-verify", "--format", "json"]) == 0
    f = tmp_path_factory.mktemp("plan") / "p.json"
    f.write_text(buf.getvalue())
    return f


def test_from_plan_with_trace_keeps_the_traces_rate_and_model(capsys, plan_file):
    doc = sim(capsys, "--trace", "azure-conv", "--from-plan", str(plan_file))
    wl = read_trace("azure-conv")
    run0 = doc["runs"][0]
    assert run0["rate_req_per_s"] == pytest.approx(wl.mean_rate_req_per_s)
    assert run0["requests"] == wl.n
    assert any("--from-plan with --trace: the trace replays at its own rate" in n and "made for 20 req/s" in n
               for n in doc["notes"])
    # --rate still rescales
    doc = sim(capsys, "--trace", "azure-conv", "--from-plan", str(plan_file), "--rate", "10")
    assert doc["runs"][0]["rate_req_per_s"] == pytest.approx(10.0)
    assert not any("replays at its own rate" in n for n in doc["notes"])


def test_from_plan_with_trace_model_errors_agree(capsys, plan_file):
    err = sim(capsys, "--trace", "azure-conv", "--from-plan", str(plan_file), "--model", "llama-3.1-8b",
              rc_expected=2)
    assert "--model: got 'llama-3.1-8b'; allowed: the plan's own model 'llama-3.1-70b' (or no --model)" in err


def _with_policy(plan_file, tmp_path, policy):
    doc = json.loads(plan_file.read_text())
    doc["plans"][0]["verification"] = {"policy": policy, "passed": True}
    f = tmp_path / f"p_{policy}.json"
    f.write_text(json.dumps(doc))
    return f


def test_from_plan_runs_the_policy_the_plan_was_verified_under(capsys, plan_file, tmp_path):
    f = _with_policy(plan_file, tmp_path, "vllm")
    doc = sim(capsys, "--scenario", "chat", "--from-plan", str(f), "--horizon", "30")
    assert doc["runs"][0]["policy"] == "vllm"
    assert any("verified under the vllm policy, which applies" in n for n in doc["notes"])
    doc = sim(capsys, "--scenario", "chat", "--from-plan", str(f), "--horizon", "30", "--policy", "lecture")
    assert doc["runs"][0]["policy"] == "lecture"
    assert any("verified under the vllm policy; --policy lecture runs instead" in n for n in doc["notes"])
    plain = sim(capsys, "--scenario", "chat", "--from-plan", str(plan_file), "--horizon", "30")
    assert plain["runs"][0]["policy"] == "lecture"


def test_config_json_model_round_trips_through_a_plan(capsys, tmp_path):
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    (cfg / "llama.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
        "vocab_size": 128256, "max_position_embeddings": 131072, "torch_dtype": "bfloat16", "head_dim": 128,
        "tie_word_embeddings": False}))
    rc, out, err = run(capsys, "plan", "--model", str(cfg / "llama.json"), "--scenario", "chat", "--gpu", "B200",
                       "--precision", "FP8", "--tp", "1", "--no-verify", "--format", "json")
    assert rc == 0, err
    rec = json.loads(out)["plans"][0]
    assert rec["model"] == "cfg" and rec["model_path"] == str(cfg / "llama.json")
    f = tmp_path / "p.json"
    f.write_text(out)
    doc = sim(capsys, "--scenario", "chat", "--from-plan", str(f), "--horizon", "30")
    assert doc["runs"][0]["requests"] > 0
    # a record without model_path: --model PATH of the same model serves it
    del rec["model_path"]
    f.write_text(json.dumps([rec]))
    err = sim(capsys, "--scenario", "chat", "--from-plan", str(f), "--horizon", "30", rc_expected=2)
    assert "--from-plan: got" in err and "--model PATH" in err
    doc = sim(capsys, "--scenario", "chat", "--from-plan", str(f), "--model", str(cfg / "llama.json"),
              "--horizon", "30")
    assert doc["runs"][0]["requests"] > 0


def test_utilisation_na_has_a_note_under_the_table(capsys):
    argv = ["simulate", "--model", "llama-3.1-405b", "--gpu", "H100", "--precision", "FP8", "--tp", "16",
            "--instances", "1", "--horizon", "30"]
    rc, out, err = run(capsys, *argv)
    assert rc == 0, err
    assert "n/a" in out.splitlines()[-2] or "n/a" in out
    assert ("note: utilisation n/a (seed 0): not applicable: the analytic screen gives the instance no capacity "
            "to compare with (no batch meets the TPOT target)") in out
    doc = sim(capsys, *argv[1:])
    assert doc["runs"][0]["utilisation"] == [None]
    assert doc["runs"][0]["null_reasons"]["utilisation"].endswith("(no batch meets the TPOT target)")


def test_huge_shared_prefix_names_the_flag(capsys):
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", *PLAN, "--policy", "vllm",
                       "--shared-prefix", "100000000")
    assert rc == 2 and err.count("\n") == 1
    assert "error: --shared-prefix: got 100000000; allowed: prompts whose prefix blocks total at most 200,000,000" in err
    assert "prefix_block_tokens" not in err


def test_weights_that_do_not_fit_suggest_fp8_only_above_fp8(capsys):
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", "--model", "gpt-oss-120b", "--gpu", "H100",
                       "--precision", "FP8", "--tp", "1", "--instances", "1", "--seeds", "1", "--horizon", "30")
    assert rc == 2 and "raise TP" in err and "use FP8" not in err, err
    rc, out, err = run(capsys, "simulate", "--scenario", "chat", "--model", "gpt-oss-120b", "--gpu", "H100",
                       "--precision", "BF16", "--tp", "1", "--instances", "1", "--seeds", "1", "--horizon", "30")
    assert rc == 2 and "raise TP or use FP8" in err, err


def test_library_parameter_errors_name_the_commands_flags(capsys):
    """time_unit / routing / a spec draft were named by their library parameter ('model: got ...')."""
    base = ["simulate", "--gpu", "B200", "--precision", "FP8", "--seeds", "1", "--horizon", "30"]
    rc, out, err = run(capsys, *base, "--trace", "azure-conv", "--model", "llama-3.1-70b", "--ttft", "1",
                       "--tpot", "0.05", "--instances", "2", "--time-unit", "ms")
    assert rc == 2 and "error: --time-unit: got 'ms'; allowed: no time unit (None)" in err, err
    rc, out, err = run(capsys, *base, "--scenario", "chat", "--routing", "prefix-aware")
    assert rc == 2 and "error: --routing: got 'prefix-aware'" in err, err
    rc, out, err = run(capsys, *base, "--scenario", "chat", "--policy", "vllm", "--spec-alpha", "0.7",
                       "--spec-draft", "nosuch")
    assert rc == 2 and "error: --spec-draft: got 'nosuch'" in err, err


def test_a_batch_cap_shows_in_the_plans_label():
    from fastsim.analytic import Plan
    p = Plan(model="m", gpu="B200", precision="FP8", mode="colocated", tp=2, instances=2, chunk_tokens=512,
             max_batch=8)
    assert p.describe() == "B200 FP8 colocated, 2 instances of TP2 (4 GPUs), at most 8 requests per instance"
