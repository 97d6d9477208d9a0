"""Step-model constants fitted to serving measurements through the simulator, with cross-validation.

:func:`fit_measurements` fits some of :class:`fastsim.stepmodel.StepConstants` (by default
``eta_compute``, ``eta_bw``, ``eta_kv``, ``overhead_s``, ``overhead_per_seq_s``, ``overhead_per_layer_s``,
the FP8 / FP4 compute factors of the precisions the rows use, ``moe_compute_factor`` where rows run a mixture-of-experts
model, ``moe_pad_fraction`` where they run two granularities ``E / k`` or more, ``moe_load_cv`` where one
MoE model runs at two expert-parallel degrees or more, ``request_overhead_s`` where rows measure a TTFT or an E2E latency and ``eta_pcie`` where rows run
a PCIe GPU at an attention TP > 1 or in a pipeline, :func:`default_names`) to the rows of one engine of a measurement set (:mod:`fastsim.validate.records`):
each evaluation runs every training row the way its benchmark ran
(:func:`fastsim.validate.run_measurements`, the engine's own policy), and
:func:`scipy.optimize.least_squares` (trust region reflective, on the log of each constant,
within bounds) minimises a robust sum over rows of the log ratio ``log(fastsim / real)``
(``loss="cauchy"``, ``f_scale = 0.1``: a row 10% off weighs about as in least squares, a row 10x
off counts about logarithmically, so a few rows the model cannot express do not drag the rest).

Priors: by default the fit is a maximum a posteriori one: each fitted constant has a Gaussian prior on
its log, centred on its starting value (SPEC §3's constant, or the documented start of a v2 term) with
the SD of :data:`PRIOR_LOG_SD`, and the fit minimises the rows' Cauchy negative log-likelihood
(``sum log(1 + (r / f_scale)^2)``) plus the priors' ``sum (log c - log c0)^2 / (2 sd^2)``. A
constant the rows pin moves where they put it (a hundred rows outweigh a prior); one they do not pin,
as throughput rows at a thousand running sequences leave the weight read's efficiency or the fixed
per-step time free to trade against each other, stays near its physical start instead of drifting to
a bound (Gelman et al., "Bayesian Data Analysis", 3rd ed., §14.8, weakly informative priors as
regularisation). The FP8 and FP4 compute factors' priors are centred on the published ratio of
low-precision to BF16 GEMM speed (:data:`PRIOR_CENTRE`), not on SPEC §3's 1.0, which is their upper
bound; every other prior is centred on the constant's start (a GPU's own entry: below).

Per-GPU entries: an engine's kernels differ per GPU, so a GPU with enough rows gets its own
efficiencies (:data:`GPU_FITTED`). Two methods (:data:`ENGINE_GPU_FIT`):

- ``"joint"``: one hierarchical fit of every entry at once (a random-effects model: Gelman et al.,
  "Bayesian Data Analysis", 3rd ed., §5.4-5.5). The parameters are the ``"*"`` constants and each
  such GPU's efficiencies; each GPU efficiency has a Gaussian prior on its log centred on the ``"*"``
  one (SD :data:`GPU_LOG_SD`), and every row is run on its GPU's entry. A GPU far from the others
  (TensorRT-LLM on the L40S reads its weights at about 0.40 of its datasheet bandwidth where the
  H100 reaches 0.72, in the shipped fit) then moves its own entry, not the ``"*"`` one that every
  other GPU, and a GPU seen in a held-out family only, runs on.
- ``"sequential"``: the ``"*"`` entry fitted on every row first, then each GPU's efficiencies
  refitted on its own rows from it, their priors centred on the ``"*"`` fit (the GPU's rows then
  count in both fits: a shrinkage towards the pooled fit, not a model of the spread between GPUs).

Runtimes: an engine may run on several runtimes (:data:`fastsim.engine_rules.ENGINE_RUNTIMES`; each row's
is :attr:`fastsim.validate.Measurement.runtime`): TensorRT-LLM's PyTorch backend (its default from 1.0)
and its TensorRT-engine runtime (``trtllm-build`` engines under the C++ executor, Triton's backend). Their
kernels are alike, their hosts are not (a Python scheduler against a C++ one). With the names of
:func:`runtime_names` (``constant@runtime``: ``overhead_s@tensorrt``, ...) the host's costs
(:data:`RUNTIME_FITTED`) are fitted once more for the other runtime, each with the prior of its constant,
and written to the calibration's ``[[runtime]]`` tables; the efficiencies stay shared. Constants fitted on
the Triton rows alone (family ``O``, TensorRT engine) predicted the v0.17 TensorRT-engine rows (``T17``)
at 7.8% median error where those fitted on the PyTorch-backend rows alone (``T``, ``T2``) were 12.5% off
(0.869). But the names are not among :func:`default_names`: refitted with them and ``gemm_blend_p``
(``tools/make_fit.py --engine trtllm --max-runs 80 --max-nfev 30``), TensorRT-LLM's held-out error rose
from 12.3% (0.921) to 14.5% (0.890): ITL 16.6% (1.133) to 12.0% (0.881), but TTFT 8.5% to 18.0% (0.767)
and the PyTorch-backend family T 13.9% to 17.7%, each runtime's host pinned by two families only when one
is left out; with them alone, from 12.1% (0.950) to 14.3% (0.891): TTFT 11.3% to 30.7% (0.625), the Triton
family ``O`` 9.2% to 14.9%, and the v0.17 family ``T17`` no better (11.8% against 11.7%). A joint fit
(``gpu_fit="joint"``) keeps one host for every runtime.

GPUs no other family ran: a GPU's efficiencies are its kernels', and only a family measured on the same
GPU can judge them held out. Where the rows come from two source families or more and no GPU is measured
by two of them (:func:`host_only`), the default names (``names=None``) are the engine's own constants
alone (:data:`HOST_FITTED`: the host's per-step costs and the per-request cost, which an engine carries
to every GPU), and every efficiency keeps its start (SPEC §3's; ``eta_pcie``, :data:`START_ETA_PCIE`).
A single family has no held-out family to judge any constant by, so its default fit fits them all.
vLLM's shipped rows are such a set: family ``B`` runs on the H100 only, ``L`` on the RTX 4090 and the
RTX PRO 6000. Fitted with the default names of a set that shares GPUs, their efficiencies included, vLLM's
held-out error was 20.9% (0.829) against SPEC §3's 14.6% (0.868): the efficiencies fitted on one family's
GPUs do not carry to the other's (``tools/make_fit.py --engine vllm --max-runs 80 --max-nfev 30``).

Intervals: 95%, from the Jacobian at the optimum (``s^2 (J^T J)^-1`` on the log scale; Bates and
Watts 1988, §2.3), back-transformed, so they are asymmetric and positive. Without a prior ``s^2`` is
the residual variance; with one, ``J`` holds the priors' rows and ``s^2 = 1``: the Laplace
(Gauss-Newton) approximation of the posterior at the Cauchy scale ``f_scale``, so a constant the
rows do not pin reports about its prior's own interval, and the intervals do not widen with the
rows' scatter. They are conditional on the model's form: where the form misses systematically they
are narrow and the cross-validated error is the figure to believe.

Cross-validation: leave one source out. The rows are grouped by source family
(:attr:`fastsim.validate.Measurement.family`: one published table, one repository's runs); for
each family, the constants are fitted again on the other families' rows only, from the same
starting point (SPEC §3's timing constants in the engine's step form, :data:`ENGINE_STEP_FORM`), and the held-out family's rows are then run with them. The
held-out figures (median absolute error, geometric-mean ratio; :func:`fastsim.validate.summary.group_stats`)
are never from rows a fit saw. An engine with one source family has no held-out figure.

For speed a fit may use a subsample of the training rows' runs (``max_runs``: at most that many
runs, spread evenly over families and kept in their order, every row of a chosen run kept); the
held-out rows are always run in full.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from numbers import Real
from typing import NamedTuple

import numpy as np

from ..engine_rules import ENGINE_RUNTIMES
from ..errors import FastsimInputError
from .run import run_key, run_measurements, unexpressible
from .summary import group_stats

__all__ = ["fit_measurements", "MeasuredFit", "FitEntry", "FoldResult", "FITTABLE", "BOUNDS", "default_names",
           "ENGINE_KV_MEMORY", "ENGINE_RESERVED_BYTES", "START_REQUEST_OVERHEAD_S", "START_OVERHEAD_PER_SEQ_S",
           "PRIOR_LOG_SD", "PRIOR_CENTRE", "ENGINE_GPU_FIT", "GPU_LOG_SD", "START_ETA_PCIE",
           "START_MOE_PAD_FRACTION", "START_MOE_LOAD_CV", "PROFILE_GEMM_BLEND_P", "RUNTIME_FITTED", "runtime_names",
           "HOST_FITTED", "host_only"]

#: Constants :func:`fit_measurements` may fit, in the order reports list them.
FITTABLE = ("eta_compute", "eta_bw", "eta_kv", "overhead_s", "overhead_per_seq_s", "fp8_compute_factor",
            "fp4_compute_factor", "moe_compute_factor", "alpha_s", "eta_nvlink", "reserved_bytes_per_gpu",
            "request_overhead_s", "overhead_per_layer_s", "eta_pcie", "moe_pad_fraction", "moe_load_cv")
#: Bounds of each fitted constant (its own unit): the efficiencies are fractions, the overheads
#: seconds; a factor's upper bound is also capped by ``1 / eta_compute`` at every evaluation. The
#: compute factors are held to what low-precision GEMMs reach: FP8 at least half of BF16's fraction
#: of peak (cuBLAS and DeepGEMM FP8 GEMMs run at 1.3-1.9x their BF16 speed on a 2x peak), FP4 at
#: least 0.3 of it (CUTLASS NVFP4 GEMMs at 2-3x BF16 on a 4x peak); a fit pinned at a bound says
#: the error lies in another term.
BOUNDS = {"eta_compute": (0.05, 1.0), "eta_bw": (0.1, 1.0), "eta_kv": (0.1, 1.0), "overhead_s": (1e-5, 0.05),
          "fp8_compute_factor": (0.5, 1.0), "fp4_compute_factor": (0.3, 1.0), "alpha_s": (1e-8, 1e-4),
          "eta_nvlink": (0.05, 1.0), "reserved_bytes_per_gpu": (1e8, 2e10), "request_overhead_s": (1e-4, 0.2),
          "overhead_per_seq_s": (1e-7, 2e-4), "moe_compute_factor": (0.2, 1.0),
          "overhead_per_layer_s": (1e-7, 2e-4), "eta_pcie": (0.05, 1.0), "moe_pad_fraction": (1e-4, 0.5),
          "moe_load_cv": (1e-3, 4.0)}
#: The constants fitted once per runtime of an engine with several (:data:`fastsim.engine_rules.ENGINE_RUNTIMES`;
#: module docstring, "Runtimes"): the host's costs, named ``constant@runtime`` for a runtime other than the
#: engine's default (``overhead_s@tensorrt``), written to the calibration's ``[[runtime]]`` tables
#: (:data:`fastsim.constants.RUNTIME_CONSTANTS`).
RUNTIME_FITTED = ("overhead_s", "overhead_per_seq_s", "overhead_per_layer_s")
_SEP = "@"
#: The engine's own constants, the same on every GPU it runs on: the host's per-step costs and the
#: per-request cost on the way into and out of the engine. Where the rows come from two source families
#: or more and no GPU is measured by two of them (:func:`host_only`), a default fit fits these alone
#: (module docstring, "GPUs no other family ran").
HOST_FITTED = RUNTIME_FITTED + ("request_overhead_s",)
#: The constants a GPU's own entry refits (its kernels' efficiencies); the engine's per-step overhead
#: and compute factors stay those of the ``"*"`` fit.
GPU_FITTED = ("eta_compute", "eta_bw", "eta_kv")
#: The engines' KV-pool rules (:attr:`fastsim.stepmodel.StepConstants.kv_memory`) a fit starts from,
#: with 2 GiB per GPU set aside for activations, CUDA graphs and communication buffers (vLLM's
#: profiling run at 8,192 batched tokens on an 8B model peaks near 1.5 GiB of activations, its CUDA
#: graphs take about 0.5 GiB): SGLang sizes its pool as vLLM does (``mem_fraction_static``).
ENGINE_KV_MEMORY = {"vllm": "vllm", "sglang": "vllm", "trtllm": "trtllm"}
ENGINE_RESERVED_BYTES = 2 * 2 ** 30
#: The step form a fit starts from and keeps (:attr:`fastsim.stepmodel.StepConstants.step_form`): a
#: roofline per kernel class, as every engine runs a layer's GEMMs and its attention as separate
#: kernels. Not a fitted number but the model's shape: on the shipped TensorRT-LLM rows it alone takes
#: SPEC §3's constants from 32.4% to 26.8% median error.
ENGINE_STEP_FORM = {"vllm": "classes", "sglang": "classes", "trtllm": "classes"}
#: How each engine's expert-parallel MoE layers move their tokens, which a fit starts from and keeps
#: (:attr:`fastsim.stepmodel.StepConstants.moe_dispatch`; :func:`fastsim.formulas.dispatch_copies`). TensorRT-LLM's
#: attention-DP MoE runs an AllGather and a ReduceScatter (``"allgather"``) unless its EP degree exceeds top-k on
#: an MNNVL domain or with DeepEP enabled (``tensorrt_llm/_torch/modules/fused_moe``, ``select_alltoall_method_type``),
#: which no shipped row does. Fitted the same way (``tools/make_fit.py --engine trtllm --max-runs 80 --max-nfev 30``,
#: the same code but this constant), TensorRT-LLM held out 12.5% (0.924) with it against 12.8% (0.922) with SPEC
#: §10's ``"per_expert"``: ITL 16.4% (1.025) against 15.1% (1.025), TTFT 19.0% (0.755) against 18.4% (0.763),
#: throughput 11.5% (0.932) against 11.7% (0.930), the PyTorch-backend family ``T`` 12.3% against 13.8%; in sample
#: 7.8% against 7.9%. (The fit shipped before, 12.1% (0.950) held out, came from an earlier state of this module
#: and is not what it fits today.) vLLM and SGLang keep SPEC §10's: no row of theirs runs expert parallelism.
ENGINE_MOE_DISPATCH = {"vllm": "per_expert", "sglang": "per_expert", "trtllm": "allgather"}
#: The GEMM class's blend (:attr:`fastsim.stepmodel.StepConstants.gemm_blend_p`) fitted to Vidur's H100 matmul
#: profiles (Llama-2-7B and 70B, CodeLlama-34B at 1 to 4,096 tokens and TP 1 to 8:
#: :func:`fastsim.calibrate.fit_operations` with ``blend=True``), kernel measurements outside the serving rows.
#: A fit started from it (``start`` with ``gemm_blend_p=PROFILE_GEMM_BLEND_P``) keeps it; the engines' fits
#: start from the max: refitted with it (``tools/make_fit.py --engine trtllm --max-runs 80 --max-nfev 30``), the
#: TensorRT-LLM fit was held out 12.3% (0.921) against the max's 12.1% (0.950), its ITL 16.6% (1.133) against
#: 19.4% (1.189) and its TTFT 8.5% against 11.3% but its throughput 13.2% (0.900) against 11.7% (0.929).
PROFILE_GEMM_BLEND_P = 1.23
#: Where a fit of ``request_overhead_s`` starts (s): the middle of the 6-10 ms TensorRT-LLM's Triton path
#: adds to the TTFT of Llama-3.1-8B at its lightest published load (the rows' own figures).
START_REQUEST_OVERHEAD_S = 5e-3
#: Where a fit of ``overhead_per_seq_s`` starts (s per sequence of a step): 10 us, 2.5 ms of host
#: time at a batch of 256 (vLLM's host overhead, 62% of a Llama-3-8B step on an H100 before v0.6,
#: was tens of ms at large batch: "vLLM v0.6.0: 2.7x Throughput Improvement", vLLM blog, 2024).
START_OVERHEAD_PER_SEQ_S = 1e-5
#: Where a fit of ``overhead_per_layer_s`` starts (s per layer of a step): 5 us, 12 kernels of a
#: layer at SPEC §4's ledger launch time under CUDA graphs (about 0.4 us each) plus two all-reduce waits.
START_OVERHEAD_PER_LAYER_S = 5e-6
#: Where a fit of ``eta_pcie`` starts, and its value where no training row pins it (a PCIe GPU at TP > 1 or in a pipeline):
#: 0.5 of the link bandwidth per direction, NCCL's all-reduce bus bandwidth over PCIe Gen5 (28 GB/s
#: on 8 RTX 5090s, 35 GB/s on 4, of 64 GB/s: NVIDIA/nccl issue 1639;
#: :attr:`fastsim.stepmodel.StepConstants.eta_pcie`).
START_ETA_PCIE = 0.5
#: Where a fit of ``moe_pad_fraction`` starts: half a 128-row tile of padding per expert over a step of about
#: 3,000 tokens (TensorRT-LLM's and vLLM's default token budgets are 8,192 and 2,048-8,192 per step), 0.02
#: (:attr:`fastsim.stepmodel.StepConstants.moe_pad_fraction`).
START_MOE_PAD_FRACTION = 0.02
#: Where a fit of ``moe_load_cv`` starts: an expert's routed tokens in a step varying by half their mean
#: (an estimate: routers trained with a balancing loss still send some experts several times the mean's
#: tokens in a step, which is why DeepSeek-V3 serves with redundant copies of the busiest experts,
#: arXiv:2412.19437 §3.4; :attr:`fastsim.stepmodel.StepConstants.moe_load_cv`).
START_MOE_LOAD_CV = 0.5
#: The SD of each constant's Gaussian prior on the log scale (module docstring, "Priors"): 0.5 (a factor
#: of 1.65 at one SD) for the efficiencies, centred on SPEC §3's MFU / MBU figures, and for the compute
#: factors, centred on :data:`PRIOR_CENTRE`; 1.0 (a factor of 2.7) for the overheads and link constants,
#: whose start is an estimate of a host or launch time.
PRIOR_LOG_SD = {"eta_compute": 0.5, "eta_bw": 0.5, "eta_kv": 0.5, "fp8_compute_factor": 0.5,
                "fp4_compute_factor": 0.5, "moe_compute_factor": 0.5, "eta_nvlink": 0.5,
                "overhead_s": 1.0, "overhead_per_seq_s": 1.0, "overhead_per_layer_s": 1.0, "alpha_s": 1.0,
                "reserved_bytes_per_gpu": 1.0, "request_overhead_s": 1.0, "eta_pcie": 0.5,
                "moe_pad_fraction": 1.0, "moe_load_cv": 1.0}
assert set(PRIOR_LOG_SD) == set(FITTABLE)
#: Prior centres that are not the constant's start: an FP8 GEMM runs at 1.3-1.9x its BF16 speed on a 2x
#: peak (cuBLAS, DeepGEMM), so 0.8 of BF16's fraction of peak; a CUTLASS NVFP4 GEMM at 2-3x on a 4x peak,
#: so 0.6 (the figures behind :data:`BOUNDS`' floors). SPEC §3's 1.0 is their upper bound.
PRIOR_CENTRE = {"fp8_compute_factor": 0.8, "fp4_compute_factor": 0.6}
#: How each engine's per-GPU entries are fitted (``gpu_fit`` of :func:`fit_measurements`; module
#: docstring, "Per-GPU entries"): ``"joint"`` (a hierarchical fit, every entry at once) or
#: ``"sequential"`` (the ``"*"`` entry first, then each GPU's from it). The shipped TensorRT-LLM fit
#: is sequential: refitted jointly (``tools/make_fit.py --engine trtllm --max-runs 80 --max-nfev 30``
#: with ``gpu_fit="joint"``) it was held out 13.7% (0.960) against the sequential fit's 13.2% (0.953),
#: in sample 11.6% against 9.0%, trading ITL (11.6% at 1.060 against 19.7% at 1.225) for TTFT (12.3% at
#: 0.877 against 7.9% at 0.968) and the T2 family (28.8% against 18.6%); both measured before ``moe_pad_fraction``,
#: ``eta_pcie`` and ``moe_load_cv`` were in the model.
ENGINE_GPU_FIT = {"vllm": "joint", "sglang": "joint", "trtllm": "sequential"}
#: Log-scale SD of the prior on a GPU's efficiency around the ``"*"`` entry's in a joint fit.
GPU_LOG_SD = 0.5
_GPU_FITS = ("joint", "sequential")
_LOSS = "cauchy"
_F_SCALE = 0.1
_FLOPS_FACTOR = {"fp8": "fp8_compute_factor", "fp4": "fp4_compute_factor"}


class FoldResult(NamedTuple):
    """One held-out source family.

    Attributes
    ----------
    family : str
        The family left out.
    calibration : Calibration
        Fitted on the other families' rows.
    rows : int
        Held-out rows expressed.
    median_abs_pct_error : float or None
        Over the held-out rows (percent).
    geomean_ratio : float or None
        fastsim / real over the held-out rows.
    ratios : tuple of (str, str, float)
        ``(id, metric, ratio)`` per held-out row.
    """

    family: str
    calibration: object
    rows: int
    median_abs_pct_error: float | None
    geomean_ratio: float | None
    ratios: tuple


class FitEntry(NamedTuple):
    """The constants of one GPU (or ``"*"``: every GPU without an entry of its own).

    Attributes
    ----------
    gpu : str
    constants : StepConstants
    interval95 : tuple of (str, float, float)
        Per fitted constant; NaN bounds where the rows do not pin it.
    rows : int
        Rows the entry's fit used.
    """

    gpu: str
    constants: object
    interval95: tuple
    rows: int


@dataclass(frozen=True)
class MeasuredFit:
    """Constants fitted to one engine's measurements, and their cross-validated error.

    Attributes
    ----------
    engine : str
    names : tuple of str
        The fitted constants.
    entries : tuple of FitEntry
        ``"*"`` first, then one per GPU with at least ``min_gpu_rows`` rows (``gpu_fit``).
    start : StepConstants
        Where every fit started; the value of every constant not fitted.
    in_sample : dict
        :func:`group_stats` over every row at the start and with the fitted calibration:
        ``{"start": ..., "fitted": ...}``.
    folds : tuple of FoldResult
        One per source family (empty with one family).
    held_out : dict
        :func:`group_stats` over every held-out row of every fold: SPEC §3's constants (``"start"``), the
        fold's fit (``"fitted"``) and the fold's own starting point unfitted (``"unfitted"``: the step form,
        the engine's KV-pool rule and the documented starts, with nothing read off any row; what the
        fitting adds is ``"fitted"`` against it), and per metric under ``"per_metric"``.
    evaluations : int
        Simulator passes, over every fit.
    prior_log_sd : dict or None
        The log-scale SD of each fitted constant's prior (their centres: the start, or
        :data:`PRIOR_CENTRE`), or None for a likelihood-only fit.
    gpu_fit : str
        How the per-GPU entries were fitted: ``"joint"`` or ``"sequential"`` (module docstring).
    """

    engine: str
    names: tuple
    entries: tuple
    start: object
    in_sample: dict
    folds: tuple
    held_out: dict
    evaluations: int
    prior_log_sd: dict | None = None
    gpu_fit: str = "sequential"
    runtimes: tuple = ()

    @property
    def constants(self):
        """The ``"*"`` entry's constants (StepConstants)."""
        return self.entries[0].constants

    @property
    def interval95(self) -> tuple:
        """The ``"*"`` entry's intervals."""
        return self.entries[0].interval95

    @property
    def rows(self) -> int:
        """Rows the ``"*"`` fit used."""
        return self.entries[0].rows

    def calibration(self, source: str = ""):
        """The fit as an engine-tagged calibration: one entry per GPU fitted, and ``*`` for the rest.

        Parameters
        ----------
        source : str
            Free text written to the file (what the constants were fitted to).

        Returns
        -------
        fastsim.constants.Calibration
        """
        return _calibration(self.engine, self.names, self.entries, source, self.runtimes)

    def to_dict(self) -> dict:
        """The fit as a JSON-ready dict (entries with constants and intervals, in-sample and held-out figures, folds)."""
        from dataclasses import asdict
        return {"engine": self.engine, "names": list(self.names),
                "entries": [{"gpu": e.gpu, "rows": e.rows, "constants": asdict(e.constants),
                             "interval95": {n: [None if lo != lo else lo, None if hi != hi else hi]
                                            for n, lo, hi in e.interval95}} for e in self.entries],
                "start": asdict(self.start), "in_sample": self.in_sample, "held_out": self.held_out,
                "folds": [{"family": f.family, "rows": f.rows, "median_abs_pct_error": f.median_abs_pct_error,
                           "geomean_ratio": f.geomean_ratio} for f in self.folds],
                "evaluations": self.evaluations,
                "prior_log_sd": None if self.prior_log_sd is None else dict(self.prior_log_sd),
                "prior_centre": None if self.prior_log_sd is None else dict(PRIOR_CENTRE),
                "gpu_fit": self.gpu_fit, "gpu_log_sd": GPU_LOG_SD if self.gpu_fit == "joint" else None,
                "runtimes": [{"name": r.name, "constants": dict(r.constants),
                              "interval95": {n: [None if lo != lo else lo, None if hi != hi else hi]
                                             for n, lo, hi in r.interval95}} for r in self.runtimes]}


