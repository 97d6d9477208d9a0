"""Sweeps: grid validation, the vectorized analytic table, batched verification, resume, Dask, plots."""
import os

import numpy as np
import pandas as pd
import pytest

from fastsim import sweep as SW
from fastsim.analytic import Demand, screen
from fastsim.catalog import default_catalog
from fastsim.cli import main
from fastsim.errors import FastsimInputError
from fastsim.search import SLO, verify
from fastsim import workload as W

CAT = default_catalog()
CHAT = CAT.scenario("chat")
# small and fast: 2 GPUs x FP8 x 2 modes x TP 1, 2 at chat; verify the 3 cheapest, 2 seeds x 60 s
SMALL = {"scenario": "chat", "gpu": ["H100", "B200"], "precision": "FP8", "mode": ["colocated", "disaggregated"],
         "tp": [1, 2], "rate_req_per_s": [10, 20]}
SIM = dict(verify="all", seeds=2, horizon_s=60.0, seed=3)


# --- catalog breadth --------------------------------------------------------------------------

def test_new_gpus_are_outside_the_default_grid():
    assert CAT.default_gpus() == ["H100", "H200", "B200"]
    for name in ("A100", "H20", "MI300X", "B300", "GB200"):
        g = CAT.gpu(name)
        assert not g.default_grid and g.source and g.price_usd_per_hour > 0
    assert "fp8" not in CAT.gpu("A100").peak_flops_per_s     # Ampere has no FP8 tensor cores
    best = screen(CHAT.model, Demand.from_scenario(CHAT)).iloc[0]
    assert (best.gpu, best.gpus) == ("B200", 2) and round(best.usd_per_million_output_tokens, 3) == 0.444


# --- the analytic table -----------------------------------------------------------------------

def test_analytic_table_matches_screen():
    df = SW.analytic_table({"scenario": "chat"})
    ref = screen(CHAT.model, Demand.from_scenario(CHAT))
    col = df[df["mode"] == "colocated"].set_index(["gpu", "precision", "tp"]).sort_index()
    rc = ref[ref["mode"] == "colocated"].set_index(["gpu", "precision", "tp"]).sort_index()
    for c in ("instance_capacity_req_per_s", "gpus", "usd_per_million_output_tokens",
              "efficiency_usd_per_million_output_tokens", "feasible", "batch"):
        np.testing.assert_array_equal(col[c].to_numpy(), rc[c].to_numpy(), err_msg=c)
    # the screen writes 0 where it sized nothing (an infeasible point); the sweep leaves the cell missing
    for c in ("instances", "chunk_tokens"):
        np.testing.assert_array_equal(col[c].fillna(0).to_numpy(np.int64), rc[c].to_numpy(np.int64), err_msg=c)
        np.testing.assert_array_equal(col[c].isna().to_numpy(), (rc[c] == 0).to_numpy(), err_msg=c)
    assert col["instances"].isna().any()
    # disaggregated: the sweep row with the TPs the screen chose has the screen's cost
    sw = SW.analytic_table({"scenario": "chat", "mode": "disaggregated", "prefill_tp": [1, 2, 4, 8],
                            "decode_tp": [1, 2, 4, 8]})
    for _, r in ref[(ref["mode"] == "disaggregated") & ref.feasible].iterrows():
        m = sw[(sw.gpu == r.gpu) & (sw.precision == r.precision) & (sw.prefill_tp == r.prefill_tp)
               & (sw.decode_tp == r.decode_tp)].iloc[0]
        assert m.usd_per_million_output_tokens == r.usd_per_million_output_tokens
        assert m.efficiency_usd_per_million_output_tokens == pytest.approx(r.efficiency_usd_per_million_output_tokens,
                                                                           rel=1e-12)


def test_axes_chunk_max_batch_price_instances():
    df = SW.analytic_table({"gpu": "B200", "precision": "FP8", "mode": "colocated", "tp": 1,
                            "chunk_tokens": ["auto", 256], "max_batch": [0, 8], "instances": ["auto", 1],
                            "price": ["catalog", 6, {"B200": 8}]})
    assert len(df) == 2 * 2 * 2 * 3
    auto = df[(df.chunk_tokens == 512) | (df.chunk_tokens > 0)]
    assert set(df.price_usd_per_gpu_hour) == {4.0, 6.0, 8.0}
    capped = df[df.max_batch == 8]
    assert (capped.batch <= 8).all() and (capped.instance_capacity_req_per_s
                                          < df[df.max_batch == 0].instance_capacity_req_per_s.max()).all()
    one = df[(df.instances == 1) & (df.max_batch == 0)]
    assert not one.feasible.any() and (one.reason == "the given instances carry less than the target rate").all()
    assert len(auto)


