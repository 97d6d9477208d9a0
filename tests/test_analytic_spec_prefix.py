"""The analytic screen with speculative decoding and a prefix-cache hit fraction (SPEC §4, §5, §10)."""
import json
import math

import numpy as np
import pytest

from cliutil import run
from fastsim import _analytic_nb as K
from fastsim.analytic import Demand, ScreenOptions, instance_table, plan_for, screen
from fastsim.catalog import default_catalog
from fastsim.errors import FastsimInputError
from fastsim.specdec import round_time_s, spec_decoding, spec_step_params
from fastsim.stepmodel import P_KV_BUDGET_TOKENS, P_MATMUL, P_PEAK, P_QDIM_PF, StepConstants, step_params, step_parts

CAT = default_catalog()
CHAT = CAT.scenario("chat")
D = Demand.from_scenario(CHAT)
NUM = ["kv_budget_tokens", "decode_capacity_req_per_s", "decode_batch", "decode_step_s",
       "prefill_capacity_req_per_s", "prefill_utilisation", "prefill_step_s", "colocated_capacity_req_per_s",
       "colocated_batch", "chunk_tokens", "colocated_step_s", "status", "colocated_status"]


def _row(t, gpu, precision, tp, layout="tp", gamma=None):
    sel = (t.gpu == gpu) & (t.precision == precision) & (t.tp == tp) & (t.layout == layout)
    if gamma is not None:
        sel &= t.spec_gamma == gamma
    r = t[sel]
    assert len(r) == 1
    return r.iloc[0]


# ---- defaults stay bit-identical --------------------------------------------------------------

# figures of the revised screen (SPEC §5: KV cap at P90 P + P90 O, a chunk's attention over its
# prompt's earlier chunks, E[P^2] / E[P] for throughput), which speculative decoding and prefix
# caching leave bit for bit when they are off:
# (scenario, model, options, gpu, precision, tp, layout) -> colocated cap, decode cap, prefill cap,
# decode step, prefill step, colocated step. The coding-agent and qwen3-30b-a3b rows use the
# context-limited length moments (fastsim.workload.served_lengths: the requests whose P + O exceeds
# the model's context are rejected by the simulator and cost no work; coding-agent keeps 99.995% of
# its requests but 1.1% of E[P^2] lies beyond 131,072 tokens, chat on qwen3-30b-a3b's 40,960 less)
BEFORE = [
    ("chat", "llama-3.1-70b", {}, "H100", "BF16", 4, "tp",
     (10.760665672100052, 31.76874056270972, 12.795437876621365, 0.022286058164705885, 0.14303811450325643,
      0.02379034976095852)),
    ("coding-agent", "llama-3.1-70b", {}, "H100", "FP8", 8, "tp",
     (3.899752600899646, 24.18849781256958, 3.680159005721438, 0.01870725221674182, 0.46936665159784746,
      0.03285367000196096)),
    ("chat", "qwen3-30b-a3b", dict(gpus=("H100",), precisions=("FP8",)), "H100", "FP8", 1, "tp+ep",
     (69.50342442967978, 69.56653508605514, 80.3059343774757, 0.019147137526368912, 0.012728854284195734,
      0.019164523553415982)),
    ("chat", "gpt-oss-20b", dict(gpus=("B200",)), "B200", "BF16", 1, "tp",
     (147.2372843027295, 471.6079755502705, 134.80855692032273, 0.01699716802, 0.01127635027892053,
      0.013909520334463504)),
]


@pytest.mark.parametrize("scen, model, kw, gpu, prec, tp, layout, figures", BEFORE)
def test_default_screen_is_bit_identical_to_before(scen, model, kw, gpu, prec, tp, layout, figures):
    t = instance_table(model, Demand.from_scenario(CAT.scenario(scen)), options=ScreenOptions(**kw))
    r = _row(t, gpu, prec, tp, layout)
    assert (r.colocated_capacity_req_per_s, r.decode_capacity_req_per_s, r.prefill_capacity_req_per_s,
            r.decode_step_s, r.prefill_step_s, r.colocated_step_s) == figures
    assert "spec_gamma" not in t.columns