def _calibration(engine, names, entries, source="", runtimes=()):
    from ..constants import Calibration, CalibrationEntry
    base = tuple(n for n in names if _SEP not in n)
    return Calibration(tuple(CalibrationEntry(e.gpu, "*", e.constants, base, e.interval95) for e in entries),
                       source, engine, tuple(runtimes))


def _base(name) -> str:
    """A fitted name's constant: ``overhead_s@tensorrt`` -> ``overhead_s``."""
    return name.split(_SEP, 1)[0]


def _point(start, names, x, start_rt=None):
    """The constants at ``x``: (StepConstants of the names without a runtime, {runtime: {constant: value}})."""
    rt = {r: dict(v) for r, v in (start_rt or {}).items()}
    plain = [(n, v) for n, v in zip(names, x) if _SEP not in n]
    for n, v in zip(names, x):
        if _SEP in n:
            f, r = n.split(_SEP, 1)
            rt.setdefault(r, {})[f] = float(math.exp(v))
    return _constants_at(start, [n for n, _ in plain], [v for _, v in plain]), rt


def _runnable(c, rt):
    """What :func:`run_measurements` runs: ``c``, with the runtimes' host costs where there are some."""
    if not rt:
        return c
    from ..constants import Calibration, CalibrationEntry, RuntimeEntry
    return Calibration((CalibrationEntry("*", "*", c),), runtimes=tuple(
        RuntimeEntry(r, tuple((f, kv[f]) for f in RUNTIME_FITTED if f in kv)) for r, kv in sorted(rt.items())))


