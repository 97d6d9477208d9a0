"""Sweep grids list each plan once: an axis no point of the grid uses is not multiplied in.

A disaggregated plan uses ``prefill_tp`` and ``decode_tp`` (``tp`` only for a side not given), a
colocated plan ``tp`` (never ``prefill_tp`` / ``decode_tp``). Before, a grid of disaggregated
points with both sides given repeated every plan once per default TP under distinct point ids, and
a grid of both modes repeated its colocated points per ``prefill_tp`` / ``decode_tp`` /
``*_instances`` value and its disaggregated ones per ``chunk_tokens`` value (and ``tp`` /
``instances`` value where both sides are given).
"""
import csv
import io
import itertools
import json

import numpy as np
import pandas as pd
import pytest

from fastsim import sweep as SW
from fastsim.cli import main
from fastsim.errors import FastsimInputError
from fastsim.sweep.table import TABLE_VERSION

from cliutil import run

BASE = {"scenario": "chat", "gpu": "B200", "precision": "FP8"}
DIS = dict(BASE, mode="disaggregated", prefill_tp=[1, 2], decode_tp=[1, 2, 4])
# axes of a plan, as the table shows them
PLAN = ["model", "gpu", "precision", "mode", "tp", "prefill_tp", "decode_tp", "layout", "chunk_tokens", "max_batch",
        "instances", "prefill_instances", "decode_instances", "workload", "rate_req_per_s", "ttft_s", "tpot_s",
        "price"]


def _plans(df):
    """The plans of a table as tuples of strings (missing cells as ``<NA>``)."""
    return list(df[PLAN].astype(str).itertuples(index=False, name=None))


def test_disaggregated_grid_with_both_sides_lists_each_plan_once():
    grid = SW.make_grid(DIS)
    assert grid.n_points == 2 * 3 and grid.axes["tp"] == (0,)
    assert grid.describe() == {"scenario": ["chat"], "gpu": ["B200"], "precision": ["FP8"],
                               "mode": ["disaggregated"], "prefill_tp": [1, 2], "decode_tp": [1, 2, 4]}
    df = SW.analytic_table(grid)
    assert len(df) == 6                                                    # was 24: 4 default TPs x 6
    assert set(zip(df.prefill_tp, df.decode_tp)) == set(itertools.product([1, 2], [1, 2, 4]))
    assert len(set(_plans(df))) == 6 and df.point_id.is_unique
    assert df.tp.isna().all() and (df["mode"] == "disaggregated").all()   # tp: not applicable, as before
    assert df.point.tolist() == list(range(6))
    # GPUs and cost come from the two sides only
    assert (df.gpus == df.prefill_tp * df.prefill_instances + df.decode_tp * df.decode_instances).all()


def test_each_plan_keeps_the_figures_it_had():
    """The row left equals each of the copies of before (they were the same plan); here the
    disaggregated rows of a grid of both modes, which list each plan once too (were 4 x 6: one
    copy per default TP, which they do not use), with the one-mode grid's figures and ids."""
    new = SW.analytic_table(DIS)
    both = SW.analytic_table(dict(DIS, mode=["colocated", "disaggregated"]))
    old = both[both["mode"] == "disaggregated"]
    assert len(old) == 6 and len(both) == 4 + 6
    figures = ["point_id", "gpus", "prefill_instances", "decode_instances", "capacity_req_per_s",
               "usd_per_million_output_tokens", "efficiency_usd_per_million_output_tokens", "analytic_ttft_s",
               "analytic_tpot_s", "feasible", "reason"]
    for _, r in new.iterrows():
        copies = old[(old.prefill_tp == r.prefill_tp) & (old.decode_tp == r.decode_tp)]
        assert len(copies) == 1
        for c in figures:
            assert (copies[c] == r[c]).all(), c


