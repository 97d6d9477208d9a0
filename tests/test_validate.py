"""fastsim.validate: the reader's errors, each benchmark run as it ran, the unexpressible rows and the summary."""
import csv
import math

import numpy as np
import pytest

from fastsim.catalog import default_catalog, load_catalog
from fastsim.errors import FastsimInputError
from fastsim.sim import ColocatedPlan, benchmark_figures, simulate_drained
from fastsim.sim.policy import POLICIES, engine_policy
from fastsim.stepmodel import (P_KV_BUDGET_TOKENS, P_LAYERS, P_QDIM_DEC, StepConstants, decode_attn_flops,
                               step_params, step_time)
from fastsim.validate import (SHIPPED_CATALOG, SHIPPED_MEASUREMENTS, read_measurements, run_measurements, summarize,
                              validate)
from fastsim.validate.records import COLUMNS
from fastsim.workload import read_trace

BASE = {"id": "X1", "engine": "vllm", "engine_version": "test", "benchmark": "offline", "metric": "output_tokens_per_s",
        "stat": "total", "value": "5000", "model": "llama-3.1-8b", "gpu": "H100", "precision": "BF16", "tp": "1",
        "pp": "1", "layout": "tp", "instances": "1", "input_tokens": "256", "output_tokens": "64",
        "num_requests": "40", "max_num_batched_tokens": "2048", "max_num_seqs": "32", "source": "hand-made",
        "note": ""}

#: The 38 rows of the starter set (their ids are kept in the shipped set).
STARTER = ("T01 T02 T03 T04 T05 T06 T07 T08 T10 T12 O1-ttft O1-itl O2-ttft O2-itl O3-ttft O3-itl O4-ttft O4-itl "
           "B1-ttft B1-itl B1-e2e B2-ttft B2-itl B2-e2e B3-ttft B3-itl B3-e2e B4-ttft B4-itl B4-e2e L1-ttft L1-tpot "
           "L1-e2e L3-ttft L3-tpot L3-e2e S1 S2").split()


def write_csv(path, *rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in COLUMNS})
    return path


def row(**kw):
    return {**BASE, **{k: ("" if v is None else str(v)) for k, v in kw.items()}}


@pytest.mark.parametrize("change, column", [
    ({"engine": "tgi"}, "engine"),
    ({"benchmark": "burst"}, "benchmark"),
    ({"metric": "goodput"}, "metric"),
    ({"stat": "p95"}, "stat"),
    ({"stat": "mean"}, "stat"),                              # throughput's only statistic is total
    ({"value": None}, "value"),
    ({"value": "fast"}, "value"),
    ({"value": "-3"}, "value"),
    ({"tp": "two"}, "tp"),
    ({"tp": "3"}, "tp"),
    ({"num_requests": None}, "num_requests"),
    ({"num_requests": "2.5"}, "num_requests"),
    ({"input_tokens": "inf"}, "input_tokens"),
    ({"rate_req_per_s": "2"}, "rate_req_per_s"),             # a rate makes no sense for an offline run
    ({"model": "llama-9-900b"}, "model"),
    ({"model": "configs/none/config.json"}, "model"),
    ({"gpu": "H900"}, "gpu"),
    ({"precision": "FP3"}, "precision"),
    ({"layout": "pp"}, "layout"),
    ({"benchmark": "online", "num_requests": None}, "rate_req_per_s"),
    ({"benchmark": "trace", "trace": "missing.jsonl", "input_tokens": None, "output_tokens": None,
      "num_requests": None}, "trace"),
    ({"benchmark": "step", "metric": "step_s", "stat": "mean", "input_tokens": None, "output_tokens": None,
      "num_requests": None, "batch": "4"}, "context_tokens"),
    ({"metric": "step_s", "stat": "mean"}, "metric"),         # step_s is the step benchmark's
    ({"shared_prefix_tokens": "256"}, "shared_prefix_tokens"),  # not below input_tokens
])
def test_reader_names_the_row_and_the_column(tmp_path, change, column):
    path = write_csv(tmp_path / "m.csv", row(id="OK1"), row(id="BAD-7", **change))
    with pytest.raises(FastsimInputError) as exc:
        read_measurements(path)
    assert exc.value.field == f"m.csv row BAD-7, column {column}"


