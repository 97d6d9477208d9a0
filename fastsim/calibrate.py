"""Calibrate the step model's constants to measurements by least squares (SPEC §3).

The step model (:mod:`fastsim.stepmodel`) runs on assumed constants: 60% of peak FLOP/s, 80% of
HBM bandwidth, a ring all-reduce with a per-hop latency of 0.43 us at 85% of NVLink bandwidth,
and 1 ms of fixed overhead per step. SPEC §3 says a user can calibrate them from measured times;
this module fits them and writes a calibration file that every planning command reads with
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
"""
from __future__ import annotations

import csv
import json
import math
import os
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import pandas as pd

from .catalog import GPU, Catalog, Model, Precision, default_catalog
from .errors import FastsimInputError
from .stepmodel import (N_PARAMS, P_ALPHA, P_ETA_BW, P_ETA_C, P_ETA_NV, P_OVERHEAD, StepConstants,
                        decode_attn_flops, prefill_attn_flops, step_params, step_time)

__all__ = [
    "Calibration", "CalibrationEntry", "Fit", "CalibrationReport", "calibrate", "load_calibration",
    "read_step_measurements", "read_op_profile", "read_allreduce_profile", "read_profiles", "fit_steps",
    "fit_operations", "fit_allreduce", "operation_weight_params", "plot_calibration", "PROFILE_MODELS",
    "PROFILES_DIR", "BUILTIN_PROFILES", "MATMUL_OPS", "ELEMENTWISE_OPS", "STEP_COLUMNS", "FORMAT_VERSION",
    "ServingMeasurement", "ServingFit", "read_serving_benchmark", "serving_workload", "serving_result_json",
    "fit_serving", "plot_serving", "SERVING_KEYS", "SERVING_PERCENTILES",
]

#: Directory of the shipped profiles (Vidur, H100; see its ATTRIBUTION.md).
PROFILES_DIR = Path(__file__).parent / "data" / "profiles"
#: Names of shipped profile sets (``--profiles vidur-h100``) -> the GPU they were measured on.
BUILTIN_PROFILES = {"vidur-h100": "H100"}
#: Version of the calibration file format written by :meth:`Calibration.to_toml`.
FORMAT_VERSION = 1
#: The matmul operations of a Vidur ``mlp`` profile (the ones the step model models).
MATMUL_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
#: The elementwise operations of a Vidur ``mlp`` profile (not in the step model).
ELEMENTWISE_OPS = ("emb", "input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add")
#: Columns of a measured-steps CSV (:func:`read_step_measurements`).
STEP_COLUMNS = ("gpu", "precision", "tp", "model", "decode_tokens", "prefill_tokens", "kv_tokens", "step_s")
#: The constants a calibration may set (``memory_utilization`` is not a timing constant).
CONSTANTS = ("eta_compute", "eta_bw", "alpha_s", "eta_nvlink", "overhead_s")
UNITS = {"eta_compute": "fraction of peak FLOP/s", "eta_bw": "fraction of HBM bytes/s",
         "alpha_s": "s per ring hop", "eta_nvlink": "fraction of NVLink bytes/s", "overhead_s": "s per step",
         "kernel_s": "s per matmul kernel"}
# log-scale bounds of each parameter
_BOUNDS = {"eta_compute": (1e-3, 1.0), "eta_bw": (1e-3, 1.0), "eta_nvlink": (1e-3, 1.0),
           "alpha_s": (1e-9, 1e-3), "overhead_s": (1e-7, 1.0), "kernel_s": (1e-9, 1e-3)}
_START = {"kernel_s": 3e-6}


def _llama2(name, layers, hidden, heads, kv_heads, ffn, ctx, source):
    return Model(name=name, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=hidden // heads,
                 ffn=ffn, vocab=32000, max_context_tokens=ctx, source=source)


#: The models of the shipped profiles, keyed by the profile file's model name. They are not in the
#: catalog (fastsim plans Llama-3.1); built from the configs published with their weights.
PROFILE_MODELS = {
    "llama-2-7b-hf": _llama2("llama-2-7b", 32, 4096, 32, 32, 11008, 4096,
                             "meta-llama/Llama-2-7b-hf config.json"),
    "llama-2-70b-hf": _llama2("llama-2-70b", 80, 8192, 64, 8, 28672, 4096,
                              "meta-llama/Llama-2-70b-hf config.json"),
    "codellama-34b-instruct-hf": _llama2("codellama-34b", 48, 8192, 64, 8, 22016, 16384,
                                         "codellama/CodeLlama-34b-Instruct-hf config.json"),
}


# ---------------------------------------------------------------------------------------------
# The calibration file
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CalibrationEntry:
    """The constants of one GPU and precision in a calibration.

    Attributes
    ----------
    gpu : str
        Catalog GPU name, or ``"*"`` (any GPU).
    precision : str
        Catalog precision name, or ``"*"`` (any precision of the GPU).
    constants : StepConstants
        The step model's constants for the pair (fitted ones and defaults).
    fitted : tuple of str
        Names of the constants that were fitted (the others are the defaults).
    interval95 : tuple of (str, float, float)
        95% interval of each fitted constant, in its own unit.
    tp : int
        0: any tensor-parallel group; N: only steps whose all-reduce runs over N GPUs (the
        all-reduce's latency does not grow as the ring model's ``2 (p-1) alpha`` says, so a
        calibration may hold ``alpha_s`` and ``eta_nvlink`` per group size).
    """

    gpu: str
    precision: str
    constants: StepConstants
    fitted: tuple = ()
    interval95: tuple = ()
    tp: int = 0


@dataclass(frozen=True)
class Calibration:
    """Step-model constants per (GPU, precision), fitted by :func:`calibrate` or read by :func:`load_calibration`.

    Pass it wherever a ``constants`` argument takes a :class:`fastsim.stepmodel.StepConstants`
    (``ScreenOptions(constants=...)``, ``sim_plan``, ``verify``, ``max_sustainable_rate``,
    ``ledger_table``, ``SweepSettings``): :func:`fastsim.stepmodel.step_params` asks it for the
    constants of each configuration's GPU and precision.

    Attributes
    ----------
    entries : tuple of CalibrationEntry
        Most specific match wins: exact (GPU, precision), then (GPU, ``*``), then
        (``*``, precision), then (``*``, ``*``). A pair no entry matches keeps the defaults.
    source : str
        What the constants were fitted to (free text, written to the file).
    """

    entries: tuple = ()
    source: str = ""

    def step_constants(self, gpu: str, precision: str, tp: int = 0) -> StepConstants:
        """The constants for a GPU, precision and tensor-parallel group.

        Parameters
        ----------
        gpu, precision : str
            Catalog names (case-insensitive).
        tp : int, default 0
            GPUs of the step's all-reduce group; an entry for exactly that ``tp`` is preferred to
            one for any (``tp = 0``) at the same (GPU, precision) specificity.

        Returns
        -------
        StepConstants
            The matching entry's, or the defaults (SPEC §3) when none matches.
        """
        g, p = str(gpu).upper(), str(precision).upper()
        for want in ((g, p), (g, "*"), ("*", p), ("*", "*")):
            for t in ((int(tp), 0) if tp else (0,)):
                for e in self.entries:
                    if (e.gpu, e.precision, e.tp) == (*want, t):
                        return e.constants
        return StepConstants()

    def to_toml(self) -> str:
        """The calibration file's text (the format :func:`load_calibration` reads).

        Returns
        -------
        str
            TOML: ``format_version``, ``source`` and one ``[[constants]]`` table per entry with
            ``gpu``, ``precision``, the five constants (seconds or fractions), ``fitted`` (names)
            and ``interval95`` (name -> [low, high]).
        """
        out = ["# fastsim calibration: step-model constants fitted to measurements (`fastsim calibrate`).",
               "# Used by --calibration FILE (plan, simulate, capacity, ledger, sweep) and by",
               "# fastsim.calibrate.load_calibration. One [[constants]] table per GPU and precision",
               '# ("*" matches any); a GPU and precision without a table keep the default constants.',
               "# Units: eta_* are fractions of the catalog peak (FLOP/s, HBM bytes/s, NVLink bytes/s);",
               "# alpha_s is seconds per ring hop of an all-reduce; overhead_s is seconds per step.",
               f"format_version = {FORMAT_VERSION}",
               f"source = {_toml_str(self.source)}", ""]
        for e in self.entries:
            out += ["[[constants]]", f"gpu = {_toml_str(e.gpu)}", f"precision = {_toml_str(e.precision)}"]
            if e.tp:
                out.append(f"tp = {int(e.tp)}   # only steps whose all-reduce spans {int(e.tp)} GPUs")
            for name in CONSTANTS:
                out.append(f"{name} = {_toml_float(getattr(e.constants, name))}")
            out.append("fitted = [" + ", ".join(_toml_str(n) for n in e.fitted) + "]   # the others are defaults")
            iv = ", ".join(f"{n} = [{_toml_float(lo)}, {_toml_float(hi)}]" for n, lo, hi in e.interval95
                           if math.isfinite(lo) and math.isfinite(hi))
            out.append("interval95 = { " + iv + " }" if iv else "interval95 = {}")
            out.append("")
        return "\n".join(out)

    def write(self, path) -> None:
        """Write :meth:`to_toml` to ``path``.

        Raises
        ------
        FastsimInputError
            The file cannot be written (names the path and the reason).
        """
        try:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(self.to_toml())
        except OSError as exc:
            raise FastsimInputError("--out", str(path), f"a writable file path ({exc.strerror})") from None


