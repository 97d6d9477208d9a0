"""The grid of a sweep: its validation against a catalog, its settings, grid files, point ids.

A grid is the Cartesian product of the axes of :data:`AXES` (the axes, their values and what each
mode uses are in :mod:`fastsim.sweep.axes`, re-exported here); :func:`make_grid` validates a mapping
of axes (or :func:`load_grid` reads one from a TOML / JSON file, :func:`parse_axis` from the command
line) into a :class:`SweepGrid`; :class:`SweepSettings` holds how the sweep runs. A point's id
(:func:`_point_ids`) is a 64-bit hash of its plan's values (the values it uses, in one canonical form
whatever axes spelled them), stable whatever the execution order.

A grid lists each plan once (see :func:`make_grid`, Notes): an axis that no point of the grid uses
is an error when given (left at its default, ``tp`` holds the not-applicable value 0), on a
grid of both modes each point counts only the axes its mode uses (:func:`_mode_counts`; the other
axes held at their first value, and hashed into the id as :data:`_NOT_APPLICABLE`), and the
layouts of an MoE plan whose TPs are all 1 (one plan: EP 1, DP 1) are listed once
(:func:`_layout_repeats`).
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

from ..analytic import ScreenOptions
from ..catalog import Catalog, default_catalog
from ..errors import FastsimInputError, require_tp
from ..stepmodel import LAYOUTS, StepConstants
# the axes, their values and what each mode uses, re-exported: ``grid.X is axes.X``
from .axes import (_AUTO, _COLOCATED_AXES, _DEFAULT_PPS, _DEFAULT_TPS, _DISAGGREGATED_AXES, _NO_TP,  # noqa: F401
                   _NOT_APPLICABLE, _STAND_IN_AXES, AXES, MAX_INSTANCES, MAX_PP, MAX_TOKENS_OR_BATCH, _all_tps_one,
                   _canon,
                   _disaggregated, _drop_unused_axes, _float_like, _float_value, _int_value, _jsonable,
                   _listed_layout, _mode_counts, _n_enumerated, _price_label, _price_value, _tuple,
                   _unused_axes, _values, parse_axis)

#: Most points (distinct plans) a grid may hold.
MAX_POINTS = 50_000_000


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
        Also bisect each verified point for its maximum sustainable rate (scenarios only; needs a
        ``verify`` other than ``none``).
    capacity_tol : float
        Relative tolerance of that bisection.
    tpot_margin, ttft_tail : float
        As in :class:`fastsim.analytic.ScreenOptions`.
    chunk_tokens : tuple of int
        Chunk sizes searched where the ``chunk_tokens`` axis is ``"auto"``: distinct integers from
        1 to :data:`MAX_TOKENS_OR_BATCH`, at least one.
    constants : StepConstants
        Step-model constants (SPEC §3), for the screen and the simulator.
    slo_percentile : float
        The percentile at which TTFT and TPOT are judged, 50 to 99.9 (default 90,
        :func:`fastsim.plans.check_slo_percentile`): the screen's latency lengths are that
        percentile of the length distributions, its prefill tail factor
        :func:`fastsim.plans.ttft_tail_for`, and a point passes when that share of its measured
        requests meet both targets (surely: the 95% Wilson bound, :mod:`fastsim.search.confidence`).

    Raises
    ------
    FastsimInputError
        An unknown ``verify`` mode; ``top_k`` or ``seeds`` not an integer >= 1 or ``seed`` not
        an integer >= 0 (booleans rejected); ``capacity`` not a boolean, or true with ``verify``
        ``none`` (nothing would be searched); a non-numeric or non-positive ``horizon_s``;
        ``capacity_tol`` outside (0, 1); ``chunk_tokens`` empty, repeating a size, or holding
        anything but integers from 1 to :data:`MAX_TOKENS_OR_BATCH` (``512.0`` included); margin
        or tail that :class:`fastsim.analytic.ScreenOptions` rejects; a ``slo_percentile`` outside
        [50, 99.9].
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
    slo_percentile: float = 90.0

    def __post_init__(self):
        from ..plans import check_slo_percentile
        object.__setattr__(self, "slo_percentile", check_slo_percentile(self.slo_percentile))
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
        allowed = (f"a non-empty list of distinct integers from 1 to {MAX_TOKENS_OR_BATCH:,} (the chunk sizes "
                   "searched where the chunk_tokens axis is auto; whole numbers written as integers: 512, not 512.0)")
        if isinstance(self.chunk_tokens, (str, bytes)) or not hasattr(self.chunk_tokens, "__iter__") or any(
                isinstance(c, (bool, np.bool_)) or not isinstance(c, (int, np.integer)) for c in self.chunk_tokens):
            raise FastsimInputError("chunk_tokens", list(self.chunk_tokens) if isinstance(self.chunk_tokens, tuple)
                                    else self.chunk_tokens, allowed)
        chunks = list(self.chunk_tokens)
        if not chunks or any(not 1 <= c <= MAX_TOKENS_OR_BATCH for c in chunks) or len(set(chunks)) != len(chunks):
            raise FastsimInputError("chunk_tokens", chunks, allowed + (
                "; this one is empty" if not chunks else "; this one repeats a size" if len(set(chunks)) != len(chunks)
                else ""))
        if self.capacity and self.verify == "none":
            raise FastsimInputError("capacity", True, "true only with verify top-k-per-scenario or all (the capacity "
                                    "search runs on the simulated points, and verify none simulates none): set "
                                    "verify, or drop capacity")
        from ..errors import require_positive
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
    lengths: tuple            # mean P, mean O, P90 P, P90 O, E[P^2] / E[P]


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
        """Number of distinct plans of the grid (int): the rows of its table.

        Each point counts only the axes its mode uses, and an MoE plan whose TPs are all 1 counts
        once whatever the layouts: the points of the mode-wise product (:func:`_n_enumerated`: the
        product of :attr:`shape` on a grid of one mode; on a grid of both modes, the sum over the
        modes of the product of the axes that mode uses, :func:`_mode_counts`) less the layout
        copies among them (:func:`_n_layout_repeats`).
        """
        return _n_enumerated(self.axes) - _n_layout_repeats(self)

    def describe(self) -> dict:
        """The axes as given (JSON-able).

        Returns
        -------
        dict of str to list
            For each axis in :attr:`given`, its canonical values (price tables as dicts of
            floats).
        """
        return {a: [_jsonable(v) for v in self.axes["scenario" if a == "trace" else a]] for a in self.given}




def _resolve_source(kind: str, v, catalog: Catalog, cache: dict, read_trace=None) -> _Source:
    from .. import workload as W
    from ..analytic import Demand
    if not isinstance(v, str) or not v.strip():
        raise FastsimInputError(f"axis {kind}", v, "a name" + (" or a trace file path" if kind == "trace" else ""))
    if kind == "scenario":
        s = catalog.scenario(v)
        d = Demand.from_scenario(s)
        return _Source(s.name, "scenario", s, s.model, s.rate_req_per_s, s.ttft_s, s.tpot_s,
                       (d.mean_prompt_tokens, d.mean_output_tokens, d.latency_prompt_tokens, d.latency_output_tokens,
                        d.work_prompt_tokens))
    wl = cache.get(v) or (read_trace or W.read_trace)(v)
    cache[v] = wl
    if wl.n < 2 or not (wl.duration_s > 0):
        raise FastsimInputError("axis trace", v, "a trace with at least two distinct arrival times")
    p, o = wl.prompt_tokens.astype(np.float64), wl.output_tokens.astype(np.float64)
    return _Source(wl.name if v.strip().lower() in W.BUILTIN_TRACES else v, "trace", wl, None,
                   wl.mean_rate_req_per_s, None, None,
                   (float(p.mean()), float(o.mean()), float(np.quantile(p, 0.9)), float(np.quantile(o, 0.9)),
                    float((p * p).mean() / p.mean())))


def make_grid(axes: Mapping, catalog: Catalog | None = None, *, read_trace=None) -> SweepGrid:
    """Validate a mapping of axes and resolve it against a catalog, before any work starts.

    Parameters
    ----------
    axes : mapping of str to a value or a list of values
        Names from :data:`AXES`. Values: ``model`` catalog names or ``config.json`` paths;
        ``gpu`` names or ``"all"``; ``precision`` names; ``mode`` ``colocated`` /
        ``disaggregated``; ``tp``, ``prefill_tp``, ``decode_tp`` powers of two (the last two
        default to ``tp``); ``pp`` pipeline stages of a colocated point, integers from 1 to
        :data:`MAX_PP` (default 1: none; with ``pp > 1`` ``tp`` is the TP of one stage and the
        instance has ``tp x pp`` GPUs; a point whose model has fewer layers than ``pp``, or whose
        stage TP exceeds a node, is a refused row); ``layout`` instance layouts
        (:data:`fastsim.stepmodel.LAYOUTS`, default ``tp``; the EP layouts apply to MoE models,
        other points are refused rows; an MoE plan whose TPs are all 1 is listed once, see Notes);
        ``chunk_tokens`` integers from 1 to :data:`MAX_TOKENS_OR_BATCH` or ``"auto"`` (the best of
        the chunk set); ``max_batch`` integers from 0 to :data:`MAX_TOKENS_OR_BATCH` (0 = no cap);
        ``instances``, ``prefill_instances``, ``decode_instances`` integers from 1 to
        :data:`MAX_INSTANCES` or ``"auto"`` (the planner's count; for disaggregated points
        ``instances`` sets both sides unless they are given); the integer axes take integers (or
        their decimal strings), never floats such as ``2.0``; ``scenario`` names or
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
        Naming the axis: unknown axis, empty axis, repeated value (two spellings of one GPU or
        model included), a value of the wrong type (a float on an integer axis) or out of range,
        an unknown name, both ``scenario`` and ``trace``, a trace without its SLOs,
        an axis given that no point of the grid uses (see Notes), or more than 50,000,000 points.

    Notes
    -----
    A colocated point uses ``tp``, ``pp``, ``chunk_tokens`` and ``instances``; a disaggregated point uses
    ``prefill_tp``, ``decode_tp``, ``prefill_instances`` and ``decode_instances``, and ``tp`` /
    ``instances`` only in place of a side whose axis is absent. An axis that no point of the grid
    uses would only repeat every point under new ids, so:

    - given, it is an error naming it (``prefill_tp`` on a grid of colocated points only,
      ``chunk_tokens`` or ``pp`` on one of disaggregated points only, ``tp`` on one of disaggregated points
      only that gives both ``prefill_tp`` and ``decode_tp``, ...): nothing given is ignored;
    - left at its default, it is not multiplied in: on a grid of disaggregated points only with
      both ``prefill_tp`` and ``decode_tp`` given, ``tp`` holds the value 0 (not applicable, as an
      absent ``prefill_tp`` holds; the table's ``tp`` cell is missing on those rows as on every
      disaggregated row), so each plan appears once, instead of once per default TP.

    On a grid of both modes every axis is used by some points, and each point ranges only over the
    axes its mode uses (:func:`_mode_counts`): a colocated point is not repeated over the
    ``prefill_tp`` / ``decode_tp`` / ``*_instances`` values, nor a disaggregated one over the
    ``chunk_tokens`` values, or the ``tp`` (``instances``) values where both of its sides are
    given.

    A layout sets the expert-parallel and data-parallel degrees of an instance from its TP
    (:func:`fastsim.stepmodel.layout_degrees`): at TP 1, ``tp``, ``tp+ep`` and ``dp+ep`` all give
    EP 1 and DP 1, the plain TP1 instance. So on an MoE model a point whose TPs are all 1 (``tp``
    for a colocated point; both ``prefill_tp`` and ``decode_tp`` for a disaggregated one, a layout
    applying to both of its pools) is one plan whatever its layout, and is listed once: under
    ``tp`` when the ``layout`` axis names it, else under the first layout named
    (:func:`_layout_repeats`). On a dense model an expert-parallel layout is a refused row at every
    TP, TP 1 included (:func:`fastsim.stepmodel.layout_refusal`), not a copy: those rows stay.

    Each plan is listed once, under one id, the same as in a grid of its mode alone
    (:func:`_point_ids`); :attr:`SweepGrid.n_points` (and the limit of 50,000,000 points) counts
    these distinct plans.
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
    spelled: dict = {}
    for v in raw.get("model", []):
        if not isinstance(v, str):
            raise FastsimInputError("axis model", v, "a catalog model name or a config.json path")
        m = catalog.model(v)
        if m.name in models:
            # as gpu = B200, b200: two spellings of one model would be one model twice
            raise FastsimInputError("axis model", v, "distinct models (this one is repeated: "
                                    + (f"{v!r} and {spelled[m.name]!r} both name {m.name})" if v != spelled[m.name]
                                       else f"{m.name} is named twice)"))
        models[m.name] = m
        spelled[m.name] = v
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
            out[name] = (_NO_TP,)
            continue
        tv = []
        for v in vals:
            if isinstance(v, (bool, np.bool_)):
                raise FastsimInputError(f"axis {name}", v, "a power of two from 1 to 64 (not a boolean)")
            allowed = "a power of two from 1 to 64"
            if _float_like(v):
                # one rule in the file and on the command line (where "2.0" is no integer): an integer
                raise FastsimInputError(f"axis {name}", v, allowed + " (written as an integer: 2, not 2.0)")
            try:
                tv.append(require_tp(f"axis {name}", int(v) if isinstance(v, str) and v.strip().isdigit() else v))
            except (TypeError, FastsimInputError):
                raise FastsimInputError(f"axis {name}", v, allowed) from None
        out[name] = tuple(tv)
    out["pp"] = tuple(_int_value("pp", v, 1, MAX_PP) for v in raw.get("pp", list(_DEFAULT_PPS)))
    lays = []
    for v in raw.get("layout", ["tp"]):
        if v not in LAYOUTS:
            raise FastsimInputError("axis layout", v, "one of " + ", ".join(LAYOUTS))
        lays.append(v)
    out["layout"] = tuple(lays)
    out["chunk_tokens"] = tuple(_int_value("chunk_tokens", v, 1, MAX_TOKENS_OR_BATCH, auto=True)
                                for v in raw.get("chunk_tokens", [_AUTO]))
    out["max_batch"] = tuple(_int_value("max_batch", v, 0, MAX_TOKENS_OR_BATCH) for v in raw.get("max_batch", [0]))
    out["instances"] = tuple(_int_value("instances", v, 1, MAX_INSTANCES, auto=True)
                             for v in raw.get("instances", [_AUTO]))
    for name in ("prefill_instances", "decode_instances"):
        out[name] = tuple(_int_value(name, v, 1, MAX_INSTANCES, auto=True) for v in raw[name]) if name in raw else ("",)
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
    _drop_unused_axes(out, tuple(raw))
    for s in sources:
        if s.model is not None:
            models.setdefault(s.model, catalog.model(s.model))
    given = tuple(a for a in AXES if a in raw)
    grid = SweepGrid(out, given, catalog, sources, models)
    if grid.n_points > MAX_POINTS:
        raise FastsimInputError("grid", f"{grid.n_points:,} points", f"at most {MAX_POINTS:,} points")
    return grid