def test_reader_refuses_a_repeated_id_and_a_missing_column(tmp_path):
    with pytest.raises(FastsimInputError, match=r"m.csv line 3, column id.*line 2 has it"):
        read_measurements(write_csv(tmp_path / "m.csv", row(), row()))
    p = tmp_path / "short.csv"
    p.write_text("id,engine\nX,vllm\n", encoding="utf-8")
    with pytest.raises(FastsimInputError, match="short.csv columns"):
        read_measurements(p)


def test_reader_resolves_relative_paths_against_the_csv(tmp_path):
    (tmp_path / "sub").mkdir()
    cfg = SHIPPED_MEASUREMENTS.parent / "configs" / "yi-34b" / "config.json"
    (tmp_path / "sub" / "cfg").mkdir()
    (tmp_path / "sub" / "cfg" / "config.json").write_text(cfg.read_text(encoding="utf-8"), encoding="utf-8")
    m = read_measurements(write_csv(tmp_path / "sub" / "m.csv", row(model="cfg/config.json", tp="2")))
    assert m[0].model == str((tmp_path / "sub" / "cfg" / "config.json").resolve())


def _plan(model, gpu="H100", precision="BF16", tp=1, mnbt=2048, mns=32):
    cat = default_catalog()
    md, g, pr = cat.model(model), cat.gpu(gpu), cat.precision(precision)
    p = step_params(md, g, pr, tp, StepConstants())
    pol = engine_policy("vllm", g.hbm_bytes, kv_budget_tokens=float(p[P_KV_BUDGET_TOKENS]),
                        context_tokens=md.max_context_tokens, max_num_batched_tokens=mnbt, max_num_seqs=mns)
    return md, p, ColocatedPlan(p, 1, mnbt), pol


def test_an_offline_row_is_the_drained_batch_at_t0(tmp_path):
    ms = read_measurements(write_csv(tmp_path / "m.csv", row(), row(id="X2", metric="ttft_s", stat="p90", value="1"),
                                     row(id="X3", metric="tpot_s", stat="mean", value="0.01")))
    res = run_measurements(ms, threads=1)
    md, p, plan, pol = _plan("llama-3.1-8b")
    n = 40
    by_hand = simulate_drained(plan, np.zeros(n), np.full(n, 256, dtype=np.int64), np.full(n, 64, dtype=np.int64),
                               max_context_tokens=md.max_context_tokens, policy=pol)
    fig = benchmark_figures(by_hand)
    assert fig.finished == n
    assert res[0].predicted == fig.output_tokens_per_s == n * 64 / float(by_hand.finish_s.max())
    assert res[1].predicted == fig.ttft_s["p90"]
    assert res[2].predicted == fig.tpot_s["mean"]
    assert res[0].ratio == pytest.approx(fig.output_tokens_per_s / 5000)
    assert all(r.policy == "vllm" and r.requests == n for r in res)


def test_an_online_row_is_a_seeded_finite_poisson_run(tmp_path):
    ms = read_measurements(write_csv(tmp_path / "m.csv", row(benchmark="online", rate_req_per_s="4", num_requests="60",
                                                             metric="e2e_s", stat="mean", value="1")))
    r = run_measurements(ms, threads=1)[0]
    gaps = np.random.default_rng(0).exponential(0.25, 60)
    md, p, plan, pol = _plan("llama-3.1-8b")
    res = simulate_drained(plan, np.cumsum(gaps) - gaps[0], np.full(60, 256, dtype=np.int64),
                           np.full(60, 64, dtype=np.int64), max_context_tokens=md.max_context_tokens, policy=pol)
    assert r.predicted == benchmark_figures(res).e2e_s["mean"]
    assert any("seed 0" in n for n in r.notes)


