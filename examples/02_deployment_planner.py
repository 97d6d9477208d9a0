"""The analytic deployment planner on the four scenarios (lecture 16 §2.1-§2.2, script 02).

1. the cheapest plans of each scenario (chat, coding agent, offline batch, low-latency 8B);
2. whole instances: one instance's capacity against the target rate, integer vs efficiency cost;
3. the efficiency cost of every GPU x precision x mode for chat (US dollars per million output
   tokens, colocated / disaggregated).

All numbers come from the analytic screen (no simulation; see 03 for that).

Run:  python examples/02_deployment_planner.py
"""
import math

from tabulate import tabulate

from fastsim.analytic import Demand, screen
from fastsim.catalog import default_catalog

SCENARIOS = ("chat", "coding-agent", "offline-batch", "low-latency-8b")


def layout(r):
    if r["mode"] == "disaggregated":
        return f"prefill TP{r.prefill_tp} x {r.prefill_instances} + decode TP{r.decode_tp} x {r.decode_instances}"
    return f"TP{r.tp} x {r.instances}"


def usd(x):
    return f"{x:.3f}" if math.isfinite(x) else "-"


def main():
    cat = default_catalog()
    print("Demo 1: the cheapest analytic plans ($ per million output tokens, integer cost at the target rate)")
    grids = {}
    for name in SCENARIOS:
        sc = cat.scenario(name)
        d = Demand.from_scenario(sc)
        g = screen(cat.model(sc.model), d, catalog=cat)
        grids[name] = g
        feas = g[g.feasible].head(3)
        print(f"\n{name}: {sc.model}, {d.rate_req_per_s:g} req/s, P90 TTFT <= {d.ttft_s:g} s, "
              f"P90 TPOT <= {d.tpot_s * 1e3:g} ms (prompt mean {d.mean_prompt_tokens:,.0f}, "
              f"P90 {d.latency_prompt_tokens:,.0f}; output mean {d.mean_output_tokens:,.0f})")
        print(tabulate([[r.gpu, r.precision, r["mode"], layout(r), r.gpus, f"{r.capacity_req_per_s:.1f}",
                         usd(r.usd_per_million_output_tokens), usd(r.efficiency_usd_per_million_output_tokens)]
                        for _, r in feas.iterrows()],
                       headers=["GPU", "prec", "mode", "layout", "GPUs", "capacity req/s", "$/M", "$/M eff"],
                       disable_numparse=True))

    print("\nDemo 2: whole instances (chat, B200 FP8 colocated TP1)")
    g = grids["chat"]
    r = g[(g.gpu == "B200") & (g.precision == "FP8") & (g["mode"] == "colocated") & (g.tp == 1)].iloc[0]
    rate = cat.scenario("chat").rate_req_per_s
    print(f"one instance sustains {r.instance_capacity_req_per_s:.2f} req/s; {rate:g} req/s needs "
          f"{r.instances} instances ({r.capacity_req_per_s / rate:.2f}x the capacity needed, "
          f"utilization {rate / r.capacity_req_per_s:.0%}); integer cost {usd(r.usd_per_million_output_tokens)}, "
          f"efficiency cost {usd(r.efficiency_usd_per_million_output_tokens)}")

    print("\nDemo 3: efficiency cost per GPU x precision, colocated / disaggregated (chat, $ per million output tokens)")
    best = (g[g.feasible].groupby(["gpu", "precision", "mode"])["efficiency_usd_per_million_output_tokens"].min())
    rows = []
    for gpu in cat.gpus:
        row = [gpu]
        for prec in ("BF16", "FP8"):
            cells = [usd(best.get((gpu, prec, m), math.inf)) for m in ("colocated", "disaggregated")]
            row.append(" / ".join(cells))
        rows.append(row)
    print(tabulate(rows, headers=["GPU", "BF16", "FP8"], disable_numparse=True))


if __name__ == "__main__":
    main()
