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
    for c in ("instance_capacity_req_per_s", "instances", "gpus", "usd_per_million_output_tokens",
              "efficiency_usd_per_million_output_tokens", "feasible", "chunk_tokens", "batch"):
        np.testing.assert_array_equal(col[c].to_numpy(), rc[c].to_numpy(), err_msg=c)
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
    assert sorted(os.listdir(tmp_path / "p")) == ["cost_vs_tpot_chat.png", "cost_vs_ttft_chat.png",
                                                  "throughput_chat.png"]
    assert "1 simulated" in capsys.readouterr().out


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
