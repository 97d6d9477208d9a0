"""Sweep tables on disk: CSV, JSON Lines or a Parquet directory, written chunk by chunk, read back.

:func:`_write_chunk` appends one chunk (fsync'd, so an interruption loses at most the chunk being
written; :func:`_repair_tail` cuts a line cut short); :func:`read_table` reads any of the formats
back in grid order; ``FILE.sweep.json`` (:func:`_meta_path`, read by :func:`_read_meta`) records
the grid and settings a resume must match, and a resume of an output with content
(:func:`_has_content`) needs it. JSON rows carry ``null_reasons`` for their missing and infinite cells.
"""
from __future__ import annotations

import io
import json
import math
import os

import numpy as np
import pandas as pd

from ..errors import FastsimInputError
from .table import COLUMNS, _typed

def _format(path: str, field: str = "--out") -> str:
    """The table format of ``path`` by its extension; errors name ``field`` (``--out``, or ``sweep table``)."""
    ext = os.path.splitext(str(path))[1].lower()
    if ext == ".csv":
        return "csv"
    if ext in (".json", ".jsonl"):
        return "jsonl"
    if ext == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise FastsimInputError(field, path, "a .csv or .json file (.parquet needs pyarrow: "
                                    "pip install pyarrow)") from None
        return "parquet"
    raise FastsimInputError(field, path, "a file ending in .parquet, .csv, .json or .jsonl")


def _whole_lines(path: str) -> bytes:
    """A line-oriented file's bytes up to its last newline: a last line cut short (an interrupted
    chunk) is left out, and the file is not changed (``--resume`` cuts it: :func:`_repair_tail`)."""
    with open(path, "rb") as fh:
        data = fh.read()
    return data[:data.rfind(b"\n") + 1]


def _repair_tail(path: str) -> None:
    """Cut a line-oriented file after its last newline (a chunk cut short by an interruption)."""
    with open(path, "rb+") as fh:
        data = fh.read()
        if data and not data.endswith(b"\n"):
            fh.truncate(data.rfind(b"\n") + 1)


def read_table(path: str) -> pd.DataFrame:
    """Read a sweep table written by :func:`run_sweep` (any of its formats), rows in grid order.

    Parameters
    ----------
    path : str
        A ``.csv``, ``.json`` / ``.jsonl`` (JSON Lines) file or a ``.parquet`` directory.

    Returns
    -------
    pandas.DataFrame
        The columns of :data:`COLUMNS` with their dtypes; an empty frame if the file (or the
        Parquet directory) exists but nothing was written to it yet.

    Raises
    ------
    FastsimInputError
        An unknown extension; a path that does not exist (a typo must not read as an empty
        sweep); a file that is not a sweep table (a missing column, or a row that does not parse,
        named with the parser's message).
    """
    # a missing path first: a typo is "file not found" whatever its extension (a .parquet one said
    # it needs pyarrow where pyarrow is missing)
    if not os.path.exists(path):
        raise FastsimInputError("sweep table", path, "an existing sweep output, a file (a directory for .parquet) "
                                "written by fastsim sweep --out or run_sweep(out=...) (file not found)")
    fmt = _format(path, "sweep table")
    empty = _typed(pd.DataFrame({c: pd.Series(dtype=object if d == "str" else d) for c, d in COLUMNS}))
    try:
        return _parse_table(path, fmt, empty)
    except (ValueError, TypeError, KeyError) as exc:      # a row that is not one fastsim sweep wrote
        raise FastsimInputError("sweep table", path, "a table written by fastsim sweep (it does not parse: "
                                f"{type(exc).__name__}: {str(exc)[:200]})") from None


def _parse_table(path: str, fmt: str, empty: pd.DataFrame) -> pd.DataFrame:
    """:func:`read_table` of an existing ``path`` in format ``fmt`` (``empty``: the typed empty frame)."""
    if fmt == "csv":
        text = _whole_lines(path)
        if not text:        # nothing written, or a first chunk cut before its first newline
            return empty
        df = pd.read_csv(io.BytesIO(text), dtype={c: (str if d == "str" else d) for c, d in COLUMNS if d in ("str", "Int64")},
                         keep_default_na=False,
                         na_values={c: ["", "nan"] for c, d in COLUMNS if d in ("float64", "Int64")})
    elif fmt == "jsonl":
        lines = _whole_lines(path).decode("utf-8").splitlines()
        recs = [_from_json_row(json.loads(ln)) for ln in lines if ln.strip()]
        df = pd.DataFrame.from_records(recs, columns=[c for c, _ in COLUMNS])
        for c, d in COLUMNS:
            if d == "float64":
                df[c] = df[c].astype(object).where(df[c].notna(), np.nan).astype(np.float64)
    else:
        parts = sorted(f for f in os.listdir(path) if f.endswith(".parquet"))
        df = pd.concat([pd.read_parquet(os.path.join(path, f)) for f in parts], ignore_index=True) if parts \
            else pd.DataFrame({c: [] for c, _ in COLUMNS})
    missing = [c for c, _ in COLUMNS if c not in df.columns]
    if missing:
        raise FastsimInputError("sweep table", path, f"a table written by fastsim sweep (missing {missing[0]})")
    df = _typed(df).sort_values("point", kind="stable").reset_index(drop=True)
    return df