def test_a_trace_row_replays_the_trace_until_drained(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(f'{{"timestamp": {i * 250.0}, "input_length": {100 + 10 * i}, "output_length": {20 + i}}}\n'
                             for i in range(30)), encoding="utf-8")
    ms = read_measurements(write_csv(tmp_path / "m.csv", row(benchmark="trace", trace="t.jsonl", input_tokens=None,
                                                             output_tokens=None, num_requests=None, metric="ttft_s",
                                                             stat="mean", value="0.05")))
    r = run_measurements(ms, threads=1)[0]
    wl = read_trace(str(trace), time_unit="ms")
    md, p, plan, pol = _plan("llama-3.1-8b")
    res = simulate_drained(plan, wl.arrival_s, wl.prompt_tokens, wl.output_tokens,
                           max_context_tokens=md.max_context_tokens, policy=pol)
    assert res.status.size == 30
    assert r.predicted == benchmark_figures(res).ttft_s["mean"]


def test_a_step_row_is_one_decode_step():
    ms = [m for m in read_measurements(SHIPPED_MEASUREMENTS, load_catalog([str(SHIPPED_CATALOG)])) if m.id == "S1"]
    r = run_measurements(ms)[0]
    cat = default_catalog()
    p = step_params(cat.model("llama-3.1-8b"), cat.gpu("H100"), cat.precision("BF16"), 1)
    kv = 4 * 595.0
    assert r.predicted == pytest.approx(float(step_time(p, 4.0, kv, decode_attn_flops(p[P_LAYERS], p[P_QDIM_DEC], kv), 4.0)),
                                        rel=1e-12)
    assert r.policy == "step model"


def test_rows_fastsim_cannot_express_carry_their_reason(tmp_path):
    ms = read_measurements(write_csv(
        tmp_path / "m.csv", row(id="PP", pp="2", tp="1"),
        row(id="ITL", benchmark="online", rate_req_per_s="2", metric="itl_s", stat="p50", value="0.01"),
        row(id="ITLM", benchmark="online", rate_req_per_s="2", metric="itl_s", stat="mean", value="0.01"),
        row(id="BIG", model="llama-3.1-405b", gpu="H100", tp="1")))
    res = {r.measurement.id: r for r in run_measurements(ms, threads=2)}
    assert res["PP"].predicted is None and "pipeline parallelism (pp 2) under the vllm policy" in res["PP"].reason
    assert res["ITL"].predicted is None and "itl_s p50" in res["ITL"].reason
    assert res["ITLM"].predicted is not None and res["ITLM"].reason is None   # the same run gives the mean
    assert res["BIG"].predicted is None and "KV" in res["BIG"].reason
    s = summarize([r.record() for r in res.values()])
    assert (s["rows"], s["expressed"], s["not_expressed"]) == (4, 1, 3)
    assert s["overall"]["rows"] == 1


def test_a_model_feature_fastsim_lacks_is_a_reason_not_an_error(tmp_path):
    cfg = SHIPPED_MEASUREMENTS.parent / "configs" / "llama-4-scout-17b-16e-instruct-fp8-dynamic" / "config.json"
    ms = read_measurements(write_csv(tmp_path / "m.csv", row(model=str(cfg), precision="FP8", tp="4")))
    r = run_measurements(ms)[0]
    assert r.predicted is None and r.reason.startswith("a model feature fastsim does not model")


