"""Tests of the serving simulator: exact agreement with the reference, invariants, queueing theory."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastsim.catalog import default_catalog
from fastsim.errors import FastsimInputError
from fastsim.sim import (ColocatedPlan, DisaggregatedPlan, RequestStatus, SimMetrics, simulate,
                         simulate_batch)
from fastsim.stepmodel import P_KV_BUDGET_TOKENS, P_NET_BW, step_params, step_time

from reference_sim import check_against_reference, check_plan_against_reference, simulate_reference

CAT = default_catalog()
P8 = step_params(CAT.model("llama-3.1-8b"), CAT.gpu("H100"), CAT.precision("BF16"), 1)
P70 = step_params(CAT.model("llama-3.1-70b"), CAT.gpu("B200"), CAT.precision("FP8"), 1)
CHAT = CAT.scenario("chat")


def lognormal_tokens(rng, mean, sigma, n):
    mu = math.log(mean) - sigma * sigma / 2.0
    return np.maximum(1, np.rint(rng.lognormal(mu, sigma, n))).astype(np.int64)


def poisson_workload(seed, rate, horizon, p_mean=1000.0, o_mean=250.0, sigma=0.8, stop=None):
    """Poisson arrivals at ``rate`` in [0, stop or horizon) with lognormal lengths."""
    rng = np.random.default_rng(seed)
    stop = horizon if stop is None else stop
    n = int(rate * stop * 1.3 + 50)
    a = np.cumsum(rng.exponential(1.0 / rate, n))
    a = a[a < stop]
    m = a.shape[0]
    return a, lognormal_tokens(rng, p_mean, sigma, m), lognormal_tokens(rng, o_mean, sigma, m)


# ---------------------------------------------------------------- exact agreement with the reference

@st.composite
def small_workload(draw):
    n = draw(st.integers(1, 25))
    gap = st.one_of(st.just(0.0), st.sampled_from([0.001, 0.004, 0.02]), st.floats(0.0, 0.08))
    arrival = np.cumsum(np.array(draw(st.lists(gap, min_size=n, max_size=n)), dtype=np.float64))
    prompt = np.array(draw(st.lists(st.integers(1, 300), min_size=n, max_size=n)), dtype=np.int64)
    output = np.array(draw(st.lists(st.one_of(st.just(1), st.integers(1, 25)), min_size=n, max_size=n)),
                      dtype=np.int64)
    horizon = float(arrival[-1]) + draw(st.sampled_from([0.002, 0.05, 0.3, 3.0]))
    dt = draw(st.sampled_from([0.01, 0.07, 0.5]))
    max_context = draw(st.sampled_from([131072, 250]))
    routing = draw(st.sampled_from(["least-loaded", "round-robin"]))
    return arrival, prompt, output, horizon, dt, max_context, routing


def with_budget(p, kv, net_bw=None):
    q = p.copy()
    q[P_KV_BUDGET_TOKENS] = kv
    if net_bw is not None:
        q[P_NET_BW] = net_bw
    return q


SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(w=small_workload(), n_inst=st.integers(1, 3), chunk=st.sampled_from([1, 7, 64, 256, 4096]),
       max_batch=st.sampled_from([0, 1, 3]), kv=st.floats(40.0, 3000.0))
def test_colocated_matches_reference(w, n_inst, chunk, max_batch, kv):
    arrival, prompt, output, horizon, dt, max_context, routing = w
    p = with_budget(P8, kv)
    res = simulate(ColocatedPlan(p, n_inst, chunk, max_batch), arrival, prompt, output,
                   horizon_s=horizon, ttft_slo_s=0.5, tpot_slo_s=0.02, max_context_tokens=max_context,
                   routing=routing, sample_dt_s=dt)
    ref = simulate_reference("colocated", arrival, prompt, output, horizon=horizon, dt=dt,
                             max_context=max_context, routing=routing, p=p, n_instances=n_inst,
                             chunk=chunk, max_batch=max_batch)
    check_against_reference(res, ref, np.full(n_inst, math.floor(kv)))


@pytest.mark.parametrize("max_batch, kv", [(0, 1e6), (1, 1e6), (2, 1e6), (0, 1500.0)])
@pytest.mark.parametrize("routing", ["least-loaded", "round-robin"])
def test_colocated_long_decodes_match_reference(max_batch, kv, routing):
    """Long runs of decode-only steps (the kernel's quiet steps) at light load, the queue held
    back by the batch cap or the KV budget while they run, agree with the reference bit for bit."""
    rng = np.random.default_rng(11)
    n = 30
    arrival = np.cumsum(rng.exponential(0.4, n))
    prompt = rng.integers(20, 400, n).astype(np.int64)
    output = rng.integers(80, 600, n).astype(np.int64)
    horizon = float(arrival[-1]) + 2.0
    p = with_budget(P8, kv)
    res = simulate(ColocatedPlan(p, 3, 256, max_batch), arrival, prompt, output, horizon_s=horizon,
                   ttft_slo_s=0.5, tpot_slo_s=0.02, routing=routing, sample_dt_s=0.25)
    ref = simulate_reference("colocated", arrival, prompt, output, horizon=horizon, dt=0.25, max_context=131072,
                             routing=routing, p=p, n_instances=3, chunk=256, max_batch=max_batch)
    check_against_reference(res, ref, np.full(3, math.floor(kv)))
    # the runs are long enough to hold quiet stretches: a mean request decodes for hundreds of steps
    assert res.metrics.mean_batch.max() < 8 and (res.status == RequestStatus.FINISHED).sum() >= n // 2


@SETTINGS
@given(w=small_workload(), n_pf=st.integers(1, 3), n_dec=st.integers(1, 3),
       budget=st.sampled_from([1, 50, 300, 8192]), kv_p=st.floats(40.0, 3000.0),
       kv_d=st.floats(40.0, 3000.0), bw=st.sampled_from([50e9, 1e9, 1e8]),
       dmb=st.sampled_from([0, 2]))
def test_disaggregated_matches_reference(w, n_pf, n_dec, budget, kv_p, kv_d, bw, dmb):
    arrival, prompt, output, horizon, dt, max_context, routing = w
    pp = with_budget(P8, kv_p, bw)
    pd = with_budget(P8, kv_d)
    res = simulate(DisaggregatedPlan(pp, n_pf, pd, n_dec, budget, dmb), arrival, prompt, output,
                   horizon_s=horizon, ttft_slo_s=0.5, tpot_slo_s=0.02, max_context_tokens=max_context,
                   routing=routing, sample_dt_s=dt)
    ref = simulate_reference("disaggregated", arrival, prompt, output, horizon=horizon, dt=dt,
                             max_context=max_context, routing=routing, p_prefill=pp, n_prefill=n_pf,
                             p_decode=pd, n_decode=n_dec, prefill_budget=budget, decode_max_batch=dmb)
    budgets = np.array([math.floor(kv_p)] * n_pf + [math.floor(kv_d)] * n_dec)
    check_against_reference(res, ref, budgets)
    assert np.all(res.decode_instance[res.decode_instance >= 0] >= n_pf)


def test_rejections_counted_and_do_not_block():
    p = with_budget(P8, 500.0)
    a = np.array([0.0, 0.0, 0.001, 0.002])
    P = np.array([100, 450, 499, 50])
    O = np.array([10, 100, 2, 10])     # second (550) and third (501) exceed the budget of 500
    r = simulate(ColocatedPlan(p, 1, 64), a, P, O, horizon_s=5.0, ttft_slo_s=1.0, tpot_slo_s=1.0,
                 measure_window=(0.0, 1.0))
    assert list(r.status) == [1, 2, 2, 1]
    assert r.metrics.rejected == 2 and r.metrics.finished == 2
    assert r.metrics.attainment == 0.5


def test_single_request_step_arithmetic():
    """One request alone: its prompt in ceil(P/c) chunks, then O-1 decode steps, by hand."""
    p = P8
    P, O, c = 300, 4, 128
    r = simulate(ColocatedPlan(p, 1, c), np.array([0.5]), np.array([P]), np.array([O]),
                 horizon_s=10.0, ttft_slo_s=1.0, tpot_slo_s=1.0)
    lay, hid = p[6], p[7]
    t = 0.5
    for s, x in ((0, 128), (128, 128), (256, 44)):
        attn = 4.0 * lay * hid * 0.0 + (2.0 * lay * hid * x * x + 4.0 * lay * hid * x * s)
        t = t + float(step_time(p, float(x), float(s), attn, 1.0))
    assert r.first_token_s[0] == t
    for g in range(1, O):
        t = t + float(step_time(p, 1.0, float(P + g), 4.0 * lay * hid * float(P + g), 1.0))
    assert r.finish_s[0] == t


# ---------------------------------------------------------------- validation

@pytest.mark.parametrize("kwargs, field", [
    (dict(arrival_s=np.array([1.0, 0.5])), "arrival_s"),
    (dict(arrival_s=np.array([0.0, 100.0])), "arrival_s"),
    (dict(arrival_s=np.array([-1.0, 0.0])), "arrival_s"),
    (dict(output_tokens=np.array([[1, 2]])), "output_tokens"),
    (dict(prompt_tokens=np.array([0, 5])), "prompt_tokens"),
    (dict(output_tokens=np.array([1, 2, 3])), "output_tokens"),
    (dict(prompt_tokens=np.array([1.5, 2.0])), "prompt_tokens"),
    (dict(horizon_s=0.0), "horizon_s"),
    (dict(routing="random"), "routing"),
    (dict(measure_window=(0.8, 0.2)), "measure_window"),
    (dict(sample_dt_s=-1.0), "sample_dt_s"),
    (dict(plan="colocated"), "plan"),
])
def test_validation_names_the_field(kwargs, field):
    args = dict(plan=ColocatedPlan(P8, 1, 64), arrival_s=np.array([0.0, 0.5]),
                prompt_tokens=np.array([10, 20]), output_tokens=np.array([3, 4]), horizon_s=10.0,
                ttft_slo_s=1.0, tpot_slo_s=0.1)
    args.update(kwargs)
    plan = args.pop("plan")
    with pytest.raises(FastsimInputError) as e:
        simulate(plan, args.pop("arrival_s"), args.pop("prompt_tokens"), args.pop("output_tokens"), **args)
    assert e.value.field == field


@pytest.mark.parametrize("make, field", [
    (lambda: ColocatedPlan(P8, 0, 64), "n_instances"),
    (lambda: ColocatedPlan(P8, 1, 0), "chunk_tokens"),
    (lambda: ColocatedPlan(P8, 1, 8, -1), "max_batch"),
    (lambda: ColocatedPlan(P8[:5], 1, 8), "p"),
    (lambda: DisaggregatedPlan(P8, 1, P8, 0), "n_decode"),
    (lambda: DisaggregatedPlan(P8, 1, P8, 1, 0), "prefill_token_budget"),
])
def test_plan_validation(make, field):
    with pytest.raises(FastsimInputError) as e:
        make()
    assert e.value.field == field


def _with(col, value):
    p = P8.copy()
    p[col] = value
    return p


@pytest.mark.parametrize("name", ["P_HBM_BW", "P_PEAK", "P_ETA_C", "P_ETA_BW", "P_NVLINK", "P_ETA_NV", "P_EP_BW",
                                  "P_NET_BW", "P_TP", "P_GPUS", "P_DP"])
@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf")])
def test_plan_refuses_a_divisor_that_is_not_positive(name, value):
    """The kernel divides by these without a zero check: a plan holding a zero or a negative one is refused."""
    import fastsim.stepmodel as SM
    col = getattr(SM, name)
    with pytest.raises(FastsimInputError) as e:
        ColocatedPlan(_with(col, value), 1, 8)
    assert e.value.field == f"p[{name}]"
    assert e.value.value == value or (math.isnan(value) and math.isnan(e.value.value))
    with pytest.raises(FastsimInputError) as e:
        DisaggregatedPlan(P8, 1, _with(col, value), 1)
    assert e.value.field == f"p_decode[{name}]"


@pytest.mark.parametrize("name", ["P_TP", "P_GPUS", "P_DP"])
@pytest.mark.parametrize("value", [0.5, 3.7])
def test_plan_refuses_a_fractional_parallel_degree(name, value):
    import fastsim.stepmodel as SM
    with pytest.raises(FastsimInputError) as e:
        ColocatedPlan(_with(getattr(SM, name), value), 1, 8)
    assert e.value.field == f"p[{name}]" and e.value.value == value and "whole number" in e.value.allowed


# ---------------------------------------------------------------- batch and threads

def test_batch_equals_single_runs_and_is_thread_independent():
    import numba
    plans = [ColocatedPlan(P70, 1, 512), ColocatedPlan(P70, 2, 256, 64),
             DisaggregatedPlan(P70, 1, P70, 1, 4096)]
    works = [poisson_workload(s, r, 120.0) for s in (1, 2) for r in (8.0, 25.0)]
    kw = dict(horizon_s=120.0, ttft_slo_s=CHAT.ttft_s, tpot_slo_s=CHAT.tpot_s)
    batch = simulate_batch(plans, works, full=True, product=True, **kw)
    k = 0
    for pl in plans:
        for w in works:
            single = simulate(pl, *w, **kw)
            np.testing.assert_array_equal(batch[k].first_token_s, single.first_token_s)
            np.testing.assert_array_equal(batch[k].finish_s, single.finish_s)
            np.testing.assert_array_equal(batch[k].in_system, single.in_system)
            assert batch[k].metrics.attainment == single.metrics.attainment
            k += 1
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = simulate_batch(plans, works, product=True, **kw)
    finally:
        numba.set_num_threads(before)
    many = simulate_batch(plans, works, product=True, **kw)
    for x, y in zip(one, many):
        assert isinstance(x, SimMetrics)
        assert x.attainment == y.attainment and x.ttft_p90_s == y.ttft_p90_s
        assert x.throughput_tokens_per_s == y.throughput_tokens_per_s


# ---------------------------------------------------------------- statistical properties

def test_more_instances_do_not_lower_attainment_on_average():
    works = [poisson_workload(s, 24.0, 300.0) for s in range(4)]
    kw = dict(horizon_s=300.0, ttft_slo_s=CHAT.ttft_s, tpot_slo_s=CHAT.tpot_s)
    att = []
    for n in (1, 2, 3):
        ms = simulate_batch([ColocatedPlan(P70, n, 512)], works, **kw)
        att.append(np.mean([m.attainment for m in ms]))
    assert att[0] < 0.5          # one instance is overloaded at 24 req/s
    assert att[1] >= att[0] and att[2] >= att[1] - 0.005


def _mg1_runs(rho, seeds, n_per_seed):
    """Prefill-only single instance, one prompt per step (max_batch 1, O = 1): an M/G/1 queue."""
    rng = np.random.default_rng(12345)
    big = lognormal_tokens(rng, 1000.0, 0.8, 400_000)
    lay, hid = P8[6], P8[7]
    s_of = lambda P: step_time(P8, P.astype(np.float64), 0.0, 2.0 * lay * hid * P.astype(np.float64) ** 2, 1.0)
    s = s_of(big)
    es, es2 = s.mean(), (s * s).mean()
    lam = rho / es
    works = []
    for seed in np.random.SeedSequence(7).spawn(seeds):
        g = np.random.default_rng(seed)
        a = np.cumsum(g.exponential(1.0 / lam, n_per_seed))
        works.append((a, lognormal_tokens(g, 1000.0, 0.8, n_per_seed), np.ones(n_per_seed, np.int64)))
    horizon = max(w[0][-1] for w in works) * 1.05 + 60.0
    res = simulate_batch([ColocatedPlan(P8, 1, 1 << 20, max_batch=1)], works, horizon_s=horizon,
                         ttft_slo_s=1.0, tpot_slo_s=1.0, full=True, sample_dt_s=horizon / 100)
    waits = []
    for r, w in zip(res, works):
        assert np.all(r.status == RequestStatus.FINISHED)
        wait = r.first_token_s - r.arrival_s - s_of(r.prompt_tokens)
        waits.append(wait[n_per_seed // 10:])
    return np.concatenate(waits).mean(), lam * es2 / (2.0 * (1.0 - rho))


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_pollaczek_khinchine_mean_wait(rho):
    w_sim, w_pk = _mg1_runs(rho, seeds=8, n_per_seed=150_000)
    assert abs(w_sim / w_pk - 1.0) < 0.03, (w_sim, w_pk)


def test_littles_law_colocated():
    horizon = 400.0
    a, P, O = poisson_workload(3, 14.0, horizon, stop=0.75 * horizon)
    r = simulate(ColocatedPlan(P70, 1, 512), a, P, O, horizon_s=horizon, ttft_slo_s=1.0,
                 tpot_slo_s=0.05, sample_dt_s=0.01)
    assert np.all(r.status == RequestStatus.FINISHED)
    L = r.in_system.mean()
    lam = a.shape[0] / horizon
    W = (r.finish_s - r.arrival_s).mean()
    assert abs(L / (lam * W) - 1.0) < 0.02


def test_overload_flag_90_vs_110_percent():
    horizon = 600.0
    plan = ColocatedPlan(P70, 1, 512)
    kw = dict(horizon_s=horizon, ttft_slo_s=CHAT.ttft_s, tpot_slo_s=CHAT.tpot_s)
    # saturation throughput (requests/s) at heavy overload = the capacity of the instance
    sat = simulate_batch([plan], [poisson_workload(s, 40.0, horizon) for s in (11, 12)], full=True, **kw)
    caps = []
    for r in sat:
        late = r.finish_s >= 0.5 * horizon
        caps.append(late.sum() / (0.5 * horizon))
        assert r.metrics.overloaded
    cap = float(np.mean(caps))
    seeds = range(20, 26)
    ok = simulate_batch([plan], [poisson_workload(s, 0.9 * cap, horizon) for s in seeds], **kw)
    over = simulate_batch([plan], [poisson_workload(s, 1.1 * cap, horizon) for s in seeds], **kw)
    assert not any(m.overloaded for m in ok), [m.queue_slope_req_per_s for m in ok]
    assert all(m.overloaded for m in over), [m.queue_slope_req_per_s for m in over]


def test_metrics_window_and_percentiles():
    a, P, O = poisson_workload(5, 10.0, 200.0)
    r = simulate(ColocatedPlan(P70, 1, 512), a, P, O, horizon_s=200.0, ttft_slo_s=1.0, tpot_slo_s=0.05)
    m = r.metrics
    meas = (a >= 40.0) & (a < 160.0)
    assert m.measured == meas.sum()
    ttft = r.ttft_s[meas]
    assert np.all(np.isfinite(ttft))
    assert m.ttft_p90_s == pytest.approx(np.percentile(ttft, 90), rel=1e-12)
    tp = r.tpot_s[meas & (O > 1)]
    tp = np.where(np.isnan(tp), np.inf, tp)      # unfinished by the horizon: +inf
    assert m.tpot_p50_s == pytest.approx(np.percentile(tp, 50), rel=1e-12)
    assert m.unfinished == (r.status == RequestStatus.UNFINISHED).sum()
    assert 0.0 < m.utilisation[0] <= 1.0
    assert m.throughput_tokens_per_s > 0
    assert not m.overloaded


def test_batch_pairing_and_workload_objects():
    from types import SimpleNamespace
    w = poisson_workload(9, 5.0, 60.0)
    obj = SimpleNamespace(arrival_s=w[0], prompt_tokens=w[1], output_tokens=w[2])
    kw = dict(horizon_s=60.0, ttft_slo_s=1.0, tpot_slo_s=0.05)
    a, b = simulate_batch([ColocatedPlan(P70, 1, 512)], [w, obj], **kw)
    assert a.attainment == b.attainment and a.ttft_p90_s == b.ttft_p90_s
    with pytest.raises(FastsimInputError) as e:
        simulate_batch([ColocatedPlan(P70, 1, 512)] * 2, [w, w, w], **kw)
    assert e.value.field == "plans"
    assert len(simulate_batch([ColocatedPlan(P70, 1, 512)] * 2, [w, w, w], product=True, **kw)) == 6


# TP > 1 exercises the all-reduce and the per-GPU KV terms of the step time (SPEC §3)
P_TP = [step_params(CAT.model(m), CAT.gpu(g), CAT.precision(pr), tp)
        for m, g, pr, tp in [("llama-3.1-70b", "H100", "BF16", 2), ("llama-3.1-70b", "H100", "FP8", 4),
                             ("llama-3.1-70b", "B200", "BF16", 8), ("llama-3.1-8b", "H200", "FP8", 2)]]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(w=small_workload(), which=st.integers(0, len(P_TP) - 1), dec=st.integers(0, len(P_TP) - 1),
       disagg=st.booleans(), n=st.integers(1, 2), chunk=st.sampled_from([7, 64, 4096]),
       kv=st.floats(40.0, 3000.0))
def test_tensor_parallel_plans_match_reference(w, which, dec, disagg, n, chunk, kv):
    check_plan_against_reference(w, with_budget(P_TP[which], kv), with_budget(P_TP[dec], kv), disagg, n, chunk, kv)


def _np_percentile_with_inf(x, q):
    """numpy's linear percentile, with +inf allowed (numpy itself would give nan for inf - inf)."""
    s = np.sort(x)
    pos = q / 100.0 * (s.size - 1)
    lo = int(np.floor(pos))
    a, b = s[lo], s[min(lo + 1, s.size - 1)]
    if pos == lo or a == b:
        return a
    return np.inf if np.isinf(b) else a + (b - a) * (pos - lo)


@pytest.mark.parametrize("rate", [20.0, 40.0])
def test_kernel_percentiles_are_exact_on_large_runs_with_unfinished_requests(rate):
    """Thousands of measured requests (radix selection path), at 40 req/s many never finish (+inf)."""
    a, P, O = poisson_workload(11, rate, 600.0)
    r = simulate(ColocatedPlan(P70, 1, 512), a, P, O, horizon_s=600.0, ttft_slo_s=1.0, tpot_slo_s=0.05)
    sel = (r.arrival_s >= 120.0) & (r.arrival_s < 480.0)
    assert sel.sum() > 1024
    ttft = np.where(np.isnan(r.first_token_s), np.inf, r.first_token_s - r.arrival_s)[sel]
    for q, got in ((50, r.metrics.ttft_p50_s), (90, r.metrics.ttft_p90_s), (99, r.metrics.ttft_p99_s)):
        assert got == _np_percentile_with_inf(ttft, q)
    if rate == 40.0:
        assert np.isinf(ttft).any()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(w=small_workload(), which=st.integers(0, len(P_TP) - 1), disagg=st.booleans(), n=st.integers(1, 3),
       chunk=st.sampled_from([7, 64, 512]))
def test_first_token_no_earlier_than_the_prompts_own_compute(w, which, disagg, n, chunk):
    """TTFT >= the prompt's own prefill FLOPs at the derated peak (SPEC §3), whatever else is running."""
    from fastsim.stepmodel import P_ETA_C, P_HIDDEN, P_LAYERS, P_MATMUL, P_PEAK
    from fastsim.stepmodel import P_TP as TP_INDEX
    arrival, prompt, output, horizon, dt, max_context, routing = w
    p = with_budget(P_TP[which], 1e6)
    plan = DisaggregatedPlan(p, n, p, n, 512) if disagg else ColocatedPlan(p, n, chunk)
    r = simulate(plan, arrival, prompt, output, horizon_s=horizon, ttft_slo_s=0.5, tpot_slo_s=0.02,
                 max_context_tokens=max_context, routing=routing, sample_dt_s=dt)
    got = ~np.isnan(r.first_token_s)
    P = prompt[got].astype(np.float64)
    flops = 2.0 * p[P_MATMUL] * P + 2.0 * p[P_LAYERS] * p[P_HIDDEN] * P * P
    own = flops / p[TP_INDEX] / (p[P_ETA_C] * p[P_PEAK])
    assert np.all(r.first_token_s[got] - arrival[got] >= own * (1 - 1e-12))


def test_plan_refuses_a_negative_overhead_and_a_nan_kv_budget_and_takes_an_infinite_one():
    from fastsim.stepmodel import P_OVERHEAD
    with pytest.raises(FastsimInputError) as e:
        ColocatedPlan(_with(P_OVERHEAD, -1.0), 1, 8)
    assert e.value.field == "p[P_OVERHEAD]" and e.value.value == -1.0
    with pytest.raises(FastsimInputError) as e:
        DisaggregatedPlan(_with(P_KV_BUDGET_TOKENS, float("nan")), 1, P8, 1)
    assert e.value.field == "p_prefill[P_KV_BUDGET_TOKENS]"
    # an infinite budget is unlimited KV: the same results as a budget no request can fill
    a, pt, ot = np.array([0.0, 0.1, 0.2]), np.array([100, 200, 300]), np.array([5, 6, 7])
    kw = dict(horizon_s=10.0, ttft_slo_s=1.0, tpot_slo_s=1.0)
    inf = simulate(ColocatedPlan(_with(P_KV_BUDGET_TOKENS, float("inf")), 1, 64), a, pt, ot, **kw)
    big = simulate(ColocatedPlan(_with(P_KV_BUDGET_TOKENS, 1e9), 1, 64), a, pt, ot, **kw)
    np.testing.assert_array_equal(inf.finish_s, big.finish_s)
    assert np.isfinite(inf.finish_s).all() and inf.metrics.rejected == 0


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0])
def test_plan_names_any_parameter_that_is_not_finite_and_non_negative(value):
    """Every step parameter but the KV budget is refused by name when NaN, infinite or negative."""
    from fastsim.stepmodel import N_PARAMS, P_LAYERS, P_SLIDE_FRAC, P_WINDOW, PARAM_NAMES
    for col in range(N_PARAMS):
        # the window's whole-token and whole-layer check names the plan field (test_sim_window)
        if col in (P_KV_BUDGET_TOKENS, P_WINDOW, P_SLIDE_FRAC, P_LAYERS):
            continue
        for make, field in ((lambda q: ColocatedPlan(q, 1, 8), "p"),
                            (lambda q: DisaggregatedPlan(P8, 1, q, 1), "p_decode")):
            with pytest.raises(FastsimInputError) as e:
                make(_with(col, value))
            assert e.value.field == f"{field}[{PARAM_NAMES[col]}]", (col, value, e.value.field)
            assert e.value.value == value or (np.isnan(value) and np.isnan(e.value.value))


def test_plan_refuses_an_expert_fraction_above_one():
    from fastsim.stepmodel import P_KFRAC
    with pytest.raises(FastsimInputError) as e:
        ColocatedPlan(_with(P_KFRAC, 1.5), 1, 8)
    assert e.value.field == "p[P_KFRAC]" and "[0, 1]" in e.value.allowed
    ColocatedPlan(_with(P_KFRAC, 1.0), 1, 8)