def test_point_ids_are_stable_and_shared_by_grids_holding_the_plan():
    a = SW.analytic_table(DIS)
    b = SW.analytic_table(dict(DIS, decode_tp=[4, 2, 1], prefill_tp=[2, 1]))    # other order
    wider = SW.analytic_table(dict(DIS, gpu=["H100", "B200"]))
    assert len(wider) == 12 and wider.point_id.is_unique
    key = ["prefill_tp", "decode_tp"]
    ids_a = dict(zip(map(tuple, a[key].to_numpy().tolist()), a.point_id))
    ids_b = dict(zip(map(tuple, b[key].to_numpy().tolist()), b.point_id))
    w = wider[wider.gpu == "B200"]
    ids_w = dict(zip(map(tuple, w[key].to_numpy().tolist()), w.point_id))
    assert ids_a == ids_b == ids_w and len(set(ids_a.values())) == 6
    assert SW.analytic_table(DIS).point_id.tolist() == a.point_id.tolist()


def test_run_sweep_verifies_each_plan_once():
    df = SW.run_sweep(dict(DIS, decode_tp=[1, 2]), verify="all", seeds=1, horizon_s=20.0, seed=1)
    assert len(df) == 4 and df.point_id.is_unique
    assert int(df.verified.sum()) == int(df.feasible.sum()) >= 1
    assert int(df.sim_runs.sum()) == int(df.verified.sum())               # one seed per plan, no repeat


def test_cli_lists_each_disaggregated_plan_once(capsys):
    rc, out, _ = run(capsys, "sweep", "--axis", "gpu=B200", "--axis", "precision=FP8", "--axis", "mode=disaggregated",
                     "--axis", "prefill_tp=1,2", "--axis", "decode_tp=1,2", "--format", "csv")
    assert rc == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 4                                                  # was 16
    assert {(r["prefill_tp"], r["decode_tp"]) for r in rows} == {("1", "1"), ("1", "2"), ("2", "1"), ("2", "2")}
    assert all(r["tp"] == "" for r in rows) and len({r["point_id"] for r in rows}) == 4
    rc, out, _ = run(capsys, "sweep", "--axis", "gpu=B200", "--axis", "precision=FP8", "--axis", "mode=disaggregated",
                     "--axis", "prefill_tp=1,2", "--axis", "decode_tp=1,2")
    assert rc == 0 and out.startswith("4 points: ")


def test_a_side_not_given_still_takes_tp():
    """With one side given, tp is the other side's TP: every (tp, side) pair is a distinct plan."""
    df = SW.analytic_table(dict(BASE, mode="disaggregated", tp=[1, 2, 4], prefill_tp=[1, 2]))
    assert len(df) == 6 and len(set(_plans(df))) == 6
    assert set(zip(df.prefill_tp, df.decode_tp)) == set(itertools.product([1, 2], [1, 2, 4]))
    df = SW.analytic_table(dict(BASE, mode="disaggregated", instances=[1, 2], prefill_instances=[1]))
    assert len(df) == 4 * 2 and set(df.decode_instances) == {1, 2} and set(df.prefill_instances) == {1}


def test_colocated_grid_is_unchanged():
    df = SW.analytic_table(dict(BASE, mode="colocated"))
    assert len(df) == 4 and df.tp.tolist() == [1, 2, 4, 8] and df.prefill_tp.isna().all()


@pytest.mark.parametrize("axes,field,values", [
    (dict(BASE, mode="colocated", prefill_tp=[2, 4]), "axis prefill_tp", [2, 4]),
    (dict(BASE, mode="colocated", decode_tp=8), "axis decode_tp", [8]),
    (dict(BASE, mode="colocated", prefill_instances=[1, 2]), "axis prefill_instances", [1, 2]),
    (dict(BASE, mode="colocated", decode_instances="auto"), "axis decode_instances", ["auto"]),
    (dict(DIS, tp=[1, 2]), "axis tp", [1, 2]),
    (dict(DIS, tp=1), "axis tp", [1]),
    (dict(BASE, mode="disaggregated", chunk_tokens=["auto", 512]), "axis chunk_tokens", ["auto", 512]),
    (dict(BASE, mode="disaggregated", instances=[1, 2], prefill_instances=1, decode_instances=2), "axis instances",
     [1, 2]),
])
def test_an_axis_no_point_uses_is_an_error(axes, field, values):
    with pytest.raises(FastsimInputError) as e:
        SW.make_grid(axes)
    assert e.value.field == field and e.value.value == values
    assert "mode axis" in e.value.allowed and "drop this axis" in e.value.allowed


