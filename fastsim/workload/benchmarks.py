"""The workloads of the benchmarks people run: N requests at once, or N requests at a rate.

``trtllm-bench throughput``, ``vllm bench throughput`` and MLPerf Offline queue N requests at
t = 0 (:func:`offline_requests`); ``vllm bench serve`` and ``genai-perf`` send N requests at a rate
(:func:`online_requests`); both are served until the last request finishes
(:func:`fastsim.sim.simulate_drained`). A trace whose timestamps are all equal is such an offline
burst already; :func:`all_at_once` makes one of any trace (its requests, all at t = 0).

The lengths are fixed ``(P, O)`` (the ``--input-len`` / ``--output-len`` of the benchmark clients),
or drawn with the common random numbers of :func:`fastsim.workload.unit_draws`: request i gets the
lengths, and at a rate the arrival time, that request i of :func:`fastsim.workload.synthesize` gets
on the same seed, so a finite run is a prefix of the horizon run's requests.
"""
from __future__ import annotations

import numpy as np

from ..catalog import LengthDist
from ..catalog.lengths import _dists
from ..errors import FastsimInputError, require_positive
from .draws import MAX_REQUESTS, _check_arrival, _describe, _lengths, _seed_label, _seed_seq, unit_draws
from .records import Workload, _take_prefix

__all__ = ["offline_requests", "online_requests", "all_at_once"]

_LENGTHS_ALLOWED = ("a (prompt_tokens, output_tokens) pair of integers >= 1, a Scenario or scenario name, a "
                    "(LengthDist, LengthDist) pair, or a Workload whose (P, O) pairs are resampled")


def _check_n(n_requests) -> int:
    if isinstance(n_requests, (bool, np.bool_)) or not isinstance(n_requests, (int, np.integer)) \
            or not 1 <= n_requests <= MAX_REQUESTS:
        raise FastsimInputError("n_requests", n_requests, f"an integer from 1 to {MAX_REQUESTS:,}")
    return int(n_requests)


def _is_fixed_pair(lengths) -> bool:
    return (isinstance(lengths, (tuple, list)) and len(lengths) == 2
            and all(isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)) for x in lengths))


def _draw_lengths(lengths, ud):
    """(name, P, O, prefix, description) of ``ud.n`` requests for one of the ``lengths`` forms."""
    n = ud.n
    if _is_fixed_pair(lengths):
        p, o = (int(x) for x in lengths)
        for field, v in (("prompt_tokens", p), ("output_tokens", o)):
            if v < 1:
                raise FastsimInputError(field, v, "an integer >= 1 (O counts the first token)")
        return ("fixed", np.full(n, p, dtype=np.int64), np.full(n, o, dtype=np.int64), None,
                f"prompt fixed {p}, output fixed {o}")
    if isinstance(lengths, Workload):
        if lengths.n == 0:
            raise FastsimInputError("lengths", lengths, "a Workload with at least one request")
        idx = np.minimum((ud.pick_u * lengths.n).astype(np.int64), lengths.n - 1)
        return (f"{lengths.name}-resampled", lengths.prompt_tokens[idx], lengths.output_tokens[idx],
                _take_prefix(lengths.prefix, idx), f"(P, O) resampled from {lengths.name!r} ({lengths.source})")
    if isinstance(lengths, (tuple, list)) and not (len(lengths) == 2 and all(isinstance(d, LengthDist)
                                                                             for d in lengths)):
        raise FastsimInputError("lengths", lengths, _LENGTHS_ALLOWED)
    try:
        name, pd, od = _dists(lengths)
    except FastsimInputError as exc:
        if exc.field != "scenario_or_dists":
            raise
        raise FastsimInputError("lengths", lengths, _LENGTHS_ALLOWED) from None
    return (name, _lengths(pd, ud.prompt_z), _lengths(od, ud.output_z), None,
            f"prompt {_describe(pd)}, output {_describe(od)}")


