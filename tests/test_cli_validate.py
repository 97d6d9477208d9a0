"""``fastsim validate``: bad input exits 2 naming the row and the column; JSON, CSV, table and --plot."""
import csv
import io
import json

import pytest

from cliutil import run
from test_validate import row, write_csv

from fastsim.validate import SHIPPED_MEASUREMENTS


@pytest.fixture()
def small(tmp_path):
    return str(write_csv(tmp_path / "m.csv", row(id="A1"), row(id="A2", metric="ttft_s", stat="p50", value="0.5"),
                         row(id="PP1", pp="2"),
                         row(id="ON1", benchmark="online", rate_req_per_s="3", num_requests="50", metric="itl_s",
                             stat="p90", value="0.02"),
                         row(id="SG1", engine="sglang", metric="e2e_s", stat="mean", value="2")))


@pytest.mark.parametrize("change, column", [({"engine": "tgi"}, "engine"), ({"metric": "goodput"}, "metric"),
                                            ({"gpu": "H900"}, "gpu"), ({"value": "n/a"}, "value"),
                                            ({"num_requests": None}, "num_requests"), ({"model": "nope-1b"}, "model")])
def test_bad_input_exits_2_naming_row_and_column(capsys, tmp_path, change, column):
    path = write_csv(tmp_path / "bad.csv", row(id="GOOD"), row(id="Z-9", **change))
    rc, out, err = run(capsys, "validate", str(path))
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert f"bad.csv row Z-9, column {column}" in lines[0] and "allowed" in lines[0]


def test_a_gpu_fastsim_does_not_ship_needs_catalog(capsys, tmp_path):
    path = write_csv(tmp_path / "m.csv", row(gpu="RTXPRO6000"))
    rc, _, err = run(capsys, "validate", str(path))
    assert rc == 2 and "m.csv row X1, column gpu" in err and "--catalog" in err
    cat = SHIPPED_MEASUREMENTS.parent / "gpus_custom.toml"
    rc, out, _ = run(capsys, "validate", str(path), "--catalog", str(cat), "--format", "json")
    assert rc == 0 and json.loads(out)["rows"][0]["predicted"] > 0


def test_json_shape(capsys, small):
    rc, out, err = run(capsys, "validate", small, "--format", "json")
    assert rc == 0
    doc = json.loads(out)
    assert set(doc) == {"rows", "summary", "notes"}
    rows = {r["id"]: r for r in doc["rows"]}
    assert list(rows) == ["A1", "A2", "PP1", "ON1", "SG1"]
    for r in doc["rows"]:
        assert {"id", "engine", "metric", "stat", "real", "predicted", "ratio", "abs_pct_error", "reason"} <= set(r)
    assert rows["A1"]["ratio"] == pytest.approx(rows["A1"]["predicted"] / 5000)
    assert rows["A2"]["predicted"] == pytest.approx(rows["A2"]["ratio"] * 0.5)
    assert rows["PP1"]["predicted"] is None and "pipeline parallelism" in rows["PP1"]["reason"]
    assert rows["ON1"]["predicted"] is None and "itl_s p90" in rows["ON1"]["reason"]
    assert rows["SG1"]["policy"] == "sglang" and rows["SG1"]["predicted"] > 0
    s = doc["summary"]
    assert (s["rows"], s["expressed"], s["not_expressed"]) == (5, 3, 2)
    assert set(s["per_engine"]) == {"vllm", "sglang"}
    assert any("2 of 5 rows not expressed" in n for n in doc["notes"])


def test_csv_and_table(capsys, small):
    rc, out, _ = run(capsys, "validate", small, "--format", "csv")
    assert rc == 0
    recs = list(csv.DictReader(io.StringIO(out)))
    assert [r["id"] for r in recs] == ["A1", "A2", "PP1", "ON1", "SG1"]
    assert recs[2]["predicted"] == "" and "pipeline" in recs[2]["reason"]
    assert "Poisson arrivals, seed 0" in json.loads(recs[3]["notes"])[0]
    assert any("not expressed" in n for n in json.loads(recs[0]["notes"]))
    rc, out, _ = run(capsys, "validate", small)
    assert rc == 0
    assert "not expressed: pipeline parallelism (pp 2) under the vllm policy: fastsim simulates pipelines under lecture and trtllm only" in out
    assert "median |err| %" in out


def test_filters(capsys, small):
    rc, out, _ = run(capsys, "validate", small, "--engine", "sglang", "--format", "json")
    assert rc == 0 and [r["id"] for r in json.loads(out)["rows"]] == ["SG1"]
    rc, out, _ = run(capsys, "validate", small, "--only", "A2", "PP1", "--format", "json")
    assert rc == 0 and [r["id"] for r in json.loads(out)["rows"]] == ["A2", "PP1"]
    rc, _, err = run(capsys, "validate", small, "--only", "NOPE")
    assert rc == 2 and "--only" in err and "NOPE" in err


