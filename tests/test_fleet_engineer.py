"""What an engineer sizing a fleet reads from ``fastsim plan``: no cheaper plan hidden below the
verified ones, speculative plans verified under a policy that simulates them, one row per
deployment the simulator cannot tell apart, a progress total that counts what is verified."""
import json
import os
import re

import numpy as np
import pytest

from cliutil import run
from fastsim.analytic import Demand, ScreenOptions, plan_for, screen
from fastsim.catalog import default_catalog
from fastsim.planner import plan_deployment
from fastsim.search import SLO, verify
from fastsim.verified import same_deployment_key
from fastsim.workload import seeds_for, synthesize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README_SPEC = ("fastsim plan --scenario chat --model deepseek-v3 --tpot 0.02 --gpu H200 --precision FP8 "
               "--spec-alpha 0.8")


@pytest.fixture(scope="module")
def spec_plans():
    """The README's speculative-decoding example, as JSON (run once for the module: capsys is
    function-scoped, so main runs here with its output redirected)."""
    import contextlib
    import io
    from fastsim.cli import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = main(README_SPEC.split()[1:] + ["--format", "json"])
    assert rc == 0
    return json.loads(out.getvalue())


def test_readme_names_the_speculative_example():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert README_SPEC in text
    assert re.search(r"needs 32 GPUs without it and 8 with the MTP head", text)


def test_readme_speculative_example_ranks_the_8_gpu_mtp_plan_first(spec_plans):
    # the README: at a 20 ms TPOT DeepSeek-V3 on H200 FP8 needs 8 GPUs with the MTP head
    plans = spec_plans["plans"]
    top = plans[0]
    assert top["gpus"] == 8 and top["spec_gamma"] > 0 and top["spec_draft"] == "mtp"
    assert top["verification"]["passed"] and top["verification"]["policy"] == "vllm"
    assert top["verification"]["tpot_p90_s"] <= 0.02
    assert any("chosen automatically" in n and "vllm" in n for n in spec_plans["notes"])


def test_no_cheaper_unverified_plan_is_left_below_a_verified_one(spec_plans):
    plans = spec_plans["plans"]
    costs = [p["usd_per_million_output_tokens"] for p in plans]
    passing_or_not_run = [p["verification"] is None or p["verification"]["passed"] for p in plans]
    # passing and not-simulated plans come first, together by cost
    n = sum(passing_or_not_run)
    assert all(passing_or_not_run[:n]) and not any(passing_or_not_run[n:])
    assert costs[:n] == sorted(costs[:n])
    # every plan not simulated says why
    for i, p in enumerate(plans, 1):
        if p["verification"] is None:
            assert p["null_reasons"]["verification"].startswith("not applicable: not simulated")
            assert any(re.search(rf"\bplans? [0-9, ]*\b{i}\b[0-9, ]* not simulated: ", n) for n in spec_plans["notes"])


def test_readme_without_speculation_needs_32_gpus(capsys):
    rc, out, _ = run(capsys, *README_SPEC.split()[1:-2], "--format", "json")
    assert rc == 0
    top = json.loads(out)["plans"][0]
    assert top["gpus"] == 32 and top["verification"]["passed"]


def _deepseek_tp8(layout, gamma=0):
    cat = default_catalog()
    m = cat.model("deepseek-v3")
    d = Demand.from_scenario(cat.scenario("chat"), tpot_s=0.02)
    o = ScreenOptions(spec_alpha=0.8) if gamma else ScreenOptions()
    return cat, m, d, o, plan_for(m, d, gpu="H200", precision="FP8", tp=8, instances=1, layout=layout, catalog=cat,
                                  options=o, spec_gamma=gamma)


