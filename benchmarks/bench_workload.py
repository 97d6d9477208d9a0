"""Benchmarks of fastsim.workload: reading the Azure conversation trace, drawing a 600-s chat workload.

Run with ``python -m pytest benchmarks/bench_workload.py --benchmark-enable``; with the default
``--benchmark-disable`` each benchmark runs once as a test.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from fastsim.catalog import default_catalog
from fastsim.workload import BUILTIN_TRACES, read_trace, synthesize, synthesize_from_trace

AZURE_CONV = Path(str(resources.files("fastsim").joinpath("data", "traces", BUILTIN_TRACES["azure-conv"][0])))


def test_bench_read_azure_conv(benchmark):
    """Parse and validate the 19,366-row CSV from disk (a path, so the built-in cache is bypassed)."""
    w = benchmark(read_trace, AZURE_CONV)
    assert w.n == 19366


def test_bench_synthesize_chat_600s(benchmark):
    """Poisson arrivals at 20 req/s for 600 s with lognormal chat lengths (about 12,000 requests)."""
    chat = default_catalog().scenario("chat")
    w = benchmark(synthesize, chat, chat.rate_req_per_s, 600.0, 0)
    assert w.mean_rate_req_per_s == pytest.approx(20.0, rel=0.05)


def test_bench_synthesize_from_trace_600s(benchmark):
    """Poisson arrivals at 20 req/s for 600 s with lengths resampled from the Azure conversation trace."""
    trace = read_trace("azure-conv")
    w = benchmark(synthesize_from_trace, trace, 20.0, 600.0, 0)
    assert w.n > 10000
