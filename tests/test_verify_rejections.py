"""A plan that rejects requests that fit the model's context fails verification (issue: verified optimality)."""
import json
import subprocess
import sys

import pytest

from fastsim.analytic import Demand, plan_for
from fastsim.catalog import default_catalog
from fastsim.errors import FastsimInputError
from fastsim.search import SLO, repair, verify
from fastsim.workload import seeds_for, synthesize


@pytest.fixture(scope="module")
def case():
    cat = default_catalog()
    s = cat.scenario("chat")
    d = Demand.from_scenario(s)
    # the chat plan of H100 FP8 with TP1 prefill instances: each holds 8,827 tokens of KV, so
    # prompts above that are rejected although they fit Llama-3.1-70B's 131,072-token context
    plan = plan_for(s.model, d, gpu="H100", precision="FP8", mode="disaggregated", prefill_tp=1, decode_tp=2,
                    prefill_instances=3, decode_instances=1)
    wls = [(w.arrival_s, w.prompt_tokens, w.output_tokens)
           for w in (synthesize(s, s.rate_req_per_s, 600.0, c) for c in seeds_for(0, 4))]
    return plan, wls, SLO(s.ttft_s, s.tpot_s), d, cat.model(s.model)


def test_rejections_within_the_context_fail_the_plan(case):
    plan, wls, slo, _, model = case
    v = verify(plan, wls, slo, horizon_s=600.0)
    long_prompts = sum(int(((p > 8827) & (p + o <= model.max_context_tokens)).sum()) for _, p, o in wls)
    assert v.rejected_in_context == long_prompts > 0
    assert v.attainment >= slo.attainment          # the misses alone would let it pass ...
    assert not v.passed                            # ... the rejections do not
    assert "rejects" in v.reason and "fit the model's context" in v.reason
    # a stated budget above the share rejected lets it pass
    ok = verify(plan, wls, slo, horizon_s=600.0, rejection_budget=2.0 * long_prompts / v.requests)
    assert ok.passed and ok.reason == ""
    tight = verify(plan, wls, slo, horizon_s=600.0, rejection_budget=0.5 * long_prompts / v.requests)
    assert not tight.passed


def test_repair_does_not_add_instances_that_cannot_hold_the_requests(case):
    plan, wls, slo, d, _ = case
    r = repair(plan, wls, slo, horizon_s=600.0, latency_prompt_tokens=d.latency_prompt_tokens,
               latency_output_tokens=d.latency_output_tokens)
    assert not r.passed and len(r.history) == 1
    assert "cannot serve them" in r.reason and "rejected" in r.reason


def test_budget_outside_zero_one_is_refused(case):
    plan, wls, slo, _, _ = case
    with pytest.raises(FastsimInputError, match="rejection_budget"):
        verify(plan, wls[:1], slo, horizon_s=600.0, rejection_budget=1.0)


def test_plan_cli_reports_the_failure_and_takes_a_budget():
    out = subprocess.run([sys.executable, "-m", "fastsim", "plan", "--scenario", "chat", "--format", "json",
                          "--seeds", "2", "--search", "screen"], capture_output=True, text=True, check=True)
    plans = json.loads(out.stdout)["plans"]
    bad = [p for p in plans if p["verification"] and p["verification"]["rejected_in_context_requests"]]
    assert bad and all(not p["verification"]["passed"] for p in bad)
    assert all("fit the model's context" in p["verification"]["fail_reason"] for p in bad)
    # failing plans rank after every passing one
    passed = [p["verification"]["passed"] for p in plans if p["verification"]]
    assert passed == sorted(passed, reverse=True)
    err = subprocess.run([sys.executable, "-m", "fastsim", "plan", "--scenario", "chat", "--rejection-budget", "1"],
                         capture_output=True, text=True)
    assert err.returncode == 2 and "--rejection-budget" in err.stderr and "Traceback" not in err.stderr
