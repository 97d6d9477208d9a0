"""The axes of a sweep grid: their names and limits, their values read and checked, what each mode uses.

:data:`AXES` names the axes a grid may give, in the canonical order of its product. An axis value
comes from a grid file (:func:`fastsim.sweep.grid.load_grid`) or the command line
(:func:`parse_axis`) and is checked and put in one canonical form here (``_int_value``,
``_float_value``, ``_price_value``, ``_canon``) as :func:`fastsim.sweep.grid.make_grid` builds a
grid. A colocated point uses ``tp``, ``pp``, ``chunk_tokens`` and ``instances``; a disaggregated one its
two sides' axes, and ``tp`` / ``instances`` only for a side whose axis is absent: :func:`_unused_axes`,
:func:`_mode_counts` and :func:`_n_enumerated` count the points of each mode accordingly, and
:func:`_drop_unused_axes` refuses an axis given that no point uses (see
:func:`fastsim.sweep.grid.make_grid`, Notes).
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from ..analytic import MAX_INSTANCES as _SCREEN_MAX_INSTANCES
from ..catalog import Catalog
from ..errors import FastsimInputError

__all__ = ["AXES", "MAX_INSTANCES", "MAX_TOKENS_OR_BATCH", "MAX_PP", "parse_axis"]

#: Axes a grid may give, in the canonical order of the product (the first varies slowest).
AXES = ("model", "gpu", "precision", "mode", "tp", "pp", "prefill_tp", "decode_tp", "layout", "chunk_tokens",
        "max_batch", "instances", "prefill_instances", "decode_instances", "scenario", "trace", "rate_req_per_s",
        "ttft_s", "tpot_s", "price")

_DEFAULT_TPS = (1, 2, 4, 8)
#: The ``pp`` axis left out: one stage (no pipeline parallelism). A pipelined point (``pp > 1``) is a
#: colocated instance of ``pp`` stages of ``tp`` GPUs (:attr:`fastsim.plans.Plan.pp`).
_DEFAULT_PPS = (1,)
#: Most pipeline stages a ``pp`` axis value may give (a model's layers bound it per point).
MAX_PP = 4096
_AUTO = "auto"
#: The value of a ``tp`` / ``prefill_tp`` / ``decode_tp`` axis that applies to no point (an empty
#: cell in the table); for ``prefill_tp`` / ``decode_tp``, "absent: the point's ``tp``".
_NO_TP = 0
#: Axes only disaggregated points use.
_DISAGGREGATED_AXES = ("prefill_tp", "decode_tp", "prefill_instances", "decode_instances")
#: Axes only colocated points use (a disaggregated plan's pools are not pipelined, nor chunked by the axis).
_COLOCATED_AXES = ("pp", "chunk_tokens")
#: Axes a disaggregated point uses only for a side whose own axis is absent: axis -> its two sides.
_STAND_IN_AXES = {"tp": ("prefill_tp", "decode_tp"), "instances": ("prefill_instances", "decode_instances")}
#: What an axis a point does not use contributes to its id (:func:`_point_ids`): the value a grid of
#: that point's mode alone holds for the axis, so that a plan has the same id in every grid.
_NOT_APPLICABLE = {"tp": _NO_TP, "prefill_tp": _NO_TP, "decode_tp": _NO_TP, "chunk_tokens": _AUTO,
                   "instances": _AUTO, "prefill_instances": "", "decode_instances": "", "pp": 1}
# a point's plan is enumerated mode by mode below its (model, gpu, precision): every axis a mode may
# not use comes after ``mode`` in the product (fastsim.sweep.table._codes relies on it)
assert all(AXES.index(a) > AXES.index("mode") for a in _NOT_APPLICABLE)
#: Most instances a point is sized to or simulated with, per side of a disaggregated point: the
#: screen's :data:`fastsim.analytic.MAX_INSTANCES` (4,096), so that the sweep's rows are the screen's.
#: An ``instances`` (or ``prefill_instances`` / ``decode_instances``) axis value above it is refused,
#: and a point whose target rate needs more (on ``auto``) is infeasible, its reason saying so (no
#: int64 overflow of GPU counts and costs). ``fastsim capacity --instance-counts`` takes the same
#: bound (``fastsim.cli.MAX_INSTANCE_COUNT``; the sweep may not import the command line, and a test
#: keeps the two equal).
MAX_INSTANCES = _SCREEN_MAX_INSTANCES
#: Largest ``chunk_tokens`` / ``max_batch`` axis value, and ``[sweep] chunk_tokens`` entry.
MAX_TOKENS_OR_BATCH = 1_000_000_000


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


def _int_value(name, v, lo, hi, auto=False):
    """An integer axis value from ``lo`` to ``hi`` (or ``auto``), from the file or the command line.

    One rule for both: the value is an integer, written as one (``512``, ``"512"``); a float
    (``512.0`` in TOML or JSON, as ``"512.0"`` on the command line) and a boolean are refused.
    """
    allowed = f"an integer from {lo} to {hi:,}" + (" or 'auto'" if auto else "")
    if _float_like(v):
        allowed += " (written as an integer: 512, not 512.0)"
    orig = v
    if auto and isinstance(v, str) and v.strip().lower() == _AUTO:
        return _AUTO
    if isinstance(v, str):
        try:
            v = int(v.strip())
        except ValueError:
            raise FastsimInputError(f"axis {name}", orig, allowed) from None
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
        raise FastsimInputError(f"axis {name}", orig, allowed)
    return int(v)


def _float_like(v) -> bool:
    """Whether an integer axis value was written as a float (``2.0``, ``"2.0"``, ``"1e3"``)."""
    if isinstance(v, (float, np.floating)):
        return True
    if isinstance(v, str):
        try:
            int(v.strip())
        except ValueError:
            try:
                float(v.strip())
                return True
            except ValueError:
                return False
    return False


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


def _unused_axes(axes: dict, mode: str) -> tuple:
    """The axes that the points of one mode of a grid do not use.

    Parameters
    ----------
    axes : dict of str to tuple
        Canonical axes (every name of :data:`AXES`), as :func:`make_grid` builds them.
    mode : {"colocated", "disaggregated"}

    Returns
    -------
    tuple of str
        Colocated: :data:`_DISAGGREGATED_AXES`. Disaggregated: :data:`_COLOCATED_AXES` (``pp``,
        ``chunk_tokens``), and ``tp`` / ``instances`` where both of their sides
        (:data:`_STAND_IN_AXES`) have an axis of their own.
    """
    if mode == "colocated":
        return _DISAGGREGATED_AXES
    absent = {"prefill_tp": (_NO_TP,), "decode_tp": (_NO_TP,), "prefill_instances": ("",), "decode_instances": ("",)}
    return _COLOCATED_AXES + tuple(name for name, sides in _STAND_IN_AXES.items()
                                     if all(tuple(axes[side]) != absent[side] for side in sides))


def _mode_counts(axes: dict) -> np.ndarray:
    """Values per axis that the points of each mode of a grid range over.

    Parameters
    ----------
    axes : dict of str to tuple
        Canonical axes (every name of :data:`AXES`).

    Returns
    -------
    numpy.ndarray of int64, shape (n_modes, len(AXES))
        Row ``j`` is for ``axes["mode"][j]``, columns in :data:`AXES` order: the number of values
        of each axis, 1 for the ``mode`` axis itself and for an axis that mode does not use
        (:func:`_unused_axes`; its points hold it at its first value). The product of row ``j``
        is the number of distinct plans of that mode.
    """
    out = np.empty((len(axes["mode"]), len(AXES)), dtype=np.int64)
    for j, mode in enumerate(axes["mode"]):
        unused = _unused_axes(axes, mode)
        out[j] = [1 if a == "mode" or a in unused else len(axes[a]) for a in AXES]
    return out


def _n_enumerated(axes: dict) -> int:
    """Number of points of the mode-wise product of a grid's axes, layout copies included.

    Parameters
    ----------
    axes : dict of str to tuple
        Canonical axes (every name of :data:`AXES`).

    Returns
    -------
    int
        The sum over the modes of the product of a row of :func:`_mode_counts`: the points that
        ``fastsim.sweep.table._codes`` enumerates, among which :func:`_layout_repeats` marks the
        copies left out of the table.
    """
    return int(_mode_counts(axes).prod(axis=1, dtype=np.int64).sum())


def _listed_layout(layouts: tuple) -> int:
    """Index of the layout under which a plan that every layout gives alike is listed.

    Parameters
    ----------
    layouts : tuple of str
        The ``layout`` axis.

    Returns
    -------
    int
        The index of ``tp`` when the axis names it (the plan keeps its plain-TP id), else 0 (the
        first layout named).
    """
    return layouts.index("tp") if "tp" in layouts else 0


def _disaggregated(axes: dict, codes: dict) -> np.ndarray:
    """Which points are disaggregated (numpy.ndarray of bool, shape (n,)), from their ``mode`` codes."""
    return np.array([m == "disaggregated" for m in axes["mode"]], dtype=bool)[codes["mode"]]


def _all_tps_one(disaggregated: np.ndarray, tp: np.ndarray, prefill_tp: np.ndarray,
                 decode_tp: np.ndarray) -> np.ndarray:
    """Whether every instance of a point has TP 1 (numpy, elementwise).

    Parameters
    ----------
    disaggregated : numpy.ndarray of bool
    tp, prefill_tp, decode_tp : numpy.ndarray of int64
        The points' values on these axes (:data:`_NO_TP` where absent: a side then takes ``tp``).

    Returns
    -------
    numpy.ndarray of bool
        A colocated point: ``tp == 1``; a disaggregated one: both of its sides' TPs are 1.
    """
    pt = np.where(prefill_tp > 0, prefill_tp, tp)
    dt = np.where(decode_tp > 0, decode_tp, tp)
    return np.where(disaggregated, (pt == 1) & (dt == 1), tp == 1)


def _drop_unused_axes(axes: dict, given: tuple) -> None:
    """Refuse a given axis that no point of the grid uses; set a default one to a single value.

    Parameters
    ----------
    axes : dict of str to tuple
        The canonical axes of :func:`make_grid` (every name of :data:`AXES`), changed in place:
        ``tp`` becomes ``(0,)`` where no point uses it and it was not given.
    given : tuple of str
        The axes the user gave.

    Raises
    ------
    FastsimInputError
        Naming the axis, its values and what the grid allows: a disaggregated-only axis on a grid
        of colocated points only; ``pp``, ``chunk_tokens``, or ``tp`` / ``instances`` with both of
        their sides, on a grid of disaggregated points only.
    """
    modes = set(axes["mode"])
    if "disaggregated" not in modes:
        for name in _DISAGGREGATED_AXES:
            if name in given:
                raise FastsimInputError(
                    f"axis {name}", list(axes[name]),
                    f"no {name} axis on a grid of colocated points only ({name} applies to disaggregated "
                    "points): add disaggregated to the mode axis, or drop this axis")
    if "colocated" in modes:
        return
    if "chunk_tokens" in given:
        raise FastsimInputError(
            "axis chunk_tokens", list(axes["chunk_tokens"]),
            "no chunk_tokens axis on a grid of disaggregated points only (chunk_tokens applies to colocated "
            "points): add colocated to the mode axis, or drop this axis")
    if "pp" in given:
        raise FastsimInputError(
            "axis pp", list(axes["pp"]),
            "no pp axis on a grid of disaggregated points only (pipeline parallelism applies to colocated "
            "points; a disaggregated plan's pools are TP instances): add colocated to the mode axis, or drop "
            "this axis")
    for name, sides in _STAND_IN_AXES.items():
        if not all(side in given for side in sides):
            continue                      # it stands in for an absent side: used
        if name in given:
            raise FastsimInputError(
                f"axis {name}", list(axes[name]),
                f"no {name} axis on a grid of disaggregated points only that gives both {sides[0]} and "
                f"{sides[1]} (a disaggregated point uses {name} only for a side whose axis is absent): add "
                "colocated to the mode axis, or drop this axis or one of the two")
        if name == "tp":
            # the four default TPs would repeat every plan; instances keeps its one default, auto
            # (it repeats nothing, and the point ids stay as they were)
            axes["tp"] = (_NO_TP,)



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