def default_names(measurements, catalog) -> tuple:
    """The constants fitted by default for a set of rows: ``eta_compute``, ``eta_bw``, ``eta_kv``,
    ``overhead_s``, ``overhead_per_seq_s``, ``overhead_per_layer_s``, the FP8 / FP4 compute factor of each low-precision peak the rows run on,
    ``moe_compute_factor`` when rows run a mixture-of-experts model, ``moe_pad_fraction`` when they run
    models of at least two granularities ``E / k`` (with one, it and ``moe_compute_factor`` enter only as
    their ratio and cannot be told apart), ``moe_load_cv`` when one MoE model's rows run at two
    expert-parallel degrees or more, tensor-sharded experts counting as degree 1 (only then does the busiest
    rank's load vary where the model's granularity, and so ``moe_compute_factor`` and ``moe_pad_fraction``,
    stay fixed), ``request_overhead_s`` when rows measure a TTFT or an E2E
    latency (the figures it enters), and ``eta_pcie`` when rows run a PCIe GPU
    (:attr:`fastsim.catalog.GPU.tp_link`) with an attention TP > 1 or a pipeline (a ring or a send over PCIe).

    Parameters
    ----------
    measurements : sequence of Measurement
    catalog : Catalog

    Returns
    -------
    tuple of str
    """
    from ..layouts import layout_degrees
    keys, seen, granularity, ep_degrees = set(), {}, set(), {}
    latency = moe = pcie = False
    for m in measurements:
        try:
            dp, ep = layout_degrees(m.layout, m.tp)
        except FastsimInputError:
            dp, ep = m.tp, 1
        ring = m.tp // dp > 1                                            # attention TP: dp+ep has no ring
        if not pcie and (ring or m.pp > 1):                              # the ring, or a pipeline's send
            try:
                pcie = catalog.gpu(m.gpu).tp_link == "pcie"
            except FastsimInputError:
                pass
        latency = latency or m.metric in ("ttft_s", "e2e_s")
        if m.model not in seen:
            try:
                model = catalog.model(m.model)
            except FastsimInputError:
                model = None
            seen[m.model] = model.n_experts if model is not None and model.is_moe else 0
            if seen[m.model]:
                moe = True
                granularity.add(model.n_experts / model.experts_per_token)
        if seen[m.model]:                                                # the busiest EP rank's degree
            ep_degrees.setdefault(m.model, set()).add(ep)
        try:
            keys.add(catalog.precision(m.precision).flops_key)
        except FastsimInputError:
            pass
    return (("eta_compute", "eta_bw", "eta_kv", "overhead_s", "overhead_per_seq_s", "overhead_per_layer_s")
            + tuple(_FLOPS_FACTOR[k] for k in ("fp8", "fp4") if k in keys)
            + (("moe_compute_factor",) if moe else ()) + (("moe_pad_fraction",) if len(granularity) > 1 else ())
            + (("moe_load_cv",) if any(len(d) > 1 for d in ep_degrees.values()) else ())
            + (("request_overhead_s",) if latency else ()) + (("eta_pcie",) if pcie else ()))


