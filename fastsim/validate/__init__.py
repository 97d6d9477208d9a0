"""fastsim beside real engines: each published measurement run the way its benchmark ran (``fastsim validate``).

Reading guide, in the order a validation runs through the package:

- :mod:`fastsim.validate.records`: the measurement schema (``fastsim/data/measurements/README.md``)
  as :class:`Measurement`, and :func:`read_measurements`, which checks every field (bad input is
  one error naming the row id and the column);
- :mod:`fastsim.validate.run`: :func:`validate` and :func:`run_measurements`, each row run as its
  benchmark ran (offline batch, finite Poisson run, trace replay, all drained; or one decode
  step) on its engine's policy, and :class:`RowResult`, fastsim's figure or the reason a row
  cannot be expressed;
- :mod:`fastsim.validate.summary`: :class:`ValidationReport` and :func:`summarize`, the median
  absolute percentage error and the geometric-mean ratio per metric, engine, source family and
  overall;
- :mod:`fastsim.validate.diagnose`: :func:`diagnose`, one-change reruns that show which term of
  the step or serving model a row's error comes from;
- :mod:`fastsim.validate.plot`: :func:`plot_validation`, predicted against real on log-log axes.

The command is :mod:`fastsim.commands.validate`; ``tools/make_validation.py`` writes
``docs/VALIDATION.md`` from the shipped set.
"""
from __future__ import annotations

from .records import (BENCHMARKS, ENGINES, METRICS, SHIPPED_CALIBRATIONS, SHIPPED_CATALOG, SHIPPED_MEASUREMENTS,
                      Measurement, fitted_calibrations, is_shipped_set, read_measurements)
from .run import ENGINE_POLICY, ONLINE_SEED, STAGE_S, RowResult, engine_constants, run_measurements, validate
from .summary import ValidationReport, optimism, summarize
from .diagnose import Diagnosis, diagnose
from .plot import plot_validation

__all__ = ["Measurement", "read_measurements", "ENGINES", "BENCHMARKS", "METRICS", "SHIPPED_MEASUREMENTS",
           "SHIPPED_CATALOG", "SHIPPED_CALIBRATIONS", "fitted_calibrations", "is_shipped_set", "RowResult", "validate", "run_measurements", "engine_constants", "ENGINE_POLICY", "ONLINE_SEED", "STAGE_S",
           "ValidationReport", "summarize", "optimism", "Diagnosis", "diagnose", "plot_validation"]