def offline_requests(n_requests: int, lengths, seed=0, *, name: str | None = None) -> Workload:
    """N requests all arriving at t = 0: the offline benchmark (trtllm-bench, ``vllm bench throughput``).

    Parameters
    ----------
    n_requests : int
        Requests, from 1 to :data:`fastsim.workload.MAX_REQUESTS`.
    lengths : (int, int), Scenario, str, (LengthDist, LengthDist) or Workload
        Fixed ``(prompt_tokens, output_tokens)`` for every request (each >= 1; O counts the first
        token); a scenario (or built-in scenario name) or a pair of distributions whose lengths are
        drawn as :func:`fastsim.workload.synthesize` draws them; or a workload (a trace) whose
        ``(P, O)`` pairs, and prefix blocks, are resampled with replacement as
        :func:`fastsim.workload.synthesize_from_trace` resamples them.
    seed : int or numpy.random.SeedSequence
        Root of the random streams (:func:`fastsim.workload.unit_draws`); fixed lengths draw nothing.
    name : str, optional
        Label (default: the scenario's or trace's name, or ``"fixed"``).

    Returns
    -------
    Workload
        ``n_requests`` requests, ``arrival_s`` all 0.0 (float64), ``horizon_s`` 0. Request i's lengths
        are request i's of ``synthesize`` on the same seed (common random numbers).

    Raises
    ------
    FastsimInputError
        ``n_requests`` not an integer from 1 to MAX_REQUESTS, a length below 1, lengths of
        another form, a bad seed.
    """
    n = _check_n(n_requests)
    ss = _seed_seq(seed)
    ud = unit_draws(ss, n)
    wname, p, o, prefix, desc = _draw_lengths(lengths, ud)
    src = f"offline: {n:,} requests at t = 0, {desc}" + ("" if _is_fixed_pair(lengths) else f", {_seed_label(ss)}")
    return Workload(name or wname, np.zeros(n), p, o, src, 0.0, prefix=prefix)


def online_requests(n_requests: int, rate_req_per_s: float, lengths, seed=0, *, arrival: str = "poisson",
                    cv: float = 1.0, name: str | None = None) -> Workload:
    """N requests sent at a rate: the finite online benchmark (``vllm bench serve``, genai-perf).

    Parameters
    ----------
    n_requests : int
        Requests, from 1 to :data:`fastsim.workload.MAX_REQUESTS`.
    rate_req_per_s : float
        Mean arrival rate (req/s, finite and > 0): ``vllm bench serve --request-rate``, whose gaps
        are exponential (``--burstiness 1``, a Poisson process) or gamma-distributed.
    lengths : (int, int), Scenario, str, (LengthDist, LengthDist) or Workload
        As for :func:`offline_requests`.
    seed : int or numpy.random.SeedSequence
        Root of the random streams.
    arrival : {'poisson', 'gamma'}
        Arrival process (gamma gaps with coefficient of variation ``cv``: ``vllm bench serve
        --burstiness 1 / cv^2``).
    cv : float
        Coefficient of variation of the gaps (1 for ``poisson``).
    name : str, optional
        Label (default as for :func:`offline_requests`).

    Returns
    -------
    Workload
        Request i arrives at ``cumsum(gaps)[i] / rate_req_per_s`` (float64 s, the first after one
        gap, as in :func:`fastsim.workload.synthesize`), with that function's lengths for request i
        on the same seed: the first ``n_requests`` requests of ``synthesize`` over a horizon that
        holds them. ``horizon_s`` is the last arrival.

    Raises
    ------
    FastsimInputError
        As for :func:`offline_requests`; a rate that is not finite and > 0, an unknown arrival
        process or a bad cv.
    """
    n = _check_n(n_requests)
    rate = require_positive("rate_req_per_s", rate_req_per_s)
    ss = _seed_seq(seed)
    arrival, cvf = _check_arrival(arrival, cv)
    ud = unit_draws(ss, n, arrival=arrival, cv=cvf)
    wname, p, o, prefix, desc = _draw_lengths(lengths, ud)
    t = np.cumsum(ud.gaps) / rate
    src = (f"online: {n:,} requests, {arrival} arrivals" + (f" (cv {cvf:g})" if arrival == "gamma" else "")
           + f" at {rate:g} req/s, {desc}, {_seed_label(ss)}")
    return Workload(name or wname, t, p, o, src, prefix=prefix)


def all_at_once(workload: Workload, *, name: str | None = None) -> Workload:
    """A workload's requests, all arriving at t = 0 (a trace's lengths as an offline benchmark).

    Parameters
    ----------
    workload : Workload
        Any workload with at least one request (its order, lengths and prefix blocks are kept).
    name : str, optional
        Label (default: the workload's).

    Returns
    -------
    Workload
        ``arrival_s`` all 0.0, ``horizon_s`` 0.

    Raises
    ------
    FastsimInputError
        Not a Workload, or an empty one.
    """
    if not isinstance(workload, Workload) or workload.n == 0:
        raise FastsimInputError("workload", workload, "a Workload with at least one request")
    return Workload(name or workload.name, np.zeros(workload.n), workload.prompt_tokens, workload.output_tokens,
                    f"{workload.source}; every request at t = 0", 0.0, prefix=workload.prefix)