def test_cli_refuses_an_axis_no_point_uses(capsys, tmp_path):
    rc, _, err = run(capsys, "sweep", "--axis", "gpu=B200", "--axis", "mode=colocated", "--axis", "prefill_tp=2,4")
    assert rc == 2 and "axis prefill_tp: got [2, 4]" in err and "colocated points only" in err
    # a grid file's tp, with the mode narrowed on the command line
    g = tmp_path / "g.toml"
    g.write_text('[axes]\ngpu = "B200"\ntp = [1, 2]\nprefill_tp = [1, 2]\ndecode_tp = [1, 2]\n')
    assert main(["sweep", str(g)]) == 0
    capsys.readouterr()
    rc, _, err = run(capsys, "sweep", str(g), "--axis", "mode=disaggregated")
    assert rc == 2 and "axis tp: got [1, 2]" in err and "both prefill_tp and decode_tp" in err


def test_grid_of_both_modes_lists_each_plan_once():
    df = SW.analytic_table(dict(BASE, prefill_tp=[1, 2], decode_tp=[1, 2]))
    assert len(df) == 4 + 4 and len(set(_plans(df))) == len(df)


# ---------------------------------------------------------------------------------------------
# Grids of both modes
# ---------------------------------------------------------------------------------------------

# chunk sizes and instance counts given as numbers, and a TPOT target every plan meets (an
# infeasible plan shows 0 instances), so that the table's cells name the plan
BOTH = [dict(a, tpot_s=0.5) for a in [
    dict(BASE, prefill_tp=[1, 2], decode_tp=[1, 2, 4], chunk_tokens=512, instances=2),
    dict(BASE, tp=[1, 2], chunk_tokens=[256, 1024], prefill_tp=[1, 2], instances=[3]),
    dict(BASE, tp=[1, 2, 4], chunk_tokens=[512, 2048], instances=[1, 3], prefill_instances=[1, 2],
         decode_instances=[2]),
    dict(BASE, tp=[2, 1], decode_tp=[2, 4], chunk_tokens=[2048, 256], instances=[2, 1], decode_instances=[1, 4],
         max_batch=[0, 64],
         gpu=["B200", "H100"], rate_req_per_s=[5, 20]),
    dict(BASE, tp=[1, 2], chunk_tokens=[256, 512, 1024], prefill_tp=[1, 2], decode_tp=[2, 4], instances=[1, 2],
         prefill_instances=[1, 2], decode_instances=[3, 1]),
]]
DEFAULTS = {"tp": [1, 2, 4, 8], "prefill_tp": [None], "decode_tp": [None], "chunk_tokens": ["auto"],
            "instances": ["auto"], "prefill_instances": [None], "decode_instances": [None]}
KNOBS = list(DEFAULTS)
ID_COLUMNS = [c for c, _ in SW.COLUMNS if c != "point"]


def _expected_plans(axes):
    """The distinct plans of a grid of both modes, enumerated over the full product by the rules
    of a plan (not by fastsim): a colocated plan is (tp, chunk, instances), a disaggregated one its
    two sides, each side its own axis or else tp / instances. Cells as the table shows them."""
    others = {k: v if isinstance(v, list) else [v] for k, v in axes.items() if k not in KNOBS}
    knobs = {k: (lambda v: v if isinstance(v, list) else [v])(axes.get(k, DEFAULTS[k])) for k in KNOBS}
    plans = set()
    for combo in itertools.product(["colocated", "disaggregated"], *knobs.values(), *others.values()):
        mode, tp, ptp, dtp, chunk, inst, pi, di = combo[:8]
        rest = tuple(str(x) for x in combo[8:])
        if mode == "colocated":
            plans.add((mode, str(tp), "<NA>", "<NA>", str(chunk), str(inst), "<NA>", "<NA>") + rest)
        else:
            plans.add((mode, "<NA>", str(ptp or tp), str(dtp or tp), "<NA>", "<NA>", str(pi or inst),
                       str(di or inst)) + rest)
    return plans, list(others)


