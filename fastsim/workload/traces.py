"""Reading request traces: the shipped Azure and Mooncake traces, Azure-format CSV and Mooncake JSONL files.

:func:`read_trace` parses a file into a :class:`~fastsim.workload.records.Workload` (in
arrival order, starting at 0), checking every row and naming the file, line and column of a bad one;
:func:`trace_rate_warning` says when the rate implies timestamps read in the wrong unit.

Sources: Azure LLM inference traces 2023 (Patel et al., "Splitwise", ISCA 2024; CC-BY-4.0, see
``fastsim/data/traces/ATTRIBUTION.md``); Mooncake traces (Qin et al., "Mooncake", FAST 2025;
Apache-2.0; ``hash_ids`` of 512-token blocks).
"""
from __future__ import annotations

import gzip
import json
import math
import os
import re
import warnings
from functools import lru_cache
from importlib import resources

import numpy as np

from ..errors import FastsimInputError
from .records import _INT64_MAX, _O_ALLOWED, _P_ALLOWED, PrefixBlocks, Workload, _clip, _csr

__all__ = ["BUILTIN_TRACES", "MOONCAKE_BLOCK_TOKENS", "read_trace", "trace_rate_warning",
           "PLAUSIBLE_RATE_REQ_PER_S"]

#: Built-in traces shipped in ``fastsim/data/traces``: name -> (file, description).
BUILTIN_TRACES = {
    "azure-code": ("AzureLLMInferenceTrace_code.csv",
                   "Azure LLM inference trace 2023, code (Azure/AzurePublicDataset "
                   "@ b469a113cedca53ddc3bdea71a143dc4b7d8700c, CC-BY-4.0)"),
    "azure-conv": ("AzureLLMInferenceTrace_conv.csv",
                   "Azure LLM inference trace 2023, conversation (Azure/AzurePublicDataset "
                   "@ b469a113cedca53ddc3bdea71a143dc4b7d8700c, CC-BY-4.0)"),
    "mooncake-conv": ("mooncake_conversation_trace.jsonl.gz",
                      "Mooncake conversation trace, FAST25-release/traces/conversation_trace.jsonl "
                      "(kvcache-ai/Mooncake @ 3b5a594133958449a1feaf1c9e0fc1b553e34a28, Apache-2.0)"),
}

#: Tokens per block of a Mooncake trace's ``hash_ids``: one id per 512-token block of the prompt,
#: as the Mooncake trace documentation (FAST25-release/traces) gives it.
MOONCAKE_BLOCK_TOKENS = 512

_AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")


