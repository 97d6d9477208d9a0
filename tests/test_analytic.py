"""The analytic screen against the lecture's figures (SPEC §9) and exercises 2, 4, 5, 6."""
import pytest

from fastsim.analytic import Demand, ScreenOptions, cost_usd_per_million_output_tokens, instances_needed, screen
from fastsim.catalog import default_catalog, model_from_hf_config
from fastsim.errors import FastsimInputError


@pytest.fixture(scope="module")
def cat():
    return default_catalog()


def top(df, **match):
    sel = df[df.feasible]
    for k, v in match.items():
        sel = sel[sel[k] == v]
    return sel.iloc[0]


def test_exercise2_cost_formula():
    assert cost_usd_per_million_output_tokens(2, 4.0, 20, 250) == pytest.approx(0.4444444, rel=1e-6)


def test_exercise4_prefill_utilisation():
    s, s_b, ttft, tail = 0.12, 0.12, 1.0, 2.3
    a = ttft - s
    rho = a / (a + tail * s_b / 2)
    assert rho == pytest.approx(0.8644, abs=1e-4)
    assert round(rho, 2) == 0.86


def test_exercise5_p90_length(cat):
    assert cat.scenario("coding-agent").prompt.quantile(0.9) == pytest.approx(16195, abs=1)


def test_exercise6_whole_instances():
    assert int(instances_needed(20, 16.2)) == 2
    assert 20 / (2 * 16.2) == pytest.approx(0.617, abs=1e-3)
    assert int(instances_needed(20, 10.0)) == 2  # exact fit does not round up
    assert int(instances_needed(20, 0.0)) == 0


def test_kv_bytes_per_token(cat, tmp_path):
    m = cat.model("llama-3.1-70b")
    assert m.kv_bytes_per_token(2) == 327_680
    assert m.kv_bytes_per_token_per_gpu(2, 8) == 40_960
    assert m.kv_bytes_per_token_per_gpu(2, 16) == 40_960  # one KV head per GPU, replicated
    assert m.total_params == pytest.approx(70.55e9, rel=1e-3)
    assert m.matmul_params == pytest.approx(69.50e9, rel=1e-3)
    cfg = tmp_path / "config.json"
    cfg.write_text('{"num_hidden_layers": 26, "hidden_size": 2560, "num_attention_heads": 32,'
                   ' "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 9728,'
                   ' "vocab_size": 151936, "tie_word_embeddings": true}')
    g = model_from_hf_config(str(cfg))
    assert g.head_dim == 128  # never hidden / heads = 80
    assert g.kv_bytes_per_token(2) == 2 * 26 * 4 * 128 * 2
    assert g.matmul_params == g.total_params  # tied: the shared matrix is read as the LM head


def test_hf_config_missing_key(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"num_hidden_layers": 26, "hidden_size": 2560}')
    with pytest.raises(FastsimInputError, match="num_attention_heads"):
        model_from_hf_config(str(cfg))


def test_chat_cheapest_plans(cat):
    s = cat.scenario("chat")
    df = screen(s.model, Demand.from_scenario(s))
    best = df.iloc[0]
    assert (best.gpu, best.precision, best["mode"], best.tp, best.instances) == ("B200", "FP8", "colocated", 1, 2)
    assert best.usd_per_million_output_tokens == pytest.approx(0.444, rel=0.01)
    h100 = top(df, gpu="H100", precision="FP8", mode="colocated", tp=2)
    assert h100.instances == 2 and h100.gpus == 4
    assert h100.usd_per_million_output_tokens == pytest.approx(best.usd_per_million_output_tokens, rel=1e-9)
    # one B200 FP8 TP1 instance: lecture 16.2 req/s (SPEC §3: 16.6 with these constants)
    assert best.instance_capacity_req_per_s == pytest.approx(16.2, rel=0.05)
    # H200 FP8 TP1: the lecture's efficiency cost at 5 req/s implies 6.56; 3 instances must not carry 20
    h200 = top(df, gpu="H200", precision="FP8", mode="colocated", tp=1)
    assert h200.instance_capacity_req_per_s == pytest.approx(6.56, rel=0.02)
    assert h200.instances == 4
    assert best.efficiency_usd_per_million_output_tokens == pytest.approx(0.274, rel=0.03)


