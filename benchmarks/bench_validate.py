"""``fastsim validate`` on the shipped measurement set (1,180 rows): target <= 60 s on 2 cores.

Warm figures (the kernels loaded from the numba cache before timing). ``extra_info`` holds the
rows expressed and the distinct runs simulated; rows whose engine policy this fastsim lacks are
not simulated, so the figure grows when a policy is added.

Run with ``pytest benchmarks/bench_validate.py --benchmark-enable``; under the default
``--benchmark-disable`` it runs once, as a test (about 10 s warm on 2 cores).
"""


from fastsim.validate import SHIPPED_MEASUREMENTS, validate
from fastsim.validate.run import run_key


def test_validate_shipped_set(benchmark):
    rep = benchmark.pedantic(validate, args=(str(SHIPPED_MEASUREMENTS),), rounds=2, iterations=1, warmup_rounds=1)
    s = rep.summary()
    benchmark.extra_info.update(rows=s["rows"], expressed=s["expressed"],
                                runs=len({run_key(r.measurement) for r in rep.results if r.reason is None}))
    assert s["rows"] == 1180