def test_summary_medians_and_geometric_means():
    recs = [{"engine": "vllm", "metric": "ttft_s", "family": "A", "ratio": 0.5, "reason": None},
            {"engine": "vllm", "metric": "ttft_s", "family": "A", "ratio": 2.0, "reason": None},
            {"engine": "sglang", "metric": "output_tokens_per_s", "family": "B", "ratio": 1.1, "reason": None},
            {"engine": "sglang", "metric": "e2e_s", "family": "B", "ratio": None, "reason": "pipeline parallelism (pp 2)"}]
    s = summarize(recs)
    assert s["overall"]["rows"] == 3
    assert s["overall"]["median_abs_pct_error"] == pytest.approx(50.0)
    assert s["overall"]["geomean_ratio"] == pytest.approx(1.1 ** (1 / 3))
    assert s["per_metric"]["ttft_s"] == {"rows": 2, "median_abs_pct_error": pytest.approx(75.0), "geomean_ratio": 1.0}
    assert s["per_engine"]["sglang"]["median_abs_pct_error"] == pytest.approx(10.0)
    assert s["per_family"]["B"]["geomean_ratio"] == pytest.approx(1.1)
    assert s["per_metric_engine"]["ttft_s / vllm"]["rows"] == 2
    assert s["not_expressed_reasons"] == {"pipeline parallelism": 1}


def test_families_of_the_shipped_ids():
    ms = read_measurements(SHIPPED_MEASUREMENTS, load_catalog([str(SHIPPED_CATALOG)]))
    fam = {m.id: m.family for m in ms}
    assert fam["T01"] == "T" and fam["B1-ttft"] == "B" and fam["S2"] == "S"
    assert fam["G-dsv3-H200-fp8-r1-e2e"] == "G"
    assert {m.family for m in ms} >= {"T", "T17", "T2", "O", "B", "L", "G", "V", "VD", "S"}


def test_the_starter_set_is_expressed_but_for_the_missing_trtllm_policy():
    """Every starter row runs through its own benchmark; only the trtllm rows wait for that policy."""
    rep = validate(str(SHIPPED_MEASUREMENTS))
    rows = {r.measurement.id: r for r in rep.results if r.measurement.id in STARTER}
    assert sorted(rows) == sorted(STARTER)
    assert {r.measurement.benchmark for r in rows.values()} == {"offline", "online", "trace", "step"}
    for rid, r in rows.items():
        if r.measurement.engine == "trtllm" and r.measurement.benchmark != "step" and "trtllm" not in POLICIES:
            assert r.predicted is None and "no 'trtllm' policy" in r.reason, rid
        else:
            assert r.predicted is not None and math.isfinite(r.ratio), (rid, r.reason)
    assert len(rep.results) == 1180


@pytest.mark.skipif("trtllm" not in POLICIES, reason="needs the trtllm policy (--policy trtllm)")
def test_done_when_every_starter_row_is_expressed_with_the_trtllm_policy():
    rep = validate(str(SHIPPED_MEASUREMENTS))
    left = [(r.measurement.id, r.reason) for r in rep.results
            if r.measurement.id in STARTER and r.predicted is None]
    assert left == []
    assert all(r.predicted is not None or "pipeline parallelism" in r.reason or "model feature" in r.reason
               or "itl_s p" in r.reason or r.reason.startswith("vLLM's V0 engine") for r in rep.results)
    assert sum(1 for r in rep.results if r.predicted is None and r.reason.startswith("vLLM's V0 engine")) == 54


def test_diagnosis_finds_the_constant_that_made_the_measurement(tmp_path):
    """A step row measured with eta_bw 0.6: the one-change rerun eta_bw x 0.75 gives it exactly."""
    from fastsim.validate import diagnose
    cat = default_catalog()
    p = step_params(cat.model("llama-3.1-8b"), cat.gpu("H100"), cat.precision("BF16"), 1, StepConstants(eta_bw=0.6))
    kv = 8 * 1000.0
    t = float(step_time(p, 8.0, kv, decode_attn_flops(p[P_LAYERS], p[P_QDIM_DEC], kv), 8.0))
    ms = read_measurements(write_csv(tmp_path / "m.csv", row(benchmark="step", metric="step_s", stat="mean",
                                                             value=repr(t), input_tokens=None, output_tokens=None,
                                                             num_requests=None, batch="8", context_tokens="1000")))
    r = run_measurements(ms)[0]
    assert r.ratio < 0.9
    d = diagnose(r, cat)
    assert d.best == "eta_bw x 0.75" and d.best_ratio == pytest.approx(1.0, rel=1e-12)
    assert dict(d.reruns)["max_num_seqs x 2"] is None          # no engine setting in a step
    assert "abs. error" in d.text() and "no single term" not in d.text()


