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
