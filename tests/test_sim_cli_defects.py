"""``fastsim simulate`` / ``capacity`` defects of the second trial: utilisation priced for the lengths
simulated, flags that do not apply refused, --from-plan applying what the plan records."""
import json

import numpy as np
import pytest

from cliutil import run
from fastsim.analytic import Demand, plan_for
from fastsim.catalog import default_catalog
from fastsim.workload import read_trace, seeds_for, synthesize_from_trace

PLAN = ["--gpu", "B200", "--precision", "FP8", "--tp", "1", "--instances", "2"]


def sim(capsys, *extra, rc_expected=0):
    rc, out, err = run(capsys, "simulate", "--format", "json", *extra)
    assert rc == rc_expected, err
    return json.loads(out) if rc == 0 else err


def test_utilisation_uses_the_lengths_simulated(capsys):
    doc = sim(capsys, "--scenario", "chat", *PLAN, "--horizon", "60", "--lengths", "trace:azure-code")
    run0 = doc["runs"][0]
    # the analytic capacity of the same plan for the lengths drawn from azure-code
    wl = synthesize_from_trace(read_trace("azure-code"), 20.0, 60.0, seeds_for(0, 1)[0])
    d = Demand.from_lengths(wl.prompt_tokens, wl.output_tokens, rate_req_per_s=20.0, ttft_s=1.0, tpot_s=0.05)
    cap = plan_for("llama-3.1-70b", d, gpu="B200", precision="FP8", tp=1, instances=2).instance_capacity_req_per_s
    assert len(run0["utilisation"]) == 2
    # accepted requests / horizon / capacity, summed over instances
    accepted = run0["requests"] - run0["rejected"]
    assert sum(run0["utilisation"]) == pytest.approx(accepted / 60.0 / cap, rel=1e-9)
    assert sum(run0["utilisation"]) > 1.6           # ~1.0 each, not the scenario's ~0.6
    assert any("analytic capacity for the lengths simulated" in n for n in doc["notes"])


@pytest.mark.parametrize("extra, kw", [(["--session-turns", "3"], {"session_turns": 3}),
                                       (["--shared-prefix", "2048"], {"shared_prefix_tokens": 2048})])
def test_utilisation_prices_prefixes_and_sessions(capsys, extra, kw):
    from fastsim.workload import synthesize
    doc = sim(capsys, "--scenario", "chat", *PLAN, "--horizon", "60", *extra)
    run0 = doc["runs"][0]
    wl = synthesize("chat", 20.0, 60.0, seeds_for(0, 1)[0], **kw)
    d = Demand.from_lengths(wl.prompt_tokens, wl.output_tokens, rate_req_per_s=20.0, ttft_s=1.0, tpot_s=0.05)
    cap = plan_for("llama-3.1-70b", d, gpu="B200", precision="FP8", tp=1, instances=2).instance_capacity_req_per_s
    scen = plan_for("llama-3.1-70b", Demand.from_scenario(default_catalog().scenario("chat")),
                    gpu="B200", precision="FP8", tp=1, instances=2).instance_capacity_req_per_s
    assert cap < scen                       # longer prompts: a smaller capacity
    accepted = run0["requests"] - run0["rejected"]
    assert sum(run0["utilisation"]) == pytest.approx(accepted / 60.0 / cap, rel=1e-9)
    assert any(extra[0] in n and "lengths simulated" in n for n in doc["notes"])
