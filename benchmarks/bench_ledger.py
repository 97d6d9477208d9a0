"""Benchmarks of the ledger: a few hundred configurations in one table, and the ladder.

Run with ``pytest benchmarks/bench_ledger.py --benchmark-enable``; under the default
``--benchmark-disable`` each runs once as a test.
"""
from fastsim.ledger import ladder, ledger_table

GRID = dict(gpu=["H100", "H200", "B200"], precision=["BF16", "FP8"], tp=[1, 2, 4, 8],
            batch=[1, 2, 4, 8, 16, 32, 64, 128], context_tokens=[1024, 4096, 16384],
            prefill_tokens=[0])


def test_ledger_table_576(benchmark):
    t = benchmark(ledger_table, "llama-3.1-70b", **GRID)
    assert len(t) == 3 * 2 * 4 * 8 * 3


def test_ladder(benchmark):
    df = benchmark(ladder)
    assert len(df) == 7