def test_point_ids_are_stable_and_unique():
    a = SW.analytic_table(SMALL)
    assert a.point_id.is_unique
    bigger = dict(SMALL, gpu=["H100", "H200", "B200"], rate_req_per_s=[10, 20, 40])
    b = SW.analytic_table(bigger)
    assert set(a.point_id) <= set(b.point_id)
    # same point, same analytic figures, whatever the grid around it
    m = a.merge(b, on="point_id", suffixes=("", "_b"))
    np.testing.assert_array_equal(m.usd_per_million_output_tokens, m.usd_per_million_output_tokens_b)


@pytest.mark.parametrize("axes,field", [
    ({"gpuu": ["H100"]}, "gpuu"),
    ({"gpu": []}, "gpu"),
    ({"gpu": ["X100"]}, "gpu"),
    ({"tp": [3]}, "tp"),
    ({"tp": ["two"]}, "tp"),
    ({"rate_req_per_s": [0]}, "rate_req_per_s"),
    ({"ttft_s": ["fast"]}, "ttft_s"),
    ({"chunk_tokens": [0]}, "chunk_tokens"),
    ({"max_batch": [-1]}, "max_batch"),
    ({"instances": ["many"]}, "instances"),
    ({"mode": ["pipelined"]}, "mode"),
    ({"price": [-2]}, "price"),
    ({"gpu": ["H100", "h100"]}, "gpu"),
    ({"scenario": ["chat"], "trace": ["azure-conv"]}, "trace"),
    ({"trace": ["azure-conv"], "model": ["llama-3.1-70b"], "tpot_s": [0.05]}, "ttft_s"),
])
def test_bad_grids_rejected_before_work(tmp_path, axes, field):
    out = tmp_path / "t.csv"
    with pytest.raises(FastsimInputError) as e:
        SW.run_sweep(axes, out=str(out), **SIM)
    assert field in e.value.field
    assert not out.exists()


def test_cli_bad_axis_one_line_exit_2(capsys):
    for argv, needle in ((["sweep", "--axis", "tp=3"], "axis tp"), (["sweep", "--axis", "colour=red"], "axis colour"),
                         (["sweep", "--axis", "gpu="], "axis gpu")):
        rc = main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and needle in err[0]


def test_grid_file_and_cli(tmp_path, capsys):
    g = tmp_path / "grid.toml"
    g.write_text('[axes]\ngpu = ["B200"]\nprecision = "FP8"\ntp = [1, 2]\nmode = "colocated"\n'
                 '[sweep]\nverify = "top-k-per-scenario"\ntop_k = 1\nseeds = 1\nhorizon_s = 30\n')
    out = tmp_path / "t.json"
    assert main(["sweep", str(g), "--out", str(out), "--plot", str(tmp_path / "p")]) == 0
    df = SW.read_table(str(out))
    assert len(df) == 2 and df.verified.sum() == 1
    assert sorted(os.listdir(tmp_path / "p")) == ["pareto_chat_20rps_ttft1s_tpot50ms_catalog.png"]
    out_text = capsys.readouterr().out
    assert "1 simulated" in out_text and "Pareto plots of 1 of 1 questions" in out_text


# --- verification, resume, Dask ---------------------------------------------------------------

def test_batched_verification_equals_search_verify():
    df = SW.run_sweep(dict(SMALL, mode="colocated", gpu="B200", rate_req_per_s=20), **SIM)
    r = df[df.verified].iloc[0]
    from fastsim.analytic import plan_for
    plan = plan_for(CHAT.model, Demand.from_scenario(CHAT), gpu="B200", precision="FP8", tp=int(r.tp),
                    instances=int(r.instances), chunk_tokens=int(r.chunk_tokens))
    kids = W.seeds_for(SW._workload_seed(3, "chat"), 2)
    wls = [W.synthesize(CHAT, 20.0, 60.0, k) for k in kids]
    v = verify(plan, [(w.arrival_s, w.prompt_tokens, w.output_tokens) for w in wls], SLO(1.0, 0.05), horizon_s=60.0)
    assert (r.sim_attainment, r.sim_ttft_p90_s, r.sim_tpot_p90_s, r.sim_passed) == \
        (v.attainment, v.ttft_p90_s, v.tpot_p90_s, v.passed)