def _families_share_gpu(measurements) -> bool:
    """Whether a GPU type is measured by two source families or more."""
    seen = {}
    for m in measurements:
        seen.setdefault(m.gpu, set()).add(m.family)
    return any(len(f) > 1 for f in seen.values())


def host_only(measurements) -> bool:
    """Whether a default fit of these rows fits the engine's own constants alone (:data:`HOST_FITTED`;
    module docstring, "GPUs no other family ran"): the rows come from two source families or more (so
    the fit is cross-validated) and no GPU is measured by two of them.

    Parameters
    ----------
    measurements : sequence of Measurement

    Returns
    -------
    bool
        False for one source family (no held-out family to judge any constant by: every default
        constant is fitted) and for families that share a GPU.
    """
    return len({m.family for m in measurements}) > 1 and not _families_share_gpu(measurements)


def runtime_names(measurements) -> tuple:
    """The names that fit the host's costs once more for each runtime other than its engine's default the
    rows run, where they run the default too (``overhead_s@tensorrt``, ...; module docstring, "Runtimes").

    Parameters
    ----------
    measurements : sequence of Measurement

    Returns
    -------
    tuple of str
        Empty where the rows run one runtime of each engine.
    """
    runtimes = {}
    for m in measurements:
        runtimes.setdefault(m.engine, set()).add(m.runtime)
    return tuple(f"{f}{_SEP}{r}" for e, seen in sorted(runtimes.items())
                 if len(seen) > 1 and ENGINE_RUNTIMES.get(e, ("",))[0] in seen
                 for r in ENGINE_RUNTIMES.get(e, ("",))[1:] if r in seen for f in RUNTIME_FITTED)


