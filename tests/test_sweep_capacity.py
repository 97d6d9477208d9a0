"""``sweep --capacity``: chunks that keep a capacity family together, the search's cost in the table,
and the searches distributed over Dask workers (a LocalCluster, and its address as --scheduler)."""
import json

import numpy as np
import pandas as pd
import pytest

from fastsim import sweep as SW
from fastsim.sweep.run import _chunks, _family_last

from cliutil import run

# chat on B200 FP8, TP 1 and 2 at 1-4 instances: two capacity families of up to four plans
AXES = {"scenario": "chat", "gpu": "B200", "precision": "FP8", "mode": "colocated", "tp": [1, 2],
        "instances": [1, 2, 3, 4]}
CAP = dict(verify="all", seeds=8, horizon_s=120.0, seed=1, capacity=True, capacity_tol=0.02)


@pytest.fixture(scope="module")
def local():
    return SW.run_sweep(AXES, chunk_verify=3, **CAP)


def test_chunks_close_only_between_families():
    grid = SW.make_grid(AXES)
    table = SW.analytic_table(grid)
    sel = table["feasible"].to_numpy()
    todo = np.arange(len(table))
    fam = table.groupby(["tp"]).ngroup().to_numpy()         # the families of this grid: one per TP
    plain = _chunks(todo, sel, 20_000, 3)
    assert [int(sel[c].sum()) for c in plain][:2] == [3, 3]
    assert any(len(set(fam[c][sel[c]])) > 1 for c in plain) or any(
        set(fam[a][sel[a]]) & set(fam[b][sel[b]]) for a, b in zip(plain, plain[1:]))
    kept = _chunks(todo, sel, 20_000, 3, _family_last(table, todo, sel))
    assert np.array_equal(np.concatenate(kept), todo)
    seen = [set(fam[c][sel[c]]) for c in kept]
    assert all(not (a & b) for i, a in enumerate(seen) for b in seen[i + 1:])      # no family in two chunks
    # a family larger than 4 x chunk_verify points to simulate is still cut
    big = _chunks(todo, sel, 20_000, 1, _family_last(table, todo, sel))
    assert max(int(sel[c].sum()) for c in big) <= 4


def test_capacity_columns_count_the_searches_probes_and_runs(local):
    sim = local[local["verified"]]
    assert len(sim) >= 6 and (sim["sim_capacity_req_per_s"] > 0).all()
    assert (sim["sim_capacity_probes"] >= 2).all()
    # every probe runs at least its first stage (4 seeds), at most its 8 seeds and the runs stopped
    # early that were simulated again
    assert (sim["sim_capacity_seed_runs"] >= 4 * sim["sim_capacity_probes"]).all()
    assert (sim["sim_capacity_stopped_runs"] <= sim["sim_capacity_seed_runs"]).all()
    assert sim["sim_capacity_stopped_runs"].sum() > 0
    rest = local[~local["verified"]]
    assert (rest[["sim_capacity_probes", "sim_capacity_seed_runs", "sim_capacity_stopped_runs"]] == 0).all().all()


def test_capacity_over_a_local_dask_cluster_is_the_local_run(local):
    pytest.importorskip("dask.distributed")
    df = SW.run_sweep(AXES, workers=2, chunk_verify=3, **CAP)
    pd.testing.assert_frame_equal(df, local)


def test_capacity_with_scheduler_address_of_a_running_cluster(capsys, local):
    distributed = pytest.importorskip("dask.distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
    try:
        args = ["sweep", "--format", "json", "--verify", "all", "--capacity", "--seeds", "8", "--horizon", "120",
                "--seed", "1", "--scheduler", cluster.scheduler_address]
        for name, v in AXES.items():
            args += ["--axis", f"{name}={','.join(str(x) for x in v) if isinstance(v, list) else v}"]
        rc, out, _ = run(capsys, *args)
    finally:
        cluster.close()
    assert rc == 0
    got = pd.DataFrame(json.loads(out)["rows"])
    ref = SW.run_sweep(AXES, **CAP)            # the command's chunks (chunk_verify 128), in this process
    assert list(got["point_id"]) == list(ref["point_id"])
    for c in ("sim_capacity_req_per_s", "sim_capacity_probes", "sim_capacity_seed_runs", "sim_capacity_stopped_runs"):
        np.testing.assert_array_equal(got[c].to_numpy(dtype=float), ref[c].to_numpy(dtype=float))


def test_table_cell_says_what_each_search_cost(capsys):
    rc, out, _ = run(capsys, "sweep", "--verify", "all", "--capacity", "--seeds", "8", "--horizon", "120",
                     "--axis", "scenario=chat", "--axis", "gpu=B200", "--axis", "precision=FP8",
                     "--axis", "mode=colocated", "--axis", "tp=1", "--axis", "instances=2,3")
    assert rc == 0
    lines = [line for line in out.splitlines() if line.startswith("chat ")]
    assert len(lines) == 2 and all("p/" in line and "r/" in line and line.rstrip().endswith("s]") for line in lines)
    assert "note: sim max req/s [Np/Mr/Ks]: the capacity search took N probes and M seed-runs" in out
