"""Simulator invariants, the fast path against the reference on realistic loads, and determinism."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastsim.catalog import default_catalog
from fastsim.sim import ColocatedPlan, DisaggregatedPlan, RequestStatus, simulate, simulate_batch
from reference_sim import check_against_reference, simulate_reference
from fastsim.stepmodel import P_KV_BUDGET_TOKENS, step_params
from fastsim.workload import synthesize

CAT = default_catalog()
CHAT = CAT.scenario("chat")
P70 = step_params(CAT.model("llama-3.1-70b"), CAT.gpu("B200"), CAT.precision("FP8"), 1)
P70_TP2 = step_params(CAT.model("llama-3.1-70b"), CAT.gpu("H100"), CAT.precision("FP8"), 2)


def budget(p, kv):
    q = p.copy()
    q[P_KV_BUDGET_TOKENS] = kv
    return q


# ------------------------------------------------------- the colocated fast path on realistic loads

@pytest.mark.parametrize("p, n_inst, chunk, max_batch, rate, kv", [
    (P70, 2, 512, 0, 24.0, None),          # chat at capacity: long runs of pure-decode steps
    (P70, 1, 2048, 0, 20.0, 60_000.0),     # KV-bound: finishes let queued requests in
    (P70_TP2, 3, 256, 16, 30.0, None),     # batch cap, TP2 all-reduce, three instances
])
def test_fast_path_matches_reference_on_realistic_loads(p, n_inst, chunk, max_batch, rate, kv):
    horizon = 25.0
    w = synthesize("chat", rate, horizon, 5)
    o = w.output_tokens.copy()
    o[::7] = 1                              # some single-token outputs
    pp = p if kv is None else budget(p, kv)
    r = simulate(ColocatedPlan(pp, n_inst, chunk, max_batch), w.arrival_s, w.prompt_tokens, o,
                 horizon_s=horizon, ttft_slo_s=1.0, tpot_slo_s=0.05, sample_dt_s=0.25)
    ref = simulate_reference("colocated", w.arrival_s, w.prompt_tokens, o, horizon=horizon, dt=0.25,
                             max_context=131072, routing="least-loaded", p=pp, n_instances=n_inst,
                             chunk=chunk, max_batch=max_batch)
    check_against_reference(r, ref, np.full(n_inst, np.floor(pp[P_KV_BUDGET_TOKENS])))
    assert (r.status == RequestStatus.FINISHED).sum() > 100


# ------------------------------------------------------- invariants (hypothesis)

@st.composite
def plans_and_work(draw):
    n = draw(st.integers(1, 40))
    gaps = draw(st.lists(st.floats(0.0, 0.2), min_size=n, max_size=n))
    arrival = np.cumsum(np.array(gaps))
    prompt = np.array(draw(st.lists(st.integers(1, 3000), min_size=n, max_size=n)), dtype=np.int64)
    output = np.array(draw(st.lists(st.integers(1, 300), min_size=n, max_size=n)), dtype=np.int64)
    kv = draw(st.floats(500.0, 20_000.0))
    if draw(st.booleans()):
        plan = ColocatedPlan(budget(P70, kv), draw(st.integers(1, 3)), draw(st.sampled_from([64, 512, 2048])),
                             draw(st.sampled_from([0, 2, 8])))
    else:
        plan = DisaggregatedPlan(budget(P70, kv), draw(st.integers(1, 2)), budget(P70, kv), draw(st.integers(1, 2)),
                                 draw(st.sampled_from([512, 8192])), draw(st.sampled_from([0, 4])))
    cut = draw(st.floats(0.05, 1.0))
    return plan, arrival, prompt, output, cut


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(x=plans_and_work())
def test_every_accepted_request_finishes_or_is_running_at_the_horizon(x):
    """Run to completion, then cut at an earlier horizon: the cut run is a prefix of the long one.

    With no arrivals after the last, a long horizon finishes every accepted request (nothing
    stalls); at a shorter horizon each accepted request has either finished (at the same time as
    in the long run) or is still in the system (it finishes after the cut in the long run).
    """
    plan, a, P, O, cut = x
    kw = dict(ttft_slo_s=1.0, tpot_slo_s=0.05, measure_window=(0.0, 1.0))
    long = simulate(plan, a, P, O, horizon_s=float(a[-1]) + 1e5, sample_dt_s=1e3, **kw)
    rej = long.status == RequestStatus.REJECTED
    assert np.all(long.status[~rej] == RequestStatus.FINISHED)
    assert np.all(np.isfinite(long.finish_s[~rej]))
    h = max(float(a[-1]), float(np.nanmax(long.finish_s, initial=0.0)) * cut, 1e-3)  # a horizon is > 0
    short = simulate(plan, a, P, O, horizon_s=h, sample_dt_s=h / 7, **kw)
    np.testing.assert_array_equal(short.status == RequestStatus.REJECTED, rej)
    done = short.status == RequestStatus.FINISHED
    running = short.status == RequestStatus.UNFINISHED
    assert np.all(done | running | rej)
    np.testing.assert_array_equal(short.finish_s[done], long.finish_s[done])
    assert np.all(long.finish_s[running] > h)
    assert short.metrics.unfinished == running.sum() == short.in_system[-1] or short.sample_t_s[-1] < h
    assert short.metrics.finished + short.metrics.unfinished + short.metrics.rejected == len(a)


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), r1=st.floats(6.0, 30.0), factor=st.floats(1.15, 1.6),
       chunk=st.sampled_from([512, 2048]))
def test_attainment_does_not_rise_with_rate_on_common_random_numbers(seed, r1, factor, chunk):
    """Same seed at two rates (the higher rate sees the same requests, compressed in time)."""
    horizon = 300.0
    plan = ColocatedPlan(P70, 1, chunk)
    ws = [synthesize(CHAT, r, horizon, seed) for r in (r1, r1 * factor)]
    lo, hi = simulate_batch([plan], ws, horizon_s=horizon, ttft_slo_s=CHAT.ttft_s, tpot_slo_s=CHAT.tpot_s)
    assert hi.attainment <= lo.attainment + 0.02, (lo.attainment, hi.attainment)


# ------------------------------------------------------- determinism across processes and threads

_SCRIPT = textwrap.dedent("""
    import hashlib, numpy as np
    from fastsim.catalog import default_catalog
    from fastsim.sim import ColocatedPlan, DisaggregatedPlan, simulate_batch
    from fastsim.stepmodel import step_params
    from fastsim.workload import synthesize, seeds_for
    cat = default_catalog()
    p = step_params(cat.model("llama-3.1-70b"), cat.gpu("B200"), cat.precision("FP8"), 1)
    plans = [ColocatedPlan(p, 2, 512), DisaggregatedPlan(p, 1, p, 1)]
    works = [synthesize("chat", r, 60.0, s) for r in (15.0, 35.0) for s in seeds_for(3, 3)]
    res = simulate_batch(plans, works, product=True, full=True, horizon_s=60.0, ttft_slo_s=1.0,
                         tpot_slo_s=0.05)
    h = hashlib.sha256()
    for r in res:
        for a in (r.first_token_s, r.finish_s, r.instance, r.decode_instance, r.in_system):
            h.update(np.ascontiguousarray(a).tobytes())
        h.update(repr((r.metrics.attainment, r.metrics.ttft_p90_s, r.metrics.tpot_p99_s)).encode())
    print(h.hexdigest())
""")


def _digest(threads):
    env = dict(os.environ)
    env.pop("NUMBA_NUM_THREADS", None)
    if threads is not None:
        env["NUMBA_NUM_THREADS"] = str(threads)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True,
                         timeout=300, check=True)
    return out.stdout.strip().splitlines()[-1]


def test_same_seed_bit_identical_across_processes_and_thread_counts():
    here = {}
    exec(compile(_SCRIPT.replace("print(h.hexdigest())", "here['d'] = h.hexdigest()"), "<determinism>", "exec"),
         {"here": here})
    one = _digest(1)
    default = _digest(None)
    assert one == default == here["d"]
    assert len(hashlib.sha256().hexdigest()) == len(one)
