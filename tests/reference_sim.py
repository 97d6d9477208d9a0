"""The plain-Python reference simulator (it lives in the package as ``fastsim.sim.reference``) and
the check that a kernel run agrees with it to the bit."""
import numpy as np
from hypothesis import event
from hypothesis.errors import InvalidArgument

import math

from fastsim.sim import ColocatedPlan, DisaggregatedPlan, RequestStatus, simulate
from fastsim.sim.reference import simulate_reference  # noqa: F401


def _event(label):
    """Record a hypothesis event when running under ``@given``; outside it, do nothing."""
    try:
        event(label)
    except InvalidArgument:
        pass


def check_against_reference(res, ref, plan_budget):
    np.testing.assert_array_equal(res.first_token_s, np.array(ref["first"]))
    np.testing.assert_array_equal(res.finish_s, np.array(ref["finish"]))
    np.testing.assert_array_equal(res.instance, np.array(ref["instance"]))
    np.testing.assert_array_equal(res.decode_instance, np.array(ref["decode_instance"]))
    np.testing.assert_array_equal(res.status, np.array(ref["status"]))
    np.testing.assert_array_equal(res.queue_len, np.array(ref["wait"]))
    np.testing.assert_array_equal(res.kv_tokens, np.array(ref["kv"]))
    np.testing.assert_array_equal(res.in_system, np.array(ref["in_system"]))
    np.testing.assert_array_equal(res.busy_s, np.array(ref["busy"]))
    np.testing.assert_array_equal(res.metrics.kv_peak_tokens, np.array(ref["kv_peak"]))
    steps = np.array(ref["steps"])
    mb = np.where(steps > 0, np.array(ref["batch_sum"]) / np.maximum(steps, 1), np.nan)
    np.testing.assert_array_equal(res.metrics.mean_batch, mb)
    # invariants
    a = res.arrival_s
    got_first = ~np.isnan(res.first_token_s)
    assert np.all(res.first_token_s[got_first] >= a[got_first])
    done = res.status == RequestStatus.FINISHED
    assert np.all(res.finish_s[done] >= res.first_token_s[done])
    assert np.all(np.isnan(res.finish_s[~done]))
    assert np.all(res.kv_tokens <= plan_budget[None, :])
    assert np.all(res.metrics.kv_peak_tokens <= plan_budget)
    rej = res.status == RequestStatus.REJECTED
    assert np.all(res.instance[rej] == -1) and np.all(res.instance[~rej] >= 0)
    _event(f"rejected: {bool(rej.any())}")
    _event(f"unfinished: {bool((res.status == RequestStatus.UNFINISHED).any())}")
    _event(f"instances used: {len(set(res.instance[~rej]) | set(res.decode_instance[res.decode_instance >= 0]))}")
    _event(f"queueing: {bool(res.queue_len.max() > 0)}")


def check_plan_against_reference(w, p, pd, disagg, n, chunk, kv):
    """Simulate a small workload ``w`` (from test_sim.small_workload) on one plan, kernel and
    reference, and check that they agree: colocated instances of ``p`` with ``chunk``, or
    disaggregated prefill ``p`` / decode ``pd``, ``n`` of each, KV budget ``kv`` tokens."""
    arrival, prompt, output, horizon, dt, max_context, routing = w
    kw = dict(horizon=horizon, dt=dt, max_context=max_context, routing=routing)
    if disagg:
        res = simulate(DisaggregatedPlan(p, n, pd, n, 512), arrival, prompt, output, horizon_s=horizon,
                       ttft_slo_s=0.5, tpot_slo_s=0.02, max_context_tokens=max_context, routing=routing,
                       sample_dt_s=dt)
        ref = simulate_reference("disaggregated", arrival, prompt, output, p_prefill=p, n_prefill=n, p_decode=pd,
                                 n_decode=n, prefill_budget=512, decode_max_batch=0, **kw)
        check_against_reference(res, ref, np.full(2 * n, math.floor(kv)))
    else:
        res = simulate(ColocatedPlan(p, n, chunk), arrival, prompt, output, horizon_s=horizon, ttft_slo_s=0.5,
                       tpot_slo_s=0.02, max_context_tokens=max_context, routing=routing, sample_dt_s=dt)
        ref = simulate_reference("colocated", arrival, prompt, output, p=p, n_instances=n, chunk=chunk,
                                 max_batch=0, **kw)
        check_against_reference(res, ref, np.full(n, math.floor(kv)))
