"""Sweeps over thousands of configurations: analytic table, batched verification, Pareto plots.

A sweep is the Cartesian product of axes (see :data:`AXES`)::

    model x gpu x precision x mode x tp x prefill_tp x decode_tp x chunk_tokens x max_batch
      x instances x prefill_instances x decode_instances x (scenario | trace)
      x rate_req_per_s x ttft_s x tpot_s x price

Every point gets its analytic result (SPEC section 5, one instance evaluated per row by
:func:`fastsim._analytic_nb.instances_nb`, vectorized over the grid); a selection of points is
verified in the discrete-event simulator (SPEC sections 6-7) in batches of (configuration x seed)
runs, each batch one :func:`fastsim.sim.simulate_batch` call; optionally each verified point gets
its maximum sustainable rate (:func:`fastsim.search.max_sustainable_rate`).

The result is one table, one row per point, columns named with their units. On disk it is written
in chunks as the sweep goes (CSV, JSON Lines, or a Parquet directory of part files), so an
interrupted sweep keeps what it finished and ``resume=True`` carries on from there. Points are
identified by a stable id, a 64-bit hash of the point's axis values, so a resumed
or distributed sweep recognises them whatever the execution order.

Randomness: the simulated workloads of a point come from ``SeedSequence(seed, spawn_key=h)``
where ``h`` hashes the point's workload axis value (scenario or trace name). Every configuration
of one scenario therefore sees the same requests (common random numbers), at every rate (the
arrival times scale as 1 / rate), whatever the chunking, the worker or the order of execution.

Dask (optional, ``pip install fastsim[dask]``): ``scheduler="tcp://host:8786"`` sends the
verification chunks to an existing cluster, ``workers=N`` starts a local one. Results are
identical to a local run.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import tomllib
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import pandas as pd

from . import _analytic_nb as AK
from .analytic import ScreenOptions, instances_needed
from .catalog import Catalog, default_catalog
from .errors import FastsimInputError, require_tp
from .stepmodel import (LAYOUTS, N_PARAMS, P_KVPG, P_NET_BW, StepConstants, instance_layout_refusal,
                        layout_degrees, step_params)
from .layouts import instance_label

__all__ = [
    "AXES", "SweepGrid", "SweepSettings", "load_grid", "make_grid", "parse_axis", "analytic_table",
    "run_sweep", "read_table", "pareto_front", "plot_sweep", "questions", "COLUMNS", "QUESTION",
]

#: Axes a grid may give, in the canonical order of the product (the first varies slowest).
AXES = ("model", "gpu", "precision", "mode", "tp", "prefill_tp", "decode_tp", "layout", "chunk_tokens", "max_batch",
        "instances", "prefill_instances", "decode_instances", "scenario", "trace", "rate_req_per_s",
        "ttft_s", "tpot_s", "price")

_DEFAULT_TPS = (1, 2, 4, 8)
_AUTO = "auto"
MAX_POINTS = 50_000_000

# reason codes of a point
(_R_OK, _R_NOFIT, _R_TPOT, _R_TTFT, _R_NOPEAK, _R_BELOW, _R_PRE_NOFIT, _R_PRE_TTFT, _R_DEC_NOFIT, _R_DEC_TPOT,
 _R_LAYOUT) = range(11)
_REASONS = np.array([
    "",
    "weights + one request's KV do not fit in memory",
    "no batch meets the TPOT target",
    "the latency-quantile prompt cannot be prefilled within the TTFT target",
    "the GPU has no peak for this precision",
    "the given instances carry less than the target rate",
    "prefill: weights + one request's KV do not fit in memory",
    "prefill: the TTFT target leaves no room for queueing",
    "decode: weights + one request's KV do not fit in memory",
    "decode: no batch meets the TPOT target",
    "the model refuses this layout (a TP that does not divide its attention or KV heads, which vLLM "
    "refuses, or expert parallelism on a dense model)",
], dtype=object)

#: Columns of the sweep table and their dtypes (units in the names; seconds, US dollars). The
#: ``Int64`` columns are pandas nullable integers, missing where they do not apply: ``tp``,
#: ``instances`` and ``chunk_tokens`` on disaggregated rows, the ``prefill_*`` / ``decode_*`` ones on
#: colocated rows.
COLUMNS = (
    ("point_id", "str"), ("point", "int64"),
    ("model", "str"), ("gpu", "str"), ("precision", "str"), ("mode", "str"),
    ("tp", "Int64"), ("prefill_tp", "Int64"), ("decode_tp", "Int64"), ("layout", "str"), ("chunk_tokens", "Int64"),
    ("max_batch", "int64"), ("instances", "Int64"), ("prefill_instances", "Int64"), ("decode_instances", "Int64"),
    ("workload", "str"), ("rate_req_per_s", "float64"), ("ttft_s", "float64"), ("tpot_s", "float64"),
    ("price", "str"), ("price_usd_per_gpu_hour", "float64"),
    ("mean_prompt_tokens", "float64"), ("mean_output_tokens", "float64"),
    ("instance_capacity_req_per_s", "float64"), ("prefill_capacity_req_per_s", "float64"),
    ("decode_capacity_req_per_s", "float64"), ("capacity_req_per_s", "float64"), ("batch", "int64"),
    ("analytic_ttft_s", "float64"), ("analytic_tpot_s", "float64"),
    ("gpus", "int64"), ("usd_per_hour", "float64"), ("usd_per_million_output_tokens", "float64"),
    ("efficiency_usd_per_million_output_tokens", "float64"), ("output_tokens_per_s_per_gpu", "float64"),
    ("feasible", "bool"), ("reason", "str"),
    ("verified", "bool"), ("sim_runs", "int64"), ("sim_measured", "int64"), ("sim_rejected", "int64"),
    ("sim_attainment", "float64"), ("sim_ttft_p90_s", "float64"), ("sim_tpot_p90_s", "float64"),
    ("sim_overloaded", "bool"), ("sim_passed", "bool"),
    ("sim_capacity_req_per_s", "float64"), ("sim_capacity_ci95_lo_req_per_s", "float64"),
    ("sim_capacity_ci95_hi_req_per_s", "float64"),
)
_SIM_COLUMNS = tuple(c for c, _ in COLUMNS[COLUMNS.index(("verified", "bool")):])

#: Version of the table's layout, recorded in ``FILE.sweep.json``; a resume refuses another one.
#: 2: missing values (not 0) in the columns that do not apply to a row's mode. 3: the ``layout`` column.
TABLE_VERSION = 3

#: Columns that make a "question" of a sweep: the plans of one question compete for one answer.
QUESTION = ("model", "workload", "rate_req_per_s", "ttft_s", "tpot_s", "price")

#: Figures :func:`plot_sweep` writes by default (one per question, in grid order).
MAX_PLOTS = 12


# ---------------------------------------------------------------------------------------------
# The grid
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SweepSettings:
    """How a sweep runs (everything but the axes).

    Attributes
    ----------
    verify : {"none", "top-k-per-scenario", "all"}
        Which analytically feasible points are simulated. ``top-k-per-scenario`` takes the
        ``top_k`` cheapest (integer cost) of every group of points sharing model, workload, rate,
        TTFT, TPOT and price.
    top_k : int
        Points per group for ``top-k-per-scenario`` (>= 1).
    seeds : int
        Simulated replications per point (synthetic workloads; a trace is replayed once).
    horizon_s : float
        Simulated arrival window per run (s), 600 by default (lecture §2.3, lesson three).
    seed : int
        Root seed (>= 0).
    capacity : bool
        Also bisect each verified point for its maximum sustainable rate (scenarios only).
    capacity_tol : float
        Relative tolerance of that bisection.
    tpot_margin, ttft_tail : float
        As in :class:`fastsim.analytic.ScreenOptions`.
    chunk_tokens : tuple of int
        Chunk sizes searched where the ``chunk_tokens`` axis is ``"auto"``.
    constants : StepConstants
        Step-model constants (SPEC §3), for the screen and the simulator.

    Raises
    ------
    FastsimInputError
        An unknown ``verify`` mode; ``top_k`` or ``seeds`` not an integer >= 1 or ``seed`` not
        an integer >= 0 (booleans rejected); ``capacity`` not a boolean; a non-numeric or
        non-positive ``horizon_s``; ``capacity_tol`` outside (0, 1); chunk sizes, margin or
        tail that :class:`fastsim.analytic.ScreenOptions` rejects.
    """

    verify: str = "none"
    top_k: int = 3
    seeds: int = 4
    horizon_s: float = 600.0
    seed: int = 0
    capacity: bool = False
    capacity_tol: float = 0.02
    tpot_margin: float = 0.85
    ttft_tail: float = 2.3
    chunk_tokens: tuple = (256, 512, 1024, 2048)
    constants: StepConstants = field(default_factory=StepConstants)

    def __post_init__(self):
        if self.verify not in ("none", "top-k-per-scenario", "all"):
            raise FastsimInputError("verify", self.verify, "none, top-k-per-scenario or all")
        for name, lo in (("top_k", 1), ("seeds", 1), ("seed", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
                raise FastsimInputError(name, v, f"an integer >= {lo}")
        if not isinstance(self.capacity, (bool, np.bool_)):
            raise FastsimInputError("capacity", self.capacity, "true or false")
        for name in ("horizon_s", "capacity_tol", "tpot_margin", "ttft_tail"):
            v = getattr(self, name)
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise FastsimInputError(name, v, "a number")
        if isinstance(self.chunk_tokens, (str, bytes)) or not hasattr(self.chunk_tokens, "__iter__") or any(
                isinstance(c, (bool, np.bool_)) or not isinstance(c, (int, np.integer)) for c in self.chunk_tokens):
            raise FastsimInputError("chunk_tokens", self.chunk_tokens, "a list of integers >= 1")
        from .errors import require_positive
        require_positive("horizon_s", self.horizon_s)
        if not (0 < self.capacity_tol < 1):
            raise FastsimInputError("capacity_tol", self.capacity_tol, "a fraction in (0, 1)")
        ScreenOptions(chunk_tokens=self.chunk_tokens, tpot_margin=self.tpot_margin, ttft_tail=self.ttft_tail)

    def to_dict(self) -> dict:
        """Plain JSON-able form.

        Returns
        -------
        dict
            Every field; ``constants`` as a dict, ``chunk_tokens`` as a list.
        """
        d = dataclasses.asdict(self)
        d["chunk_tokens"] = list(self.chunk_tokens)
        return d


@dataclass(frozen=True)
class _Source:
    """One value of the workload axis, resolved."""

    label: str
    kind: str                 # "scenario" or "trace"
    obj: object               # Scenario or Workload
    model: str | None         # the scenario's model (None for a trace)
    rate_req_per_s: float
    ttft_s: float | None
    tpot_s: float | None
    lengths: tuple            # mean P, mean O, P90 P, P90 O


@dataclass(frozen=True)
class SweepGrid:
    """A validated grid: canonical values per axis, resolved against a catalog.

    Build it with :func:`make_grid` or :func:`load_grid`. ``axes`` maps every name of
    :data:`AXES` to a tuple of canonical values (absent axes hold their default); ``given`` names
    the axes the user gave.

    Attributes
    ----------
    axes : dict[str, tuple]
        Canonical values of every axis of :data:`AXES`.
    given : tuple of str
        Axes the user gave.
    catalog : Catalog
        The catalog the names were resolved against.
    sources : tuple of _Source
        The workload axis (scenario or trace values), resolved.
    models : dict[str, Model]
        The models of the ``model`` axis, by value.
    """

    axes: dict
    given: tuple
    catalog: Catalog
    sources: tuple
    models: dict

    @property
    def shape(self) -> tuple:
        """Values per axis (tuple of int), in :data:`AXES` order (the workload axis counted once, under ``scenario``)."""
        return tuple(len(self.axes[a]) for a in AXES)

    @property
    def n_points(self) -> int:
        """Number of points of the product (int)."""
        return int(np.prod(self.shape, dtype=np.int64))

    def describe(self) -> dict:
        """The axes as given (JSON-able).

        Returns
        -------
        dict of str to list
            For each axis in :attr:`given`, its canonical values (price tables as dicts of
            floats).
        """
        return {a: [_jsonable(v) for v in self.axes["scenario" if a == "trace" else a]] for a in self.given}


def _tuple(v):
    """A list from a settings file as a tuple (anything else as is, for SweepSettings to reject)."""
    return tuple(v) if isinstance(v, (list, tuple)) else v


def _jsonable(v):
    if isinstance(v, dict):
        return {k: float(x) for k, x in v.items()}
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    return v


def _values(name, raw) -> list:
    if isinstance(raw, (list, tuple)):
        vals = list(raw)
    else:
        vals = [raw]
    if not vals:
        raise FastsimInputError(f"axis {name}", [], "at least one value")
    return vals


def _int_value(name, v, lo, auto=False):
    if auto and isinstance(v, str) and v.strip().lower() == _AUTO:
        return _AUTO
    if isinstance(v, str):
        try:
            v = int(v.strip())
        except ValueError:
            raise FastsimInputError(f"axis {name}", v, f"an integer >= {lo}" + (" or 'auto'" if auto else "")) from None
    if isinstance(v, bool) or not isinstance(v, (int, np.integer, float)) or v != int(v) or v < lo:
        raise FastsimInputError(f"axis {name}", v, f"an integer >= {lo}" + (" or 'auto'" if auto else ""))
    return int(v)


def _float_value(name, v):
    orig = v
    if isinstance(v, str):
        try:
            v = float(v.strip())
        except ValueError:
            raise FastsimInputError(f"axis {name}", orig, "a finite number > 0") from None
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
            or not math.isfinite(v) or v <= 0:
        raise FastsimInputError(f"axis {name}", orig, "a finite number > 0")
    return float(v)


def _price_value(v, catalog: Catalog):
    """'catalog', a number (the point's GPU), or {gpu: usd}; strings 'B200:6+H100:2' too."""
    if isinstance(v, str):
        t = v.strip()
        if t.lower() in ("catalog", "default"):
            return "catalog"
        if ":" in t or "=" in t:
            out = {}
            for part in t.split("+"):
                g, sep, usd = part.replace("=", ":").partition(":")
                if not sep:
                    raise FastsimInputError("axis price", v, "'catalog', USD per GPU-hour, or GPU:USD[+GPU:USD...]")
                out[g.strip()] = usd.strip()
            v = out
        else:
            return _float_value("price", t)
    if isinstance(v, Mapping):
        if not v:
            raise FastsimInputError("axis price", v, "a non-empty table of GPU = USD per hour")
        return {catalog.gpu(g).name: _float_value(f"price.{g}", x) for g, x in sorted(v.items())}
    return _float_value("price", v)


def _price_label(v) -> str:
    if isinstance(v, dict):
        return "+".join(f"{g}:{x:g}" for g, x in sorted(v.items()))
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _canon(value) -> str:
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{float(x)!r}" for k, x in sorted(value.items())) + "}"
    if isinstance(value, float):
        return repr(float(value))
    return str(value)