def _toml_str(s) -> str:
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def _toml_float(x) -> str:
    x = float(x)
    if not math.isfinite(x):
        raise ValueError("TOML calibration values are finite")
    return repr(x)


def load_calibration(path, catalog: Catalog | None = None) -> Calibration:
    """Read a calibration file written by ``fastsim calibrate`` (or by hand, in the same format).

    Parameters
    ----------
    path : str or path-like
        A TOML file: ``format_version = 1``, optional ``source``, and ``[[constants]]`` tables
        with ``gpu`` and ``precision`` (catalog names or ``"*"``) and any of ``eta_compute``,
        ``eta_bw``, ``eta_nvlink`` (fractions in (0, 1]), ``alpha_s``, ``overhead_s`` (seconds,
        >= 0); omitted constants keep their defaults. ``fitted`` and ``interval95`` are
        informative.
    catalog : Catalog, optional
        GPU and precision names are checked against it (default: the built-in catalog).

    Returns
    -------
    Calibration

    Raises
    ------
    FastsimInputError
        Unreadable file or invalid TOML; an unknown key; a missing ``gpu`` or ``precision``; an
        unknown GPU or precision; a constant outside its range; two tables for one pair. The
        error names the file, the table (1-based) and the field.
    """
    cat = catalog or default_catalog()
    where = str(path)
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except OSError as exc:
        raise FastsimInputError("--calibration", where, f"a readable calibration file ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise FastsimInputError("--calibration", where, f"a TOML calibration file ({exc})") from None
    bad = set(doc) - {"format_version", "source", "constants"}
    if bad:
        raise FastsimInputError(f"{where}: key", sorted(bad)[0], "format_version, source, [[constants]]")
    if doc.get("format_version", FORMAT_VERSION) != FORMAT_VERSION:
        raise FastsimInputError(f"{where}: format_version", doc.get("format_version"), str(FORMAT_VERSION))
    tables = doc.get("constants", [])
    if not isinstance(tables, list):
        raise FastsimInputError(f"{where}: constants", tables, "[[constants]] tables")
    entries, seen = [], set()
    allowed = {"gpu", "precision", "tp", "fitted", "interval95", *CONSTANTS}
    for i, t in enumerate(tables, 1):
        at = f"{where}: [[constants]] {i}"
        bad = set(t) - allowed
        if bad:
            raise FastsimInputError(f"{at}: key", sorted(bad)[0], ", ".join(sorted(allowed)))
        names = []
        for key, look in (("gpu", cat.gpu), ("precision", cat.precision)):
            v = t.get(key)
            if not isinstance(v, str):
                raise FastsimInputError(f"{at}: {key}", v, "a catalog name or \"*\"")
            if v != "*":
                try:
                    v = look(v).name
                except FastsimInputError as exc:
                    raise FastsimInputError(f"{at}: {key}", v, exc.allowed) from None
            names.append(v.upper())
        tp = t.get("tp", 0)
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 0:
            raise FastsimInputError(f"{at}: tp", tp, "an integer >= 1 (or no tp: any group)")
        if (*names, tp) in seen:
            raise FastsimInputError(f"{at}: gpu, precision, tp", "/".join(names) + (f"/TP{tp}" if tp else ""),
                                    "one table per GPU, precision and tp")
        seen.add((*names, tp))
        kw = {}
        for name in CONSTANTS:
            if name in t:
                v = t[name]
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise FastsimInputError(f"{at}: {name}", v, "a number")
                kw[name] = float(v)
        try:
            const = StepConstants(**kw)
        except FastsimInputError as exc:
            raise FastsimInputError(f"{at}: {exc.field}", exc.value, exc.allowed) from None
        fitted = t.get("fitted", [])
        if not isinstance(fitted, list) or any(f not in CONSTANTS for f in fitted):
            raise FastsimInputError(f"{at}: fitted", fitted, "a list of names among " + ", ".join(CONSTANTS))
        iv = t.get("interval95", {})
        ok = isinstance(iv, dict) and all(k in CONSTANTS and isinstance(v, list) and len(v) == 2
                                          and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
                                          for k, v in iv.items())
        if not ok:
            raise FastsimInputError(f"{at}: interval95", iv, "a table of name = [low, high]")
        entries.append(CalibrationEntry(names[0], names[1], const, tuple(fitted),
                                        tuple((k, float(v[0]), float(v[1])) for k, v in iv.items()), tp))
    src = doc.get("source", "")
    return Calibration(tuple(entries), str(src))


# ---------------------------------------------------------------------------------------------
# Readers
# ---------------------------------------------------------------------------------------------

def read_step_measurements(path, catalog: Catalog | None = None) -> pd.DataFrame:
    """Read and check a CSV of measured steps.

    Parameters
    ----------
    path : str or path-like
        CSV with a header row holding at least :data:`STEP_COLUMNS` (any order; other columns
        are ignored): ``gpu`` and ``precision`` (catalog names), ``tp`` (GPUs of the instance,
        an integer >= 1 that divides the model's heads), ``model`` (catalog name or
        ``config.json`` path; a relative path is read from the CSV file's directory),
        ``decode_tokens`` and ``prefill_tokens`` (integers >= 0, not both
        0: the new tokens of the step), ``kv_tokens`` (cached tokens the step reads, >= 0) and
        ``step_s`` (measured seconds, > 0).
    catalog : Catalog, optional
        Resolves the names (default: the built-in catalog).

    Returns
    -------
    pandas.DataFrame
        One row per measurement: the columns above (``gpu``, ``precision``, ``model`` as catalog
        names, ``model`` as an absolute path for a ``config.json``; tokens as int64; ``step_s`` float64) plus ``line`` (the file's line number).

    Raises
    ------
    FastsimInputError
        A one-line error naming the file, the line and the field: unreadable file, missing
        columns (line 1), no rows, a value that is not a number, tokens negative or not integers,
        no new tokens, a time that is zero, negative or not finite, an unknown GPU, precision or
        model, a TP the model cannot use, a precision the GPU has no peak for.
    """
    cat = catalog or default_catalog()
    where = str(path)
    try:
        fh = open(path, newline="", encoding="utf-8")
    except OSError as exc:
        raise FastsimInputError("--steps", where, f"a readable CSV file ({exc.strerror})") from None
    with fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise FastsimInputError(f"{where} line 1", None, "a header row: " + ", ".join(STEP_COLUMNS))
        header = [h.strip().lower() for h in header]
        missing = [c for c in STEP_COLUMNS if c not in header]
        if missing:
            raise FastsimInputError(f"{where} line 1 (header): column {missing[0]}", "missing",
                                    "columns " + ", ".join(STEP_COLUMNS))
        idx = {c: header.index(c) for c in STEP_COLUMNS}
        rows = []
        for line, rec in enumerate(reader, 2):
            if not rec or all(not x.strip() for x in rec):
                continue
            rows.append(_step_row(where, line, rec, idx, cat))
    if not rows:
        raise FastsimInputError(f"{where}", "no rows", "at least one measured step after the header")
    df = pd.DataFrame(rows)
    for c in ("tp", "decode_tokens", "prefill_tokens", "kv_tokens", "line"):
        df[c] = df[c].astype(np.int64)
    df["step_s"] = df["step_s"].astype(np.float64)
    return df


def _step_row(where, line, rec, idx, cat) -> dict:
    def raw(c):
        i = idx[c]
        if i >= len(rec) or not rec[i].strip():
            raise FastsimInputError(f"{where} line {line}: {c}", None, "a value (the cell is empty)")
        return rec[i].strip()

    def err(c, v, allowed):
        return FastsimInputError(f"{where} line {line}: {c}", v, allowed)
    out = {"line": line}
    for c in ("tp", "decode_tokens", "prefill_tokens", "kv_tokens"):
        v = raw(c)
        try:
            x = float(v)
        except ValueError:
            raise err(c, v, "an integer") from None
        lo = 1 if c == "tp" else 0
        if not math.isfinite(x) or x != int(x) or x < lo:
            raise err(c, v, f"an integer >= {lo}")
        out[c] = int(x)
    if out["decode_tokens"] + out["prefill_tokens"] < 1:
        raise err("decode_tokens", out["decode_tokens"], "decode_tokens + prefill_tokens >= 1 (a step runs tokens)")
    v = raw("step_s")
    try:
        t = float(v)
    except ValueError:
        raise err("step_s", v, "a time in seconds > 0") from None
    if not (t > 0) or not math.isfinite(t):
        raise err("step_s", v, "a time in seconds > 0")
    out["step_s"] = t
    models = {}
    for c, look in (("gpu", cat.gpu), ("precision", cat.precision), ("model", cat.model)):
        v = raw(c)
        if c == "model" and _is_config_path(v):
            # a config.json path: relative to the CSV's directory; the column keeps the path (the
            # model loaded from it is named after its folder, which is no catalog name)
            v = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(where)), os.path.expanduser(v)))
        try:
            models[c] = look(v)
        except FastsimInputError as exc:
            raise err(c, v, exc.allowed) from None
        out[c] = v if c == "model" and _is_config_path(v) else models[c].name
    try:
        step_params(models["model"], models["gpu"], models["precision"], out["tp"])
    except FastsimInputError as exc:
        raise err(exc.field if exc.field in ("tp", "precision") else "tp", exc.value, exc.allowed) from None
    return out