@pytest.fixture(scope="module")
def local_run():
    return SW.run_sweep(SMALL, **SIM)


@pytest.mark.parametrize("ext", [".csv", ".jsonl"])
def test_interrupted_then_resumed_is_identical(tmp_path, monkeypatch, local_run, ext):
    out = str(tmp_path / ("t" + ext))
    real = SW._run_task
    calls = {"n": 0}

    def flaky(task):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(task)

    monkeypatch.setattr(SW, "_run_task", flaky)
    with pytest.raises(KeyboardInterrupt):
        SW.run_sweep(SMALL, out=out, chunk_verify=2, **SIM)
    part = SW.read_table(out)
    assert 0 < len(part) < len(local_run)
    with open(out, "a") as fh:          # a chunk cut short by the interruption
        fh.write("0123,")
    monkeypatch.setattr(SW, "_run_task", real)
    done = SW.run_sweep(SMALL, out=out, resume=True, chunk_verify=2, **SIM)
    pd.testing.assert_frame_equal(done, local_run)
    pd.testing.assert_frame_equal(SW.read_table(out), local_run)
    with pytest.raises(FastsimInputError, match="resume"):
        SW.run_sweep(SMALL, out=out, resume=True, **dict(SIM, seeds=3))


def test_parquet_roundtrip(tmp_path, local_run):
    pytest.importorskip("pyarrow")
    out = str(tmp_path / "t.parquet")
    SW.run_sweep(SMALL, out=out, chunk_verify=3, **SIM)
    pd.testing.assert_frame_equal(SW.read_table(out), local_run)


def test_dask_local_cluster_is_identical(local_run):
    pytest.importorskip("dask.distributed")
    df = SW.run_sweep(SMALL, workers=2, chunk_verify=3, **SIM)
    pd.testing.assert_frame_equal(df, local_run)


def test_seeds_do_not_depend_on_chunking(local_run):
    df = SW.run_sweep(SMALL, chunk_verify=1, max_requests_per_call=1, **SIM)
    pd.testing.assert_frame_equal(df, local_run)


# --- Pareto -----------------------------------------------------------------------------------

def test_pareto_front():
    x = np.array([1.0, 2.0, 3.0, 2.0, 1.0, np.nan, 4.0])
    y = np.array([5.0, 3.0, 1.0, 4.0, 6.0, 0.0, 1.0])
    np.testing.assert_array_equal(SW.pareto_front(x, y), [True, True, True, False, False, False, False])
    np.testing.assert_array_equal(SW.pareto_front(x, y, maximize=(True, True)),
                                  [False, False, False, True, True, False, True])


def test_capacity_column():
    df = SW.run_sweep({"gpu": "B200", "precision": "FP8", "tp": 1, "mode": "colocated"}, capacity=True,
                      capacity_tol=0.05, **dict(SIM, horizon_s=60.0))
    r = df.iloc[0]
    assert r.verified and r.sim_capacity_req_per_s > 0
    assert r.sim_capacity_ci95_lo_req_per_s <= r.sim_capacity_ci95_hi_req_per_s


# --- review fixes -----------------------------------------------------------------------------

QUESTIONS4 = {"scenario": "chat", "gpu": ["H100", "H200", "B200"], "precision": ["BF16", "FP8"], "tp": [1, 2, 4, 8],
              "mode": ["colocated", "disaggregated"], "rate_req_per_s": [10, 20, 30, 40]}


@pytest.fixture(scope="module")
def four_rates():
    return SW.run_sweep(QUESTIONS4, verify="top-k-per-scenario", top_k=5, seeds=2, horizon_s=120.0, seed=0)


