"""What every command prints: strict JSON, CSV and table cells (the display edge of fastsim).

JSON is strict (RFC 8259): no ``NaN`` or ``Infinity``. A float that is not finite is written as
``null``, and the record that holds it gets a ``null_reasons`` object naming the field and saying
why: the reason starts with ``infinite`` when the value is +inf (a P90 past the requests that never
got their token) and with ``not applicable`` when no value exists (TPOT when every output is one
token). Tables print the same two cases as ``inf`` and ``n/a``.
"""
from __future__ import annotations

import json
import math

__all__ = ["INF", "NA", "strict", "dumps", "cell", "null_reasons", "csv_frame", "percentile_reason"]

#: Table cell of a value that is +inf.
INF = "inf"
#: Table cell of a value that does not exist.
NA = "n/a"


def _plain(v):
    """numpy scalars and arrays as Python values (recursion handles the containers)."""
    import numpy as np
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    return v


def strict(obj):
    """A copy of ``obj`` that ``json.dumps(..., allow_nan=False)`` accepts.

    Parameters
    ----------
    obj : object
        Nested dicts, lists and tuples of numbers, strings, booleans, None, numpy scalars or
        arrays, and ``pandas.NA``.

    Returns
    -------
    object
        The same structure with plain Python values; non-finite floats and missing values as
        None, tuples as lists.
    """
    obj = _plain(obj)
    if isinstance(obj, dict):
        return {str(k): strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict(v) for v in obj]
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    try:
        import pandas as pd
        if obj is pd.NA or obj is pd.NaT:
            return None
    except ImportError:  # pragma: no cover
        pass
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


def dumps(obj) -> str:
    """Strict JSON text of ``obj`` (indented by 2; see :func:`strict`).

    Parameters
    ----------
    obj : object
        As for :func:`strict`.

    Returns
    -------
    str
        JSON without ``NaN`` or ``Infinity``.
    """
    return json.dumps(strict(obj), indent=2, allow_nan=False)


def cell(x, spec: str = "") -> str:
    """A table cell: ``inf`` for +inf, ``n/a`` for a missing or undefined value, else ``format``.

    Parameters
    ----------
    x : float, int, str or None
    spec : str
        Format specification of a finite value.

    Returns
    -------
    str
    """
    if x is None:
        return NA
    try:
        import pandas as pd
        if x is pd.NA:
            return NA
    except ImportError:  # pragma: no cover
        pass
    if isinstance(x, float) or type(x).__name__.startswith("float"):
        f = float(x)
        if math.isnan(f):
            return NA
        if math.isinf(f):
            return INF if f > 0 else "-" + INF
    return format(x, spec)


def _nonfinite(v) -> bool:
    v = _plain(v)
    return isinstance(v, float) and not math.isfinite(v)


def null_reasons(record: dict, explain=None) -> dict:
    """Why each field of ``record`` that JSON writes as null has no finite value.

    Parameters
    ----------
    record : dict
        One record, before :func:`strict`.
    explain : callable, optional
        ``explain(field, value) -> str or None``: the reason for one field; None falls back to
        ``"infinite"`` (for +inf) or ``"not applicable"`` (NaN or None).

    Returns
    -------
    dict of str to str
        Field name -> reason, for every non-finite float and every None among ``record``'s
        values (lists: a field whose list holds a non-finite value). Each reason starts with
        ``infinite`` or ``not applicable``.
    """
    out = {}
    for k, v in record.items():
        bad = v is None or _nonfinite(v) or (isinstance(v, (list, tuple)) and any(x is None or _nonfinite(x) for x in v))
        if not bad:
            try:
                import pandas as pd
                bad = v is pd.NA
            except ImportError:  # pragma: no cover
                pass
        if not bad:
            continue
        why = explain(k, v) if explain else None
        if why is None:
            x = _plain(v)
            why = "infinite" if isinstance(x, float) and x > 0 and math.isinf(x) else "not applicable"
        out[k] = why
    return out


def percentile_reason(kind: str, q: float, value, measured: int) -> str | None:
    """The reason a TTFT or TPOT percentile is null, or None when it is finite.

    Parameters
    ----------
    kind : {"TTFT", "TPOT"}
    q : float
        The percentile's quantile (0.9 for P90).
    value : float
        The percentile (s); +inf or NaN to explain.
    measured : int
        Requests in the measured window.

    Returns
    -------
    str or None
    """
    if value is not None and not _nonfinite(value):
        return None
    tail = f"{(1.0 - q) * 100:.0f}%"
    if value is not None and math.isinf(_plain(value)):
        if kind == "TTFT":
            return (f"infinite: more than {tail} of the measured requests got no first token by the horizon "
                    "(rejected or unfinished)")
        return (f"infinite: more than {tail} of the measured requests with more than one output token did not "
                "finish by the horizon (rejected or unfinished)")
    if not measured:
        return "not applicable: no request arrived in the measured window"
    if kind == "TPOT":
        return "not applicable: no measured request has more than one output token (TPOT needs two)"
    return "not applicable: nothing to measure"


def csv_frame(records, notes=(), row_notes=None):
    """The rows of a CSV output: records flattened, lists and dicts as JSON, the notes as a column.

    Parameters
    ----------
    records : list of dict
        The records of the output (before :func:`strict`).
    notes : sequence of str
        The output's notes; each row carries all of them as a JSON array in a ``notes`` column
        (one row holding only the notes when there are no records).
    row_notes : list of list of str, optional
        One list per record: the notes of that row's ``notes`` column instead of ``notes`` (the
        output's notes that concern the row: those about every row and its own).

    Returns
    -------
    pandas.DataFrame
        Nested dicts flattened to ``a.b`` columns; list-valued cells as JSON text; missing and
        non-finite values empty. A column whose values are all integers where present (booleans
        aside) is a nullable integer column (``Int64``), so CSV writes ``2``, not ``2.0``, and an
        empty cell where a record has no value.
    """
    import pandas as pd
    recs = strict(list(records))
    frame = pd.json_normalize(recs) if recs else pd.DataFrame(index=[0])
    flat = [_flatten(r, "", {}) for r in recs]
    for c in frame.columns:
        kinds = {type(f[c]) for f in flat if f.get(c) is not None}
        if kinds == {int}:
            try:
                frame[c] = pd.array([f.get(c) for f in flat], dtype="Int64")
            except (OverflowError, TypeError, ValueError):  # past int64: left as it is
                pass
    for c in frame.columns:
        if frame[c].map(lambda v: isinstance(v, (list, dict))).any():
            frame[c] = frame[c].map(lambda v: json.dumps(v, allow_nan=False) if isinstance(v, (list, dict)) else v)
    if row_notes is not None and recs:
        if len(row_notes) != len(recs):
            raise ValueError(f"row_notes: {len(row_notes)} lists for {len(recs)} records")
        frame["notes"] = [json.dumps(list(n), allow_nan=False) for n in row_notes]
    else:
        frame["notes"] = json.dumps(list(notes), allow_nan=False)
    return frame


def _flatten(record: dict, prefix: str, out: dict) -> dict:
    """``out`` with ``record``'s values that are not dicts, nested dicts flattened to ``a.b`` keys
    as :func:`pandas.json_normalize` names its columns."""
    for k, v in record.items():
        if isinstance(v, dict):
            _flatten(v, f"{prefix}{k}.", out)
        else:
            out[f"{prefix}{k}"] = v
    return out