@pytest.mark.parametrize("name,cost", [("coding-agent", 1.389), ("offline-batch", 0.556), ("low-latency-8b", 0.139)])
def test_other_scenarios_cheapest_cost(cat, name, cost):
    s = cat.scenario(name)
    df = screen(s.model, Demand.from_scenario(s))
    assert df.iloc[0].usd_per_million_output_tokens == pytest.approx(cost, rel=0.01)


def test_every_feasible_plan_meets_its_analytic_checks(cat):
    s = cat.scenario("chat")
    d = Demand.from_scenario(s)
    df = screen(s.model, d)
    feas = df[df.feasible]
    assert len(feas) > 5
    assert (feas.capacity_req_per_s >= d.rate_req_per_s * (1 - 1e-9)).all()
    assert (df[~df.feasible].reason.str.len() > 0).all()


def test_infeasible_is_a_row_not_an_error(cat):
    s = cat.scenario("chat")
    df = screen("llama-3.1-405b", Demand.from_scenario(s), options=ScreenOptions(gpus=("H100",), tps=(1,)))
    assert not df.feasible.any()
    assert "memory" in df.reason.iloc[0]


def test_grid_validation():
    with pytest.raises(FastsimInputError, match="tp"):
        ScreenOptions(tps=(3,))
    with pytest.raises(FastsimInputError, match="mode"):
        ScreenOptions(modes=("pipelined",))
    with pytest.raises(FastsimInputError, match="rate_req_per_s"):
        Demand(0.0, 1, 0.05, 1000, 250, 2000, 500)


def test_mean_screening_is_more_optimistic(cat):
    s = cat.scenario("coding-agent")
    p90 = screen(s.model, Demand.from_scenario(s))
    mean = screen(s.model, Demand.from_scenario(s, latency_quantile=None))
    assert mean.feasible.sum() >= p90.feasible.sum()


def test_disaggregated_screen_of_refused_layouts_is_typed_refused_rows(cat):
    demand = Demand.from_scenario(cat.scenario("chat"))
    full = screen("llama-3.1-70b", demand, options=ScreenOptions(gpus=("H100",)))
    df = screen("llama-3.1-70b", demand, options=ScreenOptions(modes=("disaggregated",), layouts=("dp+ep",)))
    assert list(df.columns) == list(full.columns)
    # one refused row per GPU x precision (every TP refused: no TP pair to pick), never a plan
    assert len(df) == 6 and not df.feasible.any() and df.plan.isna().all()
    assert set(df.reason) == {"llama-3.1-70b is dense: expert parallelism and data-parallel attention do not apply"}
    assert (df[["tp", "prefill_tp", "decode_tp", "instances", "gpus"]] == 0).all().all()


def test_a_screen_without_rows_has_every_column_and_dtype(cat):
    demand = Demand.from_scenario(cat.scenario("chat"))
    for opts, ref in ((ScreenOptions(modes=()), ScreenOptions(gpus=("H100",))),
                      (ScreenOptions(modes=(), spec_alpha=0.7, prefix_hit_fraction=0.2),
                       ScreenOptions(gpus=("H100",), spec_alpha=0.7, prefix_hit_fraction=0.2))):
        empty = screen("llama-3.1-70b", demand, options=opts)
        full = screen("llama-3.1-70b", demand, options=ref)
        assert len(empty) == 0
        assert dict(empty.dtypes) == dict(full.dtypes)
        assert len(empty[empty.feasible]) == 0 and empty.reason.value_counts().empty


def test_huge_rates_never_overflow_the_instance_count(cat, recwarn):
    import math
    assert int(instances_needed(1e21, 1.0)) == 2 ** 53
    assert int(instances_needed(1e300, 1e-300)) == 2 ** 53
    assert int(instances_needed(1e21, 0.0)) == 0
    demand = Demand.from_scenario(cat.scenario("chat"), rate_req_per_s=1e21)
    df = screen("llama-3.1-70b", demand)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    assert not df.feasible.any()
    assert (df[["instances", "gpus", "prefill_instances", "decode_instances"]] == 0).all().all()
    assert (df.capacity_req_per_s == 0).all() and (df.usd_per_million_output_tokens == math.inf).all()
    fits = ~df.reason.str.contains("memory")
    assert set(df.reason[fits & (df["mode"] == "colocated")]) == {
        "needs more than 4,096 instances to carry 1e+21 req/s (4,096 is the most a plan may have of a kind)"}
    assert df.reason[fits & (df["mode"] == "disaggregated")].str.match(r"(prefill|decode): needs more than 4,096").all()


