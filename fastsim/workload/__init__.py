"""Workloads: request arrival times and token lengths, from traces or drawn (SPEC sections 1, 6, 9).

A :class:`Workload` is three aligned arrays, one entry per request: arrival time (s, ascending,
on a time axis that starts at 0), prompt tokens P and output tokens O (O counts every generated
token, the first included, so O >= 1). It may also carry prefix blocks (:class:`PrefixBlocks`:
per request, the ids of its ``block_tokens``-token blocks, over its prompt or, with
``spans_output``, its prompt and answer; equal ids are equal content), which a simulator of prefix
caching reads; :func:`prefix_reuse_bound` gives the share of prompt tokens an unbounded cache could
serve. Workloads come from

- real traces: :func:`read_trace` reads the traces shipped with the package (``azure-conv``,
  ``azure-code``: the Azure LLM inference traces; ``mooncake-conv``: the Mooncake conversation
  trace, with its prefix blocks), any CSV in the Azure format, or a Mooncake JSONL file (its
  ``hash_ids`` become prefix blocks of 512 tokens);
- synthetic draws: :func:`synthesize` (Poisson or gamma arrivals, lognormal or fixed lengths,
  optionally a shared system prompt and multi-turn sessions whose next prompt holds the previous
  answer, with their prefix blocks),
  :func:`synthesize_profile` (arrivals whose rate follows a :class:`RateProfile` over time, from
  :func:`read_rate_profile`: the shipped production profiles or a CSV of per-window rates),
  :func:`synthesize_from_trace` (lengths, and blocks, resampled from a trace),
  :func:`scenario_workload`;
- the benchmarks people run: :func:`offline_requests` (N requests at t = 0: trtllm-bench,
  ``vllm bench throughput``, MLPerf Offline), :func:`online_requests` (N requests at a rate:
  ``vllm bench serve``), :func:`all_at_once` (a trace's requests at t = 0), each drawn with the
  common random numbers below and served until the last finishes by
  :func:`fastsim.sim.simulate_drained`.

Randomness and common random numbers
------------------------------------
Every random number comes from a :class:`numpy.random.Generator` built from a child of one
:class:`numpy.random.SeedSequence`. :func:`unit_draws` returns, per request index, a unit-mean
inter-arrival gap, a standard normal variate for each length and a uniform variate for trace
resampling. The draws are made in blocks of ``DRAW_BLOCK`` requests, block ``b`` of stream ``s``
from the child with spawn key ``seed.spawn_key + (s, b)``, so request ``i`` always receives the
same variates whatever the rate, the horizon or the number of requests drawn. A workload at rate
``r`` places request ``i`` at ``cumsum(gaps)[i] / r``: two rates on one seed see the same
requests with the same lengths, the lower rate fewer of them within the horizon.

Sources: Azure LLM inference traces 2023 (Patel et al., "Splitwise", ISCA 2024; CC-BY-4.0, see
``fastsim/data/traces/ATTRIBUTION.md``); Mooncake traces (Qin et al., "Mooncake", FAST 2025;
Apache-2.0; ``hash_ids`` of 512-token blocks); vLLM automatic prefix caching (16-token KV blocks,
each hashed with its whole prefix); common random numbers (Law, "Simulation Modeling and
Analysis", 5th ed., §11.2).

The package, in the order data flows through it:

- :mod:`fastsim.workload.records`: :class:`Workload`, :class:`PrefixBlocks`,
  :func:`prefix_reuse_bound`, and a planner's length figures (:func:`length_quantiles`,
  :func:`length_means`);
- :mod:`fastsim.workload.traces`: :func:`read_trace` (the shipped traces, Azure CSV, Mooncake
  JSONL) and :func:`trace_rate_warning`;
- :mod:`fastsim.workload.draws`: :func:`unit_draws` and :func:`seeds_for` (common random
  numbers), :func:`synthesize` and its relatives;
- :mod:`fastsim.workload.profiles`: :class:`RateProfile`, :func:`read_rate_profile`,
  :func:`synthesize_profile` (rates that follow days of production traffic);
- :mod:`fastsim.workload.benchmarks`: :func:`offline_requests`, :func:`online_requests`,
  :func:`all_at_once` (finite workloads, for runs that drain).

The moments of the lengths a model with a bounded context serves (:func:`served_lengths`) are
properties of the length distributions alone and live with them, in
:mod:`fastsim.catalog.lengths`; they are re-exported here.
"""
from __future__ import annotations

from ..catalog.lengths import TRUNCATION_NEGLIGIBLE, ServedLengths, served_lengths
from .draws import (DRAW_BLOCK, SESSION_GAP_S, UnitDraws, scenario_workload, seeds_for, synthesize,
                    synthesize_from_trace, synthesize_many, unit_draws)
from .benchmarks import all_at_once, offline_requests, online_requests
from .profiles import BUILTIN_PROFILES, ProfileGaps, RateProfile, read_rate_profile, synthesize_profile
from .records import PrefixBlocks, Workload, length_means, length_quantiles, prefix_reuse_bound
from .traces import BUILTIN_TRACES, MOONCAKE_BLOCK_TOKENS, PLAUSIBLE_RATE_REQ_PER_S, read_trace, trace_rate_warning

# Besides __all__: the limits, and the helpers other modules reach for (the command line, the
# capacity searches, and the fleet's streamed profile arrivals, which draw the same streams as
# synthesize_profile). _initial_draws is looked up here when synthesize and synthesize_profile
# run, so that replacing it on this package (a test of a short first draw does) takes effect.
from ..catalog.lengths import _dists  # noqa: F401
from .draws import MAX_PREFIX_BLOCKS, MAX_REQUESTS  # noqa: F401
from .draws import (_S_GAPS, _S_OUTPUT, _S_PICK, _S_PROMPT, _block_rng, _check_arrival,  # noqa: F401
                    _check_count, _check_horizon, _initial_draws, _lengths, _seed_seq)
from .profiles import _profile_times  # noqa: F401

__all__ = [
    "Workload", "PrefixBlocks", "UnitDraws", "BUILTIN_TRACES", "DRAW_BLOCK", "MOONCAKE_BLOCK_TOKENS",
    "SESSION_GAP_S", "prefix_reuse_bound", "read_trace", "trace_rate_warning", "PLAUSIBLE_RATE_REQ_PER_S",
    "unit_draws", "seeds_for", "synthesize", "synthesize_many",
    "synthesize_from_trace", "scenario_workload", "length_quantiles", "length_means",
    "served_lengths", "ServedLengths", "TRUNCATION_NEGLIGIBLE",
    "RateProfile", "ProfileGaps", "BUILTIN_PROFILES", "read_rate_profile", "synthesize_profile",
    "offline_requests", "online_requests", "all_at_once",
]
