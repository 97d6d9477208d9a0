"""The simulator under sliding-window attention (SPEC §6, §10): the KV a request holds, not its
whole context, is reserved, read, attended over and transferred, identically in the kernels and
the reference."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastsim.catalog import Model, default_catalog
from fastsim.errors import FastsimInputError
from fastsim.sim import ColocatedPlan, DisaggregatedPlan, RequestStatus, simulate
from fastsim.sim.window import NO_WINDOW, held_tokens, kv_window
from fastsim.stepmodel import (P_KV_BUDGET_TOKENS, P_KVPG, P_LAYERS, P_NET_BW, P_QDIM_DEC, P_QDIM_PF,
                               P_SLIDE_FRAC, P_WINDOW, step_params, step_time)

from reference_sim import _event, check_against_reference, simulate_reference

CAT = default_catalog()
H100, BF16 = CAT.gpu("H100"), CAT.precision("BF16")
_SHAPE = dict(hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336, vocab=32000, max_context_tokens=32768)
# Mistral-7B v0.1: a 4096-token window on all 32 layers
MISTRAL = Model(name="mistral-7b", layers=32, sliding_window=4096, sliding_layers=32, **_SHAPE)
# a hybrid with half its layers sliding over a small window, crossed often by small workloads
HYBRID = Model(name="hybrid-64", layers=32, sliding_window=64, sliding_layers=16, **_SHAPE)
# an odd split (7 of 30 layers): the whole-token rounding of the reservation matters
ODD = Model(name="odd-30", layers=30, sliding_window=40, sliding_layers=7, **_SHAPE)
# the same shapes without a window
MISTRAL_FULL = Model(name="mistral-full", layers=32, **_SHAPE)

P_MISTRAL = step_params(MISTRAL, H100, BF16, 1)
P_HYBRID = step_params(HYBRID, H100, BF16, 1)
P_ODD = step_params(ODD, H100, BF16, 1)
P_MISTRAL_FULL = step_params(MISTRAL_FULL, H100, BF16, 1)
MODELS = {"mistral": (MISTRAL, P_MISTRAL), "hybrid": (HYBRID, P_HYBRID), "odd": (ODD, P_ODD)}


def with_budget(p, kv, net_bw=None):
    q = p.copy()
    q[P_KV_BUDGET_TOKENS] = kv
    if net_bw is not None:
        q[P_NET_BW] = net_bw
    return q


# ---------------------------------------------------------------- the rounding rule

@pytest.mark.parametrize("model", [MISTRAL, HYBRID, ODD], ids=lambda m: m.name)
def test_held_tokens_is_the_held_kv_rounded_up(model):
    """``held_tokens(c) = ceil(c - S/L x max(c - W, 0))`` exactly (rational arithmetic)."""
    win = kv_window(step_params(model, H100, BF16, 1))
    assert win[:3] == (model.sliding_window, model.sliding_layers, model.layers)
    for c in range(0, 3 * model.sliding_window + 50):
        exact = c - Fraction(model.sliding_layers, model.layers) * max(c - model.sliding_window, 0)
        assert held_tokens(c, win) == math.ceil(exact)
        assert held_tokens(c, win) - 1 < model.kv_tokens_held(c) <= held_tokens(c, win)


def test_no_window_holds_every_token():
    p = step_params(MISTRAL_FULL, H100, BF16, 1)
    win = kv_window(p)
    assert win == (NO_WINDOW, 0, 1, 0.0)
    assert all(held_tokens(c, win) == c for c in (0, 1, 4096, 1 << 30))
    q = p.copy()
    q[P_WINDOW] = 128.0
    q[P_SLIDE_FRAC] = 0.0       # a window on no layer is no window
    assert kv_window(q) == (NO_WINDOW, 0, 1, 0.0)


@pytest.mark.parametrize("index, value", [(P_WINDOW, 1.5), (P_WINDOW, -64.0), (P_WINDOW, math.nan),
                                          (P_SLIDE_FRAC, 0.3), (P_SLIDE_FRAC, 1.5), (P_LAYERS, 31.5)])
def test_a_window_of_partial_tokens_or_layers_is_refused(index, value):
    q = P_HYBRID.copy()
    q[index] = value
    with pytest.raises(FastsimInputError) as e:
        ColocatedPlan(q, 1, 64)
    assert e.value.field == "p"
    with pytest.raises(FastsimInputError) as e:
        DisaggregatedPlan(P_HYBRID, 1, q, 1)
    assert e.value.field == "p_decode"


# ---------------------------------------------------------------- exact agreement with the reference

@st.composite
def window_workload(draw, window):
    """Small workloads whose prompts sit below, around and past ``window``, outputs that cross it."""
    n = draw(st.integers(1, 20))
    gap = st.one_of(st.just(0.0), st.sampled_from([0.001, 0.004, 0.02]), st.floats(0.0, 0.08))
    arrival = np.cumsum(np.array(draw(st.lists(gap, min_size=n, max_size=n)), dtype=np.float64))
    near = st.integers(max(1, window - 120), window + 120)
    prompt = np.array(draw(st.lists(st.one_of(st.integers(1, 300), near), min_size=n, max_size=n)),
                      dtype=np.int64)
    output = np.array(draw(st.lists(st.one_of(st.just(1), st.integers(1, 25), st.integers(1, 160)),
                                    min_size=n, max_size=n)), dtype=np.int64)
    horizon = float(arrival[-1]) + draw(st.sampled_from([0.002, 0.05, 0.3, 3.0, 30.0]))
    dt = draw(st.sampled_from([0.01, 0.07, 0.5]))
    max_context = draw(st.sampled_from([131072, window + 100]))
    routing = draw(st.sampled_from(["least-loaded", "round-robin"]))
    return arrival, prompt, output, horizon, dt, max_context, routing


def _budget_range(model):
    w = model.sliding_window
    return st.floats(40.0, 3000.0) if w < 1000 else st.floats(0.5 * w, 8.0 * w)


def _window_events(model, prompt, output, status):
    ok = status != RequestStatus.REJECTED
    _event(f"{model.name}: decodes past the window: {bool(np.any((prompt + output)[ok] > model.sliding_window + 1))}")
    _event(f"{model.name}: crossing during decode: "
           f"{bool(np.any(ok & (prompt < model.sliding_window) & (prompt + output > model.sliding_window + 1)))}")


SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(data=st.data(), which=st.sampled_from(sorted(MODELS)), n_inst=st.integers(1, 3),
       chunk=st.sampled_from([1, 7, 64, 256, 4096]), max_batch=st.sampled_from([0, 1, 3]))
def test_colocated_window_matches_reference(data, which, n_inst, chunk, max_batch):
    model, p0 = MODELS[which]
    arrival, prompt, output, horizon, dt, max_context, routing = data.draw(window_workload(model.sliding_window))
    kv = data.draw(_budget_range(model))
    p = with_budget(p0, kv)
    res = simulate(ColocatedPlan(p, n_inst, chunk, max_batch), arrival, prompt, output,
                   horizon_s=horizon, ttft_slo_s=0.5, tpot_slo_s=0.02, max_context_tokens=max_context,
                   routing=routing, sample_dt_s=dt)
    ref = simulate_reference("colocated", arrival, prompt, output, horizon=horizon, dt=dt,
                             max_context=max_context, routing=routing, p=p, n_instances=n_inst,
                             chunk=chunk, max_batch=max_batch)
    check_against_reference(res, ref, np.full(n_inst, math.floor(kv)))
    _window_events(model, prompt, output, res.status)


@SETTINGS
@given(data=st.data(), which=st.sampled_from(sorted(MODELS)), n_pf=st.integers(1, 2), n_dec=st.integers(1, 3),
       budget=st.sampled_from([1, 50, 300, 8192]), bw=st.sampled_from([50e9, 1e9, 1e8]),
       dmb=st.sampled_from([0, 2]), plain_prefill=st.booleans())
def test_disaggregated_window_matches_reference(data, which, n_pf, n_dec, budget, bw, dmb, plain_prefill):
    model, p0 = MODELS[which]
    arrival, prompt, output, horizon, dt, max_context, routing = data.draw(window_workload(model.sliding_window))
    kv_p = data.draw(_budget_range(model))
    kv_d = data.draw(_budget_range(model))
    # the prefill side windowless at times: each instance uses its own window
    pp = with_budget(P_MISTRAL_FULL if plain_prefill else p0, kv_p, bw)
    pd = with_budget(p0, kv_d)
    res = simulate(DisaggregatedPlan(pp, n_pf, pd, n_dec, budget, dmb), arrival, prompt, output,
                   horizon_s=horizon, ttft_slo_s=0.5, tpot_slo_s=0.02, max_context_tokens=max_context,
                   routing=routing, sample_dt_s=dt)
    ref = simulate_reference("disaggregated", arrival, prompt, output, horizon=horizon, dt=dt,
                             max_context=max_context, routing=routing, p_prefill=pp, n_prefill=n_pf,
                             p_decode=pd, n_decode=n_dec, prefill_budget=budget, decode_max_batch=dmb)
    check_against_reference(res, ref, np.array([math.floor(kv_p)] * n_pf + [math.floor(kv_d)] * n_dec))
    _window_events(model, prompt, output, res.status)


def test_fast_path_with_a_window_matches_reference_on_a_realistic_load():
    """Chat-like load on a hybrid window: long runs of the colocated fast path, many crossings."""
    from fastsim.workload import synthesize
    horizon = 20.0
    w = synthesize("chat", 12.0, horizon, 3)
    o = w.output_tokens.copy()
    o[::9] = 1
    for p in (with_budget(P_HYBRID, 60_000.0), P_MISTRAL):
        r = simulate(ColocatedPlan(p, 2, 512), w.arrival_s, w.prompt_tokens, o, horizon_s=horizon,
                     ttft_slo_s=1.0, tpot_slo_s=0.05, sample_dt_s=0.25)
        ref = simulate_reference("colocated", w.arrival_s, w.prompt_tokens, o, horizon=horizon, dt=0.25,
                                 max_context=131072, routing="least-loaded", p=p, n_instances=2, chunk=512,
                                 max_batch=0)
        check_against_reference(r, ref, np.full(2, math.floor(p[P_KV_BUDGET_TOKENS])))
        assert (r.status == RequestStatus.FINISHED).sum() > 100


# ---------------------------------------------------------------- step arithmetic by hand

def _chunk_attn(p, x, s, held_s):
    lay, qpf = p[P_LAYERS], p[P_QDIM_PF]
    return 4.0 * lay * p[P_QDIM_DEC] * 0.0 + (2.0 * lay * qpf * x * x + 4.0 * lay * qpf * x * held_s)


@pytest.mark.parametrize("model, P, O, c", [(MISTRAL, 5000, 300, 2048), (HYBRID, 300, 200, 128),
                                            (ODD, 150, 90, 64)], ids=["mistral", "hybrid", "odd"])
def test_single_request_reads_its_held_context(model, P, O, c):
    """One request alone, P + O well past W: each step reads held(context), summed by hand."""
    p = step_params(model, H100, BF16, 1)
    lay, qdec = p[P_LAYERS], p[P_QDIM_DEC]
    r = simulate(ColocatedPlan(p, 1, c), np.array([0.5]), np.array([P]), np.array([O]),
                 horizon_s=100.0, ttft_slo_s=1.0, tpot_slo_s=1.0, sample_dt_s=0.001)
    t = 0.5
    for s in range(0, P, c):
        x = min(c, P - s)
        h = float(model.kv_tokens_held(s))     # the cached tokens the chunk reads and attends over
        t = t + float(step_time(p, float(x), h, _chunk_attn(p, float(x), float(s), h), 1.0))
    assert r.first_token_s[0] == t
    for g in range(1, O):
        h = float(model.kv_tokens_held(P + g))
        assert h < P + g
        t = t + float(step_time(p, 1.0, h, 4.0 * lay * qdec * h, 1.0))
    assert r.finish_s[0] == t
    # its reservation is the KV of its whole P + O, in whole tokens
    assert r.metrics.kv_peak_tokens[0] == math.ceil(model.kv_tokens_held(P + O)) < P + O
    assert r.kv_tokens.max() == r.metrics.kv_peak_tokens[0]


def test_disaggregated_request_moves_its_held_kv():
    """Prefill, a transfer of held(P) tokens' KV, then decodes reading held(context) on the decode instance."""
    model, p = HYBRID, P_HYBRID
    P, O = 300, 40
    lay, qdec, qpf = p[P_LAYERS], p[P_QDIM_DEC], p[P_QDIM_PF]
    r = simulate(DisaggregatedPlan(p, 1, p, 1), np.array([0.0]), np.array([P]), np.array([O]),
                 horizon_s=100.0, ttft_slo_s=1.0, tpot_slo_s=1.0)
    t = 0.0 + float(step_time(p, float(P), 0.0, 4.0 * lay * qpf * 0.0 + (2.0 * lay * qpf * P * P + 4.0 * lay * qpf * P * 0.0), 1.0))
    held_p = float(model.kv_tokens_held(P))
    assert held_p < P
    t = t + held_p * p[P_KVPG] / p[P_NET_BW]
    assert r.first_token_s[0] == t
    for g in range(1, O):
        h = float(model.kv_tokens_held(P + g))
        t = t + float(step_time(p, 1.0, h, 4.0 * lay * qdec * h, 1.0))
    assert r.finish_s[0] == t
    assert list(r.metrics.kv_peak_tokens) == [math.ceil(held_p), math.ceil(model.kv_tokens_held(P + O))]