def test_plots_one_figure_per_question_with_its_own_answer(tmp_path, monkeypatch, four_rates):
    import matplotlib.axes
    drawn = []
    real_scatter = matplotlib.axes.Axes.scatter

    def scatter(self, x, y, *a, **kw):
        drawn.append((self, np.asarray(x, float), np.asarray(y, float), kw))
        return real_scatter(self, x, y, *a, **kw)

    monkeypatch.setattr(matplotlib.axes.Axes, "scatter", scatter)
    paths = SW.plot_sweep(four_rates, str(tmp_path))
    assert [os.path.basename(p) for p in paths] == [f"pareto_chat_{r}rps_ttft1s_tpot50ms_catalog.png"
                                                    for r in (10, 20, 30, 40)]
    by_fig = {}
    for ax, x, y, kw in drawn:
        by_fig.setdefault(id(ax.figure), []).append((ax, x, y, kw))
    assert len(by_fig) == 4
    rate20 = list(by_fig.values())[1]
    g = four_rates[four_rates.rate_req_per_s == 20]
    # the circled plan of the rate-20 figure is that question's answer, $0.444 (not $0.30 of rate 30)
    chosen = [(ax, x, y) for ax, x, y, kw in rate20 if kw.get("facecolors") == "none"]
    assert len(chosen) == 3 and round(float(chosen[0][2][0]), 3) == 0.444
    # only the points of that question are drawn; cost-axis values all belong to it
    costs = np.concatenate([y for ax, x, y, kw in rate20 if ax is chosen[0][0]])
    assert set(np.round(costs, 9)) <= set(np.round(g.usd_per_million_output_tokens, 9))
    # latency axes are logarithmic
    assert chosen[0][0].get_xscale() == "log" and chosen[1][0].get_xscale() == "log"
    # failing points are drawn apart: grey crosses, never circled
    fail = four_rates[four_rates.verified & ~four_rates.sim_passed]
    assert len(fail)
    crosses = [x for ax, x, y, kw in drawn if kw.get("marker") == "x"]
    assert sum(len(x) for x in crosses) == 3 * len(fail)
    assert all(kw.get("marker") != "x" or kw.get("color") == "0.55" for ax, x, y, kw in drawn)


def test_plots_are_capped(tmp_path, four_rates, capsys):
    paths = SW.plot_sweep(four_rates, str(tmp_path / "two"), max_plots=2)
    assert len(paths) == 2 and len(os.listdir(tmp_path / "two")) == 2
    assert len(SW.questions(four_rates)) == 4
    rc = main(["sweep", "--axis", "gpu=B200", "--axis", "precision=FP8", "--axis", "tp=1",
               "--axis", "rate_req_per_s=1,2,3,4,5", "--plot", str(tmp_path / "cap"), "--plot-max", "3"])
    assert rc == 0 and len(os.listdir(tmp_path / "cap")) == 3
    assert "Pareto plots of 3 of 5 questions" in capsys.readouterr().out


@pytest.mark.parametrize("axis", ["tp", "prefill_tp", "decode_tp", "chunk_tokens", "max_batch", "instances",
                                  "prefill_instances", "decode_instances", "rate_req_per_s", "ttft_s", "tpot_s",
                                  "price"])
@pytest.mark.parametrize("value", [True, False])
def test_booleans_rejected_on_every_numeric_axis(axis, value):
    with pytest.raises(FastsimInputError) as e:
        SW.make_grid({axis: [value]})
    assert f"axis {axis}" in e.value.field


@pytest.mark.parametrize("key,value", [("horizon_s", True), ("tpot_margin", True), ("ttft_tail", True),
                                       ("capacity_tol", True), ("chunk_tokens", [True]), ("chunk_tokens", 512),
                                       ("capacity", "yes")])
def test_booleans_and_wrong_types_rejected_in_settings(tmp_path, key, value, capsys):
    with pytest.raises(FastsimInputError) as e:
        SW.run_sweep({"gpu": "B200", "tp": 1}, **{key: value})
    assert key in e.value.field
    g = tmp_path / "g.json"
    import json
    g.write_text(json.dumps({"axes": {"gpu": "B200", "tp": 1}, "sweep": {key: value}}))
    assert main(["sweep", str(g)]) == 2
    assert key in capsys.readouterr().err


def test_stdout_json_is_an_array_at_full_precision(capsys):
    import json
    axes = {"gpu": "B200", "precision": "FP8", "tp": [1, 2]}
    assert main(["sweep", "--axis", "gpu=B200", "--axis", "precision=FP8", "--axis", "tp=1,2",
                 "--format", "json"]) == 0
    recs = json.loads(capsys.readouterr().out)["rows"]
    df = SW.run_sweep(axes)
    assert isinstance(recs, list) and len(recs) == len(df) == 4
    for rec, (_, r) in zip(recs, df.iterrows()):
        assert rec["capacity_req_per_s"] == r.capacity_req_per_s            # exact, not 10 digits
        assert rec["analytic_tpot_s"] == r.analytic_tpot_s
        if r["mode"] == "colocated":
            assert rec["prefill_tp"] is None and rec["tp"] == r.tp
        else:
            assert rec["tp"] is None and rec["instances"] is None and rec["prefill_instances"] >= 1
        assert rec["sim_attainment"] is None                               # NaN -> null (standard JSON)