def _table_plans(df, others):
    cols = ["mode", "tp", "prefill_tp", "decode_tp", "chunk_tokens", "instances", "prefill_instances",
            "decode_instances"]
    show = {c: [str(x) for x in df[c].astype(object).where(df[c].notna(), "<NA>")] for c in cols}
    rest = [df["rate_req_per_s"].map(lambda x: str(int(x)) if x == int(x) else str(x)) if c == "rate_req_per_s"
            else df["workload" if c == "scenario" else c].astype(str) for c in others]
    return list(zip(*(show[c] for c in cols), *rest))


def _counted(axes):
    """The number of distinct plans by a product per mode (the test's own count)."""
    k = {a: len(v) if isinstance(v, list) else 1 for a, v in axes.items()}
    shared = int(np.prod([n for a, n in k.items() if a not in KNOBS]))
    both_tp = "prefill_tp" in axes and "decode_tp" in axes
    both_inst = "prefill_instances" in axes and "decode_instances" in axes
    col = k.get("tp", 4) * k.get("chunk_tokens", 1) * k.get("instances", 1)
    dis = ((1 if both_tp else k.get("tp", 4)) * k.get("prefill_tp", 1) * k.get("decode_tp", 1)
           * (1 if both_inst else k.get("instances", 1)) * k.get("prefill_instances", 1) * k.get("decode_instances", 1))
    return shared * (col + dis)


@pytest.mark.parametrize("axes", BOTH)
def test_both_mode_grids_list_each_distinct_plan_once(axes):
    plans, others = _expected_plans(axes)
    grid = SW.make_grid(axes)
    assert grid.n_points == len(plans) == _counted(axes)
    full = int(np.prod(grid.shape))
    assert full > grid.n_points                                            # the product repeated plans
    df = SW.analytic_table(grid, chunk_points=7)                           # chunks cut across modes
    assert len(df) == len(plans) and df.point.tolist() == list(range(len(df)))
    got = _table_plans(df, others)
    assert len(set(got)) == len(got) and set(got) == plans
    assert df.point_id.is_unique
    pd.testing.assert_frame_equal(df, SW.analytic_table(grid))             # chunking changes nothing


def _one_mode(axes, mode):
    """The axes of the grid of one mode holding the same plans (an axis that mode does not use dropped)."""
    out = dict(axes, mode=mode)
    if mode == "colocated":
        for a in ("prefill_tp", "decode_tp", "prefill_instances", "decode_instances"):
            out.pop(a, None)
    else:
        out.pop("chunk_tokens", None)
        for a, sides in (("tp", ("prefill_tp", "decode_tp")), ("instances", ("prefill_instances", "decode_instances"))):
            if all(s in axes for s in sides):
                out.pop(a, None)
    return out


@pytest.mark.parametrize("axes", BOTH)
def test_both_mode_rows_equal_the_one_mode_grids(axes):
    """Each plan's row (id and figures) is the one a grid of its mode alone gives, in the same order."""
    df = SW.analytic_table(axes)
    for mode in ("colocated", "disaggregated"):
        one = SW.analytic_table(_one_mode(axes, mode))
        part = df[df["mode"] == mode].reset_index(drop=True)
        assert len(part) == len(one)
        pd.testing.assert_frame_equal(part[ID_COLUMNS], one[ID_COLUMNS])


def test_point_ids_ignore_the_axes_a_point_does_not_use():
    base = SW.analytic_table(dict(BASE, tp=[1, 2]))
    for more in (dict(chunk_tokens=["auto", 256]), dict(prefill_tp=[1, 4], decode_tp=[2]),
                 dict(prefill_instances=[1], decode_instances=[2, 3])):
        wider = SW.analytic_table(dict(BASE, tp=[1, 2], **more))
        assert wider.point_id.is_unique
        # the rows of a mode whose axes did not change keep their ids
        for mode, c in (("disaggregated", "chunk_tokens"), ("colocated", "prefill_tp"),
                        ("colocated", "prefill_instances")):
            if c in more:
                keep = base[base["mode"] == mode]
                got = wider[wider["mode"] == mode]
                assert got.point_id.tolist() == keep.point_id.tolist()
                pd.testing.assert_frame_equal(got[ID_COLUMNS].reset_index(drop=True),
                                              keep[ID_COLUMNS].reset_index(drop=True))
    # another order of the values: the same ids for the same plans
    a = SW.analytic_table(BOTH[4])
    b = SW.analytic_table(dict(BOTH[4], chunk_tokens=[1024, 256, 512], decode_tp=[4, 2], decode_instances=[1, 3]))
    key = lambda df: df.set_index("point_id")[ID_COLUMNS[1:]].sort_index()  # noqa: E731
    pd.testing.assert_frame_equal(key(a), key(b))


