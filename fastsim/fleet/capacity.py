"""Capacity of N instances and the cold start of a new one (:mod:`fastsim.fleet.strategies`: "Capacity", "Cold start").

:class:`CapacityCurve` holds the maximum sustainable rate of N instances measured at a few N
(:func:`fastsim.search.max_sustainable_rate`) and interpolates the per-instance capacity linearly
in log2 N between them; :meth:`CapacityCurve.instances_for` is the count every strategy sizes
with. :class:`ColdStart` is the time from provisioning to ready: the checkpoint at the load
bandwidth plus the engine's fixed start (defaults :data:`LOAD_BW_BYTES_PER_S` and
:data:`FIXED_START_S`, with their sources).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..errors import FastsimInputError, require_positive
from ._checks import _nonneg

__all__ = ["CapacityCurve", "ColdStart", "cold_start", "LOAD_BW_BYTES_PER_S", "FIXED_START_S", "MAX_INSTANCES"]

#: Default load bandwidth of an instance's weights (bytes/s): reads from object storage or a
#: network file system run at 1-2.5 GB/s per node (e.g. a 894 GiB checkpoint read at startup
#: from Amazon EFS in about 43 minutes, 0.37 GB/s, modelplaneai/modelplane issue 204; local
#: NVMe reaches 3-7 GB/s). 2 GB/s is an assumption; set your own (``--load-bandwidth``).
LOAD_BW_BYTES_PER_S = 2e9

#: Default fixed start of an instance (s), on top of loading its weights: process and CUDA
#: context, memory profiling, CUDA-graph capture and warm-up. vLLM's blog on sleep mode
#: (2025-10-26, https://blog.vllm.ai/2025/10/26/sleep-mode.html) puts a full reload at 30-100+ s;
#: 60 s is an assumption (``--start-time``). Provisioning a new node (VM boot, image pull) is
#: not included: add it here if your fleet does not keep warm nodes.
FIXED_START_S = 60.0

#: Largest instance count :meth:`CapacityCurve.instances_for` considers.
MAX_INSTANCES = 100_000


class CapacityCurve(NamedTuple):
    """Maximum sustainable rate of N instances at a few N, interpolated for any N.

    Attributes
    ----------
    instances : ndarray(int64) of shape (p,)
        Instance counts measured, ascending, >= 1.
    rate_req_per_s : ndarray(float64) of shape (p,)
        Maximum sustainable rate of that many instances (req/s, > 0).
    """

    instances: np.ndarray
    rate_req_per_s: np.ndarray

    @classmethod
    def from_points(cls, instances, rate_req_per_s) -> "CapacityCurve":
        """A checked curve.

        Parameters
        ----------
        instances : array_like of int, shape (p,)
            Distinct counts >= 1 (any order; sorted here).
        rate_req_per_s : array_like of float, shape (p,)
            Capacities (req/s), finite and > 0.

        Returns
        -------
        CapacityCurve

        Raises
        ------
        FastsimInputError
            Empty or mismatched arrays, counts below 1 or repeated, capacities not finite > 0, or
            a total capacity that decreases with N (more instances serving less is a measurement
            to redo, not a curve to interpolate): the error names the first such point.
        """
        n = np.asarray(instances).ravel()
        r = np.asarray(rate_req_per_s, dtype=np.float64).ravel()
        if n.shape != r.shape or n.shape[0] == 0:
            raise FastsimInputError("capacity points", (n.shape, r.shape), "two arrays of the same length >= 1")
        if not np.all(n == np.round(n)) or np.any(n < 1) or np.unique(n).shape[0] != n.shape[0]:
            raise FastsimInputError("capacity instances", n.tolist(), "distinct integers >= 1")
        if not np.all(np.isfinite(r) & (r > 0.0)):
            raise FastsimInputError("capacity rate_req_per_s", r.tolist(), "finite rates > 0 (req/s)")
        o = np.argsort(n)
        n, r = n[o].astype(np.int64), r[o]
        drop = np.flatnonzero(np.diff(r) < 0.0)
        if drop.size:
            i = int(drop[0]) + 1
            raise FastsimInputError("capacity point", f"{int(n[i])}={r[i]:g}",
                                    f"a total capacity at least that of fewer instances ({int(n[i - 1])}="
                                    f"{r[i - 1]:g} req/s): capacity must not decrease with N")
        return cls(n, r)

    def per_instance_req_per_s(self, n) -> np.ndarray:
        """Capacity per instance of ``n`` instances (req/s): linear in log2 N between the points.

        Parameters
        ----------
        n : int or array_like of int
            Instance counts >= 1.

        Returns
        -------
        ndarray(float64)
            Same shape as ``n``; held at the nearest point outside the measured range.
        """
        n = np.asarray(n, dtype=np.float64)
        x = np.log2(self.instances.astype(np.float64))
        y = self.rate_req_per_s / self.instances
        return np.interp(np.log2(np.maximum(n, 1.0)), x, y)

    def total_req_per_s(self, n) -> np.ndarray:
        """Capacity of ``n`` instances: ``n x per_instance_req_per_s(n)``.

        Parameters
        ----------
        n : int or array_like of int
            Instance counts >= 0.

        Returns
        -------
        ndarray(float64)
            Same shape as ``n`` (req/s); 0 for n = 0.
        """
        n = np.asarray(n, dtype=np.float64)
        return np.where(n > 0, n * self.per_instance_req_per_s(n), 0.0)

    def reach_req_per_s(self, max_instances: int = MAX_INSTANCES) -> float:
        """The highest rate up to ``max_instances`` instances serve (req/s).

        Parameters
        ----------
        max_instances : int
            Largest count considered (>= 1).

        Returns
        -------
        float
            ``max(total_req_per_s(n) for n in 1..max_instances)``.
        """
        return float(np.max(self.total_req_per_s(np.arange(1, max(int(max_instances), 1) + 1))))

    def instances_for(self, rate_req_per_s, min_instances: int = 1, max_instances: int = MAX_INSTANCES) -> np.ndarray:
        """Smallest instance counts whose capacity is at least each rate.

        Parameters
        ----------
        rate_req_per_s : float or array_like of float
            Rates (req/s, finite, >= 0).
        min_instances : int
            Floor of the answer (>= 0).
        max_instances : int
            Largest count considered.

        Returns
        -------
        ndarray(int64)
            Same shape as the rates.

        Raises
        ------
        FastsimInputError
            A rate that is negative or not finite, or above the capacity of ``max_instances``.
        """
        r = np.asarray(rate_req_per_s, dtype=np.float64)
        if not np.all(np.isfinite(r) & (r >= 0.0)):
            raise FastsimInputError("rate_req_per_s", "a negative or non-finite rate", "finite rates >= 0")
        top = float(np.max(r)) if r.size else 0.0
        hi = max(int(min_instances), 1)
        while float(self.total_req_per_s(hi)) < top:
            if hi >= max_instances:
                raise FastsimInputError("rate_req_per_s", top, f"at most {self.reach_req_per_s(max_instances):,.0f} "
                                        f"req/s, the most {max_instances:,} instances serve on this capacity curve")
            hi = min(hi * 2, max_instances)
        grid = np.arange(0, hi + 1)
        cap = self.total_req_per_s(grid)
        # smallest n with cap[n] >= r (cap may wiggle: the first n that reaches it)
        reach = np.maximum.accumulate(cap)
        out = np.searchsorted(reach, r, side="left")
        return np.maximum(out, int(min_instances)).astype(np.int64)


class ColdStart(NamedTuple):
    """How long a new instance takes to become ready (:mod:`fastsim.fleet.strategies`).

    Attributes
    ----------
    weight_bytes : float
        Checkpoint bytes one instance loads.
    load_bw_bytes_per_s : float
        Load bandwidth (bytes/s).
    fixed_start_s : float
        Engine start on top of the load (s).
    checkpoint : str
        What the weight bytes are: the checkpoint and its weight format (e.g.
        ``meta-llama/Llama-3.1-70B-Instruct, BF16 weights``), or why the plan's precision was
        assumed; "" when not said.
    """

    weight_bytes: float
    load_bw_bytes_per_s: float
    fixed_start_s: float
    checkpoint: str = ""

    @property
    def load_s(self) -> float:
        """Weight load time (s)."""
        return self.weight_bytes / self.load_bw_bytes_per_s

    @property
    def total_s(self) -> float:
        """Cold start (s): load plus fixed start."""
        return self.load_s + self.fixed_start_s


def cold_start(weight_bytes: float, load_bw_bytes_per_s: float = LOAD_BW_BYTES_PER_S,
               fixed_start_s: float = FIXED_START_S, checkpoint: str = "") -> ColdStart:
    """A checked :class:`ColdStart`.

    Parameters
    ----------
    weight_bytes : float
        Checkpoint bytes (> 0): the model's parameters times the precision's bytes per weight.
    load_bw_bytes_per_s : float
        Load bandwidth (bytes/s, > 0); default :data:`LOAD_BW_BYTES_PER_S`.
    fixed_start_s : float
        Fixed start (s, >= 0); default :data:`FIXED_START_S`.
    checkpoint : str
        What the bytes are (:attr:`ColdStart.checkpoint`).

    Returns
    -------
    ColdStart

    Raises
    ------
    FastsimInputError
        A weight size or bandwidth not finite > 0, a fixed start negative or not finite.
    """
    w = require_positive("weight_bytes", weight_bytes)
    bw = require_positive("load_bw_bytes_per_s", load_bw_bytes_per_s)
    f = _nonneg("fixed_start_s", fixed_start_s)
    return ColdStart(w, bw, f, str(checkpoint))