def test_default_plans_are_bit_identical_and_carry_no_new_fields():
    df = screen(CHAT.model, D)
    assert df.efficiency_usd_per_million_output_tokens[0] == 0.2708740648564779      # lecture 0.274
    assert not {"spec_gamma", "spec_alpha", "spec_draft", "prefix_hit_fraction"} & set(df.columns)
    d = df.plan[0].to_dict()
    assert not {"spec_gamma", "spec_alpha", "spec_draft", "prefix_hit_fraction"} & set(d)
    coding = screen(CHAT.model, Demand.from_scenario(CAT.scenario("coding-agent")))
    assert coding.efficiency_usd_per_million_output_tokens[0] == 1.2780686336900149


def test_both_kernels_agree_without_speculation_and_hits():
    """instances_spec_nb with gamma 0, one token per round and no hits is instances_nb, to the bit."""
    t = instance_table(CHAT.model, D)
    from fastsim.analytic import _grid_arrays
    rows, params = _grid_arrays(CAT.model(CHAT.model), CAT, ScreenOptions())
    n = len(rows)
    dm = np.array([[D.mean_prompt_tokens, D.mean_output_tokens, D.latency_prompt_tokens, D.latency_output_tokens,
                    D.ttft_s, D.tpot_s, 0.85, 2.3, D.work_prompt_tokens, 0.0]])
    outs = [np.zeros(n, dt) for dt in (np.int64, np.float64, np.int64, np.float64, np.float64, np.float64,
                                        np.float64, np.int64, np.float64, np.int64, np.int64, np.float64)]
    ar = np.arange(n, dtype=np.int64)
    K.instances_spec_nb(params, ar, ar, dm, np.zeros(n, np.int64), np.zeros(n), np.zeros(n, np.int64),
                        np.array([256.0, 512.0, 1024.0, 2048.0]), np.zeros(n), np.ones(n), np.zeros(n), *outs)
    for col, got in zip(["status", "decode_capacity_req_per_s", "decode_batch", "decode_step_s",
                         "prefill_capacity_req_per_s", "prefill_utilisation", "prefill_step_s", "colocated_status",
                         "colocated_capacity_req_per_s", "colocated_batch", "chunk_tokens", "colocated_step_s"], outs):
        assert np.array_equal(t[col].to_numpy(), got, equal_nan=True), col


# ---- speculative decoding ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def spec_table():
    return instance_table(CHAT.model, D, options=ScreenOptions(spec_alpha=0.8))


def test_gamma_zero_rows_are_the_plain_screen(spec_table):
    plain = instance_table(CHAT.model, D)
    t0 = spec_table[spec_table.spec_gamma == 0].reset_index(drop=True)
    for col in NUM:
        assert np.array_equal(t0[col].to_numpy(), plain[col].to_numpy(), equal_nan=True), col
    assert sorted(set(spec_table.spec_gamma)) == [0, 2, 4]
    assert _row(spec_table, "H100", "FP8", 8, gamma=4).spec_tokens_per_round == pytest.approx(3.3616, rel=1e-12)


def test_speculative_rows_use_the_round_time_and_the_shared_budget(spec_table):
    r = _row(spec_table, "H100", "FP8", 8, gamma=4)
    p_t, p_d = spec_step_params(CHAT.model, "H100", "FP8", 8, StepConstants(), spec_decoding(4, 0.8, "llama-3.1-8b"))
    assert r.kv_budget_tokens == p_t[P_KV_BUDGET_TOKENS]
    ctx = D.mean_prompt_tokens + D.mean_output_tokens / 2.0
    assert r.decode_step_s == round_time_s(p_t, p_d, r.decode_batch, ctx, 4)
    # the batch is the largest whose time per token, round / tokens per round, meets 0.85 x TPOT
    limit = 0.85 * D.tpot_s * r.spec_tokens_per_round
    assert r.decode_step_s <= limit < round_time_s(p_t, p_d, r.decode_batch + 1, ctx, 4)
    assert r.decode_capacity_req_per_s == r.decode_batch * r.spec_tokens_per_round / (r.decode_step_s * D.mean_output_tokens)
    # the draft does not fit beside the target on one H100 in FP8: refused as NO_FIT, plain row feasible
    assert _row(spec_table, "H100", "FP8", 1, gamma=2).status == K.NO_FIT
    assert _row(spec_table, "H100", "FP8", 1, gamma=0).status == K.OK