@pytest.mark.parametrize("gamma", [0, 4])
def test_tp8_and_tp8_ep8_are_one_deployment_and_simulate_alike(gamma):
    cat, m, d, o, tp = _deepseek_tp8("tp", gamma)
    *_, ep = _deepseek_tp8("tp+ep", gamma)
    *_, dp = _deepseek_tp8("dp+ep", gamma)
    k = same_deployment_key(tp, cat, o.constants, m)
    assert k == same_deployment_key(ep, cat, o.constants, m)
    assert k != same_deployment_key(dp, cat, o.constants, m)
    assert k != same_deployment_key(tp.with_instances(instances=2), cat, o.constants, m)
    # the key is sound: the simulator gives the two layouts the same figures (the same requests met;
    # the P90s up to the rounding of a sum taken in another order)
    scen = cat.scenario("chat")
    ws = []
    for s in seeds_for(0, 2):
        w = synthesize(scen, 20.0, 60.0, s)
        ws.append((w.arrival_s, w.prompt_tokens, w.output_tokens))
    eng = {"policy": "vllm", "spec_seed": 0} if gamma else None
    va, vb = (verify(p, ws, SLO(d.ttft_s, d.tpot_s), horizon_s=60.0, catalog=cat, constants=o.constants, model=m,
                     engine=eng) for p in (tp, ep))
    assert (va.attainment, va.measured, va.rejected) == (vb.attainment, vb.measured, vb.rejected)
    assert (va.ttft_p90_s, va.tpot_p90_s) == pytest.approx((vb.ttft_p90_s, vb.tpot_p90_s), rel=1e-12)


def test_deepseek_chat_lists_each_deployment_once(capsys):
    rc, out, _ = run(capsys, "plan", "--scenario", "chat", "--model", "deepseek-v3", "--gpu", "H200", "--format",
                     "json")
    assert rc == 0
    doc = json.loads(out)
    plans = doc["plans"]
    seen = set()
    for p in plans:
        v = p["verification"]
        fig = (p["gpu"], p["precision"], p["mode"], p["gpus"], p.get("instances"), p["capacity_req_per_s"],
               v and v["attainment"], v and v["ttft_p90_s"], v and v["tpot_p90_s"])
        assert fig not in seen, fig
        seen.add(fig)
    merged = [p for p in plans if p.get("same_deployment_layouts")]
    assert merged and all(p["same_deployment_layouts"][:2] == ["tp", "tp+ep"] for p in merged)
    assert any("same deployment for the step model" in n for n in doc["notes"])


def test_progress_total_counts_the_configurations_verified():
    cat = default_catalog()
    scen = cat.scenario("chat")
    totals, ticks = [], []
    rep = plan_deployment("llama-3.1-70b", Demand.from_scenario(scen), scen, top_k=1, seeds=1, horizon_s=120.0,
                          options=ScreenOptions(gpus=["B200"], precisions=("FP8",), tps=(1, 2)),
                          progress=lambda: ticks.append(1), on_total=totals.append)
    assert len(totals) == 1 and totals[0] == len(ticks) > len(rep.deployments)
    totals, ticks = [], []
    plan_deployment("llama-3.1-70b", Demand.from_scenario(scen), scen, top_k=2, seeds=1, horizon_s=120.0,
                    options=ScreenOptions(gpus=["B200"], precisions=("FP8",), tps=(1, 2)), search="screen",
                    progress=lambda: ticks.append(1), on_total=totals.append)
    assert totals == [2] and len(ticks) == 2


def test_the_api_default_leaves_speculative_plans_where_their_cost_ranks():
    cat = default_catalog()
    scen = cat.scenario("chat")
    d = Demand.from_scenario(scen, tpot_s=0.02)
    rep = plan_deployment("deepseek-v3", d, scen, top_k=4, seeds=1, horizon_s=60.0,
                          options=ScreenOptions(gpus=["H200"], precisions=("FP8",), tps=(8,), spec_alpha=0.8,
                                                spec_gammas=(4,), modes=("colocated",)),
                          search="screen")      # spec_policy None, the API's default
    costs = [x.usd_per_million_output_tokens for x in rep.deployments]
    assert rep.deployments[0].repair is None and rep.deployments[0].plan.spec_gamma == 4
    assert costs == sorted(costs)