def test_instance_limit_is_4096_of_a_kind(cat):
    from fastsim.analytic import MAX_INSTANCES, plan_for
    assert MAX_INSTANCES == 4096
    chat = cat.scenario("chat")
    opts = ScreenOptions(gpus=("B200",), precisions=("FP8",), tps=(1,), modes=("colocated",))
    cap = screen("llama-3.1-70b", Demand.from_scenario(chat), options=opts).instance_capacity_req_per_s.iloc[0]
    at = screen("llama-3.1-70b", Demand.from_scenario(chat, rate_req_per_s=4096 * cap), options=opts).iloc[0]
    past = screen("llama-3.1-70b", Demand.from_scenario(chat, rate_req_per_s=4096.5 * cap), options=opts).iloc[0]
    assert (at.feasible, at.instances, at.gpus) == (True, 4096, 4096)
    assert (past.feasible, past.instances) == (False, 0) and past.reason.startswith("needs more than 4,096 instances")
    d = Demand.from_scenario(chat)
    assert plan_for("llama-3.1-70b", d, gpu="B200", precision="FP8", instances=4096, catalog=cat).instances == 4096
    for kw in (dict(instances=4097), dict(mode="disaggregated", prefill_instances=10 ** 12),
               dict(mode="disaggregated", decode_instances=4097)):
        name = next(iter(kw.keys() - {"mode"}))
        with pytest.raises(FastsimInputError, match=f"{name}: got {kw[name]}; allowed: an integer from 1 to 4,096"):
            plan_for("llama-3.1-70b", d, gpu="B200", precision="FP8", catalog=cat, **kw)
    # sizing past the limit is refused by the rate that asks for it
    with pytest.raises(FastsimInputError, match=r"rate_req_per_s: got 1e\+21; allowed: a rate that at most 4,096"):
        plan_for("llama-3.1-70b", Demand.from_scenario(chat, rate_req_per_s=1e21), gpu="B200", precision="FP8",
                 catalog=cat)


def test_moe_plan_at_tp1_is_listed_once(cat):
    demand = Demand.from_scenario(cat.scenario("chat"))
    df = screen("qwen3-30b-a3b", demand)
    # at TP1 tp, tp+ep and dp+ep are one plan (EP1, DP1): once per GPU x precision, under tp
    tp1 = df[(df["mode"] == "colocated") & (df.tp == 1)]
    assert len(tp1) == 6 and set(tp1.layout) == {"tp"}
    assert {p.layout for p in tp1.plan if p is not None} == {"tp"}
    both1 = df[(df["mode"] == "disaggregated") & (df.prefill_tp == 1) & (df.decode_tp == 1)]
    assert len(both1) == len(both1.drop_duplicates(["gpu", "precision"]))
    assert set(both1.layout) <= {"tp"}
    # at TP2 the layouts are three plans
    assert set(df[(df["mode"] == "colocated") & (df.tp == 2)].layout) == {"tp", "tp+ep", "dp+ep"}
    assert not df.drop(columns="plan").duplicated().any()
    # without tp among the layouts the TP1 plan is listed under the first named (as sweep lists it)
    ep = screen("qwen3-30b-a3b", demand, options=ScreenOptions(layouts=("dp+ep", "tp+ep")))
    tp1 = ep[(ep["mode"] == "colocated") & (ep.tp == 1)]
    assert len(tp1) == 6 and set(tp1.layout) == {"dp+ep"}
    # the figures of the plan listed once are those of the plain TP1 plan
    plain = screen("qwen3-30b-a3b", demand, options=ScreenOptions(layouts=("tp",), tps=(1,), modes=("colocated",)))
    a = tp1.sort_values(["gpu", "precision"]).reset_index(drop=True)
    b = plain.sort_values(["gpu", "precision"]).reset_index(drop=True)
    assert (a.capacity_req_per_s == b.capacity_req_per_s).all() and (a.instances == b.instances).all()