def _resolve_source(kind: str, v, catalog: Catalog, cache: dict, read_trace=None) -> _Source:
    from . import workload as W
    from .analytic import Demand
    if not isinstance(v, str) or not v.strip():
        raise FastsimInputError(f"axis {kind}", v, "a name" + (" or a trace file path" if kind == "trace" else ""))
    if kind == "scenario":
        s = catalog.scenario(v)
        d = Demand.from_scenario(s)
        return _Source(s.name, "scenario", s, s.model, s.rate_req_per_s, s.ttft_s, s.tpot_s,
                       (d.mean_prompt_tokens, d.mean_output_tokens, d.latency_prompt_tokens, d.latency_output_tokens))
    wl = cache.get(v) or (read_trace or W.read_trace)(v)
    cache[v] = wl
    if wl.n < 2 or not (wl.duration_s > 0):
        raise FastsimInputError("axis trace", v, "a trace with at least two distinct arrival times")
    p, o = wl.prompt_tokens.astype(np.float64), wl.output_tokens.astype(np.float64)
    return _Source(wl.name if v.strip().lower() in W.BUILTIN_TRACES else v, "trace", wl, None,
                   wl.mean_rate_req_per_s, None, None,
                   (float(p.mean()), float(o.mean()), float(np.quantile(p, 0.9)), float(np.quantile(o, 0.9))))


def make_grid(axes: Mapping, catalog: Catalog | None = None, *, read_trace=None) -> SweepGrid:
    """Validate a mapping of axes and resolve it against a catalog, before any work starts.

    Parameters
    ----------
    axes : mapping of str to a value or a list of values
        Names from :data:`AXES`. Values: ``model`` catalog names or ``config.json`` paths;
        ``gpu`` names or ``"all"``; ``precision`` names; ``mode`` ``colocated`` /
        ``disaggregated``; ``tp``, ``prefill_tp``, ``decode_tp`` powers of two (the last two
        default to ``tp``); ``layout`` instance layouts (:data:`fastsim.stepmodel.LAYOUTS`, default
        ``tp``; the EP layouts apply to MoE models, other points are refused rows);
        ``chunk_tokens`` integers >= 1 or ``"auto"`` (the best of the chunk
        set); ``max_batch`` integers >= 0 (0 = no cap); ``instances``, ``prefill_instances``,
        ``decode_instances`` integers >= 1 or ``"auto"`` (the planner's count; for disaggregated
        points ``instances`` sets both sides unless they are given); ``scenario`` names or
        ``trace`` names / paths (not both); ``rate_req_per_s``, ``ttft_s``, ``tpot_s`` positive
        numbers (default: the scenario's; required for traces except the rate, which defaults to
        the trace's mean rate); ``price`` ``"catalog"``, a number (US dollars per GPU-hour of the
        point's GPU) or a table ``{GPU = USD}``. Defaults: the catalog's default GPUs
        (H100, H200, B200), every precision, both modes, TP 1, 2, 4, 8, scenario ``chat``.
    catalog : Catalog, optional
    read_trace : callable(str) -> Workload, optional
        Reads a ``trace`` axis value; default :func:`fastsim.workload.read_trace` with its
        defaults (``fastsim sweep --time-unit / --skip-invalid`` pass their own).

    Returns
    -------
    SweepGrid

    Raises
    ------
    FastsimInputError
        Naming the axis: unknown axis, empty axis, repeated value, a value of the wrong type or
        out of range, an unknown name, both ``scenario`` and ``trace``, a trace without its SLOs,
        or more than 50,000,000 points.
    """
    catalog = catalog or default_catalog()
    if not isinstance(axes, Mapping):
        raise FastsimInputError("grid", type(axes).__name__, "a table of axes")
    unknown = [a for a in axes if a not in AXES]
    if unknown:
        raise FastsimInputError(f"axis {unknown[0]}", unknown[0], "one of " + ", ".join(AXES))
    raw = {a: _values(a, axes[a]) for a in axes}
    if "scenario" in raw and "trace" in raw:
        raise FastsimInputError("axis trace", raw["trace"], "either a scenario axis or a trace axis, not both")
    out: dict = {}
    models: dict = {}
    for v in raw.get("model", []):
        if not isinstance(v, str):
            raise FastsimInputError("axis model", v, "a catalog model name or a config.json path")
        m = catalog.model(v)
        models[m.name] = m
    out["model"] = tuple(models) if "model" in raw else (None,)
    gpus = []
    for v in raw.get("gpu", catalog.default_gpus()):
        if not isinstance(v, str):
            raise FastsimInputError("axis gpu", v, "a catalog GPU name or 'all'")
        gpus.extend(list(catalog.gpus) if v.strip().lower() == "all" else [catalog.gpu(v).name])
    out["gpu"] = tuple(gpus)
    precs = []
    for v in raw.get("precision", catalog.default_precisions()):
        if not isinstance(v, str):
            raise FastsimInputError("axis precision", v, "a catalog precision name")
        precs.append(catalog.precision(v).name)
    out["precision"] = tuple(precs)
    modes = []
    for v in raw.get("mode", ["colocated", "disaggregated"]):
        if v not in ("colocated", "disaggregated"):
            raise FastsimInputError("axis mode", v, "colocated or disaggregated")
        modes.append(v)
    out["mode"] = tuple(modes)
    for name in ("tp", "prefill_tp", "decode_tp"):
        vals = raw.get(name, list(_DEFAULT_TPS) if name == "tp" else None)
        if vals is None:
            out[name] = (0,)
            continue
        tv = []
        for v in vals:
            if isinstance(v, (bool, np.bool_)):
                raise FastsimInputError(f"axis {name}", v, "a power of two from 1 to 64 (not a boolean)")
            try:
                tv.append(require_tp(f"axis {name}", int(v) if isinstance(v, str) and v.strip().isdigit() else v))
            except (TypeError, FastsimInputError):
                raise FastsimInputError(f"axis {name}", v, "a power of two from 1 to 64") from None
        out[name] = tuple(tv)
    lays = []
    for v in raw.get("layout", ["tp"]):
        if v not in LAYOUTS:
            raise FastsimInputError("axis layout", v, "one of " + ", ".join(LAYOUTS))
        lays.append(v)
    out["layout"] = tuple(lays)
    out["chunk_tokens"] = tuple(_int_value("chunk_tokens", v, 1, auto=True) for v in raw.get("chunk_tokens", [_AUTO]))
    out["max_batch"] = tuple(_int_value("max_batch", v, 0) for v in raw.get("max_batch", [0]))
    out["instances"] = tuple(_int_value("instances", v, 1, auto=True) for v in raw.get("instances", [_AUTO]))
    for name in ("prefill_instances", "decode_instances"):
        out[name] = tuple(_int_value(name, v, 1, auto=True) for v in raw[name]) if name in raw else ("",)
    kind = "trace" if "trace" in raw else "scenario"
    cache: dict = {}
    sources = tuple(_resolve_source(kind, v, catalog, cache, read_trace) for v in raw.get(kind, ["chat"]))
    out["scenario"] = tuple(s.label for s in sources)
    out["trace"] = ("",)
    for name in ("rate_req_per_s", "ttft_s", "tpot_s"):
        out[name] = tuple(_float_value(name, v) for v in raw[name]) if name in raw else (None,)
    if kind == "trace":
        for name in ("ttft_s", "tpot_s"):
            if name not in raw:
                raise FastsimInputError(f"axis {name}", None, "a P90 target in seconds (required with a trace axis)")
        if "model" not in raw:
            raise FastsimInputError("axis model", None, "a model name or config.json path (required with a trace axis)")
    out["price"] = tuple(_price_value(v, catalog) for v in raw.get("price", ["catalog"]))
    for a in AXES:
        canon = [_canon(v) for v in out[a]]
        if len(set(canon)) != len(canon):
            dup = next(c for c in canon if canon.count(c) > 1)
            raise FastsimInputError(f"axis {a}", dup, "distinct values (this one is repeated)")
    for s in sources:
        if s.model is not None:
            models.setdefault(s.model, catalog.model(s.model))
    given = tuple(a for a in AXES if a in raw)
    grid = SweepGrid(out, given, catalog, sources, models)
    if grid.n_points > MAX_POINTS:
        raise FastsimInputError("grid", f"{grid.n_points:,} points", f"at most {MAX_POINTS:,} points")
    return grid