def read_trace(name_or_path, *, time_unit: str | None = None, skip_invalid: bool = False) -> Workload:
    """Read a request trace: a built-in name, an Azure-format CSV or a Mooncake JSONL file.

    Parameters
    ----------
    name_or_path : str or os.PathLike
        ``"azure-conv"``, ``"azure-code"`` or ``"mooncake-conv"`` (shipped with the package, see
        :data:`BUILTIN_TRACES`; case-insensitive), or the path of a file (gzip-compressed or not):

        - Azure CSV: header ``TIMESTAMP,ContextTokens,GeneratedTokens`` (other columns are
          ignored), timestamps as wall-clock date-times such as ``2023-11-16 18:15:46.6805900``
          (any number of fractional digits; parsed with ``numpy.datetime64`` at ns resolution)
          or as plain numbers (seconds unless ``time_unit`` says otherwise).
        - Mooncake JSONL: one object per line with ``timestamp`` (milliseconds unless
          ``time_unit`` says otherwise), ``input_length`` and ``output_length``, and optionally
          ``hash_ids``, a list of non-negative integer ids, one per 512-token block of the prompt
          (:data:`MOONCAKE_BLOCK_TOKENS`), at most ``ceil(input_length / 512)`` of them. They become
          the workload's :class:`PrefixBlocks` (``block_tokens`` 512); a row without ``hash_ids``
          lists no blocks, and a file with no ``hash_ids`` at all gives ``prefix`` None. Other keys
          are ignored.

        The format is chosen by extension (``.csv``; ``.jsonl``, ``.json``, ``.ndjson``; each
        optionally followed by ``.gz``), else by content (a first line starting with ``{`` is
        JSONL). A file starting with the gzip magic bytes is decompressed first.
    time_unit : {"s", "ms"}, optional
        Unit of numeric timestamps; default per format: ``"ms"`` for JSONL (as Mooncake writes
        them), ``"s"`` for CSV. Date-time timestamps have no unit (give None). A built-in trace
        takes None or its own unit (``"ms"`` for ``mooncake-conv``).
        :func:`trace_rate_warning` says when the rate it implies looks like the wrong unit.
    skip_invalid : bool, default False
        Drop rows whose prompt or output tokens are integers below 1 (failed requests, as
        BurstGPT records them with 0 output tokens) instead of refusing the file; the dropped
        rows are listed in ``Workload.dropped``. Malformed rows are refused either way.

    Returns
    -------
    Workload
        Requests in file order (each with its prefix blocks), arrival times shifted so that the
        first is 0, ``horizon_s`` at the last arrival. Built-in traces are read once and cached
        (the arrays are read-only). Requests that share a timestamp arrive at the same instant; a
        trace whose timestamps are all equal is an offline burst (every request at t = 0, as
        ``vllm bench serve --request-rate inf`` sends them).

    Raises
    ------
    FastsimInputError
        One line, naming the file and, where relevant, the line number: unknown built-in name
        (the message lists them), missing or unreadable file, empty file or no rows, missing
        header column, malformed row (wrong number of fields, unparsable timestamp, non-integer
        length, ``hash_ids`` not a list of integers >= 0 or longer than
        ``ceil(input_length / 512)``), a numeric timestamp below 0, a timestamp earlier than the
        previous row's (the first such row is named with its value and the previous row's: a
        trace lists its requests in arrival order, and fastsim does not reorder it), prompt
        tokens below 1, or output tokens below 1 (a request
        with 0 output tokens cannot be served: O counts the first token), unless
        ``skip_invalid``; every row dropped; a file that is not valid gzip although it starts like
        one; an unknown ``time_unit``, or one given for date-time timestamps (or, for a built-in
        trace, another than its own). Nothing is dropped, truncated or clipped without
        ``skip_invalid``; blank lines are not rows and are skipped.

    Notes
    -----
    Sources: Azure LLM inference traces 2023 (Azure/AzurePublicDataset, CC-BY-4.0); Mooncake
    traces (kvcache-ai/Mooncake, FAST25-release/traces, Apache-2.0; ``hash_ids`` one per
    512-token block). The full Azure conversation trace (19,366 requests) reads in about 20 ms,
    the Mooncake conversation trace (12,031 requests, 288,500 block ids) in about 130 ms.
    """
    if time_unit not in (None, "s", "ms"):
        raise FastsimInputError("time_unit", time_unit, "'s' or 'ms' (or None for the format's default)")
    if isinstance(name_or_path, str) and name_or_path.strip().lower() in BUILTIN_TRACES:
        key = name_or_path.strip().lower()
        own = _builtin_time_unit(key)
        if time_unit is not None and time_unit != own:
            if own is None:
                raise FastsimInputError("time_unit", time_unit, f"no time unit (None) for the built-in trace {name_or_path.strip()} "
                                        "(its timestamps are date-times)")
            raise FastsimInputError("time_unit", time_unit, f"None or {own!r} for the built-in trace "
                                    f"{name_or_path.strip()} (its timestamps are in {own})")
        return _read_builtin(key)
    try:
        path = os.fspath(name_or_path)
    except TypeError:
        raise FastsimInputError("trace", name_or_path, _trace_allowed()) from None
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not os.path.exists(path):
        looks_like_path = os.sep in path or "/" in path or os.path.splitext(path)[1] != ""
        if looks_like_path:
            raise FastsimInputError("trace file", path, "an existing file (not found)")
        raise FastsimInputError("trace", path, _trace_allowed())
    if os.path.isdir(path):
        raise FastsimInputError("trace file", path, "a file, not a directory")
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise FastsimInputError("trace file", path, f"a readable file ({exc.strerror})") from None
    stem = path
    if raw[:2] == _GZIP_MAGIC:
        raw = _gunzip(raw, path)
        if stem.lower().endswith(".gz"):
            stem = stem[:-3]
    text = _decode(raw, path)
    label = os.path.splitext(os.path.basename(stem))[0]
    ext = os.path.splitext(stem)[1].lower()
    if ext == ".csv":
        fmt = "csv"
    elif ext in (".jsonl", ".json", ".ndjson"):
        fmt = "jsonl"
    else:
        first = next((ln for ln in text.splitlines() if ln.strip()), "")
        fmt = "jsonl" if first.lstrip().startswith("{") else "csv"
    if fmt == "csv":
        return _parse_azure_csv(text, path, label, f"Azure-format CSV {path}", time_unit, skip_invalid)
    return _parse_mooncake_jsonl(text, path, label, f"Mooncake JSONL {path}", time_unit or "ms", skip_invalid)