def _fold_names(names, start, rows, catalog):
    """The constants a fold fits, and its start: a constant the fold's rows cannot pin (a compute
    factor without rows at its precision, ``request_overhead_s`` without TTFT or E2E rows,
    ``moe_compute_factor`` without a mixture-of-experts model's rows, ``eta_pcie`` without rows of a
    PCIe GPU at an attention TP > 1 or in a pipeline, ``moe_pad_fraction`` without two granularities,
    ``moe_load_cv`` without one MoE model at two expert-parallel degrees) is not fitted and keeps SPEC §3's value (``eta_pcie``: its start,
    :data:`START_ETA_PCIE`, a published figure), never a value read off the held-out rows."""
    from ..stepmodel import StepConstants
    pinned = set(default_names(rows, catalog)) | set(runtime_names(rows))
    conditional = set(_FLOPS_FACTOR.values()) | {"request_overhead_s", "moe_compute_factor", "moe_pad_fraction",
                                                   "eta_pcie", "moe_load_cv"}
    keep = tuple(n for n in names if (n not in conditional and _SEP not in n) or n in pinned)
    spec = StepConstants()
    reset = {n: getattr(spec, n) for n in names if n not in keep and n != "eta_pcie" and _SEP not in n}
    return keep, (replace(start, **reset) if reset else start)


def _subsample(rows, max_runs):
    """At most ``max_runs`` runs of ``rows`` (every row of a chosen run kept), spread evenly over families."""
    runs = {}
    for m in rows:
        runs.setdefault(run_key(m), []).append(m)
    if max_runs is None or len(runs) <= max_runs:
        return list(rows)
    by_family = {}
    for key, ms in runs.items():
        by_family.setdefault(ms[0].family, []).append(key)
    quota = {f: 0 for f in by_family}
    left = max_runs
    while left > 0:                     # round robin over families, each up to its own run count
        gave = False
        for f in sorted(by_family):
            if left and quota[f] < len(by_family[f]):
                quota[f] += 1
                left -= 1
                gave = True
        if not gave:
            break
    keep = set()
    for f, keys in by_family.items():
        idx = np.linspace(0, len(keys) - 1, quota[f]).round().astype(int) if quota[f] else []
        keep.update(keys[i] for i in sorted(set(int(i) for i in idx)))
    return [m for m in rows if run_key(m) in keep]


def _start_value(start, name) -> float:
    """Where ``name``'s fit starts: its value in ``start`` (``eta_kv`` / ``eta_pcie`` None: the efficiency they
    stand for), at least its lower bound."""
    name = _base(name)
    if name == "eta_kv":
        return start.kv_efficiency
    if name == "eta_pcie":
        return start.link_efficiency("pcie")
    return max(getattr(start, name), BOUNDS[name][0])


def _constants_at(start, names, x):
    """StepConstants with ``names`` set to ``exp(x)``; a compute factor is capped at 1 / eta_compute."""
    kw = {n: float(math.exp(v)) for n, v in zip(names, x)}
    eta_c = kw.get("eta_compute", start.eta_compute)
    for f in _FLOPS_FACTOR.values():
        if f in kw:
            kw[f] = min(kw[f], 1.0 / eta_c)
    return replace(start, **kw)


def _log_ratios(results):
    """``(ids, metrics, log ratios)`` of the expressed results."""
    ids, metrics, lr = [], [], []
    for r in results:
        if r.predicted is not None and r.predicted > 0:
            ids.append(r.measurement.id)
            metrics.append(r.measurement.metric)
            lr.append(math.log(r.predicted / r.measurement.value))
    return ids, metrics, np.asarray(lr)


