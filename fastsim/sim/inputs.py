"""Input types of the serving simulator: the plans, the checked input arrays, the per-run options (SPEC section 6).

What :mod:`fastsim.sim.engine` (the lecture's scheduler) and :mod:`fastsim.sim.policy` (the
engines' schedulers) both take, checked and normalised once, in the order a run reads them:

- the plans, :class:`ColocatedPlan` and :class:`DisaggregatedPlan`, whose step parameter vectors
  (SPEC section 3, :func:`fastsim.stepmodel.step_params`) are checked here (``_params``);
- a workload's arrays, normalised to C-ordered float64 times and int64 token counts (``_arrays``)
  and checked by one kernel call per workload (``_check``, :func:`fastsim.sim._kernels.check_one_nb`;
  numpy names the fault when there is one, ``_workload``), passed on as read-only views;
- the run's options: the normalised tuple of :func:`_options` (horizon, SLOs, context limit,
  routing, measure window, sampling step: :func:`auto_sample_dt`, :func:`measure_fractions`) and
  the kernels' float64 option row built from it by :func:`_option_row`, the one builder of that
  row for both schedulers (with the overload thresholds ``OVERLOAD_SLOPE_FRACTION`` and
  ``OVERLOAD_MIN_GROWTH``; their meaning is in :mod:`fastsim.sim.engine`, "Overload").
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import FastsimInputError
from ..stepmodel import (N_PARAMS, P_DP, P_EP_BW, P_ETA_BW, P_ETA_C, P_ETA_NV, P_GPUS, P_HBM_BW, P_KFRAC,
                         P_KV_BUDGET_TOKENS, P_MATMUL, P_NET_BW, P_NVLINK, P_PEAK, P_PP, P_TP, PARAM_NAMES, P_CLASSES,
                         P_GEMM_Q)
from . import _kernels as K
from .window import kv_window

__all__ = [
    "ColocatedPlan", "DisaggregatedPlan", "PipelinePlan", "OVERLOAD_SLOPE_FRACTION", "OVERLOAD_MIN_GROWTH", "MAX_SAMPLES",
    "MAX_TOKENS", "auto_sample_dt", "measure_fractions",
]

OVERLOAD_SLOPE_FRACTION = 0.02
MAX_TOKENS = 1 << 30          # token sums and the kernels' int32 working arrays stay in range
OVERLOAD_MIN_GROWTH = 10.0
#: Most samples a run keeps (``ceil(horizon / sample_dt_s)``); the automatic step respects it.
MAX_SAMPLES = 10_000_000
_UNLIMITED = 1 << 62
_ROUTINGS = {"least-loaded": K.ROUTE_LEAST_LOADED, "round-robin": K.ROUTE_ROUND_ROBIN}


# parameters the serving kernel divides by (SPEC section 3: bandwidths, peak, efficiencies, degrees)
_DIVISORS = ((P_HBM_BW, "P_HBM_BW"), (P_PEAK, "P_PEAK"), (P_ETA_C, "P_ETA_C"), (P_ETA_BW, "P_ETA_BW"),
             (P_NVLINK, "P_NVLINK"), (P_ETA_NV, "P_ETA_NV"), (P_EP_BW, "P_EP_BW"), (P_NET_BW, "P_NET_BW"),
             (P_TP, "P_TP"), (P_GPUS, "P_GPUS"), (P_DP, "P_DP"))
# parallel degrees: whole numbers of GPUs or ranks
_DEGREES = ((P_TP, "P_TP"), (P_GPUS, "P_GPUS"), (P_DP, "P_DP"))


def _params(field: str, p) -> np.ndarray:
    try:
        a = np.array(p, dtype=np.float64, order="C")
    except (TypeError, ValueError):
        raise FastsimInputError(field, p, f"a float array of shape ({N_PARAMS},) from step_params") from None
    if a.shape != (N_PARAMS,):
        raise FastsimInputError(field, p, f"a finite float array of shape ({N_PARAMS},) from step_params")
    # the step time and the KV transfer divide by these (the kernel does not check for zero)
    for col, name in _DIVISORS:
        if not (np.isfinite(a[col]) and a[col] > 0.0):
            raise FastsimInputError(f"{field}[{name}]", float(a[col]),
                                    "a positive finite value (the step time or the KV transfer divides by it)")
    for col, name in _DEGREES:
        if a[col] < 1.0 or a[col] != math.floor(a[col]):
            raise FastsimInputError(f"{field}[{name}]", float(a[col]), "a whole number >= 1 (a count of GPUs)")
    if np.isnan(a[P_KV_BUDGET_TOKENS]):
        raise FastsimInputError(f"{field}[P_KV_BUDGET_TOKENS]", float(a[P_KV_BUDGET_TOKENS]),
                                "a number of KV tokens (<= 0: none fit; inf: unlimited)")
    kv_window(a, field)     # raises, naming the field, on a window that is not whole tokens and layers
    # every other parameter is a size, a count, a time, a width or a fraction: finite and >= 0
    # (a negative one gives a negative step time; a NaN one, NaN times that fail every SLO)
    for col in range(N_PARAMS):
        v = a[col]
        if col != P_KV_BUDGET_TOKENS and not (np.isfinite(v) and v >= 0.0):
            raise FastsimInputError(f"{field}[{PARAM_NAMES[col]}]", float(v), "a finite value >= 0")
    if a[P_KFRAC] > 1.0:
        raise FastsimInputError(f"{field}[P_KFRAC]", float(a[P_KFRAC]),
                                "a fraction in [0, 1] (experts per token / routed experts)")
    if a[P_CLASSES] not in (0.0, 1.0):
        raise FastsimInputError(f"{field}[P_CLASSES]", float(a[P_CLASSES]),
                                "0.0 (SPEC §3's roofline) or 1.0 (a roofline per kernel class: StepConstants.step_form)")
    if a[P_GEMM_Q] > 1.0 or (a[P_GEMM_Q] != 0.0 and a[P_CLASSES] == 0.0):
        raise FastsimInputError(f"{field}[P_GEMM_Q]", float(a[P_GEMM_Q]),
                                "1 / StepConstants.gemm_blend_p in [0, 1], and 0.0 under SPEC §3's roofline (P_CLASSES 0.0)")
    a.setflags(write=False)
    return a


def _count(field: str, v, minimum: int) -> int:
    try:
        i = int(v)
    except (TypeError, ValueError):
        raise FastsimInputError(field, v, f"an integer >= {minimum}") from None
    if i != v or i < minimum:
        raise FastsimInputError(field, v, f"an integer >= {minimum}")
    return i


@dataclass(frozen=True, eq=False)
class ColocatedPlan:
    """``n_instances`` identical colocated instances with chunked prefill (SPEC section 6).

    Chunked prefill as in Sarathi-Serve (Agrawal et al., OSDI 2024); step semantics in
    :mod:`fastsim.sim.engine`. The fields are validated and normalised at construction (``p``
    becomes a read-only C-ordered float64 copy).

    Attributes
    ----------
    p : ndarray(float64) of shape (N_PARAMS,)
        Step parameters of one instance, from :func:`fastsim.stepmodel.step_params` (its
        ``P_WINDOW`` and ``P_SLIDE_FRAC`` give the sliding window, if any).
    n_instances : int
        Number of instances, >= 1.
    chunk_tokens : int
        Prompt tokens per step (chunk size c), >= 1.
    max_batch : int
        Most admitted (unfinished) requests per instance; 0 = unlimited.

    Raises
    ------
    FastsimInputError
        Naming the field that is out of range: ``p`` not of shape (N_PARAMS,), with a
        non-finite entry before ``P_KV_BUDGET_TOKENS``, a bandwidth, peak or efficiency that is
        not positive, a parallel degree that is not a whole number >= 1, a negative step
        overhead, a NaN KV budget, or a window that is not a whole number of tokens
        on a whole number of layers (:func:`fastsim.sim.window.kv_window`), or a count that is
        not an integer at least its minimum.
    """

    p: np.ndarray
    n_instances: int
    chunk_tokens: int
    max_batch: int = 0

    def __post_init__(self):
        object.__setattr__(self, "p", _params("p", self.p))
        _no_stage("p", self.p)
        object.__setattr__(self, "n_instances", _count("n_instances", self.n_instances, 1))
        object.__setattr__(self, "chunk_tokens", _count("chunk_tokens", self.chunk_tokens, 1))
        object.__setattr__(self, "max_batch", _count("max_batch", self.max_batch, 0))


def _no_stage(field: str, p: np.ndarray) -> None:
    """Refuse a pipeline stage's vector where a whole instance's is expected."""
    if p[P_PP] > 1.0:
        raise FastsimInputError(f"{field}[P_PP]", float(p[P_PP]),
                                "1 (a pipeline stage's vector: a pipeline-parallel instance is a PipelinePlan "
                                "of fastsim.stepmodel.stage_params rows)")


@dataclass(frozen=True, eq=False)
class PipelinePlan:
    """``n_instances`` identical colocated instances, each a pipeline of stages (pipeline parallelism).

    Each instance runs its layers in ``S`` stages (one row of ``stages`` each,
    :func:`fastsim.stepmodel.stage_params`); micro-batches flow through the stages in order, up to
    ``S`` of them in flight, as vLLM's virtual engines and TensorRT-LLM's micro-batches do. The
    schedule's semantics are in :mod:`fastsim.sim.pipeline`. The fields are validated and normalised
    at construction (``stages`` becomes a read-only C-ordered float64 copy).

    Attributes
    ----------
    stages : ndarray(float64) of shape (S, N_PARAMS)
        One stage vector per row; every row has ``P_PP = S`` and the same ``P_KV_BUDGET_TOKENS``
        (the instance's KV budget).
    n_instances : int
        Number of instances, >= 1.
    chunk_tokens : int
        Prompt tokens per micro-batch (chunk size c), >= 1.
    max_batch : int
        Most admitted (unfinished) requests per instance; 0 = unlimited.

    Raises
    ------
    FastsimInputError
        Naming the field: ``stages`` not 2-d with ``N_PARAMS`` columns, a row that
        :class:`ColocatedPlan` would refuse as its ``p``, a row whose ``P_PP`` is not the number
        of rows, rows with different KV budgets, or a count below its minimum.
    """

    stages: np.ndarray
    n_instances: int
    chunk_tokens: int
    max_batch: int = 0

    def __post_init__(self):
        try:
            a = np.array(self.stages, dtype=np.float64, order="C")
        except (TypeError, ValueError):
            raise FastsimInputError("stages", self.stages, f"a float array of shape (S, {N_PARAMS}) from "
                                    "stage_params") from None
        if a.ndim != 2 or a.shape[1] != N_PARAMS or a.shape[0] < 1:
            raise FastsimInputError("stages", f"shape {a.shape}", f"shape (S, {N_PARAMS}) with S >= 1 "
                                    "(fastsim.stepmodel.stage_params)")
        rows = [_params(f"stages[{i}]", a[i]) for i in range(a.shape[0])]
        n = a.shape[0]
        for i, r in enumerate(rows):
            if r[P_PP] != n:
                raise FastsimInputError(f"stages[{i}][P_PP]", float(r[P_PP]), f"{n}, the number of stages")
            if r[P_KV_BUDGET_TOKENS] != rows[0][P_KV_BUDGET_TOKENS]:
                raise FastsimInputError(f"stages[{i}][P_KV_BUDGET_TOKENS]", float(r[P_KV_BUDGET_TOKENS]),
                                        f"the instance's budget in every stage ({float(rows[0][P_KV_BUDGET_TOKENS])})")
        a = np.ascontiguousarray(np.stack(rows))
        a.setflags(write=False)
        object.__setattr__(self, "stages", a)
        object.__setattr__(self, "n_instances", _count("n_instances", self.n_instances, 1))
        object.__setattr__(self, "chunk_tokens", _count("chunk_tokens", self.chunk_tokens, 1))
        object.__setattr__(self, "max_batch", _count("max_batch", self.max_batch, 0))

    @property
    def n_stages(self) -> int:
        """Pipeline stages S (int)."""
        return int(self.stages.shape[0])

    @property
    def p(self) -> np.ndarray:
        """The slowest stage's vector (the most matmul parameters per token, the first of equals):
        ndarray(float64) of shape (N_PARAMS,), read-only; what a whole-instance figure (its KV
        budget, a horizon estimate) reads."""
        return self.stages[int(np.argmax(self.stages[:, P_MATMUL]))]


@dataclass(frozen=True, eq=False)
class DisaggregatedPlan:
    """Prefill instances and decode instances with a KV transfer between them (SPEC section 6).

    Disaggregated prefill and decode as in DistServe (Zhong et al., OSDI 2024); step semantics
    in :mod:`fastsim.sim.engine`. The fields are validated and normalised at construction (the
    parameter vectors become read-only C-ordered float64 copies).

    Attributes
    ----------
    p_prefill, p_decode : ndarray(float64) of shape (N_PARAMS,)
        Step parameters of a prefill / decode instance (:func:`fastsim.stepmodel.step_params`);
        the transfer uses ``p_prefill[P_KVPG]`` bytes per token over ``p_prefill[P_NET_BW]``.
    n_prefill, n_decode : int
        Instance counts, >= 1 each.
    prefill_token_budget : int
        Most prompt tokens batched in one prefill step (a larger prompt runs alone), >= 1.
    decode_max_batch : int
        Most admitted requests per decode instance; 0 = unlimited.

    Raises
    ------
    FastsimInputError
        Naming the field that is out of range: a parameter vector not of shape (N_PARAMS,), with
        a non-finite entry before ``P_KV_BUDGET_TOKENS``, a bandwidth, peak or efficiency that
        is not positive, a parallel degree that is not a whole number >= 1, a negative step
        overhead, a NaN KV budget, or a window that is not a whole number of tokens
        on a whole number of layers (:func:`fastsim.sim.window.kv_window`), or a count that is
        not an integer at least its minimum.
    """

    p_prefill: np.ndarray
    n_prefill: int
    p_decode: np.ndarray
    n_decode: int
    prefill_token_budget: int = 8192
    decode_max_batch: int = 0

    def __post_init__(self):
        object.__setattr__(self, "p_prefill", _params("p_prefill", self.p_prefill))
        object.__setattr__(self, "p_decode", _params("p_decode", self.p_decode))
        _no_stage("p_prefill", self.p_prefill)
        _no_stage("p_decode", self.p_decode)
        object.__setattr__(self, "n_prefill", _count("n_prefill", self.n_prefill, 1))
        object.__setattr__(self, "n_decode", _count("n_decode", self.n_decode, 1))
        object.__setattr__(self, "prefill_token_budget",
                           _count("prefill_token_budget", self.prefill_token_budget, 1))
        object.__setattr__(self, "decode_max_batch", _count("decode_max_batch", self.decode_max_batch, 0))


def _kv_floor(p: np.ndarray) -> int:
    v = p[P_KV_BUDGET_TOKENS]
    if not (v > 0.0):
        return 0
    return _UNLIMITED if v >= _UNLIMITED else int(math.floor(v))



def _token_array(field: str, v, n: int) -> np.ndarray:
    """Token counts as a C-ordered int64 array (no copy when they already are); values unchecked."""
    a = np.asarray(v)
    if a.ndim != 1:
        raise FastsimInputError(field, f"shape {a.shape}", "a 1-d array")
    if a.shape[0] != n:
        raise FastsimInputError(field, f"length {a.shape[0]}", f"length {n} (as arrival_s)")
    if a.dtype.kind in "iu":
        out = a if a.dtype == np.int64 else a.astype(np.int64)
    elif a.dtype.kind == "f":
        if not np.all(np.isfinite(a)) or np.any(a != np.floor(a)):
            raise FastsimInputError(field, "non-integral values", "whole token counts >= 1")
        out = a.astype(np.int64)
    elif a.size == 0:
        out = np.zeros(0, dtype=np.int64)
    else:
        raise FastsimInputError(field, f"dtype {a.dtype}", "an integer array")
    return np.ascontiguousarray(out)


def _tokens(field: str, v, n: int) -> np.ndarray:
    """Validated int64 token counts."""
    out = _token_array(field, v, n)
    if out.size:
        lo, hi = int(out.min()), int(out.max())
        if lo < 1:
            raise FastsimInputError(field, lo, "token counts >= 1")
        if hi > MAX_TOKENS:
            raise FastsimInputError(field, hi, f"token counts <= {MAX_TOKENS:,}")
    return out


def _unpack(w):
    try:
        if hasattr(w, "arrival_s"):
            return w.arrival_s, w.prompt_tokens, w.output_tokens
        arrival_s, prompt_tokens, output_tokens = w
        return arrival_s, prompt_tokens, output_tokens
    except (TypeError, ValueError):
        raise FastsimInputError("workloads", type(w).__name__,
                                "tuples (arrival_s, prompt_tokens, output_tokens)") from None


def _arrays(w):
    """A workload's arrays in the kernels' dtypes and C order (shapes checked, values not)."""
    arrival_s, prompt_tokens, output_tokens = _unpack(w)
    a = np.asarray(arrival_s, dtype=np.float64)
    if a.ndim != 1:
        raise FastsimInputError("arrival_s", f"shape {a.shape}", "a 1-d array")
    n = a.shape[0]
    return (np.ascontiguousarray(a), _token_array("prompt_tokens", prompt_tokens, n),
            _token_array("output_tokens", output_tokens, n))


def _workload(w, horizon_s: float):
    """Every check of one workload, in numpy (the kernels check the same; this names the fault)."""
    arrival_s, prompt_tokens, output_tokens = _unpack(w)
    a = np.asarray(arrival_s, dtype=np.float64)
    if a.ndim != 1:
        raise FastsimInputError("arrival_s", f"shape {a.shape}", "a 1-d array")
    if a.size:
        # the sum is nan or inf when a time is (sorted finite times in [0, horizon] sum finitely)
        if not math.isfinite(float(a.sum())) or a[0] < 0.0:
            raise FastsimInputError("arrival_s", "negative or non-finite times", "finite times >= 0")
        if np.any(a[1:] < a[:-1]):
            raise FastsimInputError("arrival_s", "unsorted times", "ascending times")
        if a[-1] > horizon_s:
            raise FastsimInputError("arrival_s", float(a[-1]), f"times <= horizon_s = {horizon_s}")
    return a, _tokens("prompt_tokens", prompt_tokens, a.shape[0]), _tokens("output_tokens", output_tokens, a.shape[0])


def _readonly(a: np.ndarray) -> np.ndarray:
    """``a``, or a read-only view of it: the kernels take read-only inputs (one compiled version)."""
    if not a.flags.writeable:
        return a
    v = a.view()
    v.flags.writeable = False
    return v


def _check(works, raw, horizon_s: float):
    """Check the workloads' values with the check kernel, one call per workload.

    ``works`` are :func:`_arrays` triples, ``raw`` the caller's workloads (to name a fault).
    Returns ``(arrays, requests per workload, longest output per workload)``: ``arrays`` are the
    workloads' triples as read-only arrays (views), the kernels' one type for them.
    """
    W = len(works)
    info = np.empty((W, 2), np.int64)
    ro = [tuple(_readonly(x) for x in w) for w in works]
    horizon_s = float(horizon_s)
    for k, w in enumerate(ro):
        K.check_one_nb(*w, horizon_s, MAX_TOKENS, info[k:k + 1])
    bad = np.flatnonzero(info[:, 0] != K.IN_OK)
    if bad.size:
        _workload(raw[int(bad[0])], horizon_s)   # raises, naming the field
        raise FastsimInputError("workloads", f"workload {int(bad[0])}", "valid arrays")
    n = np.array([w[0].shape[0] for w in works], dtype=np.int64)
    return ro, n, info[:, 1].copy()


def auto_sample_dt(horizon_s: float) -> float:
    """The automatic sampling step of a run: the smallest step of the 1-2-5 series keeping <= 1e7 samples.

    The series is 1, 2, 5, 10, 20, 50, ... s; the step chosen is the first ``dt`` of it with
    ``horizon_s / dt <= MAX_SAMPLES`` (so ``ceil(horizon_s / dt) <= 1e7`` samples). Every horizon
    of at most 1e7 s gets 1 s, the step all runs had before the step became automatic, so their
    results are unchanged bit for bit; 2e7 s gets 2 s, 3e7 s 5 s, 1e8 s 10 s.

    Parameters
    ----------
    horizon_s : float
        Simulated seconds of the run, finite and > 0.

    Returns
    -------
    float
        The step (s), a whole number >= 1.

    Raises
    ------
    FastsimInputError
        ``horizon_s`` not a finite number > 0.
    """
    from ..errors import require_positive
    horizon_s = require_positive("horizon_s", horizon_s)
    decade = 1.0
    while True:
        for m in (1.0, 2.0, 5.0):
            dt = m * decade
            if horizon_s / dt <= MAX_SAMPLES:
                return dt
        decade *= 10.0


def measure_fractions(measure_window) -> tuple:
    """The measure window as two floats ``(f0, f1)`` with ``0 <= f0 < f1 <= 1`` (fractions of the horizon).

    Parameters
    ----------
    measure_window : sequence of two numbers

    Returns
    -------
    (float, float)

    Raises
    ------
    FastsimInputError
        Field ``measure_window``: not two numbers, or not ``0 <= f0 < f1 <= 1``.
    """
    try:
        f0, f1 = (float(x) for x in measure_window)
    except (TypeError, ValueError):
        raise FastsimInputError("measure_window", measure_window, "two fractions (f0, f1), 0 <= f0 < f1 <= 1") from None
    if not (0.0 <= f0 < f1 <= 1.0):
        raise FastsimInputError("measure_window", measure_window, "two fractions (f0, f1), 0 <= f0 < f1 <= 1")
    return f0, f1


def _options(horizon_s, ttft_slo_s, tpot_slo_s, max_context_tokens, routing, measure_window, sample_dt_s):
    from ..errors import require_positive
    horizon_s = require_positive("horizon_s", horizon_s)
    ttft_slo_s = require_positive("ttft_slo_s", ttft_slo_s)
    tpot_slo_s = require_positive("tpot_slo_s", tpot_slo_s)
    max_context_tokens = _count("max_context_tokens", max_context_tokens, 2)
    if routing not in _ROUTINGS:
        raise FastsimInputError("routing", routing, " or ".join(_ROUTINGS))
    f0, f1 = measure_fractions(measure_window)
    if sample_dt_s is None:
        sample_dt_s = auto_sample_dt(horizon_s)
    else:
        sample_dt_s = require_positive("sample_dt_s", sample_dt_s)
        if horizon_s / sample_dt_s > MAX_SAMPLES:
            raise FastsimInputError(
                "sample_dt_s", sample_dt_s,
                f"at most 1e7 samples per run: a step >= {horizon_s / MAX_SAMPLES:.6g} s for a horizon of "
                f"{horizon_s:.6g} s (or None: the automatic step, {auto_sample_dt(horizon_s):g} s)")
    return horizon_s, ttft_slo_s, tpot_slo_s, max_context_tokens, _ROUTINGS[routing], (f0, f1), sample_dt_s


def _option_row(opts) -> np.ndarray:
    """The kernels' float64 row of per-run options (``K.RF_*`` columns) from :func:`_options`' tuple.

    Both schedulers' kernels read it (:func:`fastsim.sim._kernels.simulate_one`,
    :func:`fastsim.sim._policy_nb.policy_one_nb`): the horizon, the sampling step, the measure
    window, the SLOs and the overload thresholds; every other column is 0.

    Parameters
    ----------
    opts : tuple
        The normalised options of :func:`_options`.

    Returns
    -------
    ndarray(float64) of shape (K.N_RFCOLS,)
        A new, writable row.
    """
    horizon_s, ttft_slo_s, tpot_slo_s, _, _, window, dt = opts
    rf = [0.0] * K.N_RFCOLS             # a list, then one array: the quickest for a single run
    rf[K.RF_HORIZON] = horizon_s
    rf[K.RF_DT] = dt
    rf[K.RF_MEAS_LO] = window[0]
    rf[K.RF_MEAS_HI] = window[1]
    rf[K.RF_TTFT_SLO] = ttft_slo_s
    rf[K.RF_TPOT_SLO] = tpot_slo_s
    rf[K.RF_OVER_FRAC] = OVERLOAD_SLOPE_FRACTION
    rf[K.RF_OVER_MIN] = OVERLOAD_MIN_GROWTH
    return np.array(rf, dtype=np.float64)
