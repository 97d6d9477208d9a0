"""Least-squares fits of the step model's constants, and the whole calibration (SPEC §3).

Each fit runs :func:`scipy.optimize.least_squares` (trust region reflective) on the log of each
parameter, minimising the squared log residuals ``log(modelled) - log(measured)``, with 95%
intervals from the Jacobian's covariance (Student-t, back from the log scale); see
:mod:`fastsim.calibrate` for the models and what the intervals mean.

- :func:`fit_operations`: matmul kernel times -> ``eta_compute``, ``eta_bw`` (and a fixed
  ``kernel_s`` per kernel), the roofline of :func:`fastsim.stepmodel.step_time` per kernel;
- :func:`fit_allreduce`: all-reduce times -> ``alpha_s``, ``eta_nvlink`` (ring all-reduce, Thakur,
  Rabenseifner, Gropp 2005);
- :func:`fit_steps`: measured steps -> every constant the rows identify, through
  :func:`fastsim.stepmodel.step_time` (SPEC §3, attention FLOPs as SPEC §6 charges a step);
- :func:`calibrate`: reads the inputs (:mod:`fastsim.calibrate.readers`), runs the fits and
  combines them into one :class:`fastsim.constants.Calibration` and a :class:`CalibrationReport`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..catalog import GPU, Catalog, Precision, default_catalog
from ..constants import CONSTANTS, Calibration, CalibrationEntry
from ..errors import FastsimInputError
from ..formulas import gemm_blend_s
from ..stepmodel import (N_PARAMS, P_ALPHA, P_ETA_BW, P_ETA_C, P_ETA_KV, P_ETA_NV, P_OVERHEAD, StepConstants,
                         decode_attn_flops, prefill_attn_flops, step_params, step_time)
from .readers import ELEMENTWISE_OPS, MATMUL_OPS, read_profiles, read_step_measurements

__all__ = ["Fit", "CalibrationReport", "calibrate", "fit_steps", "fit_operations", "fit_allreduce", "UNITS"]

#: Unit of each fitted parameter (the step-model constants and a matmul's fixed ``kernel_s``).
UNITS = {"eta_compute": "fraction of peak FLOP/s", "eta_bw": "fraction of HBM bytes/s",
         "alpha_s": "s per ring hop", "eta_nvlink": "fraction of NVLink bytes/s", "overhead_s": "s per step",
         "kernel_s": "s per matmul kernel", "gemm_blend_p": "exponent of the p-norm of read and compute"}
# log-scale bounds of each parameter
_BOUNDS = {"eta_compute": (1e-3, 1.0), "eta_bw": (1e-3, 1.0), "eta_nvlink": (1e-3, 1.0),
           "alpha_s": (1e-9, 1e-3), "overhead_s": (1e-7, 1.0), "kernel_s": (1e-9, 1e-3),
           "gemm_blend_p": (1.0, 1e3)}
_START = {"kernel_s": 3e-6, "gemm_blend_p": 2.0}


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
        95% interval of each identified parameter (Jacobian covariance, see :mod:`fastsim.calibrate`).
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
                   operations=MATMUL_OPS, weight_bytes: float = 2.0, blend: bool = False) -> Fit:
    """Fit compute and bandwidth efficiency (and a fixed time per kernel) to matmul times.

    Each matmul with ``W`` weight parameters per GPU on ``n`` tokens is modelled as
    ``max(W x weight_bytes / (eta_bw x HBM B/s), 2 W n / (eta_compute x peak FLOP/s)) + kernel_s``:
    the step model's roofline (SPEC §3; Williams, Waterman, Patterson 2009) applied to one
    kernel, which for matmuls sums to the step's own max because every matmul has the same FLOPs
    per weight byte. With ``blend`` the max is the p-norm of step model v2's GEMM class,
    :func:`fastsim.formulas.gemm_blend_s` with ``p`` fitted too (``gemm_blend_p``,
    :attr:`fastsim.stepmodel.StepConstants.gemm_blend_p`): on the shipped H100 profiles ``p`` is
    about 1.23 and the median error falls from 9.4% to 6.8%.

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
    blend : bool
        Fit the p-norm's exponent ``gemm_blend_p`` (in [1, 1000]) instead of taking the max.

    Returns
    -------
    Fit
        ``values``/``interval95`` for ``eta_compute``, ``eta_bw``, ``kernel_s`` (and ``gemm_blend_p``).

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
    names = ("eta_compute", "eta_bw", "kernel_s") + (("gemm_blend_p",) if blend else ())
    start = {"eta_compute": StepConstants().eta_compute, "eta_bw": StepConstants().eta_bw, "kernel_s": _START["kernel_s"]}
    if blend:
        start["gemm_blend_p"] = _START["gemm_blend_p"]

    def model(v):
        q = 1.0 / v["gemm_blend_p"] if blend else 0.0
        return gemm_blend_s(W * weight_bytes / (v["eta_bw"] * bw), 2.0 * W * n / (v["eta_compute"] * peak), q) + v["kernel_s"]
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
    from ..stepmodel import _link_bw
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
    # sequences of the step: each decode one, the prompt tokens one piece
    seqs = (d.decode_tokens + (d.prefill_tokens > 0)).to_numpy(np.float64)
    return P, n, d.kv_tokens.to_numpy(np.float64), attn, seqs


def fit_steps(measurements: pd.DataFrame, catalog: Catalog | None = None) -> list:
    """Fit the step model's constants to measured step times, per (GPU, precision).

    Each row's time is :func:`fastsim.stepmodel.step_time` of its configuration (see :mod:`fastsim.calibrate`
    for the tokens, KV and attention FLOPs of a row) with the constants being fitted:
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
        P, n, kv, attn, seqs = _step_inputs(d, cat)
        names = ["eta_compute", "eta_bw", "overhead_s"]
        if (d.tp > 1).any():
            names += ["alpha_s", "eta_nvlink"]
        if len(d) <= len(names):
            raise FastsimInputError(f"steps of {g} {pr}", f"{len(d)} rows",
                                    f"more rows than the {len(names)} constants fitted")
        start = {k: getattr(c, k) for k in CONSTANTS}
        cols = {"eta_compute": P_ETA_C, "eta_bw": P_ETA_BW, "overhead_s": P_OVERHEAD, "alpha_s": P_ALPHA,
                "eta_nvlink": P_ETA_NV}

        def model(v, P=P, n=n, kv=kv, attn=attn, seqs=seqs):
            Q = P.copy()
            for k, j in cols.items():
                Q[:, j] = v[k]
            if c.eta_kv is None:            # the KV read at eta_bw's efficiency (SPEC §3)
                Q[:, P_ETA_KV] = v["eta_bw"]
            return step_time(Q, n, kv, attn, seqs)
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
