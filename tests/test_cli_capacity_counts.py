"""`fastsim capacity --instance-counts`: one plan's capacity at several instance counts, searched together."""
import json

import pytest

from cliutil import run
from fastsim.analytic import Demand, plan_for
from fastsim.catalog import default_catalog
from fastsim.cli import _instance_counts
from fastsim.errors import FastsimInputError
from fastsim.search import SLO, max_sustainable_rate

CHAT_B200 = ("capacity", "--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--tp", "1")
SMALL = ("--seeds", "2", "--horizon", "120")
TOL = 0.01


def test_counts_are_ranges_and_commas_in_increasing_order():
    assert _instance_counts("1,2,4,8") == (1, 2, 4, 8)
    assert _instance_counts("1-4") == (1, 2, 3, 4)
    assert _instance_counts(" 8, 1-3 ") == (1, 2, 3, 8)
    for bad, why in [("1,x", "'x' is not an integer"), ("", "is not an integer"), ("0,1", "below 1"),
                     ("-2", "is not an integer"), ("4-2", "runs backwards"), ("1-3,2", "2 given more than once"),
                     ("1,1", "1 given more than once"), ("1-100", "at most 64 counts")]:
        with pytest.raises(FastsimInputError, match="--instance-counts") as exc:
            _instance_counts(bad)
        assert why in str(exc.value) and repr(bad) in str(exc.value)


@pytest.mark.parametrize("extra, flag", [
    (("--instance-counts", "1,two"), "--instance-counts"),
    (("--instance-counts", "1-3,3"), "--instance-counts"),
    (("--instance-counts", "1,2", "--policy", "vllm"), "--policy"),
    (("--instance-counts", "1,2", "--arrival", "gamma", "--cv", "2"), "--arrival"),
    (("--instance-counts", "1,2", "--rate", "10"), "--rate"),
    (("--instance-counts", "1,2", "--plot", "cap.png"), "--plot"),
    (("--instance-counts", "1,2", "--instances", "3"), "--instances"),
])
def test_bad_lists_and_flags_the_batched_search_does_not_take(capsys, extra, flag):
    rc, out, err = run(capsys, *CHAT_B200, *extra)
    assert rc == 2 and out == ""
    assert err.startswith(f"fastsim capacity: error: {flag}: got ") and len(err.strip().splitlines()) == 1
    if flag != "--instance-counts":
        assert "with --instance-counts" in err


def test_refused_with_a_trace(capsys):
    rc, _, err = run(capsys, "capacity", "--trace", "azure-conv", "--model", "llama-3.1-70b", "--ttft", "1",
                     "--tpot", "0.05", "--gpu", "B200", "--precision", "FP8", "--instance-counts", "1,2")
    assert rc == 2
    assert err.startswith("fastsim capacity: error: --trace: got 'azure-conv'; allowed: no value with "
                          "--instance-counts")


def test_one_record_per_count_each_the_one_plan_answer(capsys):
    rc, out, _ = run(capsys, *CHAT_B200, "--instance-counts", "1,2", *SMALL, "--format", "json")
    assert rc == 0
    chat_counts = json.loads(out)
    recs = chat_counts["capacities"]
    assert [r["instances"] for r in recs] == [1, 2]
    assert [r["gpus"] for r in recs] == [1, 2]
    assert 0 < recs[0]["rate_req_per_s"] < recs[1]["rate_req_per_s"]
    assert any("searched together" in n and "to within --tol" in n for n in chat_counts["notes"])
    s = default_catalog().scenario("chat")
    for r in recs:
        plan = plan_for(s.model, Demand.from_scenario(s), gpu="B200", precision="FP8", tp=1, instances=r["instances"])
        assert r["plan"] == plan.describe()
        assert r["analytic_req_per_s"] == pytest.approx(plan.capacity_req_per_s, rel=1e-12)
        assert r["seeds"] == 2 and r["horizon_s"] == 120.0
        assert r["seed_runs"] == sum(p["seeds_run"] for p in r["probes"]) > 0
        lo, hi = r["bracket_req_per_s"]
        assert lo <= r["rate_req_per_s"] <= hi <= lo * (1 + TOL) + 1e-9
        one = max_sustainable_rate(plan, s, SLO(s.ttft_s, s.tpot_s), seeds=2, horizon_s=120.0, rel_tol=TOL, seed=0)
        a, b = one.rate_req_per_s, r["rate_req_per_s"]
        assert abs(a - b) <= TOL * max(a, b)


