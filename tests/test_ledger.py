"""The token ledger, the optimization ladder and lecture 16 exercises 1, 2, 3, 9, 10 (SPEC §4, §9)."""
import math

import numpy as np
import pytest

from fastsim.errors import FastsimInputError
from fastsim.ledger import (LedgerResult, cost_usd_per_million_output_tokens, joules_per_token, ladder,
                            ledger, ledger_table, md1_mean_wait_s, memory_per_gpu, min_tp_for_tpot,
                            plot_ledger, speculative_step, speculative_tokens_per_round,
                            weight_read_lower_bound_s)

M70, H100 = "llama-3.1-70b", "H100"
MS = 1e-3


def dec(batch=1, **kw):
    return ledger(M70, H100, "BF16", 8, batch=batch, context_tokens=4096, **kw)


@pytest.fixture(scope="module")
def lad():
    return ladder()


# ---------------------------------------------------------------------------- ledger figures (§9)

@pytest.mark.parametrize("value, lecture_ms", [
    (lambda: dec(1).weight_read_s, 6.48),
    (lambda: dec(1).kv_read_s, 0.0626),          # printed 0.06
    (lambda: dec(64).kv_read_s, 4.01),
    (lambda: dec(1).compute_s, 0.0315),          # printed 0.03
    (lambda: dec(64).compute_s, 2.02),
    (lambda: ledger(M70, H100, "BF16", 8, prefill_tokens=2048).compute_s, 61.13),
    (lambda: ledger(M70, H100, "BF16", 8, prefill_tokens=2048).weight_read_s, 6.48),
    (lambda: dec(1, kernels_per_layer=27, launch_s=4e-6).launch_s, 8.64),
    (lambda: dec(1).step_s, 8.48),
])
def test_ledger_figures_within_1pct(value, lecture_ms):
    assert value() == pytest.approx(lecture_ms * MS, rel=0.01)


def test_printed_digits_match():
    assert round(dec(1).kv_read_s / MS, 2) == 0.06
    assert round(dec(1).compute_s / MS, 2) == 0.03


@pytest.mark.parametrize("kw, lecture_ms", [
    (dict(batch=1), 0.98), (dict(batch=64), 2.08), (dict(prefill_tokens=2048), 25.36)])
def test_communication_within_20pct(kw, lecture_ms):
    r = ledger(M70, H100, "BF16", 8, **kw)
    assert r.allreduce_s == pytest.approx(lecture_ms * MS, rel=0.20)


def test_batch64_step_within_5pct_of_lecture():
    # 13.18 ms with fastsim's all-reduce (1.73 ms) against the lecture's 13.53 ms (2.08 ms)
    r = dec(64)
    assert r.step_s == pytest.approx(13.18 * MS, abs=0.01 * MS)
    assert r.step_s == pytest.approx(13.53 * MS, rel=0.05)
    # the lecture's own parts under the same definition give its step exactly
    assert 6.48 + 4.01 + 2.08 + 0.96 == pytest.approx(13.53, abs=1e-9)


def test_step_definition_and_binding():
    r = dec(64)
    assert r.step_s == max(r.weight_read_s + r.kv_read_s, r.compute_s) + r.allreduce_s + r.launch_s
    assert r.binding == "memory"
    assert dec(1, kernels_per_layer=27, launch_s=4e-6).binding == "launch"
    assert ledger(M70, H100, "BF16", 8, prefill_tokens=2048).binding == "compute"
    assert r.tokens_per_s_per_gpu == pytest.approx(64 / r.step_s / 8)
    assert math.isnan(r.queue_wait_s) and math.isnan(r.utilization)


def test_tp1_has_no_allreduce():
    r = ledger(M70, "B200", "FP8", 1, batch=8)
    assert r.allreduce_s == 0.0


