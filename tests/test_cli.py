"""Command-line errors: one line naming the field and what is allowed, exit status 2, no traceback."""
import json

import pytest

from cliutil import run




@pytest.mark.parametrize("argv,needle", [
    (["plan", "--scenario", "chat", "--gpu", "X100", "--no-verify"], "gpu"),
    (["plan", "--scenario", "nope", "--no-verify"], "scenario"),
    (["plan", "--scenario", "chat", "--model", "llama-9b", "--no-verify"], "model"),
    (["plan", "--scenario", "chat", "--rate", "0", "--no-verify"], "--rate"),
    (["plan", "--scenario", "chat", "--rate", "-3", "--no-verify"], "--rate"),
    (["plan", "--scenario", "chat", "--ttft", "0", "--no-verify"], "--ttft"),
    (["plan", "--scenario", "chat", "--tpot", "-0.05", "--no-verify"], "--tpot"),
    (["plan", "--scenario", "chat", "--tp", "3", "--no-verify"], "--tp"),
    (["plan", "--trace", "does/not/exist.csv", "--model", "llama-3.1-70b", "--ttft", "1", "--tpot", "0.05"], "exist.csv"),
    (["plan", "--trace", "azure-conv", "--ttft", "1", "--tpot", "0.05"], "--model"),
    (["plan", "--trace", "azure-conv", "--model", "llama-3.1-70b", "--tpot", "0.05"], "--ttft"),
])
def test_bad_input_one_line_exit_2(capsys, argv, needle):
    rc, out, err = run(capsys, *argv)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert needle in lines[0]
    assert "Traceback" not in err
    assert "allowed" in lines[0] or "one of" in lines[0] or "required" in lines[0]


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize("text,needle", [
    ("", "empty"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "no"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:47.1,abc,3\n", "line 3"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:47.1,-5,3\n", "line 3"),
])
def test_bad_trace_files(capsys, tmp_path, text, needle):
    path = _write(tmp_path, "t.csv", text)
    rc, out, err = run(capsys, "plan", "--trace", path, "--model", "llama-3.1-70b", "--ttft", "1", "--tpot", "0.05")
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert needle in err.lower() or needle in err


def test_config_json_missing_key(capsys, tmp_path):
    path = _write(tmp_path, "config.json", '{"num_hidden_layers": 4, "hidden_size": 512}')
    rc, out, err = run(capsys, "plan", "--scenario", "chat", "--model", path, "--no-verify")
    assert rc == 2
    assert "num_attention_heads" in err and len(err.strip().splitlines()) == 1


def test_no_verify_json(capsys):
    rc, out, err = run(capsys, "plan", "--scenario", "chat", "--no-verify", "--format", "json", "--top-k", "3")
    assert rc == 0
    plans = json.loads(out)["plans"]
    assert len(plans) == 3
    p = plans[0]
    assert (p["gpu"], p["precision"], p["mode"], p["tp"], p["instances"], p["gpus"]) == ("B200", "FP8", "colocated", 1, 2, 2)
    assert p["usd_per_million_output_tokens"] == pytest.approx(0.444, rel=0.01)
    assert p["verification"] is None


def test_hf_config_model_plans(capsys, tmp_path):
    cfg = ('{"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,'
           ' "head_dim": 128, "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 131072}')
    path = _write(tmp_path, "config.json", cfg)
    rc, out, err = run(capsys, "plan", "--scenario", "low-latency-8b", "--model", path, "--no-verify",
                       "--format", "json", "--top-k", "1")
    assert rc == 0, err
    assert json.loads(out)["plans"][0]["usd_per_million_output_tokens"] == pytest.approx(0.139, rel=0.01)


def one_line_error(capsys, *argv):
    """The one line of a refused command (exit 2, no traceback)."""
    rc, out, err = run(capsys, *argv)
    assert rc == 2, (out, err)
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


DENSE_EP = "layout: got 'dp+ep'; allowed: llama-3.1-70b is dense: expert parallelism and data-parallel attention do not apply"


@pytest.mark.parametrize("extra", [
    ("--no-verify", "--mode", "disaggregated"),
    ("--no-verify", "--mode", "colocated"),
    ("--no-verify",),
    ("--mode", "disaggregated", "--seeds", "1", "--horizon", "30"),
    ("--mode", "disaggregated", "--search", "screen", "--seeds", "1", "--horizon", "30"),
    ("--mode", "colocated", "--seeds", "1", "--horizon", "30"),
])
def test_plan_of_a_layout_the_model_refuses_says_why(capsys, extra):
    line = one_line_error(capsys, "plan", "--scenario", "chat", "--layout", "dp+ep", *extra)
    assert line == "fastsim plan: error: " + DENSE_EP