def _is_config_path(v: str) -> bool:
    """True when a ``model`` cell is a ``config.json`` path, as :meth:`Catalog.model` reads it."""
    return os.path.sep in v or (os.path.altsep is not None and os.path.altsep in v) or v.endswith(".json")


def _profile_files(spec) -> list:
    """Profile CSV paths of one ``--profiles`` value: a shipped set's name, a file or a directory."""
    s = os.fspath(spec)
    if s in BUILTIN_PROFILES:
        d = PROFILES_DIR
    elif os.path.isdir(s):
        d = Path(s)
    elif os.path.isfile(s):
        return [Path(s)]
    else:
        raise FastsimInputError("--profiles", s, "a shipped profile set (" + ", ".join(BUILTIN_PROFILES)
                                + "), a Vidur profile CSV or a directory of them")
    files = sorted(p for p in d.iterdir() if p.suffix == ".csv" and (p.name.startswith("mlp")
                                                                     or p.name.startswith("all_reduce")))
    if not files:
        raise FastsimInputError("--profiles", s, "a directory holding mlp*.csv or all_reduce*.csv profiles")
    return files


def _read_csv(path, field):
    try:
        return pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise FastsimInputError(field, str(path), f"a readable CSV file ({exc})") from None


def read_op_profile(path, model: Model | None = None) -> pd.DataFrame:
    """Read a Vidur per-operation profile (``mlp.csv``) into one row per (tokens, TP, operation).

    Parameters
    ----------
    path : str or path-like
        Vidur's ``data/profiling/compute/<gpu>/<model>/mlp.csv`` format: columns
        ``time_stats.<op>.{min,max,mean,median,std}`` in milliseconds for the operations of
        :data:`MATMUL_OPS` and :data:`ELEMENTWISE_OPS`, the model shape (``n_head``,
        ``n_kv_head``, ``n_embd``, ``n_expanded_embd``, ``vocab_size``, ``use_gated_mlp``),
        ``num_tokens`` and ``num_tensor_parallel_workers``.
    model : Model, optional
        The profiled model. Default: :data:`PROFILE_MODELS` by the file's name
        (``mlp_<model>.csv``), else a one-layer model built from the shape columns
        (``head_dim = n_embd / n_head``).

    Returns
    -------
    pandas.DataFrame
        Columns ``model`` (str), ``operation`` (str), ``num_tokens`` (int64), ``tp`` (int64),
        ``time_s`` (float64, the median of the repetitions, seconds), ``time_min_s`` (float64),
        ``weight_params`` (float64, the matmul's weight parameters on one GPU; 0 for elementwise
        operations, :func:`operation_weight_params`); and ``attrs["model"]`` the :class:`Model`.
        One row per input row and operation present: 1,044 x 10 rows for each shipped file.

    Raises
    ------
    FastsimInputError
        Unreadable file; missing shape, token or TP columns; no known operation; a shape that
        disagrees with ``model``; a time that is not > 0.

    Sources
    -------
    Vidur (Agrawal et al., MLSys 2024), ``vidur/profiling/mlp``; the shipped files' provenance is in
    ``fastsim/data/profiles/ATTRIBUTION.md``.
    """
    where = str(path)
    raw = _read_csv(path, "--profiles")
    need = ["n_head", "n_kv_head", "n_embd", "n_expanded_embd", "num_tokens", "num_tensor_parallel_workers"]
    miss = [c for c in need if c not in raw.columns]
    if miss:
        raise FastsimInputError(f"{where} line 1 (header): column {miss[0]}", "missing",
                                "a Vidur mlp profile (columns " + ", ".join(need) + ", time_stats.<op>.median)")
    ops = [o for o in MATMUL_OPS + ELEMENTWISE_OPS if f"time_stats.{o}.median" in raw.columns]
    if not ops:
        raise FastsimInputError(f"{where} line 1 (header)", "no time_stats.<op>.median column",
                                "operations among " + ", ".join(MATMUL_OPS + ELEMENTWISE_OPS))
    first = raw.iloc[0]
    name = Path(where).stem
    name = name[4:] if name.startswith("mlp_") else name
    if model is None:
        model = PROFILE_MODELS.get(name) or Model(
            name=name, layers=1, hidden=int(first.n_embd), heads=int(first.n_head), kv_heads=int(first.n_kv_head),
            head_dim=int(first.n_embd) // int(first.n_head), ffn=int(first.n_expanded_embd),
            vocab=int(first.get("vocab_size", 32000)), source=where)
    for col, want in (("n_head", model.heads), ("n_kv_head", model.kv_heads), ("n_embd", model.hidden),
                      ("n_expanded_embd", model.ffn)):
        bad = raw[col] != want
        if bad.any():
            i = int(np.argmax(bad.to_numpy()))
            raise FastsimInputError(f"{where} line {i + 2}: {col}", raw[col].iloc[i], f"{want} ({model.name})")
    gated = bool(raw["use_gated_mlp"].iloc[0]) if "use_gated_mlp" in raw.columns else True
    frames = []
    for op in ops:
        t = raw[f"time_stats.{op}.median"].to_numpy(np.float64) * 1e-3
        bad = ~(t > 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise FastsimInputError(f"{where} line {i + 2}: time_stats.{op}.median", t[i] * 1e3, "a time > 0 ms")
        tmin = (raw[f"time_stats.{op}.min"].to_numpy(np.float64) * 1e-3 if f"time_stats.{op}.min" in raw.columns
                else t)
        tp = raw["num_tensor_parallel_workers"].to_numpy(np.int64)
        frames.append(pd.DataFrame({
            "model": model.name, "operation": op, "num_tokens": raw["num_tokens"].to_numpy(np.int64), "tp": tp,
            "time_s": t, "time_min_s": tmin,
            "weight_params": [operation_weight_params(model, op, int(k), gated) for k in tp]}))
    df = pd.concat(frames, ignore_index=True)
    df.attrs["model"] = model
    return df


def operation_weight_params(model: Model, operation: str, tp: int, gated: bool = True) -> float:
    """Weight parameters one GPU holds for one matmul of one layer under tensor parallelism.

    Parameters
    ----------
    model : Model
        A dense GQA model.
    operation : str
        ``attn_pre_proj`` (Q, K, V: ``hidden x (heads/tp + 2 x kv heads per GPU) x head_dim``),
        ``attn_post_proj`` (``heads/tp x head_dim x hidden``), ``mlp_up_proj`` (gate and up:
        ``hidden x 2 ffn / tp``; ``1 x`` when not gated), ``mlp_down_proj``
        (``ffn / tp x hidden``); an elementwise operation has 0.
    tp : int
        Tensor-parallel degree (KV heads are replicated when TP exceeds them, SPEC §2).
    gated : bool
        Whether the MLP is gated (Llama: yes).

    Returns
    -------
    float
        Parameters (multiply by the bytes per weight for the bytes read).
    """
    hd = model.head_dim
    if operation == "attn_pre_proj":
        return float(model.hidden * (model.heads // tp + 2 * model.kv_heads_per_gpu(tp)) * hd)
    if operation == "attn_post_proj":
        return float(model.heads // tp * hd * model.hidden)
    if operation == "mlp_up_proj":
        return float(model.hidden * (2 if gated else 1) * model.ffn / tp)
    if operation == "mlp_down_proj":
        return float(model.ffn / tp * model.hidden)
    return 0.0


def read_allreduce_profile(path) -> pd.DataFrame:
    """Read a Vidur all-reduce profile (``all_reduce.csv``).

    Parameters
    ----------
    path : str or path-like
        Columns ``time_stats.all_reduce.{min,max,mean,median,std}`` (milliseconds),
        ``num_workers`` and ``size``: the buffer in **bytes** (Vidur's profiler records
        ``size * 2`` for ``size`` FP16 elements, ``vidur/profiling/collectives/
        collectives_wrapper.py``, and its predictor divides it by ``2 x hidden`` to get tokens).

    Returns
    -------
    pandas.DataFrame
        Columns ``gpus`` (int64), ``bytes`` (float64), ``time_s`` (float64, median, seconds),
        ``time_min_s`` (float64); one row per input row (2,982 for the shipped H100 file: 994
        sizes for each of 2, 4, 8 GPUs).

    Raises
    ------
    FastsimInputError
        Unreadable file, missing columns, a worker count below 2, a size or time not > 0.
    """
    where = str(path)
    raw = _read_csv(path, "--profiles")
    need = ["num_workers", "size", "time_stats.all_reduce.median"]
    miss = [c for c in need if c not in raw.columns]
    if miss:
        raise FastsimInputError(f"{where} line 1 (header): column {miss[0]}", "missing",
                                "a Vidur all-reduce profile (columns " + ", ".join(need) + ")")
    df = pd.DataFrame({"gpus": raw["num_workers"].to_numpy(np.int64), "bytes": raw["size"].to_numpy(np.float64),
                       "time_s": raw["time_stats.all_reduce.median"].to_numpy(np.float64) * 1e-3})
    df["time_min_s"] = (raw["time_stats.all_reduce.min"].to_numpy(np.float64) * 1e-3
                        if "time_stats.all_reduce.min" in raw.columns else df["time_s"])
    for col, ok, allowed in (("num_workers", df.gpus >= 2, "an integer >= 2"), ("size", df.bytes > 0, "bytes > 0"),
                             ("time_stats.all_reduce.median", df.time_s > 0, "a time > 0 ms")):
        if not ok.all():
            i = int(np.argmax(~ok.to_numpy()))
            raise FastsimInputError(f"{where} line {i + 2}: {col}", raw[col].iloc[i], allowed)
    return df


def read_profiles(specs) -> tuple:
    """Read every profile named by ``specs``.

    Parameters
    ----------
    specs : str, path-like, or sequence of them
        Shipped set names (:data:`BUILTIN_PROFILES`), profile CSV files, or directories (their
        ``mlp*.csv`` and ``all_reduce*.csv``). A file whose header has ``num_workers`` is an
        all-reduce profile, else an operation profile.

    Returns
    -------
    (ops, allreduce) : tuple of pandas.DataFrame or None
        The operation profiles concatenated (:func:`read_op_profile`; ``attrs["models"]`` maps
        model names to :class:`Model`), and the all-reduce profiles (:func:`read_allreduce_profile`);
        None for a kind not given.

    Raises
    ------
    FastsimInputError
        As the readers; an unknown name or an empty directory.
    """
    if isinstance(specs, (str, os.PathLike)):
        specs = [specs]
    ops, ars, models = [], [], {}
    for s in specs:
        for f in _profile_files(s):
            head = pd.read_csv(f, nrows=0).columns if f.is_file() else []
            if "num_workers" in head:
                ars.append(read_allreduce_profile(f))
            else:
                d = read_op_profile(f)
                models[d.attrs["model"].name] = d.attrs["model"]
                ops.append(d)
    op = pd.concat(ops, ignore_index=True) if ops else None
    if op is not None:
        op.attrs["models"] = models
    return op, (pd.concat(ars, ignore_index=True) if ars else None)


# ---------------------------------------------------------------------------------------------
# Fits
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Fit:
    """One least-squares fit and its residuals.

    Attributes
    ----------
    label : str
        What was fitted (e.g. ``"matmul, all models, TP 1-8"``).
    kind : str
        ``"matmul"``, ``"all-reduce"`` or ``"steps"``.
    gpu, precision : str
        Catalog names the fit is for.
    values : dict of str -> float
        Fitted (or kept) value of each parameter, in its unit (:data:`UNITS`).
    interval95 : dict of str -> (float, float)
        95% interval of each identified parameter (Jacobian covariance, see the module docstring).
    fitted : tuple of str
        Parameters the data identified (the others kept their starting value, the default).
    points : pandas.DataFrame
        One row per measurement: ``operation`` (str), ``size`` (float: tokens, or bytes for an
        all-reduce), ``size_band`` (str), ``measured_s``, ``modelled_s`` (float64, seconds) and
        ``rel_error`` (``modelled / measured - 1``).
    """

    label: str
    kind: str
    gpu: str
    precision: str
    values: dict
    interval95: dict
    fitted: tuple
    points: pd.DataFrame = field(repr=False)

    @property
    def median_abs_rel_error(self) -> float:
        """Median of ``|modelled / measured - 1|`` over the points (float)."""
        return float(np.median(np.abs(self.points.rel_error)))

    def residuals(self) -> pd.DataFrame:
        """Median and worst relative error per operation and per size band.

        Returns
        -------
        pandas.DataFrame
            Columns ``fit``, ``operation``, ``size_band``, ``points`` (int), ``median_rel_error``
            (median of ``|modelled / measured - 1|``), ``worst_rel_error`` (the signed error of
            largest magnitude: negative = the model is fast), ``worst_size`` (tokens or bytes of
            that point); one row per operation with ``size_band`` = ``"all"`` and one per
            (operation, size band), then one row ``operation`` = ``"all"``.
        """
        rows = []
        p = self.points

        def row(op, band, g):
            a = g.rel_error.to_numpy()
            k = int(np.argmax(np.abs(a)))
            rows.append({"fit": self.label, "operation": op, "size_band": band, "points": int(len(a)),
                         "median_rel_error": float(np.median(np.abs(a))), "worst_rel_error": float(a[k]),
                         "worst_size": float(g["size"].to_numpy()[k])})
        for op, g in p.groupby("operation", sort=False):
            row(op, "all", g)
            for band, gb in g.groupby("size_band", sort=False):
                row(op, band, gb)
        row("all", "all", p)
        return pd.DataFrame(rows)


def _least_squares(model_fn, measured, names, start, fixed=()):
    """Fit log-parameters; returns (values, intervals, identified names, modelled)."""
    from scipy.optimize import least_squares
    from scipy.stats import t as student_t
    free = [n for n in names if n not in fixed]
    logm = np.log(measured)
    lo = np.log([_BOUNDS[n][0] for n in free])
    hi = np.log([_BOUNDS[n][1] for n in free])
    x0 = np.clip(np.log([start[n] for n in free]), lo + 1e-9, hi - 1e-9)

    def vals(x):
        v = dict(start)
        v.update({n: float(np.exp(xi)) for n, xi in zip(free, x)})
        return v

    def resid(x):
        return np.log(model_fn(vals(x))) - logm
    with np.errstate(over="ignore", invalid="ignore"):
        res = least_squares(resid, x0, bounds=(lo, hi), method="trf", x_scale=1.0, xtol=1e-12, ftol=1e-12,
                            gtol=1e-12)
    x = res.x
    J = res.jac
    m, k = len(measured), len(free)
    col = np.sqrt((J * J).sum(axis=0))
    identified = col > 1e-6 * max(1.0, float(col.max()) if k else 1.0)
    intervals = {}
    if m > k:
        s2 = float(res.fun @ res.fun) / (m - k)
        Ji = J[:, identified]
        cov = s2 * np.linalg.pinv(Ji.T @ Ji)
        q = float(student_t.ppf(0.975, m - k))
        sd = np.sqrt(np.maximum(np.diag(cov), 0.0))
        for j, n in enumerate(np.array(free)[identified]):
            xi = x[free.index(n)]
            # an interval never leaves the parameter's physical range (an efficiency at its bound of 1
            # has a one-sided interval)
            b_lo, b_hi = _BOUNDS[n]
            intervals[n] = (float(max(np.exp(xi - q * sd[j]), b_lo)), float(min(np.exp(xi + q * sd[j]), b_hi)))
    v = vals(x)
    for n in np.array(free)[~identified]:
        v[n] = start[n]
    return v, intervals, tuple(n for n, ok in zip(free, identified) if ok), model_fn(v)


def _bands(size, edges, labels):
    return np.array(labels, dtype=object)[np.searchsorted(np.asarray(edges, dtype=np.float64), size, side="right")]


_TOKEN_EDGES = (1, 16, 128, 512, 2048)
_TOKEN_LABELS = ("1", "2-16", "17-128", "129-512", "513-2048", "2049+")
_BYTE_EDGES = (65536, 1 << 20, 16 << 20)
_BYTE_LABELS = ("< 64 KiB", "64 KiB - 1 MiB", "1 - 16 MiB", ">= 16 MiB")


def _token_bands(n):
    return _bands(np.asarray(n, dtype=np.float64), _TOKEN_EDGES, _TOKEN_LABELS)


def _points(operation, size, bands, measured, modelled):
    return pd.DataFrame({"operation": operation, "size": np.asarray(size, dtype=np.float64), "size_band": bands,
                         "measured_s": measured, "modelled_s": modelled, "rel_error": modelled / measured - 1.0})


def fit_operations(profile: pd.DataFrame, gpu: GPU, precision: Precision, *, label: str | None = None,
                   operations=MATMUL_OPS, weight_bytes: float = 2.0) -> Fit:
    """Fit compute and bandwidth efficiency (and a fixed time per kernel) to matmul times.

    Each matmul with ``W`` weight parameters per GPU on ``n`` tokens is modelled as
    ``max(W x weight_bytes / (eta_bw x HBM B/s), 2 W n / (eta_compute x peak FLOP/s)) + kernel_s``:
    the step model's roofline (SPEC §3; Williams, Waterman, Patterson 2009) applied to one
    kernel, which for matmuls sums to the step's own max because every matmul has the same FLOPs
    per weight byte.

    Parameters
    ----------
    profile : pandas.DataFrame
        Rows of :func:`read_op_profile` (any models and TPs).
    gpu : GPU
        Gives HBM bytes/s and the peak at ``precision``.
    precision : Precision
        Gives the peak FLOP/s (``gpu.peak_flops_per_s[precision.flops_key]``).
    label : str, optional
        Name of the fit (default from the models and TPs).
    operations : sequence of str
        The operations to fit (default :data:`MATMUL_OPS`).
    weight_bytes : float
        Bytes per weight as profiled (2: the shipped profiles are FP16).

    Returns
    -------
    Fit
        ``values``/``interval95`` for ``eta_compute``, ``eta_bw``, ``kernel_s``.

    Raises
    ------
    FastsimInputError
        No rows of the operations, or fewer rows than parameters.
    """
    d = profile[profile.operation.isin(operations)]
    if len(d) < 4:
        raise FastsimInputError("profiles", f"{len(d)} matmul rows", "at least 4 measured matmul times")
    W = d.weight_params.to_numpy(np.float64)
    n = d.num_tokens.to_numpy(np.float64)
    bw, peak = gpu.hbm_bw_bytes_per_s, gpu.peak_flops_per_s[precision.flops_key]
    names = ("eta_compute", "eta_bw", "kernel_s")
    start = {"eta_compute": StepConstants().eta_compute, "eta_bw": StepConstants().eta_bw, "kernel_s": _START["kernel_s"]}

    def model(v):
        return np.maximum(W * weight_bytes / (v["eta_bw"] * bw), 2.0 * W * n / (v["eta_compute"] * peak)) + v["kernel_s"]
    meas = d.time_s.to_numpy(np.float64)
    v, iv, ok, mod = _least_squares(model, meas, names, start)
    if label is None:
        label = "matmul, " + ", ".join(sorted(d.model.unique())) + ", TP " + ",".join(
            str(t) for t in sorted(d.tp.unique()))
    pts = _points(d.operation.to_numpy(), n, _token_bands(n), meas, mod)
    pts["model"] = d.model.to_numpy()
    pts["tp"] = d.tp.to_numpy()
    return Fit(label, "matmul", gpu.name, precision.name, v, iv, ok, pts)


def fit_allreduce(profile: pd.DataFrame, gpu: GPU, precision: Precision | None = None, *,
                  label: str | None = None) -> Fit:
    """Fit the ring all-reduce's per-hop latency and link efficiency to measured all-reduce times.

    ``t = 2 (p-1) alpha_s + 2 (p-1)/p x bytes / (eta_nvlink x link B/s)`` (SPEC §3; Thakur,
    Rabenseifner, Gropp 2005), ``link B/s`` the GPU's NVLink bandwidth (a group within one node).

    Parameters
    ----------
    profile : pandas.DataFrame
        Rows of :func:`read_allreduce_profile` (one or several worker counts).
    gpu : GPU
        Gives the NVLink bytes/s.
    precision : Precision, optional
        Only labels the fit (the all-reduce moves 2-byte activations at every precision, SPEC §3).
    label : str, optional
        Name of the fit.

    Returns
    -------
    Fit
        ``alpha_s`` and ``eta_nvlink``; points with ``operation`` = ``"all_reduce p=N"`` and
        ``size`` in bytes.

    Raises
    ------
    FastsimInputError
        Fewer than 3 rows.
    """
    from .stepmodel import _link_bw
    d = profile
    if len(d) < 3:
        raise FastsimInputError("profiles", f"{len(d)} all-reduce rows", "at least 3 measured all-reduce times")
    p = d.gpus.to_numpy(np.float64)
    B = d.bytes.to_numpy(np.float64)
    link = np.array([_link_bw(gpu, int(k)) for k in d.gpus], dtype=np.float64)
    c = StepConstants()

    def model(v):
        return 2.0 * (p - 1.0) * v["alpha_s"] + 2.0 * (p - 1.0) / p * B / (v["eta_nvlink"] * link)
    meas = d.time_s.to_numpy(np.float64)
    v, iv, ok, mod = _least_squares(model, meas, ("alpha_s", "eta_nvlink"),
                                    {"alpha_s": c.alpha_s, "eta_nvlink": c.eta_nvlink})
    if label is None:
        label = "all-reduce, " + ", ".join(str(k) for k in sorted(d.gpus.unique())) + " GPUs"
    ops = np.array([f"all_reduce p={int(k)}" for k in d.gpus], dtype=object)
    return Fit(label, "all-reduce", gpu.name, precision.name if precision is not None else "*", v, iv, ok,
               _points(ops, B, _bands(B, _BYTE_EDGES, _BYTE_LABELS), meas, mod))


def _step_inputs(d: pd.DataFrame, cat: Catalog):
    P = np.empty((len(d), N_PARAMS))
    attn = np.empty(len(d))
    models = {}
    for i, r in enumerate(d.itertuples(index=False)):
        m = models.get(r.model) or models.setdefault(r.model, cat.model(r.model))
        P[i] = step_params(m, cat.gpu(r.gpu), cat.precision(r.precision), int(r.tp))
        attn[i] = (decode_attn_flops(m.layers, m.attn_dim_decode, float(r.kv_tokens))
                   + prefill_attn_flops(m.layers, m.attn_dim_prefill, float(r.prefill_tokens)))
    n = (d.decode_tokens + d.prefill_tokens).to_numpy(np.float64)
    return P, n, d.kv_tokens.to_numpy(np.float64), attn


def fit_steps(measurements: pd.DataFrame, catalog: Catalog | None = None) -> list:
    """Fit the step model's constants to measured step times, per (GPU, precision).

    Each row's time is :func:`fastsim.stepmodel.step_time` of its configuration (see the module
    docstring for the tokens, KV and attention FLOPs of a row) with the constants being fitted:
    ``eta_compute``, ``eta_bw``, ``overhead_s``, and ``alpha_s``, ``eta_nvlink`` when some rows of
    the pair run at TP > 1.

    Parameters
    ----------
    measurements : pandas.DataFrame
        From :func:`read_step_measurements`.
    catalog : Catalog, optional
        Resolves the names (default: the built-in catalog).

    Returns
    -------
    list of Fit
        One per (GPU, precision), in order of first appearance; points with ``operation`` =
        ``"decode"``, ``"prefill"`` or ``"mixed"`` and ``size`` = new tokens of the step.

    Raises
    ------
    FastsimInputError
        A pair with fewer rows than parameters to fit.
    """
    cat = catalog or default_catalog()
    out = []
    c = StepConstants()
    for (g, pr), d in measurements.groupby(["gpu", "precision"], sort=False):
        P, n, kv, attn = _step_inputs(d, cat)
        names = ["eta_compute", "eta_bw", "overhead_s"]
        if (d.tp > 1).any():
            names += ["alpha_s", "eta_nvlink"]
        if len(d) <= len(names):
            raise FastsimInputError(f"steps of {g} {pr}", f"{len(d)} rows",
                                    f"more rows than the {len(names)} constants fitted")
        start = {k: getattr(c, k) for k in CONSTANTS}
        cols = {"eta_compute": P_ETA_C, "eta_bw": P_ETA_BW, "overhead_s": P_OVERHEAD, "alpha_s": P_ALPHA,
                "eta_nvlink": P_ETA_NV}

        def model(v, P=P, n=n, kv=kv, attn=attn):
            Q = P.copy()
            for k, j in cols.items():
                Q[:, j] = v[k]
            return step_time(Q, n, kv, attn)
        meas = d.step_s.to_numpy(np.float64)
        v, iv, ok, mod = _least_squares(model, meas, tuple(names), start,
                                        fixed=tuple(k for k in CONSTANTS if k not in names))
        kind = np.where(d.prefill_tokens.to_numpy() == 0, "decode",
                        np.where(d.decode_tokens.to_numpy() == 0, "prefill", "mixed")).astype(object)
        pts = _points(kind, n, _token_bands(n), meas, mod)
        pts["tp"] = d.tp.to_numpy()
        pts["line"] = d.line.to_numpy()
        out.append(Fit(f"steps, {g} {pr}", "steps", g, pr, {k: v[k] for k in names}, iv, ok, pts))
    return out


# ---------------------------------------------------------------------------------------------
# The whole calibration
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CalibrationReport:
    """What :func:`calibrate` found.

    Attributes
    ----------
    calibration : Calibration
        The constants to use (write with :meth:`Calibration.write`).
    fits : tuple of Fit
        Every fit, the ones the calibration uses first.
    notes : tuple of str
        Sentences on what was fitted from what, what kept its default, and why.
    """

    calibration: Calibration
    fits: tuple
    notes: tuple

    def parameter_records(self) -> list:
        """One record per fitted parameter of every fit.

        Returns
        -------
        list of dict
            ``fit``, ``gpu``, ``precision``, ``parameter``, ``value``, ``ci95_low``, ``ci95_high``
            (None when not identified), ``default`` (the step model's default, None for
            ``kernel_s``), ``unit``, ``identified`` (bool), ``points`` (int),
            ``median_rel_error`` (of the fit), ``used`` (bool: the calibration file carries it).
        """
        d = StepConstants()
        recs = []
        for f in self.fits:
            for name, val in f.values.items():
                lo, hi = f.interval95.get(name, (None, None))
                used = any(e.gpu == f.gpu.upper() and e.precision in (f.precision.upper(), "*")
                           and name in e.fitted and getattr(e.constants, name) == val
                           for e in self.calibration.entries) if name in CONSTANTS else False
                recs.append({"fit": f.label, "gpu": f.gpu, "precision": f.precision, "parameter": name,
                             "value": val, "ci95_low": lo, "ci95_high": hi,
                             "default": getattr(d, name) if name in CONSTANTS else None, "unit": UNITS[name],
                             "identified": name in f.fitted, "points": int(len(f.points)),
                             "median_rel_error": f.median_abs_rel_error, "used": bool(used)})
        return recs

    def residual_records(self) -> list:
        """Residual summary of every fit (:meth:`Fit.residuals` rows as dicts)."""
        return [r for f in self.fits for r in f.residuals().to_dict(orient="records")]


def calibrate(steps=None, profiles=(), *, gpu: str = "H100", precision: str = "BF16", catalog: Catalog | None = None,
              detail: bool = False, apply_to: str | None = None) -> CalibrationReport:
    """Fit the step model's constants to measured steps and/or per-operation profiles.

    Parameters
    ----------
    steps : str, path-like or pandas.DataFrame, optional
        Measured steps: a CSV path (:func:`read_step_measurements`) or its DataFrame. Fits
        every constant the rows identify, per (GPU, precision) of the rows.
    profiles : str, path-like or sequence of them
        Vidur profiles (:func:`read_profiles`; ``"vidur-h100"`` for the shipped ones): the
        matmul profiles give ``eta_compute`` and ``eta_bw``, the all-reduce profiles ``alpha_s``
        and ``eta_nvlink`` (one pooled fit each over every model, TP and worker count).
    gpu, precision : str
        The catalog GPU and precision the profiles were measured on (default H100 and BF16: the
        shipped profiles are H100 FP16 kernels, whose peak is BF16's). ``precision`` may be
        ``"*"``: the profile constants then apply to every precision of the GPU.
    catalog : Catalog, optional
        Resolves names (default: the built-in catalog).
    detail : bool
        Also fit each (model, TP) of the matmul profiles and each worker count of the
        all-reduce profiles on its own (reported, not written to the calibration).
    apply_to : str, optional
        Alias of ``precision`` for the profile entry (``"*"`` to cover FP8 as well).

    Returns
    -------
    CalibrationReport
        The calibration (one entry per pair; where both steps and profiles speak to a pair, the
        steps' identified constants win, since they measure the whole step), every fit, and notes.

    Raises
    ------
    FastsimInputError
        Neither input given; anything the readers or fits raise.
    """
    cat = catalog or default_catalog()
    if isinstance(profiles, (str, os.PathLike)):
        profiles = [profiles]
    profiles = list(profiles or ())
    if steps is None and not profiles:
        raise FastsimInputError("--steps / --profiles", None, "measured steps (CSV), profiles, or both")
    fits, notes, entries = [], [], {}
    d = StepConstants()
    if profiles:
        g = cat.gpu(gpu)
        if any(isinstance(p, str) and p.strip().lower() == "vidur-h100" for p in profiles) and g.name != "H100":
            raise FastsimInputError("--gpu", gpu, "H100 with --profiles vidur-h100 (those kernels were measured on "
                                    "H100 SXM; fitting them against another GPU's peaks gives that GPU wrong "
                                    "efficiencies)")
        label_pr = apply_to or precision
        pr = cat.precision("BF16" if label_pr == "*" else label_pr)
        ops, ar = read_profiles(profiles)
        vals, fitted, iv = {}, [], []
        if ops is not None:
            f = fit_operations(ops, g, pr, label="matmul, all profiled models and TPs")
            fits.append(f)
            for k in ("eta_compute", "eta_bw"):
                if k in f.fitted:
                    vals[k] = f.values[k]
                    fitted.append(k)
                    iv.append((k, *f.interval95[k]))
            models = ops.attrs.get("models", {})
            per_kernel = f.values["kernel_s"]
            notes.append(f"matmul profiles: {len(f.points):,} kernel times ({', '.join(sorted(models))}; TP "
                         + ",".join(str(t) for t in sorted(ops.tp.unique()))
                         + f"): fitted a fixed {per_kernel * 1e6:.2f} us per matmul kernel beside the roofline; the "
                         "step model has no per-kernel term, its per-step overhead_s holds it (4 matmuls x layers "
                         f"x {per_kernel * 1e6:.2f} us = {4 * 80 * per_kernel * 1e3:.2f} ms for an 80-layer model)")
            el = ops[ops.operation.isin(ELEMENTWISE_OPS)]
            if len(el):
                mm = ops[ops.operation.isin(MATMUL_OPS)].groupby(["model", "tp", "num_tokens"]).time_s.sum()
                ew = el.groupby(["model", "tp", "num_tokens"]).time_s.sum()
                share = (ew / (ew + mm)).median()
                notes.append(f"elementwise operations (norms, RoPE, activation, residual add, embedding) are not in "
                             f"the step model: a median {share:.0%} of a layer's non-attention kernel time in these "
                             "profiles; they are not fitted")
            if detail:
                for (mname, tp), dd in ops.groupby(["model", "tp"]):
                    fits.append(fit_operations(dd, g, pr, label=f"matmul, {mname}, TP {tp}"))
        if ar is not None:
            f = fit_allreduce(ar, g, pr, label="all-reduce, " + ", ".join(str(k) for k in sorted(ar.gpus.unique()))
                              + " GPUs")
            fits.append(f)
            for k in ("alpha_s", "eta_nvlink"):
                if k in f.fitted:
                    vals[k] = f.values[k]
                    fitted.append(k)
                    iv.append((k, *f.interval95[k]))
            per_p = {}
            for p, dd in ar.groupby("gpus"):
                fp = fit_allreduce(dd, g, pr, label=f"all-reduce, {p} GPUs")
                fits.append(fp)
                per_p[int(p)] = fp
            notes.append("all-reduce: the ring model's latency 2 (p-1) alpha_s does not follow NCCL's (one alpha "
                         "for 2, 4 and 8 GPUs misses by a median " + f"{f.median_abs_rel_error:.0%}"
                         + "), so the calibration also holds alpha_s and eta_nvlink per group size (tp = "
                         + ", ".join(str(k) for k in per_p) + ", median "
                         + ", ".join(f"{x.median_abs_rel_error:.0%}" for x in per_p.values())
                         + "); other group sizes use the pooled fit")
        if "overhead_s" not in fitted:
            notes.append(f"overhead_s kept at its default {d.overhead_s * 1e3:g} ms per step: per-operation "
                         "profiles time kernels, not a step's fixed cost (measure steps for it)")
        if label_pr == "*":
            notes.append(f"the profile constants apply to every precision of {g.name} (precision \"*\"): FP8 "
                         "kernels are assumed to reach the same fractions of their own peak as the profiled FP16 ones")
        pkey = (g.name.upper(), "*" if label_pr == "*" else pr.name.upper())
        entries[pkey] = (vals, fitted, iv)
        if ar is not None:
            for p, fp in per_p.items():
                v2, f2, i2 = dict(vals), list(fitted), [x for x in iv if x[0] not in ("alpha_s", "eta_nvlink")]
                for k in ("alpha_s", "eta_nvlink"):
                    if k in fp.fitted:
                        v2[k] = fp.values[k]
                        i2.append((k, *fp.interval95[k]))
                        if k not in f2:
                            f2.append(k)
                entries[(*pkey, p)] = (v2, f2, i2)
    if steps is not None:
        sm = steps if isinstance(steps, pd.DataFrame) else read_step_measurements(steps, cat)
        for f in fit_steps(sm, cat):
            fits.insert(0, f)
            key = (f.gpu.upper(), f.precision.upper())
            vals, fitted, iv = entries.get(key, ({}, [], []))
            vals, fitted, iv = dict(vals), list(fitted), list(iv)
            for k in f.fitted:
                vals[k] = f.values[k]
                if k not in fitted:
                    fitted.append(k)
                iv = [x for x in iv if x[0] != k] + [(k, *f.interval95[k])]
            missing = [k for k in CONSTANTS if k not in fitted]
            if missing:
                notes.append(f"{f.gpu} {f.precision}: " + ", ".join(missing) + " not identified by the measured "
                             "steps (e.g. no TP > 1 rows for the all-reduce, or every step on one side of the "
                             "roofline): kept at " + ("the profile fit or " if key in entries else "") + "the default")
            entries[key] = (vals, fitted, iv)
    ents = tuple(CalibrationEntry(k[0], k[1], StepConstants(**v), tuple(fl), tuple(i), k[2] if len(k) > 2 else 0)
                 for k, (v, fl, i) in entries.items())
    srcs = []
    if steps is not None:
        srcs.append("measured steps" + ("" if isinstance(steps, pd.DataFrame) else f" {Path(steps).name}"))
    if profiles:
        srcs.append("profiles " + ", ".join(Path(os.fspath(p)).name for p in profiles))
    notes.append("95% intervals from the Jacobian's covariance at the least-squares optimum (log parameters, "
                 "Student-t); they assume the model's form is right, the residuals show where it is not")
    at_bound = sorted({f"{n} ({f.label})" for f in fits for n in ("eta_compute", "eta_bw", "eta_nvlink")
                       if n in f.fitted and f.values.get(n, 0.0) >= 1.0 - 1e-9})
    if at_bound:
        notes.append("at the bound of 1 (the datasheet peak): " + "; ".join(at_bound) + ". Their intervals are "
                     "one-sided. Measurements at or past the roofline can mean wrong units, another GPU or "
                     "precision than stated, or (for a pooled fit) too few points on that side of the roofline")
    return CalibrationReport(Calibration(ents, "; ".join(srcs)), tuple(fits), tuple(notes))


# ---------------------------------------------------------------------------------------------
# Serving benchmarks (vLLM `bench serve`), fitted through the simulator
# ---------------------------------------------------------------------------------------------

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
        The scheduler simulated (``vllm``, ``sglang`` or ``lecture``).
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
    policy : {"vllm", "sglang", "lecture"} or EnginePolicy
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
    from .sim import ColocatedPlan, simulate_batch
    from .sim.policy import EnginePolicy, engine_policy
    from .stepmodel import P_KV_BUDGET_TOKENS
    from .workload import seeds_for
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
    if isinstance(policy, str) and policy in ("vllm", "sglang"):
        pol = engine_policy(policy, g.hbm_bytes, kv_budget_tokens=kv, context_tokens=model.max_context_tokens)
    elif isinstance(policy, EnginePolicy) or policy == "lecture":
        pol = policy
    else:
        raise FastsimInputError("policy", policy, "vllm, sglang, lecture or an EnginePolicy")
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


# ---------------------------------------------------------------------------------------------
# Plot and command line
# ---------------------------------------------------------------------------------------------

def plot_calibration(report: CalibrationReport, path, *, title: str | None = None) -> None:
    """Measured vs modelled times, one panel per kind of fit (log-log, the identity and +-15%).

    Parameters
    ----------
    report : CalibrationReport
        Plots the first fit of each kind (the ones the calibration uses).
    path : str or path-like
        Image file (any format matplotlib writes).
    title : str, optional
        Figure title.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    firsts = {}
    for f in report.fits:
        firsts.setdefault(f.kind, f)
    fig, axes = plt.subplots(1, len(firsts), figsize=(5.2 * len(firsts), 4.8), squeeze=False)
    for ax, f in zip(axes[0], firsts.values()):
        p = f.points
        for op, g in p.groupby("operation", sort=True):
            ax.scatter(g.measured_s * 1e3, g.modelled_s * 1e3, s=5, alpha=0.5, label=op)
        lo = float(min(p.measured_s.min(), p.modelled_s.min())) * 1e3 * 0.8
        hi = float(max(p.measured_s.max(), p.modelled_s.max())) * 1e3 * 1.25
        xs = np.array([lo, hi])
        ax.plot(xs, xs, "k-", lw=1)
        ax.plot(xs, xs * 1.15, "k:", lw=0.8)
        ax.plot(xs, xs / 1.15, "k:", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured (ms)")
        ax.set_ylabel("modelled (ms)")
        ax.set_title(f"{f.label}\nmedian |error| {f.median_abs_rel_error:.1%}", fontsize=9)
        ax.legend(fontsize=7, markerscale=2)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def cli_calibrate(args) -> int:
    """The ``fastsim calibrate`` command (registered in :mod:`fastsim.cli`).

    Prints the parameters (value, 95% interval, default) and the residuals (median and worst
    relative error per operation and size band) as a table, or one JSON object
    ``{"parameters": [...], "residuals": [...], "calibration_file": ..., "notes": [...]}``, or
    CSV (parameter and residual records, a ``record`` column telling them apart); writes the
    calibration to ``--out`` and the plot to ``--plot``.

    Returns
    -------
    int
        Exit status 0.

    Raises
    ------
    FastsimInputError
        Bad inputs (the CLI prints one line and exits with status 2).
    """
    import sys
    from ._output import csv_frame, dumps
    from ._command_helpers import _catalog, _check_plot, _fmt
    _check_plot(args)
    cat = _catalog(args)
    if getattr(args, "serving", None):
        return _cli_serving(args, cat)
    for flag in ("model", "input_tokens", "output_tokens", "max_num_batched_tokens", "max_num_seqs"):
        if getattr(args, flag, None) is not None:
            raise FastsimInputError("--" + flag.replace("_", "-"), getattr(args, flag), "with --serving only")
    report = calibrate(args.steps, args.profiles or (), gpu=args.gpu, precision=args.precision, catalog=cat,
                       detail=args.detail)
    notes = list(report.notes)
    if args.out:
        report.calibration.write(args.out)
        notes.append(f"wrote {args.out}: use it with --calibration {args.out}")
    else:
        notes.append("no --out given: the calibration was not written")
    params, resid = report.parameter_records(), report.residual_records()
    if args.format == "json":
        sys.stdout.write(dumps({"parameters": params, "residuals": resid, "calibration_file": args.out,
                                "calibration": report.calibration.to_toml(), "notes": notes}) + "\n")
    elif args.format == "csv":
        recs = [dict(r, record="parameter") for r in params] + [dict(r, record="residual") for r in resid]
        csv_frame(recs, notes).to_csv(sys.stdout, index=False)
    else:
        from tabulate import tabulate

        def show(name, v):
            if v is None:
                return "n/a"
            return _fmt(v * 1e6, ".3f") if name.endswith("_s") else _fmt(v, ".4f")
        rows = [[r["fit"], r["gpu"], r["precision"],
                 r["parameter"] + (" (us)" if r["parameter"].endswith("_s") else ""), show(r["parameter"], r["value"]),
                 (f"{show(r['parameter'], r['ci95_low'])} - {show(r['parameter'], r['ci95_high'])}"
                  if r["ci95_low"] is not None else "not identified"),
                 show(r["parameter"], r["default"]), "yes" if r["used"] else "no"] for r in params]
        print(tabulate(rows, headers=["fit", "GPU", "prec", "parameter", "value", "95% interval", "default",
                                      "in file"], disable_numparse=True))
        print()
        main = {f.label for f in {f.kind: f for f in reversed(report.fits)}.values()}
        rrows = [[r["fit"], r["operation"], r["size_band"], r["points"], _fmt(r["median_rel_error"] * 100, ".1f"),
                  _fmt(r["worst_rel_error"] * 100, "+.1f"), _fmt(r["worst_size"], ",.0f")]
                 for r in resid if r["fit"] in main or r["size_band"] == "all"]
        print(tabulate(rrows, headers=["fit", "operation", "size", "points", "median |err| %", "worst err %",
                                       "worst at (tokens / bytes)"], disable_numparse=True))
        for n in notes:
            print("note: " + n)
    if args.format != "table":
        for n in notes:
            print("note: " + n, file=sys.stderr)
    if args.plot:
        plot_calibration(report, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


def plot_serving(fit: ServingFit, path, *, title: str | None = None) -> None:
    """Measured (markers) and simulated (lines) serving metrics against the request rate, one panel per metric.

    Parameters
    ----------
    fit : ServingFit
    path : str or path-like
        Image file (any format matplotlib writes).
    title : str, optional
        Figure title (default the fit's label).
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    p = fit.points
    kinds = [("ttft", "TTFT (ms)", 1e3), ("tpot", "TPOT (ms)", 1e3), ("output_throughput", "output tokens/s", 1.0)]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    for ax, (kind, ylabel, scale) in zip(axes, kinds):
        for metric, g in p[p.metric.str.startswith(kind)].groupby("metric", sort=True):
            g = g.sort_values("rate_req_per_s")
            line, = ax.plot(g.rate_req_per_s, g.simulated * scale, "-", label=f"{metric} simulated")
            ax.plot(g.rate_req_per_s, g.measured * scale, "o", color=line.get_color(), label=f"{metric} measured")
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
    fig.suptitle(title or fit.label, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _cli_serving(args, cat) -> int:
    """``fastsim calibrate --serving``: :func:`fit_serving`, its parameters and its residual per rate and metric."""
    import sys
    from ._output import csv_frame, dumps
    from ._command_helpers import _fmt
    if args.steps or args.profiles:
        raise FastsimInputError("--serving", " ".join(args.serving), "no --steps or --profiles with it (fit them "
                                "in a separate run)")
    if not args.model:
        raise FastsimInputError("--model", None, "the served model (catalog name or config.json), with --serving")
    if args.precision == "*":
        raise FastsimInputError("--precision", "*", "the precision the benchmark served (a catalog name)")
    ms = read_serving_benchmark(args.serving)
    g = cat.gpu(args.gpu)
    policy = args.policy
    if policy != "lecture" and (args.max_num_batched_tokens or args.max_num_seqs):
        from .sim.policy import engine_policy
        from .stepmodel import P_KV_BUDGET_TOKENS
        model = cat.model(args.model)
        kv = float(step_params(model, g, cat.precision(args.precision), args.tp)[P_KV_BUDGET_TOKENS])
        policy = engine_policy(policy, g.hbm_bytes, kv_budget_tokens=kv, context_tokens=model.max_context_tokens,
                               max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs)
    elif policy == "lecture" and (args.max_num_batched_tokens or args.max_num_seqs):
        raise FastsimInputError("--max-num-batched-tokens / --max-num-seqs", "given", "with --policy vllm or sglang")
    report = fit_serving(ms, args.model, args.gpu, args.precision, args.tp, instances=args.instances, policy=policy,
                         input_tokens=args.input_tokens, output_tokens=args.output_tokens,
                         fit_overhead=args.fit_overhead, replications=args.replications, seed=args.seed,
                         catalog=cat)
    fit = report.fits[0]
    notes = list(report.notes)
    if args.out:
        report.calibration.write(args.out)
        notes.append(f"wrote {args.out}: use it with --calibration {args.out}")
    else:
        notes.append("no --out given: the calibration was not written")
    params = report.parameter_records()
    points = fit.points.to_dict(orient="records")
    if args.format == "json":
        sys.stdout.write(dumps({"parameters": params, "points": points, "residuals": report.residual_records(),
                                "calibration_file": args.out, "calibration": report.calibration.to_toml(),
                                "notes": notes}) + "\n")
    elif args.format == "csv":
        recs = [dict(r, record="parameter") for r in params] + [dict(r, record="point") for r in points]
        csv_frame(recs, notes).to_csv(sys.stdout, index=False)
    else:
        from tabulate import tabulate

        def show(name, v):
            if v is None:
                return "n/a"
            return _fmt(v * 1e3, ".3f") if name.endswith("_s") else _fmt(v, ".4f")
        rows = [[r["parameter"] + (" (ms)" if r["parameter"].endswith("_s") else ""), show(r["parameter"], r["value"]),
                 (f"{show(r['parameter'], r['ci95_low'])} - {show(r['parameter'], r['ci95_high'])}"
                  if r["ci95_low"] is not None else "not identified"), show(r["parameter"], r["default"]),
                 "yes" if r["used"] else "no"] for r in params]
        print(fit.label)
        print(tabulate(rows, headers=["parameter", "value", "95% interval", "default", "in file"],
                       disable_numparse=True))
        print()

        def val(r, k):
            x = r[k] * (1e3 if r["unit"] != "tokens/s" else 1.0)
            return _fmt(x, ",.1f" if r["unit"] == "tokens/s" else ".2f")
        prow = [[_fmt(r["rate_req_per_s"], "g"), r["metric"], "tokens/s" if r["unit"] == "tokens/s" else "ms",
                 val(r, "measured"), val(r, "simulated"), _fmt(r["rel_error"] * 100, "+.1f")] for r in points]
        print(tabulate(prow, headers=["rate (req/s)", "metric", "unit", "measured", "simulated", "error %"],
                       disable_numparse=True))
        for n in notes:
            print("note: " + n)
    if args.format != "table":
        for n in notes:
            print("note: " + n, file=sys.stderr)
    if args.plot:
        plot_serving(fit, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0