def test_queueing_md1():
    # a prefill step of one 2048-token prompt is an M/D/1 server: one request, one step
    r = ledger(M70, H100, "BF16", 8, prefill_tokens=2048, arrival_rate_req_per_s=5.0)
    rho = 5.0 * r.step_s
    assert r.utilization == pytest.approx(rho)
    assert r.queue_wait_s == pytest.approx(rho * r.step_s / (2 * (1 - rho)))
    assert ledger(M70, H100, "BF16", 8, prefill_tokens=2048, arrival_rate_req_per_s=100.0).queue_wait_s == math.inf
    # a decode step advances 64 requests by one token; each request needs 250 of them
    d = dec(64, arrival_rate_req_per_s=5.0, output_tokens=250)
    assert d.utilization == pytest.approx(5.0 * 250 * d.step_s / 64)
    assert math.isnan(d.queue_wait_s)
    assert md1_mean_wait_s(0.5, 1.0) == pytest.approx(0.5)
    np.testing.assert_allclose(md1_mean_wait_s(np.array([0.5, 2.0]), 1.0), [0.5, np.inf])


def test_ledger_table_matches_scalar():
    t = ledger_table(M70, [H100, "B200"], ["BF16", "FP8"], [1, 2, 4, 8], batch=[1, 8, 64],
                     context_tokens=[1024, 4096], prefill_tokens=[0, 2048])
    assert len(t) == 2 * 2 * 4 * 3 * (2 + 1)           # per batch: two decode contexts, one prefill
    for i in (0, 2, 17, 95, 143):
        row = t.iloc[i]
        r = ledger(M70, row.gpu, row.precision, int(row.tp), batch=int(row.batch),
                   context_tokens=int(row.context_tokens), prefill_tokens=int(row.prefill_tokens))
        for f in LedgerResult._fields:
            if f in ("binding", "fits"):
                assert row[f] == getattr(r, f), f
            elif not math.isnan(getattr(r, f)):
                assert row[f] == getattr(r, f), f
    assert t["tp"].dtype == np.int64 and t["step_s"].dtype == np.float64


# ---------------------------------------------------------------------------- ladder (§4, §9)

def test_ledger_table_prefill_rows_once_per_batch():
    # a prefill step does not read the context: one row per (batch, prompt), not one per context
    t = ledger_table(M70, H100, "BF16", 8, batch=[64, 1], context_tokens=[1024, 4096], prefill_tokens=[0, 2048])
    assert list(zip(t.batch, t.context_tokens, t.prefill_tokens)) == [
        (64, 1024, 0), (64, 4096, 0), (64, 0, 2048), (1, 1024, 0), (1, 4096, 0), (1, 0, 2048)]
    assert not t.duplicated(["batch", "context_tokens", "prefill_tokens"]).any()
    only_prefill = ledger_table(M70, H100, "BF16", 8, batch=[1, 8], context_tokens=[1024, 4096, 8192],
                                prefill_tokens=[2048])
    assert list(only_prefill.batch) == [1, 8] and (only_prefill.context_tokens == 0).all()