def test_alpha_zero_costs_the_whole_round_per_token():
    """alpha = 0: one token per round, so a token costs draft steps + a (gamma+1)-token verify: strictly worse."""
    t = instance_table(CHAT.model, D, options=ScreenOptions(spec_alpha=0.0, spec_gammas=(2,)))
    r2, r0 = _row(t, "H100", "FP8", 8, gamma=2), _row(t, "H100", "FP8", 8, gamma=0)
    assert r2.spec_tokens_per_round == 1.0
    p_t, p_d = spec_step_params(CHAT.model, "H100", "FP8", 8, StepConstants(), spec_decoding(2, 0.0, "llama-3.1-8b"))
    ctx = D.mean_prompt_tokens + D.mean_output_tokens / 2.0
    b = r2.decode_batch
    per_token = r2.decode_step_s / r2.spec_tokens_per_round
    assert per_token == round_time_s(p_t, p_d, b, ctx, 2)
    assert per_token > round_time_s(p_t, p_d, b, ctx, 0)     # the plain decode step of the same batch
    assert r2.decode_capacity_req_per_s < r0.decode_capacity_req_per_s
    assert r2.colocated_capacity_req_per_s < r0.colocated_capacity_req_per_s


@pytest.mark.parametrize("gamma", [2, 4])
def test_higher_alpha_never_lowers_capacity(gamma):
    demand = Demand.from_scenario(CHAT, tpot_s=0.02)
    caps = []
    for a in np.linspace(0.0, 0.95, 12):
        t = instance_table(CHAT.model, demand, options=ScreenOptions(spec_alpha=float(a), spec_gammas=(gamma,)))
        t = t[t.spec_gamma == gamma]
        caps.append(t[["decode_capacity_req_per_s", "colocated_capacity_req_per_s"]].to_numpy())
    caps = np.stack(caps)
    assert (np.diff(caps, axis=0) >= 0).all()
    assert (caps[-1] > caps[0]).any()


def test_speculation_wins_where_decode_latency_binds():
    """DeepSeek-V3 at a 20 ms TPOT: the MTP head lets fewer GPUs meet it (the published MTP deployment)."""
    d = Demand.from_scenario(CHAT, tpot_s=0.02)
    plain = screen("deepseek-v3", d, options=ScreenOptions(gpus=("H200",), precisions=("FP8",)))
    spec = screen("deepseek-v3", d, options=ScreenOptions(gpus=("H200",), precisions=("FP8",), spec_alpha=0.8))
    best = spec.plan[0]
    assert best.spec_gamma > 0 and best.spec_draft == "mtp" and best.spec_alpha == 0.8
    assert spec.usd_per_million_output_tokens[0] < plain.usd_per_million_output_tokens[0]
    assert "speculative decoding gamma" in best.describe()
    d2 = best.to_dict()
    assert (d2["spec_gamma"], d2["spec_alpha"], d2["spec_draft"]) == (best.spec_gamma, 0.8, "mtp")
    assert best.spec.gamma == best.spec_gamma


def test_plan_for_takes_a_gamma():
    opts = ScreenOptions(spec_alpha=0.8)
    p = plan_for(CHAT.model, D, gpu="H100", precision="FP8", tp=8, options=opts, spec_gamma=4)
    t = instance_table(CHAT.model, D, options=opts)
    assert p.spec_gamma == 4 and p.spec_draft == "llama-3.1-8b"
    assert p.instance_capacity_req_per_s == _row(t, "H100", "FP8", 8, gamma=4).colocated_capacity_req_per_s
    assert plan_for(CHAT.model, D, gpu="H100", precision="FP8", tp=8, options=opts).spec_gamma == 0
    with pytest.raises(FastsimInputError, match="spec_gamma"):
        plan_for(CHAT.model, D, gpu="H100", precision="FP8", tp=8, spec_gamma=2)


