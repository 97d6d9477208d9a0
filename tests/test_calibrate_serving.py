"""Calibration through the simulator to a serving benchmark (vLLM `bench serve` JSON; fit_serving)."""
import json

import numpy as np
import pytest

from cliutil import run
from fastsim.calibrate import (ServingMeasurement, fit_serving, load_calibration, read_serving_benchmark,
                               serving_result_json, serving_workload)
from fastsim.catalog import default_catalog
from fastsim.errors import FastsimInputError
from fastsim.sim import ColocatedPlan, simulate_batch
from fastsim.sim.policy import engine_policy
from fastsim.stepmodel import P_KV_BUDGET_TOKENS, StepConstants, step_params

# A result as `vllm bench serve --save-result` writes it (keys of vllm/benchmarks/serve.py: main_async
# and benchmark; default --metric-percentiles 99, --percentile-metrics ttft,tpot,itl).
VLLM_RESULT = {
    "date": "20250801-101500", "endpoint_type": "openai", "backend": "openai", "label": None,
    "model_id": "meta-llama/Llama-3.1-8B-Instruct", "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
    "num_prompts": 1000, "request_rate": 4.0, "burstiness": 1.0, "max_concurrency": None,
    "duration": 251.7, "completed": 1000, "failed": 0, "total_input_tokens": 1024000, "total_output_tokens": 128000,
    "request_throughput": 3.973, "request_goodput": None, "output_throughput": 508.5,
    "total_token_throughput": 4576.9, "max_output_tokens_per_s": 812.0, "max_concurrent_requests": 9,
    "mean_ttft_ms": 41.2, "median_ttft_ms": 38.5, "std_ttft_ms": 9.1, "p99_ttft_ms": 88.0,
    "mean_tpot_ms": 9.4, "median_tpot_ms": 9.1, "std_tpot_ms": 0.8, "p99_tpot_ms": 12.3,
    "mean_itl_ms": 9.4, "median_itl_ms": 8.9, "std_itl_ms": 2.0, "p99_itl_ms": 15.2,
}

TRUE = StepConstants(eta_compute=0.5, eta_bw=0.7)
RATES = (2.0, 8.0, 14.0, 20.0)
N_REQ, IN, OUT = 200, 1024, 128


def test_reader_on_a_vllm_result(tmp_path):
    f = tmp_path / "openai-4.0qps-Llama-3.1-8B-Instruct-20250801-101500.json"
    f.write_text(json.dumps(VLLM_RESULT))
    (m,) = read_serving_benchmark(f)
    assert m.request_rate_req_per_s == 4.0
    assert (m.num_prompts, m.completed) == (1000, 1000)
    assert m.duration_s == 251.7
    assert m.output_throughput_tokens_per_s == 508.5
    assert m.ttft_s == {50.0: pytest.approx(0.0385), 99.0: pytest.approx(0.088)}
    assert m.tpot_s == {50.0: pytest.approx(0.0091), 99.0: pytest.approx(0.0123)}
    assert (m.mean_input_tokens, m.mean_output_tokens) == (1024.0, 128.0)
    assert m.input_tokens is None and m.burstiness == 1.0
    # lengths from --metadata (strings), p90 from --metric-percentiles 90,99, and "inf" rates
    d = dict(VLLM_RESULT, request_rate="inf", random_input_len="2048", random_output_len="256", p90_ttft_ms=70.0)
    g = tmp_path / "two.json"
    g.write_text(json.dumps(VLLM_RESULT) + "\n" + json.dumps(d))      # --append-result: one object per line
    a, b = read_serving_benchmark(g)
    assert a.source.endswith("two.json [0]") and b.request_rate_req_per_s == np.inf
    assert (b.input_tokens, b.output_tokens) == (2048, 256)
    assert b.ttft_s[90.0] == pytest.approx(0.07)
    arr, P, O = serving_workload(b, 0)
    assert np.all(arr == 0.0) and np.all(P == 2048) and np.all(O == 256) and len(arr) == 1000
    # a list of results; arrivals as vLLM's get_request: the last request leaves at num_prompts / rate
    h = tmp_path / "list.json"
    h.write_text(json.dumps([VLLM_RESULT, dict(VLLM_RESULT, request_rate=8.0)]))
    ms = read_serving_benchmark(h)
    assert [m.request_rate_req_per_s for m in ms] == [4.0, 8.0]
    arr, P, O = serving_workload(ms[1], 3)
    assert arr[-1] == pytest.approx(1000 / 8.0) and np.all(np.diff(arr) >= 0)
    assert np.all(P == 1024) and np.all(O == 128)
    # the writer gives back what the reader reads
    again = tmp_path / "again.json"
    again.write_text(json.dumps(serving_result_json(ms[0])))
    assert read_serving_benchmark(again)[0].ttft_s == ms[0].ttft_s


@pytest.mark.parametrize("change, key", [
    ({"median_ttft_ms": None}, "median_ttft_ms"),
    ({"output_throughput": -3.0}, "output_throughput"),
    ({"completed": 2.5}, "completed"),
    ({"duration": "long"}, "duration"),
    ({"request_rate": 0}, "request_rate"),
    ({"max_concurrency": 16}, "max_concurrency"),
    ({"total_output_tokens": 10}, "total_output_tokens"),
    ({"p99_tpot_ms": 0.0}, "p99_tpot_ms"),
])
def test_reader_errors_name_file_and_key(tmp_path, change, key):
    d = dict(VLLM_RESULT, **change)
    if change.get("median_ttft_ms", 0) is None:
        del d["median_ttft_ms"]
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(d))
    with pytest.raises(FastsimInputError) as exc:
        read_serving_benchmark(f)
    assert exc.value.field == f"{f}: {key}"