def test_memory_check_flags_setups_that_cannot_run():
    # 405B in BF16: 811.7 GB of weights; on 8 x 80 GB (0.9 usable) that is 101.5 GB per GPU > 72 GB
    r = ledger("llama-3.1-405b", H100, "BF16", 8)
    assert not r.fits
    assert r.memory_limit_per_gpu_bytes == pytest.approx(0.9 * 80e9)
    weights = 811.7067776e9 / 8
    assert r.memory_per_gpu_bytes == pytest.approx(weights + 4096 * 2 * 126 * 1 * 128 * 2, rel=1e-12)
    assert r.kv_budget_tokens < 0
    assert not ledger("llama-3.1-405b", H100, "BF16", 1).fits
    assert ledger("llama-3.1-405b", H100, "FP8", 8, batch=64).fits
    # 70B BF16 TP8 at batch 64 x 4096: 17.6 GB of weights + 5.4 GB of KV per GPU
    r = dec(64)
    assert r.fits
    assert r.memory_per_gpu_bytes == pytest.approx(141.107412992e9 / 8 + 64 * 4096 * 2 * 80 * 1 * 128 * 2)
    # the flag is the step model's KV budget: tokens held <= kv_budget_tokens
    from fastsim.catalog import default_catalog
    from fastsim.stepmodel import kv_budget_tokens
    cat = default_catalog()
    budget = kv_budget_tokens(cat.model(M70), cat.precision("BF16"), cat.gpu(H100), 8)
    assert r.kv_budget_tokens == budget
    big = int(budget // 4096) + 1                        # one sequence more than fits
    assert ledger(M70, H100, "BF16", 8, batch=big - 1, context_tokens=4096).fits
    assert not ledger(M70, H100, "BF16", 8, batch=big, context_tokens=4096).fits
    # prefill holds the KV it writes
    assert not ledger(M70, H100, "BF16", 8, batch=big, prefill_tokens=4096).fits
    m = memory_per_gpu(M70, H100, "BF16", 8, [0.0, 1e9])
    assert list(m["fits"]) == [True, False]


def test_context_past_the_model_window_is_an_error():
    for call in (lambda: ledger(M70, H100, "BF16", 8, context_tokens=131_073),
                 lambda: ledger(M70, H100, "BF16", 8, prefill_tokens=200_000),
                 lambda: ledger_table(M70, H100, "BF16", 8, context_tokens=[4096, 10_000_000]),
                 lambda: ladder(context_tokens=10_000_000),
                 lambda: speculative_step(M70, "llama-3.1-8b", H100, "FP8", 8, context_tokens=131_073)):
        with pytest.raises(FastsimInputError) as exc:
            call()
        assert exc.value.field in ("context_tokens", "prefill_tokens")
        assert "131,072" in exc.value.allowed
    assert ledger(M70, H100, "BF16", 8, context_tokens=131_072).step_s > 0


def test_ladder_fits_and_405b_bf16_does_not(lad):
    assert lad.fits.all()
    big = ladder("llama-3.1-405b")
    assert list(big.fits) == [False] * 4 + [True] * 3                  # BF16 levels: 101.5 GB > 72 GB
    assert (big.memory_per_gpu_bytes[:4] > big.memory_limit_per_gpu_bytes[:4]).all()
    # level 5 holds both models: the draft's weights and KV come on top of the target's
    spec = speculative_step("llama-3.1-405b", "llama-3.1-8b", H100, "FP8", 8, batch=64)
    assert big.memory_per_gpu_bytes[5] == spec.memory_per_gpu_bytes
    assert spec.memory_per_gpu_bytes == pytest.approx(spec.verify.memory_per_gpu_bytes
                                                      + spec.draft.memory_per_gpu_bytes)


def test_ladder_on_a_gpu_without_fp8_names_the_gpu():
    with pytest.raises(FastsimInputError) as exc:
        ladder(gpu="A100")
    assert exc.value.field == "gpu" and exc.value.value == "A100"
    assert "FP8" in exc.value.allowed and "A100" in exc.value.allowed and "levels 4 and 5" in exc.value.allowed


def test_ladder_control_row_is_marked(lad):
    assert list(lad.control) == [False] * 6 + [True]
    assert not lad.duplicated(["level", "control"]).any()
    assert lad.control.dtype == bool


def test_ladder_shape(lad):
    assert list(lad.level) == [0, 1, 2, 3, 4, 5, 5]
    assert list(lad.batch) == [1, 1, 1, 64, 64, 64, 1]
    assert list(lad.precision) == ["BF16"] * 4 + ["FP8"] * 3
    assert list(lad.kernels_per_layer) == [27, 27, 12, 12, 12, 12, 12]
    assert list(lad.launch_us) == [4.0] + [1.0] * 6
    for col in ("change", "step_s", "tokens_per_s_per_gpu", "usd_per_million_tokens", "joules_per_token",
                "speedup_vs_level0"):
        assert col in lad.columns


def test_ladder_levels_2_and_3_within_5pct(lad):
    tps = lad.tokens_per_s_per_gpu
    assert tps[2] == pytest.approx(15, rel=0.05)
    assert tps[3] == pytest.approx(591, rel=0.05)


def test_ladder_level5_within_15pct(lad):
    assert lad.tokens_per_s_per_gpu[5] == pytest.approx(1261, rel=0.15)
    assert lad.speedup_vs_level0[5] == pytest.approx(163, rel=0.15)
    assert lad.joules_per_token[5] == pytest.approx(0.56, rel=0.15)


def test_ladder_level0_matches_lecture_implied(lad):
    # 1,261 / 163 = 7.74 tokens/s/GPU: level 0's step of 16.16 ms
    assert lad.tokens_per_s_per_gpu[0] == pytest.approx(1261 / 163, rel=0.01)


def test_ladder_cost_and_energy_columns(lad):
    for _, row in lad.iterrows():
        assert row.usd_per_million_tokens == pytest.approx(2.0 / (row.tokens_per_s_per_gpu * 3600) * 1e6)
        assert row.joules_per_token == pytest.approx(700.0 / row.tokens_per_s_per_gpu)


def test_speculation_helps_less_at_batch_64(lad):
    gain_64 = lad.tokens_per_s_per_gpu[5] / lad.tokens_per_s_per_gpu[4]
    gain_1 = lad.tokens_per_s_per_gpu[6] / ledger(M70, H100, "FP8", 8).tokens_per_s_per_gpu
    assert 1.0 < gain_64 < gain_1


def test_speculative_round_composition():
    r = speculative_step(M70, "llama-3.1-8b", H100, "FP8", 8, batch=64)
    assert r.round_s == pytest.approx(4 * r.draft.step_s + r.verify.step_s)
    assert r.verify.n_tokens == 64 * 5
    assert r.verify.kv_read_s == ledger(M70, H100, "FP8", 8, batch=64).kv_read_s
    assert r.tokens_per_s_per_gpu == pytest.approx(64 * 3.3616 / r.round_s / 8)


def test_ladder_price_and_power_override():
    d = ladder(price_usd_per_gpu_hour=4.0, power_w=1400.0)
    base = ladder()
    np.testing.assert_allclose(d.usd_per_million_tokens, 2 * base.usd_per_million_tokens)
    np.testing.assert_allclose(d.joules_per_token, 2 * base.joules_per_token)


# ---------------------------------------------------------------------------- exercises (§7)

def test_exercise1_batching_is_about_40x_not_64x(lad):
    assert 64 * 8.48 / 13.53 == pytest.approx(40.1, abs=0.05)
    gain = lad.tokens_per_s_per_gpu[3] / lad.tokens_per_s_per_gpu[2]
    assert gain == pytest.approx(64 * lad.step_s[2] / lad.step_s[3], rel=1e-12)
    assert gain == pytest.approx(40.1, rel=0.05)


def test_exercise2_cost():
    assert cost_usd_per_million_output_tokens(2, 4.0, 20.0, 250.0) == pytest.approx(0.4444444444444444, rel=1e-12)
    assert round(cost_usd_per_million_output_tokens(2, 4.0, 20.0, 250.0), 3) == 0.444


def test_exercise3_tpot_lower_bound():
    one = weight_read_lower_bound_s(M70, H100, "FP8", 1)
    assert one == pytest.approx(69.5e9 / 2.68e12, rel=1e-3)
    assert round(one / MS) == 26
    assert round(weight_read_lower_bound_s(M70, H100, "FP8", 4) / MS, 1) == 6.5
    assert min_tp_for_tpot(M70, H100, "FP8", 10e-3) == 4
    assert min_tp_for_tpot(M70, H100, "FP8", 1e-6) is None


def test_exercise9_tokens_per_round():
    assert speculative_tokens_per_round(0.8, 4) == pytest.approx((1 - 0.8 ** 5) / 0.2, rel=1e-15)
    assert round(speculative_tokens_per_round(0.8, 4), 2) == 3.36
    assert speculative_tokens_per_round(0.0, 4) == 1.0


def test_exercise10_energy():
    assert joules_per_token(700, 8, 1261) == pytest.approx(700 * 8 / (1261 * 8), rel=1e-15)
    assert round(joules_per_token(700, 8, 1261), 2) == 0.56


# ---------------------------------------------------------------------------- errors

@pytest.mark.parametrize("call, field", [
    (lambda: dec(0), "batch"),
    (lambda: dec(1.5), "batch"),
    (lambda: ledger(M70, H100, "BF16", 8, context_tokens=-1), "context_tokens"),
    (lambda: ledger(M70, H100, "BF16", 8, prefill_tokens=-5), "prefill_tokens"),
    (lambda: ledger("llama-9", H100, "BF16", 8), "model"),
    (lambda: ledger(M70, "X100", "BF16", 8), "gpu"),
    (lambda: ledger(M70, H100, "FP4", 8), "precision"),
    (lambda: ledger(M70, H100, "BF16", 3), "tp"),
    (lambda: ledger(M70, H100, "BF16", 8, kernels_per_layer=-1), "kernels_per_layer"),
    (lambda: ledger(M70, H100, "BF16", 8, launch_s=-1e-6), "launch_s"),
    (lambda: ledger(M70, H100, "BF16", 8, arrival_rate_req_per_s=0.0), "arrival_rate_req_per_s"),
    (lambda: ledger(M70, H100, "BF16", 8, arrival_rate_req_per_s=5.0), "output_tokens"),
    (lambda: ledger(M70, H100, "BF16", 8, arrival_rate_req_per_s=5.0, output_tokens=0.5), "output_tokens"),
    (lambda: ladder(acceptance=1.0), "acceptance"),
    (lambda: ladder(acceptance=-0.1), "acceptance"),
    (lambda: ladder(gamma=0), "gamma"),
    (lambda: ladder(tp=6), "tp"),
    (lambda: ladder(draft_model="nope"), "model"),
    (lambda: speculative_tokens_per_round(0.8, 0), "gamma"),
    (lambda: ledger_table(M70, H100, "BF16", 8, batch=[1, 0]), "batch"),
    (lambda: ledger_table(M70, H100, "BF16", 8, batch=[]), "batch"),
    (lambda: joules_per_token(0, 8, 1261), "power_w"),
    (lambda: cost_usd_per_million_output_tokens(2, 4.0, 0.0, 250.0), "rate_req_per_s"),
    (lambda: min_tp_for_tpot(M70, H100, "FP8", 0.0), "tpot_s"),
])
def test_bad_inputs_name_the_field(call, field):
    with pytest.raises(FastsimInputError) as exc:
        call()
    assert exc.value.field == field
    assert exc.value.allowed


# ---------------------------------------------------------------------------- plot

def test_plot_ledger_writes_png(tmp_path):
    t = ledger_table(M70, H100, "BF16", 8, batch=[1, 64], prefill_tokens=[0, 2048])
    out = plot_ledger(t, tmp_path / "ledger.png")
    with open(out, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    plot_ledger([dec(1), dec(64)], tmp_path / "two.png", labels=["b1", "b64"])
    with pytest.raises(FastsimInputError):
        plot_ledger([dec(1)], tmp_path / "bad.png", labels=["a", "b"])


def test_plot_ledger_labels_prefill_bars_by_batch(tmp_path, monkeypatch):
    from matplotlib.axes import Axes
    seen = []
    original = Axes.set_xticks

    def spy(self, ticks, labels=None, **kw):
        seen.append(list(labels))
        return original(self, ticks, labels, **kw)

    monkeypatch.setattr(Axes, "set_xticks", spy)
    t = ledger_table(M70, H100, "BF16", 8, batch=[1, 64], context_tokens=[1024, 4096], prefill_tokens=[0, 2048])
    plot_ledger(t, tmp_path / "ledger.png")
    assert seen == [["b1 c1024", "b1 c4096", "b1 prefill 2048", "b64 c1024", "b64 c4096", "b64 prefill 2048"]]


def test_plot_ledger_format_follows_extension(tmp_path):
    out = plot_ledger([dec(1)], tmp_path / "ledger.pdf")
    with open(out, "rb") as fh:
        assert fh.read(5) == b"%PDF-"
    with pytest.raises(FastsimInputError) as exc:
        plot_ledger([dec(1)], tmp_path / "ledger.txt")
    assert exc.value.field == "path"


# ---------------------------------------------------------------------------- the ladder's draft

@pytest.mark.parametrize("model, draft", [
    ("llama-3.1-70b", "llama-3.1-8b"), ("deepseek-v3", "mtp"), ("qwen3-235b-a22b", "qwen3-30b-a3b"),
    ("gpt-oss-120b", "gpt-oss-20b"),
])
def test_ladder_drafts_as_plan_and_simulate_do(model, draft):
    """Level 5 drafts with a model of the target's vocabulary (or its MTP head), named in the frame."""
    from fastsim.catalog import default_catalog
    from fastsim.specdec import default_draft
    df = ladder(model, "H200", 8)
    assert default_draft(model) == draft
    assert list(df["draft"]) == [""] * 5 + [draft] * 2
    assert df["tokens_per_s_per_gpu"].iloc[5] > df["tokens_per_s_per_gpu"].iloc[4]
    if draft != "mtp":
        assert default_catalog().model(draft).vocab == default_catalog().model(model).vocab


def test_ladder_accepts_mtp_and_refuses_another_vocabulary():
    mtp = ladder("deepseek-v3", "H200", 8, draft_model="MTP")
    assert mtp["draft"].iloc[5] == "mtp"
    with pytest.raises(FastsimInputError) as exc:
        ladder("deepseek-v3", "H200", 8, draft_model="llama-3.1-8b")
    assert exc.value.field == "draft_model" and "vocabulary" in exc.value.allowed
    from fastsim.catalog import default_catalog
    with pytest.raises(FastsimInputError, match="vocabulary"):
        ladder("qwen3-235b-a22b", "H200", 8, draft_model=default_catalog().model("llama-3.1-8b"))
    # the 70B default is unchanged: the lecture's draft
    assert ladder()["draft"].iloc[5] == "llama-3.1-8b"


def test_mtp_draft_holds_one_layer_not_a_second_embedding():
    """An MTP head shares the target's embedding and output head: its memory is one layer and the projection."""
    from fastsim.catalog import default_catalog
    from fastsim.specdec import mtp_model
    m = default_catalog().model("deepseek-v3")
    r = speculative_step(m, "mtp", "H200", "FP8", 8, batch=1, context_tokens=0)
    head = mtp_model(m)
    layer_and_projection = (head.total_params - 2 * m.vocab * m.hidden + 2 * m.hidden ** 2) * 1.0 / 8
    assert r.draft.memory_per_gpu_bytes == pytest.approx(layer_and_projection)


def test_plot_ledger_bars_are_the_step_time(tmp_path, monkeypatch):
    # every part of the step is stacked (all-to-all, the host time too): each bar's top is step_s
    from matplotlib.axes import Axes
    from fastsim.stepmodel import StepConstants
    bars = []
    original = Axes.bar

    def spy(self, x, height, bottom=None, **kw):
        bars.append((kw.get("label"), np.array(height, dtype=float), np.array(bottom, dtype=float)))   # copies
        return original(self, x, height, bottom=bottom, **kw)

    monkeypatch.setattr(Axes, "bar", spy)
    t = ledger_table("qwen3-30b-a3b", H100, "FP8", 2, batch=[1, 64], prefill_tokens=[0, 1024], layout="tp+ep",
                     constants=StepConstants(overhead_per_seq_s=5e-5))
    assert (t.alltoall_s > 0).all() and (t.host_s > 0).all()
    plot_ledger(t, tmp_path / "ledger.png")
    labels = [b[0] for b in bars]
    assert labels == ["weight read", "KV read", "compute beyond memory", "all-reduce", "all-to-all", "kernel launch",
                      "host time"]
    top = bars[-1][1] + bars[-1][2]
    np.testing.assert_allclose(top, t.step_s.to_numpy() * 1e3, rtol=1e-12)
    # a dense model on SPEC §3's constants: no empty all-to-all, stage-send or host entries
    bars.clear()
    plot_ledger(ledger_table(M70, H100, "BF16", 8, batch=[1, 64]), tmp_path / "dense.png")
    assert [b[0] for b in bars] == ["weight read", "KV read", "compute beyond memory", "all-reduce", "kernel launch"]
