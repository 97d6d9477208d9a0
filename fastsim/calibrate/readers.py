"""Readers of the measurements a calibration is fitted to (SPEC §3).

- Measured steps (:func:`read_step_measurements`): a CSV with one row per measured forward pass,
  columns :data:`STEP_COLUMNS`; every name is checked against the catalog and every row against
  the step model (:func:`fastsim.stepmodel.step_params`).
- Per-operation profiles in Vidur's format (Agrawal et al., "Vidur", MLSys 2024):
  :func:`read_op_profile` (one layer's matmul and elementwise kernel times), with the weight
  parameters of each matmul on one GPU (:func:`operation_weight_params`, SPEC §2's tensor
  parallelism), and :func:`read_allreduce_profile` (NCCL all-reduce times); :func:`read_profiles`
  reads a shipped set (:data:`BUILTIN_PROFILES`, in :data:`PROFILES_DIR`), a file or a directory.

Every reader refuses bad input with a one-line :class:`fastsim.errors.FastsimInputError` naming
the file, the line and the field. The fits that use these tables are in
:mod:`fastsim.calibrate.fit`.
"""
from __future__ import annotations

import csv
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd

from ..catalog import Catalog, Model, default_catalog
from ..errors import FastsimInputError
from ..stepmodel import step_params

__all__ = ["read_step_measurements", "read_op_profile", "read_allreduce_profile", "read_profiles",
           "operation_weight_params", "PROFILE_MODELS", "PROFILES_DIR", "BUILTIN_PROFILES", "MATMUL_OPS",
           "ELEMENTWISE_OPS", "STEP_COLUMNS"]

#: Directory of the shipped profiles (Vidur, H100; see its ATTRIBUTION.md).
PROFILES_DIR = Path(__file__).parent.parent / "data" / "profiles"
#: Names of shipped profile sets (``--profiles vidur-h100``) -> the GPU they were measured on.
BUILTIN_PROFILES = {"vidur-h100": "H100"}
#: The matmul operations of a Vidur ``mlp`` profile (the ones the step model models).
MATMUL_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
#: The elementwise operations of a Vidur ``mlp`` profile (not in the step model).
ELEMENTWISE_OPS = ("emb", "input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add")
#: Columns of a measured-steps CSV (:func:`read_step_measurements`).
STEP_COLUMNS = ("gpu", "precision", "tp", "model", "decode_tokens", "prefill_tokens", "kv_tokens", "step_s")


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