def _trace(path, lengths):
    path.write_text("".join(f'{{"timestamp": {i * 200.0}, "input_length": {p}, "output_length": 16}}\n'
                            for i, p in enumerate(lengths)), encoding="utf-8")
    return path.name


def _trace_row(tmp_path, name, lengths, **kw):
    return row(id=name, benchmark="trace", trace=_trace(tmp_path / f"{name}.jsonl", lengths), input_tokens=None,
               output_tokens=None, num_requests=None, metric="ttft_s", stat="mean", value="0.05", **kw)


def test_requests_above_the_models_context_are_refused_as_the_engine_refuses_them(tmp_path):
    # Llama-3.1's context is 131,072 tokens: the engine runs with it and refuses a longer request, so a row
    # with such requests (all, or two of ten) has no figure, and says how many and of what context
    ms = read_measurements(write_csv(
        tmp_path / "m.csv", row(id="ALL", input_tokens="200000", num_requests="4"),
        row(id="ALLON", benchmark="online", model="llama-3.1-70b", tp="4", input_tokens="200000", rate_req_per_s="2",
            num_requests="20", metric="ttft_s", stat="mean", value="0.05"),
        _trace_row(tmp_path, "SOME", [500] * 4 + [140000] * 2 + [500] * 4),
        _trace_row(tmp_path, "FITS", [500] * 4 + [131056] + [500] * 4)))
    res = {r.measurement.id: r for r in run_measurements(ms, threads=1)}
    for rid, over, n in (("ALL", 4, 4), ("ALLON", 20, 20), ("SOME", 2, 10)):
        r = res[rid]
        assert r.predicted is None and r.ratio is None, rid
        assert f"{over:,} of {n:,} need more than the model's context of 131,072 tokens" in r.reason, rid
        assert (r.requests, r.rejected) == (n, over)
    assert res["FITS"].predicted is not None and res["FITS"].rejected == 0   # 131,056 + 16 is the whole context
    s = summarize([r.record() for r in res.values()])
    assert s["not_expressed_reasons"] == {"requests the engine would refuse": 3}


def test_requests_rejected_at_arrival_leave_the_row_without_a_figure(tmp_path):
    # Llama-3.1-70B in BF16 on 2 x H100 holds 8,827 tokens of KV: the two prompts of 9,000 are rejected at
    # arrival, and a figure over the other eight would not be the benchmark's
    cat = default_catalog()
    kv = float(step_params(cat.model("llama-3.1-70b"), cat.gpu("H100"), cat.precision("BF16"), 2)[P_KV_BUDGET_TOKENS])
    assert 500 + 16 < kv < 9000
    ms = read_measurements(write_csv(tmp_path / "m.csv", _trace_row(tmp_path, "KV", [500] * 4 + [9000] * 2 + [500] * 4,
                                                                    model="llama-3.1-70b", tp="2")))
    r = run_measurements(ms, threads=1)[0]
    assert r.predicted is None and "requests rejected at arrival (2 of 10" in r.reason
    assert f"{kv:,.0f} tokens" in r.reason and r.rejected == 2