def _write_chunk(path: str, fmt: str, df: pd.DataFrame, part: int) -> None:
    if fmt == "csv":
        header = not os.path.exists(path) or os.path.getsize(path) == 0
        text = df.to_csv(index=False, header=header, na_rep="", float_format=None)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
    elif fmt == "jsonl":
        lines = []
        for rec in df.to_dict(orient="records"):
            lines.append(json.dumps(_json_row(rec), allow_nan=False))
        with open(path, "a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
    else:
        os.makedirs(path, exist_ok=True)
        tmp = os.path.join(path, f".part-{part:06d}.tmp")
        df.to_parquet(tmp, index=False)
        os.replace(tmp, os.path.join(path, f"part-{part:06d}.parquet"))


def _py(v):
    """A table cell as a plain Python value for ``json`` (missing integers as None)."""
    if v is pd.NA:
        return None
    return v.item() if hasattr(v, "item") else v


#: Columns that only a colocated (resp. disaggregated) row has.
_COLOCATED_ONLY = ("tp", "pp", "instances", "chunk_tokens", "instance_capacity_req_per_s")
_DISAGGREGATED_ONLY = ("prefill_tp", "decode_tp", "prefill_instances", "decode_instances",
                       "prefill_capacity_req_per_s", "decode_capacity_req_per_s")


def _null_reason(rec: dict, k: str, v) -> str:
    """Why one cell of a sweep row has no finite value (starts with ``infinite`` or ``not applicable``)."""
    v = _py(v)
    if isinstance(v, float) and math.isinf(v) and v > 0:
        if k.startswith("sim_ttft") or k.startswith("sim_tpot"):
            return "infinite: more than 10% of the measured requests never got that token (rejected or unfinished)"
        if not rec.get("feasible", True):
            return "infinite: the configuration is infeasible (see reason)"
        if k == "sim_capacity_req_per_s" or k.startswith("sim_capacity_ci95"):
            return "infinite: no capacity probe failed"
        return "infinite"
    if k in _COLOCATED_ONLY and rec.get("mode") == "disaggregated":
        return "not applicable: a disaggregated row (see the prefill_ and decode_ columns)"
    if k in _DISAGGREGATED_ONLY and rec.get("mode") == "colocated":
        return "not applicable: a colocated row"
    if k.startswith("sim_capacity"):
        return ("not applicable: capacity not searched (--capacity and a verified point)" if k == "sim_capacity_req_per_s"
                else "not applicable: no interval (capacity not searched, one seed, or no probe passed)")
    if k.startswith("sim_") and not rec.get("verified", False):
        return "not applicable: not simulated (verified is false)"
    if k == "sim_tpot_p90_s":
        return "not applicable: no measured request has more than one output token"
    if not rec.get("feasible", True):
        return "not applicable: the configuration is infeasible (see reason)"
    return "not applicable"


def _from_json_row(row: dict) -> dict:
    """A JSON Lines row read back: a null whose reason starts with ``infinite`` is +inf again."""
    for k, why in (row.pop("null_reasons", None) or {}).items():
        if row.get(k) is None and str(why).startswith("infinite"):
            row[k] = math.inf
    return row


def _json_row(rec: dict) -> dict:
    """One row as strict-JSON values: non-finite and missing cells as None, explained in ``null_reasons``."""
    row, why = {}, {}
    for k, v in rec.items():
        v = _py(v)
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            why[k] = _null_reason(rec, k, v)
            v = None
        row[k] = v
    row["null_reasons"] = why
    return row


def _json_records(df: pd.DataFrame) -> list:
    """The table as a list of dicts of plain Python values; NaN, inf and missing values as None,
    each explained in the row's ``null_reasons`` (field -> reason)."""
    return [_json_row(rec) for rec in df.to_dict(orient="records")]


def _meta_path(path: str) -> str:
    return str(path).rstrip("/\\") + ".sweep.json"


def _has_content(path: str) -> bool:
    """Whether a sweep output holds anything a resume would keep.

    Parameters
    ----------
    path : str
        The output: a CSV or JSON Lines file, or a Parquet directory of part files.

    Returns
    -------
    bool
        True for a non-empty file or a directory with at least one ``.parquet`` part file; False
        for a missing path, an empty file or a directory without part files.
    """
    if os.path.isdir(path):
        return any(f.endswith(".parquet") for f in os.listdir(path))
    return os.path.isfile(path) and os.path.getsize(path) > 0


def _read_meta(path: str) -> dict:
    """Read the ``FILE.sweep.json`` beside a sweep output (see :func:`_meta_path`).

    Parameters
    ----------
    path : str
        The sweep output ``FILE`` (not the sidecar itself).

    Returns
    -------
    dict
        The recorded ``table_version``, ``axes`` and ``settings``.

    Raises
    ------
    FastsimInputError
        The sidecar is not a JSON object (cut short, edited or not written by fastsim sweep).
    """
    mp = _meta_path(path)
    try:
        with open(mp, "r", encoding="utf-8") as fh:
            meta = json.load(fh)
    except (ValueError, UnicodeDecodeError) as exc:     # json.JSONDecodeError is a ValueError
        raise FastsimInputError("--resume", path, f"a table whose {os.path.basename(mp)} is the JSON written "
                                f"by fastsim sweep (it does not parse: {exc}); start afresh without --resume") from None
    if not isinstance(meta, dict):
        raise FastsimInputError("--resume", path, f"a table whose {os.path.basename(mp)} is the JSON object "
                                f"written by fastsim sweep (it holds a {type(meta).__name__}); start afresh "
                                "without --resume")
    return meta
