"""Serving benchmarks (``vllm bench serve``), and the constants fitted to them through the simulator.

For users who can measure only end to end. :func:`read_serving_benchmark` reads the JSON that
``vllm bench serve --save-result`` writes (TTFT and TPOT percentiles, output throughput, one
:class:`ServingMeasurement` per request rate); :func:`serving_workload` rebuilds the requests the
benchmark sent; :func:`fit_serving` fits ``eta_compute`` and ``eta_bw`` (optionally
``overhead_s``) by simulating those requests (:func:`fastsim.sim.simulate_batch`, SPEC §6-7, the
``vllm`` engine policy by default): a coarse grid, then Nelder-Mead, with profile-likelihood 95%
intervals (Bates and Watts 1988, §6.1). The result is a :class:`ServingFit` in a
:class:`fastsim.calibrate.fit.CalibrationReport`.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..catalog import Catalog, default_catalog
from ..constants import CONSTANTS, Calibration, CalibrationEntry
from ..errors import FastsimInputError
from ..stepmodel import StepConstants, step_params
from .fit import CalibrationReport

__all__ = ["ServingMeasurement", "ServingFit", "read_serving_benchmark", "serving_workload", "serving_result_json",
           "fit_serving", "SERVING_KEYS", "SERVING_PERCENTILES"]

#: Keys a serving-benchmark result must hold: the names ``vllm bench serve --save-result`` writes
#: (``vllm/benchmarks/serve.py``: ``main_async`` writes ``request_rate``, a number or ``"inf"``;
#: ``benchmark`` writes ``duration`` (s), ``completed``, ``total_input_tokens``,
#: ``total_output_tokens``, ``output_throughput`` (tokens/s) and, per metric of
#: ``--percentile-metrics``, ``mean_/median_/std_<metric>_ms``).
SERVING_KEYS = ("request_rate", "completed", "duration", "total_input_tokens", "total_output_tokens",
                "output_throughput", "median_ttft_ms", "median_tpot_ms")
#: TTFT and TPOT percentiles the serving fit uses when a result holds them (50 = ``median_*_ms``,
#: others ``p90_*_ms``, ``p99_*_ms``: vLLM names a percentile ``p{p}_<metric>_ms``, 99 by default).
SERVING_PERCENTILES = (50, 90, 99)
_PCT_KEY = re.compile(r"^p(\d+(?:\.\d+)?)_(ttft|tpot)_ms$")


@dataclass(frozen=True)
class ServingMeasurement:
    """One run of a serving benchmark at one request rate (one vLLM ``bench serve`` result).

    Attributes
    ----------
    source : str
        The file (and ``[i]``, the result's index, when the file holds several).
    request_rate_req_per_s : float
        Configured request rate (``request_rate``); ``inf`` = every request sent at once.
    num_prompts : int
        Requests sent (``num_prompts``, else ``completed + failed``).
    completed : int
        Requests that succeeded (``completed``).
    duration_s : float
        Benchmark duration, first request sent to last response (``duration``, s).
    total_input_tokens, total_output_tokens : int
        Prompt and generated tokens of the completed requests.
    output_throughput_tokens_per_s : float
        ``total_output_tokens / duration`` (``output_throughput``).
    ttft_s, tpot_s : dict of float -> float
        Percentile (50 = median) -> seconds: ``median_ttft_ms`` and every ``p{p}_ttft_ms``
        (likewise TPOT, which vLLM computes per request as ``(latency - ttft) / (output - 1)``).
    burstiness : float
        Gamma shape of the inter-arrival times (``burstiness``, 1 = Poisson).
    input_tokens, output_tokens : int or None
        ``random_input_len`` / ``random_output_len`` when the result holds them (vLLM writes them
        only through ``--metadata``; SGLang's bench_serving writes them).
    range_ratio : float
        ``random_range_ratio`` when present (lengths uniform in ``L x (1 -+ ratio)``), else 0.
    """

    source: str
    request_rate_req_per_s: float
    num_prompts: int
    completed: int
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    output_throughput_tokens_per_s: float
    ttft_s: dict
    tpot_s: dict
    burstiness: float = 1.0
    input_tokens: int | None = None
    output_tokens: int | None = None
    range_ratio: float = 0.0

    @property
    def mean_input_tokens(self) -> float:
        """Mean prompt tokens of the completed requests (float)."""
        return self.total_input_tokens / self.completed

    @property
    def mean_output_tokens(self) -> float:
        """Mean generated tokens of the completed requests (float)."""
        return self.total_output_tokens / self.completed


def _json_docs(path, where):
    """The JSON values of a file: one value, or several appended ones (``--append-result``)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise FastsimInputError("--serving", where, f"a readable JSON file ({exc.strerror})") from None
    dec, i, docs = json.JSONDecoder(), 0, []
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        try:
            doc, i = dec.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise FastsimInputError(where, f"invalid JSON at line {exc.lineno}", "the JSON that `vllm bench "
                                    "serve --save-result` writes (one object, a list of them, or objects "
                                    "appended one per line)") from None
        docs.extend(doc if isinstance(doc, list) else [doc])
    if not docs:
        raise FastsimInputError(where, "empty file", "at least one benchmark result")
    return docs


def _serving_number(where, d, key, *, integer=False, minimum=0.0, strict=True, required=True, inf=False):
    """A number of a result (numbers in strings accepted: ``--metadata`` writes strings)."""
    if key not in d or d[key] is None:
        if required:
            raise FastsimInputError(f"{where}: {key}", "missing", "a number (the key `vllm bench serve "
                                    "--save-result` writes)")
        return None
    v = d[key]
    x = math.nan
    if isinstance(v, str):
        try:
            x = float(v)
        except ValueError:
            pass
    elif isinstance(v, (int, float)) and not isinstance(v, bool):
        x = float(v)
    ok = (x > minimum if strict else x >= minimum) and (math.isfinite(x) or (inf and x == math.inf))
    if integer and ok and math.isfinite(x):
        ok = x == int(x)
    if not ok:
        what = "an integer" if integer else "a number"
        raise FastsimInputError(f"{where}: {key}", v, f"{what} {'>' if strict else '>='} {minimum:g}"
                                + (" or \"inf\"" if inf else ""))
    return int(x) if integer else x


def _serving_result(where, d) -> ServingMeasurement:
    if not isinstance(d, dict):
        raise FastsimInputError(where, type(d).__name__, "a JSON object of `vllm bench serve` results")
    num = lambda key, **kw: _serving_number(where, d, key, **kw)  # noqa: E731
    rate = num("request_rate", inf=True)
    if d.get("max_concurrency") is not None:
        raise FastsimInputError(f"{where}: max_concurrency", d["max_concurrency"], "null: the fit replays open-loop "
                                "arrivals at request_rate (a concurrency cap holds requests back in the client)")
    if d.get("ramp_up_strategy") is not None:
        raise FastsimInputError(f"{where}: ramp_up_strategy", d["ramp_up_strategy"], "null: one constant request "
                                "rate per result")
    completed = num("completed", integer=True)
    failed = num("failed", integer=True, strict=False, required=False) or 0
    n = num("num_prompts", integer=True, required=False) or completed + failed
    if n < completed:
        raise FastsimInputError(f"{where}: num_prompts", n, f">= completed ({completed})")
    tin = num("total_input_tokens", integer=True)
    tout = num("total_output_tokens", integer=True)
    if tout < completed:
        raise FastsimInputError(f"{where}: total_output_tokens", tout, f">= completed ({completed}): each "
                                "completed request generates at least one token")
    ttft, tpot = {50.0: num("median_ttft_ms") / 1e3}, {50.0: num("median_tpot_ms") / 1e3}
    for key in sorted(d):
        mt = _PCT_KEY.match(key)
        if mt and d[key] is not None:
            p = float(mt.group(1))
            (ttft if mt.group(2) == "ttft" else tpot)[p] = num(key) / 1e3
    burst = num("burstiness", required=False)
    lens = [num(k, integer=True, required=False) for k in ("random_input_len", "random_output_len")]
    ratio = num("random_range_ratio", strict=False, required=False) or 0.0
    if ratio >= 1.0:
        raise FastsimInputError(f"{where}: random_range_ratio", d["random_range_ratio"], "a fraction in [0, 1)")
    return ServingMeasurement(where, rate, n, completed, num("duration"), tin, tout, num("output_throughput"),
                              ttft, tpot, 1.0 if burst is None else burst, lens[0], lens[1], ratio)


def read_serving_benchmark(paths) -> list:
    """Read serving-benchmark results: the JSON that ``vllm bench serve --save-result`` writes.

    Parameters
    ----------
    paths : str, path-like or sequence of them
        One file per request rate, or files holding several results (a JSON list, or objects
        appended one per line by ``--append-result``). Keys read (vLLM ``vllm/benchmarks/serve.py``,
        ``main_async`` and ``benchmark``): :data:`SERVING_KEYS` (required); ``failed``,
        ``num_prompts``, ``burstiness`` and every ``p{p}_ttft_ms`` / ``p{p}_tpot_ms`` (vLLM writes
        the ``--metric-percentiles``, default 99, under these names; its ``percentiles_*_ms``
        lists stay in memory and are not saved) when present; ``random_input_len``,
        ``random_output_len``, ``random_range_ratio`` when present (vLLM saves them only through
        ``--metadata KEY=VALUE``, as strings, which are accepted). ``max_concurrency`` and
        ``ramp_up_strategy`` must be null or absent. Other keys are ignored.

    Returns
    -------
    list of ServingMeasurement
        Sorted by request rate (the order of the files for equal rates).

    Raises
    ------
    FastsimInputError
        A one-line error naming the file (and ``[i]`` for the i-th result of a file holding
        several) and the key: unreadable file or invalid JSON, a required key missing, a value
        that is not a number, counts that are not integers >= 1, times or throughput not > 0, a
        rate not > 0, ``total_output_tokens`` below ``completed``, a concurrency cap or ramp-up.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out = []
    for path in paths:
        where = str(path)
        docs = _json_docs(path, where)
        for i, d in enumerate(docs):
            out.append(_serving_result(where if len(docs) == 1 else f"{where} [{i}]", d))
    if not out:
        raise FastsimInputError("--serving", None, "at least one vLLM bench serve result file")
    return sorted(out, key=lambda m: m.request_rate_req_per_s)


def serving_result_json(m: ServingMeasurement) -> dict:
    """A :class:`ServingMeasurement` as the dict ``vllm bench serve --save-result`` writes (its keys).

    Parameters
    ----------
    m : ServingMeasurement

    Returns
    -------
    dict
        ``request_rate``, ``burstiness``, ``max_concurrency`` (None), ``num_prompts``,
        ``duration``, ``completed``, ``failed``, ``total_input_tokens``, ``total_output_tokens``,
        ``request_throughput``, ``output_throughput``, ``median_ttft_ms``, ``median_tpot_ms``,
        ``p{p}_ttft_ms`` / ``p{p}_tpot_ms`` for the other percentiles, and ``random_input_len``,
        ``random_output_len``, ``random_range_ratio`` when set.
    """
    d = {"request_rate": m.request_rate_req_per_s if math.isfinite(m.request_rate_req_per_s) else "inf",
         "burstiness": m.burstiness, "max_concurrency": None, "num_prompts": m.num_prompts,
         "duration": m.duration_s, "completed": m.completed, "failed": m.num_prompts - m.completed,
         "total_input_tokens": m.total_input_tokens, "total_output_tokens": m.total_output_tokens,
         "request_throughput": m.completed / m.duration_s, "output_throughput": m.output_throughput_tokens_per_s}
    for name, vals in (("ttft", m.ttft_s), ("tpot", m.tpot_s)):
        d[f"median_{name}_ms"] = vals[50.0] * 1e3
        for p, v in vals.items():
            if p != 50.0:
                d[f"p{int(p) if int(p) == p else p}_{name}_ms"] = v * 1e3
    for k, v in (("random_input_len", m.input_tokens), ("random_output_len", m.output_tokens)):
        if v is not None:
            d[k] = v
    if m.range_ratio:
        d["random_range_ratio"] = m.range_ratio
    return d


def serving_workload(m: ServingMeasurement, seed=0, *, input_tokens: int | None = None,
                     output_tokens: int | None = None):
    """The requests of one benchmark run as ``vllm bench serve`` sends them (arrivals and lengths).

    Arrivals as vLLM's ``get_request``: gaps drawn from a gamma distribution of shape
    ``burstiness`` and mean ``1 / rate`` (exponential when 1), accumulated, then scaled so that
    the last request leaves at ``num_prompts / rate``; all at time 0 when the rate is ``inf``.
    Lengths: fixed, or uniform integers in ``[int(L (1 - r)), int(L (1 + r))]`` with a range ratio
    ``r`` (the random dataset's ``--random-range-ratio``).

    Parameters
    ----------
    m : ServingMeasurement
    seed : int or numpy.random.SeedSequence
        Seed of the draws (the same seed gives the same requests: common random numbers).
    input_tokens, output_tokens : int, optional
        Lengths: the result's ``random_input_len`` / ``random_output_len`` when present, else
        these, else the measured means (``total_*_tokens / completed``, rounded).

    Returns
    -------
    tuple of (ndarray(float64), ndarray(int64), ndarray(int64)), each of shape (num_prompts,)
        Arrival times (s), prompt tokens, output tokens.
    """
    rng = np.random.default_rng(seed)
    n = int(m.num_prompts)
    rate = float(m.request_rate_req_per_s)
    if math.isinf(rate):
        arr = np.zeros(n)
    else:
        b = float(m.burstiness)
        arr = np.cumsum(rng.gamma(b, 1.0 / (rate * b), n))
        arr *= (n / rate) / arr[-1]
    lens = []
    for given, arg, mean in ((m.input_tokens, input_tokens, m.mean_input_tokens),
                             (m.output_tokens, output_tokens, m.mean_output_tokens)):
        L = given if given is not None else (arg if arg is not None else max(1, int(round(mean))))
        r = float(m.range_ratio) if given is not None else 0.0
        lo, hi = max(1, int(L * (1.0 - r))), max(1, int(L * (1.0 + r)))
        lens.append(np.full(n, L, np.int64) if hi <= lo else rng.integers(lo, hi + 1, n).astype(np.int64))
    return arr, lens[0], lens[1]


#: Metrics of a serving fit: (name, unit).
_SERVING_UNITS = {"ttft": "s", "tpot": "s per token", "output_throughput": "tokens/s"}


def _serving_metrics(results, horizon_s, percentiles):
    """TTFT / TPOT percentiles (pooled over the replications) and the mean output throughput.

    A request without a first token by the horizon counts with TTFT ``horizon - arrival`` and one
    unfinished with TPOT ``(horizon - first) / (O - 1)`` (lower bounds: the objective keeps growing
    as a trial setting gets slower instead of becoming infinite). Throughput = output tokens of
    the finished requests / the last finish (the horizon if some request is unfinished), as vLLM
    divides by the benchmark's duration.
    """
    ttft, tpot, thr = [], [], []
    for r in results:
        a, f, fin, O = r.arrival_s, r.first_token_s, r.finish_s, r.output_tokens
        started = ~np.isnan(f)
        ttft.append(np.where(started, f - a, horizon_s - a))
        done = ~np.isnan(fin)
        many = started & (O > 1)
        end = np.where(done, fin, horizon_s)
        tpot.append((end[many] - f[many]) / (O[many] - 1))
        dur = float(fin[done].max()) if done.all() and done.any() else horizon_s
        thr.append(float(O[done].sum()) / dur)
    ttft, tpot = np.concatenate(ttft), np.concatenate(tpot)
    out = [float(np.percentile(ttft, p)) for p in percentiles["ttft"]]
    out += [float(np.percentile(tpot, p)) if tpot.size else math.nan for p in percentiles["tpot"]]
    out.append(float(np.mean(thr)))
    return out


@dataclass(frozen=True)
class ServingFit:
    """A fit of step-model constants through the simulator to a serving benchmark (:func:`fit_serving`).

    Attributes
    ----------
    label : str
        What was fitted.
    kind : str
        ``"serving"``.
    gpu, precision : str
        Catalog names.
    values : dict of str -> float
        Fitted value of each parameter (``eta_compute``, ``eta_bw``, optionally ``overhead_s``).
    interval95 : dict of str -> (float, float)
        Profile-likelihood 95% interval of each identified parameter (see :func:`fit_serving`);
        a bound the profile grid did not reach is the grid's edge and named in ``open_bounds``.
    fitted : tuple of str
        Parameters whose profile rose above the threshold on at least one side.
    points : pandas.DataFrame
        One row per (result, metric): ``source`` (str), ``rate_req_per_s`` (float), ``metric``
        (``ttft_p50``, ``ttft_p99``, ``tpot_p50``, ..., ``output_throughput``), ``unit``,
        ``measured``, ``simulated`` (float64, in ``unit``), ``rel_error`` (``simulated / measured
        - 1``) and ``log_error`` (``log(simulated / measured)``, what is minimised).
    sse : float
        Sum of squared log errors at the fit.
    evaluations : int
        Parameter settings simulated (each one a batch over every rate and replication).
    open_bounds : tuple of str
        ``"name low"`` / ``"name high"``: interval bounds that are the profile grid's edge (the
        data do not bound the parameter on that side within the grid).
    policy : str
        The scheduler simulated (``vllm``, ``sglang``, ``trtllm`` or ``lecture``).
    """

    label: str
    kind: str
    gpu: str
    precision: str
    values: dict
    interval95: dict
    fitted: tuple
    points: pd.DataFrame = field(repr=False)
    sse: float = math.nan
    evaluations: int = 0
    open_bounds: tuple = ()
    policy: str = "vllm"

    @property
    def median_abs_rel_error(self) -> float:
        """Median of ``|simulated / measured - 1|`` over every rate and metric (float)."""
        return float(np.median(np.abs(self.points.rel_error)))

    def residuals(self) -> pd.DataFrame:
        """Median and worst relative error per metric and per rate (the schema of :meth:`Fit.residuals`).

        Returns
        -------
        pandas.DataFrame
            Columns ``fit``, ``operation`` (the metric), ``size_band`` (``"all"`` or ``"<rate>
            req/s"``), ``points``, ``median_rel_error``, ``worst_rel_error`` (signed),
            ``worst_size`` (the rate of the worst point, req/s); one row per metric, one per
            (metric, rate), then ``operation`` = ``"all"``.
        """
        rows = []

        def row(op, band, g):
            a = g.rel_error.to_numpy()
            k = int(np.argmax(np.abs(a)))
            rows.append({"fit": self.label, "operation": op, "size_band": band, "points": int(len(a)),
                         "median_rel_error": float(np.median(np.abs(a))), "worst_rel_error": float(a[k]),
                         "worst_size": float(g.rate_req_per_s.to_numpy()[k])})
        p = self.points
        for op, g in p.groupby("metric", sort=False):
            row(op, "all", g)
            for rate, gb in g.groupby("rate_req_per_s", sort=True):
                row(op, f"{rate:g} req/s", gb)
        row("all", "all", p)
        return pd.DataFrame(rows)


def fit_serving(measurements, model, gpu, precision, tp: int = 1, *, instances: int = 1, policy="vllm",
                input_tokens: int | None = None, output_tokens: int | None = None, fit_overhead: bool = False,
                replications: int = 2, seed: int = 0, base: StepConstants | None = None,
                catalog: Catalog | None = None, percentiles=SERVING_PERCENTILES, grid_points: int = 6,
                max_evaluations: int = 60, chunk_tokens: int = 8192) -> CalibrationReport:
    """Fit compute and bandwidth efficiency through the simulator to a serving benchmark's results.

    For users who can measure only end to end: each parameter setting is simulated at every
    measured request rate (:func:`fastsim.sim.simulate_batch`, one call for all rates and
    replications) and compared with the measurements.

    Model of a benchmark run. The requests are those ``vllm bench serve`` sends
    (:func:`serving_workload`: ``num_prompts`` requests, gamma/Poisson gaps scaled to end at
    ``num_prompts / rate``, fixed or uniform lengths), served by ``instances`` colocated
    instances of ``tp`` GPUs under ``policy``: by default ``"vllm"``, the simulator's model of vLLM
    V1's scheduler (:mod:`fastsim.sim.policy`: one token budget shared by decodes and prefill
    chunks, paged KV blocks, preemption by recompute, prefix caching), the closest to a real vLLM
    server. The simulated TTFT and TPOT are per request as vLLM's client computes them (TPOT =
    ``(latency - TTFT) / (output - 1)``), their percentiles by linear interpolation (numpy's, as
    vLLM), pooled over ``replications`` independent draws; throughput = output tokens / the last
    response. Not modelled: HTTP, tokenisation and detokenisation time (they add to the measured
    TTFT; at low rates they show as a TTFT residual and bias ``eta_compute`` low), and an EOS
    before the requested length (vLLM's random dataset ignores EOS).

    Objective: the sum over rates of the squared log errors ``log(simulated / measured)`` of the
    TTFT and TPOT percentiles of ``percentiles`` present in each result (50 always) and of the
    output throughput, each divided by its noise; parameters are searched on the log scale,
    efficiencies bounded to ``[0.02, 1]``. The noise of a metric (weighted least squares) is the
    standard deviation of its log over the single request draws at the unweighted fit (at least
    1%), times ``sqrt(1 + 1 / replications)``: a benchmark run is one draw, the simulated value
    pools ``replications`` of them. So a P99 TTFT near saturation, which moves by tens of percent
    from draw to draw, weighs less than a median TPOT at low load (with ``replications = 1``,
    every metric weighs alike).

    Noise. The simulator is stochastic; every evaluation uses the same requests (common random
    numbers: seeds fixed by ``seed``), so the objective is a deterministic function of the
    parameters, but a step function at fine scale (a request joins one step earlier or later).
    Hence no gradients: a coarse grid (``grid_points`` per parameter, geometric, all simulated in
    one batch) finds the basin, then Nelder-Mead (:func:`scipy.optimize.minimize`, derivative-free)
    refines from the best grid point with a simplex of half the grid spacing, stopping at a 0.2%
    step, restarted while it improves (a simplex can collapse on a step of the objective). The
    measurements' own noise (a finite benchmark) is what the weights and intervals reflect.

    Intervals: profile likelihood on a local grid. The objective is evaluated on a grid around the
    fit (log offsets 0, +-2, 5, 10, 20% for two parameters; 0, +-3, 10, 25% for three; one batch);
    the profile of a parameter is the least objective over the others at each of its values, and
    its 95% interval is where the profile stays below ``SSE_min (1 + F(0.95; 1, m - k) / (m - k))``
    (``m`` residuals, ``k`` parameters; Bates and Watts 1988, §6.1, for normal errors on the log
    scale), read between grid points by linear interpolation. A side the grid does not close is
    reported at the grid's edge (``ServingFit.open_bounds``); a parameter closed on neither side is
    not identified and keeps its default (``base``).

    Parameters
    ----------
    measurements : sequence of ServingMeasurement, or path(s)
        From :func:`read_serving_benchmark` (paths are read with it).
    model : Model or str
        The served model (a catalog name or ``config.json`` path).
    gpu, precision : GPU / Precision or str
        Catalog entries (or names) of the servers.
    tp : int
        GPUs per instance (vLLM ``--tensor-parallel-size``).
    instances : int
        Identical instances behind a least-loaded router (1: one ``vllm serve``).
    policy : {"vllm", "sglang", "trtllm", "lecture"} or EnginePolicy
        The scheduler simulated (default ``"vllm"``, with vLLM's defaults for the GPU's memory; an
        :class:`fastsim.sim.EnginePolicy` carries a server's own ``max_num_batched_tokens`` /
        ``max_num_seqs``).
    input_tokens, output_tokens : int, optional
        Request lengths when the results do not hold ``random_input_len`` /
        ``random_output_len``; default the measured means.
    fit_overhead : bool
        Also fit ``overhead_s`` (seconds per step); else it keeps ``base``'s.
    replications : int
        Independent request draws simulated per rate (>= 1).
    seed : int
        Root seed of the draws.
    base : StepConstants, optional
        The constants not fitted (and the starting point); default the step model's.
    catalog : Catalog, optional
        Resolves names (default: the built-in catalog).
    percentiles : sequence of float
        TTFT / TPOT percentiles fitted when present in a result (default 50, 90, 99).
    grid_points : int
        Coarse-grid values per parameter (>= 2): efficiencies geometric over [0.1, 1], overhead over
        [0.1, 10] ms.
    max_evaluations : int
        Most Nelder-Mead evaluations per fitted parameter.
    chunk_tokens : int
        Prompt tokens per step under the lecture policy (unused by the engine policies).

    Returns
    -------
    CalibrationReport
        ``calibration`` with one entry for (GPU, precision): the fitted constants, the others from
        ``base``; ``fits`` = (:class:`ServingFit`,) with the residual per rate and metric; notes.

    Raises
    ------
    FastsimInputError
        No measurements; unknown names; a configuration whose weights do not fit (no KV left);
        bad counts; anything the reader or the simulator raises.
    """
    from scipy.optimize import minimize
    from scipy.stats import f as f_dist
    from ..sim import ColocatedPlan, simulate_batch
    from ..sim.policy import EnginePolicy, engine_policy
    from ..stepmodel import P_KV_BUDGET_TOKENS
    from ..workload import seeds_for
    cat = catalog or default_catalog()
    if isinstance(measurements, (str, os.PathLike)) or (
            isinstance(measurements, (list, tuple)) and measurements
            and all(isinstance(x, (str, os.PathLike)) for x in measurements)):
        measurements = read_serving_benchmark(measurements)
    ms = list(measurements or ())
    if not ms or not all(isinstance(m, ServingMeasurement) for m in ms):
        raise FastsimInputError("measurements", measurements, "ServingMeasurement objects or result files")
    model = cat.model(model) if isinstance(model, str) else model
    g = cat.gpu(gpu) if isinstance(gpu, str) else gpu
    pr = cat.precision(precision) if isinstance(precision, str) else precision
    for name, v, lo in (("instances", instances, 1), ("replications", replications, 1), ("grid_points", grid_points, 2),
                        ("max_evaluations", max_evaluations, 1), ("chunk_tokens", chunk_tokens, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise FastsimInputError(name, v, f"an integer >= {lo}")
    base = base if base is not None else StepConstants()
    p0 = step_params(model, g, pr, int(tp), base)
    kv = float(p0[P_KV_BUDGET_TOKENS])
    if not kv >= 1:
        raise FastsimInputError("tp", tp, f"a TP at which {model.name} in {pr.name} fits on {g.name} (no KV left)")
    if isinstance(policy, str) and policy in ("vllm", "sglang", "trtllm"):
        pol = engine_policy(policy, g.hbm_bytes, kv_budget_tokens=kv, context_tokens=model.max_context_tokens)
    elif isinstance(policy, EnginePolicy) or policy == "lecture":
        pol = policy
    else:
        raise FastsimInputError("policy", policy, "vllm, sglang, trtllm, lecture or an EnginePolicy")
    pol_name = pol if isinstance(pol, str) else pol.name
    # the requests of every result, drawn once (common random numbers)
    kids = seeds_for(int(seed), int(replications))
    works, pcts = [], []
    for m in ms:
        works.append([serving_workload(m, k, input_tokens=input_tokens, output_tokens=output_tokens) for k in kids])
        pcts.append({"ttft": [p for p in sorted(m.ttft_s) if p in percentiles or p == 50.0],
                     "tpot": [p for p in sorted(m.tpot_s) if p in percentiles or p == 50.0]})
    meas = []
    for m, pc in zip(ms, pcts):
        meas += [m.ttft_s[p] for p in pc["ttft"]] + [m.tpot_s[p] for p in pc["tpot"]]
        meas.append(m.output_throughput_tokens_per_s)
    log_meas = np.log(np.asarray(meas, dtype=np.float64))
    horizon = 2.0 * max(m.duration_s for m in ms) + 10.0
    ctx = max(int(model.max_context_tokens), int(max(int(w[1].max() + w[2].max()) for ws in works for w in ws)))
    names = ["eta_compute", "eta_bw"] + (["overhead_s"] if fit_overhead else [])
    lo_b = np.log([0.02, 0.02, 1e-5][:len(names)])
    hi_b = np.log([1.0, 1.0, 0.1][:len(names)])
    cache, spread = {}, {}
    wt = np.ones(log_meas.size)

    def constants(x):
        return StepConstants(**{**{k: getattr(base, k) for k in CONSTANTS},
                                "memory_utilization": base.memory_utilization,
                                **{n: float(np.exp(v)) for n, v in zip(names, x)}})

    def evaluate(X):
        """Log residuals (K, m) of the parameter settings X (K, k), one simulate_batch call."""
        X = np.clip(np.atleast_2d(np.asarray(X, dtype=np.float64)), lo_b, hi_b)
        keys = [tuple(np.round(x, 9)) for x in X]
        todo = [k for k in dict.fromkeys(keys) if k not in cache]
        if todo:
            plans, wl = [], []
            for k in todo:
                p = step_params(model, g, pr, int(tp), constants(np.array(k)))
                pl = ColocatedPlan(p, int(instances), int(chunk_tokens))
                for ws in works:
                    for w in ws:
                        plans.append(pl)
                        wl.append(w)
            res = simulate_batch(plans, wl, horizon_s=horizon, ttft_slo_s=1.0, tpot_slo_s=1.0,
                                 max_context_tokens=ctx, measure_window=(0.0, 1.0),
                                 sample_dt_s=max(horizon / 200.0, 1e-3), full=True, policy=pol)
            i = 0
            for k in todo:
                sim, reps = [], []
                for ws, pc in zip(works, pcts):
                    sim += _serving_metrics(res[i:i + len(ws)], horizon, pc)
                    reps.append([_serving_metrics([r], horizon, pc) for r in res[i:i + len(ws)]])
                    i += len(ws)
                cache[k] = np.log(np.maximum(np.asarray(sim, dtype=np.float64), 1e-12)) - log_meas
                spread[k] = np.log(np.maximum(np.concatenate(reps, axis=1), 1e-12))
        return np.array([cache[k] for k in keys]) * wt

    def sse(x):
        # outside the bounds: the value at the nearest bound plus a penalty, so that the simplex
        # comes back instead of collapsing onto a bound's face (scipy's bounded Nelder-Mead clips)
        xc = np.clip(x, lo_b, hi_b)
        r = evaluate(xc)[0]
        return float(r @ r) + 100.0 * float(np.sum((np.asarray(x) - xc) ** 2))

    def nelder_mead(x0, scale):
        """Nelder-Mead from x0 (simplex of size scale), restarted from its result while it improves."""
        best, fbest, nfev = np.asarray(x0, dtype=np.float64), sse(x0), 0
        for _ in range(4):
            simplex = np.vstack([best] + [best + np.eye(len(names))[j] * scale[j] for j in range(len(names))])
            o = minimize(sse, best, method="Nelder-Mead",
                         options={"initial_simplex": simplex, "xatol": 2e-3, "fatol": 1e-4 * fbest,
                                  "maxfev": int(max_evaluations) * len(names)})
            nfev += int(o.nfev)
            improved = o.fun < fbest * (1.0 - 1e-3)
            if o.fun <= fbest:
                best, fbest = np.clip(o.x, lo_b, hi_b), float(o.fun)
            if not improved:
                break
            scale = np.maximum(np.asarray(scale) * 0.5, 0.02)
        return best, nfev
    # 1) coarse grid, one batch
    axes = [np.log(np.geomspace(0.1, 1.0, grid_points))] * 2
    if fit_overhead:
        axes.append(np.log(np.geomspace(1e-4, 1e-2, grid_points)))
    G = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(names))
    R = evaluate(G)
    S = (R * R).sum(axis=1)
    x0 = G[int(np.argmin(S))]
    # 2) Nelder-Mead from the best grid point (restarted while it improves)
    step = 0.5 * np.array([float(a[1] - a[0]) for a in axes])
    xh, nm_evals = nelder_mead(x0, np.where(x0 + step <= hi_b, step, -step))
    noise = None
    if replications > 1:
        # 2b) weights: each metric's noise, from the spread of single draws at the fit (a benchmark run is
        # one draw of num_prompts requests; the simulated value pools `replications` of them)
        evaluate(xh)
        sd = spread[tuple(np.round(np.clip(xh, lo_b, hi_b), 9))].std(axis=0, ddof=1)
        noise = np.maximum(sd, 0.01) * math.sqrt(1.0 + 1.0 / replications)
        wt = 1.0 / noise
        xh, n1 = nelder_mead(xh, np.full(len(names), 0.05))
        nm_evals += n1
    offs = (np.array([-0.2, -0.1, -0.05, -0.02, 0.0, 0.02, 0.05, 0.1, 0.2]) if len(names) == 2
            else np.array([-0.25, -0.1, -0.03, 0.0, 0.03, 0.1, 0.25]))
    for _ in range(3):
        # 3) profile likelihood on a local grid, one batch; a better grid point restarts the search
        L = np.clip(np.stack(np.meshgrid(*[xh[j] + offs for j in range(len(names))], indexing="ij"), -1)
                    .reshape(-1, len(names)), lo_b, hi_b)
        RL = evaluate(L)
        SL = (RL * RL).sum(axis=1)
        rh = evaluate(xh)[0]
        if SL.min() >= float(rh @ rh) - 1e-9:
            break
        x1, n1 = nelder_mead(L[int(np.argmin(SL))], np.full(len(names), 0.03))
        nm_evals += n1
        xh = x1
    SL = SL.reshape((len(offs),) * len(names))
    rh = evaluate(xh)[0]
    sse_h = float(rh @ rh)
    rh = rh / wt
    m_res, k_par = log_meas.size, len(names)
    sse_min = min(sse_h, float(SL.min()))
    dof = max(m_res - k_par, 1)
    thr = sse_min * (1.0 + float(f_dist.ppf(0.95, 1, dof)) / dof)
    values, iv, fitted, open_b = {}, {}, [], []
    c = len(offs) // 2
    for j, n in enumerate(names):
        prof = SL.min(axis=tuple(a for a in range(k_par) if a != j))
        ends = []
        for side, rng_ in (("low", range(c - 1, -1, -1)), ("high", range(c + 1, len(offs)))):
            prev, b = c, None
            for i in rng_:
                if prof[i] > thr:
                    # linear interpolation between the last grid value below and this one
                    f0, f1 = max(prof[prev], 0.0), prof[i]
                    t = 1.0 if f1 <= f0 else min(max((thr - f0) / (f1 - f0), 0.0), 1.0)
                    b = xh[j] + offs[prev] + t * (offs[i] - offs[prev])
                    break
                prev = i
            if b is None:
                b = min(max(xh[j] + offs[0 if side == "low" else -1], lo_b[j]), hi_b[j])
                open_b.append(f"{n} {side}")
            ends.append(float(np.exp(b)))
        values[n] = float(np.exp(xh[j]))
        closed = [s for s in ("low", "high") if f"{n} {s}" not in open_b]
        if closed:
            fitted.append(n)
            iv[n] = (min(ends[0], values[n]), max(ends[1], values[n]))
    # residual table
    rows, i = [], 0
    for m, pc in zip(ms, pcts):
        for name in ("ttft", "tpot"):
            for p in pc[name]:
                rows.append((m.source, m.request_rate_req_per_s, f"{name}_p{p:g}", _SERVING_UNITS[name], meas[i]))
                i += 1
        rows.append((m.source, m.request_rate_req_per_s, "output_throughput", _SERVING_UNITS["output_throughput"],
                     meas[i]))
        i += 1
    pts = pd.DataFrame(rows, columns=["source", "rate_req_per_s", "metric", "unit", "measured"])
    pts["simulated"] = pts.measured.to_numpy() * np.exp(rh)
    pts["rel_error"] = np.exp(rh) - 1.0
    pts["log_error"] = rh
    label = (f"serving, {model.name} {g.name} {pr.name} TP{int(tp)} x {int(instances)}, {pol_name}, "
             + ", ".join(f"{m.request_rate_req_per_s:g}" for m in ms) + " req/s")
    n_eval = len(cache)
    fit = ServingFit(label, "serving", g.name, pr.name, values, iv, tuple(fitted), pts, sse_h, n_eval,
                     tuple(open_b), pol_name)
    kept = {k: getattr(base, k) for k in CONSTANTS}
    kept.update({k: values[k] for k in fitted})
    entry = CalibrationEntry(g.name.upper(), pr.name.upper(), StepConstants(**kept,
                             memory_utilization=base.memory_utilization), tuple(fitted),
                             tuple((k, *iv[k]) for k in fitted), 0)
    notes = [f"fitted through the simulator: {len(ms)} benchmark result(s), {replications} request draw(s) per "
             f"rate (seed {seed}, the same draws at every setting), {n_eval} parameter settings simulated "
             f"({len(G)} on the coarse grid, {nm_evals} Nelder-Mead steps, {len(L)} on the profile grid)",
             f"policy {pol_name}" + (f": max_num_batched_tokens {pol.max_num_batched_tokens}, max_num_seqs "
                                     f"{pol.max_num_seqs}, KV blocks of {pol.block_tokens} token(s) ({pol.source})"
                                     if not isinstance(pol, str) else "") + (
                 "; the simulator's model of vLLM V1's scheduler, the closest to a vLLM server"
                 if pol_name == "vllm" else ""),
             "request lengths: " + "; ".join(
                 f"{m.request_rate_req_per_s:g} req/s: {int(works[i][0][1].mean())} prompt / "
                 f"{int(works[i][0][2].mean())} output tokens (mean)" for i, m in enumerate(ms)),
             "95% intervals: profile likelihood on a local grid around the fit (normal log errors, F "
             f"threshold: SSE <= {thr:.4g} against {sse_min:.4g} at the fit)",
             "not modelled: HTTP, tokenisation and detokenisation time (in the measured TTFT, not the simulated)"]
    for n in names:
        if n not in fitted:
            notes.append(f"{n} not identified by these rates (the objective stays within its threshold over the "
                         f"whole profile grid): kept at {getattr(base, n):g}")
    if open_b:
        notes.append("interval bound(s) at the profile grid's edge (the data do not close them): " + ", ".join(open_b))
    for n in names:
        if abs(np.log(values[n]) - hi_b[names.index(n)]) < 1e-6 or abs(np.log(values[n]) - lo_b[names.index(n)]) < 1e-6:
            notes.append(f"{n} = {values[n]:g} is at its search bound")
    if not fit_overhead:
        notes.append(f"overhead_s kept at {base.overhead_s * 1e3:g} ms per step (fit it with fit_overhead / "
                     "--fit-overhead)")
    src = "serving benchmark " + ", ".join(dict.fromkeys(Path(m.source.split(" [")[0]).name for m in ms))
    return CalibrationReport(Calibration((entry,), src), (fit,), tuple(notes))
