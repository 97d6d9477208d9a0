"""The queueing-aware colocated screen (ScreenOptions.queueing; fastsim plan --screen queueing)."""
import math

import pytest

from cliutil import run
from fastsim.analytic import Demand, ScreenOptions, instance_table, plan_for
from fastsim.catalog import default_catalog
from fastsim.search import SLO, max_sustainable_rates

CAT = default_catalog()
SCENARIOS = ["chat", "coding-agent", "offline-batch", "low-latency-8b"]
Q = ScreenOptions(queueing=True, gpus=("B200",), precisions=("FP8",), tps=(1,), modes=("colocated",))


def test_queueing_cap_is_the_pollaczek_khinchine_bound():
    """Coding agent: the capacity is lambda with ceil(P90 / c) step + 2.3 W = TTFT, W the M/G/1 wait."""
    s = CAT.scenario("coding-agent")
    # the figures of the requests the model's context serves (Demand.within_context)
    d = Demand.from_scenario(s).within_context(CAT.model(s.model).max_context_tokens)
    assert d.served_fraction < 1.0
    r = instance_table(s.model, d, options=Q).iloc[0]
    c, step = float(r.chunk_tokens), float(r.colocated_step_s)
    es = d.mean_prompt_tokens / c * step
    es2 = d.mean_prompt_tokens * d.work_prompt_tokens / (c * c) * step * step
    a = d.ttft_s - math.ceil(d.latency_prompt_tokens / c) * step
    lam = a / (2.3 * es2 / 2.0 + a * es)
    assert r.colocated_capacity_req_per_s == pytest.approx(lam, rel=1e-12)
    w = lam * es2 / (2.0 * (1.0 - lam * es))                     # the P90 TTFT sits exactly at the target
    assert math.ceil(d.latency_prompt_tokens / c) * step + 2.3 * w == pytest.approx(d.ttft_s, rel=1e-9)
    plain = instance_table(s.model, d, options=ScreenOptions(gpus=("B200",), precisions=("FP8",), tps=(1,),
                                                             modes=("colocated",))).iloc[0]
    assert r.colocated_capacity_req_per_s < 0.6 * plain.colocated_capacity_req_per_s


def test_queueing_screen_is_within_10_percent_of_the_simulated_capacity():
    plans, dists, slos = [], [], []
    for name in SCENARIOS:
        s = CAT.scenario(name)
        plans.append(plan_for(s.model, Demand.from_scenario(s), gpu="B200", precision="FP8", tp=1, instances=1))
        dists.append(s)
        slos.append(SLO(s.ttft_s, s.tpot_s))
    sims = max_sustainable_rates(plans, dists, slos, seeds=16, horizon_s=600.0, bootstrap=0)
    for name, sim in zip(SCENARIOS, sims):
        s = CAT.scenario(name)
        q = plan_for(s.model, Demand.from_scenario(s), gpu="B200", precision="FP8", tp=1, instances=1,
                     options=ScreenOptions(queueing=True)).instance_capacity_req_per_s
        assert 0.9 <= sim.rate_req_per_s / q <= 1.1, (name, sim.rate_req_per_s, q)
    # the lecture's screen misses the coding agent by half
    assert sims[1].rate_req_per_s / plans[1].instance_capacity_req_per_s < 0.6


def test_cli_screen_flag(capsys):
    rc, out, err = run(capsys, "plan", "--scenario", "coding-agent", "--screen", "queueing", "--no-verify",
                       "--gpu", "B200", "--precision", "FP8", "--tp", "1", "--mode", "colocated")
    assert rc == 0, err
    rc, out, err = run(capsys, "plan", "--scenario", "chat", "--screen", "mg1")
    assert rc == 2 and "--screen" in err