def _fit(rows, catalog, start, names, max_nfev, threads, counter, prior_log_sd=None, start_rt=None):
    """Least squares on ``rows`` (with ``prior_log_sd``: the MAP fit of the module docstring, each constant's
    prior centred on its value in ``start`` or on :data:`PRIOR_CENTRE`'s): (constants, interval95, rows used,
    log ratios at the start, the optimiser's residuals at the fit (with a prior: transformed, then the priors'),
    the runtimes' host costs ``{runtime: {constant: value}}``, from ``start_rt`` and the names ``constant@runtime``)."""
    from scipy.optimize import least_squares
    # the rows every evaluation keeps: those expressed at the start (the fitted constants change
    # times, not what is expressed)
    base = run_measurements(rows, catalog, _runnable(start, start_rt), threads=threads)
    counter[0] += 1
    rows = [m for m, r in zip(rows, base) if r.predicted is not None]
    if len(rows) < len(names) + 1:
        raise FastsimInputError("measurements", f"{len(rows)} expressed rows",
                                f"more expressed rows than fitted constants ({len(names)})")
    _, _, r0 = _log_ratios([r for r in base if r.predicted is not None])
    real = np.array([m.value for m in rows])

    x0 = np.log([_start_value(start, n) for n in names])
    lo = np.log([BOUNDS[_base(n)][0] for n in names])
    hi = np.log([BOUNDS[_base(n)][1] for n in names])
    x0 = np.clip(x0, lo + 1e-9, hi - 1e-9)
    prior_sd = None if prior_log_sd is None else np.array([prior_log_sd[_base(n)] for n in names], dtype=np.float64)
    # the priors' centres: the start (clipped into the bounds), or PRIOR_CENTRE's figure where it has one
    centre = np.clip(np.log([PRIOR_CENTRE.get(_base(n), math.exp(v)) for n, v in zip(names, x0)]), lo + 1e-9,
                     hi - 1e-9)

    def fun(x):
        res = run_measurements(rows, catalog, _runnable(*_point(start, names, x, start_rt)), threads=threads)
        counter[0] += 1
        pred = np.array([r.predicted if r.predicted is not None and r.predicted > 0 else np.nan for r in res])
        out = np.log(pred / real)
        out = np.where(np.isfinite(out), out, 5.0)       # a row a trial cannot express counts as 5 (e^5 off)
        if prior_sd is None:
            return out
        # MAP (module docstring): the Cauchy negative log-likelihood of each row as a linear residual,
        # sign(r) sqrt(2 log(1 + (r / f)^2)), then one Gaussian prior residual per constant
        data = np.sign(out) * np.sqrt(2.0 * np.log1p((out / _F_SCALE) ** 2))
        return np.concatenate([data, (x - centre) / prior_sd])

    if prior_sd is None:
        sol = least_squares(fun, x0, bounds=(lo, hi), loss=_LOSS, f_scale=_F_SCALE, diff_step=0.02,
                            x_scale=1.0, max_nfev=max_nfev, xtol=1e-3, ftol=1e-4)
    else:
        sol = least_squares(fun, x0, bounds=(lo, hi), loss="linear", diff_step=0.02,
                            x_scale=1.0, max_nfev=max_nfev, xtol=1e-3, ftol=1e-4)
    c, rt = _point(start, names, sol.x, start_rt)
    n, k = sol.fun.size, len(names)
    # MAP: the Laplace approximation at the Cauchy scale (module docstring), the priors' rows in the Jacobian
    s2 = float(np.sum(sol.fun ** 2)) / max(n - k, 1) if prior_sd is None else 1.0
    try:
        cov = np.linalg.inv(sol.jac.T @ sol.jac) * s2
        sd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    except np.linalg.LinAlgError:
        sd = np.full(k, np.inf)
    # a constant the rows do not pin (a zero Jacobian column, e.g. at a bound) has no interval: NaN
    iv = tuple((nm, float(math.exp(v - 1.96 * s)), float(math.exp(v + 1.96 * s))) if math.isfinite(s) and s < 10.0
               else (nm, math.nan, math.nan) for nm, v, s in zip(names, sol.x, sd))
    return c, iv, rows, r0, sol.fun, rt


def _stats(lr) -> dict:
    return group_stats(np.exp(lr)) if len(lr) else group_stats([])


def _fit_joint(rows, cat, start, names, max_runs, max_nfev, threads, counter, min_gpu_rows, prior_log_sd=None):
    """The joint (hierarchical) fit of the module docstring: the ``"*"`` constants and, for each GPU with at
    least ``min_gpu_rows`` expressed rows in the subsample, its own :data:`GPU_FITTED` efficiencies, fitted at
    once on every row (each run on its GPU's entry); each GPU efficiency's log has a Gaussian prior of SD
    :data:`GPU_LOG_SD` around the ``"*"`` one (without ``prior_log_sd``: no priors at all, the GPU
    efficiencies free). Returns the entries, ``"*"`` first."""
    from scipy.optimize import least_squares
    from ..constants import Calibration, CalibrationEntry
    rows = _subsample(rows, max_runs)
    base = run_measurements(rows, cat, start, threads=threads)
    counter[0] += 1
    rows = [m for m, r in zip(rows, base) if r.predicted is not None]
    k = len(names)
    if len(rows) < k + 1:
        raise FastsimInputError("measurements", f"{len(rows)} expressed rows",
                                f"more expressed rows than fitted constants ({k})")
    real = np.array([m.value for m in rows])
    count = {}
    for m in rows:
        count[m.gpu.upper()] = count.get(m.gpu.upper(), 0) + 1
    gi = [i for i, n in enumerate(names) if n in GPU_FITTED]
    gpus = sorted(g for g, c in count.items() if c >= min_gpu_rows) if len(count) > 1 and gi else []
    ng = len(gi)
    x0 = np.log([_start_value(start, n) for n in names])
    lo = np.log([BOUNDS[n][0] for n in names])
    hi = np.log([BOUNDS[n][1] for n in names])
    x0 = np.clip(x0, lo + 1e-9, hi - 1e-9)
    X0 = np.concatenate([x0] + [x0[gi]] * len(gpus))
    L = np.concatenate([lo] + [lo[gi]] * len(gpus))
    H = np.concatenate([hi] + [hi[gi]] * len(gpus))
    prior_sd = None if prior_log_sd is None else np.array([prior_log_sd[n] for n in names], dtype=np.float64)
    centre = np.clip(np.log([PRIOR_CENTRE.get(n, math.exp(v)) for n, v in zip(names, x0)]), lo + 1e-9, hi - 1e-9)

    def gpu_x(X, j):
        x = X[:k].copy()
        x[gi] = X[k + j * ng:k + (j + 1) * ng]
        return x

    def cal_of(X):
        ents = [CalibrationEntry("*", "*", _constants_at(start, names, X[:k]), tuple(names))]
        ents += [CalibrationEntry(g, "*", _constants_at(start, names, gpu_x(X, j)), tuple(names))
                 for j, g in enumerate(gpus)]
        return Calibration(tuple(ents), "", "")

    def fun(X):
        res = run_measurements(rows, cat, cal_of(X), threads=threads)
        counter[0] += 1
        pred = np.array([r.predicted if r.predicted is not None and r.predicted > 0 else np.nan for r in res])
        out = np.log(pred / real)
        out = np.where(np.isfinite(out), out, 5.0)       # a row a trial cannot express counts as 5 (e^5 off)
        if prior_sd is None:
            return out
        data = np.sign(out) * np.sqrt(2.0 * np.log1p((out / _F_SCALE) ** 2))
        dev = [(X[k + j * ng:k + (j + 1) * ng] - X[:k][gi]) / GPU_LOG_SD for j in range(len(gpus))]
        return np.concatenate([data, (X[:k] - centre) / prior_sd] + dev)

    kw = dict(bounds=(L, H), diff_step=0.02, x_scale=1.0, max_nfev=max_nfev, xtol=1e-3, ftol=1e-4)
    sol = (least_squares(fun, X0, loss=_LOSS, f_scale=_F_SCALE, **kw) if prior_sd is None
           else least_squares(fun, X0, loss="linear", **kw))
    n = sol.fun.size
    s2 = float(np.sum(sol.fun ** 2)) / max(n - X0.size, 1) if prior_sd is None else 1.0
    try:
        cov = np.linalg.inv(sol.jac.T @ sol.jac) * s2
    except np.linalg.LinAlgError:
        cov = np.full((X0.size, X0.size), np.inf)

    def iv(x, idx):
        out = []
        for nm, v, i in zip(names, x, idx):
            sd = math.sqrt(max(cov[i, i], 0.0)) if math.isfinite(cov[i, i]) else math.inf
            out.append((nm, float(math.exp(v - 1.96 * sd)), float(math.exp(v + 1.96 * sd))) if sd < 10.0
                       else (nm, math.nan, math.nan))
        return tuple(out)

    entries = [FitEntry("*", _constants_at(start, names, sol.x[:k]), iv(sol.x[:k], range(k)), len(rows))]
    for j, g in enumerate(gpus):
        idx = list(range(k))
        for t, i in enumerate(gi):
            idx[i] = k + j * ng + t
        x = gpu_x(sol.x, j)
        entries.append(FitEntry(g, _constants_at(start, names, x), iv(x, idx), count[g]))
    return entries