@pytest.mark.parametrize("kw, field", [
    (dict(spec_alpha=1.0), "spec_alpha"), (dict(spec_alpha=-0.2), "spec_alpha"), (dict(spec_alpha="x"), "spec_alpha"),
    (dict(spec_gammas=()), "spec_gammas"), (dict(spec_gammas=(0,)), "spec_gammas"), (dict(spec_gammas=(2.5,)), "spec_gammas"),
    (dict(spec_draft=""), "spec_draft"), (dict(prefix_hit_fraction=1.0), "prefix_hit_fraction"),
    (dict(prefix_hit_fraction=-0.1), "prefix_hit_fraction"), (dict(prefix_hit_fraction=True), "prefix_hit_fraction"),
])
def test_screen_options_refuse_bad_values(kw, field):
    with pytest.raises(FastsimInputError) as e:
        ScreenOptions(**kw)
    assert e.value.field == field


def test_unknown_or_foreign_draft_is_an_error():
    with pytest.raises(FastsimInputError):
        screen(CHAT.model, D, options=ScreenOptions(spec_alpha=0.8, spec_draft="deepseek-v3"))


# ---- prefix caching ----------------------------------------------------------------------------

def test_prefix_hits_cut_the_prefill_by_exactly_the_skipped_compute():
    """B200 FP8 TP1, P90 prompt P: a prefix hit h skips 2 x matmul params x hP FLOPs and the cached
    tokens' own causal attention 2 x L x q x (hP)^2; the prefill is compute-bound before and after."""
    h = 0.5
    base = _row(instance_table(CHAT.model, D, options=ScreenOptions(gpus=("B200",), precisions=("FP8",))),
                "B200", "FP8", 1)
    hit = _row(instance_table(CHAT.model, D, options=ScreenOptions(gpus=("B200",), precisions=("FP8",),
                                                                   prefix_hit_fraction=h)), "B200", "FP8", 1)
    p = step_params(CAT.model(CHAT.model), CAT.gpu("B200"), CAT.precision("FP8"), 1)
    P = D.latency_prompt_tokens
    skipped = 2.0 * p[P_MATMUL] * h * P + 2.0 * 80 * p[P_QDIM_PF] * (h * P) ** 2
    w, kv, comp, ar, a2a = step_parts(p, (1 - h) * P, h * P, 2.0 * 80 * p[P_QDIM_PF] * P * P * (1 - h * h))
    assert comp > w + kv and ar == 0.0                  # compute-bound, no all-reduce at TP1
    assert base.prefill_step_s - hit.prefill_step_s == pytest.approx(skipped / (0.6 * p[P_PEAK]), rel=1e-9)
    assert hit.prefill_capacity_req_per_s > base.prefill_capacity_req_per_s
    # KV and decode are untouched: a cached token is still held and read
    assert hit.kv_budget_tokens == base.kv_budget_tokens
    assert hit.decode_capacity_req_per_s == base.decode_capacity_req_per_s
    # colocated: the chunk balance counts only the computed prompt tokens, so the capacity rises
    assert hit.colocated_capacity_req_per_s > base.colocated_capacity_req_per_s
    b, c, s = hit.colocated_batch, hit.chunk_tokens, hit.colocated_step_s
    assert hit.colocated_capacity_req_per_s == pytest.approx(
        min(b / D.mean_output_tokens, c / ((1 - h) * D.mean_prompt_tokens)) / s, rel=1e-12)


def test_prefix_hits_let_a_ttft_bound_configuration_through():
    """Coding-agent prompts on one H100 FP8 TP2: the colocated TTFT check counts ceil((1 - h) P / c) chunks."""
    d = Demand.from_scenario(CAT.scenario("coding-agent"), ttft_s=0.6)
    o = dict(gpus=("H100",), precisions=("FP8",), tps=(2,), modes=("colocated",))
    base = _row(instance_table(CHAT.model, d, options=ScreenOptions(**o)), "H100", "FP8", 2)
    hit = _row(instance_table(CHAT.model, d, options=ScreenOptions(prefix_hit_fraction=0.8, **o)), "H100", "FP8", 2)
    assert base.colocated_status == K.TTFT_UNREACHABLE
    assert hit.colocated_status == K.OK
    assert math.ceil(0.2 * d.latency_prompt_tokens / hit.chunk_tokens) * hit.colocated_step_s <= d.ttft_s / 2
    df = screen(CHAT.model, d, options=ScreenOptions(prefix_hit_fraction=0.8, **o))
    assert df.prefix_hit_fraction[0] == 0.8 and df.plan[0].prefix_hit_fraction == 0.8
    assert df.plan[0].to_dict()["prefix_hit_fraction"] == 0.8


