"""The simulator's early stop (``simulate_batch(stop_after_misses=...)``): a run ends at the first
sample time by which that many measured requests have surely missed the SLO, judged by the
metrics' own rule (engine docstring, "Metrics"), and a run that does not stop is the plain run."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fastsim.catalog import default_catalog
from fastsim.errors import FastsimInputError
from fastsim.sim import ColocatedPlan, DisaggregatedPlan, RequestStatus, simulate_batch
from fastsim.stepmodel import step_params

CAT = default_catalog()
P70 = step_params(CAT.model("llama-3.1-70b"), CAT.gpu("B200"), CAT.precision("FP8"), 1)
CHAT = CAT.scenario("chat")
H = 240.0
KW = dict(horizon_s=H, ttft_slo_s=CHAT.ttft_s, tpot_slo_s=CHAT.tpot_s)
PLANS = {"colocated": ColocatedPlan(P70, 2, 512), "disaggregated": DisaggregatedPlan(P70, 1, P70, 1, 4096)}


def workload(seed, rate):
    """Poisson arrivals in [0, H) with lognormal lengths (mean 1000 prompt, 250 output tokens)."""
    rng = np.random.default_rng(seed)
    a = np.cumsum(rng.exponential(1.0 / rate, int(rate * H * 1.3 + 50)))
    a = a[a < H]
    m = a.shape[0]

    def tokens(mean):
        mu = math.log(mean) - 0.32
        return np.maximum(1, np.rint(rng.lognormal(mu, 0.8, m))).astype(np.int64)
    return a, tokens(1000.0), tokens(250.0)


def sure_misses_at(res, now, lag_s, window=(0.2, 0.8)):
    """The count the early stop makes at sample time ``now``, from the whole run's results.

    A request's first token and finish are known at ``now`` when they are at or before it (the
    whole run and the stopped one are the same run up to the stop). Measured requests arriving
    more than the TTFT target before ``now``: a miss when rejected or its TTFT (inf without a
    first token by ``now``) exceeds the target. Those arriving more than ``lag_s`` before
    ``now`` with their TTFT met and O > 1: a miss when finished by ``now`` with TPOT above the
    target, or not finished by ``now`` with ``(now - first) / (O - 1)`` above it.
    """
    a, o = res.arrival_s, res.output_tokens
    f, fin, st = res.first_token_s, res.finish_s, res.status
    measured = (a >= window[0] * H) & (a < window[1] * H)
    with np.errstate(invalid="ignore"):
        f_now = np.where(f <= now, f, np.inf)
        ttft_ok = (st != RequestStatus.REJECTED) & (f_now - a <= CHAT.ttft_s)
        n1 = np.count_nonzero(measured & (now - a > CHAT.ttft_s) & ~ttft_ok)
        judged = measured & (now - a > CHAT.ttft_s) & (now - a > lag_s) & ttft_ok & (o > 1)
        done = (st == RequestStatus.FINISHED) & (fin <= now)
        slow = np.where(done, (fin - f) / np.maximum(o - 1, 1), (now - f) / np.maximum(o - 1, 1)) > CHAT.tpot_s
    return n1 + int(np.count_nonzero(judged & slow))


@pytest.mark.parametrize("kind", sorted(PLANS))
@pytest.mark.parametrize("rate, lag_s", [(9.0, 30.0), (20.0, 30.0), (20.0, None), (36.0, 5.0), (45.0, 30.0)])
def test_a_run_stops_at_the_first_sample_time_its_sure_misses_reach_the_threshold(kind, rate, lag_s):
    plan = PLANS[kind]
    works = [workload(s, rate) for s in (1, 2)]
    whole = simulate_batch([plan], works, full=True, **KW)
    lag = lag_s if lag_s is not None else CHAT.ttft_s + CHAT.tpot_s * (max(int(w[2].max()) for w in works) - 1)
    for w, r in zip(works, whole):
        m = r.metrics
        misses = m.measured - round(m.attainment * m.measured)
        # never stopping: the plain run, bit for bit, and (judged after the longest output) the
        # count is every miss whose TTFT or TPOT is decided before the last sample in the run
        (kept,) = simulate_batch([plan], [w], full=True, stop_after_misses=10 ** 9, stop_lag_s=lag, **KW)
        for field in ("first_token_s", "finish_s", "status", "in_system", "queue_len", "busy_s"):
            np.testing.assert_array_equal(getattr(kept, field), getattr(r, field))
        assert kept.metrics[:16] == m[:16] and math.isnan(kept.metrics.stopped_at_s)
        counts = [sure_misses_at(r, t, lag) for t in r.sample_t_s]
        # the count of the last sample checked: one before the last arrival at least
        assert kept.metrics.sure_misses in counts and kept.metrics.sure_misses <= misses
        assert kept.metrics.sure_misses >= counts[int(w[0][-1] // 1.0) - 1]
        # a threshold reached in the run: it ends at the first sample time that reaches it
        if counts[-1] < 10:
            continue
        at = max(1, counts[len(counts) // 2])
        t_ref = next(t for t, c in zip(r.sample_t_s, counts) if c >= at)
        (cut,) = simulate_batch([plan], [w], stop_after_misses=at, stop_lag_s=lag, **KW)
        assert cut.stopped_at_s == t_ref
        assert cut.sure_misses >= at
        assert cut.overloaded and cut.queue_slope_req_per_s == cut.arrival_rate_req_per_s
        assert cut.measured == m.measured
        # its attainment counts every request undecided at the stop as a miss: a lower bound
        assert cut.attainment <= m.attainment <= 1.0 - cut.sure_misses / cut.measured


def test_stop_thresholds_are_per_run_and_leave_the_others_alone():
    plan = PLANS["colocated"]
    works = [workload(3, 30.0), workload(4, 6.0)]
    whole = simulate_batch([plan], works, **KW)
    cut = simulate_batch([plan], works, stop_after_misses=[50, 0], stop_lag_s=10.0, **KW)
    assert math.isfinite(cut[0].stopped_at_s) and cut[0].stopped_at_s < 0.8 * H
    assert cut[1][:16] == whole[1][:16] and math.isnan(cut[1].stopped_at_s) and cut[1].sure_misses == 0


@pytest.mark.parametrize("kw, field", [
    (dict(stop_after_misses=-1), "stop_after_misses"), (dict(stop_after_misses=[5]), "stop_after_misses"),
    (dict(stop_after_misses=2.5), "stop_after_misses"), (dict(stop_after_misses=5, stop_lag_s=-1.0), "stop_lag_s"),
    (dict(stop_after_misses=5, stop_lag_s=math.inf), "stop_lag_s"),
    (dict(stop_after_misses=5, policy="vllm"), "stop_after_misses"),
])
def test_bad_stop_settings_are_refused_by_name(kw, field):
    a = np.array([0.0, 1.0])
    w = (a, np.array([10, 20]), np.array([2, 3]))
    with pytest.raises(FastsimInputError) as e:
        simulate_batch([ColocatedPlan(P70, 1, 512)], [w, w], horizon_s=10.0, ttft_slo_s=1.0, tpot_slo_s=0.1, **kw)
    assert e.value.field == field


def test_per_run_slos_equal_runs_with_their_own():
    """``ttft_slo_s`` / ``tpot_slo_s`` as one per run (the searches batch plans of several SLOs so)."""
    plan = PLANS["colocated"]
    works = [workload(5, 20.0), workload(6, 36.0), workload(7, 36.0)]
    slos = [(1.0, 0.05), (2.0, 0.02), (0.5, 0.1)]
    both = simulate_batch([plan], works, horizon_s=H, ttft_slo_s=[a for a, _ in slos], tpot_slo_s=[b for _, b in slos],
                          stop_after_misses=[0, 0, 200], stop_lag_s=10.0)
    for w, (ttft, tpot), m in zip(works, slos, both):
        (one,) = simulate_batch([plan], [w], horizon_s=H, ttft_slo_s=ttft, tpot_slo_s=tpot,
                                stop_after_misses=0 if m is not both[2] else 200, stop_lag_s=10.0)
        assert one[:16] == m[:16] and one.sure_misses == m.sure_misses
    assert len({m.attainment for m in both[:2]}) == 2
    with pytest.raises(FastsimInputError) as e:
        simulate_batch([plan], works, horizon_s=H, ttft_slo_s=[1.0, 2.0], tpot_slo_s=0.05)
    assert e.value.field == "ttft_slo_s"
    with pytest.raises(FastsimInputError) as e:
        simulate_batch([plan], works, horizon_s=H, ttft_slo_s=1.0, tpot_slo_s=[0.05, 0.0, 0.1])
    assert e.value.field == "tpot_slo_s[1]"
