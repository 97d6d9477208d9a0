"""Write docs/VALIDATION.md (and docs/validation.png): fastsim beside real engines, from the shipped measurements.

Every figure comes from ``fastsim.validate`` run on ``fastsim/data/measurements/measurements.csv``
(its user GPU entries added) with SPEC §3's step constants (passed explicitly: ``fastsim validate``'s own default
is the shipped fits, in sample); the run is deterministic (a fixed
arrival seed, results independent of the thread count), so the document changes only when the
measurements or fastsim change. ``tests/test_validate_doc.py`` regenerates it and compares.

    python tools/make_validation.py [--out docs/VALIDATION.md] [--plot docs/validation.png]
                                    [--measurements FILE.csv] [--catalog FILE.toml ...]
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fastsim.validate import (SHIPPED_CALIBRATIONS, SHIPPED_CATALOG, SHIPPED_MEASUREMENTS, diagnose,  # noqa: E402
                              optimism, plot_validation, read_measurements, run_measurements, summarize)
from fastsim.validate.run import ONLINE_SEED, STAGE_S  # noqa: E402
from fastsim.validate.fit import HOST_FITTED  # noqa: E402

#: The sections of the document, in order: (key, heading).
SECTIONS = (
    ("how", "## How each row is run"),
    ("summary", "## Summary"),
    ("errors", "## Errors per metric, engine and source"),
    ("optimism", "## Where fastsim is optimistic"),
    ("fitted", "## Constants fitted to these rows, cross-validated"),
    ("pipeline", "## Pipeline-parallel rows"),
    ("scatter", "## Predicted against measured"),
    ("worst", "## The ten worst rows, each with a one-change diagnosis"),
    ("peers", "## Published accuracy of other simulators"),
    ("unexpressed", "## Rows fastsim cannot express"),
    ("rows", "## Every row"),
)
HEADING = dict(SECTIONS)
WORST = 10

#: Other simulators' published accuracy: (simulator, figure, what it was measured on, source).
PEERS = (
    ("inference-sim (BLIS), trained-physics latency model", "6.7% median E2E error",
     "36 vLLM runs on models and GPUs held out of training; P90 / P99 within 7.5% / 9.2%",
     "inference-sim/inference-sim pull request 1525 (blog post of the *simulate before you scale* series), "
     "https://github.com/inference-sim/inference-sim/pull/1525"),
    ("Vidur", "under 9% error", "inference latency of the models and GPUs it profiled",
     "Agrawal et al., \"Vidur: A Large-Scale Simulation Framework for LLM Inference\", MLSys 2024, "
     "arXiv:2405.05465"),
    ("LLMServingSim", "TPOT mean within 1.7%", "300-request ShareGPT replays against vLLM 0.19.0 on RTX PRO 6000 "
     "(the runs of the `L*` rows here)", "https://llmservingsim.ai/docs/validation; casys-kaist/LLMServingSim "
     "`bench/examples/*/validation/summary.txt`"),
    ("aiconfigurator (analytic, per-operation database)", "~45% TTFT MAPE reported",
     "a user's vLLM runs on 4 x A100 SXM, random dataset", "https://github.com/ai-dynamo/aiconfigurator/issues/1205"),
)


def fmt(x, spec):
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def unit_value(r, key):
    v = r[key]
    if v is None:
        return "n/a"
    return f"{v:,.1f} tok/s" if r["metric"] == "output_tokens_per_s" else f"{v * 1e3:,.2f} ms"


def run(measurements=SHIPPED_MEASUREMENTS, catalogs=None):
    """(catalog, results, records, summary) of a measurement file."""
    from fastsim.catalog import load_catalog
    if catalogs is None:
        catalogs = [str(SHIPPED_CATALOG)]
    cat = load_catalog(list(catalogs))
    ms = read_measurements(measurements, cat)
    from fastsim.stepmodel import StepConstants
    results = run_measurements(ms, cat, StepConstants())       # SPEC §3's: the document's figures
    recs = [r.record() for r in results]
    return cat, results, recs, summarize(recs)


def section_how(recs, summ, **_):
    n = {b: sum(1 for r in recs if r["benchmark"] == b) for b in ("offline", "online", "trace", "step")}
    return "\n".join([
        HEADING["how"], "",
        "Each row of the measurement set is one figure a real engine published; `fastsim validate` runs it the way "
        "its benchmark ran, on the policy named after its engine (`trtllm`, `vllm`, `sglang`; no other policy stands "
        "in for a missing one), with the row's deployment (model, GPU, precision, TP, layout, instances) and engine "
        "settings (max_batch, max_num_batched_tokens, max_num_seqs, a shared prefix), and reads the figure as the "
        "benchmark client does (`fastsim.sim.benchmark_figures`: TPOT excludes the first token, ITL is the "
        "token-weighted mean gap, throughput is output tokens over the makespan).", "",
        f"- `offline` ({n['offline']:,} rows): `num_requests` requests of the fixed lengths, all at t = 0, simulated "
        "until the last finishes (trtllm-bench throughput, `vllm bench throughput`, MLPerf Offline); a TensorRT-LLM "
        "row that publishes neither max_num_tokens nor max_batch_size runs with the ones trtllm-bench tunes for its "
        "lengths and KV cache (`tensorrt_llm/bench/build/tuning.py`, `finetune_setting`: "
        "`fastsim.validate.trtllm_bench`);",
        f"- `online` ({n['online']:,} rows): `num_requests` Poisson arrivals at `rate_req_per_s` "
        f"(`numpy.random.default_rng({ONLINE_SEED})`), simulated until every request finishes; a row without "
        f"`num_requests` (a steady stage of a longer run) sends rate x {STAGE_S:g} s requests;",
        f"- `trace` ({n['trace']:,} rows): the JSONL trace's arrivals and lengths, simulated until every request "
        "finishes;",
        f"- `step` ({n['step']:,} rows): one decode step of `batch` requests at `context_tokens` each, from the step "
        "model (SPEC §3).", "",
        "Rows that describe one run (the TTFT, ITL and E2E of one benchmark) share one simulation. Constants are "
        "SPEC §3's, the defaults of `fastsim.stepmodel.StepConstants` (no calibration: `fastsim validate --constants "
        "lecture`; the command's default, `--constants fitted`, runs each engine's rows on the fit of it that ships, "
        "in sample). Every run uses the model's context as the "
        "engine's limit. A row fastsim cannot express (among them a vLLM run of the V0 engine, any release before "
        "v0.8.0: the `vllm` policy is V1's scheduler with V1's defaults, `fastsim.engine_rules.vllm_v0_engine`), a row whose settings its engine would not start with "
        "(`fastsim.engine_rules`), and a row with requests its engine would refuse (prompt plus output above the "
        "context) or the simulator rejects at arrival (more KV than the instance holds) is listed with its reason and "
        "enters no error figure: no figure is given over the accepted rest of a run. Per row, ratio = fastsim / real and the error is |ratio - 1|; a group "
        "reports the median absolute percentage error and the geometric-mean ratio.",
    ])


def section_summary(recs, summ, **_):
    o = summ["overall"]
    reasons = "; ".join(f"{k}: {v:,}" for k, v in summ["not_expressed_reasons"].items()) or "none"
    return "\n".join([
        HEADING["summary"], "",
        f"{summ['rows']:,} rows ({len({r['engine'] for r in recs})} engines, {len({r['gpu'] for r in recs})} GPU "
        f"types); {summ['expressed']:,} expressed, {summ['not_expressed']:,} not ({reasons}).", "",
        f"Over the expressed rows the median absolute error is **{fmt(o['median_abs_pct_error'], '.1f')}%** and the "
        f"geometric-mean ratio fastsim / real is **{fmt(o['geomean_ratio'], '.3f')}**.",
    ])


def _group_table(groups):
    return table(["group", "rows", "median abs. error", "fastsim / real (geometric mean)"],
                 [[k, g["rows"], fmt(g["median_abs_pct_error"], ".1f") + "%", fmt(g["geomean_ratio"], ".3f")]
                  for k, g in groups.items()])


def section_errors(recs, summ, **_):
    return "\n".join([HEADING["errors"], "", "Per metric:", "", _group_table(summ["per_metric"]), "",
                      "Per engine:", "", _group_table(summ["per_engine"]), "",
                      "Per metric and engine:", "", _group_table(summ["per_metric_engine"]), "",
                      "Per source family (the row id's prefix: see `fastsim/data/measurements/README.md`):", "",
                      _group_table(summ["per_family"])])


def section_optimism(recs, summ, **_):
    lines = [HEADING["optimism"], "",
             "A plan sized on an optimistic model is under-provisioned: it promises more tokens per second, or faster "
             "responses, than the engine delivers. fastsim is optimistic where its ratio is above 1 on throughput and "
             "below 1 on latency.", ""]
    opt, pes = [], []
    for k, g in summ["per_metric_engine"].items():
        metric = k.split(" / ")[0]
        side = optimism(metric, g["geomean_ratio"])
        (opt if side == "optimistic" else pes).append(f"{k} ({fmt(g['geomean_ratio'], '.3f')}, {g['rows']} rows)")
    done = [r for r in recs if r["ratio"] is not None]
    n_opt = sum(1 for r in done if optimism(r["metric"], r["ratio"]) == "optimistic")
    lines.append(f"- Optimistic on average (geometric-mean ratio per metric and engine): {', '.join(opt) or 'none'}.")
    lines.append(f"- Pessimistic on average: {', '.join(pes) or 'none'}.")
    lines.append(f"- Row by row, {n_opt:,} of {len(done):,} expressed rows are optimistic.")
    lines += ["", "Until the step model is fitted to these engines, size a deployment with headroom where the rows above "
              "say fastsim is optimistic, or calibrate it (`fastsim calibrate`, `--calibration`) on the engine and "
              "GPU it will run on."]
    return "\n".join(lines)


def section_scatter(recs, summ, plot_name="validation.png", **_):
    return "\n".join([HEADING["scatter"], "",
                      f"![fastsim against the measurements, log-log, coloured by engine]({plot_name})", "",
                      "One point per expressed row; the solid line is y = x, the dotted lines a factor of 2 either "
                      "way. Left: output throughput (tokens/s); right: latencies (seconds)."])


def worst_rows(results):
    done = [r for r in results if r.ratio is not None]
    return sorted(done, key=lambda r: (-abs(math.log(r.ratio)), r.measurement.id))[:WORST]


def section_worst(recs, summ, results=(), cat=None, **_):
    rows = []
    for r in worst_rows(results):
        m, rec = r.measurement, r.record()
        d = diagnose(r, cat)
        rows.append([m.id, m.engine, f"{m.metric} {m.stat}", unit_value(rec, "real"), unit_value(rec, "predicted"),
                     f"{r.ratio:.3f}", d.text()])
    from fastsim.validate.diagnose import CHANGES
    return "\n".join([
        HEADING["worst"], "",
        "Each row is rerun with one change at a time (" + ", ".join(c[0] for c in CHANGES) + "); the change that "
        "moves the ratio most toward 1 names the term of the step or serving model most likely responsible "
        "(an efficiency: the compute or bandwidth roofline; overhead_s: the per-step cost; alpha_s / eta_nvlink: the "
        "all-reduce; memory_utilization: the KV pool and so the batch; max_num_seqs / max_num_batched_tokens: the "
        "scheduler's batch). A change that barely moves the ratio says the error lies outside the step model (in "
        "the measurement's mapping, or in what the simulator does not model: HTTP and tokenisation, pipeline "
        "bubbles, kernels slower than the roofline at this shape).", "",
        table(["id", "engine", "figure", "real", "fastsim", "ratio", "best single change"], rows)])


def _pct(g):
    return "n/a" if not g or g.get("median_abs_pct_error") is None else \
        f"{g['median_abs_pct_error']:.1f}% ({g['geomean_ratio']:.3f}, {g['rows']:,} rows)"


def section_fitted(recs, summ, shipped=True, **_):
    """The fits of tools/make_fit.py (fastsim/data/calibrations/fit-report.json): in-sample and held-out errors."""
    import json
    lines = [HEADING["fitted"], ""]
    report = SHIPPED_CALIBRATIONS / "fit-report.json"
    if not shipped or not report.is_file():
        return "\n".join(lines + ["No fit of these rows (`python tools/make_fit.py` fits the shipped set)."])
    rep = json.loads(report.read_text(encoding="utf-8"))
    lines += [
        "`python tools/make_fit.py` fits step model v2's constants per engine through the simulator "
        "(`fastsim calibrate --measurements FILE.csv --engine E`; `fastsim.validate.fit`): each evaluation runs "
        "every training row as its benchmark ran; a maximum a posteriori fit on the log ratio (a Cauchy likelihood, so "
        "a few rows the model cannot express do not drag the rest, and a Gaussian prior on each constant's log "
        "centred on its start, `fastsim.validate.fit.PRIOR_LOG_SD`, so a constant the rows do not pin stays near "
        "it), a `*` entry for the engine and one per GPU with 20 rows or "
        "more (its efficiencies fitted with the `*` entry in one hierarchical fit, each GPU's prior centred on the "
        "`*` one, `gpu_fit = \"joint\"`, or refitted on its rows from the `*` fit, `\"sequential\"`; the method of "
        "each engine's fit: "
        + ", ".join(f"{e} {rep[e].get('gpu_fit', 'sequential')}" for e in sorted(rep) if "held_out" in rep[e])
        + "), starting from SPEC §3's timing constants with the engine's KV-pool "
        "rule, in the step form of a roofline per kernel class (`step_form = \"classes\"`: max(weight read, GEMM) + "
        "max(KV read, attention), `docs/STEP_MODEL.md`; SPEC §3's figures take one roofline over the step). Where no "
        "GPU is measured by two source families, no held-out family can judge a GPU's efficiencies, and the fit is "
        "the engine's own constants alone, its host's per-step costs and its per-request cost "
        "(`fastsim.validate.fit.HOST_FITTED`), every efficiency at its start (SPEC §3's; `eta_pcie` 0.5, "
        "`fastsim.validate.fit.START_ETA_PCIE`): "
        + (", ".join(e for e in sorted(rep) if "held_out" in rep[e]
                     and set(rep[e].get("names", ())) <= set(HOST_FITTED)) or "no engine's today") + ". Leave one "
        "source out: each source family's rows are run with the constants fitted on the other "
        "families only, and the held-out figures below are over those runs, never over rows a fit saw. A fit "
        "ships (`fastsim/data/calibrations/<engine>.toml`) if and only if its held-out error is below SPEC §3's on "
        "the same rows; a shipped fit is the default (`--constants fitted`) of `fastsim validate` on its engine's "
        "rows and of every planning command run on its engine's policy"
        + " (" + ", ".join(f"`--policy {e}`" for e in sorted(rep) if rep[e].get("shipped")) + "), while the default "
        "scheduler keeps SPEC §3's and `--constants lecture` gives SPEC §3's everywhere.", ""]
    rows = []
    for engine in sorted(rep):
        d = rep[engine]
        if "held_out" not in d:
            rows.append([engine, "n/a", "n/a", "n/a", "n/a", "n/a", "not shipped: " + d["reason"]])
            continue
        u = d["held_out"].get("unfitted")
        rows.append([engine, _pct(d["in_sample"]["start"]), _pct(d["in_sample"]["fitted"]),
                     _pct(d["held_out"]["start"]), _pct(u) if u and u.get("rows") else "n/a",
                     _pct(d["held_out"]["fitted"]),
                     ("shipped" if d["shipped"] else "not shipped") + ": " + d["reason"]])
    lines.append(table(["engine", "in sample, SPEC §3", "in sample, fitted", "held out, SPEC §3",
                        "held out, the fit's start unfitted", "held out, fitted", "decision"], rows))
    lines += ["", "The fit's start, unfitted, is each fold's starting point run on its held-out rows with nothing read "
              "off a row: the step form, the engine's KV-pool rule and the documented starts of the v2 constants "
              "(`held_out[\"unfitted\"]` of `fastsim.validate.fit.MeasuredFit`). Where it is below the fitted "
              "figure, the gain over SPEC §3 is the model's form, not the fitted numbers."]
    for engine in sorted(rep):
        d = rep[engine]
        if "held_out" not in d:
            continue
        lines += ["", f"{engine}, held out per metric and per source family (median abs. error, geometric-mean "
                      "ratio, rows):", ""]
        lines.append(table(["held out", "SPEC §3", "fitted"],
                           [[m, _pct(v["start"]), _pct(v["fitted"])] for m, v in sorted(d["held_out"]["per_metric"].items())]
                           + [[f"family {f['family']}", "", _pct(f)] for f in d["folds"]]))
        cons = []
        for e in d["entries"]:
            for n in d["names"]:
                if "@" in n:                   # a runtime's host cost: its own rows below
                    continue
                lo, hi = e["interval95"].get(n, [None, None])
                v = e["constants"][n]
                iv = "not identified" if lo is None or lo != lo else f"{lo:.4g} - {hi:.4g}"
                cons.append([e["gpu"], e["rows"], n, f"{v:.4g}", iv])
        for r in d.get("runtimes", []):        # [[runtime]] tables: the host costs of another runtime
            for n, v in r["constants"].items():
                lo, hi = r["interval95"].get(n, [None, None])
                iv = "not identified" if lo is None or lo != lo else f"{lo:.4g} - {hi:.4g}"
                cons.append([f"* ({r['name']} runtime)", d["entries"][0]["rows"], n, f"{v:.4g}", iv])
        lines += ["", f"{engine}, fitted constants (95% intervals from the Jacobian, conditional on the model's "
                      "form):", "", table(["GPU", "rows fitted", "constant", "fitted", "95% interval"], cons)]
    return "\n".join(lines)


def section_pipeline(recs, summ, **_):
    import statistics

    from fastsim.layouts import instance_label
    pp = [r for r in recs if (r.get("pp") or 1) > 1]
    lines = [HEADING["pipeline"], "",
             "Rows whose deployment is pipeline parallel (TP x PP GPUs per instance), run as `fastsim.sim.PipelinePlan`s: "
             "the stages of `fastsim.stepmodel.stage_params`, up to PP micro-batches in flight (`docs/STEP_MODEL.md`, "
             "Pipeline parallelism).", ""]
    if not pp:
        return "\n".join(lines + ["None in this set."])
    groups = {}
    for r in pp:
        lay = f"{instance_label(r['layout'], r['tp'])} x PP{r['pp']}"
        groups.setdefault((r["model"], r["gpu"], r["precision"], lay), []).append(r)
    rows = []
    for (model, gpu, prec, lay), g in groups.items():
        done = [r for r in g if r["ratio"] is not None]
        med = statistics.median(r["abs_pct_error"] for r in done) if done else None
        geo = math.exp(statistics.fmean(math.log(r["ratio"]) for r in done)) if done else None
        rows.append([model, gpu, prec, lay, f"{len(g)}", f"{len(done)}", fmt(med, ".1f") + ("%" if med is not None else ""),
                     fmt(geo, ".3f")])
    done = [r for r in pp if r["ratio"] is not None]
    lines.append(table(["model", "GPU", "precision", "layout", "rows", "expressed", "median abs. error",
                        "fastsim / real (geometric mean)"], rows))
    if done:
        med = statistics.median(r["abs_pct_error"] for r in done)
        geo = math.exp(statistics.fmean(math.log(r["ratio"]) for r in done))
        lines += ["", f"Over the {len(done):,} expressed pipeline rows: median absolute error {med:.1f}%, "
                  f"geometric-mean ratio {geo:.3f}."]
    return "\n".join(lines)


def section_peers(recs, summ, **_):
    return "\n".join([HEADING["peers"], "",
                      "Each figure is the simulator's own, on the engines and GPUs it was fitted or profiled on; "
                      "fastsim's above is with SPEC §3's constants on every row it can express.", "",
                      table(["simulator", "published accuracy", "measured on", "source"], PEERS)])


def section_unexpressed(recs, summ, **_):
    lines = [HEADING["unexpressed"], ""]
    if not summ["not_expressed"]:
        return "\n".join(lines + ["None: every row is expressed."])
    lines.append(table(["reason", "rows"], [[k, f"{v:,}"] for k, v in summ["not_expressed_reasons"].items()]))
    lines += ["", "Each such row is in the table below with its full reason; none enters an error figure."]
    return "\n".join(lines)


def section_rows(recs, summ, **_):
    rows = [[r["id"], r["engine"], r["benchmark"], f"{r['metric']} {r['stat']}", unit_value(r, "real"),
             unit_value(r, "predicted"), fmt(r["ratio"], ".3f"), fmt(r["abs_pct_error"], ".1f"),
             "" if r["reason"] is None else r["reason"].replace("|", "/")] for r in recs]
    return "\n".join([HEADING["rows"], "", table(["id", "engine", "benchmark", "figure", "real", "fastsim", "ratio",
                                                  "abs. error %", "not expressed because"], rows)])


BUILDERS = {"how": section_how, "summary": section_summary, "errors": section_errors, "optimism": section_optimism,
            "scatter": section_scatter, "fitted": section_fitted, "pipeline": section_pipeline,
            "worst": section_worst, "peers": section_peers,
            "unexpressed": section_unexpressed, "rows": section_rows}


def build(measurements=SHIPPED_MEASUREMENTS, catalogs=None, plot_name="validation.png", plot_path=None):
    """The document's text (and the plot at ``plot_path``, if given)."""
    cat, results, recs, summ = run(measurements, catalogs)
    parts = ["# fastsim beside real engines", "",
             "Generated by `python tools/make_validation.py` from `fastsim/data/measurements/measurements.csv` (the "
             "measurements, their sources and licences: `fastsim/data/measurements/README.md`); do not edit by hand. "
             "The same rows, run by hand: `fastsim validate` (`--format json` for every field)."]
    shipped = Path(measurements).resolve() == Path(SHIPPED_MEASUREMENTS).resolve()
    for key, _ in SECTIONS:
        parts += ["", BUILDERS[key](recs, summ, results=results, cat=cat, plot_name=plot_name, shipped=shipped)]
    if plot_path is not None:
        plot_validation(recs, plot_path)
    return "\n".join(parts) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "VALIDATION.md"))
    ap.add_argument("--plot", default=None, help="the scatter (default: validation.png beside --out)")
    ap.add_argument("--measurements", default=str(SHIPPED_MEASUREMENTS))
    ap.add_argument("--catalog", action="append", default=None,
                    help="catalog files (default: the shipped set's gpus_custom.toml)")
    a = ap.parse_args(argv)
    out = Path(a.out)
    plot = Path(a.plot) if a.plot else out.parent / "validation.png"
    text = build(a.measurements, a.catalog, plot_name=plot.name if plot.parent == out.parent else str(plot),
                 plot_path=plot)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out} and {plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