def parse_axis(text: str) -> tuple:
    """Parse a command-line axis ``NAME=V1,V2,...`` into ``(name, [values])`` (strings).

    Parameters
    ----------
    text : str
        ``NAME=V1,V2,...``; ``-`` in the name reads as ``_``; blank values are dropped.

    Returns
    -------
    (str, list of str)
        The axis name (one of :data:`AXES`) and its values, unconverted (:func:`make_grid`
        converts and checks them).

    Raises
    ------
    FastsimInputError
        No ``=``, an unknown name, or no value.
    """
    name, sep, vals = str(text).partition("=")
    name = name.strip().replace("-", "_")
    if not sep:
        raise FastsimInputError("--axis", text, "NAME=V1,V2,... with NAME one of " + ", ".join(AXES))
    if name not in AXES:
        raise FastsimInputError(f"axis {name}", text, "one of " + ", ".join(AXES))
    values = [v.strip() for v in vals.split(",") if v.strip()]
    if not values:
        raise FastsimInputError(f"axis {name}", text, "at least one value")
    return name, values


def load_grid(path: str) -> tuple:
    """Read a grid file: TOML (or JSON) with an ``[axes]`` table and an optional ``[sweep]`` table.

    Parameters
    ----------
    path : str
        The file; a ``.json`` extension reads JSON, anything else TOML.

    Returns
    -------
    (dict, dict)
        The raw axes (validate them with :func:`make_grid`) and the ``[sweep]`` settings
        (keys of :class:`SweepSettings`).

    Raises
    ------
    FastsimInputError
        A missing or malformed file, no ``[axes]`` table, an unknown top-level table or setting.
    """
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise FastsimInputError("grid file", path, f"a readable TOML or JSON file ({exc.strerror})") from None
    try:
        t = json.loads(raw) if str(path).endswith(".json") else tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise FastsimInputError("grid file", path, f"valid TOML/JSON ({exc})") from None
    unknown = set(t) - {"axes", "sweep"}
    if unknown:
        raise FastsimInputError(f"grid file {path}", sorted(unknown), "tables [axes] and [sweep]")
    if not isinstance(t.get("axes"), dict):
        raise FastsimInputError(f"grid file {path}", None, "an [axes] table")
    settings = t.get("sweep", {})
    keys = {f.name for f in dataclasses.fields(SweepSettings)} - {"constants"}
    bad = set(settings) - keys
    if bad:
        raise FastsimInputError(f"[sweep] in {path}", sorted(bad), "keys among " + ", ".join(sorted(keys)))
    return dict(t["axes"]), dict(settings)