def test_reader_error_in_cli_exits_2(tmp_path, capsys):
    f = tmp_path / "bad.json"
    d = dict(VLLM_RESULT)
    del d["duration"]
    f.write_text(json.dumps(d))
    rc, out, err = run(capsys, "calibrate", "--serving", str(f), "--model", "llama-3.1-8b")
    assert rc == 2
    assert err.count("\n") == 1 and "bad.json: duration" in err
    g = tmp_path / "broken.json"
    g.write_text("{not json")
    rc, out, err = run(capsys, "calibrate", "--serving", str(g), "--model", "llama-3.1-8b")
    assert rc == 2 and "broken.json" in err and "invalid JSON" in err
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps(VLLM_RESULT))
    rc, out, err = run(capsys, "calibrate", "--serving", str(ok))
    assert rc == 2 and "--model" in err


def _benchmark(rate, seed=1234):
    """A `bench serve` result produced by the simulator itself at TRUE (H100 BF16, Llama-3.1-8B, TP1, vllm)."""
    cat = default_catalog()
    model, g, pr = cat.model("llama-3.1-8b"), cat.gpu("H100"), cat.precision("BF16")
    m0 = ServingMeasurement("x", rate, N_REQ, N_REQ, 1.0, N_REQ * IN, N_REQ * OUT, 1.0, {50.0: 1.0}, {50.0: 1.0},
                            1.0, IN, OUT)
    p = step_params(model, g, pr, 1, TRUE)
    pol = engine_policy("vllm", g.hbm_bytes, kv_budget_tokens=p[P_KV_BUDGET_TOKENS],
                        context_tokens=model.max_context_tokens)
    (r,) = simulate_batch([ColocatedPlan(p, 1, 8192)], [serving_workload(m0, seed)], horizon_s=10 * N_REQ / rate + 60,
                          ttft_slo_s=1.0, tpot_slo_s=1.0, measure_window=(0.0, 1.0), full=True, policy=pol)
    assert np.isfinite(r.finish_s).all()
    dur = float(r.finish_s.max())
    ttft = r.first_token_s - r.arrival_s
    tpot = (r.finish_s - r.first_token_s) / (r.output_tokens - 1)
    m = ServingMeasurement("sim", rate, N_REQ, N_REQ, dur, int(r.prompt_tokens.sum()), int(r.output_tokens.sum()),
                           float(r.output_tokens.sum()) / dur,
                           {50.0: float(np.median(ttft)), 99.0: float(np.percentile(ttft, 99))},
                           {50.0: float(np.median(tpot)), 99.0: float(np.percentile(tpot, 99))}, 1.0, IN, OUT)
    d = serving_result_json(m)
    d.update(date="20250801-101500", backend="openai", model_id="meta-llama/Llama-3.1-8B-Instruct")
    return d


def test_serving_round_trip_recovers_efficiencies(tmp_path, capsys):
    files = []
    for rate in RATES:
        f = tmp_path / f"openai-{rate}qps-Llama-3.1-8B-Instruct.json"
        f.write_text(json.dumps(_benchmark(rate)))
        files.append(str(f))
    out_toml = tmp_path / "serving.toml"
    rc, out, err = run(capsys, "calibrate", "--serving", *files, "--model", "llama-3.1-8b", "--gpu", "H100",
                       "--precision", "BF16", "--tp", "1", "--format", "json", "--out", str(out_toml))
    assert rc == 0, err
    res = json.loads(out)
    vals = {r["parameter"]: r for r in res["parameters"]}
    # measured at eta_compute 0.5, eta_bw 0.7 (other request draws than the fit's): back within 10%
    assert vals["eta_compute"]["value"] == pytest.approx(0.5, rel=0.1)
    assert vals["eta_bw"]["value"] == pytest.approx(0.7, rel=0.1)
    for k in ("eta_compute", "eta_bw"):
        assert vals[k]["identified"] and vals[k]["used"]
        assert vals[k]["ci95_low"] <= vals[k]["value"] <= vals[k]["ci95_high"]
    # residual per rate and metric: 4 rates x (TTFT p50, p99, TPOT p50, p99, throughput)
    pts = res["points"]
    assert len(pts) == 20 and {p["rate_req_per_s"] for p in pts} == set(RATES)
    thr = [p for p in pts if p["metric"] == "output_throughput"]
    assert all(abs(p["rel_error"]) < 0.03 for p in thr)
    med = [p for p in pts if p["metric"] in ("ttft_p50", "tpot_p50")]
    assert np.median([abs(p["rel_error"]) for p in med]) < 0.05
    cal = load_calibration(out_toml)
    c = cal.step_constants("H100", "BF16")
    assert c.eta_compute == pytest.approx(vals["eta_compute"]["value"])
    assert c.eta_bw == pytest.approx(vals["eta_bw"]["value"])
    assert c.overhead_s == StepConstants().overhead_s and c.alpha_s == StepConstants().alpha_s
    assert "policy vllm" in " ".join(res["notes"])


def test_fit_serving_refuses_bad_inputs():
    m = ServingMeasurement("x", 2.0, 10, 10, 10.0, 10240, 1280, 128.0, {50.0: 0.04}, {50.0: 0.008})
    with pytest.raises(FastsimInputError) as exc:
        fit_serving([m], "llama-3.1-70b", "H100", "BF16", 1)
    assert exc.value.field == "tp"
    with pytest.raises(FastsimInputError) as exc:
        fit_serving([m], "llama-3.1-8b", "H100", "BF16", 1, replications=0)
    assert exc.value.field == "replications"
    with pytest.raises(FastsimInputError):
        fit_serving([], "llama-3.1-8b", "H100", "BF16", 1)
