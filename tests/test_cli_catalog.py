"""``fastsim catalog``: the catalog's entries, and what fastsim read from a config.json."""
import csv
import io
import json

import pytest

from cliutil import run
from fastsim.catalog import default_catalog

# Llama-3.1-8B's config.json (the fields fastsim reads)
LLAMA_8B = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
            "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 131072}
MIXTRAL = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
           "intermediate_size": 14336, "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2,
           "max_position_embeddings": 32768}


def test_lists_every_entry_of_the_catalog(capsys):
    cat = default_catalog()
    rc, out, _ = run(capsys, "catalog", "--format", "json")
    assert rc == 0
    doc = json.loads(out)
    assert [g["name"] for g in doc["gpus"]] == list(cat.gpus)
    assert [p["name"] for p in doc["precisions"]] == list(cat.precisions)
    assert [m["name"] for m in doc["models"]] == list(cat.models)
    assert [s["name"] for s in doc["scenarios"]] == list(cat.scenarios)
    h100 = next(g for g in doc["gpus"] if g["name"] == "H100")
    assert h100["hbm_bytes"] == cat.gpu("H100").hbm_bytes and h100["price_usd_per_hour"] == 2.0
    chat = next(s for s in doc["scenarios"] if s["name"] == "chat")
    assert (chat["model"], chat["rate_req_per_s"], chat["ttft_s"], chat["tpot_s"]) == ("llama-3.1-70b", 20, 1, 0.05)
    rc, out, _ = run(capsys, "catalog")
    assert rc == 0 and "deepseek-v3" in out and "B200" in out and "coding-agent" in out and "NVFP4" in out


def test_catalog_files_are_included(capsys, tmp_path):
    f = tmp_path / "extra.toml"
    f.write_text('[gpus.X9]\npeak_flops_per_s = { bf16 = 1e15 }\nhbm_bw_bytes_per_s = 4e12\nhbm_bytes = 1e11\n'
                 'nvlink_bw_bytes_per_s = 4e11\nnetwork_bw_bytes_per_s = 5e10\nprice_usd_per_hour = 3.0\n'
                 'power_w = 700\n')
    rc, out, err = run(capsys, "catalog", "--catalog", str(f), "--format", "json")
    assert rc == 0, err
    x9 = [g for g in json.loads(out)["gpus"] if g["name"] == "X9"]
    assert x9 and x9[0]["price_usd_per_hour"] == 3.0 and x9[0]["peak_flops_per_s"] == {"bf16": 1e15}


def test_a_config_json_reads_as_the_catalog_model(capsys, tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(LLAMA_8B))
    rc, out, _ = run(capsys, "catalog", "--model", str(p), "--format", "json")
    assert rc == 0
    m = json.loads(out)
    # Llama-3.1-8B: 8.03 B parameters, all active; GQA 32 / 8 heads of 128; KV per token =
    # 2 (K and V) x 32 layers x 8 KV heads x 128 x bytes per element
    assert m["total_params"] == pytest.approx(8.03e9, rel=0.005) and m["active_params"] == m["total_params"]
    assert (m["attention"], m["heads"], m["kv_heads"], m["head_dim"], m["moe"]) == ("gqa", 32, 8, 128, False)
    assert m["kv_bytes_per_token"]["BF16"] == 2 * 32 * 8 * 128 * 2
    assert m["kv_bytes_per_token"]["FP8"] == 2 * 32 * 8 * 128 * 1
    assert m["weight_bytes"]["BF16"] == 2 * m["total_params"] and m["weight_bytes"]["FP8"] == m["total_params"]
    assert m["max_context_tokens"] == 131072 and str(p) in m["source"]
    # the same figures as the catalog's llama-3.1-8b
    cat = default_catalog().model("llama-3.1-8b")
    assert m["total_params"] == pytest.approx(cat.total_params, rel=1e-9)


def test_an_moe_config_shows_its_experts(capsys, tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(MIXTRAL))
    rc, out, _ = run(capsys, "catalog", "--model", str(p))
    assert rc == 0
    assert "8 experts, 2 per token, on 32 of 32 layers" in out and "32,768 tokens" in out
    rc, out, _ = run(capsys, "catalog", "--model", str(p), "--format", "csv")
    assert rc == 0
    row = next(csv.DictReader(io.StringIO(out)))
    assert int(row["n_experts"]) == 8 and int(row["experts_per_token"]) == 2
    assert float(row["total_params"]) / float(row["active_params"]) == pytest.approx(46.7 / 12.9, rel=0.015)


def test_an_unknown_model_is_a_one_line_error(capsys):
    rc, _, err = run(capsys, "catalog", "--model", "no-such-model")
    assert rc == 2 and "no-such-model" in err
