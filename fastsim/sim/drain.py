"""Runs that drain, and the figures benchmark clients report (the benchmarks people run).

``trtllm-bench throughput``, ``vllm bench throughput`` and MLPerf Offline queue N requests at
t = 0 and serve them until the last one finishes; ``vllm bench serve`` and ``genai-perf`` send N
requests at a rate and report statistics over all of them once the last has finished. A run
of :func:`fastsim.sim.simulate` stops at its horizon instead; :func:`simulate_drained` chooses the
horizon itself, doubling it until every accepted request has finished, and measures every
request (the measure window is the whole run).

:func:`benchmark_figures` then reads a drained run as those clients do (their definitions, as the
clients' sources state them):

- TTFT: first token time minus arrival, per request;
- TPOT: ``(finish - first token) / (O - 1)`` per request with O > 1 (the first token excluded:
  vLLM ``benchmarks/serve.py`` ``calculate_metrics``, genai-perf's "inter token latency");
- ITL, mean: the mean gap between consecutive tokens over all tokens after the first, i.e.
  ``sum(finish - first token) / sum(O - 1)`` (each request's gaps sum to its decode time). Its
  percentiles would need each token's time, which the simulator does not keep: they are not
  reported rather than approximated;
- E2E: finish minus arrival, per request;
- output throughput: output tokens of the finished requests over the makespan, from the first
  arrival to the last finish (trtllm-bench "output throughput", ``vllm bench throughput``
  "output tokens/s", MLPerf Offline tokens/s).

:func:`measured_means` gives the same means (and E2E percentiles) for a run of
:func:`fastsim.sim.simulate` that stops at its horizon, over its measured requests, counting a
request that never reached the event as +inf, as that run's percentiles count it.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..errors import FastsimInputError, require_positive
from .records import REQ_FINISHED, REQ_REJECTED, REQ_UNFINISHED

__all__ = ["simulate_drained", "benchmark_figures", "BenchmarkFigures", "measured_means", "MAX_DRAIN_HORIZON_S",
           "STATS", "DRAIN_BYTES_PER_REQUEST", "DRAIN_MEMORY_BYTES", "MAX_DRAIN_REQUESTS"]

#: The longest horizon a drained run may need (s); past it the run is reported as not draining.
MAX_DRAIN_HORIZON_S = 1e7
#: Peak memory of a drained ``fastsim simulate`` run per request held (bytes), measured as the peak
#: resident size of offline runs of 3e6 and 1e7 chat requests on 8 H100 instances: about 170 B with
#: the lecture scheduler, 480-600 B with the vLLM policy (the workload, the per-request results, the
#: engine's queues and the copies the figures take); the largest, rounded up.
DRAIN_BYTES_PER_REQUEST = 640
#: The memory a drained command-line run may take (bytes): 24 GiB, halved for the policies and
#: layouts not measured and for the interpreter's own overhead.
DRAIN_MEMORY_BYTES = 12 * 2 ** 30
#: The most requests (over all seeds together) one drained command-line run holds:
#: ``DRAIN_MEMORY_BYTES / DRAIN_BYTES_PER_REQUEST``, rounded down to a round figure.
MAX_DRAIN_REQUESTS = 20_000_000
#: Statistics of a per-request figure, in the order outputs list them.
STATS = ("mean", "p50", "p90", "p99")
_SAMPLES_PER_RUN = 10_000     # sampling grid of a drained run: its samples only feed plots


class BenchmarkFigures(NamedTuple):
    """What a benchmark client reports about one drained run (module docstring for definitions).

    Attributes
    ----------
    requests, finished, rejected : int
        Requests sent, finished, and rejected at arrival (above the context or the KV budget).
    output_tokens : int
        Output tokens of the finished requests.
    makespan_s : float
        First arrival to last finish (s); NaN with no finished request.
    output_tokens_per_s : float
        ``output_tokens / makespan_s``; NaN with no finished request.
    ttft_s, tpot_s, e2e_s : dict
        ``{"mean", "p50", "p90", "p99"}`` over the finished requests (s); TPOT over those with
        O > 1. NaN where no request counts.
    itl_mean_s : float
        Mean inter-token latency over all tokens after the first (s).
    """

    requests: int
    finished: int
    rejected: int
    output_tokens: int
    makespan_s: float
    output_tokens_per_s: float
    ttft_s: dict
    tpot_s: dict
    e2e_s: dict
    itl_mean_s: float

    def value(self, metric: str, stat: str) -> float:
        """One figure by its benchmark name (the measurement schema's ``metric`` and ``stat``).

        Parameters
        ----------
        metric : str
            ``output_tokens_per_s``, ``ttft_s``, ``tpot_s``, ``itl_s`` or ``e2e_s``.
        stat : str
            ``total`` (throughput) or one of :data:`STATS`.

        Returns
        -------
        float
            Seconds, or output tokens per second; NaN where no request counts.

        Raises
        ------
        FastsimInputError
            A metric or statistic the figures do not hold (ITL percentiles among them: per-token
            times are not kept).
        """
        if metric == "output_tokens_per_s":
            if stat != "total":
                raise FastsimInputError("stat", stat, "total for output_tokens_per_s")
            return self.output_tokens_per_s
        if metric == "itl_s":
            if stat != "mean":
                raise FastsimInputError("stat", stat, "mean for itl_s (per-token times are not simulated, "
                                        "so ITL percentiles are not available; tpot_s percentiles are)")
            return self.itl_mean_s
        figures = {"ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s}.get(metric)
        if figures is None:
            raise FastsimInputError("metric", metric, "output_tokens_per_s, ttft_s, tpot_s, itl_s or e2e_s")
        if stat not in figures:
            raise FastsimInputError("stat", stat, " or ".join(STATS))
        return figures[stat]

    def to_dict(self) -> dict:
        """The figures as a JSON-ready dict.

        Returns
        -------
        dict
            The fields, NaN written as None.
        """
        def clean(x):
            return None if isinstance(x, float) and not math.isfinite(x) else x
        out = {k: clean(v) for k, v in self._asdict().items() if not isinstance(v, dict)}
        for k in ("ttft_s", "tpot_s", "e2e_s"):
            out[k] = {s: clean(v) for s, v in getattr(self, k).items()}
        return out


def _stats(x: np.ndarray) -> dict:
    if x.size == 0:
        return {s: math.nan for s in STATS}
    q = np.percentile(x, [50.0, 90.0, 99.0])
    return {"mean": float(x.mean()), "p50": float(q[0]), "p90": float(q[1]), "p99": float(q[2])}


def benchmark_figures(result) -> BenchmarkFigures:
    """The figures a benchmark client reports for one run (module docstring, with their sources).

    Parameters
    ----------
    result : SimResult
        A run of :func:`simulate_drained` (or any run: unfinished requests are left out, so a run
        that did not drain understates its tail).

    Returns
    -------
    BenchmarkFigures
    """
    status = np.asarray(result.status)
    done = status == REQ_FINISHED
    arrival = np.asarray(result.arrival_s)
    first = np.asarray(result.first_token_s)[done]
    finish = np.asarray(result.finish_s)[done]
    out = np.asarray(result.output_tokens)[done]
    arr = arrival[done]
    n_out = int(out.sum())
    if done.any():
        makespan = float(finish.max() - arrival.min())
        tput = n_out / makespan if makespan > 0 else math.inf
    else:
        makespan = tput = math.nan
    decoding = out > 1
    decode_s = (finish - first)[decoding]
    gaps = (out - 1)[decoding]
    itl = float(decode_s.sum() / gaps.sum()) if gaps.sum() > 0 else math.nan
    return BenchmarkFigures(
        requests=int(status.size), finished=int(done.sum()), rejected=int((status == REQ_REJECTED).sum()),
        output_tokens=n_out, makespan_s=makespan, output_tokens_per_s=tput,
        ttft_s=_stats(first - arr), tpot_s=_stats(decode_s / gaps), e2e_s=_stats(finish - arr),
        itl_mean_s=itl)


def _tail_percentile(x: np.ndarray, q: float) -> float:
    """Linear-interpolation percentile of ``x`` (which may hold +inf), +inf where it touches one."""
    xs = np.sort(x)
    pos = q * (xs.size - 1)
    lo, hi = int(math.floor(pos)), int(math.ceil(pos))
    if math.isinf(xs[hi]):
        return math.inf
    return float(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))


def measured_means(result, horizon_s: float, measure_window=(0.2, 0.8)) -> dict:
    """Means of TTFT, TPOT, ITL and E2E (and E2E percentiles) over a horizon run's measured requests.

    The definitions are :func:`benchmark_figures`' (TPOT excludes the first token; ITL is
    token-weighted), over the requests :func:`fastsim.sim.simulate` measures: those arriving in
    ``[f0 x horizon_s, f1 x horizon_s)``. As in that run's percentiles, a measured request that
    never reached the event (rejected, or no first / last token by the horizon) counts as +inf, so
    a mean is +inf as soon as one such request is measured.

    Parameters
    ----------
    result : SimResult
        One run of :func:`fastsim.sim.simulate`.
    horizon_s : float
        Its horizon (s).
    measure_window : (float, float)
        Its ``measure_window`` (SPEC §1: the middle 60%, ``(0.2, 0.8)``).

    Returns
    -------
    dict
        ``ttft_mean_s``, ``tpot_mean_s`` (over measured requests with O > 1), ``itl_mean_s``,
        ``e2e_mean_s``, ``e2e_p50_s``, ``e2e_p90_s``, ``e2e_p99_s`` (float, s); NaN where no
        request counts.
    """
    arrival = np.asarray(result.arrival_s)
    lo, hi = measure_window[0] * horizon_s, measure_window[1] * horizon_s
    m = (arrival >= lo) & (arrival < hi)
    out_tok = np.asarray(result.output_tokens)[m]
    first = np.asarray(result.first_token_s)[m]
    finish = np.asarray(result.finish_s)[m]
    done = np.asarray(result.status)[m] == REQ_FINISHED
    arr = arrival[m]
    ttft = np.where(np.isfinite(first), first - arr, math.inf)
    e2e = np.where(done, finish - arr, math.inf)
    dec = out_tok > 1
    decode_s = np.where(done, finish - first, math.inf)[dec]
    gaps = (out_tok - 1)[dec]
    nan = math.nan
    res = {"ttft_mean_s": float(ttft.mean()) if ttft.size else nan,
           "tpot_mean_s": float((decode_s / gaps).mean()) if gaps.size else nan,
           "itl_mean_s": float(decode_s.sum() / gaps.sum()) if gaps.size else nan,
           "e2e_mean_s": float(e2e.mean()) if e2e.size else nan}
    for s, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        res[f"e2e_{s}_s"] = _tail_percentile(e2e, q) if e2e.size else nan
    return res


def simulate_drained(plan, arrival_s, prompt_tokens, output_tokens, *, ttft_slo_s: float = 1.0,
                     tpot_slo_s: float = 0.05, horizon_hint_s: float | None = None,
                     max_horizon_s: float = MAX_DRAIN_HORIZON_S, **options):
    """Simulate until every accepted request has finished (an offline batch, or a finite online run).

    The horizon starts at ``horizon_hint_s`` (or twice the last arrival plus 60 s) and doubles
    until no accepted request is unfinished; every request is measured (``measure_window=(0, 1)``)
    and samples are taken on a grid of about 1e4 points. A run of this horizon is the run of
    :func:`fastsim.sim.simulate`, so its per-request results are the simulator's, bit for bit.

    Parameters
    ----------
    plan : ColocatedPlan, DisaggregatedPlan or PipelinePlan
    arrival_s : ndarray(float64) of shape (n,)
        Arrival times (s), ascending, >= 0; all 0 for an offline batch.
    prompt_tokens, output_tokens : ndarray(int64) of shape (n,)
        As in :func:`fastsim.sim.simulate`.
    ttft_slo_s, tpot_slo_s : float
        SLOs of the run's attainment figures (s); they do not change the schedule.
    horizon_hint_s : float, optional
        The first horizon tried (s), e.g. an analytic makespan estimate.
    max_horizon_s : float
        The longest horizon tried (s), at most 1e7.
    **options
        ``max_context_tokens``, ``routing``, ``policy``, ``prefix``, ``spec``, ``p_draft``,
        ``spec_seed``: as in :func:`fastsim.sim.simulate`.

    Returns
    -------
    SimResult
        Every request finished or rejected.

    Raises
    ------
    FastsimInputError
        As :func:`fastsim.sim.simulate`; ``horizon_s``, ``measure_window`` or ``sample_dt_s`` in
        ``options`` (the drained run sets them); a bad hint or limit; and a run still unfinished at
        ``max_horizon_s`` (its requests cannot all be served, e.g. a rate above capacity for far too
        long), naming how many are left.
    """
    from .engine import simulate
    for key in ("horizon_s", "measure_window", "sample_dt_s"):
        if key in options:
            raise FastsimInputError(key, options[key], "not given: a drained run chooses its own")
    max_horizon_s = require_positive("max_horizon_s", max_horizon_s)
    if max_horizon_s > MAX_DRAIN_HORIZON_S:
        raise FastsimInputError("max_horizon_s", max_horizon_s, f"at most {MAX_DRAIN_HORIZON_S:g} s")
    arrival_s = np.asarray(arrival_s, dtype=np.float64)
    last = float(arrival_s[-1]) if arrival_s.size else 0.0
    if horizon_hint_s is None:
        horizon = 2.0 * last + 60.0
    else:
        horizon = max(require_positive("horizon_hint_s", horizon_hint_s), last * 1.001 + 1e-3)
    while True:
        horizon = min(horizon, max_horizon_s)
        res = simulate(plan, arrival_s, prompt_tokens, output_tokens, horizon_s=horizon, ttft_slo_s=ttft_slo_s,
                       tpot_slo_s=tpot_slo_s, measure_window=(0.0, 1.0),
                       sample_dt_s=max(horizon / _SAMPLES_PER_RUN, 1e-3), **options)
        left = int((res.status == REQ_UNFINISHED).sum())
        if left == 0:
            return res
        if horizon >= max_horizon_s:
            raise FastsimInputError("max_horizon_s", max_horizon_s,
                                    f"a horizon within which every request finishes ({left:,} of "
                                    f"{res.status.size:,} still unfinished at {horizon:g} s)")
        horizon *= 2.0
