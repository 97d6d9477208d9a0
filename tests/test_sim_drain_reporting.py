"""What a drained ``fastsim simulate`` run reports: its horizon, its pooled row, its plot, its bounds and words."""
import json
from pathlib import Path

import numpy as np
import pytest

from cliutil import run
from fastsim.workload import MAX_REQUESTS

PLAN = ["--gpu", "H100", "--precision", "FP8", "--instances", "1"]
SCEN = ["--scenario", "chat", "--model", "llama-3.1-8b"]
README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def sim_json(capsys, *argv):
    rc, out, err = run(capsys, "simulate", *argv, "--format", "json")
    assert rc == 0, err
    return json.loads(out)


def _trace(path, times, p=300, o=40):
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    + "".join(f"{t},{p + i},{o + i % 7}\n" for i, t in enumerate(times)))
    return str(path)


@pytest.mark.parametrize("extra", [["--requests", "30", "--offline", "--lengths", "fixed:512,20"],
                                   ["--requests", "30", "--rate", "4"]])
def test_a_drained_run_has_no_horizon_but_its_makespan(capsys, extra):
    (rec,) = sim_json(capsys, *SCEN, *PLAN, *extra)["runs"]
    assert rec["drained"] is True and rec["horizon_s"] is None
    why = rec["null_reasons"]["horizon_s"]
    assert why.startswith("not applicable: the run drains") and "makespan_s" in why
    assert 0 < rec["makespan_s"] < 60


def test_a_drained_trace_has_no_horizon(capsys, tmp_path):
    trace = _trace(tmp_path / "t.csv", [i * 0.2 for i in range(20)])
    (rec,) = sim_json(capsys, "--trace", trace, "--model", "llama-3.1-8b", "--ttft", "1", "--tpot", "0.05", *PLAN,
                      "--drain")["runs"]
    assert rec["horizon_s"] is None and "makespan_s" in rec["null_reasons"]["horizon_s"]


def test_the_pooled_row_of_a_drained_run_is_consistent(capsys):
    doc = sim_json(capsys, *SCEN, *PLAN, "--requests", "60", "--rate", "5", "--seeds", "3")
    *seeds, pooled = doc["runs"]
    assert pooled["seed_index"] == "all" and len(seeds) == 3
    for k in ("requests", "finished", "rejected", "output_tokens"):
        assert pooled[k] == sum(s[k] for s in seeds), k
    for s in seeds:
        assert s["output_tokens_per_s"] == pytest.approx(s["output_tokens"] / s["makespan_s"], rel=1e-12)
    assert pooled["output_tokens_per_s"] == pytest.approx(np.mean([s["output_tokens_per_s"] for s in seeds]),
                                                          rel=1e-12)
    # no pooled makespan whose quotient with the summed tokens would contradict the throughput
    assert pooled["makespan_s"] is None and pooled["horizon_s"] is None
    assert pooled["null_reasons"]["makespan_s"].startswith("not applicable: the seeds are separate runs")
    note = next(n for n in doc["notes"] if n.startswith("row 'all' pools the seeds"))
    assert "output_tokens are sums over the seeds" in note and "mean of the seeds' output tokens/s" in note
    text = " ".join(README.split())
    assert "`output_tokens` are sums over the seeds; `output_tokens_per_s` is the mean of the seeds' output tokens/s" \
        in text and "`makespan_s` is null" in text


def test_the_plot_of_a_drained_run_ends_at_its_last_finish(capsys, tmp_path, monkeypatch):
    import fastsim.plots as P
    made = []
    real = P._figure

    def keep(*a, **k):
        fig, axes = real(*a, **k)
        made.append(axes)
        return fig, axes
    monkeypatch.setattr(P, "_figure", keep)
    png = tmp_path / "d.png"
    (rec,) = sim_json(capsys, *SCEN, *PLAN, "--requests", "40", "--offline", "--lengths", "fixed:512,20",
                      "--plot", str(png))["runs"]
    assert png.stat().st_size > 0
    load = made[-1][2]
    assert load.get_xlim() == pytest.approx((0.0, rec["makespan_s"]), rel=1e-12)
    (line,) = load.get_lines()
    assert line.get_xdata().max() <= rec["makespan_s"]


