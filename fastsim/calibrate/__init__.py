"""Calibrate the step model's constants to measurements by least squares (SPEC §3).

The step model (:mod:`fastsim.stepmodel`) runs on assumed constants: 60% of peak FLOP/s, 80% of
HBM bandwidth, a ring all-reduce with a per-hop latency of 0.43 us at 85% of NVLink bandwidth,
and 1 ms of fixed overhead per step. SPEC §3 says a user can calibrate them from measured times;
this package fits them and writes a calibration file that every planning command reads with
``--calibration FILE`` (and the Python API as a ``constants=`` argument).

Inputs
------
- Measured steps (:func:`read_step_measurements`): a CSV with one row per measured forward pass,
  columns ``gpu, precision, tp, model, decode_tokens, prefill_tokens, kv_tokens, step_s``. Each
  row is modelled by :func:`fastsim.stepmodel.step_time` with ``n_tokens = decode_tokens +
  prefill_tokens``, the row's ``kv_tokens`` read, and attention FLOPs ``4 x layers x q_dim x
  kv_tokens + 2 x layers x q_dim x prefill_tokens^2`` (the decodes attend over the cached
  tokens, the prompt tokens causally over themselves; as the simulator charges a step, SPEC §6).
  The fit gives ``eta_compute``, ``eta_bw``, ``overhead_s`` and, when some rows run at TP > 1,
  ``alpha_s`` and ``eta_nvlink`` per (GPU, precision).
- Per-operation profiles in Vidur's format (:func:`read_op_profile`,
  :func:`read_allreduce_profile`; Agrawal et al., "Vidur", MLSys 2024): kernel times of one
  layer's matmuls at 1 to 4096 tokens and TP 1 to 8, and NCCL all-reduce times on 2, 4 and 8
  GPUs of a node. H100 profiles of three models ship in ``fastsim/data/profiles`` (name
  ``vidur-h100``). A matmul of ``W`` weight parameters per GPU on ``n`` tokens is modelled as
  the step model models the whole step, ``max(2 W / (eta_bw x HBM B/s), 2 W n / (eta_compute x
  peak)) + kernel_s`` (FP16 weights; ``kernel_s`` a fixed time per kernel, reported but not a
  step-model constant: the step's ``overhead_s`` holds it); an all-reduce of ``B`` bytes on
  ``p`` GPUs as ``2 (p-1) alpha_s + 2 (p-1)/p x B / (eta_nvlink x NVLink B/s)`` (Thakur,
  Rabenseifner, Gropp 2005). The profiles do not measure a step's fixed overhead: a
  calibration from profiles alone keeps ``overhead_s`` at its default.
- Serving benchmarks (:func:`read_serving_benchmark`, :func:`fit_serving`): the JSON of ``vllm
  bench serve --save-result`` at several request rates (TTFT and TPOT percentiles, output
  throughput). ``eta_compute`` and ``eta_bw`` (optionally ``overhead_s``) are fitted through the
  simulator (:mod:`fastsim.sim`, the ``vllm`` engine policy by default): a coarse grid then
  Nelder-Mead over simulations of the benchmark's requests, with profile-likelihood intervals
  (see :func:`fit_serving`).

Fitting
-------
:func:`scipy.optimize.least_squares` (trust region reflective) on the log of each parameter,
minimising the sum of squared log residuals ``log(modelled) - log(measured)`` (relative errors,
so that a 5 us kernel and a 5 ms step weigh alike). The 95% intervals come from the Jacobian at
the optimum: covariance ``s^2 (J^T J)^-1`` with ``s^2`` the residual variance, a Student-t
quantile, transformed back from the log scale (so they are asymmetric and stay positive). They
say how well the data pin a parameter *given the model's form*; where the form misses the
measurements systematically (residuals far above the noise), the interval is narrow and the
residuals, not the interval, show the error. A parameter the data do not move (e.g. compute
efficiency when every measured step is memory-bound) is reported as not identified and keeps
its default. Efficiencies are bounded to (0, 1] (the step model's domain).

The default constants are unchanged: nothing here runs unless asked.

The package, in the order a calibration runs:

- :mod:`fastsim.constants` (below this package): the calibration file, :class:`Calibration`,
  :class:`CalibrationEntry`, :func:`load_calibration`, its TOML;
- :mod:`fastsim.calibrate.readers`: measured steps, Vidur operation and all-reduce profiles;
- :mod:`fastsim.calibrate.fit`: :class:`Fit`, the least squares, :func:`fit_operations`,
  :func:`fit_allreduce`, :func:`fit_steps`, and :func:`calibrate` with its
  :class:`CalibrationReport`;
- :mod:`fastsim.calibrate.serving`: serving benchmarks, :func:`serving_workload`,
  :func:`fit_serving` through the simulator;
- :mod:`fastsim.calibrate.plots`: :func:`plot_calibration`, :func:`plot_serving`.

The ``fastsim calibrate`` command is :mod:`fastsim.commands.calibrate`.
"""
from __future__ import annotations

from ..constants import CONSTANTS, FORMAT_VERSION, Calibration, CalibrationEntry, load_calibration
from .fit import UNITS, CalibrationReport, Fit, calibrate, fit_allreduce, fit_operations, fit_steps
from .plots import plot_calibration, plot_serving
from .readers import (BUILTIN_PROFILES, ELEMENTWISE_OPS, MATMUL_OPS, PROFILE_MODELS, PROFILES_DIR, STEP_COLUMNS,
                      operation_weight_params, read_allreduce_profile, read_op_profile, read_profiles,
                      read_step_measurements)
from .serving import (SERVING_KEYS, SERVING_PERCENTILES, ServingFit, ServingMeasurement, fit_serving,
                      read_serving_benchmark, serving_result_json, serving_workload)

# Besides __all__: the names of the constants a calibration sets (CONSTANTS) and their units
# (UNITS), imported above, and the calibration file's TOML writers (fastsim.constants).
from ..constants import _toml_float, _toml_str  # noqa: F401

__all__ = [
    "Calibration", "CalibrationEntry", "Fit", "CalibrationReport", "calibrate", "load_calibration",
    "read_step_measurements", "read_op_profile", "read_allreduce_profile", "read_profiles", "fit_steps",
    "fit_operations", "fit_allreduce", "operation_weight_params", "plot_calibration", "PROFILE_MODELS",
    "PROFILES_DIR", "BUILTIN_PROFILES", "MATMUL_OPS", "ELEMENTWISE_OPS", "STEP_COLUMNS", "FORMAT_VERSION",
    "ServingMeasurement", "ServingFit", "read_serving_benchmark", "serving_workload", "serving_result_json",
    "fit_serving", "plot_serving", "SERVING_KEYS", "SERVING_PERCENTILES",
]
