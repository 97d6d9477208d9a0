"""``fastsim bench`` outputs from a result dict (no benchmark run): table, JSON and CSV agree."""
from __future__ import annotations

import csv
import io
import json
import math

import pytest

from fastsim.bench import bench_notes, render_benchmarks

RES = {"threads": 2, "horizon_s": 60.0, "chat_requests": 1200, "chat_run_ms": 12.5,
       "requests_per_s_per_core": 96000.0, "grid_runs": 16, "grid_requests": 19000, "grid_s_1_thread": 0.4,
       "grid_s_all_threads": 0.25, "parallel_speedup": 1.6, "grid_requests_per_s_per_core": 38000.0,
       "reference_requests": 100, "reference_s": 0.5, "reference_us_per_request": 5000.0,
       "kernel_us_per_request": 10.4, "reference_ratio": math.nan, "capacity_configs": 2, "capacity_seeds": 8,
       "capacity_sweep_s": 4.0, "capacity_configs_per_s": 0.5, "capacity_probes_per_search": 3.5,
       "capacity_seed_runs_per_search": 30.0, "capacity_stopped_fraction": 0.125, "quick": True}


def test_csv_is_the_json_record_as_one_row_with_notes():
    doc = json.loads(render_benchmarks(RES, "json"))
    rows = list(csv.DictReader(io.StringIO(render_benchmarks(RES, "csv"))))
    assert len(rows) == 1
    row = rows[0]
    assert json.loads(row["notes"]) == doc["notes"] == bench_notes(RES) == [
        "--quick: short horizons, not comparable with a full run"]
    # nested dicts flatten to a.b columns (the project's CSV convention)
    assert set(row) == (set(doc) - {"null_reasons"}) | {f"null_reasons.{k}" for k in doc["null_reasons"]}
    assert row["grid_runs"] == "16" and row["threads"] == "2"       # integers stay integers
    assert float(row["chat_run_ms"]) == 12.5 and row["quick"] == "True"
    # a non-finite value: empty in CSV, null in JSON, with its reason in both
    assert row["reference_ratio"] == "" and doc["reference_ratio"] is None
    assert row["null_reasons.reference_ratio"] == doc["null_reasons"]["reference_ratio"]
    assert doc["null_reasons"]["reference_ratio"].startswith("not applicable")


def test_table_and_unknown_format():
    out = render_benchmarks(dict(RES, reference_ratio=480.0), "table")
    assert "parallel speed-up" in out and out.rstrip().endswith("note: --quick: short horizons, not comparable "
                                                                  "with a full run")
    line = next(x for x in out.splitlines() if x.startswith("capacity sweep"))
    assert "0.50 configurations/s" in line and "2 configurations x 8 seeds x 60 s to 1%: 4.0 s" in line
    assert "3.5 probes, 30 seed-runs a search, 12% of runs stopped early" in line
    assert "note:" not in render_benchmarks(dict(RES, quick=False, reference_ratio=480.0))
    with pytest.raises(ValueError, match="table, json or csv"):
        render_benchmarks(RES, "xml")