@pytest.mark.parametrize("mnbt, mns", [(64, 128), (100, None)])   # None: the engine's default sequence cap
def test_settings_vllm_would_not_start_with_are_not_expressed(tmp_path, mnbt, mns):
    from fastsim.engine_rules import vllm_refusal
    ms = read_measurements(write_csv(tmp_path / "m.csv", row(max_num_batched_tokens=mnbt, max_num_seqs=mns),
                                     row(id="OK")))
    bad, ok = run_measurements(ms, threads=1)
    cat = default_catalog()
    seqs = mns or engine_policy("vllm", cat.gpu("H100").hbm_bytes, kv_budget_tokens=1e5,
                                context_tokens=131072).max_num_seqs
    assert seqs > mnbt
    why = vllm_refusal(max_num_batched_tokens=mnbt, max_num_seqs=seqs)
    assert f"max_num_batched_tokens ({mnbt}) must be greater than or equal to max_num_seqs ({seqs})" in why
    assert bad.predicted is None and bad.reason == (f"vLLM would not start with these settings (max_num_batched_tokens "
                                                    f"{mnbt}, max_num_seqs {seqs}): {why}")
    assert ok.predicted is not None


def test_a_copy_of_the_shipped_set_is_the_shipped_set(tmp_path):
    from fastsim.validate import is_shipped_set
    copy = tmp_path / "measurements.csv"
    copy.write_bytes(SHIPPED_MEASUREMENTS.read_bytes())
    assert is_shipped_set(SHIPPED_MEASUREMENTS) and is_shipped_set(copy)
    edited = tmp_path / "edited.csv"
    edited.write_bytes(SHIPPED_MEASUREMENTS.read_bytes().replace(b"L1-ttft,", b"L9-ttft,", 1))
    assert not is_shipped_set(edited) and not is_shipped_set(tmp_path / "none.csv")