def test_table_has_the_plan_without_its_count_and_a_row_per_count(capsys):
    rc, out, _ = run(capsys, *CHAT_B200, "--instance-counts", "1,2", *SMALL)
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].startswith("B200 FP8 colocated, instances of TP1 on llama-3.1-70b; instances 1, 2; ")
    assert "2 seeds x 120 s per probe" in lines[0]
    assert lines[1].split()[:2] == ["instances", "GPUs"] and "seed-runs" in lines[1]
    rows = [ln.split() for ln in lines[3:5]]
    assert [r[:2] for r in rows] == [["1", "1"], ["2", "2"]]
    assert any(ln.startswith("note: the 2 counts were searched together") for ln in lines)


def test_disaggregated_counts_set_the_decode_instances(capsys):
    rc, out, _ = run(capsys, "capacity", "--scenario", "chat", "--gpu", "H100", "--precision", "FP8", "--mode",
                     "disaggregated", "--prefill-tp", "1", "--decode-tp", "1", "--prefill-instances", "2",
                     "--instance-counts", "1,2", *SMALL, "--format", "json")
    assert rc == 0
    recs = json.loads(out)["capacities"]
    assert [(r["prefill_instances"], r["decode_instances"], r["gpus"]) for r in recs] == [(2, 1, 3), (2, 2, 4)]
    assert recs[1]["analytic_req_per_s"] > recs[0]["analytic_req_per_s"] > 0
    assert all(r["rate_req_per_s"] > 0 for r in recs)


def test_csv_row_carries_the_notes_about_every_count_and_its_own(capsys):
    """At 2 seeds x 60 s the 1-instance chat search meets non-monotone verdicts (a note about count 1);
    its CSV row carries that note, the row of count 2 does not, and both carry the shared ones."""
    import io

    import pandas as pd
    rc, out, err = run(capsys, *CHAT_B200, "--instance-counts", "1,2", "--seeds", "2", "--horizon", "60",
                       "--format", "csv")
    assert rc == 0
    rows = pd.read_csv(io.StringIO(out))
    assert rows["instances"].tolist() == [1, 2]
    # a note about one count starts with it; the legend of a row's n/a cells names its count
    own = [[n for n in json.loads(x) if n.startswith("instances ") or "(count " in n] for x in rows["notes"]]
    shared = [[n for n in json.loads(x) if not (n.startswith("instances ") or "(count " in n)] for x in rows["notes"]]
    assert own[0] and all(n.startswith("instances 1: ") or "(count 1)" in n for n in own[0])
    assert all(n.startswith("instances 2: ") for n in own[1])
    assert shared[0] == shared[1] and any("searched together" in n for n in shared[0])
    # count 1's probes contradict each other: its row says it is unstable, with no estimate or interval
    assert rows["unstable"].tolist() == [True, False]
    assert pd.isna(rows["rate_req_per_s"][0]) and rows["rate_req_per_s"][1] > 0
    assert any(n.startswith("instances 1: unstable: no stable answer at --horizon 60 s and --seeds 2") for n in own[0])
    # every note is printed once on stderr, in the order of the JSON's notes
    printed = [ln[len("note: "):] for ln in err.splitlines() if ln.startswith("note: ")]
    assert set(own[0]) | set(own[1]) | set(shared[0]) == set(printed) and len(printed) == len(set(printed))


def test_csv_row_legend_explains_only_its_own_empty_cells(capsys, monkeypatch):
    """A count whose 95% interval is empty gets the interval's legend in its CSV row; the other rows do not."""
    import dataclasses
    import io
    import math

    import pandas as pd

    import fastsim.search as S
    real = S.max_sustainable_rates

    def blank_second_interval(*a, **kw):
        res = real(*a, **kw)
        res[1] = dataclasses.replace(res[1], ci95=(math.nan, math.nan))
        return res
    monkeypatch.setattr(S, "max_sustainable_rates", blank_second_interval)
    rc, out, err = run(capsys, *CHAT_B200, "--instance-counts", "1-3", *SMALL, "--format", "csv")
    assert rc == 0
    rows = pd.read_csv(io.StringIO(out))
    legend = [[n for n in json.loads(x) if n.startswith("95% CI n/a")] for x in rows["notes"]]
    assert [len(x) for x in legend] == [0, 1, 0] and "(count 2)" in legend[1][0]
    assert sum(ln.startswith("note: 95% CI n/a (count 2)") for ln in err.splitlines()) == 1