def test_a_window_no_request_reaches_changes_nothing():
    """Contexts at most W: the windowed run is the windowless run, bit for bit."""
    rng = np.random.default_rng(4)
    n = 300
    a = np.sort(rng.uniform(0.0, 20.0, n))
    P = rng.integers(1, 3000, n)
    O = rng.integers(1, 4096 - P + 1)
    kw = dict(horizon_s=30.0, ttft_slo_s=1.0, tpot_slo_s=0.05, sample_dt_s=0.1)
    for plan_of in (lambda p: ColocatedPlan(p, 2, 512), lambda p: DisaggregatedPlan(p, 1, p, 2, 4096)):
        w = simulate(plan_of(with_budget(P_MISTRAL, 50_000.0)), a, P, O, **kw)
        f = simulate(plan_of(with_budget(P_MISTRAL_FULL, 50_000.0)), a, P, O, **kw)
        for x, y in ((w.first_token_s, f.first_token_s), (w.finish_s, f.finish_s), (w.kv_tokens, f.kv_tokens),
                     (w.busy_s, f.busy_s), (w.metrics.kv_peak_tokens, f.metrics.kv_peak_tokens)):
            np.testing.assert_array_equal(x, y)


# ---------------------------------------------------------------- KV invariants

@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), which=st.sampled_from(sorted(MODELS)), disagg=st.booleans())
def test_kv_never_exceeds_the_budget_with_a_window(data, which, disagg):
    model, p0 = MODELS[which]
    arrival, prompt, output, horizon, dt, max_context, routing = data.draw(window_workload(model.sliding_window))
    kv = data.draw(_budget_range(model))
    p = with_budget(p0, kv)
    plan = DisaggregatedPlan(p, 1, p, 2, 512) if disagg else ColocatedPlan(p, 2, 64)
    r = simulate(plan, arrival, prompt, output, horizon_s=horizon, ttft_slo_s=0.5, tpot_slo_s=0.02,
                 max_context_tokens=max_context, routing=routing, sample_dt_s=dt)
    assert np.all(r.metrics.kv_peak_tokens <= math.floor(kv))
    assert np.all(r.kv_tokens <= math.floor(kv))
    # rejected exactly when the context or the held KV cannot fit
    win = kv_window(p)
    too_big = (prompt + output > max_context) | np.array(
        [held_tokens(int(x), win) > math.floor(kv) for x in prompt + output])
    if disagg:
        too_big |= np.array([held_tokens(int(x), win) > math.floor(kv) for x in prompt])
    np.testing.assert_array_equal(r.status == RequestStatus.REJECTED, too_big)