def test_every_accepted_sweep_setting_is_documented():
    keys = {f.name for f in __import__("dataclasses").fields(SW.SweepSettings)} - {"constants"}
    doc = open(os.path.join(os.path.dirname(__file__), "..", "docs", "SWEEPS.md"), encoding="utf-8").read()
    section = doc[doc.index("[sweep]"):doc.index("## The table")]
    for k in keys:
        assert f"`{k}`" in section or f"\n{k} =" in section, k


def test_missing_values_not_zeros(tmp_path, local_run):
    df = SW.analytic_table(SMALL)
    col, dis = df[df["mode"] == "colocated"], df[df["mode"] == "disaggregated"]
    for c in ("prefill_tp", "decode_tp", "prefill_instances", "decode_instances"):
        assert str(df[c].dtype) == "Int64" and col[c].isna().all() and dis[c].notna().all()
    for c in ("tp", "instances", "chunk_tokens"):
        assert str(df[c].dtype) == "Int64" and dis[c].isna().all() and col[c].notna().all()
    assert col.prefill_capacity_req_per_s.isna().all() and col.decode_capacity_req_per_s.isna().all()
    # means are not pulled down by rows the column does not apply to
    assert df.prefill_tp.mean() == dis.prefill_tp.mean() >= 1
    # round trips in every format, and the CSV has empty cells
    for ext in (".csv", ".jsonl") + ((".parquet",) if _has_pyarrow() else ()):
        out = str(tmp_path / ("t" + ext))
        SW.run_sweep(SMALL, out=out, chunk_verify=5, **SIM)
        pd.testing.assert_frame_equal(SW.read_table(out), local_run)
    import csv
    import json
    with open(tmp_path / "t.csv") as fh:
        row = next(r for r in csv.DictReader(fh) if r["mode"] == "colocated")
    assert row["prefill_tp"] == "" and row["decode_instances"] == ""
    # a file written before (zeros in those columns) is not resumed into a mixed table
    meta = tmp_path / "t.csv.sweep.json"
    old = json.loads(meta.read_text())
    del old["table_version"]
    meta.write_text(json.dumps(old))
    with pytest.raises(FastsimInputError, match="table version 1"):
        SW.run_sweep(SMALL, out=str(tmp_path / "t.csv"), resume=True, **SIM)


def _has_pyarrow():
    try:
        import pyarrow  # noqa: F401
        return True
    except ImportError:
        return False


def test_cli_interrupt_exits_130_and_resumes_to_the_same_table(tmp_path, monkeypatch, capsys, local_run):
    """Ctrl-C mid-sweep (simulated after the first chunk): one-line message, exit 130, no traceback;
    the partial output resumes to the table of an uninterrupted run (tqdm bar on)."""
    import functools
    out = str(tmp_path / "t.csv")
    argv = ["sweep", "--axis", "scenario=chat", "--axis", "gpu=H100,B200", "--axis", "precision=FP8",
            "--axis", "mode=colocated,disaggregated", "--axis", "tp=1,2", "--axis", "rate_req_per_s=10,20",
            "--verify", "all", "--seeds", "2", "--horizon", "60", "--seed", "3", "--out", out]
    real_sweep, real_task = SW.run_sweep, SW._run_task
    monkeypatch.setattr(SW, "run_sweep", functools.partial(real_sweep, chunk_verify=2, progress=True))
    calls = {"n": 0}

    def flaky(task):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real_task(task)

    monkeypatch.setattr(SW, "_run_task", flaky)
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert "interrupted; rerun with --resume" in err and "Traceback" not in err
    part = SW.read_table(out)
    assert 0 < len(part) < len(local_run)
    monkeypatch.setattr(SW, "_run_task", real_task)
    assert main(argv + ["--resume"]) == 0
    pd.testing.assert_frame_equal(SW.read_table(out), local_run)


def test_interrupt_with_dask_propagates_and_resumes(tmp_path, monkeypatch, local_run):
    """A Ctrl-C in the client while Dask runs chunks comes out as KeyboardInterrupt (not wrapped by
    Dask), the cluster is shut down, and the output resumes to the same table."""
    pytest.importorskip("dask.distributed")
    out = str(tmp_path / "t.jsonl")
    real = SW._write_chunk
    calls = {"n": 0}

    def flaky(*a):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*a)

    monkeypatch.setattr(SW, "_write_chunk", flaky)
    with pytest.raises(KeyboardInterrupt):
        SW.run_sweep(SMALL, out=out, workers=2, chunk_verify=2, **SIM)
    monkeypatch.setattr(SW, "_write_chunk", real)
    assert 0 < len(SW.read_table(out)) < len(local_run)
    done = SW.run_sweep(SMALL, out=out, resume=True, chunk_verify=2, **SIM)
    pd.testing.assert_frame_equal(done, local_run)


