"""Status codes and result types of the serving simulator (SPEC section 6).

The kernels write plain integers; the names below are what the rest of fastsim reads them with.
"""
from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

import numpy as np

__all__ = [
    "RequestStatus", "RunStatus", "REQ_UNFINISHED", "REQ_FINISHED", "REQ_REJECTED",
    "RUN_OK", "RUN_TRANSFER_OVERFLOW", "RUN_SCRATCH_OVERFLOW", "RUN_HETEROGENEOUS", "SimMetrics", "SimResult",
]

# Per-request status written by the kernels.
REQ_UNFINISHED = 0
REQ_FINISHED = 1
REQ_REJECTED = 2

# Per-run status returned by the kernels (never an exception inside ``prange``).
RUN_OK = 0
RUN_TRANSFER_OVERFLOW = 2
RUN_SCRATCH_OVERFLOW = 3
RUN_HETEROGENEOUS = 4


class RequestStatus(IntEnum):
    """What happened to one request by the end of the horizon (``SimResult.status`` codes).

    Attributes
    ----------
    UNFINISHED : int
        0: accepted, but without its last token by the horizon.
    FINISHED : int
        1: produced its last token within the horizon.
    REJECTED : int
        2: could never run (P + O above the context, or the KV it holds above an instance's
        whole KV budget); counted, never queued (SPEC §6).
    """

    UNFINISHED = REQ_UNFINISHED
    FINISHED = REQ_FINISHED
    REJECTED = REQ_REJECTED


class RunStatus(IntEnum):
    """Outcome of one kernel run; anything but ``OK`` is a bug in fastsim, not in the input.

    Attributes
    ----------
    OK : int
        0: the run completed.
    TRANSFER_OVERFLOW : int
        2: the KV-transfer queue outgrew its preallocated capacity.
    SCRATCH_OVERFLOW : int
        3: a per-run working array outgrew its preallocated capacity.
    HETEROGENEOUS : int
        4: the colocated instances of one run differ (the kernel computes their step constants
        once per run).
    """

    OK = RUN_OK
    TRANSFER_OVERFLOW = RUN_TRANSFER_OVERFLOW
    SCRATCH_OVERFLOW = RUN_SCRATCH_OVERFLOW
    HETEROGENEOUS = RUN_HETEROGENEOUS


class SimMetrics(NamedTuple):
    """Summary of one simulated run (SPEC section 6).

    Percentiles are over the measured requests; a measured request that never reached the
    event (rejected, or no first token / no last token by the horizon) counts as ``+inf``, so a
    percentile is ``inf`` once more than its tail fraction is missing. TPOT percentiles only
    consider requests with ``O > 1``. ``nan`` when there is nothing to measure.

    Attributes
    ----------
    attainment : float
        Fraction of measured requests with TTFT <= target and (O == 1 or TPOT <= target);
        rejected and unfinished measured requests are misses.
    ttft_p50_s, ttft_p90_s, ttft_p99_s : float
        TTFT percentiles (s).
    tpot_p50_s, tpot_p90_s, tpot_p99_s : float
        TPOT percentiles (s per token).
    throughput_tokens_per_s : float
        Output tokens generated before the horizon, divided by the horizon.
    rejected, unfinished, finished, measured, n_requests : int
        Request counts (all requests, except ``measured``).
    overloaded : bool
        The number of requests in the system grows without bound (see the engine docstring).
    queue_slope_req_per_s : float
        Least-squares slope of the sampled number in system over the second half of the run
        (requests per second).
    arrival_rate_req_per_s : float
        Accepted (not rejected) requests divided by the horizon.
    utilisation : ndarray(float64) of shape (n_instances,)
        Busy time / horizon per instance (prefill instances first for disaggregated plans).
    mean_batch : ndarray(float64) of shape (n_instances,)
        Mean number of requests per step (decodes + prefill pieces), nan without steps.
    kv_peak_tokens : ndarray(int64) of shape (n_instances,)
        Largest KV reservation seen (full-context-equivalent tokens: under a sliding window
        the KV a sequence holds, SPEC §10); under an engine policy, the largest KV in use
        (blocks held by running requests and by referenced cache entries, times the block size).
    policy : str
        The engine policy simulated (``"lecture"``, ``"vllm"`` or ``"sglang"``;
        :mod:`fastsim.sim.policy`).
    preemptions : int
        Requests preempted (vLLM) or retracted (SGLang) and later recomputed, counted each time;
        0 under the lecture policy, which never preempts.
    cached_prompt_tokens : int
        Prompt tokens served from the prefix cache at the requests' first admission.
    prompt_tokens_admitted : int
        Prompt tokens of the requests admitted at least once (the denominator of the hit fraction).
    cache_hit_fraction : float
        ``cached_prompt_tokens / prompt_tokens_admitted``; nan without prefix caching or admissions.
    cache_hit_fraction_per_instance : ndarray(float64) of shape (n_instances,) or None
        The same per instance (nan where nothing was admitted); None without prefix caching.
    spec_tokens_per_round : float
        Speculative decoding: output tokens a request gained per verify round, averaged over all
        rounds of the run (at most gamma + 1); nan without speculative decoding.
    stopped_at_s : float
        The simulated time (s) at which an early stop ended the run
        (:func:`fastsim.sim.simulate_batch`'s ``stop_after_misses``); nan for a run that
        simulated its whole horizon. A stopped run's figures cover what it simulated.
    sure_misses : int
        Measured requests the early-stop check found surely missing their SLO (a lower bound of
        the misses); 0 without the check.
    """

    attainment: float
    ttft_p50_s: float
    ttft_p90_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    tpot_p90_s: float
    tpot_p99_s: float
    throughput_tokens_per_s: float
    rejected: int
    unfinished: int
    finished: int
    measured: int
    n_requests: int
    overloaded: bool
    queue_slope_req_per_s: float
    arrival_rate_req_per_s: float
    utilisation: np.ndarray
    mean_batch: np.ndarray
    kv_peak_tokens: np.ndarray
    policy: str = "lecture"
    preemptions: int = 0
    cached_prompt_tokens: int = 0
    prompt_tokens_admitted: int = 0
    cache_hit_fraction: float = float("nan")
    cache_hit_fraction_per_instance: np.ndarray | None = None
    spec_tokens_per_round: float = float("nan")
    stopped_at_s: float = float("nan")
    sure_misses: int = 0


