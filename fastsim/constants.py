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

It also holds the rule by which a command picks its constants (:func:`choose_step_constants`,
``--constants fitted|lecture`` and ``--calibration``): the calibration fitted to an engine's
measurements and shipped in ``fastsim/data/calibrations/`` (:func:`shipped_calibration`, only if
it beat SPEC §3's constants on held-out rows) for a run of that engine's policy, SPEC §3's
otherwise. The library's functions that take ``constants=`` keep SPEC §3's default: the rule is
the command line's.

It holds no fitting: the fits, their readers and plots are in :mod:`fastsim.calibrate`, above it.
"""
from __future__ import annotations

import functools
import json
import math
import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

from .catalog import Catalog, default_catalog
from .engine_rules import ENGINE_RUNTIMES
from .errors import FastsimInputError
from .stepmodel import StepConstants, resolve_constants

__all__ = ["Calibration", "CalibrationEntry", "RuntimeEntry", "RUNTIME_CONSTANTS", "load_calibration", "resolve_constants", "FORMAT_VERSION",
           "CONSTANTS", "FILE_CONSTANTS", "ENGINES", "ENGINE_NAMES", "CONSTANTS_CHOICES", "SHIPPED_CALIBRATIONS",
           "SHIPPED_GPUS", "ConstantsChoice", "choose_step_constants", "shipped_calibration", "shipped_fit",
           "is_shipped_calibration"]

#: Version of the calibration file format written by :meth:`Calibration.to_toml`.
FORMAT_VERSION = 1
#: SPEC §3's timing constants, the ones the kernel-profile and step fits set.
CONSTANTS = ("eta_compute", "eta_bw", "alpha_s", "eta_nvlink", "overhead_s")
#: The step-model v2 constants and their defaults: written to a file only when they differ from it
#: (``eta_kv`` None: the KV read at ``eta_bw``, SPEC §3).
_V2_CONSTANTS = {"fp8_compute_factor": 1.0, "fp4_compute_factor": 1.0, "eta_kv": None, "kv_memory": "spec",
                 "reserved_bytes_per_gpu": 0.0, "memory_utilization": 0.9, "request_overhead_s": 0.0,
                 "overhead_per_seq_s": 0.0, "moe_compute_factor": 1.0, "overhead_per_layer_s": 0.0,
                 "step_form": "spec", "eta_pcie": None, "moe_pad_fraction": 0.0, "moe_load_cv": 0.0,
                 "gemm_blend_p": None, "moe_dispatch": "per_expert"}
#: Every constant a calibration file may hold: SPEC §3's five, then step model v2's.
FILE_CONSTANTS = CONSTANTS + tuple(_V2_CONSTANTS)
#: The constants a ``[[runtime]]`` table may hold: the host's costs, which are the runtime's own (its
#: scheduler, its launches, its per-sequence work), where the kernels' efficiencies are the GPU's.
RUNTIME_CONSTANTS = ("overhead_s", "overhead_per_seq_s", "overhead_per_layer_s")
#: Engines a calibration may be tagged with (the serving engine its measurements ran on).
ENGINES = ("trtllm", "vllm", "sglang")
#: How the output names each engine.
ENGINE_NAMES = {"trtllm": "TensorRT-LLM", "vllm": "vLLM", "sglang": "SGLang"}
#: ``--constants``: ``fitted`` (the default) the calibration fitted to the run's engine where one
#: ships, else SPEC §3's; ``lecture`` SPEC §3's everywhere.
CONSTANTS_CHOICES = ("fitted", "lecture")
_PACKAGE = Path(__file__).resolve().parent
#: The calibrations fitted to the shipped measurement set by ``tools/make_fit.py``: ``<engine>.toml``
#: for each engine whose fit beat SPEC §3's constants on held-out rows, and ``fit-report.json``
#: (every fit, shipped or not, with its in-sample and held-out errors).
SHIPPED_CALIBRATIONS = _PACKAGE / "data" / "calibrations"
#: The GPU entries the shipped measurement set (and so its calibrations) names beyond the built-in
#: catalog (L40S, RTX PRO 6000, ...): the shipped calibrations' GPU names are checked against it.
SHIPPED_GPUS = _PACKAGE / "data" / "measurements" / "gpus_custom.toml"


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
class RuntimeEntry:
    """The host costs of one of an engine's other runtimes (:data:`fastsim.engine_rules.ENGINE_RUNTIMES`).

    Attributes
    ----------
    name : str
        The runtime (``"tensorrt"``: TensorRT-LLM's TensorRT-engine runtime); never the engine's
        default, whose constants are the entries'.
    constants : tuple of (str, float)
        ``(name, value)`` of :data:`RUNTIME_CONSTANTS`, replacing the entries' own for that runtime.
    fitted : tuple of str
    interval95 : tuple of (str, float, float)
    """

    name: str
    constants: tuple = ()
    fitted: tuple = ()
    interval95: tuple = ()


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
    runtimes : tuple of RuntimeEntry
        The host costs of the engine's other runtimes (TensorRT-LLM's TensorRT engine beside its
        default PyTorch backend): :meth:`for_runtime` applies them; every command plans on the
        default runtime (the entries as they are), ``fastsim validate`` runs each row on its own.
    """

    entries: tuple = ()
    source: str = ""
    engine: str = ""
    runtimes: tuple = ()

    def for_runtime(self, runtime: str) -> "Calibration":
        """This calibration as it applies to one runtime of its engine.

        Parameters
        ----------
        runtime : str
            A runtime (:attr:`fastsim.validate.Measurement.runtime`); ``""`` or the engine's
            default: the entries as they are.

        Returns
        -------
        Calibration
            Every entry's constants with the runtime's :attr:`RuntimeEntry.constants` in place of its
            own (no runtimes of its own); ``self`` where no table names ``runtime``.
        """
        for r in self.runtimes:
            if r.name == runtime:
                kw = dict(r.constants)
                ents = tuple(replace(e, constants=replace(e.constants, **kw)) for e in self.entries)
                return Calibration(ents, self.source, self.engine)
        return self

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
               "# Used by --calibration FILE (plan, simulate, capacity, ledger, sweep, fleet, validate) and by",
               "# fastsim.calibrate.load_calibration. One [[constants]] table per GPU and precision",
               '# ("*" matches any); a GPU and precision without a table keep the default constants.',
               "# Units: eta_* are fractions of the catalog peak (FLOP/s, HBM bytes/s, NVLink bytes/s);",
               "# alpha_s is seconds per ring hop of an all-reduce; overhead_s is seconds per step (the",
               "# host time per sequence: seconds per sequence of a step; overhead_per_layer_s: seconds per",
               "# layer of a step; the request overhead: seconds per request); the compute factors are",
               "# fractions of eta_compute; step_form is spec (SPEC §3's one roofline) or classes (a",
               "# roofline per kernel class, summed: docs/STEP_MODEL.md); gemm_blend_p is the exponent of",
               "# the GEMM class's p-norm of weight read and compute (omitted: their max); moe_dispatch is",
               "# how an expert-parallel MoE layer moves its tokens (per_expert, SPEC §10; per_rank; allgather).",
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
        for r in self.runtimes:
            out += ["[[runtime]]   # host costs of another runtime of the engine, in place of the tables' own",
                    f"name = {_toml_str(r.name)}"]
            out += [f"{n} = {_toml_float(v)}" for n, v in r.constants]
            out.append("fitted = [" + ", ".join(_toml_str(n) for n in r.fitted) + "]")
            iv = ", ".join(f"{n} = [{_toml_float(lo)}, {_toml_float(hi)}]" for n, lo, hi in r.interval95
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
        ``reserved_bytes_per_gpu`` (bytes), ``memory_utilization``, ``request_overhead_s``,
        ``overhead_per_seq_s``, ``overhead_per_layer_s`` (seconds), ``moe_compute_factor`` (a fraction in (0, 1]), ``moe_pad_fraction``, ``moe_load_cv`` (>= 0),
        ``step_form`` (``spec``, ``classes``), ``eta_pcie`` (a fraction in (0, 1]; omitted:
        ``eta_nvlink``'s on PCIe GPUs too), ``gemm_blend_p`` (an exponent >= 1 under ``step_form``
        ``classes``; omitted: the GEMM class's max), ``moe_dispatch`` (``per_expert``, ``per_rank``,
        ``allgather``; omitted: ``per_expert``, SPEC §10); omitted constants keep
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
    bad = set(doc) - {"format_version", "source", "engine", "constants", "runtime"}
    if bad:
        raise FastsimInputError(f"{where}: key", sorted(bad)[0],
                                "format_version, source, engine, [[constants]], [[runtime]]")
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
        if not isinstance(t, dict):
            raise FastsimInputError(at, t, "a [[constants]] table")
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
                if name in ("kv_memory", "step_form", "moe_dispatch"):
                    if not isinstance(v, str):
                        raise FastsimInputError(f"{at}: {name}", v, "a string: " + {
                            "kv_memory": "spec, vllm or trtllm", "step_form": "spec or classes",
                            "moe_dispatch": "per_expert, per_rank or allgather"}[name])
                    kw[name] = v
                    continue
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise FastsimInputError(f"{at}: {name}", v, "a number")
                kw[name] = float(v)
        try:
            const = StepConstants(**kw)
        except FastsimInputError as exc:
            raise FastsimInputError(f"{at}: {exc.field}", exc.value, exc.allowed) from None
        fitted, iv = _fitted_and_intervals(t, at, FILE_CONSTANTS)
        entries.append(CalibrationEntry(names[0], names[1], const, fitted, iv, tp))
    src = doc.get("source", "")
    return Calibration(tuple(entries), str(src), engine, _runtime_tables(doc.get("runtime", []), where, engine))


def _fitted_and_intervals(t, at, names) -> tuple:
    """A table's ``fitted`` (a tuple of names) and ``interval95`` (``(name, low, high)``), checked against ``names``."""
    fitted = t.get("fitted", [])
    if not isinstance(fitted, list) or any(f not in names for f in fitted):
        raise FastsimInputError(f"{at}: fitted", fitted, "a list of names among " + ", ".join(names))
    iv = t.get("interval95", {})
    ok = isinstance(iv, dict) and all(k in names and isinstance(v, list) and len(v) == 2
                                      and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
                                      for k, v in iv.items())
    if not ok:
        raise FastsimInputError(f"{at}: interval95", iv, "a table of name = [low, high]")
    return tuple(fitted), tuple((k, float(v[0]), float(v[1])) for k, v in iv.items())


def _runtime_tables(tables, where, engine) -> tuple:
    """The ``[[runtime]]`` tables of a calibration file (:class:`RuntimeEntry`), checked."""
    others = ENGINE_RUNTIMES.get(engine, ("",))[1:]
    if not isinstance(tables, list):
        raise FastsimInputError(f"{where}: runtime", tables, "[[runtime]] tables")
    if tables and not others:
        raise FastsimInputError(f"{where}: runtime", "a [[runtime]] table",
                                "none: only a calibration tagged with an engine of several runtimes (trtllm) has them")
    out, seen = [], set()
    for i, t in enumerate(tables, 1):
        at = f"{where}: [[runtime]] {i}"
        if not isinstance(t, dict):
            raise FastsimInputError(at, t, "a [[runtime]] table")
        bad = set(t) - {"name", "fitted", "interval95", *RUNTIME_CONSTANTS}
        if bad:
            raise FastsimInputError(f"{at}: key", sorted(bad)[0], ", ".join(["name", "fitted", "interval95",
                                                                              *RUNTIME_CONSTANTS]))
        name = t.get("name")
        if name not in others or name in seen:
            raise FastsimInputError(f"{at}: name", name, "one of " + ", ".join(others) + ", once each")
        seen.add(name)
        kw = {}
        for n in RUNTIME_CONSTANTS:
            if n in t:
                v = t[n]
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise FastsimInputError(f"{at}: {n}", v, "a number")
                kw[n] = float(v)
        try:
            StepConstants(**kw)
        except FastsimInputError as exc:
            raise FastsimInputError(f"{at}: {exc.field}", exc.value, exc.allowed) from None
        fitted, iv = _fitted_and_intervals(t, at, RUNTIME_CONSTANTS)
        out.append(RuntimeEntry(name, tuple(kw.items()), fitted, iv))
    return tuple(out)


# ---------------------------------------------------------------------------- which constants a command runs on

def _shown(path) -> str:
    """A file as the output names it: ``fastsim/...`` for a file of the package, else as given."""
    try:
        return "fastsim/" + Path(path).resolve().relative_to(_PACKAGE).as_posix()
    except (ValueError, OSError):
        return str(path)


@functools.lru_cache(maxsize=None)
def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def shipped_fit(engine: str) -> dict | None:
    """The fit of an engine in the shipped fit report (``fastsim/data/calibrations/fit-report.json``).

    Parameters
    ----------
    engine : str
        ``trtllm``, ``vllm`` or ``sglang``.

    Returns
    -------
    dict or None
        The report's entry (``shipped``, ``reason`` and, for a cross-validated fit, ``in_sample``
        and ``held_out`` with ``fitted`` and ``start`` (SPEC §3's) median absolute % errors over
        the same rows); None where the report is missing or has no entry for the engine.
    """
    d = _read_json(str(SHIPPED_CALIBRATIONS / "fit-report.json")).get(engine)
    return d if isinstance(d, dict) else None


def is_shipped_calibration(path) -> bool:
    """Whether a file is one of the shipped calibrations (:data:`SHIPPED_CALIBRATIONS`), or a copy of one.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    bool
        True when ``path`` is a ``*.toml`` of the folder or has the same bytes as one (a missing or
        unreadable file is not: the reader then names it).
    """
    p = Path(path)
    try:
        data = p.read_bytes()
        rp = p.resolve()
    except OSError:
        return False
    for f in sorted(SHIPPED_CALIBRATIONS.glob("*.toml")):
        if f.resolve() == rp or f.read_bytes() == data:
            return True
    return False


@functools.lru_cache(maxsize=None)
def _load_shipped(path: str) -> Calibration:
    """A shipped calibration, its GPU names checked against the catalog its measurements were read with."""
    from .catalog import load_catalog
    return load_calibration(path, load_catalog([str(SHIPPED_GPUS)]))


def shipped_calibration(engine: str) -> Calibration | None:
    """The calibration fitted to an engine's rows of the shipped measurement set, where one ships.

    ``tools/make_fit.py`` writes ``fastsim/data/calibrations/<engine>.toml`` only if the fit's
    leave-one-source-out median error is below that of SPEC §3's constants on the same held-out
    rows (``fit-report.json`` holds every fit and the decision). Its GPU names are checked against
    the built-in catalog and :data:`SHIPPED_GPUS`.

    Parameters
    ----------
    engine : str
        ``trtllm``, ``vllm`` or ``sglang``; anything else (``lecture``) has none.

    Returns
    -------
    Calibration or None
        Tagged with ``engine``; None where no file ships for it.

    Raises
    ------
    FastsimInputError
        The file does not read (:func:`load_calibration`), or is tagged with another engine.
    """
    f = SHIPPED_CALIBRATIONS / f"{engine}.toml"
    if engine not in ENGINES or not f.is_file():
        return None
    cal = _load_shipped(str(f))
    if cal.engine != engine:
        raise FastsimInputError(f"{_shown(f)}: engine", cal.engine, f'"{engine}" (the file of the {engine} fit)')
    return cal


def _shipped_engines() -> list:
    return [e for e in ENGINES if (SHIPPED_CALIBRATIONS / f"{e}.toml").is_file()]


def _fit_figures(engine: str, cal: Calibration) -> str:
    """The held-out figures of a shipped fit, from the fit report (else the file's ``source`` line)."""
    try:
        h = shipped_fit(engine)["held_out"]
        fit, spec, rows = (h["fitted"]["median_abs_pct_error"], h["start"]["median_abs_pct_error"],
                           int(h["fitted"]["rows"]))
        return (f"leave-one-source-out median error {fit:.1f}% vs SPEC §3's {spec:.1f}% on {rows:,} held-out "
                "rows, docs/VALIDATION.md")
    except (TypeError, KeyError, ValueError):
        pass
    m = re.search(r"error ([0-9.]+)% \(SPEC §3's constants: ([0-9.]+)%\)", cal.source)
    return f"leave-one-source-out median error {m[1]}% vs SPEC §3's {m[2]}%" if m else ""


@dataclass(frozen=True)
class ConstantsChoice:
    """The step constants a run uses and what its output says about them (:func:`choose_step_constants`).

    Attributes
    ----------
    constants : StepConstants or Calibration
        What the run passes as ``constants=``.
    policy : str
        The run's scheduler: ``lecture`` or an engine's policy.
    kind : str
        ``lecture`` (SPEC §3's), ``fitted`` (a shipped calibration) or ``file`` (``--calibration``).
    path : str
        The calibration file as the output names it (``""``: SPEC §3's).
    engine : str
        The calibration's engine tag (``""``: none, or SPEC §3's).
    note : str
        "step constants: ...": which constants, and why.
    mismatch : str
        A calibration tagged with an engine applied to a run of another policy: the note that says
        so (``""`` otherwise).
    """

    constants: object
    policy: str
    kind: str
    path: str = ""
    engine: str = ""
    note: str = ""
    mismatch: str = ""

    @property
    def notes(self) -> tuple:
        """``note``, then ``mismatch`` where there is one."""
        return tuple(n for n in (self.note, self.mismatch) if n)


def choose_step_constants(policy: str = "lecture", constants: str | None = None, calibration=None,
                          catalog: Catalog | None = None, *, policy_flag: bool = True) -> ConstantsChoice:
    """The step constants of a run: the one rule of every command's ``--constants`` and ``--calibration``.

    - ``calibration`` given: its constants (whatever ``policy``); a file tagged with an engine other
      than the run's policy (the lecture policy included) gets a ``mismatch`` note naming the file,
      its engine and the policy. An untagged file applies anywhere without one.
    - ``constants="lecture"``: SPEC §3's (:class:`fastsim.stepmodel.StepConstants` defaults).
    - ``constants="fitted"`` or None (the default): for an engine's policy, the calibration fitted to
      that engine's measurements where one ships (:func:`shipped_calibration`), else SPEC §3's; the
      lecture policy (no engine) keeps SPEC §3's, so its figures are SPEC §3's to the bit.

    Parameters
    ----------
    policy : str, default "lecture"
        The run's scheduler: ``lecture``, ``trtllm``, ``vllm`` or ``sglang``.
    constants : {"fitted", "lecture"} or None
        ``--constants`` as given (None: not given, which is ``fitted``).
    calibration : str, os.PathLike or Calibration, optional
        ``--calibration FILE`` (a shipped file, or a copy of one, is read with the GPU names of the
        shipped measurement set, :data:`SHIPPED_GPUS`).
    catalog : Catalog, optional
        Checks the GPU and precision names of a ``calibration`` file (default: the built-in catalog).
    policy_flag : bool, default True
        Whether the run's command has ``--policy`` (the note on SPEC §3's constants for the lecture
        policy then names the policies that run on a shipped fit; ``ledger``, ``sweep`` and
        ``fleet`` have no engine policy).

    Returns
    -------
    ConstantsChoice

    Raises
    ------
    FastsimInputError
        An unknown policy or ``--constants`` value; ``--constants`` given with ``--calibration``
        (the file gives the constants: one or the other); a calibration file that does not read.
    """
    from .stepmodel import StepConstants
    if policy not in ("lecture",) + ENGINES:
        raise FastsimInputError("policy", policy, "lecture, " + ", ".join(ENGINES))
    if constants is not None and constants not in CONSTANTS_CHOICES:
        raise FastsimInputError("--constants", constants, " or ".join(CONSTANTS_CHOICES))
    run = (f"the {policy} policy ({ENGINE_NAMES[policy]})" if policy in ENGINES else
           "the default scheduler (no engine's)" if policy_flag else "no engine's policy (the command models none)")
    if calibration is not None:
        if constants is not None:
            raise FastsimInputError("--constants", constants, "no value with --calibration (the file gives the step "
                                    "constants; --constants chooses between the shipped fits and SPEC §3's when no "
                                    "file is given): drop one")
        if isinstance(calibration, Calibration):
            cal, shown = calibration, "the calibration given"
        else:
            shown = _shown(calibration)
            cal = (_load_shipped(str(calibration)) if is_shipped_calibration(calibration)
                   else load_calibration(calibration, catalog))
        e = cal.engine
        note = (f"step constants: --calibration {shown}"
                + (f", fitted to {ENGINE_NAMES[e]} measurements (engine = \"{e}\")" if e else " (no engine tag)"))
        mismatch = ""
        if e and e != policy:
            mismatch = (f"{shown} was fitted to {ENGINE_NAMES[e]} measurements (engine = \"{e}\") and this run "
                        f"is on {run}: a per-step overhead, a host time and a KV-pool rule fitted on "
                        f"{ENGINE_NAMES[e]} are its own, not "
                        + (f"{ENGINE_NAMES[policy]}'s" if policy in ENGINES else "SPEC §3's scheduler's")
                        + ("; without --calibration, each policy runs on its own engine's shipped fit (else SPEC "
                           "§3's)" if policy_flag else "; without --calibration, this command runs on SPEC §3's"))
        return ConstantsChoice(cal, policy, "file", shown, e, note, mismatch)
    if constants == "lecture":
        return ConstantsChoice(StepConstants(), policy, "lecture",
                               note="step constants: SPEC §3's (--constants lecture)")
    if policy == "lecture":
        fits = _shipped_engines() if policy_flag else []
        return ConstantsChoice(StepConstants(), policy, "lecture", note=(
            "step constants: SPEC §3's (" + (
                "the default scheduler; " + ", ".join(f"--policy {e} runs on the constants fitted to "
                                                      f"{ENGINE_NAMES[e]} measurements" for e in fits) if fits else
                "the default scheduler, no engine's" if policy_flag else
                "this command models no engine's scheduler") + ")"))
    cal = shipped_calibration(policy)
    if cal is None:
        fit = shipped_fit(policy)
        why = str(fit.get("reason", "")) if fit else ""
        return ConstantsChoice(StepConstants(), policy, "lecture", note=(
            f"step constants: SPEC §3's (no calibration fitted to {ENGINE_NAMES[policy]} measurements ships"
            + (f": {why}" if why else "") + ")"))
    shown = _shown(SHIPPED_CALIBRATIONS / f"{policy}.toml")
    figures = _fit_figures(policy, cal)
    return ConstantsChoice(cal, policy, "fitted", shown, cal.engine, (
        f"step constants: fitted to {ENGINE_NAMES[policy]} measurements ({shown}"
        + (f"; {figures}" if figures else "") + "); --constants lecture for SPEC §3's"))