def _moe_pairs(grid: SweepGrid) -> np.ndarray:
    """Whether each (``model`` value, workload value) pair of a grid serves an MoE model.

    Parameters
    ----------
    grid : SweepGrid

    Returns
    -------
    numpy.ndarray of bool, shape (len(grid.axes["model"]), len(grid.sources))
        Where the ``model`` axis is absent (its one value ``None``), a point's model is its
        scenario's, so the answer varies with the workload.
    """
    if grid.axes["model"] == (None,):
        return np.array([[grid.models[src.model].is_moe for src in grid.sources]], dtype=bool)
    moe = np.array([grid.models[m].is_moe for m in grid.axes["model"]], dtype=bool)
    return np.repeat(moe[:, None], len(grid.sources), axis=1)




def _layout_repeats(grid: SweepGrid, codes: dict) -> np.ndarray:
    """Which points repeat, under another layout, a plan the grid lists once (vectorized).

    Parameters
    ----------
    grid : SweepGrid
    codes : dict of str to numpy.ndarray of int64, shape (n,)
        Each point's value index on every axis of :data:`AXES` (``fastsim.sweep.table._codes``).

    Returns
    -------
    numpy.ndarray of bool, shape (n,)
        True for a point of an MoE model whose TPs are all 1 (:func:`_all_tps_one`) and whose
        layout is not the listed one (:func:`_listed_layout`: ``tp`` if the axis names it, else
        the first layout named).

    Notes
    -----
    The rule: at TP 1 every layout gives EP 1 and DP 1 (:func:`fastsim.stepmodel.layout_degrees`),
    so on an MoE model such a point is the plain TP1 plan whatever its layout; it is listed once.
    On a dense model an expert-parallel layout is refused at every TP, TP 1 included (a refused
    row, not a copy), so no dense point is marked. These points are not rows of the table, and
    :attr:`SweepGrid.n_points` does not count them (:func:`_n_layout_repeats`).
    """
    A = grid.axes
    n = codes["layout"].shape[0]
    if len(A["layout"]) < 2:
        return np.zeros(n, dtype=bool)
    moe = _moe_pairs(grid)[codes["model"], codes["scenario"]]
    disagg = _disaggregated(A, codes)
    vals = {a: np.array(A[a], dtype=np.int64)[codes[a]] for a in ("tp", "prefill_tp", "decode_tp")}
    one = _all_tps_one(disagg, vals["tp"], vals["prefill_tp"], vals["decode_tp"])
    return moe & one & (codes["layout"] != _listed_layout(A["layout"]))