def test_headroom_is_the_simulated_capacity_over_the_target(capsys):
    from fastsim.search import max_sustainable_rates
    argv = ["plan", "--scenario", "chat", "--gpu", "H100", "--precision", "FP8", "--tp", "2", "--mode", "colocated",
            "--seeds", "4", "--horizon", "300"]
    rc, out, _ = run(capsys, *argv, "--headroom")
    assert rc == 0
    assert "analytic capacity req/s" in out and "sim capacity req/s" in out and "headroom" in out
    rc, js, _ = run(capsys, *argv, "--headroom", "--format", "json")
    p = json.loads(js)["plans"][0]
    assert (p["gpu"], p["tp"], p["instances"]) == ("H100", 2, 2)
    cat = default_catalog()
    scen = cat.scenario("chat")
    plan = plan_for(scen.model, Demand.from_scenario(scen), gpu="H100", precision="FP8", tp=2, instances=2,
                    catalog=cat, chunk_tokens=p["chunk_tokens"])
    want = max_sustainable_rates([plan], scen, SLO(1.0, 0.05), seeds=4, horizon_s=300.0, seeds_root=0,
                                 catalog=cat)[0]
    assert p["simulated_capacity_req_per_s"] == want.rate_req_per_s
    assert p["headroom"] == pytest.approx(want.rate_req_per_s / 20.0 - 1.0, rel=1e-12)
    # the analytic screen's 22.8 req/s (14% over 20) is not what the simulator sustains
    assert p["capacity_req_per_s"] > p["simulated_capacity_req_per_s"]
    assert p["headroom"] < 0.1
    rc, _, err = run(capsys, *argv, "--headroom", "--no-verify")
    assert rc == 2 and "--headroom" in err


def test_sweep_table_shows_the_axes_that_vary(capsys):
    base = ["sweep", "--axis", "gpu=B200", "--axis", "precision=FP8", "--axis", "mode=colocated", "--axis", "tp=1",
            "--verify", "none"]
    rc, out, _ = run(capsys, *base, "--axis", "tpot_s=0.03,0.05", "--axis", "max_batch=0,128")
    assert rc == 0
    head = out.splitlines()[1]
    assert "TPOT SLO s" in head and "max_batch" in head and "TTFT SLO s" not in head
    body = out.splitlines()[3:7]
    assert sorted(line.split()[-1] for line in body) == ["128", "128", "cap)", "cap)"]
    rc, out, _ = run(capsys, *base)
    assert rc == 0 and "TPOT SLO s" not in out and "max_batch" not in out


def test_a_calibration_of_h100_bf16_only_says_the_fp8_rows_keep_the_defaults(capsys, tmp_path):
    from fastsim.constants import Calibration, CalibrationEntry
    from fastsim.stepmodel import StepConstants
    f = tmp_path / "cal.toml"
    f.write_text(Calibration((CalibrationEntry("H100", "BF16", StepConstants(eta_compute=0.5),
                                               fitted=("eta_compute",)),)).to_toml())
    rc, out, _ = run(capsys, "plan", "--scenario", "chat", "--gpu", "H100", "--no-verify", "--top-k", "20",
                     "--calibration", str(f), "--format", "json")
    assert rc == 0
    doc = json.loads(out)
    fp8 = [str(i) for i, p in enumerate(doc["plans"], 1) if p["precision"] == "FP8"]
    bf16 = [str(i) for i, p in enumerate(doc["plans"], 1) if p["precision"] == "BF16"]
    assert fp8 and bf16
    note = next(n for n in doc["notes"] if "has no constants for H100 FP8" in n)
    assert re.findall(r"\d+", note.split(":")[0]) == fp8
    assert not any("has no constants for H100 BF16" in n for n in doc["notes"])


def _plotted_cost_scales(monkeypatch, tmp_path, df):
    import matplotlib.figure
    from fastsim.sweep import plot_sweep
    scales = []
    real = matplotlib.figure.Figure.savefig

    def spy(fig, *a, **k):
        scales.append(tuple(ax.get_yscale() for ax in fig.axes[:2]))
        return real(fig, *a, **k)
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", spy)
    plot_sweep(df, str(tmp_path))
    return scales