# ---- command line ------------------------------------------------------------------------------

def test_cli_plan_screens_speculation(capsys):
    rc, out, err = run(capsys, "plan", "--scenario", "chat", "--tpot", "0.02", "--model", "deepseek-v3",
                       "--gpu", "H200", "--precision", "FP8", "--spec-alpha", "0.8", "--spec-gamma", "1,3",
                       "--no-verify", "--format", "json")
    assert rc == 0, err
    plans = json.loads(out)["plans"]
    assert {p["spec_gamma"] for p in plans} <= {0, 1, 3} and plans[0]["spec_gamma"] > 0
    assert all(p["spec_alpha"] == 0.8 and p["spec_draft"] == "mtp" for p in plans)
    rc, out, err = run(capsys, "plan", "--scenario", "chat", "--spec-alpha", "0.8", "--no-verify")
    assert rc == 0, err
    assert "spec dec" in out and "draft llama-3.1-8b" in out and "gamma 2" in out


def test_cli_plan_prefix_hit_and_defaults(capsys):
    rc, out, _ = run(capsys, "plan", "--scenario", "chat", "--no-verify", "--format", "json")
    plain = json.loads(out)["plans"]
    assert not {"spec_gamma", "prefix_hit_fraction"} & set(plain[0])
    rc, out, err = run(capsys, "plan", "--scenario", "chat", "--prefix-hit", "0.5", "--no-verify", "--format", "json")
    assert rc == 0, err
    hit = json.loads(out)["plans"]
    assert hit[0]["prefix_hit_fraction"] == 0.5
    assert hit[0]["usd_per_million_output_tokens"] <= plain[0]["usd_per_million_output_tokens"]


@pytest.mark.parametrize("argv, flag", [
    (["--spec-gamma", "2"], "--spec-gamma"), (["--spec-draft", "mtp"], "--spec-draft"),
    (["--spec-alpha", "1"], "--spec-alpha"), (["--spec-alpha", "0.8", "--spec-gamma", "0"], "--spec-gamma"),
    (["--spec-alpha", "0.8", "--spec-draft", "deepseek-v3"], "--spec-draft"), (["--prefix-hit", "1.5"], "--prefix-hit"),
])
def test_cli_bad_speculation_flags(capsys, argv, flag):
    rc, out, err = run(capsys, "plan", "--scenario", "chat", "--no-verify", *argv)
    assert rc == 2 and flag in err and len(err.strip().splitlines()) == 1


def test_planner_does_not_pass_off_a_plain_simulation_as_a_speculative_one():
    from fastsim.planner import plan_deployment
    rep = plan_deployment(CHAT.model, D, CHAT, top_k=3, seeds=1, horizon_s=60.0, search="screen",
                          options=ScreenOptions(spec_alpha=0.8, gpus=("B200",), precisions=("FP8",)))
    spec = [d for d in rep.deployments if d.plan.spec_gamma]
    plain = [d for d in rep.deployments if not d.plan.spec_gamma]
    assert spec and plain
    assert all(d.repair is None for d in spec) and all(d.repair is not None for d in plain)
    k = [i for i, d in enumerate(rep.deployments, 1) if d.plan.spec_gamma]
    assert f"plan{'s' if len(k) > 1 else ''} {', '.join(map(str, k))} not simulated: speculative decoding" in " ".join(rep.notes)
    reason = spec[0].to_dict()["null_reasons"]["verification"]
    assert "speculative decoding" in reason
    assert spec[0].to_dict()["spec_gamma"] == spec[0].plan.spec_gamma