def test_requests_above_the_drained_bound_are_refused_with_it(capsys):
    from fastsim.sim.drain import DRAIN_BYTES_PER_REQUEST, DRAIN_MEMORY_BYTES, MAX_DRAIN_REQUESTS
    assert MAX_DRAIN_REQUESTS < MAX_REQUESTS
    assert MAX_DRAIN_REQUESTS * DRAIN_BYTES_PER_REQUEST <= DRAIN_MEMORY_BYTES <= 24 * 2 ** 30
    n = MAX_DRAIN_REQUESTS + 1
    rc, _, err = run(capsys, "simulate", *SCEN, *PLAN, "--requests", str(n), "--offline")
    assert rc == 2 and "Traceback" not in err
    assert f"error: --requests: got {n}; allowed: 1 to {MAX_DRAIN_REQUESTS:,} for a drained run (memory: " in err
    # every seed's requests are held at once: the bound is over N x K
    k = 4
    n = MAX_DRAIN_REQUESTS // k + 1
    rc, _, err = run(capsys, "simulate", *SCEN, *PLAN, "--requests", str(n), "--rate", "5", "--seeds", str(k))
    assert rc == 2 and f"allowed: 1 to {MAX_DRAIN_REQUESTS // k:,} for a drained run of {k} seeds (memory: " in err
    rc, out, _ = run(capsys, "simulate", "--help")
    assert f"1 to {MAX_DRAIN_REQUESTS:,} over all --seeds together" in " ".join(out.split())


def test_an_offline_run_without_counts_says_what_is_missing(capsys):
    rc, _, err = run(capsys, "simulate", *SCEN, "--gpu", "H100", "--precision", "FP8", "--requests", "5", "--offline")
    assert rc == 2
    assert ("--instances was not given, and an offline run needs --instances N or --from-plan FILE.json, since no "
            "rate sizes the plan") in err


@pytest.mark.parametrize("extra", [["--horizon", "20"], ["--requests", "20"]])
def test_a_run_at_a_rate_names_its_arrival_process(capsys, extra):
    rc, out, _ = run(capsys, "simulate", *SCEN, *PLAN, "--rate", "4", *extra, "--arrival", "gamma", "--cv", "3")
    assert rc == 0
    header = out.splitlines()[0]
    assert "4 req/s" in header and "gamma arrivals (cv 3)" in header
    notes = sim_json(capsys, *SCEN, *PLAN, "--rate", "4", *extra, "--arrival", "gamma", "--cv", "3")["notes"]
    assert any(n.startswith("arrivals: gamma at 4 req/s") and "coefficient of variation 3" in n
               and "--burstiness 0.1111" in n for n in notes)
    notes = sim_json(capsys, *SCEN, *PLAN, "--rate", "4", *extra)["notes"]
    assert any(n.startswith("arrivals: Poisson at 4 req/s") for n in notes)


def test_the_readme_states_the_seeds_rule_for_traces_as_it_runs(capsys, tmp_path):
    text = " ".join(README.split())
    assert "a trace replayed without `--drain` runs once over its own duration and notes that `--seeds`" in text
    assert "`--seeds` above 1 is refused where every seed would be the same run and the run drains" in text
    trace = _trace(tmp_path / "t.csv", [i * 0.2 for i in range(20)])
    args = ("--trace", trace, "--model", "llama-3.1-8b", "--ttft", "1", "--tpot", "0.05", *PLAN, "--seeds", "2")
    doc = sim_json(capsys, *args)
    assert len(doc["runs"]) == 1
    assert "a trace replays once over its own duration: --seeds and --horizon do not apply" in doc["notes"]
    rc, _, err = run(capsys, "simulate", *args, "--drain")
    assert rc == 2 and "error: --seeds: got 2" in err
