"""Sweep grids list each plan once: an axis no point of the grid uses is not multiplied in.

A disaggregated plan uses ``prefill_tp`` and ``decode_tp`` (``tp`` only for a side not given), a
colocated plan ``tp`` (never ``prefill_tp`` / ``decode_tp``). Before, a grid of disaggregated
points with both sides given repeated every plan once per default TP under distinct point ids, and
a grid of both modes repeated its colocated points per ``prefill_tp`` / ``decode_tp`` /
``*_instances`` value and its disaggregated ones per ``chunk_tokens`` value (and ``tp`` /
``instances`` value where both sides are given).

Layouts: at TP 1 the layouts ``tp``, ``tp+ep`` and ``dp+ep`` all give EP 1 and DP 1, so on an MoE
model a point whose TPs are all 1 is one plan whatever its layout. Before, a grid over several
layouts listed (priced, verified) that plan once per layout under distinct ids.

Point ids: a disaggregated point's sides come from ``prefill_*`` / ``decode_*`` or from ``tp`` /
``instances``. Before (table version 6), the id hashed the grid's spelling, so one plan had two ids
(``prefill_tp = 2, decode_tp = 2`` against ``tp = 2``, ``instances = 2`` against
``prefill_instances = decode_instances = 2``, ...); now it hashes the plan.
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
    """A column was added with table version 11 (``pp``, the pipeline stages of a colocated point),
    columns with 10 (the capacity search's probes and runs), verdicts and
    columns changed with 9 (a pass surely clears the target: the Wilson bound, seeds added;
    sim_reason and the attainment's interval), figures with 8 (a scenario priced
    within the model's context), ids with 7 (a disaggregated plan's id, whatever the spelling of its
    sides), cells with 6 (an infeasible row's chunk and counts), row sets with 5 (an MoE TP1 plan
    once, not once per layout), ids and row sets with 4: a table written before is not resumed."""
    assert TABLE_VERSION == 11
    axes = dict(BASE, mode="colocated", tp=[1, 2])
    out = str(tmp_path / "t.csv")
    SW.run_sweep(axes, out=out)
    meta = json.loads(open(out + ".sweep.json").read())
    assert meta["table_version"] == 11
    meta["table_version"] = 10
    with open(out + ".sweep.json", "w") as fh:
        json.dump(meta, fh)
    before = open(out).read()
    with pytest.raises(FastsimInputError) as e:
        SW.run_sweep(axes, out=out, resume=True)
    assert e.value.field == "--resume" and "table version 10, this is 11" in e.value.allowed
    assert open(out).read() == before
    meta["table_version"] = 11                                             # the same sidecar of this version resumes
    with open(out + ".sweep.json", "w") as fh:
        json.dump(meta, fh)
    pd.testing.assert_frame_equal(SW.run_sweep(axes, out=out, resume=True), SW.read_table(out))


# ---------------------------------------------------------------------------------------------
# Point ids: a plan's id, however the grid spells its sides
# ---------------------------------------------------------------------------------------------

DBASE = dict(BASE, mode="disaggregated")
# pairs (or more) of grids listing the same plans in the same order, each spelled another way
SPELLINGS = [
    [dict(DBASE, prefill_tp=[1, 2], decode_tp=2), dict(DBASE, prefill_tp=[1, 2], tp=2)],
    [dict(DBASE, decode_tp=[1, 4], prefill_tp=1), dict(DBASE, decode_tp=[1, 4], tp=1)],
    [dict(DBASE, prefill_tp=2, decode_tp=2), dict(DBASE, tp=2), dict(DBASE, prefill_tp=2, tp=2),
     dict(DBASE, decode_tp=2, tp=2)],
    [dict(DBASE, tp=1, instances=2), dict(DBASE, tp=1, prefill_instances=2, decode_instances=2),
     dict(DBASE, tp=1, instances=2, prefill_instances=2), dict(DBASE, tp=1, instances=2, decode_instances=2)],
    [dict(DBASE, tp=1, prefill_instances=[1, 3], decode_instances=2),
     dict(DBASE, tp=1, prefill_instances=[1, 3], instances=2)],
    [dict(DBASE, tp=1, prefill_instances="auto", decode_instances=3),
     dict(DBASE, tp=1, prefill_instances="auto", instances=3), dict(DBASE, tp=1, decode_instances=3)],
    # auto given explicitly is the axis left out
    [dict(DBASE, tp=[1, 2]), dict(DBASE, tp=[1, 2], prefill_instances="auto", decode_instances="auto"),
     dict(DBASE, tp=[1, 2], instances="auto", prefill_instances="auto")],
    [dict(DBASE, tp=2, instances=2), dict(DBASE, prefill_tp=2, decode_tp=2, prefill_instances=2, decode_instances=2),
     dict(DBASE, prefill_tp=2, tp=2, decode_instances=2, instances=2)],
    # a grid of both modes: its disaggregated (2, 2) point is the plan of tp = 2
    [dict(BASE, tp=2, prefill_tp=2, decode_tp=2, instances=2), dict(BASE, tp=2, instances=2)],
]


@pytest.mark.parametrize("grids", SPELLINGS)
def test_a_plan_spelled_two_ways_has_one_id(grids):
    """The same plans (and so the same rows, figures included) under the same ids."""
    first = SW.analytic_table(grids[0])
    assert first.point_id.is_unique
    for axes in grids[1:]:
        other = SW.analytic_table(axes)
        pd.testing.assert_frame_equal(other[ID_COLUMNS], first[ID_COLUMNS])


def test_cli_gives_a_plan_one_id_whatever_the_axes(capsys):
    ids = []
    for side in ("decode_tp=2", "tp=2"):
        rc, out, _ = run(capsys, "sweep", "--axis", "gpu=B200", "--axis", "precision=FP8", "--axis",
                         "mode=disaggregated", "--axis", "prefill_tp=1,2", "--axis", side, "--format", "csv")
        assert rc == 0
        ids.append([(r["prefill_tp"], r["decode_tp"], r["point_id"]) for r in csv.DictReader(io.StringIO(out))])
    assert ids[0] == ids[1] == [("1", "2", "4baca8183c594434"), ("2", "2", "215aa27f98cbb5d9")]


# ids of table version 6 (computed before the change) that the change leaves as they were
UNCHANGED = [
    # (a) colocated points
    (dict(BASE, mode="colocated", tp=[1, 2], instances=["auto", 2], chunk_tokens=["auto", 512]),
     ["fdb4d0a97ab70824", "07795304c532f6dd", "f8bd339d729eb744", "1b5f17137a60db8a", "f7eb2a0c56a504d4",
      "d240c97c062e1c50", "ca7e6a731f2feb9e", "23096ec44b1fa27e"]),
    # (a) and (b): the default grid (both modes, tp and instances only)
    (dict(BASE), ["fdb4d0a97ab70824", "f7eb2a0c56a504d4", "2e2546535aa7a668", "bc141be7dbcc0c09",
                  "81e56e489e6e3405", "215aa27f98cbb5d9", "8179665d2d624872", "a5f28eff61540335"]),
    # (b) a disaggregated grid of tp and instances only
    (dict(DBASE, tp=[1, 2], instances=["auto", 3]),
     ["81e56e489e6e3405", "51a1f35ea5139507", "215aa27f98cbb5d9", "2f6822d3663c417a"]),
    # (c) sides that differ, from both side axes (tp and instances absent, or not used)
    (dict(DBASE, prefill_tp=[1, 2], decode_tp=[2, 4], prefill_instances=[1, 2], decode_instances=[3, "auto"]),
     ["eff6f691cfe1dece", "0175bb0c4379ffa3", "c65460ca73025b8c", "90494c73dcff1121", "13f2271212594ae2",
      "2200babc74fe1caa", "fa90cc5af4c6a28b", "223797dd04a65b1a", None, None, None, None,
      "f546cb6c4a4a9cd4", "18cb9874156b4183", "2c1e760ba28f2f37", "bffa1646194f8d16"]),
    (dict(BASE, tp=[1, 2], prefill_tp=[1, 2], decode_tp=[2, 4], instances=2),
     ["07795304c532f6dd", "d240c97c062e1c50", "4dbff370493d95e5", "96d2c175c4ac8fbd", None, "c1ccdc380300c4c1"]),
]


@pytest.mark.parametrize("axes,ids", UNCHANGED)
def test_ids_of_plans_in_canonical_form_are_unchanged(axes, ids):
    """Colocated ids, and disaggregated ones of equal sides from the stand-in alone or of differing
    sides from both side axes, are those of table version 6 (``None``: a point in neither form,
    whose id changed: it is the plan of the stand-in form)."""
    got = SW.analytic_table(axes).point_id.tolist()
    assert len(got) == len(ids)
    assert [g for g, i in zip(got, ids) if i is not None] == [i for i in ids if i is not None]


def test_equal_sides_from_both_side_axes_take_the_stand_in_id():
    both = SW.analytic_table(dict(DBASE, prefill_tp=[1, 2], decode_tp=[2, 4]))
    assert both.point_id.tolist() == ["4baca8183c594434", "af0ecab7b68b2a95", "215aa27f98cbb5d9",   # (2, 2): was
                                      "dbb3d8ddd3978d7c"]                                          # 9f1dba4ff6dd5b79
    assert SW.analytic_table(dict(DBASE, tp=2)).point_id.tolist() == ["215aa27f98cbb5d9"]            # unchanged
    counts = SW.analytic_table(dict(DBASE, prefill_tp=[1, 2], decode_tp=[2, 4], prefill_instances=[1, 2],
                                    decode_instances=[3, "auto"]))
    changed = counts[(counts.prefill_tp == 2) & (counts.decode_tp == 2)]
    alone = SW.analytic_table(dict(DBASE, tp=2, prefill_instances=[1, 2], decode_instances=[3, "auto"]))
    assert changed.point_id.tolist() == alone.point_id.tolist() == ["d23cd4994bc64f1d", "476bc6f156cffabe",
                                                                     "512dd37febd12411", "1757f77c73222d6b"]


# spellings of the TPs and of the instance counts, crossed below into grids of one mode and both
TP_SPELLINGS = [{}, dict(tp=[1, 2]), dict(prefill_tp=[1, 2]), dict(decode_tp=[2, 4]),
                dict(tp=[1, 2], prefill_tp=[1, 2]), dict(tp=[2, 4], decode_tp=[1, 2]),
                dict(prefill_tp=[1, 2], decode_tp=[1, 2]), dict(tp=[1, 2], prefill_tp=[2], decode_tp=[1, 2])]
INSTANCE_SPELLINGS = [{}, dict(instances=[1, 2, "auto"]), dict(prefill_instances=[1, "auto"]),
                      dict(decode_instances=[2, "auto"]), dict(instances=[1, 2], prefill_instances=[1, "auto"]),
                      dict(instances=["auto", 2], decode_instances=[1, 2]),
                      dict(prefill_instances=[1, 2, "auto"], decode_instances=[1, "auto"]),
                      dict(instances=[1, "auto"], prefill_instances=[1, 2], decode_instances=[2])]


def test_brute_force_one_id_per_plan_and_one_plan_per_id():
    """Over every spelling of the sides, in grids of one mode and both: each plan (the cells of a
    row where nothing is sized: a TPOT no plan meets, so an ``auto`` cell stays missing) has one id
    in every grid, and no id names two plans, in one grid or across grids."""
    cols = ["mode", "tp", "prefill_tp", "decode_tp", "chunk_tokens", "instances", "prefill_instances",
            "decode_instances"]
    ids_of, plans_of = {}, {}
    n_grids = 0
    for modes, tps, counts in itertools.product([["colocated", "disaggregated"], ["disaggregated"]], TP_SPELLINGS,
                                                INSTANCE_SPELLINGS):
        axes = dict(BASE, mode=modes, chunk_tokens=["auto", 512], tpot_s=1e-4, **tps, **counts)
        if modes == ["disaggregated"]:
            del axes["chunk_tokens"]
        try:
            grid = SW.make_grid(axes)
        except FastsimInputError:                  # tp / instances beside both sides, disaggregated only
            continue
        n_grids += 1
        df = SW.analytic_table(grid)
        assert not df.feasible.any() and len(df) == grid.n_points and df.point_id.is_unique
        plans = list(df[cols].astype(str).itertuples(index=False, name=None))
        assert len(set(plans)) == len(plans)                               # distinct rows, distinct plans
        for plan, pid in zip(plans, df.point_id):
            ids_of.setdefault(plan, set()).add(pid)
            plans_of.setdefault(pid, set()).add(plan)
    assert n_grids == 2 * 8 * 8 - 15                                       # refused: stand-in beside both sides
    assert {len(v) for v in ids_of.values()} == {1}                        # one id per plan
    assert {len(v) for v in plans_of.values()} == {1}                      # one plan per id
    # the plans met: colocated 4 TPs x 2 chunks x (auto, 1, 2); disaggregated, 14 pairs of TPs
    # (every pair from {1, 2, 4, 8} bar (4, 8) and (8, 1)) x 9 pairs of counts (from {auto, 1, 2})
    assert sum(p[0] == "colocated" for p in ids_of) == 4 * 2 * 3
    assert sum(p[0] == "disaggregated" for p in ids_of) == 14 * 9


# ---------------------------------------------------------------------------------------------
# Layouts: an MoE plan whose TPs are all 1 is one plan whatever its layout
# ---------------------------------------------------------------------------------------------

MOE, DENSE = "qwen3-30b-a3b", "llama-3.1-70b"
LAYOUTS3 = ["tp", "tp+ep", "dp+ep"]
LBASE = dict(BASE, gpu="H100", model=MOE)


def _listify(v):
    return v if isinstance(v, list) else [v]


def _layout_plans(axes, moe_of=None):
    """The distinct plans of a grid over the layouts, by brute force over the full product (not by
    fastsim): an instance is (TP, DP, EP) from ``layout_degrees``; on a dense model an EP layout
    is a refused row of its own at every TP (not a copy). Only model, mode, the TPs and the layout
    vary here; ``moe_of`` maps a model name to whether it is MoE (default: the catalog's)."""
    from fastsim.catalog import default_catalog
    from fastsim.layouts import layout_degrees
    moe_of = moe_of or (lambda m: default_catalog().model(m).is_moe)
    tps = _listify(axes.get("tp", [1, 2, 4, 8]))
    ptps, dtps = _listify(axes.get("prefill_tp", [None])), _listify(axes.get("decode_tp", [None]))
    plans = set()
    for model, mode, tp, ptp, dtp, lay in itertools.product(
            _listify(axes["model"]), _listify(axes.get("mode", ["colocated", "disaggregated"])), tps, ptps, dtps,
            _listify(axes.get("layout", ["tp"]))):
        how = (lambda g: (g,) + layout_degrees(lay, g)) if moe_of(model) else (lambda g: (g, lay))
        if mode == "colocated":
            plans.add((model, mode, how(tp)))
        else:
            plans.add((model, mode, how(ptp or tp), how(dtp or tp)))
    return plans


def _table_layout_plans(df, moe_of=None):
    """The plans of a table's rows, keyed as :func:`_layout_plans` keys them (one per row)."""
    from fastsim.catalog import default_catalog
    from fastsim.layouts import layout_degrees
    moe_of = moe_of or (lambda m: default_catalog().model(m).is_moe)
    out = []
    for r in df.itertuples(index=False):
        how = (lambda g: (int(g),) + layout_degrees(r.layout, int(g))) if moe_of(r.model) else \
            (lambda g: (int(g), r.layout))
        out.append((r.model, r.mode, how(r.tp)) if r.mode == "colocated"
                   else (r.model, r.mode, how(r.prefill_tp), how(r.decode_tp)))
    return out


def _full_product_ids(grid):
    """Every point id of the mode-wise product, layout copies included (the rows of before, in order)."""
    from fastsim.sweep.grid import _n_enumerated, _point_ids
    from fastsim.sweep.table import _codes
    n = _n_enumerated(grid.axes)
    c = _codes(grid, np.arange(n, dtype=np.int64))
    return SW.grid._hex(_point_ids(grid, c, n)).tolist(), np.array(grid.axes["layout"], dtype=object)[c["layout"]]


LAYOUT_GRIDS = [
    dict(LBASE, mode="colocated", tp=[1, 2], layout=LAYOUTS3),
    dict(LBASE, mode="colocated", tp=[2, 1, 4], layout=["dp+ep", "tp", "tp+ep"]),
    dict(LBASE, mode="disaggregated", prefill_tp=[1, 2], decode_tp=[1, 2], layout=LAYOUTS3),
    dict(LBASE, mode="disaggregated", tp=[1, 2], prefill_tp=[1], layout=LAYOUTS3),   # decode side takes tp
    dict(LBASE, mode="disaggregated", tp=[1, 2], layout=["tp+ep", "dp+ep"]),
    dict(LBASE, tp=[1, 2], prefill_tp=[1, 2], decode_tp=[1, 4], layout=LAYOUTS3),      # both modes
    dict(LBASE, model=[MOE, DENSE], tp=[1, 2], decode_tp=[1, 2], layout=LAYOUTS3, rate_req_per_s=[2, 8]),
    dict(LBASE, model=[DENSE, MOE, "mixtral-8x7b"], tp=[1, 2], layout=["tp+ep", "tp"], chunk_tokens=[256, 512],
         max_batch=[0, 32]),
]


@pytest.mark.parametrize("axes", LAYOUT_GRIDS)
def test_layout_grids_list_each_distinct_plan_once(axes):
    grid = SW.make_grid(axes)
    plans = _layout_plans(axes)
    others = int(np.prod([len(_listify(axes.get(a, [0]))) for a in ("rate_req_per_s", "chunk_tokens", "max_batch")]))
    n_col = len({p for p in plans if p[1] == "colocated"})
    n_dis = len(plans) - n_col
    # chunk_tokens applies to colocated plans only
    expected = n_col * others + n_dis * others // len(_listify(axes.get("chunk_tokens", [0])))
    assert grid.n_points == expected
    df = SW.analytic_table(grid)
    assert len(df) == grid.n_points and df.point.tolist() == list(range(len(df))) and df.point_id.is_unique
    got = _table_layout_plans(df)
    assert set(got) == plans
    # no plan twice for the same other axes
    keyed = [g + (r.rate_req_per_s, r.chunk_tokens, r.max_batch) for g, r in zip(got, df.itertuples(index=False))]
    assert len(set(map(str, keyed))) == len(keyed)
    # the rows left keep the ids and the order they had: the full product less its layout copies
    ids, _ = _full_product_ids(grid)
    assert len(ids) > len(df) and set(df.point_id) <= set(ids)
    assert df.point_id.tolist() == [i for i in ids if i in set(df.point_id)]
    for k in (1, 3, 7):                                                    # chunking changes nothing
        pd.testing.assert_frame_equal(SW.analytic_table(grid, chunk_points=k), df)


def test_moe_tp1_plan_appears_once_under_its_plain_tp_id():
    axes = dict(LBASE, mode="colocated", tp=[1, 2], layout=LAYOUTS3)
    df = SW.analytic_table(axes)
    assert len(df) == 1 + 3                                                # was 2 x 3
    assert df[["tp", "layout"]].astype(str).values.tolist() == [["1", "tp"], ["2", "tp"], ["2", "tp+ep"],
                                                                   ["2", "dp+ep"]]
    plain = SW.analytic_table(dict(axes, layout="tp"))
    assert df.point_id[0] == plain.point_id[0] and plain.tp[0] == 1
    figures = [c for c, _ in SW.COLUMNS if c not in ("point",)]
    pd.testing.assert_frame_equal(df.iloc[[0, 1]][figures].reset_index(drop=True), plain[figures])
    # the TP2 EP plans keep the ids of a grid of that layout alone
    for lay in ("tp+ep", "dp+ep"):
        one = SW.analytic_table(dict(axes, tp=2, layout=lay))
        row = df[(df.tp == 2) & (df.layout == lay)]
        assert row.point_id.tolist() == one.point_id.tolist()
    # the layout named first does not matter: tp lists the plan wherever it stands
    other = SW.analytic_table(dict(axes, layout=["dp+ep", "tp+ep", "tp"]))
    tp1 = other[other.tp == 1]
    assert len(tp1) == 1 and tp1.layout.iloc[0] == "tp" and tp1.point_id.iloc[0] == plain.point_id[0]


def test_moe_tp1_grid_of_expert_parallel_layouts_only_keeps_one_row():
    axes = dict(LBASE, mode="colocated", tp=1, layout=["tp+ep", "dp+ep"])
    grid = SW.make_grid(axes)
    df = SW.analytic_table(grid)
    assert grid.n_points == len(df) == 1
    assert df.layout[0] == "tp+ep"                                         # the first layout named
    assert df.point_id[0] == SW.analytic_table(dict(axes, layout="tp+ep")).point_id[0]
    df2 = SW.analytic_table(dict(axes, layout=["dp+ep", "tp+ep"]))
    assert len(df2) == 1 and df2.layout[0] == "dp+ep"
    # the same figures as the plain TP1 plan (it is that plan)
    plain = SW.analytic_table(dict(axes, layout="tp"))
    figures = ["gpus", "instances", "capacity_req_per_s", "usd_per_million_output_tokens", "analytic_ttft_s",
               "analytic_tpot_s", "feasible", "reason"]
    pd.testing.assert_frame_equal(df[figures], plain[figures])
    # with TP2 as well, the TP2 points of both layouts stay
    df = SW.analytic_table(dict(axes, tp=[1, 2]))
    assert df[["tp", "layout"]].astype(str).values.tolist() == [["1", "tp+ep"], ["2", "tp+ep"], ["2", "dp+ep"]]


def test_disaggregated_moe_plan_collapses_only_where_both_sides_are_tp1():
    axes = dict(LBASE, mode="disaggregated", prefill_tp=[1, 2], decode_tp=[1, 2], layout=LAYOUTS3)
    df = SW.analytic_table(axes)
    assert len(df) == SW.make_grid(axes).n_points == 1 + 3 * 3            # was 4 x 3
    sides = df[["prefill_tp", "decode_tp", "layout"]].astype(str).values.tolist()
    assert [s for s in sides if s[:2] == ["1", "1"]] == [["1", "1", "tp"]]
    for pair in (["1", "2"], ["2", "1"], ["2", "2"]):                      # one side at TP2: EP differs there
        assert sorted(s[2] for s in sides if s[:2] == pair) == sorted(LAYOUTS3)
    plain = SW.analytic_table(dict(axes, prefill_tp=1, decode_tp=1, layout="tp"))
    assert df.point_id[0] == plain.point_id[0]
    # a grid of both modes: the colocated TP1 plan and the disaggregated (1, 1) plan once each
    both = SW.analytic_table(dict(LBASE, tp=[1, 2], prefill_tp=[1, 2], decode_tp=[1, 2], layout=LAYOUTS3))
    assert len(both) == (1 + 3) + (1 + 3 * 3) and both.point_id.is_unique
    col = both[both["mode"] == "colocated"]
    assert (col[col.tp == 1].layout == "tp").all() and (col.tp == 1).sum() == 1


def test_dense_model_layout_grid_keeps_its_refused_rows():
    """On a dense model the EP layouts are refused rows at every TP, TP1 included: nothing drops."""
    axes = dict(LBASE, model=DENSE, mode="colocated", tp=[1, 2], layout=LAYOUTS3)
    grid = SW.make_grid(axes)
    assert grid.n_points == int(np.prod(grid.shape)) == 6
    df = SW.analytic_table(grid)
    ep = df.layout != "tp"
    assert len(df) == 6 and ep.sum() == 4 and not df.feasible[ep].any() and df.feasible[~ep].all()
    assert df.reason[ep].str.contains("expert parallelism on a dense model").all()
    ids, _ = _full_product_ids(grid)
    assert df.point_id.tolist() == ids
    df = SW.analytic_table(dict(LBASE, model=DENSE, mode="disaggregated", prefill_tp=1, decode_tp=[1, 2],
                                layout=LAYOUTS3))
    assert len(df) == 2 * 3 and (df.layout != "tp").sum() == 4 and not df.feasible[df.layout != "tp"].any()


def test_workload_models_decide_when_the_model_axis_is_absent():
    """Without a model axis a point's model is its scenario's: an MoE scenario's TP1 plan once, a
    dense scenario's EP rows refused (and kept)."""
    import dataclasses

    from fastsim.catalog import load_catalog
    cat = load_catalog()
    cat.scenarios["moe-chat"] = dataclasses.replace(cat.scenario("chat"), name="moe-chat", model=MOE)
    axes = dict(BASE, gpu="H100", scenario=["chat", "moe-chat"], tp=[1, 2], decode_tp=[1, 2], layout=LAYOUTS3)
    grid = SW.make_grid(axes, cat)
    df = SW.analytic_table(grid, chunk_points=5)
    moe = df.workload == "moe-chat"
    assert (df.model[moe] == MOE).all() and (df.model[~moe] == DENSE).all()
    assert len(df) == grid.n_points == int((~moe).sum()) + int(moe.sum())
    # dense: the full product of its mode (2 TPs x 3 layouts colocated; 2 x 2 x 3 disaggregated)
    assert int((~moe).sum()) == 2 * 3 + 2 * 2 * 3
    # MoE: the TP1 plan once per mode; the others once per layout
    assert int(moe.sum()) == (1 + 3) + (1 + 3 * 3)
    got = _table_layout_plans(df[moe])
    assert len(set(got)) == len(got) == int(moe.sum())
    ids, _ = _full_product_ids(grid)
    assert df.point_id.tolist() == [i for i in ids if i in set(df.point_id)]


def test_cli_lists_the_moe_tp1_plan_once(capsys):
    argv = ["sweep", "--axis", f"model={MOE}", "--axis", "gpu=H100", "--axis", "precision=FP8",
            "--axis", "mode=colocated", "--axis", "tp=1,2", "--axis", "layout=tp,tp+ep,dp+ep"]
    rc, out, _ = run(capsys, *argv, "--format", "csv")
    assert rc == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["tp"], r["layout"]) for r in rows] == [("1", "tp"), ("2", "tp"), ("2", "tp+ep"), ("2", "dp+ep")]
    assert [r["point"] for r in rows] == ["0", "1", "2", "3"] and len({r["point_id"] for r in rows}) == 4
    rc, out, _ = run(capsys, *argv)
    assert rc == 0 and out.startswith("4 points: ")                        # was 6