class SimResult(NamedTuple):
    """Per-request and sampled outputs of one run, with its :class:`SimMetrics`.

    Attributes
    ----------
    arrival_s : ndarray(float64) of shape (n,)
        Arrival times (s), as given.
    prompt_tokens, output_tokens : ndarray(int64) of shape (n,)
        Token counts, as given.
    first_token_s, finish_s : ndarray(float64) of shape (n,)
        Times of the first and the last output token (s); nan when not reached by the horizon.
    instance : ndarray(int64) of shape (n,)
        Colocated or prefill instance that served the request; -1 when rejected.
    decode_instance : ndarray(int64) of shape (n,)
        Disaggregated plans: decode instance (numbered after the prefill instances); else -1.
    status : ndarray(int64) of shape (n,)
        :class:`RequestStatus` codes.
    sample_t_s : ndarray(float64) of shape (m,)
        Sample grid ``k x sample_dt_s``, ``k = 0 .. ceil(horizon / dt) - 1``.
    queue_len : ndarray(int64) of shape (m, n_instances)
        Waiting (not admitted, not in a step) requests per instance at each sample time.
    kv_tokens : ndarray(int64) of shape (m, n_instances)
        KV tokens reserved per instance at each sample time (full-context-equivalent, as
        ``kv_peak_tokens``).
    in_system : ndarray(int64) of shape (m,)
        Accepted requests not yet finished, at each sample time.
    busy_s : ndarray(float64) of shape (n_instances,)
        Busy time within the horizon per instance (s).
    metrics : SimMetrics
        The run's summary.
    cached_tokens : ndarray(int64) of shape (n,) or None
        Engine policies: prompt tokens each request took from the prefix cache at its first
        admission (0 without a hit); None under the lecture policy.
    preemptions : ndarray(int64) of shape (n,) or None
        Engine policies: times each request was preempted (recomputed); None under the lecture
        policy.
    """

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    instance: np.ndarray
    decode_instance: np.ndarray
    status: np.ndarray
    sample_t_s: np.ndarray
    queue_len: np.ndarray
    kv_tokens: np.ndarray
    in_system: np.ndarray
    busy_s: np.ndarray
    metrics: SimMetrics
    cached_tokens: np.ndarray | None = None
    preemptions: np.ndarray | None = None

    @property
    def ttft_s(self) -> np.ndarray:
        """TTFT per request (SPEC §1): ``first_token_s - arrival_s``.

        Returns
        -------
        ndarray(float64) of shape (n,)
            Seconds; nan when no first token was produced (rejected or too late).
        """
        return self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> np.ndarray:
        """TPOT per request (SPEC §1): ``(finish_s - first_token_s) / (O - 1)``.

        Returns
        -------
        ndarray(float64) of shape (n,)
            Seconds per token; nan for O == 1 or unfinished requests.
        """
        with np.errstate(divide="ignore", invalid="ignore"):
            o = self.output_tokens.astype(np.float64) - 1.0
            return np.where(o > 0, (self.finish_s - self.first_token_s) / np.where(o > 0, o, 1.0), np.nan)