def _n_layout_repeats(grid: SweepGrid) -> int:
    """Number of points of the mode-wise product that :func:`_layout_repeats` marks (no enumeration).

    Parameters
    ----------
    grid : SweepGrid

    Returns
    -------
    int
        Per mode: (layouts - 1) x the (``tp``, ``prefill_tp``, ``decode_tp``) combinations that mode
        ranges over whose TPs are all 1 x the MoE (model, workload) pairs (:func:`_moe_pairs`) x
        the values of every other axis that mode uses (:func:`_mode_counts`); summed over the
        modes.
    """
    A = grid.axes
    n_lay = len(A["layout"])
    if n_lay < 2:
        return 0
    n_moe = int(_moe_pairs(grid).sum())
    if n_moe == 0:
        return 0
    counts = _mode_counts(A)
    tp_axes = ("tp", "prefill_tp", "decode_tp")
    pos = {a: AXES.index(a) for a in AXES}
    rest = [pos[a] for a in AXES if a not in tp_axes + ("model", "scenario", "layout")]
    total = 0
    for j, mode in enumerate(A["mode"]):
        # the TP values this mode ranges over (an axis it does not use: held at its first value)
        grids = np.meshgrid(*(np.array(A[a][:counts[j, pos[a]]], dtype=np.int64) for a in tp_axes), indexing="ij")
        ones = int(_all_tps_one(np.full(grids[0].shape, mode == "disaggregated"), *grids).sum())
        total += (n_lay - 1) * ones * n_moe * math.prod(int(c) for c in counts[j, rest])
    return total





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

    Notes
    -----
    A relative ``config.json`` path on the ``model`` axis and a relative trace path on the
    ``trace`` axis are resolved against the grid file's directory, not the working directory (as a
    catalog file's scenario model is, :func:`fastsim.catalog.load_catalog`); model names, built-in
    trace names and absolute paths are kept as given.
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
    axes = dict(t["axes"])
    for name in ("model", "trace"):
        if name in axes:
            v = axes[name]
            axes[name] = ([_relative_to(x, name, path) for x in v] if isinstance(v, list)
                          else _relative_to(v, name, path))
    return axes, dict(settings)


