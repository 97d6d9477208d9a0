"""User catalog files and Hugging Face configs: bad values are rejected with the field named."""
import json

import pytest

from fastsim.catalog import load_catalog, model_from_hf_config
from fastsim.cli import main
from fastsim.errors import FastsimInputError


def _cat(tmp_path, text, name="c.toml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize("text,field", [
    ("[gpus.H100]\nprice_usd_per_hour = -2\n", "price_usd_per_hour"),
    ("[gpus.H100]\nprice_usd_per_hour = 0\n", "price_usd_per_hour"),
    ('[gpus.H100]\nprice_usd_per_hour = "cheap"\n', "price_usd_per_hour"),
    ("[gpus.H100]\nhbm_bw_bytes_per_s = nan\n", "hbm_bw_bytes_per_s"),
    ("[gpus.H100]\nhbm_bytes = 0\n", "hbm_bytes"),
    ("[gpus.H100]\npeak_flops_per_s = { bf16 = -1 }\n", "peak_flops_per_s.bf16"),
    ("[precisions.INT4]\nweight_bytes = 0\nkv_bytes = 1\nflops_key = 'int4'\n", "weight_bytes"),
    ("gpus = 3\n", "gpu table"),
    ('[scenarios.x]\nmodel = "llama-3.1-8b"\nprompt = { mean = -500, sigma = 0.8 }\noutput = { mean = 10 }\n'
     'ttft_s = 1\ntpot_s = 0.05\nrate_req_per_s = 1\n', "mean"),
    ('[scenarios.x]\nmodel = "llama-3.1-8b"\nprompt = { mean = 500 }\noutput = { mean = 10 }\n'
     'ttft_s = 1\ntpot_s = 0.05\nrate_req_per_s = 1\nextra = 4\n', "scenario.x"),
    ("[models.m]\nlayers = 2\nhidden = 64\nheads = 8\nkv_heads = 3\nhead_dim = 8\nffn = 128\nvocab = 100\n", "kv_heads"),
    ("[models.m]\nlayers = 2\n", "missing"),
])
def test_bad_user_catalog(tmp_path, text, field):
    with pytest.raises(FastsimInputError, match=field.replace(".", r"\.")):
        load_catalog([_cat(tmp_path, text)])


def test_json_catalog_list_is_rejected(tmp_path):
    with pytest.raises(FastsimInputError, match="gpu table"):
        load_catalog([_cat(tmp_path, '{"gpus": [1, 2]}', "c.json")])


def test_partial_peak_override_keeps_other_precisions(tmp_path):
    cat = load_catalog([_cat(tmp_path, "[gpus.H100]\npeak_flops_per_s = { bf16 = 900e12 }\n")])
    assert cat.gpu("H100").peak_flops_per_s == {"bf16": 900e12, "fp8": 1979e12}


def test_unknown_precision_key_is_a_clear_error(tmp_path, capsys):
    path = _cat(tmp_path, "[precisions.INT4]\nweight_bytes = 0.5\nkv_bytes = 1\nflops_key = 'int4'\n")
    rc = main(["plan", "--scenario", "chat", "--catalog", path, "--precision", "INT4", "--no-verify"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "precision" in err and "INT4" in err and len(err.strip().splitlines()) == 1


def test_negative_price_is_a_cli_error(tmp_path, capsys):
    rc = main(["plan", "--scenario", "chat", "--no-verify", "--catalog",
               _cat(tmp_path, "[gpus.H100]\nprice_usd_per_hour = -2\n")])
    assert rc == 2
    assert "price_usd_per_hour" in capsys.readouterr().err


@pytest.mark.parametrize("extra,field", [
    ({"num_local_experts": 8}, "num_experts_per_tok"),           # experts without a top-k
    ({"num_local_experts": 8, "num_experts_per_tok": 2, "moe_topk": 4}, "num_experts_per_tok and moe_topk"),
    ({"num_key_value_heads": 128}, "kv_heads"),
    ({"num_key_value_heads": 3}, "kv_heads"),
    ({"num_hidden_layers": 0}, "num_hidden_layers"),
    ({"hidden_size": "big"}, "hidden_size"),
])
def test_bad_hf_configs(tmp_path, extra, field):
    cfg = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
           "intermediate_size": 14336, "vocab_size": 128256}
    cfg.update(extra)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(FastsimInputError, match=field):
        model_from_hf_config(str(p))


def test_moe_hf_config_is_modelled(tmp_path):
    """A Mixtral-shaped config reads as a mixture of experts, not as a dense model."""
    cfg = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
           "intermediate_size": 14336, "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    m = model_from_hf_config(str(p))
    assert (m.n_experts, m.experts_per_token, m.moe_ffn, m.moe_layers) == (8, 2, 14336, 32)
    assert m.total_params / m.active_params == pytest.approx(46.7 / 12.9, rel=0.015)   # Mixtral 8x7B


@pytest.mark.parametrize("value", [True, "3", b"3", float("nan"), float("inf"), 0, -1.0])
def test_require_positive_refuses_non_numbers_and_non_positive(value):
    from fastsim.errors import require_positive
    with pytest.raises(FastsimInputError, match="rate"):
        require_positive("rate", value)


def test_relative_model_path_is_resolved_against_the_catalog_file(tmp_path, monkeypatch):
    """A scenario's model = "../cfg/config.json" reads the file next to the catalog, from any working directory."""
    import json
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
        "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 128256}))
    (tmp_path / "cat").mkdir()
    cat_file = tmp_path / "cat" / "s.toml"
    cat_file.write_text('[scenarios.support]\nmodel = "../cfg/config.json"\n'
                        'prompt = { kind = "fixed", mean = 100 }\noutput = { kind = "fixed", mean = 10 }\n'
                        'ttft_s = 1.0\ntpot_s = 0.05\nrate_req_per_s = 1\n'
                        '[scenarios.named]\nmodel = "llama-3.1-8b"\n'
                        'prompt = { kind = "fixed", mean = 100 }\noutput = { kind = "fixed", mean = 10 }\n'
                        'ttft_s = 1.0\ntpot_s = 0.05\nrate_req_per_s = 1\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cat = load_catalog(["../cat/s.toml"])           # relative to the working directory, as on a command line
    s = cat.scenario("support")
    assert s.model == str(tmp_path / "cfg" / "config.json")
    assert cat.model(s.model).layers == 32
    assert cat.scenario("named").model == "llama-3.1-8b"