# ---------------------------------------------------------------------------------------------
# Point ids
# ---------------------------------------------------------------------------------------------

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _h64(text: str) -> np.uint64:
    return np.uint64(int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little"))


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on uint64 arrays (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        h = h ^ (h >> np.uint64(30))
        h = h * np.uint64(0xBF58476D1CE4E5B9)
        h = h ^ (h >> np.uint64(27))
        h = h * np.uint64(0x94D049BB133111EB)
        return h ^ (h >> np.uint64(31))


def _point_ids(grid: SweepGrid, codes: dict, n: int) -> np.ndarray:
    """uint64 ids: fold the hashes of ``axis=value`` over every axis in canonical order.

    An absent axis contributes its default (a name list such as the default GPUs, or a sentinel
    meaning "the scenario's value"), so two points differ in id exactly when their axis values do.
    """
    h = np.full(n, _h64("fastsim-sweep-point-v1"), dtype=np.uint64)
    for a in AXES:
        if a == "trace":
            continue
        name = "trace" if a == "scenario" and "trace" in grid.given else a
        table = np.array([_h64(f"{name}={_canon(v)}") for v in grid.axes[a]], dtype=np.uint64)
        if a == "layout":
            # the plain TP layout leaves a point's id as it was before layouts existed
            is_tp = np.array([v == "tp" for v in grid.axes[a]], dtype=bool)[codes[a]]
            h = np.where(is_tp, h, _mix(h ^ table[codes[a]]))
            continue
        h = _mix(h ^ table[codes[a]])
    return h


def _hex(ids: np.ndarray) -> np.ndarray:
    """16-digit lower-case hex strings of uint64 ids (object array), without a Python loop per id."""
    ids = np.ascontiguousarray(ids, dtype=np.uint64)
    text = ids.astype(">u8").tobytes().hex().encode("ascii")
    return np.frombuffer(text, dtype="S16").astype("U16").astype(object)


# ---------------------------------------------------------------------------------------------
# The analytic table
# ---------------------------------------------------------------------------------------------

@dataclass
class _Tables:
    """Small lookup tables shared by every chunk of a grid (built once)."""

    models: list
    params: np.ndarray          # unique step-parameter rows
    ptab: np.ndarray            # (n_model_eff, n_gpu, n_prec, n_tp, n_layout) -> params row, -1 (no peak), -2 (refused)
    tps: list
    model_code_of_point_axis: np.ndarray   # (n_model_axis, n_source) -> index into models
    demand: np.ndarray          # (n_source, n_ttft, n_tpot, 8)
    rate: np.ndarray            # (n_source, n_rate)
    ttft: np.ndarray            # (n_source, n_ttft)
    tpot: np.ndarray            # (n_source, n_tpot)
    price: np.ndarray           # (n_price, n_gpu)
    mean_o: np.ndarray          # (n_source,)
    mean_p: np.ndarray
    lat_p: np.ndarray


def _tables(grid: SweepGrid, s: SweepSettings) -> _Tables:
    cat = grid.catalog
    A = grid.axes
    srcs = grid.sources
    # effective models: the model axis, or each source's model
    if A["model"] == (None,):
        names = []
        for src in srcs:
            if src.model not in names:
                names.append(src.model)
        mcode = np.array([[names.index(src.model) for src in srcs]], dtype=np.int64)
    else:
        names = list(A["model"])
        mcode = np.repeat(np.arange(len(names), dtype=np.int64)[:, None], len(srcs), axis=1)
    models = [grid.models[n] for n in names]
    gpus = [cat.gpu(g) for g in A["gpu"]]
    precs = [cat.precision(p) for p in A["precision"]]
    tps = sorted({t for a in ("tp", "prefill_tp", "decode_tp") for t in A[a] if t})
    lays = A["layout"]
    ptab = np.full((len(models), len(gpus), len(precs), len(tps), len(lays)), -1, dtype=np.int64)
    rows = []
    for i, m in enumerate(models):
        for j, g in enumerate(gpus):
            for k, pr in enumerate(precs):
                if pr.flops_key not in g.peak_flops_per_s:
                    continue
                for t_i, tp in enumerate(tps):
                    for l_i, lay in enumerate(lays):
                        dp, ep = layout_degrees(lay, tp)
                        if instance_layout_refusal(m, g, tp, dp, ep) is not None:
                            ptab[i, j, k, t_i, l_i] = -2    # not a plan (SPEC §10: TP divides the heads)
                            continue
                        ptab[i, j, k, t_i, l_i] = len(rows)
                        rows.append(step_params(m, g, pr, tp, s.constants, dp=dp, ep=ep))
    params = np.ascontiguousarray(np.stack(rows)) if rows else np.zeros((1, N_PARAMS))
    ns = len(srcs)
    ttfts = A["ttft_s"]
    tpots = A["tpot_s"]
    rates = A["rate_req_per_s"]
    demand = np.zeros((ns, len(ttfts), len(tpots), 8))
    ttft = np.zeros((ns, len(ttfts)))
    tpot = np.zeros((ns, len(tpots)))
    rate = np.zeros((ns, len(rates)))
    for i, src in enumerate(srcs):
        mp, mo, lp, lo = src.lengths
        for a, v in enumerate(ttfts):
            ttft[i, a] = v if v is not None else src.ttft_s
        for b, v in enumerate(tpots):
            tpot[i, b] = v if v is not None else src.tpot_s
        for r, v in enumerate(rates):
            rate[i, r] = v if v is not None else src.rate_req_per_s
        for a in range(len(ttfts)):
            for b in range(len(tpots)):
                demand[i, a, b] = (mp, mo, lp, lo, ttft[i, a], tpot[i, b], s.tpot_margin, s.ttft_tail)
    price = np.zeros((len(A["price"]), len(gpus)))
    for i, pv in enumerate(A["price"]):
        for j, g in enumerate(gpus):
            if pv == "catalog":
                price[i, j] = g.price_usd_per_hour
            elif isinstance(pv, dict):
                price[i, j] = pv.get(g.name, g.price_usd_per_hour)
            else:
                price[i, j] = pv
    lens = np.array([src.lengths for src in srcs], dtype=np.float64)
    return _Tables(models, params, ptab, tps, mcode, demand, rate, ttft, tpot, price,
                   lens[:, 1].copy(), lens[:, 0].copy(), lens[:, 2].copy())


def _codes(grid: SweepGrid, ix: np.ndarray) -> dict:
    shape = grid.shape
    codes = {}
    stride = 1
    for a, n in zip(reversed(AXES), reversed(shape)):
        codes[a] = (ix // stride) % n
        stride *= n
    return codes


def _analytic_chunk(grid: SweepGrid, s: SweepSettings, T: _Tables, ix: np.ndarray) -> dict:
    """Analytic columns (numpy arrays) of the points ``ix`` (int64, grid order)."""
    from ._analytic_nb import instances_nb as sweep_instances_nb
    A = grid.axes
    c = _codes(grid, ix)
    n = ix.shape[0]
    src = c["scenario"]
    mi = T.model_code_of_point_axis[c["model"], src]
    tp_vals = np.array(A["tp"], dtype=np.int64)[c["tp"]]
    tpos = {t: i for i, t in enumerate(T.tps)}
    def tp_pos(vals):
        lut = np.array([tpos.get(int(v), -1) for v in range(65)], dtype=np.int64)
        return lut[vals]
    pt = np.array(A["prefill_tp"], dtype=np.int64)[c["prefill_tp"]]
    dt = np.array(A["decode_tp"], dtype=np.int64)[c["decode_tp"]]
    pt = np.where(pt > 0, pt, tp_vals)
    dt = np.where(dt > 0, dt, tp_vals)
    disagg = np.array([m == "disaggregated" for m in A["mode"]])[c["mode"]]
    tp_a = np.where(disagg, dt, tp_vals)          # colocated instance or decode side
    row_a = T.ptab[mi, c["gpu"], c["precision"], tp_pos(tp_a), c["layout"]]
    row_b = T.ptab[mi, c["gpu"], c["precision"], tp_pos(pt), c["layout"]]
    nT, nP = len(A["ttft_s"]), len(A["tpot_s"])
    drow = (src * nT + c["ttft_s"]) * nP + c["tpot_s"]
    chunk_vals = np.array([0 if v == _AUTO else v for v in A["chunk_tokens"]], dtype=np.int64)
    chunk = np.where(disagg, 0, chunk_vals[c["chunk_tokens"]])
    mb = np.array(A["max_batch"], dtype=np.int64)[c["max_batch"]]
    # unique instance rows: (params row, demand row, chunk, max_batch)
    nd = T.demand.shape[0] * nT * nP
    cu, cinv = np.unique(chunk, return_inverse=True)
    mu, minv = np.unique(mb, return_inverse=True)
    ok_peak = (row_a >= 0) & ((row_b >= 0) | ~disagg)
    refused = (row_a == -2) | (disagg & (row_b == -2))
    key_a = ((np.maximum(row_a, 0) * nd + drow) * len(cu) + cinv) * len(mu) + minv
    key_b = ((np.maximum(row_b, 0) * nd + drow) * len(cu) + cinv) * len(mu) + minv
    both = np.concatenate([key_a, key_b])
    space = max(T.params.shape[0], 1) * nd * len(cu) * len(mu)
    if space <= max(8 * both.shape[0], 1 << 20):
        # small key space: uniqueness by a presence table, O(n + space), no sort (same result as np.unique)
        present = np.zeros(space, dtype=bool)
        present[both] = True
        keys = np.flatnonzero(present)
        inv = (np.cumsum(present) - 1)[both]
    else:
        keys, inv = np.unique(both, return_inverse=True)
    inv_a, inv_b = inv[:n], inv[n:]
    k_mb = keys % len(mu)
    rest = keys // len(mu)
    k_c = rest % len(cu)
    rest //= len(cu)
    k_d = rest % nd
    k_p = rest // nd
    m = keys.shape[0]
    f8 = lambda: np.empty(m, dtype=np.float64)  # noqa: E731
    i8 = lambda: np.empty(m, dtype=np.int64)  # noqa: E731
    st, cst = i8(), i8()
    dcap, db, dstep, pcap, prho, ps = f8(), i8(), f8(), f8(), f8(), f8()
    ccap, cb, cc, cstep = f8(), i8(), i8(), f8()
    sweep_instances_nb(T.params, np.ascontiguousarray(k_p), np.ascontiguousarray(T.demand.reshape(-1, 8)),
                       np.ascontiguousarray(k_d), cu[k_c].astype(np.float64), np.ascontiguousarray(mu[k_mb]),
                       np.asarray(s.chunk_tokens, dtype=np.float64),
                       st, dcap, db, dstep, pcap, prho, ps, cst, ccap, cb, cc, cstep)
    rate = T.rate[src, c["rate_req_per_s"]]
    mean_o = T.mean_o[src]
    price = T.price[c["price"], c["gpu"]]
    inst_vals = np.array([0 if v == _AUTO else v for v in A["instances"]], dtype=np.int64)[c["instances"]]
    def side_inst(name):
        vals = A[name]
        if vals == ("",):
            return inst_vals
        return np.array([0 if v == _AUTO else v for v in vals], dtype=np.int64)[c[name]]
    # colocated
    col_ok = ok_peak & (cst[inv_a] == AK.OK)
    cap_c = np.where(col_ok, ccap[inv_a], 0.0)
    n_c = np.where(inst_vals > 0, inst_vals, instances_needed(rate, cap_c))
    # disaggregated
    cap_p = np.where(ok_peak, pcap[inv_b], 0.0)
    cap_d = np.where(ok_peak, dcap[inv_a], 0.0)
    dis_ok = ok_peak & (cap_p > 0) & (cap_d > 0)
    pi, di = side_inst("prefill_instances"), side_inst("decode_instances")
    n_p = np.where(pi > 0, pi, instances_needed(rate, cap_p))
    n_d = np.where(di > 0, di, instances_needed(rate, cap_d))
    ok = np.where(disagg, dis_ok, col_ok)
    gpus = np.where(disagg, pt * n_p + dt * n_d, tp_vals * n_c)
    capacity = np.where(disagg, np.minimum(n_p * cap_p, n_d * cap_d), n_c * cap_c)
    reason = np.full(n, _R_OK, dtype=np.int64)
    cs = np.where(ok_peak, cst[inv_a], AK.OK)
    reason = np.where(~disagg & (cs == AK.NO_FIT), _R_NOFIT, reason)
    reason = np.where(~disagg & (cs == AK.TPOT_UNREACHABLE), _R_TPOT, reason)
    reason = np.where(~disagg & (cs == AK.TTFT_UNREACHABLE), _R_TTFT, reason)
    pre_bad = disagg & ok_peak & ~(cap_p > 0)
    dec_bad = disagg & ok_peak & (cap_p > 0) & ~(cap_d > 0)
    reason = np.where(pre_bad, np.where(st[inv_b] == AK.NO_FIT, _R_PRE_NOFIT, _R_PRE_TTFT), reason)
    reason = np.where(dec_bad, np.where(st[inv_a] == AK.NO_FIT, _R_DEC_NOFIT, _R_DEC_TPOT), reason)
    reason = np.where(~ok_peak, np.where(refused, _R_LAYOUT, _R_NOPEAK), reason)
    below = ok & (capacity < rate * (1.0 - 1e-9))
    reason = np.where(below, _R_BELOW, reason)
    feasible = ok & ~below
    with np.errstate(divide="ignore", invalid="ignore"):
        cost = np.where(feasible, gpus * price / (rate * mean_o * 3600.0) * 1e6, np.inf)
        eff_c = tp_vals * price / (cap_c * mean_o * 3600.0) * 1e6
        eff_d = (pt / cap_p + dt / cap_d) * price / (mean_o * 3600.0) * 1e6
        eff = np.where(ok, np.where(disagg, eff_d, eff_c), np.inf)
        tok_gpu = np.where(feasible, rate * mean_o / gpus, np.nan)
    lat_p = T.lat_p[src]
    chunk_eff = np.where(disagg, 0, cc[inv_a])
    step_c = cstep[inv_a]
    with np.errstate(invalid="ignore"):
        ttft_c = np.ceil(lat_p / np.maximum(chunk_eff, 1)) * step_c
        ttft_d = ps[inv_b] + lat_p * T.params[np.maximum(row_b, 0), P_KVPG] / T.params[np.maximum(row_b, 0), P_NET_BW]
    a_ttft = np.where(ok, np.where(disagg, ttft_d, ttft_c), np.nan)
    a_tpot = np.where(ok, np.where(disagg, dstep[inv_a], step_c), np.nan)
    model_names = np.array([m.name for m in T.models], dtype=object)
    src_labels = np.array([x.label for x in grid.sources], dtype=object)
    price_labels = np.array([_price_label(v) for v in A["price"]], dtype=object)
    col = ~disagg
    return {
        "point_id": _hex(_point_ids(grid, c, n)), "point": ix.astype(np.int64),
        "model": model_names[mi], "gpu": np.array(A["gpu"], dtype=object)[c["gpu"]],
        "precision": np.array(A["precision"], dtype=object)[c["precision"]],
        "mode": np.array(A["mode"], dtype=object)[c["mode"]],
        "tp": _nullable(tp_vals, col), "prefill_tp": _nullable(pt, disagg), "decode_tp": _nullable(dt, disagg),
        "layout": np.array(A["layout"], dtype=object)[c["layout"]],
        "chunk_tokens": _nullable(chunk_eff, col), "max_batch": mb,
        # as the screen: 0 instances where the point is infeasible
        "instances": _nullable(np.where(ok, n_c, 0), col),
        "prefill_instances": _nullable(np.where(ok, n_p, 0), disagg),
        "decode_instances": _nullable(np.where(ok, n_d, 0), disagg),
        "workload": src_labels[src], "rate_req_per_s": rate, "ttft_s": T.ttft[src, c["ttft_s"]],
        "tpot_s": T.tpot[src, c["tpot_s"]], "price": price_labels[c["price"]], "price_usd_per_gpu_hour": price,
        "mean_prompt_tokens": T.mean_p[src], "mean_output_tokens": mean_o,
        "instance_capacity_req_per_s": np.where(disagg, cap_d, cap_c),
        "prefill_capacity_req_per_s": np.where(disagg, cap_p, np.nan),
        "decode_capacity_req_per_s": np.where(disagg, cap_d, np.nan),
        "capacity_req_per_s": np.where(ok, capacity, 0.0),
        "batch": np.where(ok_peak, np.where(disagg, db[inv_a], cb[inv_a]), 0).astype(np.int64),
        "analytic_ttft_s": a_ttft, "analytic_tpot_s": a_tpot,
        "gpus": np.where(ok, gpus, 0).astype(np.int64), "usd_per_hour": np.where(ok, gpus * price, 0.0),
        "usd_per_million_output_tokens": cost, "efficiency_usd_per_million_output_tokens": eff,
        "output_tokens_per_s_per_gpu": tok_gpu, "feasible": feasible, "reason": _REASONS[reason],
    }


def _nullable(values: np.ndarray, valid: np.ndarray) -> pd.arrays.IntegerArray:
    """A nullable Int64 column: ``values`` where ``valid``, missing elsewhere."""
    valid = np.asarray(valid, dtype=bool)
    return pd.arrays.IntegerArray(np.where(valid, values, 0).astype(np.int64), ~valid)


def _empty_sim(n: int) -> dict:
    nan = np.full(n, np.nan)
    return {"verified": np.zeros(n, bool), "sim_runs": np.zeros(n, np.int64), "sim_measured": np.zeros(n, np.int64),
            "sim_rejected": np.zeros(n, np.int64), "sim_attainment": nan.copy(), "sim_ttft_p90_s": nan.copy(),
            "sim_tpot_p90_s": nan.copy(), "sim_overloaded": np.zeros(n, bool), "sim_passed": np.zeros(n, bool),
            "sim_capacity_req_per_s": nan.copy(), "sim_capacity_ci95_lo_req_per_s": nan.copy(),
            "sim_capacity_ci95_hi_req_per_s": nan.copy()}


def _frame(cols: dict) -> pd.DataFrame:
    """The table of freshly computed columns (:func:`_analytic_chunk`, :func:`_empty_sim`), typed
    as :func:`_typed` types them but without its checks: the string columns are object arrays of
    str with no missing value, the others already have their dtypes."""
    out = {}
    for name, dt in COLUMNS:
        v = cols[name]
        if dt == "str":
            out[name] = pd.Series(v, dtype=object, copy=False)
        elif dt == "Int64":
            out[name] = pd.Series(v, dtype="Int64", copy=False)
        else:
            out[name] = pd.Series(np.asarray(v, dtype=dt), copy=False)
    return pd.DataFrame(out, copy=False)


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    """Columns in :data:`COLUMNS` order with their dtypes (strings as object)."""
    out = {}
    for name, dt in COLUMNS:
        col = df[name]
        if dt == "str":
            out[name] = col.astype(object).where(col.notna(), "").astype(str).astype(object)
        elif dt == "bool":
            out[name] = col.astype(bool)
        elif dt == "Int64":
            out[name] = pd.array(col.astype(object).where(col.notna(), None), dtype="Int64") \
                if col.dtype == object else col.astype("Int64")
        else:
            out[name] = col.astype(dt)
    return pd.DataFrame(out, index=df.index)


def analytic_table(grid, *, catalog: Catalog | None = None, settings: SweepSettings | None = None,
                   chunk_points: int = 1_000_000) -> pd.DataFrame:
    """The analytic result of every point of a grid (no simulation), vectorized.

    Parameters
    ----------
    grid : SweepGrid or mapping of axes
    catalog : Catalog, optional
        Used when ``grid`` is a mapping.
    settings : SweepSettings, optional
        Margins, chunk set and step constants (defaults as the planner's).
    chunk_points : int
        Points evaluated per kernel call (bounds memory).

    Returns
    -------
    pandas.DataFrame
        One row per point in grid order, the columns of :data:`COLUMNS` (simulation columns empty:
        ``verified`` False, numbers NaN).

    Raises
    ------
    FastsimInputError
        A bad grid (see :func:`make_grid`).
    """
    grid = grid if isinstance(grid, SweepGrid) else make_grid(grid, catalog)
    s = settings or SweepSettings()
    T = _tables(grid, s)
    parts = []
    for a in range(0, grid.n_points, chunk_points):
        ix = np.arange(a, min(a + chunk_points, grid.n_points), dtype=np.int64)
        cols = _analytic_chunk(grid, s, T, ix)
        cols.update(_empty_sim(ix.shape[0]))
        parts.append(_frame(cols))
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]


# ---------------------------------------------------------------------------------------------
# Selection and batched verification
# ---------------------------------------------------------------------------------------------

def _select(df: pd.DataFrame, s: SweepSettings) -> np.ndarray:
    """Boolean mask of the points to simulate."""
    feas = df["feasible"].to_numpy()
    if s.verify == "none":
        return np.zeros(len(df), bool)
    if s.verify == "all":
        return feas.copy()
    f = df[feas]
    order = f.sort_values(["usd_per_million_output_tokens", "efficiency_usd_per_million_output_tokens",
                           "gpus", "point"], kind="stable")
    rank = order.groupby(["model", "workload", "rate_req_per_s", "ttft_s", "tpot_s", "price"],
                         sort=False).cumcount()
    chosen = order.index[rank.to_numpy() < s.top_k]
    mask = np.zeros(len(df), bool)
    mask[df.index.get_indexer(chosen)] = True
    return mask


def _workload_seed(root: int, label: str) -> np.random.SeedSequence:
    h = int(_h64(f"workload={label}"))
    return np.random.SeedSequence(int(root), spawn_key=(h & 0xFFFFFFFF, h >> 32))


def _workload_seed_int(root: int, label: str) -> int:
    """An integer root seed (63 bits) for the capacity search of a workload: a hash of root and workload."""
    h = hashlib.blake2b(f"capacity:{int(root)}:workload={label}".encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(h, "little") >> 1


@dataclass(frozen=True)
class _Task:
    """One chunk of points to simulate (picklable, sent to Dask workers as is)."""

    points: np.ndarray          # int64 grid index
    mode: np.ndarray            # 1 = disaggregated
    p_a: np.ndarray             # (k, N_PARAMS) colocated / decode params
    p_b: np.ndarray             # (k, N_PARAMS) prefill params
    n_a: np.ndarray             # colocated instances / decode instances
    n_b: np.ndarray             # prefill instances
    chunk: np.ndarray
    max_batch: np.ndarray
    src: np.ndarray             # index into sources
    rate: np.ndarray
    ttft: np.ndarray
    tpot: np.ndarray
    max_ctx: np.ndarray
    capacity_analytic: np.ndarray
    plans: tuple                # analytic Plan per point (capacity search only)
    sources: tuple
    models: tuple               # Model per point (capacity search only)
    settings: SweepSettings
    catalog: Catalog | None
    max_requests_per_call: int


def _build_task(df: pd.DataFrame, rows: np.ndarray, grid: SweepGrid, T: _Tables, s: SweepSettings,
                max_requests_per_call: int) -> _Task:
    from .analytic import Plan
    sub = df.iloc[rows]
    cat = grid.catalog
    k = len(sub)
    p_a = np.zeros((k, N_PARAMS))
    p_b = np.zeros((k, N_PARAMS))
    plans, models = [], []
    src_index = {x.label: i for i, x in enumerate(grid.sources)}
    cache = {}
    for j, r in enumerate(sub.itertuples(index=False)):
        m = grid.models.get(r.model) or cat.model(r.model)
        def prm(tp):
            key = (r.model, r.gpu, r.precision, int(tp), r.layout)
            if key not in cache:
                dp, ep = layout_degrees(r.layout, int(tp))
                cache[key] = step_params(m, cat.gpu(r.gpu), cat.precision(r.precision), int(tp), s.constants,
                                         dp=dp, ep=ep)
            return cache[key]
        dis = r.mode == "disaggregated"
        p_a[j] = prm(r.decode_tp if dis else r.tp)
        p_b[j] = prm(r.prefill_tp) if dis else p_a[j]
        models.append(m)
        if s.capacity:
            if dis:
                plans.append(Plan(model=r.model, gpu=r.gpu, precision=r.precision, mode="disaggregated",
                                  tp=int(r.decode_tp), instances=int(r.decode_instances),
                                  prefill_tp=int(r.prefill_tp), prefill_instances=int(r.prefill_instances),
                                  decode_tp=int(r.decode_tp), decode_instances=int(r.decode_instances),
                                  batch=int(r.batch), prefill_capacity_req_per_s=float(r.prefill_capacity_req_per_s),
                                  decode_capacity_req_per_s=float(r.decode_capacity_req_per_s),
                                  instance_capacity_req_per_s=float(r.decode_capacity_req_per_s),
                                  price_usd_per_gpu_hour=float(r.price_usd_per_gpu_hour), layout=r.layout))
            else:
                plans.append(Plan(model=r.model, gpu=r.gpu, precision=r.precision, mode="colocated", tp=int(r.tp),
                                  instances=int(r.instances), chunk_tokens=int(r.chunk_tokens), batch=int(r.batch),
                                  instance_capacity_req_per_s=float(r.instance_capacity_req_per_s),
                                  price_usd_per_gpu_hour=float(r.price_usd_per_gpu_hour), layout=r.layout))
    dis = (sub["mode"] == "disaggregated").to_numpy()
    return _Task(
        points=sub["point"].to_numpy(np.int64), mode=dis.astype(np.int64), p_a=p_a, p_b=p_b,
        n_a=np.where(dis, _ints(sub["decode_instances"]), _ints(sub["instances"])),
        n_b=_ints(sub["prefill_instances"]), chunk=_ints(sub["chunk_tokens"]),
        max_batch=sub["max_batch"].to_numpy(np.int64),
        src=np.array([src_index[w] for w in sub["workload"]], dtype=np.int64),
        rate=sub["rate_req_per_s"].to_numpy(np.float64), ttft=sub["ttft_s"].to_numpy(np.float64),
        tpot=sub["tpot_s"].to_numpy(np.float64),
        max_ctx=np.array([m.max_context_tokens for m in models], dtype=np.int64),
        capacity_analytic=sub["capacity_req_per_s"].to_numpy(np.float64),
        plans=tuple(plans), sources=grid.sources, models=tuple(models) if s.capacity else (),
        settings=s, catalog=cat if s.capacity else None, max_requests_per_call=int(max_requests_per_call))


def _ints(col: pd.Series) -> np.ndarray:
    """A nullable integer column as int64, missing values as 0 (the kernels' "does not apply")."""
    return col.fillna(0).to_numpy(np.int64)


def _run_task(task: _Task) -> dict:
    """Simulate the points of a task: batches of (configuration x seed) runs, one kernel call each.

    Returns a dict of simulation columns (arrays aligned with ``task.points``) plus ``point``.
    """
    from . import workload as W
    from .search import SLO, _pooled
    from .sim import ColocatedPlan, DisaggregatedPlan, simulate_batch
    s = task.settings
    k = task.points.shape[0]
    out = _empty_sim(k)
    out["point"] = task.points
    window = (0.2, 0.8)
    wl_cache: dict = {}

    def workloads(i):
        src = task.sources[task.src[i]]
        key = (int(task.src[i]), float(task.rate[i]))
        if key not in wl_cache:
            if src.kind == "trace":
                wl = src.obj if key[1] == src.rate_req_per_s else src.obj.rescaled(key[1])
                wl_cache[key] = ([(wl.arrival_s, wl.prompt_tokens, wl.output_tokens)],
                                 float(np.nextafter(wl.duration_s, np.inf)))
            else:
                kids = W.seeds_for(_workload_seed(s.seed, src.label), s.seeds)
                ws = [W.synthesize(src.obj, key[1], s.horizon_s, kid) for kid in kids]
                wl_cache[key] = ([(w.arrival_s, w.prompt_tokens, w.output_tokens) for w in ws], s.horizon_s)
        return wl_cache[key]

    # group runs by (horizon, max context): simulate_batch takes one of each per call
    groups: dict = {}
    for i in range(k):
        wls, hz = workloads(i)
        groups.setdefault((hz, int(task.max_ctx[i])), []).append(i)
    for (hz, ctx), idx in groups.items():
        batch_plans, batch_works, owners = [], [], []
        n_req = 0

        def flush():
            if not batch_plans:
                return
            res = simulate_batch(batch_plans, batch_works, horizon_s=hz, ttft_slo_s=1.0, tpot_slo_s=1.0,
                                 max_context_tokens=ctx, measure_window=window, full=True)
            start = 0
            for i, nrun in owners:
                v = _pooled(res[start:start + nrun], SLO(float(task.ttft[i]), float(task.tpot[i])), window, hz)
                start += nrun
                out["verified"][i] = True
                out["sim_runs"][i] = v.runs
                out["sim_measured"][i] = v.measured
                out["sim_rejected"][i] = v.rejected
                out["sim_attainment"][i] = v.attainment
                out["sim_ttft_p90_s"][i] = v.ttft_p90_s
                out["sim_tpot_p90_s"][i] = v.tpot_p90_s
                out["sim_overloaded"][i] = v.overloaded
                out["sim_passed"][i] = v.passed
            batch_plans.clear()
            batch_works.clear()
            owners.clear()

        for i in idx:
            if task.mode[i]:
                plan = DisaggregatedPlan(task.p_b[i], int(task.n_b[i]), task.p_a[i], int(task.n_a[i]),
                                         decode_max_batch=int(task.max_batch[i]))
            else:
                plan = ColocatedPlan(task.p_a[i], int(task.n_a[i]), int(task.chunk[i]), int(task.max_batch[i]))
            wls, _ = workloads(i)
            for w in wls:
                batch_plans.append(plan)
                batch_works.append(w)
                n_req += w[0].shape[0]
            owners.append((i, len(wls)))
            if n_req >= task.max_requests_per_call:
                flush()
                n_req = 0
        flush()
    if s.capacity:
        from .search import max_sustainable_rate
        for i in range(k):
            src = task.sources[task.src[i]]
            if src.kind != "scenario":
                continue
            r = max_sustainable_rate(task.plans[i], src.obj, SLO(float(task.ttft[i]), float(task.tpot[i])),
                                     seeds=s.seeds, horizon_s=s.horizon_s, rel_tol=s.capacity_tol,
                                     seed=_workload_seed_int(s.seed, src.label), catalog=task.catalog,
                                     constants=s.constants, model=task.models[i])
            out["sim_capacity_req_per_s"][i] = r.rate_req_per_s
            out["sim_capacity_ci95_lo_req_per_s"][i] = r.ci95[0]
            out["sim_capacity_ci95_hi_req_per_s"][i] = r.ci95[1]
    return out


# ---------------------------------------------------------------------------------------------
# Output files
# ---------------------------------------------------------------------------------------------

def _format(path: str) -> str:
    ext = os.path.splitext(str(path))[1].lower()
    if ext == ".csv":
        return "csv"
    if ext in (".json", ".jsonl"):
        return "jsonl"
    if ext == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise FastsimInputError("--out", path, "a .csv or .json file (.parquet needs pyarrow: "
                                    "pip install pyarrow)") from None
        return "parquet"
    raise FastsimInputError("--out", path, "a file ending in .parquet, .csv, .json or .jsonl")


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
        The columns of :data:`COLUMNS` with their dtypes; an empty frame if nothing was written.

    Raises
    ------
    FastsimInputError
        An unknown extension or a file that is not a sweep table.
    """
    fmt = _format(path)
    if not os.path.exists(path):
        return _typed(pd.DataFrame({c: pd.Series(dtype=object if d == "str" else d) for c, d in COLUMNS}))
    if fmt == "csv":
        _repair_tail(path)
        df = pd.read_csv(path, dtype={c: (str if d == "str" else d) for c, d in COLUMNS if d in ("str", "Int64")},
                         keep_default_na=False,
                         na_values={c: ["", "nan"] for c, d in COLUMNS if d in ("float64", "Int64")})
    elif fmt == "jsonl":
        _repair_tail(path)
        with open(path, "r", encoding="utf-8") as fh:
            recs = [_from_json_row(json.loads(ln)) for ln in fh if ln.strip()]
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
_COLOCATED_ONLY = ("tp", "instances", "chunk_tokens", "instance_capacity_req_per_s")
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


# ---------------------------------------------------------------------------------------------
# run_sweep
# ---------------------------------------------------------------------------------------------

def _client(scheduler, workers):
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise FastsimInputError("--scheduler/--workers", scheduler or workers,
                                "an installed Dask (pip install 'fastsim[dask]')") from None
    if scheduler:
        return Client(scheduler), None
    cluster = LocalCluster(n_workers=int(workers), threads_per_worker=1, processes=True, dashboard_address=":0")  # any free port, never a clash
    return Client(cluster), cluster


def run_sweep(grid, *, catalog: Catalog | None = None, settings: SweepSettings | None = None,
              out: str | None = None, resume: bool = False, scheduler: str | None = None,
              workers: int | None = None, progress: bool | None = None, chunk_points: int = 20_000,
              chunk_verify: int = 128, max_requests_per_call: int = 3_000_000,
              plot_dir: str | None = None, max_plots: int | None = MAX_PLOTS, **settings_kw) -> pd.DataFrame:
    """Run a sweep: analytic table, batched verification, optional capacity, written in chunks.

    Parameters
    ----------
    grid : SweepGrid, mapping of axes, or str
        A validated grid, a mapping for :func:`make_grid`, or the path of a grid file
        (:func:`load_grid`; its ``[sweep]`` table gives default settings).
    catalog : Catalog, optional
    settings : SweepSettings, optional
        Or give its fields as keyword arguments (``verify="all"``, ``seeds=4``, ...).
    out : str, optional
        Output file: ``.parquet`` (a directory of part files; needs pyarrow), ``.csv`` or
        ``.json`` / ``.jsonl`` (JSON Lines). Written chunk by chunk, rows in completion order;
        :func:`read_table` returns them in grid order. A ``FILE.sweep.json`` beside it records the
        grid and settings.
    resume : bool
        Keep the points already in ``out`` (by point id) and compute only the others. Without it
        an existing ``out`` is replaced.
    scheduler : str, optional
        Address of a running Dask scheduler; simulation chunks are sent there.
    workers : int, optional
        Start a local Dask cluster of this many worker processes instead.
    progress : bool, optional
        Show a tqdm bar on stderr (default: when stderr is a terminal).
    chunk_points, chunk_verify : int
        A chunk closes at this many points, or at this many points to simulate.
    max_requests_per_call : int
        Simulated requests per ``simulate_batch`` call (bounds memory: about 100 bytes each).
    plot_dir : str, optional
        Write the Pareto plots there (:func:`plot_sweep`).
    max_plots : int or None, default 12
        Plot the first ``max_plots`` questions only (None: every question).

    Returns
    -------
    pandas.DataFrame
        Every point of the grid, in grid order, the columns of :data:`COLUMNS`.

    Raises
    ------
    FastsimInputError
        A bad grid or setting (before any work starts), an unknown output extension, a resume
        whose grid or settings differ from the interrupted run's, Dask requested but not installed.
    """
    import sys
    file_settings = {}
    if isinstance(grid, (str, os.PathLike)):
        axes, file_settings = load_grid(os.fspath(grid))
        grid = make_grid(axes, catalog)
    elif not isinstance(grid, SweepGrid):
        grid = make_grid(grid, catalog)
    if settings is None:
        kw = dict(file_settings)
        kw.update(settings_kw)
        if "chunk_tokens" in kw:
            kw["chunk_tokens"] = _tuple(kw["chunk_tokens"])
        try:
            settings = SweepSettings(**kw)
        except TypeError as exc:
            raise FastsimInputError("sweep settings", sorted(kw), f"fields of SweepSettings ({exc})") from None
    s = settings
    for name, v in (("chunk_points", chunk_points), ("chunk_verify", chunk_verify),
                    ("max_requests_per_call", max_requests_per_call)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise FastsimInputError(name, v, "an integer >= 1")
    if workers is not None and (isinstance(workers, bool) or int(workers) != workers or workers < 1):
        raise FastsimInputError("--workers", workers, "an integer >= 1")
    fmt = _format(out) if out else None
    meta = {"table_version": TABLE_VERSION, "axes": grid.describe(), "settings": s.to_dict()}
    if out:
        mp = _meta_path(out)
        if resume and os.path.exists(mp):
            with open(mp, "r", encoding="utf-8") as fh:
                old = json.load(fh)
            if old.get("table_version", 1) != TABLE_VERSION:
                raise FastsimInputError("--resume", out, f"a table of this fastsim version (it was written with "
                                        f"table version {old.get('table_version', 1)}, this is {TABLE_VERSION}); "
                                        "start afresh without --resume")
            if old != json.loads(json.dumps(meta)):
                raise FastsimInputError("--resume", out, "the grid and settings of the run that wrote it "
                                        f"(see {os.path.basename(mp)}); start afresh without --resume")
        if not resume:
            if os.path.isdir(out):
                for f in os.listdir(out):
                    if f.endswith(".parquet") or f.endswith(".tmp"):
                        os.remove(os.path.join(out, f))
            elif os.path.exists(out):
                os.remove(out)
        with open(mp, "w", encoding="utf-8") as fh:
            json.dump(meta, fh, indent=1)
    # 1. analytic table of every point (cheap, deterministic)
    table = analytic_table(grid, settings=s)
    sel = _select(table, s)
    done = np.zeros(len(table), bool)
    previous = None
    part = 0
    if out and resume:
        previous = read_table(out)
        done = table["point_id"].isin(set(previous["point_id"])).to_numpy()
        if fmt == "parquet" and os.path.isdir(out):
            part = len([f for f in os.listdir(out) if f.endswith(".parquet")])
    todo = np.flatnonzero(~done)
    # 2. chunks in grid order
    chunks = []
    start = 0
    while start < todo.shape[0]:
        stop = min(start + chunk_points, todo.shape[0])
        csum = np.cumsum(sel[todo[start:stop]])
        over = np.searchsorted(csum, chunk_verify, side="right")
        stop = min(stop, start + max(int(over), 1))
        chunks.append(todo[start:stop])
        start = stop
    T = _tables(grid, s) if sel.any() else None
    show = progress if progress is not None else sys.stderr.isatty()
    bar = None
    if show:
        from tqdm import tqdm
        bar = tqdm(total=int(todo.shape[0]), unit="point", desc="sweep", file=sys.stderr, leave=False)
    results = []

    def finish(rows, sim):
        nonlocal part
        chunk = table.iloc[rows].copy()
        if sim is not None:
            pos = {int(p): j for j, p in enumerate(sim["point"])}
            idx = np.array([pos.get(int(p), -1) for p in chunk["point"]])
            has = idx >= 0
            for c in _SIM_COLUMNS:
                col = chunk[c].to_numpy().copy()
                col[has] = np.asarray(sim[c])[idx[has]]
                chunk[c] = col
        chunk = _typed(chunk)
        if out:
            _write_chunk(out, fmt, chunk, part)
            part += 1
        results.append(chunk)
        if bar is not None:
            bar.update(len(rows))

    client = cluster = None
    try:
        if (scheduler or workers) and any(sel[c].any() for c in chunks):
            client, cluster = _client(scheduler, workers)
        futures = {}
        for rows in chunks:
            vrows = rows[sel[rows]]
            if vrows.shape[0] == 0:
                finish(rows, None)
                continue
            task = _build_task(table, vrows, grid, T, s, max_requests_per_call)
            if client is not None:
                futures[client.submit(_run_task, task, pure=False)] = rows
            else:
                finish(rows, _run_task(task))
        if futures:
            from dask.distributed import as_completed
            for fut in as_completed(list(futures)):
                finish(futures[fut], fut.result())
    finally:
        if bar is not None:
            bar.close()
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
    frames = [f for f in ([previous] if previous is not None else []) + results if len(f)]
    keep = table["point_id"].to_numpy()
    if frames:
        full = pd.concat(frames, ignore_index=True)
        full = full[full["point_id"].isin(set(keep))].drop_duplicates("point_id", keep="last")
        full = _typed(full.sort_values("point", kind="stable").reset_index(drop=True))
    else:
        full = table.iloc[:0]
    if plot_dir:
        plot_sweep(full, plot_dir, max_plots=max_plots)
    return full


# ---------------------------------------------------------------------------------------------
# Pareto frontier and plots
# ---------------------------------------------------------------------------------------------

def pareto_front(x, y, *, maximize=(False, False)) -> np.ndarray:
    """Mask of the points no other point beats on both coordinates (the Pareto frontier).

    Parameters
    ----------
    x, y : array_like of float, shape (n,)
        Coordinates; NaN points are never on the frontier.
    maximize : (bool, bool)
        Whether larger is better on x and on y (default: smaller is better on both).

    Returns
    -------
    ndarray(bool) of shape (n,)
        True on the frontier. Ties: of identical points all are kept.

    Notes
    -----
    Inputs are not validated; ``x`` and ``y`` must have the same length.
    """
    x = np.asarray(x, dtype=np.float64) * (-1.0 if maximize[0] else 1.0)
    y = np.asarray(y, dtype=np.float64) * (-1.0 if maximize[1] else 1.0)
    ok = np.isfinite(x) & np.isfinite(y)
    idx = np.flatnonzero(ok)
    order = idx[np.lexsort((y[idx], x[idx]))]
    mask = np.zeros(x.shape[0], bool)
    best = np.inf          # lowest y among points of strictly smaller x
    k = 0
    while k < order.shape[0]:
        j = k
        while j < order.shape[0] and x[order[j]] == x[order[k]]:
            j += 1
        ymin = y[order[k]]  # sorted by y within equal x
        if ymin < best:
            for i in order[k:j]:
                if y[i] == ymin:
                    mask[i] = True
            best = ymin
        k = j
    return mask


def questions(df: pd.DataFrame) -> list:
    """The questions of a sweep table, in grid order of their first point.

    A question is one setting of :data:`QUESTION` (model, workload, rate, TTFT and TPOT targets,
    price): the plans of one question compete for one answer, and ``top-k-per-scenario`` verifies
    the ``top_k`` cheapest of each.

    Parameters
    ----------
    df : pandas.DataFrame
        A sweep table (columns of :data:`COLUMNS`, at least those of :data:`QUESTION` and
        ``point``).

    Returns
    -------
    list of (dict, ndarray(int64) of shape (k,))
        Per question its column values and the positions (``iloc``) of its k rows, sorted;
        empty for an empty table.
    """
    if not len(df):
        return []
    grouped = df.groupby(list(QUESTION), sort=False, dropna=False).indices
    out = [(dict(zip(QUESTION, key)), np.sort(rows)) for key, rows in grouped.items()]
    pos = df["point"].to_numpy()
    out.sort(key=lambda q: pos[q[1]].min())
    return out


def _chosen(g: pd.DataFrame):
    """Label of the answer of one question: the cheapest verified passing point when any point of the
    question was verified (None if none passed), else the cheapest analytically feasible one."""
    cand = g[g["verified"] & g["sim_passed"]] if g["verified"].any() else g[g["feasible"]]
    if not len(cand):
        return None
    return cand.sort_values(["usd_per_million_output_tokens", "efficiency_usd_per_million_output_tokens", "gpus",
                             "point"], kind="stable").index[0]


def _safe(text) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(text))


def _question_file(q: dict, with_model: bool) -> str:
    parts = ["pareto"] + ([_safe(q["model"])] if with_model else []) + [
        _safe(q["workload"]), f"{q['rate_req_per_s']:g}rps", f"ttft{q['ttft_s']:g}s",
        f"tpot{q['tpot_s'] * 1e3:g}ms", _safe(q["price"])]
    return "_".join(parts) + ".png"


def plot_sweep(df: pd.DataFrame, out_dir: str, *, max_plots: int | None = MAX_PLOTS) -> list:
    """Pareto plots of a sweep table, one PNG per question (matplotlib, Agg backend).

    A question is one model x workload x rate x TTFT target x TPOT target x price of the table
    (:func:`questions`); only its own points are drawn, in three panels: cost per million output
    tokens against P90 TPOT and against P90 TTFT, and output tokens/s per GPU against tokens/s per
    user (1 / TPOT), latencies on log axes, the targets as dashed lines. Latencies are the
    simulated P90 where a point was verified, the analytic estimate elsewhere. Verified points that
    passed are drawn filled with a black edge, unverified feasible points faint, verified points
    that failed as grey crosses; analytically infeasible points have no cost and are only counted
    in the title. The Pareto frontier is over the points that did not fail; the chosen plan,
    circled, is the cheapest passing point of the question when any was verified (none if none
    passed), else its cheapest analytically feasible point.

    Parameters
    ----------
    df : pandas.DataFrame
        A sweep table (:func:`run_sweep`, :func:`read_table`), or a selection of its rows.
    out_dir : str
        Directory to write (created if needed).
    max_plots : int or None, default 12
        Plot only the first questions in grid order (None: all). Select rows to plot others.

    Returns
    -------
    list of str
        The files written, one per question plotted.

    Raises
    ------
    FastsimInputError
        ``max_plots`` not None nor an integer >= 1.
    OSError
        ``out_dir`` cannot be created or a file cannot be written.
    """
    from .plots import _figure
    if max_plots is not None and (isinstance(max_plots, bool) or int(max_plots) != max_plots or max_plots < 1):
        raise FastsimInputError("max_plots", max_plots, "an integer >= 1 or None")
    os.makedirs(out_dir, exist_ok=True)
    qs = questions(df)
    if max_plots is not None:
        qs = qs[:int(max_plots)]
    with_model = df["model"].nunique() > 1
    paths = []
    for q, rows in qs:
        g = df.iloc[rows].reset_index(drop=True)
        feas = g["feasible"].to_numpy(bool)
        ver = g["verified"].to_numpy(bool)
        passed = ver & g["sim_passed"].to_numpy(bool)
        failed = ver & ~passed
        tpot = np.where(ver, g["sim_tpot_p90_s"], g["analytic_tpot_s"]).astype(np.float64)
        ttft = np.where(ver, g["sim_ttft_p90_s"], g["analytic_ttft_s"]).astype(np.float64)
        cost = g["usd_per_million_output_tokens"].to_numpy(np.float64)
        per_gpu = g["output_tokens_per_s_per_gpu"].to_numpy(np.float64)
        with np.errstate(divide="ignore"):
            per_user = 1.0 / tpot
        ch = _chosen(g)
        disagg = (g["mode"] == "disaggregated").to_numpy()
        fig, axes = _figure(1, 3, (17, 5.2))
        for ax, x, y, xl, yl, mx, target in (
                (axes[0], tpot * 1e3, cost, "P90 TPOT (ms)", "$ per million output tokens",
                 (False, False), q["tpot_s"] * 1e3),
                (axes[1], ttft, cost, "P90 TTFT (s)", "$ per million output tokens",
                 (False, False), q["ttft_s"]),
                (axes[2], per_user, per_gpu, "tokens/s per user (1 / P90 TPOT)",
                 "output tokens/s per GPU", (True, True), 1.0 / q["tpot_s"])):
            drawn = feas & np.isfinite(x) & (x > 0) & np.isfinite(y)
            for mode_sel, mk, colour, mode in ((~disagg, "o", "C0", "colocated"), (disagg, "s", "C1", "disaggregated")):
                m = drawn & mode_sel & ~ver
                if m.any():
                    ax.scatter(x[m], y[m], s=14, alpha=0.35, marker=mk, color=colour, label=f"{mode} (analytic)")
                m = drawn & mode_sel & passed
                if m.any():
                    ax.scatter(x[m], y[m], s=34, marker=mk, color=colour, edgecolors="k", lw=0.8,
                               label=f"{mode}, simulated: passed")
            m = drawn & failed
            if m.any():
                ax.scatter(x[m], y[m], s=34, marker="x", color="0.55", lw=1.2, label="simulated: failed")
            ok = drawn & ~failed
            front = pareto_front(np.where(ok, x, np.nan), y, maximize=mx)
            o = np.flatnonzero(front)
            o = o[np.argsort(x[o])]
            if o.size:
                ax.plot(x[o], y[o], "-", color="crimson", lw=1.3, marker="+", ms=9,
                        label="Pareto frontier (not failing)")
            if ch is not None and drawn[ch]:
                ax.scatter([x[ch]], [y[ch]], s=200, facecolors="none", edgecolors="k", lw=2,
                           label=f"chosen: {_describe_row(g.loc[ch])}, ${cost[ch]:.3f}/M")
            if drawn.any():
                ax.axvline(target, color="k", ls="--", lw=1, label="target")
                _log_x(ax)
            else:
                ax.text(0.5, 0.5, "no feasible configuration", ha="center", va="center", transform=ax.transAxes)
            ax.set(xlabel=xl, ylabel=yl)
            ax.grid(alpha=0.3, which="both")
            if ax is axes[0] and drawn.any():
                ax.legend(fontsize=7)
        head = (f"{q['model']}: " if with_model else "") + (
            f"{q['workload']} at {q['rate_req_per_s']:g} req/s, P90 TTFT <= {q['ttft_s']:g} s, "
            f"P90 TPOT <= {q['tpot_s'] * 1e3:g} ms, price {q['price']}")
        n_inf = int((~feas).sum())
        sub = (f"{int(feas.sum())} feasible configurations ({int(ver.sum())} simulated: {int(passed.sum())} passed, "
               f"{int(failed.sum())} failed), {n_inf} analytically infeasible (not drawn)")
        if ch is None:
            sub += "; no verified configuration passed" if ver.any() else "; nothing feasible"
        fig.suptitle(head + "\n" + sub, fontsize=10)
        fig.tight_layout()
        p = os.path.join(out_dir, _question_file(q, with_model))
        fig.savefig(p)
        paths.append(p)
    return paths


def _log_x(ax) -> None:
    """Log x axis labelled with plain numbers at 1, 2, 5 x 10^k."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _inst_label(r, tp) -> str:
    """An instance of ``tp`` GPUs in the row's layout (:func:`fastsim.layouts.instance_label`)."""
    return instance_label(r["layout"] if "layout" in r else "tp", tp)


def _describe_row(r) -> str:
    """A row's plan label, as :meth:`fastsim.analytic.Plan.describe` writes it."""
    def inst(n, tp):
        return f"{n} instance{'s' if n != 1 else ''} of {_inst_label(r, tp)}"
    gpus = f"({r['gpus']} GPU{'s' if r['gpus'] != 1 else ''})"
    if r["mode"] == "disaggregated":
        return (f"{r['gpu']} {r['precision']} disaggregated, prefill {inst(r['prefill_instances'], r['prefill_tp'])}"
                f" + decode {inst(r['decode_instances'], r['decode_tp'])} {gpus}")
    return f"{r['gpu']} {r['precision']} colocated, {inst(r['instances'], r['tp'])} {gpus}"


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------

def cli_sweep(args) -> int:
    """Run ``fastsim sweep`` from parsed arguments (see :func:`fastsim.cli.build_parser`).

    Prints a summary table (or the whole table as JSON / CSV with ``--format`` and no ``--out``).

    Parameters
    ----------
    args : argparse.Namespace
        The parsed ``fastsim sweep`` arguments.

    Returns
    -------
    int
        Exit status 0.

    Raises
    ------
    FastsimInputError
        Bad grid, axis, settings or output (the CLI prints it on one line and exits with 2).
    """
    import sys
    from .cli import _catalog, _fmt
    from .cli import _trace_notes
    from .workload import read_trace
    cat = _catalog(args)
    read_notes = []

    def reader(name):
        wl = read_trace(name, time_unit=getattr(args, "time_unit", None),
                        skip_invalid=getattr(args, "skip_invalid", False))
        read_notes.extend(_trace_notes(wl))
        return wl
    axes, file_settings = load_grid(args.grid) if args.grid else ({}, {})
    for text in args.axis:
        name, values = parse_axis(text)
        axes[name] = values
        if name in ("scenario", "trace"):
            axes.pop("trace" if name == "scenario" else "scenario", None)
    grid = make_grid(axes, cat, read_trace=reader)
    kw = dict(file_settings)
    for flag, key in (("verify", "verify"), ("top_k", "top_k"), ("seeds", "seeds"), ("horizon", "horizon_s"),
                      ("seed", "seed")):
        if getattr(args, flag) is not None:
            kw[key] = getattr(args, flag)
    if args.capacity:
        kw["capacity"] = True
    if "chunk_tokens" in kw:
        kw["chunk_tokens"] = _tuple(kw["chunk_tokens"])
    if getattr(args, "calibration", None):
        from .cli import _constants
        kw["constants"] = _constants(args)
    try:
        settings = SweepSettings(**kw)
    except TypeError as exc:
        raise FastsimInputError("[sweep]", sorted(kw), f"fields of SweepSettings ({exc})") from None
    if args.resume and not args.out:
        raise FastsimInputError("--resume", True, "an --out FILE to resume")
    max_plots = getattr(args, "plot_max", MAX_PLOTS)
    df = run_sweep(grid, settings=settings, out=args.out, resume=args.resume, scheduler=args.scheduler,
                   workers=args.workers, plot_dir=args.plot, max_plots=max_plots)
    plot_note = None
    if args.plot:
        nq = len(questions(df))
        plot_note = f"wrote Pareto plots of {min(nq, max_plots)} of {nq} questions to {args.plot}"
        if nq > max_plots:
            plot_note += (f" (the first {max_plots} in grid order; --plot-max N for more, or plot selected rows "
                          "with fastsim.sweep.plot_sweep)")
    if args.format != "table" and not args.out:
        notes = read_notes + ([plot_note] if plot_note else [])
        for n in notes:
            if not n.startswith("warning: "):       # warnings are on stderr already
                print("note: " + n, file=sys.stderr)
        if args.format == "json":
            # as every other command: one object with the rows and the notes; full precision,
            # NaN / inf / missing as null with the row's null_reasons
            json.dump({"rows": _json_records(df), "notes": notes}, sys.stdout, indent=2, allow_nan=False)
            sys.stdout.write("\n")
        else:
            df.assign(notes=json.dumps(notes)).to_csv(sys.stdout, index=False, na_rep="")
        return 0
    from tabulate import tabulate
    show = df[df["feasible"]]
    if show["verified"].any():
        show = show[show["verified"]].sort_values(["sim_passed", "usd_per_million_output_tokens"],
                                                  ascending=[False, True], kind="stable")
    else:
        show = show.sort_values(["usd_per_million_output_tokens", "efficiency_usd_per_million_output_tokens"],
                                kind="stable")
    rows = []
    for _, r in show.head(args.rows).iterrows():
        tp = (_inst_label(r, r.tp) if r["mode"] == "colocated"
              else f"P:{_inst_label(r, r.prefill_tp)} D:{_inst_label(r, r.decode_tp)}")
        inst = str(r.instances) if r["mode"] == "colocated" else f"{r.prefill_instances}+{r.decode_instances}"
        rows.append([r.workload, f"{r.rate_req_per_s:g}", r.gpu, r.precision, r["mode"], tp, inst, r.gpus,
                     _fmt(float(r.usd_per_million_output_tokens), ".3f"),
                     _fmt(float(r.efficiency_usd_per_million_output_tokens), ".3f"),
                     _fmt(float(r.capacity_req_per_s), ".1f"),
                     _fmt(float(r.sim_attainment), ".3f"), _fmt(float(r.sim_ttft_p90_s), ".3f"),
                     _fmt(float(r.sim_tpot_p90_s) * 1e3, ".1f"),
                     "not run" if not r.verified else ("pass" if r.sim_passed else "FAIL"),
                     _fmt(float(r.sim_capacity_req_per_s), ".2f")])
    n, nf, nv, npass = len(df), int(df["feasible"].sum()), int(df["verified"].sum()), int(df["sim_passed"].sum())
    print(f"{n:,} points: {nf:,} analytically feasible, {nv:,} simulated, {npass:,} passed")
    print(tabulate(rows, headers=["workload", "req/s", "GPU", "prec", "mode", "TP", "inst", "GPUs", "$/M out",
                                  "$/M eff", "capacity req/s", "attainment", "TTFT P90 s", "TPOT P90 ms",
                                  "verified", "sim max req/s"], disable_numparse=True))
    cells = {c for row in rows for c in row[11:]}
    if "n/a" in cells:
        print("note: n/a = not applicable: not simulated (verified 'not run'), no measured request with more than "
              "one output token (TPOT), or capacity not searched (sim max req/s: --capacity)")
    if "inf" in cells:
        print("note: inf = infinite: more than 10% of the measured requests never got that token (P90), or no "
              "capacity probe failed (sim max req/s)")
    for note in read_notes:
        print("note: " + note)
    if args.out:
        print(f"note: wrote {n:,} rows to {args.out}")
    if plot_note:
        print("note: " + plot_note)
    return 0