def _relative_to(value, axis: str, grid_path) -> object:
    """A grid file's ``model`` / ``trace`` value with a relative path resolved against the file's directory."""
    from ..catalog import _is_path
    from ..workload import BUILTIN_TRACES
    if not isinstance(value, str) or not value.strip():
        return value                                   # make_grid names the bad value
    if axis == "model" and not _is_path(value):
        return value                                   # a catalog name
    if axis == "trace" and value.strip().lower() in BUILTIN_TRACES:
        return value
    if os.path.isabs(os.path.expanduser(value)):
        return value
    base = os.path.dirname(os.path.abspath(os.fspath(grid_path)))
    return os.path.normpath(os.path.join(base, value))


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


def _side_hashes(grid: SweepGrid, codes: dict) -> dict:
    """What the axes of :data:`_STAND_IN_AXES` contribute to each point's id: its plan's sides (vectorized).

    Parameters
    ----------
    grid : SweepGrid
    codes : dict of str to numpy.ndarray of int64, shape (n,)
        Each point's value index on every axis of :data:`AXES` (``fastsim.sweep.table._codes``).

    Returns
    -------
    dict of str to numpy.ndarray of uint64, shape (n,)
        For ``tp``, ``prefill_tp``, ``decode_tp``, ``instances``, ``prefill_instances``,
        ``decode_instances``: the hash of ``axis=value`` with the value of the point's canonical
        form (:func:`_point_ids`, Notes), whatever axes the grid spelled it with.
    """
    A = grid.axes
    disagg = _disaggregated(A, codes)
    out = {}
    for name, sides in _STAND_IN_AXES.items():
        trio = (name,) + sides
        absent = _canon(_NOT_APPLICABLE[sides[0]])         # a side's value where its axis is absent
        # the values of the three axes as indices into one list of canonical words: equal index,
        # equal value
        words = sorted({_canon(v) for a in trio for v in A[a]} | {absent, _canon(_NOT_APPLICABLE[name])})
        at = {w: i for i, w in enumerate(words)}
        code = {a: np.array([at[_canon(v)] for v in A[a]], dtype=np.int64)[codes[a]] for a in trio}
        none, na = at[absent], at[_canon(_NOT_APPLICABLE[name])]
        # the values a disaggregated point's sides take: their own axis, else the stand-in
        pre = np.where(code[sides[0]] == none, code[name], code[sides[0]])
        dec = np.where(code[sides[1]] == none, code[name], code[sides[1]])
        apart = disagg & (pre != dec)
        value = {name: np.where(disagg, np.where(apart, na, pre), code[name]),
                 sides[0]: np.where(apart, pre, none), sides[1]: np.where(apart, dec, none)}
        for a in trio:
            out[a] = np.array([_h64(f"{a}={w}") for w in words], dtype=np.uint64)[value[a]]
    return out