def test_a_window_fits_what_full_attention_cannot():
    """Long requests: rejected or few resident without the window, many resident with it."""
    budget = 40_000.0
    n = 12
    a = np.zeros(n)
    P = np.full(n, 8000)
    O = np.full(n, 500)
    kw = dict(horizon_s=2.0, ttft_slo_s=1.0, tpot_slo_s=1.0, sample_dt_s=0.05)

    def resident(p):
        r = simulate(ColocatedPlan(with_budget(p, budget), 1, 8192), a, P, O, **kw)
        return int((r.in_system - r.queue_len[:, 0]).max()), r

    full, rf = resident(P_MISTRAL_FULL)
    slid, rs = resident(P_MISTRAL)
    assert full == int(budget // 8500) == 4
    need = held_tokens(8500, kv_window(P_MISTRAL))
    assert need == 4096
    assert slid == int(budget // need) == 9
    assert rs.metrics.kv_peak_tokens[0] == 9 * 4096 <= budget

    # a request larger than the whole budget at full attention runs with the window
    small = 6000.0
    one = dict(arrival_s=np.array([0.0]), prompt_tokens=np.array([8000]), output_tokens=np.array([500]))
    r_full = simulate(ColocatedPlan(with_budget(P_MISTRAL_FULL, small), 1, 2048), **one, **kw)
    r_slid = simulate(ColocatedPlan(with_budget(P_MISTRAL, small), 1, 2048), **one, horizon_s=60.0,
                      ttft_slo_s=1.0, tpot_slo_s=1.0)
    assert r_full.status[0] == RequestStatus.REJECTED
    assert r_slid.status[0] == RequestStatus.FINISHED
    # the context limit stays on raw tokens
    r_ctx = simulate(ColocatedPlan(P_MISTRAL, 1, 2048), **one, max_context_tokens=8499, **kw)
    assert r_ctx.status[0] == RequestStatus.REJECTED