def test_pareto_cost_axis_is_logarithmic_when_the_costs_span_a_decade(monkeypatch, tmp_path):
    from fastsim.sweep import run_sweep
    narrow = run_sweep({"gpu": ["B200"], "precision": ["FP8"], "tp": [1, 2]}, verify="none")
    c = narrow.loc[narrow.feasible, "usd_per_million_output_tokens"]
    assert c.max() < 10 * c.min()
    assert _plotted_cost_scales(monkeypatch, tmp_path / "a", narrow) == [("linear", "linear")]
    # one outlier 40x the cheapest (as a $158/M plan beside $4/M ones)
    wide = narrow.copy()
    i = wide.index[wide.feasible][-1]
    wide.loc[i, "usd_per_million_output_tokens"] = 40 * c.min()
    assert _plotted_cost_scales(monkeypatch, tmp_path / "b", wide) == [("log", "log")]


FLEET_RATES = [4.0, 6.0, 10.0, 14.0, 20.0, 18.0, 12.0, 8.0, 6.0, 5.0, 4.0, 4.0]
FLEET = ["--scenario", "chat", "--gpu", "B200", "--precision", "FP8", "--tp", "1", "--chunk", "512",
         "--rate-scale", "1", "--capacity", "1=15", "--capacity", "2=30", "--no-spares"]


@pytest.fixture
def fleet_profile(tmp_path):
    path = tmp_path / "two-hours.csv"
    path.write_text("window_start_s,rate_req_per_s\n" + "".join(f"{i * 600},{r}\n" for i, r in enumerate(FLEET_RATES)))
    return str(path)


def test_fleet_cold_start_reads_the_checkpoint_the_emitted_command_loads(capsys, fleet_profile):
    from fastsim.emit import HF_CHECKPOINTS, launch_commands
    cat = default_catalog()
    m = cat.model("llama-3.1-70b")
    rc, out, err = run(capsys, "fleet", "--profile", fleet_profile, *FLEET, "--format", "json")
    assert rc == 0, err
    cs = json.loads(out)["cold_start"]
    # the FP8 plan serves the BF16 checkpoint with --quantization fp8: 141 GB read, not 70.6
    assert HF_CHECKPOINTS["llama-3.1-70b"][1] == "BF16"
    plan = plan_for(m, Demand.from_scenario(cat.scenario("chat")), gpu="B200", precision="FP8", tp=1, instances=1,
                    catalog=cat)
    cmd = launch_commands(plan, "vllm", cat, m)[0]["command"]
    assert "--quantization" in cmd and cmd[cmd.index("--quantization") + 1] == "fp8"
    assert cs["weight_bytes"] == m.total_params * 2
    assert "BF16 weights" in cs["checkpoint"] and "quantized online to FP8" in cs["checkpoint"]
    assert cs["total_s"] == pytest.approx(cs["weight_bytes"] / cs["load_bw_bytes_per_s"] + cs["fixed_start_s"])
    # DeepSeek-V3 ships FP8 weights: an FP8 plan reads FP8 bytes
    from fastsim.fleet.api import checkpoint_bytes
    ds = cat.model("deepseek-v3")
    b, what = checkpoint_bytes(ds, cat.precision("FP8"), cat)
    assert b == ds.total_params * 1.0 and "FP8 weights" in what and "quantized" not in what


def test_fleet_plot_title_names_the_instance_range(capsys, fleet_profile, tmp_path, monkeypatch):
    import fastsim.fleet.api as api
    titles = []
    real = api.plot_fleet

    def spy(res, path, *, title=""):
        titles.append(title)
        return real(res, path, title=title)
    monkeypatch.setattr(api, "plot_fleet", spy)
    import fastsim.fleet.command as fc
    if hasattr(fc, "plot_fleet"):
        monkeypatch.setattr(fc, "plot_fleet", spy)
    rc, _, err = run(capsys, "fleet", "--profile", fleet_profile, *FLEET, "--plot", str(tmp_path / "f.png"))
    assert rc == 0, err
    assert titles and titles[0].endswith("B200 FP8 TP1, 1 to 2 instances (1 to 2 GPUs)"), titles


