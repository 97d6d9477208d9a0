"""What-if studies: re-plan while one assumption moves (lecture 16 §2.4, script 04).

TPOT target (100 -> 10 ms), FP8 forbidden, GPU prices, model size (8B / 70B / 405B) and traffic
(5 -> 500 req/s). Each setting re-runs the planner; when the simulator is available its top plans
are verified and repaired, otherwise (or with --no-verify) the analytic ranking is shown. The
lecture's figures are printed beside fastsim's.

Run:  python examples/04_what_if.py [--no-verify] [--seeds N] [--horizon SECONDS] [--plot DIR]
(defaults from FASTSIM_EXAMPLE_SEEDS and FASTSIM_EXAMPLE_HORIZON, else 2 seeds of 600 s.)
"""
import argparse
import os

from fastsim import whatif


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-verify", action="store_true", help="analytic screen only")
    ap.add_argument("--seeds", type=int, default=int(os.environ.get("FASTSIM_EXAMPLE_SEEDS", 2)))
    ap.add_argument("--horizon", type=float, default=float(os.environ.get("FASTSIM_EXAMPLE_HORIZON", 600)))
    ap.add_argument("--plot", metavar="DIR", help="write one PNG per study")
    args = ap.parse_args(argv)
    verify = False if args.no_verify else whatif.simulator_available()
    frames = whatif.run_studies(whatif.STUDIES, verify=verify, seeds=args.seeds, horizon_s=args.horizon)
    for name, df in frames.items():
        print(whatif.format_study(df))
        print()
        if args.plot:
            os.makedirs(args.plot, exist_ok=True)
            whatif.plot_study(df, os.path.join(args.plot, f"whatif_{name}.png"))
    t = frames["traffic"]
    gap = (t.usd_per_million_output_tokens / t.efficiency_usd_per_million_output_tokens - 1.0) * 100
    print("integer cost above efficiency cost: " + ", ".join(
        f"{r:g} req/s +{g:.0f}%" for r, g in zip(t.rate_req_per_s, gap)))


if __name__ == "__main__":
    main()