def test_limit_counts_distinct_plans():
    """The 50,000,000-point limit counts plans, not the product of the axes."""
    rates = list(range(1, 10_001))
    axes = dict(BASE, prefill_tp=[1, 2, 4, 8], decode_tp=[1, 2, 4, 8], chunk_tokens=list(range(256, 256 + 50)),
                rate_req_per_s=rates)
    grid = SW.make_grid(axes)                                              # product: 64,000,000
    assert int(np.prod(grid.shape)) == 64_000_000 > SW.MAX_POINTS
    assert grid.n_points == (4 * 50 + 16) * 10_000
    with pytest.raises(FastsimInputError) as e:
        SW.make_grid(dict(axes, rate_req_per_s=list(range(1, 300_001))))
    assert e.value.field == "grid" and e.value.value == f"{(4 * 50 + 16) * 300_000:,} points"


def test_run_sweep_of_both_modes_verifies_each_plan_once(monkeypatch):
    seen = []
    run_task = SW._run_task

    def counting(task):
        seen.extend(task.points.tolist())
        return run_task(task)

    monkeypatch.setattr(SW, "_run_task", counting)
    axes = dict(BASE, tp=[1, 2], prefill_tp=[1, 2], decode_tp=[1, 2])
    df = SW.run_sweep(axes, verify="all", seeds=1, horizon_s=20.0, seed=1, chunk_verify=3)
    assert len(df) == 2 + 4 and df.point_id.is_unique                     # was 2 x 4 + 4 x 2
    assert sorted(seen) == df.point[df.feasible].tolist() and len(seen) == len(set(seen)) >= 4
    assert int(df.verified.sum()) == int(df.feasible.sum()) and int(df.sim_runs.sum()) == len(seen)
    # each plan simulated as in a grid of its mode alone
    for mode in ("colocated", "disaggregated"):
        one = SW.run_sweep(_one_mode(axes, mode), verify="all", seeds=1, horizon_s=20.0, seed=1)
        part = df[df["mode"] == mode].reset_index(drop=True)
        pd.testing.assert_frame_equal(part[ID_COLUMNS], one[ID_COLUMNS])


def test_cli_counts_distinct_plans(capsys):
    rc, out, _ = run(capsys, "sweep", "--axis", "gpu=B200", "--axis", "precision=FP8", "--axis", "prefill_tp=1,2",
                     "--axis", "decode_tp=1,2")
    assert rc == 0 and out.startswith("8 points: ")                        # was 32: 4 x 4 + 4 x 4


def test_resume_of_a_table_of_the_previous_version_is_refused(tmp_path):
    """Ids and row sets changed with table version 4: a table written before is not resumed."""
    assert TABLE_VERSION == 4
    axes = dict(BASE, mode="colocated", tp=[1, 2])
    out = str(tmp_path / "t.csv")
    SW.run_sweep(axes, out=out)
    meta = json.loads(open(out + ".sweep.json").read())
    assert meta["table_version"] == 4
    meta["table_version"] = 3
    with open(out + ".sweep.json", "w") as fh:
        json.dump(meta, fh)
    before = open(out).read()
    with pytest.raises(FastsimInputError) as e:
        SW.run_sweep(axes, out=out, resume=True)
    assert e.value.field == "--resume" and "table version 3, this is 4" in e.value.allowed
    assert open(out).read() == before
    meta["table_version"] = 4                                              # the same sidecar of this version resumes
    with open(out + ".sweep.json", "w") as fh:
        json.dump(meta, fh)
    pd.testing.assert_frame_equal(SW.run_sweep(axes, out=out, resume=True), SW.read_table(out))
