"""The full-stack ledger of one token and the optimization ladder (lecture 16 §1, script 01).

Llama-3.1-70B on 8 x H100 (TP8), context 4096:

1. one decode step broken into weight read, KV read, compute, all-reduce and kernel launch, at
   batch 1 and 64, eager and under CUDA graphs;
2. the optimization ladder, levels 0-5 and a batch-1 control row of level 5;
3. a 2,048-token prefill: compute-bound, with a much larger all-reduce.

Run:  python examples/01_full_stack_ledger.py [--plot ledger.png]
"""
import argparse

from tabulate import tabulate

from fastsim.ledger import ladder, ledger, ledger_table, plot_ledger

MODEL, GPU, TP = "llama-3.1-70b", "H100", 8


def ms(x):
    return f"{x * 1e3:.2f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plot", metavar="FILE.png", help="draw the ledger as stacked bars")
    args = ap.parse_args(argv)

    print("Demo 1: one decode step of Llama-3.1-70B on 8 x H100 (TP8, BF16, context 4096), in ms")
    rows = []
    for label, batch, kpl, launch_s in (("batch 1, eager (27 kernels x 4 us)", 1, 27, 4e-6),
                                        ("batch 1, fused + CUDA graphs", 1, 12, 1e-6),
                                        ("batch 64, fused + CUDA graphs", 64, 12, 1e-6)):
        r = ledger(MODEL, GPU, "BF16", TP, batch=batch, context_tokens=4096, kernels_per_layer=kpl,
                   launch_s=launch_s)
        rows.append([label, ms(r.weight_read_s), ms(r.kv_read_s), ms(r.compute_s), ms(r.allreduce_s),
                     ms(r.launch_s), ms(r.step_s), r.binding])
    print(tabulate(rows, headers=["step", "weight", "KV", "compute", "all-reduce", "launch", "step", "binding"],
                   disable_numparse=True))

    print("\nDemo 2: the optimization ladder ($2 per GPU-hour, 700 W per GPU)")
    lad = ladder(MODEL, GPU, TP)
    print(tabulate([[r.level, r.change, r.batch, r.precision, ms(r.step_s), f"{r.tokens_per_s_per_gpu:,.1f}",
                     f"{r.usd_per_million_tokens:.3f}", f"{r.joules_per_token:.3f}", f"{r.speedup_vs_level0:.1f}x"]
                    for _, r in lad.iterrows()],
                   headers=["level", "change", "batch", "prec", "step ms", "tokens/s/GPU", "$/M tokens", "J/token",
                            "vs level 0"], disable_numparse=True))
    t = lad.tokens_per_s_per_gpu
    print(f"batching (level 2 -> 3): {t[3] / t[2]:.1f}x, not 64x (exercise 1); "
          f"level 0 -> 5: {t[5] / t[0]:.0f}x")

    print("\nDemo 3: a 2,048-token prefill (batch 1) against a batch-1 decode step, in ms")
    tab = ledger_table(MODEL, GPU, "BF16", TP, batch=1, prefill_tokens=[0, 2048])
    print(tabulate([["prefill 2048" if r.prefill_tokens else "decode", ms(r.weight_read_s), ms(r.compute_s),
                     ms(r.allreduce_s), r.binding] for _, r in tab.iterrows()],
                   headers=["step", "weight", "compute", "all-reduce", "binding"], disable_numparse=True))
    if args.plot:
        plot_ledger(ledger_table(MODEL, GPU, "BF16", TP, batch=[1, 64], prefill_tokens=[0, 2048]), args.plot)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
