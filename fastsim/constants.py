"""The calibration file: step-model constants per GPU, precision and TP group (SPEC §3).

A calibration holds :class:`fastsim.stepmodel.StepConstants` (compute, HBM and NVLink
efficiency, the all-reduce's per-hop latency, the fixed overhead per step) for each (GPU,
precision), optionally per tensor-parallel group size, as fitted by
:func:`fastsim.calibrate.calibrate` or :func:`fastsim.calibrate.fit_serving`. This module is its format: the records
(:class:`CalibrationEntry`, :class:`Calibration`, whose :meth:`Calibration.step_constants` answers
the constants of one configuration, most specific entry first), the TOML the file is written in
(:meth:`Calibration.to_toml`) and its reader (:func:`load_calibration`), which every planning
command runs for ``--calibration FILE``. :func:`fastsim.stepmodel.resolve_constants` asks a
calibration for the constants of a configuration (re-exported here).

It holds no fitting: the fits, their readers and plots are in :mod:`fastsim.calibrate`, above it.
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass

from .catalog import Catalog, default_catalog
from .errors import FastsimInputError
from .stepmodel import StepConstants, resolve_constants

__all__ = ["Calibration", "CalibrationEntry", "load_calibration", "resolve_constants", "FORMAT_VERSION",
           "CONSTANTS", "FILE_CONSTANTS", "ENGINES"]

#: Version of the calibration file format written by :meth:`Calibration.to_toml`.
FORMAT_VERSION = 1
#: SPEC §3's timing constants, the ones the kernel-profile and step fits set.
CONSTANTS = ("eta_compute", "eta_bw", "alpha_s", "eta_nvlink", "overhead_s")
#: The step-model v2 constants and their defaults: written to a file only when they differ from it
#: (``eta_kv`` None: the KV read at ``eta_bw``, SPEC §3).
_V2_CONSTANTS = {"fp8_compute_factor": 1.0, "fp4_compute_factor": 1.0, "eta_kv": None, "kv_memory": "spec",
                 "reserved_bytes_per_gpu": 0.0, "memory_utilization": 0.9, "request_overhead_s": 0.0,
                 "overhead_per_seq_s": 0.0, "moe_compute_factor": 1.0}
#: Every constant a calibration file may hold: SPEC §3's five, then step model v2's.
FILE_CONSTANTS = CONSTANTS + tuple(_V2_CONSTANTS)
#: Engines a calibration may be tagged with (the serving engine its measurements ran on).
ENGINES = ("trtllm", "vllm", "sglang")


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
    """Step-model constants per (GPU, precision), fitted by :func:`fastsim.calibrate.calibrate` or read by
    :func:`load_calibration`.

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
    engine : str
        The serving engine the measurements ran on (``trtllm``, ``vllm``, ``sglang``), or ``""``
        (kernel profiles, or not said). A per-step overhead, a scheduler's host cost and an
        all-reduce implementation are the engine's own: constants fitted on one engine are not
        another's, and :func:`fastsim.validate.run_measurements` applies a tagged calibration to
        its engine's rows only.
    """

    entries: tuple = ()
    source: str = ""
    engine: str = ""

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
               f"source = {_toml_str(self.source)}"]
        if self.engine:
            out.append(f"engine = {_toml_str(self.engine)}   # the serving engine the measurements ran on")
        out.append("")
        for e in self.entries:
            out += ["[[constants]]", f"gpu = {_toml_str(e.gpu)}", f"precision = {_toml_str(e.precision)}"]
            if e.tp:
                out.append(f"tp = {int(e.tp)}   # only steps whose all-reduce spans {int(e.tp)} GPUs")
            for name in FILE_CONSTANTS:
                if name in _V2_CONSTANTS and getattr(e.constants, name) == _V2_CONSTANTS[name]:
                    continue
                v = getattr(e.constants, name)
                out.append(f"{name} = {_toml_str(v) if isinstance(v, str) else _toml_float(v)}")
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
        >= 0), ``fp8_compute_factor``, ``fp4_compute_factor`` (> 0), ``eta_kv`` (a fraction in
        (0, 1]; omitted: ``eta_bw``'s), ``kv_memory`` (``spec``, ``vllm``, ``trtllm``),
        ``reserved_bytes_per_gpu`` (bytes), ``memory_utilization``; omitted constants keep
        their defaults. ``fitted`` and ``interval95`` are informative. An optional top-level
        ``engine`` (``trtllm``, ``vllm``, ``sglang``) names the engine the constants were fitted on.
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
    bad = set(doc) - {"format_version", "source", "engine", "constants"}
    if bad:
        raise FastsimInputError(f"{where}: key", sorted(bad)[0], "format_version, source, engine, [[constants]]")
    engine = doc.get("engine", "")
    if engine != "" and engine not in ENGINES:
        raise FastsimInputError(f"{where}: engine", engine, "one of " + ", ".join(ENGINES))
    if doc.get("format_version", FORMAT_VERSION) != FORMAT_VERSION:
        raise FastsimInputError(f"{where}: format_version", doc.get("format_version"), str(FORMAT_VERSION))
    tables = doc.get("constants", [])
    if not isinstance(tables, list):
        raise FastsimInputError(f"{where}: constants", tables, "[[constants]] tables")
    entries, seen = [], set()
    allowed = {"gpu", "precision", "tp", "fitted", "interval95", *FILE_CONSTANTS}
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
        for name in FILE_CONSTANTS:
            if name in t:
                v = t[name]
                if name == "kv_memory":
                    if not isinstance(v, str):
                        raise FastsimInputError(f"{at}: {name}", v, "a string: spec, vllm or trtllm")
                    kw[name] = v
                    continue
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise FastsimInputError(f"{at}: {name}", v, "a number")
                kw[name] = float(v)
        try:
            const = StepConstants(**kw)
        except FastsimInputError as exc:
            raise FastsimInputError(f"{at}: {exc.field}", exc.value, exc.allowed) from None
        fitted = t.get("fitted", [])
        if not isinstance(fitted, list) or any(f not in FILE_CONSTANTS for f in fitted):
            raise FastsimInputError(f"{at}: fitted", fitted, "a list of names among " + ", ".join(FILE_CONSTANTS))
        iv = t.get("interval95", {})
        ok = isinstance(iv, dict) and all(k in FILE_CONSTANTS and isinstance(v, list) and len(v) == 2
                                          and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
                                          for k, v in iv.items())
        if not ok:
            raise FastsimInputError(f"{at}: interval95", iv, "a table of name = [low, high]")
        entries.append(CalibrationEntry(names[0], names[1], const, tuple(fitted),
                                        tuple((k, float(v[0]), float(v[1])) for k, v in iv.items()), tp))
    src = doc.get("source", "")
    return Calibration(tuple(entries), str(src), engine)