def test_expert_parallel_layout_on_a_dense_model_is_refused_at_every_tp():
    """At TP1 the EP layouts' degrees are plain TP's; named on a dense model they are still refused
    (as ``fastsim simulate --layout`` refuses them), not priced as the plain-TP plan."""
    df = SW.analytic_table(SW.make_grid({"model": "llama-3.1-70b", "gpu": "H100", "precision": "FP8",
                                         "mode": "colocated", "tp": [1, 2], "layout": ["tp", "tp+ep", "dp+ep"],
                                         "scenario": "chat"}))
    ep = df.layout != "tp"
    assert ep.sum() == 4 and not df.feasible[ep].any() and df.feasible[~ep].all()
    assert df.reason[ep].str.contains("expert parallelism on a dense model").all()
    assert set(df.tp[ep]) == {1, 2}


def test_sweep_help_lists_every_axis(capsys):
    """``fastsim sweep --help`` names every axis a grid takes (it had left ``layout`` out)."""
    import re

    from fastsim.cli import main
    from fastsim.sweep.grid import AXES
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    listed = re.search(r"overrides the file's\): (.*?)(?: --format| -)", text).group(1)
    assert [a.strip() for a in listed.split(",")] == list(AXES)


def test_named_expert_parallel_layout_on_a_dense_model_is_refused_by_plan_for_and_ledger(capsys):
    """One rule (``stepmodel.layout_refusal``) wherever a layout name is resolved: at TP1 too."""
    from fastsim.analytic import Demand, plan_for
    from fastsim.catalog import default_catalog
    from fastsim.cli import main
    from fastsim.errors import FastsimInputError
    from fastsim.stepmodel import layout_refusal
    cat = default_catalog()
    dense, moe, h100 = cat.model("llama-3.1-70b"), cat.model("qwen3-30b-a3b"), cat.gpu("H100")
    assert "is dense" in layout_refusal(dense, h100, "tp+ep", 1)
    assert layout_refusal(dense, h100, "tp", 1) is None and layout_refusal(moe, h100, "tp+ep", 1) is None
    s = cat.scenario("chat")
    with pytest.raises(FastsimInputError) as e:
        plan_for(s.model, Demand.from_scenario(s), gpu="H100", precision="FP8", tp=1, layout="dp+ep")
    assert e.value.field == "layout" and "is dense" in e.value.allowed
    rc = main(["ledger", "--model", "llama-3.1-70b", "--gpu", "H100", "--precision", "FP8", "--tp", "1",
               "--layout", "tp+ep"])
    assert rc == 2 and "is dense" in capsys.readouterr().err


def test_infeasible_rows_show_their_points_chunk_and_counts():
    """Rows of infeasible points differ in the axes the grid gave (they showed 0 and looked alike);
    on auto, where nothing was sized, the cell is missing and JSON says why."""
    axes = {"scenario": "chat", "gpu": "H100", "precision": "BF16", "tp": [1, 2], "instances": [1, 2],
            "chunk_tokens": [256, 512]}
    df = SW.analytic_table(axes)
    nofit = df[(df["mode"] == "colocated") & (df["tp"] == 1)]      # 70B BF16 does not fit one H100
    assert not nofit["feasible"].any()
    assert sorted(zip(nofit["instances"], nofit["chunk_tokens"])) == [(1, 256), (1, 512), (2, 256), (2, 512)]
    dis = df[(df["mode"] == "disaggregated") & (df["prefill_tp"] == 1)]
    assert not dis["feasible"].any()
    assert sorted(zip(dis["prefill_instances"], dis["decode_instances"])) == [(1, 1), (2, 2)]
    auto = SW.analytic_table({k: v for k, v in axes.items() if k not in ("instances", "chunk_tokens")})
    bad = auto[(auto["mode"] == "colocated") & ~auto["feasible"]]
    assert len(bad) and bad["instances"].isna().all() and bad["chunk_tokens"].isna().all()
    good = auto[auto["feasible"]]
    gc, gd = good[good["mode"] == "colocated"], good[good["mode"] == "disaggregated"]
    assert len(gc) and (gc["instances"] > 0).all() and (gc["chunk_tokens"] > 0).all()
    assert len(gd) and (gd["prefill_instances"] > 0).all() and (gd["decode_instances"] > 0).all()
    from fastsim.sweep.storage import _json_records
    rec = _json_records(bad.head(1))[0]
    assert rec["instances"] is None and rec["null_reasons"]["instances"].startswith("not applicable: the configuration is infeasible")