@pytest.mark.parametrize("argv,line", [
    (("--gpu", "B200", "--gpu", "B200"), "--gpu: got 'B200'; allowed: distinct values (this one is repeated)"),
    (("--gpu", "b200", "--gpu", "B200"),
     "--gpu: got 'B200'; allowed: distinct values (this one is repeated: 'b200' and 'B200' both name B200)"),
    (("--gpu", "all", "--gpu", "H100"),
     "--gpu: got 'H100'; allowed: distinct values (this one is repeated: 'all' and 'H100' both name H100)"),
    (("--tp", "1", "--tp", "1"), "--tp: got 1; allowed: distinct values (this one is repeated)"),
    (("--precision", "FP8", "--precision", "fp8"),
     "--precision: got 'fp8'; allowed: distinct values (this one is repeated: 'FP8' and 'fp8' both name FP8)"),
    (("--layout", "tp", "--layout", "tp"), "--layout: got 'tp'; allowed: distinct values (this one is repeated)"),
    (("--mode", "colocated", "--mode", "colocated"),
     "--mode: got 'colocated'; allowed: distinct values (this one is repeated)"),
    (("--spec-alpha", "0.7", "--spec-gamma", "2,2"),
     "--spec-gamma: got 2; allowed: distinct values (this one is repeated)"),
])
def test_plan_refuses_a_repeated_flag_value(capsys, argv, line):
    assert one_line_error(capsys, "plan", "--scenario", "chat", "--no-verify", *argv) == "fastsim plan: error: " + line


def test_plan_lists_each_moe_plan_once(capsys):
    rc, out, err = run(capsys, "plan", "--model", "qwen3-30b-a3b", "--scenario", "chat", "--no-verify",
                       "--format", "json", "--top-k", "30")
    assert rc == 0, err
    plans = json.loads(out)["plans"]
    assert len(plans) == 30
    shape = [tuple(p.get(k) for k in ("gpu", "precision", "mode", "layout", "tp", "instances", "prefill_tp",
                                      "decode_tp", "prefill_instances", "decode_instances", "capacity_req_per_s"))
             for p in plans]
    assert len(set(shape)) == len(shape)
    tp1 = [p for p in plans if p["mode"] == "colocated" and p["tp"] == 1]
    assert tp1 and {p["layout"] for p in tp1} == {"tp"}
    # the cheapest three are three plans (they were one TP1 plan listed as TP1, TP1+EP1 and DP1+EP1)
    assert [(p["gpu"], p["precision"], p["tp"], p["layout"]) for p in plans[:3]] == [
        ("H100", "FP8", 1, "tp"), ("H200", "FP8", 1, "tp"), ("H200", "BF16", 1, "tp")]
    # at TP2 the three layouts are three plans with their own capacities
    tp2 = {p["layout"]: p["capacity_req_per_s"] for p in plans
           if (p["gpu"], p["precision"], p["mode"], p.get("tp")) == ("H100", "FP8", "colocated", 2)}
    assert sorted(tp2) == ["dp+ep", "tp", "tp+ep"] and len(set(tp2.values())) == 3


SIM_DISAGG = ("--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--mode", "disaggregated")


@pytest.mark.parametrize("command", ["simulate", "capacity"])
def test_tp_beside_both_side_tps_is_refused(capsys, command):
    line = one_line_error(capsys, command, *SIM_DISAGG, "--prefill-tp", "1", "--decode-tp", "1", "--tp", "8")
    assert line == (f"fastsim {command}: error: --tp: got 8; allowed: no value with both --prefill-tp and --decode-tp "
                    "(--tp is the TP of a side they leave out; here they set both)")


def test_tp_fills_the_side_left_out(capsys):
    rc, out, err = run(capsys, "simulate", *SIM_DISAGG, "--prefill-tp", "1", "--tp", "2", "--prefill-instances", "2",
                       "--decode-instances", "1", "--horizon", "10", "--format", "json")
    assert rc == 0, err
    assert json.loads(out)["runs"][0]["plan"] == ("B200 FP8 disaggregated, prefill 2 instances of TP1 + decode "
                                                  "1 instance of TP2 (4 GPUs)")


@pytest.mark.parametrize("flag", ["--instances", "--prefill-instances", "--decode-instances"])
@pytest.mark.parametrize("command", ["simulate", "capacity"])
def test_instance_counts_past_the_limit_are_refused(capsys, command, flag):
    mode = ("--mode", "disaggregated") if flag != "--instances" else ()
    line = one_line_error(capsys, command, "--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--tp", "1",
                          *mode, flag, "1000000000000")
    assert line == (f"fastsim {command}: error: {flag}: got 1000000000000; allowed: an integer from 1 to 4,096 "
                    "(the most instances of a kind a plan may have, as for capacity --instance-counts)")


def test_plan_no_verify_says_the_simulation_flags_do_not_apply(capsys):
    rc, out, err = run(capsys, "plan", "--scenario", "chat", "--no-verify", "--top-k", "1", "--horizon", "60",
                       "--seeds", "3", "--format", "json")
    assert rc == 0, err
    notes = json.loads(out)["notes"]
    assert "--no-verify ranks the plans analytically and simulates nothing: --seeds, --horizon do not apply" in notes
    assert not any("is short" in n for n in notes)
    rc, out, err = run(capsys, "plan", "--scenario", "chat", "--no-verify", "--top-k", "1", "--format", "json")
    assert not any("--no-verify" in n or "is short" in n for n in json.loads(out)["notes"])


def test_a_second_price_for_one_gpu_is_refused(capsys):
    """--price H100=3 --price h100=4 used the last one silently."""
    rc, out, err = run(capsys, "plan", "--scenario", "chat", "--no-verify", "--gpu", "H100", "--price", "H100=3",
                       "--price", "h100=4")
    assert rc == 2 and "--price: got 'h100=4'" in err and "H100 already has --price H100=3" in err