def test_top_k_verification_spends_no_slot_on_a_layout_copy(monkeypatch):
    seen = []
    run_task = SW._run_task

    def counting(task):
        seen.extend(task.points.tolist())
        return run_task(task)

    monkeypatch.setattr(SW, "_run_task", counting)
    axes = dict(LBASE, mode="colocated", tp=[1, 2], layout=LAYOUTS3, tpot_s=0.5)
    df = SW.run_sweep(axes, verify="top-k-per-scenario", top_k=3, seeds=1, horizon_s=20.0, seed=1)
    assert len(df) == 4 and df.point_id.is_unique and int(df.feasible.sum()) >= 3
    assert len(seen) == len(set(seen)) == int(df.verified.sum()) == 3
    plans = _table_layout_plans(df[df.verified])
    assert len(set(plans)) == 3                                            # three distinct plans


def test_resume_of_a_moe_layout_grid(tmp_path):
    """Resume keeps rows by id and numbers points as the table does: a cut table completes to the whole."""
    axes = dict(LBASE, tp=[1, 2], prefill_tp=[1, 2], decode_tp=[1], layout=LAYOUTS3)
    out = str(tmp_path / "t.csv")
    full = SW.run_sweep(axes, out=out, chunk_points=3)
    assert len(full) == SW.make_grid(axes).n_points == (1 + 3) + (1 + 3)
    lines = open(out).read().splitlines(keepends=True)
    with open(out, "w") as fh:
        fh.writelines(lines[:4])                                           # header and 3 rows
    pd.testing.assert_frame_equal(SW.run_sweep(axes, out=out, resume=True, chunk_points=3), full)
    pd.testing.assert_frame_equal(SW.read_table(out), full)


def test_limit_counts_a_moe_tp1_plan_once():
    """The 50,000,000-point limit counts each TP1 plan once, not once per layout."""
    axes = dict(LBASE, mode="colocated", tp=1, layout=LAYOUTS3, rate_req_per_s=list(range(1, 10_001)),
                ttft_s=[0.1 * k for k in range(1, 101)], tpot_s=[0.01 * k for k in range(1, 21)])
    grid = SW.make_grid(axes)                                              # product: 60,000,000
    assert int(np.prod(grid.shape)) == 60_000_000 > SW.MAX_POINTS
    assert grid.n_points == 20_000_000
    with pytest.raises(FastsimInputError) as e:
        SW.make_grid(dict(axes, tp=[1, 2]))
    assert e.value.field == "grid" and e.value.value == f"{20_000_000 + 3 * 20_000_000:,} points"