def test_capacity_search_applies_the_points_batch_cap():
    """--capacity searched the uncapped plan: a max_batch=8 row reported the max_batch=0 row's rate."""
    from fastsim.analytic import Plan
    from fastsim.search import sim_plan
    base = dict(model="llama-3.1-70b", gpu="B200", precision="FP8", tp=1, instances=2, chunk_tokens=512)
    assert sim_plan(Plan(mode="colocated", max_batch=8, **base)).max_batch == 8
    dis = Plan(mode="disaggregated", prefill_tp=1, prefill_instances=1, decode_tp=1, decode_instances=1,
               max_batch=8, **dict(base, chunk_tokens=0))
    assert sim_plan(dis).decode_max_batch == 8
    assert "max_batch" not in Plan(mode="colocated", **base).to_dict()
    df = SW.run_sweep({"gpu": "B200", "precision": "FP8", "tp": 1, "instances": 2, "max_batch": [0, 8],
                       "rate_req_per_s": 4, "mode": ["colocated", "disaggregated"]},
                      verify="all", seeds=2, horizon_s=60.0, seed=3, capacity=True)
    for mode in ("colocated", "disaggregated"):
        rows = df[df["mode"] == mode].set_index("max_batch")
        assert rows.loc[8, "sim_capacity_req_per_s"] < 0.25 * rows.loc[0, "sim_capacity_req_per_s"], mode


# --- the analytic table prices the requests the simulator serves (within the model's context) ----

_HEAVY = '''
[scenarios.sig3]
model = "llama-3.1-70b"
prompt = { kind = "lognormal", mean = 2000, sigma = 3.0 }
output = { kind = "lognormal", mean = 250, sigma = 0.8 }
ttft_s = 2.0
tpot_s = 0.05
rate_req_per_s = 10

[scenarios.long]
model = "llama-3.1-8b"
prompt = { kind = "lognormal", mean = 150000, sigma = 1.0 }
output = { kind = "lognormal", mean = 400, sigma = 1.0 }
ttft_s = 2.0
tpot_s = 0.05
rate_req_per_s = 10
'''
_NEMO = ('{"architectures":["NemotronForCausalLM"],"model_type":"nemotron","hidden_size":4096,'
         '"intermediate_size":16384,"num_attention_heads":32,"num_key_value_heads":8,"num_hidden_layers":32,'
         '"vocab_size":256000,"max_position_embeddings":4096,"tie_word_embeddings":false,"hidden_act":"relu2",'
         '"head_dim":128,"torch_dtype":"bfloat16"}')


def _colocated_equal(df, ref):
    key = ["gpu", "precision", "tp", "layout"]
    col = df[df["mode"] == "colocated"].set_index(key).sort_index()
    rc = ref[(ref["mode"] == "colocated") & ref.layout.isin(set(df.layout))].set_index(key).sort_index()
    assert len(col) == len(rc) > 0
    for c in ("instance_capacity_req_per_s", "usd_per_million_output_tokens",
              "efficiency_usd_per_million_output_tokens", "feasible", "batch", "reason"):
        np.testing.assert_array_equal(col[c].to_numpy(), rc[c].to_numpy(), err_msg=c)
    ok = rc.feasible.to_numpy()
    for c in ("gpus", "instances", "capacity_req_per_s", "chunk_tokens"):
        np.testing.assert_array_equal(col[c].to_numpy()[ok].astype(rc[c].dtype), rc[c].to_numpy()[ok], err_msg=c)