#: Mean rates outside this range (req/s) make :func:`trace_rate_warning` suspect the time unit.
PLAUSIBLE_RATE_REQ_PER_S = (0.01, 200.0)


def trace_rate_warning(wl: Workload) -> str:
    """A warning when a trace's mean rate suggests its timestamps were read in the wrong unit.

    Parameters
    ----------
    wl : Workload
        From :func:`read_trace` (``time_unit`` set for numeric timestamps).

    Returns
    -------
    str
        ``""`` when the mean rate lies within :data:`PLAUSIBLE_RATE_REQ_PER_S` or the timestamps
        have no unit; else one sentence naming the rate and the unit to try.
    """
    rate = wl.mean_rate_req_per_s
    lo, hi = PLAUSIBLE_RATE_REQ_PER_S
    if wl.time_unit is None or not math.isfinite(rate) or lo <= rate <= hi:
        return ""
    other = "s" if wl.time_unit == "ms" else "ms"
    side = "high" if rate > hi else "low"
    return (f"trace {wl.name}: timestamps read as {'milliseconds' if wl.time_unit == 'ms' else 'seconds'} imply "
            f"{rate:,.4g} req/s, implausibly {side} for one deployment (outside {lo:g} - {hi:g} req/s); if they are "
            f"in {'seconds' if other == 's' else 'milliseconds'}, use --time-unit {other}")


def _invalid_allowed(allowed: str) -> str:
    return allowed + "; or --skip-invalid (skip_invalid=True) to drop such rows"


def _trace_allowed() -> str:
    return ("a built-in trace (" + ", ".join(sorted(BUILTIN_TRACES)) + ") or the path of an existing "
            "Azure-format .csv or Mooncake .jsonl file")


_GZIP_MAGIC = b"\x1f\x8b"


def _gunzip(raw: bytes, where: str) -> bytes:
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, ValueError) as exc:
        raise FastsimInputError("trace file", where, f"a valid gzip file ({exc})") from None


def _builtin_format(fname: str) -> str:
    """'csv' or 'jsonl', from a built-in trace's file name (an optional .gz suffix stripped)."""
    base = fname[:-3] if fname.endswith(".gz") else fname
    if base.endswith(".csv"):
        return "csv"
    if base.endswith(".jsonl"):
        return "jsonl"
    raise FastsimInputError("built-in trace file", fname, "a .csv or .jsonl file, optionally .gz")  # pragma: no cover


def _builtin_time_unit(name: str):
    """A built-in trace's own timestamp unit: None (date-times) for CSV, 'ms' for Mooncake JSONL."""
    return None if _builtin_format(BUILTIN_TRACES[name][0]) == "csv" else "ms"


@lru_cache(maxsize=None)
def _read_builtin(name: str) -> Workload:
    fname, desc = BUILTIN_TRACES[name]
    res = resources.files("fastsim").joinpath("data", "traces", fname)
    raw = res.read_bytes()
    where = f"{fname} (built-in {name})"
    if fname.endswith(".gz"):
        raw = _gunzip(raw, where)
    if _builtin_format(fname) == "csv":
        return _parse_azure_csv(_decode(raw, fname), where, name, desc)
    return _parse_mooncake_jsonl(_decode(raw, fname), where, name, desc, "ms")