def _point_ids(grid: SweepGrid, codes: dict, n: int) -> np.ndarray:
    """uint64 ids: fold the hashes of ``axis=value`` of each point's plan over the axes in canonical order.

    Parameters
    ----------
    grid : SweepGrid
    codes : dict of str to numpy.ndarray of int64, shape (n,)
        Each point's value index on every axis of :data:`AXES` (``fastsim.sweep.table._codes``).
    n : int
        Number of points.

    Returns
    -------
    numpy.ndarray of uint64, shape (n,)

    Notes
    -----
    The id is a function of the plan a point is (the values it uses), not of how the grid spelled
    it: a plan has the same id in every grid that holds it, and two points of a grid share an id
    only if they are the same plan. An absent axis contributes its default (a name list such as the
    default GPUs, or a sentinel meaning "the scenario's value"). An axis a point does not use
    (:func:`_unused_axes`: ``chunk_tokens`` on a disaggregated point, ``prefill_tp`` on a colocated
    one, ...) contributes :data:`_NOT_APPLICABLE`, whatever its values in the grid.

    A disaggregated point's TPs (``prefill_tp``, ``decode_tp``, each from its own axis, else from
    ``tp``) and its instance counts (``prefill_instances``, ``decode_instances``, each from its own
    axis, else from ``instances``; ``auto`` a value like any other) enter the id in one canonical
    form per pair (:func:`_side_hashes`), that of a grid giving only the stand-in where the two
    sides are equal, that of a grid giving both sides where they differ:

    - equal sides, ``s``: ``tp`` (``instances``) ``= s`` and both sides absent (``0`` / empty);
    - sides ``p != d``: ``tp`` (``instances``) not applicable (``0`` / ``auto``), ``prefill_tp = p``,
      ``decode_tp = d`` (``prefill_instances = p``, ``decode_instances = d``).

    So ``prefill_tp = 2, decode_tp = 2`` is ``tp = 2``; ``prefill_tp = 1`` with ``tp = 2`` is
    ``prefill_tp = 1, decode_tp = 2``; ``prefill_instances = decode_instances = auto`` is the
    default ``instances = auto``. The two forms cannot meet (a side of the second is never absent),
    and each is one-to-one in the sides, so distinct plans keep distinct ids. A colocated point
    contributes ``tp`` and ``instances`` as given and its sides as absent: its id, and the ids of
    the disaggregated points already in a canonical form, are those of table version 6.

    Other axes are hashed as given: a rate, TTFT or TPOT equal to the scenario's, the scenario's
    own model named, or a price equal to the catalog's, hashes apart from the axis left out, and an
    MoE plan whose TPs are all 1 keeps the id of the layout it is listed under
    (:func:`_listed_layout`); ``pp`` enters only where it is above 1 on a colocated point, so every
    plan without pipeline stages keeps the id it had before the axis existed.
    """
    h = np.full(n, _h64("fastsim-sweep-point-v1"), dtype=np.uint64)
    unused = {m: _unused_axes(grid.axes, m) for m in grid.axes["mode"]}
    sides = _side_hashes(grid, codes)
    for a in AXES:
        if a == "trace":
            continue
        if a in sides:
            h = _mix(h ^ sides[a])
            continue
        name = "trace" if a == "scenario" and "trace" in grid.given else a
        table = np.array([_h64(f"{name}={_canon(v)}") for v in grid.axes[a]], dtype=np.uint64)
        if a == "layout":
            # the plain TP layout leaves a point's id as it was before layouts existed
            is_tp = np.array([v == "tp" for v in grid.axes[a]], dtype=bool)[codes[a]]
            h = np.where(is_tp, h, _mix(h ^ table[codes[a]]))
            continue
        if a == "pp":
            # one stage (and a disaggregated point, never pipelined) leaves the id as it was before pp existed
            one = np.array([v == 1 for v in grid.axes[a]], dtype=bool)[codes[a]]
            one = one | _disaggregated(grid.axes, codes)
            h = np.where(one, h, _mix(h ^ table[codes[a]]))
            continue
        value = table[codes[a]]
        off = np.array([a in unused[m] for m in grid.axes["mode"]], dtype=bool)
        na = _h64(f"{a}={_canon(_NOT_APPLICABLE[a])}") if a in _NOT_APPLICABLE else None
        if off.any() and not (table.shape[0] == 1 and table[0] == na):
            value = np.where(off[codes["mode"]], na, value)
        h = _mix(h ^ value)
    return h


def _hex(ids: np.ndarray) -> np.ndarray:
    """16-digit lower-case hex strings of uint64 ids (object array), without a Python loop per id."""
    ids = np.ascontiguousarray(ids, dtype=np.uint64)
    text = ids.astype(">u8").tobytes().hex().encode("ascii")
    return np.frombuffer(text, dtype="S16").astype("U16").astype(object)