def test_plot_writes_a_png(capsys, small, tmp_path):
    png = tmp_path / "v.png"
    rc, _, err = run(capsys, "validate", small, "--plot", str(png), "--format", "json")
    assert rc == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rc, _, err = run(capsys, "validate", small, "--plot", str(tmp_path / "no" / "dir" / "v.png"))
    assert rc == 2 and "--plot" in err


def test_the_shipped_set_by_default(capsys):
    rc, out, err = run(capsys, "validate", "--only", "B1-ttft", "L1-ttft", "S1", "--format", "json")
    assert rc == 0
    doc = json.loads(out)
    assert [r["predicted"] is not None for r in doc["rows"]] == [True, True, True]
    assert any("shipped measurement set" in n for n in doc["notes"])


def test_calibration_changes_the_step_constants(capsys, tmp_path):
    path = str(write_csv(tmp_path / "m.csv", row(id="A1", num_requests="8")))
    cal = tmp_path / "cal.toml"
    cal.write_text('format_version = 1\n[[constants]]\ngpu = "H100"\nprecision = "BF16"\neta_bw = 0.4\n',
                   encoding="utf-8")
    rc, out, _ = run(capsys, "validate", path, "--format", "json")
    base = json.loads(out)["rows"][0]["predicted"]
    rc, out, _ = run(capsys, "validate", path, "--format", "json", "--calibration", str(cal))
    doc = json.loads(out)
    slow = doc["rows"][0]["predicted"]
    assert rc == 0 and slow < 0.7 * base                 # a batch of 8 decodes is bandwidth-bound
    from fastsim.constants import load_calibration
    from fastsim.validate import read_measurements, run_measurements
    r = run_measurements(read_measurements(path), constants=load_calibration(str(cal)))[0]
    assert r.predicted == slow
    assert any("cal.toml" in n for n in doc["notes"])


def test_a_copy_of_the_shipped_set_is_read_with_its_gpu_entries(capsys, tmp_path):
    # the same bytes elsewhere (the repository's copy beside an installed fastsim) are the shipped set
    copy = tmp_path / "measurements.csv"
    copy.write_bytes(SHIPPED_MEASUREMENTS.read_bytes())
    for d in ("configs", "traces"):
        (tmp_path / d).symlink_to(SHIPPED_MEASUREMENTS.parent / d, target_is_directory=True)
    rc, out, err = run(capsys, "validate", str(copy), "--only", "L1-ttft", "S1", "--format", "json")
    assert rc == 0, err
    doc = json.loads(out)
    assert [r["gpu"] for r in doc["rows"]] == ["RTXPRO6000", "H100"]
    assert all(r["predicted"] > 0 for r in doc["rows"])
    assert any("shipped measurement set" in n for n in doc["notes"])


def test_an_unknown_gpu_names_the_gpus_custom_toml_beside_the_file(capsys, tmp_path):
    path = write_csv(tmp_path / "m.csv", row(gpu="RTXPRO6000"))
    (tmp_path / "gpus_custom.toml").write_bytes((SHIPPED_MEASUREMENTS.parent / "gpus_custom.toml").read_bytes())
    rc, out, err = run(capsys, "validate", str(path))
    assert rc == 2 and out == ""
    assert (f"add it with --catalog {tmp_path / 'gpus_custom.toml'}, which sits beside the measurements"
            in err.strip().splitlines()[0])


def test_plot_with_no_expressed_row_says_so_and_the_plot_path_is_checked_first(capsys, tmp_path):
    path = str(write_csv(tmp_path / "m.csv", row(id="PP1", pp="2"), row(id="PP2", pp="2", metric="ttft_s",
                                                                           stat="mean", value="0.5")))
    rc, out, err = run(capsys, "validate", path, "--plot", str(tmp_path / "v.txt"))
    assert rc == 2 and out == "" and "--plot" in err          # refused before any row is read or run
    png = tmp_path / "v.png"
    rc, out, err = run(capsys, "validate", path, "--plot", str(png))
    assert rc == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "PP1" in out and "PP2" in out and f"wrote {png}" in err


def test_table_names_every_column(capsys, small):
    rc, out, _ = run(capsys, "validate", small)
    head = out.splitlines()[0].split()
    assert rc == 0 and head == ["id", "engine", "benchmark", "metric", "stat", "real", "fastsim", "ratio", "|err|", "%",
                                "reason"]
    pp = next(line for line in out.splitlines() if line.startswith("PP1"))
    assert pp.rstrip().endswith("not expressed: pipeline parallelism (pp 2) under the vllm policy: fastsim simulates pipelines under lecture and trtllm only")
    assert ("note: 2 of 5 rows not expressed (each with its reason; pipeline parallelism: 1; the simulator does not "
            "give itl_s p90: 1); they enter no error figure, which is over the 3 expressed") in out.splitlines()