def _decode(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise FastsimInputError(f"{where}, line {line}", raw[exc.start:exc.start + 8],
                                "UTF-8 text") from None


def _parse_int(s: str):
    """Strict decimal integer (optional sign and surrounding spaces); None when malformed."""
    t = s.strip()
    body = t[1:] if t[:1] in "+-" else t
    if not body.isdigit() or not body.isascii():
        return None
    return int(t)


def _parse_azure_csv(text: str, where: str, name: str, source: str, time_unit=None,
                     skip_invalid: bool = False) -> Workload:
    lines = text.splitlines()
    hdr_idx = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    if hdr_idx is None:
        raise FastsimInputError(f"{where}", "an empty file", "a header line "
                                + ",".join(_AZURE_COLUMNS) + " followed by at least one row")
    header = [h.strip() for h in lines[hdr_idx].split(",")]
    cols = []
    for c in _AZURE_COLUMNS:
        matches = [j for j, h in enumerate(header) if h.lower() == c.lower()]
        if len(matches) != 1:
            raise FastsimInputError(f"{where}, line {hdr_idx + 1} (header)", lines[hdr_idx].strip(),
                                    "a header with one column each named " + ", ".join(_AZURE_COLUMNS))
        cols.append(matches[0])
    it, ip, io = cols
    nf = len(header)
    ts, ps, os_, lineno, dropped = [], [], [], [], []
    for k in range(hdr_idx + 1, len(lines)):
        ln = lines[k]
        if not ln.strip():
            continue
        parts = ln.split(",")
        if len(parts) != nf:
            raise FastsimInputError(f"{where}, line {k + 1}", ln.strip(),
                                    f"a row of {nf} comma-separated fields like the header "
                                    f"({len(parts)} found)")
        p = _parse_int(parts[ip])
        o = _parse_int(parts[io])
        if p is None:
            raise FastsimInputError(f"{where}, line {k + 1}, {header[ip]}", parts[ip].strip(), _P_ALLOWED)
        if o is None:
            raise FastsimInputError(f"{where}, line {k + 1}, {header[io]}", parts[io].strip(), _O_ALLOWED)
        if _drop_invalid(p, o, header[ip], header[io], where, k + 1, skip_invalid, dropped):
            continue
        ts.append(parts[it].strip())
        ps.append(p)
        os_.append(o)
        lineno.append(k + 1)
    if not ps:
        raise FastsimInputError(f"{where}", f"a header and no valid rows ({len(dropped):,} dropped)" if dropped
                                else "a header and no rows", "at least one request row")
    t_s, unit = _parse_timestamps(ts, lineno, where, header[it], time_unit)
    _check_order(t_s, ts, lineno, where, header[it], unit)
    return _finish(name, t_s, np.array(ps, dtype=np.int64), np.array(os_, dtype=np.int64), source, unit,
                   tuple(dropped))


def _check_order(t: np.ndarray, raw: list, lineno: list, where: str, col: str, unit) -> None:
    """Refuse a negative numeric timestamp or one earlier than the previous row's (naming the first such row).

    ``t`` are the parsed times (any offset), ``raw`` the values as written, ``unit`` the unit of
    numeric timestamps (None for date-times, which cannot be negative).
    """
    if unit is not None and t.shape[0] and t.min() < 0:
        j = int(np.argmax(t < 0))
        raise FastsimInputError(f"{where}, line {lineno[j]}, {col}", raw[j],
                                f"a time >= 0 ({'milliseconds' if unit == 'ms' else 'seconds'} from the trace's start)")
    if t.shape[0] > 1 and np.any(t[1:] < t[:-1]):
        j = int(np.argmax(t[1:] < t[:-1])) + 1
        raise FastsimInputError(f"{where}, line {lineno[j]}, {col}", raw[j],
                                f"a time >= the previous row's (line {lineno[j - 1]}: {raw[j - 1]!r}): rows in "
                                "arrival order, equal times for requests sent at once")


def _drop_invalid(p: int, o: int, pcol: str, ocol: str, where: str, line: int, skip_invalid: bool,
                  dropped: list) -> bool:
    """True when a row with lengths below 1 is to be dropped (recorded in ``dropped``); raises
    naming the row and its column when ``skip_invalid`` is off; False for a valid row."""
    bad = _bad_lengths(p, o, pcol, ocol)
    if not bad:
        return False
    if not skip_invalid:
        col, val, allowed = bad[0]
        raise FastsimInputError(f"{where}, line {line}, {col}", val, _invalid_allowed(allowed))
    dropped.append((line, ", ".join(f"{c} {v}" for c, v, _ in bad)))
    return True


def _bad_lengths(p: int, o: int, pcol: str, ocol: str) -> list:
    """(column, value, allowed) for each length of a row below 1."""
    out = []
    if p < 1:
        out.append((pcol, p, _P_ALLOWED))
    if o < 1:
        out.append((ocol, o, _O_ALLOWED))
    return out


#: A plain decimal number (what a numeric timestamp looks like); in a date-time column such a
#: value is refused as mixed (numpy would read ``1700000000`` as a year).
_PLAIN_NUMBER = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*")


def _mixed_allowed(kind: str, col: str, first_line: int, first: str) -> str:
    """What a timestamp column mixing date-times and numbers allows, for the refusal."""
    return (f"{kind} like the first row's (line {first_line}: {first!r}): a {col} column holds all "
            "date-times or all numbers, not both")


def _parse_timestamps(ts: list, lineno: list, where: str, col: str, time_unit=None):
    """(float64 seconds from the first, unit): date-times (ns; unit None) or numbers in ``time_unit`` (s).

    The first row decides the kind of the whole column: a row of the other kind (a plain number
    among date-times, a date-time among numbers) is refused, naming its line and the column.

    Parameters
    ----------
    ts : list of str
        The timestamp fields, in file order.
    lineno : list of int
        Their line numbers (1-based).
    where : str
        The file, for messages.
    col : str
        The column's name as the header spells it.
    time_unit : {"s", "ms"} or None
        Unit of numeric timestamps (default ``"s"``); None for date-times.

    Returns
    -------
    (ndarray(float64) of shape (n,), str or None)
        Seconds from the earliest timestamp (date-times) or the numbers converted to seconds, and
        the unit of numbers (None for date-times).

    Raises
    ------
    FastsimInputError
        A value of neither kind or of the other kind than the first row's (file, line and
        column named; all date-times or all numbers allowed), or a ``time_unit`` for date-times.
    """
    try:
        float(ts[0])
        numeric = True
    except ValueError:
        numeric = False
    if not numeric and time_unit is not None:
        raise FastsimInputError("time_unit", time_unit, f"no time unit (None) for {where}: its {col} values are date-times, "
                                "which carry their own unit")
    if numeric:
        out = np.empty(len(ts), dtype=np.float64)
        for j, s in enumerate(ts):
            try:
                v = float(s)
            except ValueError:
                v = float("nan")
            if not math.isfinite(v):
                raise FastsimInputError(f"{where}, line {lineno[j]}, {col}", s,
                                        _mixed_allowed("a finite number", col, lineno[0], ts[0])
                                        if _is_datetime(s) else "a finite number (like the first row)")
            out[j] = v
        unit = time_unit or "s"
        return (out / 1e3 if unit == "ms" else out), unit
    allowed = "a date-time like 2023-11-16 18:15:46.6805900 (like the first row)"
    for j, s in enumerate(ts):   # a date-time has a '-' after its year; a number only in an exponent
        if (s.find("-", 1) < 0 or "e" in s or "E" in s) and _PLAIN_NUMBER.fullmatch(s):
            raise FastsimInputError(f"{where}, line {lineno[j]}, {col}", s,
                                    _mixed_allowed("a date-time", col, lineno[0], ts[0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy warns about (and converts) explicit UTC offsets
        try:
            t = np.array(ts, dtype=str).astype("datetime64[ns]")
        except ValueError:
            for j, s in enumerate(ts):
                try:
                    np.datetime64(s, "ns")
                except ValueError:
                    raise FastsimInputError(f"{where}, line {lineno[j]}, {col}", s, allowed) from None
            raise  # pragma: no cover  (the batch and the single parse disagree)
    bad = np.isnat(t)
    if bad.any():
        j = int(np.argmax(bad))
        raise FastsimInputError(f"{where}, line {lineno[j]}, {col}", ts[j], allowed)
    i64 = t.view(np.int64)
    return (i64 - i64.min()).astype(np.float64) / 1e9, None


def _is_datetime(s: str) -> bool:
    """Whether numpy reads ``s`` as a date-time (not NaT)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return not np.isnat(np.datetime64(s.strip(), "ns"))
        except ValueError:
            return False


_HASH_ALLOWED = ("a list of integer block ids >= 0 (one per 512-token block of the prompt), at most "
                 "ceil(input_length / 512) of them")


def _parse_mooncake_jsonl(text: str, where: str, name: str, source: str, time_unit: str = "ms",
                          skip_invalid: bool = False) -> Workload:
    ts, ps, os_, hs, dropped, lineno = [], [], [], [], [], []
    loads = json.loads
    saw_line = False
    any_hash = False
    no_ids = ()
    bt = MOONCAKE_BLOCK_TOKENS
    for k, ln in enumerate(text.splitlines()):
        if not ln.strip():
            continue
        saw_line = True
        try:
            rec = loads(ln)
        except ValueError as exc:
            raise FastsimInputError(f"{where}, line {k + 1}", _clip(ln),
                                    f"one JSON object per line ({exc.msg} at column {exc.colno})") from None
        if not isinstance(rec, dict):
            raise FastsimInputError(f"{where}, line {k + 1}", _clip(ln), "a JSON object")
        for key in _MOONCAKE_KEYS:
            if key not in rec:
                raise FastsimInputError(f"{where}, line {k + 1}", _clip(ln),
                                        "an object with keys " + ", ".join(_MOONCAKE_KEYS) + f" ({key} missing)")
        t, p, o = rec["timestamp"], rec["input_length"], rec["output_length"]
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
            raise FastsimInputError(f"{where}, line {k + 1}, timestamp", t,
                                    "a finite number of " + ("milliseconds" if time_unit == "ms" else "seconds"))
        if isinstance(p, bool) or not isinstance(p, int):
            raise FastsimInputError(f"{where}, line {k + 1}, input_length", p, _P_ALLOWED)
        if isinstance(o, bool) or not isinstance(o, int):
            raise FastsimInputError(f"{where}, line {k + 1}, output_length", o, _O_ALLOWED)
        h = rec.get("hash_ids", no_ids)
        if h is not no_ids:
            # type(x) is int: bools, floats and strings are not ids
            if type(h) is not list or not all(type(x) is int for x in h) \
                    or (h and (min(h) < 0 or max(h) > _INT64_MAX)):
                raise FastsimInputError(f"{where}, line {k + 1}, hash_ids", _clip(json.dumps(h)), _HASH_ALLOWED)
            any_hash = True
        if _drop_invalid(p, o, "input_length", "output_length", where, k + 1, skip_invalid, dropped):
            continue
        if len(h) > -(-p // bt):
            raise FastsimInputError(f"{where}, line {k + 1}, hash_ids", f"{len(h)} ids for input_length {p}",
                                    f"at most ceil({p} / {bt}) = {-(-p // bt)} ids (one per {bt}-token block "
                                    "of the prompt)")
        ts.append(t)
        ps.append(p)
        os_.append(o)
        hs.append(h)
        lineno.append(k + 1)
    if not saw_line:
        raise FastsimInputError(f"{where}", "an empty file", "one JSON object per line, at least one")
    if not ts:
        raise FastsimInputError(f"{where}", f"no valid rows ({len(dropped):,} dropped)", "at least one request row")
    t = np.array(ts, dtype=np.float64)
    _check_order(t, ts, lineno, where, "timestamp", time_unit)
    t = (t - t[0]) / (1e3 if time_unit == "ms" else 1.0)
    prefix = PrefixBlocks(bt, *_csr(hs)) if any_hash else None
    return _finish(name, t, np.array(ps, dtype=np.int64), np.array(os_, dtype=np.int64), source, time_unit,
                   tuple(dropped), prefix)


def _finish(name: str, t_s: np.ndarray, p: np.ndarray, o: np.ndarray, source: str, time_unit=None,
            dropped: tuple = (), prefix: PrefixBlocks | None = None) -> Workload:
    """The Workload of parsed rows, in arrival order already (:func:`_check_order`), shifted to start at 0."""
    t_s = t_s - t_s[0]
    return Workload(name, t_s, p, o, source, time_unit=time_unit, dropped=dropped, prefix=prefix)