def test_repro_count_estimate_lies_in_its_interval_and_the_horizon_note_is_said_once(capsys):
    """`--instance-counts 1 --seeds 2 --horizon 60` printed an estimate outside its own 95% interval; then
    0.000 for count 1, whose probes contradict each other: that count is now unstable, with no estimate."""
    rc, out, err = run(capsys, *CHAT_B200, "--instance-counts", "1,2", "--seeds", "2", "--horizon", "60",
                       "--format", "json")
    assert rc == 0, err
    d = json.loads(out)
    one, two = d["capacities"]
    assert one["unstable"] is True and one["rate_req_per_s"] is None and one["ci95_req_per_s"] == [None, None]
    assert one["estimate_in_ci"] is None and one["null_reasons"]["rate_req_per_s"].startswith("not applicable: unstable")
    assert one["unstable_reason"].startswith("no stable answer at a 60-s horizon and 2 seeds: probes at ")
    for r in [two]:
        c0, c1 = r["ci95_req_per_s"]
        assert r["estimate_in_ci"] is True and c0 <= r["rate_req_per_s"] <= c1
        assert r["bracket_req_per_s"][0] <= r["rate_req_per_s"] <= r["bracket_req_per_s"][1]
        assert "notes" not in r                   # the output's notes hold a count's own, tagged
    short = [n for n in d["notes"] if "understates the capacity" in n]
    assert len(short) == 1 and short[0].startswith("a horizon of 60 s understates")


def test_counts_refuse_a_horizon_too_short_to_measure(capsys):
    rc, out, err = run(capsys, *CHAT_B200, "--instance-counts", "1,2", "--seeds", "2", "--horizon", "0.5")
    assert rc == 2 and out == ""
    assert err.startswith("fastsim capacity: error: --horizon: got 0.5; allowed: a horizon of at least 11.6 s")


def test_one_instance_limit_for_counts_flags_and_the_api():
    from fastsim.analytic import MAX_INSTANCES
    from fastsim.cli import MAX_INSTANCE_COUNT
    import fastsim.search as S
    assert MAX_INSTANCE_COUNT == MAX_INSTANCES == S.MAX_INSTANCES == 4096
    with pytest.raises(FastsimInputError, match="goes past 4096 instances"):
        _instance_counts("100000")


def test_table_row_of_an_unstable_count_says_so(capsys):
    """`--instance-counts 1,2 --seeds 2 --horizon 60 --tol 0.02` printed 0.000 for count 1 (its probes
    contradict each other); the row now says unstable, its interval and ratio n/a, and a note says why."""
    rc, out, err = run(capsys, *CHAT_B200, "--instance-counts", "1,2", "--seeds", "2", "--horizon", "60",
                       "--tol", "0.02")
    assert rc == 0, err
    row = next(ln.split() for ln in out.splitlines() if ln.startswith("1 "))
    assert row[3] == "unstable" and row[7] == "n/a" and row[8] == "n/a"
    assert "0.000 - 0.000" not in out
    assert any(ln.startswith("note: instances 1: unstable: no stable answer at --horizon 60 s and --seeds 2: probes "
                             "at ") for ln in (out + err).splitlines())


def test_counts_refuse_a_plan_verified_under_an_engine_policy(capsys, tmp_path):
    """`--from-plan vllm_plans.json --instance-counts 1,2` silently ran the lecture scheduler (the counts'
    searches simulate it only) and said each answer equals the one-plan search's, which runs vllm."""
    rc, out, _ = run(capsys, "plan", "--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--no-verify",
                     "--format", "json", "--top-k", "1")
    assert rc == 0
    d = json.loads(out)
    d["plans"][0]["verification"] = {"passed": True, "policy": "vllm"}
    f = tmp_path / "vllm_plans.json"
    f.write_text(json.dumps(d))
    rc, out, err = run(capsys, "capacity", "--scenario", "chat", "--from-plan", str(f), "--instance-counts", "1,2",
                       *SMALL)
    assert rc == 2 and out == ""
    assert err.startswith(f"fastsim capacity: error: --from-plan: got {str(f)!r}; allowed: a plan verified under "
                          "the lecture policy with --instance-counts (this one was verified under the vllm policy")
    assert "give --policy lecture" in err
    # an explicit --policy lecture searches the counts under the lecture scheduler, and says so
    rc, out, err = run(capsys, "capacity", "--scenario", "chat", "--from-plan", str(f), "--instance-counts", "1",
                       "--policy", "lecture", *SMALL, "--tol", "0.1", "--format", "json")
    assert rc == 0, err
    notes = json.loads(out)["notes"]
    assert "--from-plan: the plan was verified under the vllm policy; --policy lecture runs instead" in notes
    assert any("(--instances N without --instance-counts, with --policy lecture)" in n for n in notes)