def test_readme_headroom_example(capsys):
    # README: "On chat, H100 FP8 TP2 x 2 shows 22.8 req/s analytic and about 20.6 simulated: 3% headroom"
    text = " ".join(open(os.path.join(ROOT, "README.md"), encoding="utf-8").read().split())
    assert "H100 FP8 TP2 x 2 shows 22.8 req/s analytic and about 20.6 simulated: 3% headroom, not 14%" in text
    rc, out, _ = run(capsys, "plan", "--scenario", "chat", "--gpu", "H100", "--precision", "FP8", "--tp", "2",
                     "--mode", "colocated", "--headroom", "--format", "json")
    assert rc == 0
    p = json.loads(out)["plans"][0]
    assert (p["tp"], p["instances"]) == (2, 2)
    assert f"{p['capacity_req_per_s']:.1f}" == "22.8" and f"{p['capacity_req_per_s'] / 20 - 1:.0%}" == "14%"
    assert 20.4 <= p["simulated_capacity_req_per_s"] <= 20.8 and f"{p['headroom']:.0%}" == "3%"


def test_max_gpus_no_plan_uses_more_than_is_available(capsys):
    argv = ["plan", "--scenario", "chat", "--model", "deepseek-v3", "--gpu", "H200", "--precision", "FP8",
            "--tp", "8", "--tp", "16", "--seeds", "2", "--horizon", "120", "--format", "json"]
    rc, out, _ = run(capsys, *argv)
    assert rc == 0
    free = json.loads(out)["plans"]
    assert max(p["gpus"] for p in free) > 8
    rc, out, _ = run(capsys, *argv, "--max-gpus", "H200=8")
    assert rc == 0
    doc = json.loads(out)
    assert doc["plans"] and all(p["gpus"] <= 8 for p in doc["plans"])
    # the same plans as without the budget, those within it, in the same order
    assert [(p["layout"], p["gpus"], p.get("instances")) for p in doc["plans"]] == \
        [(p["layout"], p["gpus"], p.get("instances")) for p in free if p["gpus"] <= 8]
    assert any("left out: more GPUs than available (H200 8; --max-gpus)" in n for n in doc["notes"])
    rc, _, err = run(capsys, *argv, "--max-gpus", "B200=8")
    assert rc == 2 and "--max-gpus" in err and "B200=8" in err
    rc, _, err = run(capsys, *argv, "--max-gpus", "H200=0")
    assert rc == 2 and "--max-gpus" in err


def test_sweep_verification_slots_go_to_distinct_deployments():
    from fastsim.sweep import run_sweep
    df = run_sweep({"model": ["deepseek-v3"], "gpu": ["H200"], "precision": ["FP8"], "tp": [8],
                    "layout": ["tp", "tp+ep", "dp+ep"]}, verify="top-k-per-scenario", top_k=3, seeds=1,
                   horizon_s=60.0)
    col = df[df["mode"] == "colocated"].set_index("layout")
    # TP8 and TP8+EP8 are one deployment: the cheaper-ranked one takes the slot, the other none
    assert col.loc["tp", "verified"] and not col.loc["tp+ep", "verified"]
    assert col.loc["tp", "usd_per_million_output_tokens"] == col.loc["tp+ep", "usd_per_million_output_tokens"]
    # three slots, three distinct deployments
    assert int(df["verified"].sum()) == 3


def test_spec_policy_vllm_verifies_speculative_plans_in_the_screen_pipeline():
    cat = default_catalog()
    scen = cat.scenario("chat")
    rep = plan_deployment("deepseek-v3", Demand.from_scenario(scen, tpot_s=0.02), scen, top_k=2, seeds=1,
                          horizon_s=60.0, search="screen", spec_policy="vllm",
                          options=ScreenOptions(gpus=["H200"], precisions=("FP8",), tps=(8,), spec_alpha=0.8,
                                                spec_gammas=(4,), modes=("colocated",)))
    spec = [d for d in rep.deployments if d.plan.spec_gamma]
    assert spec and all(d.repair is not None and d.repair.verification.policy == "vllm" for d in spec)
    assert any("chosen automatically" in n for n in rep.notes)