def test_an_unknown_gpu_names_the_catalog_beside_the_measurements(tmp_path):
    path = write_csv(tmp_path / "m.csv", row(gpu="RTXPRO6000"))
    with pytest.raises(FastsimInputError) as exc:
        read_measurements(path)
    assert exc.value.allowed.endswith("(a GPU fastsim does not ship: add it with --catalog)")
    (tmp_path / "gpus_custom.toml").write_text(SHIPPED_CATALOG.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(FastsimInputError) as exc:
        read_measurements(path)
    assert exc.value.allowed.endswith(f"add it with --catalog {tmp_path / 'gpus_custom.toml'}, which sits beside "
                                      "the measurements)")
    assert read_measurements(path, load_catalog([str(tmp_path / "gpus_custom.toml")]))[0].gpu == "RTXPRO6000"


@pytest.mark.parametrize("change, value, allowed", [
    ({"gpu": ""}, "", "a value (the GPU the run used; the field is empty): one of "),
    ({"precision": " "}, " ", "a value (the precision the run used; the field is empty): one of "),
    ({"tp": "four"}, "four", "an integer >= 1"),
    ({"num_requests": "2.5"}, "2.5", "an integer >= 1"),
    ({"value": "inf"}, "inf", "a finite number > 0"),
    ({"benchmark": "online", "num_requests": None}, "", "a value (an online row needs rate_req_per_s)"),
    ({"trace": "t.jsonl"}, "t.jsonl", "empty for an offline row (the benchmark does not use it)"),
])
def test_reader_wording(tmp_path, change, value, allowed):
    with pytest.raises(FastsimInputError) as exc:
        read_measurements(write_csv(tmp_path / "m.csv", row(**change)))
    assert exc.value.value == value
    assert exc.value.allowed.startswith(allowed)


def test_a_missing_column_error_says_what_the_file_has_and_what_it_lacks(tmp_path):
    p = tmp_path / "short.csv"
    p.write_text("id,engine,model\nX,vllm,llama-3.1-8b\n", encoding="utf-8")
    with pytest.raises(FastsimInputError) as exc:
        read_measurements(p)
    assert exc.value.value == "id, engine, model"
    missing = [c for c in COLUMNS if c not in ("id", "engine", "model", "engine_version", "source", "note",
                                               "kv_cache_dtype")]
    assert exc.value.allowed.startswith("every column of the schema; missing: " + ", ".join(missing) + " (")


@pytest.mark.parametrize("version, v0", [
    ("0.6.3.post2.dev308+gb489fc3c", True), ("0.6.4.dev4+gc9fc1608", True), ("v0.7.3", True),
    ("0.8.0", False), ("0.19.0", False), ("inference-sim fork of vLLM V1", False), ("a V0 build", True),
    ("not stated (ROCm build, Oct 2024)", True), ("not stated, Feb. 2025", True), ("not stated, March 2025", False),
    ("V0.9.0", False), ("vllm==0.6.3", True), ("0.9.0 (VLLM_USE_V1=0)", True), ("0.7.3 (VLLM_USE_V1=1)", False),
    ("October 12, 2024", True), ("2024-10", True), ("2025-04", False), ("Marathon 2024", None), ("nightly", None),
    ("not stated", None), ("", None), ("test", None)])
def test_the_vllm_engine_generation_of_a_stated_version(version, v0):
    """v0.8.0 (March 2025) made V1 vLLM's default engine: VLLM_USE_V1, else a V0 / V1 word, else the release, else the
    month."""
    from fastsim.engine_rules import vllm_v0_engine
    assert vllm_v0_engine(version) is v0


def test_the_vllm_engine_generation_needs_a_string():
    from fastsim.engine_rules import vllm_v0_engine
    with pytest.raises(FastsimInputError, match="engine_version"):
        vllm_v0_engine(0.6)


def test_a_vllm_v0_run_is_not_expressed_and_makes_no_fold(tmp_path):
    """The vllm policy is V1's scheduler: a V0 run's row carries its reason and enters no error figure; a fit
    neither trains on it nor holds its family out (two V1 families and one V0 family: two folds, the V1 ones)."""
    from fastsim.validate.fit import fit_measurements
    old = [row(id=f"OLD-{i}", engine_version="0.6.3.post2", num_requests=n) for i, n in enumerate((8, 16, 32))]
    new = [row(id=f"{fam}-{i}", engine_version="0.19.0", num_requests=n + k, value=v)
           for k, fam in enumerate(("NA", "NB")) for i, (n, v) in enumerate(((8, 900), (16, 1700), (32, 3000)))]
    ms = read_measurements(write_csv(tmp_path / "m.csv", *old, *new))
    res = {r.measurement.id: r for r in run_measurements(ms, threads=1)}
    for i in range(3):
        r = res[f"OLD-{i}"]
        assert r.predicted is None and r.reason.startswith("vLLM's V0 engine (engine_version '0.6.3.post2', before "
                                                           "v0.8.0 made V1 the default)")
    assert all(r.predicted is not None for k, r in res.items() if not k.startswith("OLD"))
    from fastsim.validate.run import unexpressible
    assert [unexpressible(m) == res[m.id].reason for m in ms] == [True] * 9   # decided before any setup
    s = summarize([r.record() for r in res.values()])
    assert (s["expressed"], s["not_expressed"]) == (6, 3) and s["not_expressed_reasons"] == {"vLLM's V0 engine": 3}
    fit = fit_measurements(ms, engine="vllm", names=("eta_bw",), cross_validate=True, max_runs=None, max_nfev=3)
    assert fit.rows == 6
    assert [(f.family, f.rows) for f in fit.folds] == [("NA", 3), ("NB", 3)]
    assert fit.held_out["fitted"]["rows"] == 6
    # a V0 run of the same settings as a V1 one is its own run, not the V1 run's figure
    twin = read_measurements(write_csv(tmp_path / "t.csv", row(id="V0", engine_version="0.7.3", num_requests=8),
                                       row(id="V1", engine_version="0.8.0", num_requests=8)))
    a, b = run_measurements(twin, threads=1)
    assert a.predicted is None and b.predicted is not None