@pytest.mark.parametrize("case", ["heavy", "short_context", "moe"])
def test_colocated_rows_equal_the_screen_within_the_models_context(case, tmp_path):
    """The sweep truncates a scenario's lengths at the model's context (Demand.within_context) and
    sizes for the served rate, as the screen does: a heavy-tailed prompt was sized at 143 instances
    where the screen sized 1; a 4,096-token model and qwen3-30b-a3b differed in their capacities."""
    from fastsim.catalog import load_catalog
    cat_file = tmp_path / "heavy.toml"
    cat_file.write_text(_HEAVY)
    cat = load_catalog([str(cat_file)])
    axes = {"gpu": ["B200", "H100"], "precision": "FP8", "tp": [1, 2], "mode": "colocated"}
    if case == "heavy":
        axes["scenario"], model, sc = "sig3", "llama-3.1-70b", cat.scenario("sig3")
    elif case == "short_context":
        cfg = tmp_path / "nemo" / "config.json"
        cfg.parent.mkdir()
        cfg.write_text(_NEMO)
        axes.update(scenario="chat", model=str(cfg))
        model, sc = str(cfg), cat.scenario("chat")
    else:
        axes.update(scenario="chat", model="qwen3-30b-a3b")
        model, sc = "qwen3-30b-a3b", cat.scenario("chat")
    d = Demand.from_scenario(sc)
    m = cat.model(model)
    assert d.within_context(m.max_context_tokens).served_fraction < 1.0      # the truncation binds
    df = SW.analytic_table(axes, catalog=cat)
    from fastsim.analytic import ScreenOptions
    ref = screen(m, d, catalog=cat, options=ScreenOptions(gpus=("B200", "H100"), precisions=("FP8",), tps=(1, 2),
                                                          modes=("colocated",)))
    _colocated_equal(df, ref)
    served = d.within_context(m.max_context_tokens)
    assert (df.mean_output_tokens == served.mean_output_tokens).all()
    if case == "heavy":
        assert df[df.feasible].instances.min() == 1


def test_a_workload_mostly_beyond_the_context_is_infeasible_with_the_screens_reason(tmp_path):
    from fastsim.catalog import load_catalog
    from fastsim.analytic import ScreenOptions
    cat_file = tmp_path / "heavy.toml"
    cat_file.write_text(_HEAVY)
    cat = load_catalog([str(cat_file)])
    df = SW.analytic_table({"scenario": "long", "gpu": "B200", "precision": "FP8", "tp": [1, 2],
                            "mode": "colocated"}, catalog=cat)
    ref = screen("llama-3.1-8b", Demand.from_scenario(cat.scenario("long")), catalog=cat,
                 options=ScreenOptions(gpus=("B200",), precisions=("FP8",), tps=(1, 2), modes=("colocated",)))
    assert not df.feasible.any() and not ref.feasible.any()
    assert set(df.reason) == set(ref.reason) and len(set(df.reason)) == 1
    assert "context" in df.reason.iloc[0]
    assert (df.gpus == 0).all() and np.isinf(df.usd_per_million_output_tokens).all()


def test_a_grid_files_relative_model_and_trace_paths_are_the_files(tmp_path, monkeypatch):
    """``model = ["../nemo/config.json"]`` in grids/g.toml names tmp/nemo/config.json wherever the
    sweep runs from (it was resolved against the working directory); so does a relative trace."""
    (tmp_path / "nemo").mkdir()
    (tmp_path / "nemo" / "config.json").write_text(_NEMO)
    (tmp_path / "grids").mkdir()
    g = tmp_path / "grids" / "g.toml"
    g.write_text('[axes]\nmodel = ["../nemo/config.json", "llama-3.1-8b"]\ngpu = "B200"\nprecision = "FP8"\n'
                 'tp = 1\nmode = "colocated"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    axes, _ = SW.load_grid(str(g))
    assert axes["model"] == [str(tmp_path / "nemo" / "config.json"), "llama-3.1-8b"]
    df = SW.analytic_table(axes)
    assert len(df) == 2
    g.write_text('[axes]\ntrace = "../traces/t.csv"\nttft_s = 1\ntpot_s = 0.05\n')
    assert SW.load_grid(str(g))[0]["trace"] == str(tmp_path / "traces" / "t.csv")
    g.write_text('[axes]\ntrace = ["azure-conv", "/abs/t.csv"]\nmodel = "llama-3.1-8b"\n')
    assert SW.load_grid(str(g))[0] == {"trace": ["azure-conv", "/abs/t.csv"], "model": "llama-3.1-8b"}
    # on the command line a relative path stays the working directory's
    monkeypatch.chdir(tmp_path / "grids")
    assert main(["sweep", "--axis", "model=nemo/config.json", "--axis", "gpu=B200", "--axis", "precision=FP8",
                 "--axis", "tp=1", "--axis", "mode=colocated", "--format", "csv"]) == 2
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", "--axis", "model=nemo/config.json", "--axis", "gpu=B200", "--axis", "precision=FP8",
                 "--axis", "tp=1", "--axis", "mode=colocated", "--format", "csv"]) == 0