def _fit_entries(rows, cat, start, names, max_runs, max_nfev, threads, counter, min_gpu_rows, prior_log_sd=None,
                 gpu_fit="sequential"):
    """The entries of ``gpu_fit``'s method (module docstring, "Per-GPU entries"). Sequential: the ``"*"``
    entry fitted on ``rows``, then one per GPU with at least ``min_gpu_rows`` expressed rows (its prior
    centred on the ``"*"`` entry's values)."""
    from ..constants import RuntimeEntry
    if gpu_fit == "joint":            # one host for every runtime (fit_measurements refuses '@' names here)
        return _fit_joint(rows, cat, start, names, max_runs, max_nfev, threads, counter, min_gpu_rows,
                          prior_log_sd), ()
    c_all, iv_all, used, _, _, rt_all = _fit(_subsample(rows, max_runs), cat, start, names, max_nfev, threads,
                                             counter, prior_log_sd)
    runtimes = tuple(RuntimeEntry(r, tuple((f, kv[f]) for f in RUNTIME_FITTED if f in kv),
                                  tuple(_base(n) for n in names if n.endswith(_SEP + r)),
                                  tuple((_base(n), lo, hi) for n, lo, hi in iv_all if n.endswith(_SEP + r)))
                     for r, kv in sorted(rt_all.items()))
    iv_all = tuple(x for x in iv_all if _SEP not in x[0])
    entries = [FitEntry("*", c_all, iv_all, len(used))]
    by_gpu = {}
    for m in rows:
        by_gpu.setdefault(m.gpu.upper(), []).append(m)
    if len(by_gpu) > 1:
        for g in sorted(by_gpu):
            if len(by_gpu[g]) < min_gpu_rows:
                continue
            g_names = tuple(n for n in names if n in GPU_FITTED)
            if not g_names:
                break
            try:
                c, iv, used_g, _, _, _ = _fit(
                    _subsample(by_gpu[g], None if max_runs is None else max(max_runs // 2, 4)), cat, c_all, g_names,
                    max(max_nfev // 2, 1), threads, counter, prior_log_sd, start_rt=rt_all)
            except FastsimInputError:
                continue                                   # too few expressed rows on this GPU
            if len(used_g) >= min_gpu_rows:
                iv = tuple(x for x in iv_all if x[0] not in g_names) + iv
                entries.append(FitEntry(g, c, iv, len(used_g)))
    return entries, runtimes


def fit_measurements(measurements, catalog=None, *, engine: str, names=None, start=None, max_runs: int | None = 150,
                     max_nfev: int = 40, min_gpu_rows: int = 20, cross_validate: bool = True,
                     threads: int | None = None, prior_log_sd="default", gpu_fit: str | None = None) -> MeasuredFit:
    """Fit step-model constants to one engine's measurements through the simulator (module docstring).

    A GPU with at least ``min_gpu_rows`` rows gets an entry of its own, its efficiencies
    (:data:`GPU_FITTED`) fitted with the ``"*"`` entry in one hierarchical fit (``gpu_fit="joint"``)
    or refitted on its rows from the ``"*"`` fit with half the runs and evaluations
    (``"sequential"``); an engine's kernels differ per GPU: TensorRT-LLM on the L40S reads its
    weights at about 0.40 of its datasheet bandwidth, on the H100 at 0.72 (the shipped fit).

    Parameters
    ----------
    measurements : sequence of Measurement
        From :func:`fastsim.validate.read_measurements`; only ``engine``'s rows are used.
    catalog : Catalog, optional
        The catalog the rows were read with (default: the built-in one).
    engine : str
        ``trtllm``, ``vllm`` or ``sglang``.
    names : sequence of str, optional
        Constants to fit, among :data:`FITTABLE` (default: :func:`default_names`; those among
        :data:`HOST_FITTED` alone where :func:`host_only`).
    start : StepConstants, optional
        The starting point of the ``"*"`` fits and the value of every constant not fitted
        (default: SPEC §3's timing constants with the engine's KV-pool rule,
        :data:`ENGINE_KV_MEMORY`, :data:`ENGINE_RESERVED_BYTES` set aside, the step form of
        :data:`ENGINE_STEP_FORM`, the MoE dispatch of :data:`ENGINE_MOE_DISPATCH`, and
        :data:`START_REQUEST_OVERHEAD_S`, :data:`START_ETA_PCIE`; :data:`START_OVERHEAD_PER_SEQ_S` when it fits
        ``overhead_per_seq_s``). The figures the
        fit is compared with are always SPEC §3's constants' (``in_sample["start"]``,
        ``held_out["start"]``).
    max_runs : int or None
        At most this many runs per fit (a subsample, module docstring); None: every run.
    max_nfev : int
        Most evaluations of one least-squares fit (each a simulator pass over its rows).
    min_gpu_rows : int
        Rows a GPU needs for an entry of its own (>= 2).
    cross_validate : bool
        Leave-one-source-out folds (one fit per source family, per-GPU entries included) after
        the full fit.
    threads : int, optional
        As in :func:`fastsim.validate.run_measurements`.
    prior_log_sd : "default", dict or None
        The SD of each fitted constant's Gaussian prior on the log scale (module docstring, "Priors"),
        centred on its starting value: ``"default"`` is :data:`PRIOR_LOG_SD`; a dict gives every fitted
        constant's; None fits the likelihood alone (no prior; ``loss="cauchy"``).
    gpu_fit : str, optional
        How the per-GPU entries are fitted (module docstring, "Per-GPU entries"): ``"joint"`` or
        ``"sequential"``; default: the engine's in :data:`ENGINE_GPU_FIT`.

    Returns
    -------
    MeasuredFit

    Raises
    ------
    FastsimInputError
        An unknown engine or constant; fewer expressed rows than constants; bad ``max_runs``,
        ``max_nfev`` or ``min_gpu_rows``; a ``prior_log_sd`` that is not ``"default"``, None or a
        mapping of constants in :data:`FITTABLE` to finite SDs > 0 covering every fitted constant; a
        ``gpu_fit`` other than ``"joint"`` or ``"sequential"``.
    """
    from ..catalog import default_catalog
    from ..constants import ENGINES
    from ..errors import require_count
    from ..stepmodel import StepConstants
    if engine not in ENGINES:
        raise FastsimInputError("engine", engine, "one of " + ", ".join(ENGINES))
    gpu_fit = ENGINE_GPU_FIT[engine] if gpu_fit is None else gpu_fit
    if not isinstance(gpu_fit, str) or gpu_fit not in _GPU_FITS:
        raise FastsimInputError("gpu_fit", gpu_fit, "'joint' or 'sequential'")
    cat = catalog if catalog is not None else default_catalog()
    start_default = start is None
    if start is None:
        start = StepConstants(kv_memory=ENGINE_KV_MEMORY[engine], reserved_bytes_per_gpu=ENGINE_RESERVED_BYTES,
                              request_overhead_s=START_REQUEST_OVERHEAD_S, step_form=ENGINE_STEP_FORM[engine],
                              moe_dispatch=ENGINE_MOE_DISPATCH[engine],
                              eta_pcie=START_ETA_PCIE)
    baseline = StepConstants()
    rows = [m for m in measurements if m.engine == engine]
    if not rows:
        raise FastsimInputError("engine", engine, "an engine with rows in the measurements")
    # a row no policy can run (a vLLM V0 run, a pipeline under a policy without one) is neither
    # fitted nor held out, and a family without an expressed row makes no fold
    rows = [m for m in rows if unexpressible(m) is None]
    if not rows:
        raise FastsimInputError("engine", engine, "an engine with rows fastsim can express")
    if names is None:
        names = default_names(rows, cat)
        if host_only(rows):
            names = tuple(n for n in names if n in HOST_FITTED)
    names = tuple(names)
    if start_default and "overhead_per_seq_s" in names:
        # a fit of the per-sequence host time starts inside its bounds (SPEC §3's 0 is below them);
        # a fit without it keeps SPEC §3's 0
        start = replace(start, overhead_per_seq_s=START_OVERHEAD_PER_SEQ_S)
    if start_default and "overhead_per_layer_s" in names:
        start = replace(start, overhead_per_layer_s=START_OVERHEAD_PER_LAYER_S)
    if start_default and "moe_pad_fraction" in names:
        start = replace(start, moe_pad_fraction=START_MOE_PAD_FRACTION)
    if start_default and "moe_load_cv" in names:
        start = replace(start, moe_load_cv=START_MOE_LOAD_CV)
    for n in names:
        if _base(n) not in FITTABLE or (_SEP in n and (_base(n) not in RUNTIME_FITTED or n.split(_SEP, 1)[1]
                                                        not in ENGINE_RUNTIMES[engine][1:])):
            raise FastsimInputError("names", n, "constants among " + ", ".join(FITTABLE) + ", or "
                                    + ", ".join(RUNTIME_FITTED) + " + '@' + another runtime of the engine ("
                                    + (", ".join(ENGINE_RUNTIMES[engine][1:]) or "none") + ")")
        if _SEP in n and gpu_fit == "joint":
            raise FastsimInputError("names", n, "no runtime's own constant under gpu_fit 'joint' (one host for "
                                    "every runtime); gpu_fit 'sequential' fits them")
    prior = PRIOR_LOG_SD if isinstance(prior_log_sd, str) and prior_log_sd == "default" else prior_log_sd
    if prior is not None:
        from collections.abc import Mapping
        if not isinstance(prior, Mapping):
            raise FastsimInputError("prior_log_sd", prior_log_sd, "'default', a mapping of log-scale SDs or None")
        for n in prior:
            if n not in FITTABLE:
                raise FastsimInputError("prior_log_sd", n, "keys among " + ", ".join(FITTABLE))
        for n in names:
            v = prior.get(_base(n))
            if isinstance(v, bool) or not isinstance(v, Real) or not (0.0 < float(v) < math.inf):
                raise FastsimInputError(f"prior_log_sd[{n!r}]", v, "a finite SD > 0 for every fitted constant")
        prior = {n: float(v) for n, v in prior.items()}
    if max_runs is not None:
        max_runs = require_count("max_runs", max_runs, len(names) + 1)
    max_nfev = require_count("max_nfev", max_nfev, 1)
    min_gpu_rows = require_count("min_gpu_rows", min_gpu_rows, 2)
    counter = [0]
    entries, runtimes = _fit_entries(rows, cat, start, names, max_runs, max_nfev, threads, counter, min_gpu_rows,
                                     prior, gpu_fit)
    cal = _calibration(engine, names, entries, runtimes=runtimes)
    res_fit = run_measurements(rows, cat, cal, threads=threads)
    res_0 = run_measurements(rows, cat, baseline, threads=threads)
    counter[0] += 2
    ok = [i for i, (a, b) in enumerate(zip(res_fit, res_0)) if a.predicted is not None and b.predicted is not None]
    in_sample = {"start": _stats(_log_ratios([res_0[i] for i in ok])[2]),
                 "fitted": _stats(_log_ratios([res_fit[i] for i in ok])[2])}
    folds = []
    held_start, held_fit, held_unfit, held_metric = [], [], [], {}
    families = sorted({rows[i].family for i in ok})
    if cross_validate and len(families) > 1:
        for fam in families:
            out_idx = [i for i, m in enumerate(rows) if m.family == fam]
            rest = [m for m in rows if m.family != fam]
            names_f, start_f = _fold_names(names, start, rest, cat)
            try:
                ent_f, rt_f = _fit_entries(rest, cat, start_f, names_f, max_runs, max_nfev, threads, counter,
                                           min_gpu_rows, prior, gpu_fit)
            except FastsimInputError:
                continue                                   # too few rows left to fit: no fold
            cal_f = _calibration(engine, names_f, ent_f, runtimes=rt_f)
            res_f = run_measurements([rows[i] for i in out_idx], cat, cal_f, threads=threads)
            counter[0] += 1
            # the fold's start, unfitted: what the model's form and its documented starts give alone
            res_u = run_measurements([rows[i] for i in out_idx], cat, start_f, threads=threads)
            counter[0] += 1
            pairs = [(a, res_0[i]) for a, i in zip(res_f, out_idx)
                     if a.predicted is not None and res_0[i].predicted is not None]
            ids, metrics, lr_f = _log_ratios([a for a, _ in pairs])
            _, _, lr_0 = _log_ratios([b for _, b in pairs])
            held_unfit.extend(_log_ratios([u for a, u, i in zip(res_f, res_u, out_idx) if a.predicted is not None
                                           and res_0[i].predicted is not None and u.predicted is not None])[2])
            held_start.extend(lr_0)
            held_fit.extend(lr_f)
            for mt, a, b in zip(metrics, lr_0, lr_f):
                held_metric.setdefault(mt, ([], []))
                held_metric[mt][0].append(a)
                held_metric[mt][1].append(b)
            st = _stats(lr_f)
            folds.append(FoldResult(fam, cal_f, st["rows"], st["median_abs_pct_error"], st["geomean_ratio"],
                                    tuple(zip(ids, metrics, np.exp(lr_f).tolist()))))
    held = {"start": _stats(np.asarray(held_start)), "fitted": _stats(np.asarray(held_fit)),
            "unfitted": _stats(np.asarray(held_unfit)),
            "per_metric": {mt: {"start": _stats(np.asarray(a)), "fitted": _stats(np.asarray(b))}
                           for mt, (a, b) in sorted(held_metric.items())}}
    return MeasuredFit(engine, names, tuple(entries), start, in_sample, tuple(folds), held, counter[0],
                       None if prior is None else {n: prior[_base(n)] for n in names}, gpu_fit, runtimes)
