"""Check the analytic plans in the discrete-event simulator (lecture 16 §2.3, script 03).

1. Lesson one, the coding agent: screening the P90 TTFT with *mean* lengths picks plans that fail
   in simulation (and some that no instance count can save); screening with the P90 lengths
   removes them.
2. Lesson two: after P90 screening the cheapest coding-agent plan still needs a repair (more
   instances); the other three scenarios pass as planned.

SLO attainment is measured over the requests arriving in the middle 60% of the window; a plan
passes at >= 90% when no run's queue grows without bound ("overloaded").

Run:  python examples/03_verify_with_simulation.py [--seeds N] [--horizon SECONDS]
(defaults from the environment variables FASTSIM_EXAMPLE_SEEDS and FASTSIM_EXAMPLE_HORIZON, else
4 seeds of 600 s.)
"""
import argparse
import math
import os

from tabulate import tabulate

from fastsim.analytic import Demand
from fastsim.catalog import default_catalog
from fastsim.planner import plan_deployment
from fastsim.search import SLO, lone_request_check

SCENARIOS = ("chat", "coding-agent", "offline-batch", "low-latency-8b")


def f3(x):
    return "-" if x is None or not math.isfinite(x) else f"{x:.3f}"


def as_planned(dep):
    """(plan, verification) of the plan exactly as the screen sized it."""
    return dep.repair.history[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=int(os.environ.get("FASTSIM_EXAMPLE_SEEDS", 4)))
    ap.add_argument("--horizon", type=float, default=float(os.environ.get("FASTSIM_EXAMPLE_HORIZON", 600)))
    ap.add_argument("--top-k", type=int, default=3)
    args = ap.parse_args(argv)
    cat = default_catalog()
    kw = dict(top_k=args.top_k, seeds=args.seeds, horizon_s=args.horizon, catalog=cat, search="screen")
    print(f"simulation: {args.seeds} seeds x {args.horizon:g} s per plan")

    sc = cat.scenario("coding-agent")
    model = cat.model(sc.model)
    p90 = Demand.from_scenario(sc)
    print("\nLesson one: coding agent, the top plans of mean-length screening, simulated as planned")
    mean = plan_deployment(model, Demand.from_scenario(sc, latency_quantile=None), sc, **kw)
    slo = SLO(sc.ttft_s, sc.tpot_s)
    rows = []
    for d in sorted(mean.deployments, key=lambda d: d.analytic_usd_per_million_output_tokens):
        plan, v = as_planned(d)
        why = lone_request_check(plan, p90.latency_prompt_tokens, p90.latency_output_tokens, slo, cat)
        rows.append([plan.describe(), f3(d.analytic_usd_per_million_output_tokens), f3(v.attainment),
                     f3(v.ttft_p90_s), "pass" if v.passed else "FAIL",
                     "no count can pass" if why else ""])
    print(tabulate(rows, headers=["plan (mean-length screen)", "$/M analytic", "attainment", "TTFT P90 s",
                                  "as planned", "repairable?"], disable_numparse=True))

    print("\nLesson two: P90 screening, then verification and repair")
    for name in SCENARIOS:
        s = cat.scenario(name)
        rep = plan_deployment(cat.model(s.model), Demand.from_scenario(s), s, **kw)
        rows = []
        for d in rep.deployments:
            p0, v0 = as_planned(d)
            r = d.repair
            rows.append([p0.describe(), f3(d.analytic_usd_per_million_output_tokens), f3(v0.attainment),
                         "yes" if v0.overloaded else "", "pass" if v0.passed else "FAIL",
                         "" if r.repaired_from_instances is None else d.plan.describe(),
                         f3(d.usd_per_million_output_tokens) if r.passed else "-", f3(r.verification.attainment)])
        print(f"\n{name}:")
        print(tabulate(rows, headers=["analytic plan", "$/M analytic", "attainment", "overloaded", "as planned", "repaired to",
                                      "$/M verified", "attainment after"], disable_numparse=True))
        best = rep.deployments[0]
        print(f"cheapest verified: {best.plan.describe()} at ${best.usd_per_million_output_tokens:.3f} per million "
              f"output tokens (analytic ${best.analytic_usd_per_million_output_tokens:.3f})")


if __name__ == "__main__":
    main()
