"""Workloads: request arrival times and token lengths, from traces or drawn (SPEC sections 1, 6, 9).

A :class:`Workload` is three aligned arrays, one entry per request: arrival time (s, ascending,
on a time axis that starts at 0), prompt tokens P and output tokens O (O counts every generated
token, the first included, so O >= 1). It may also carry the prompt's prefix blocks
(:class:`PrefixBlocks`: per request, the ids of its ``block_tokens``-token blocks; equal ids are
equal content), which a simulator of prefix caching reads; :func:`prefix_reuse_bound` gives the
share of prompt tokens an unbounded cache could serve. Workloads come from

- real traces: :func:`read_trace` reads the traces shipped with the package (``azure-conv``,
  ``azure-code``: the Azure LLM inference traces; ``mooncake-conv``: the Mooncake conversation
  trace, with its prefix blocks), any CSV in the Azure format, or a Mooncake JSONL file (its
  ``hash_ids`` become prefix blocks of 512 tokens);
- synthetic draws: :func:`synthesize` (Poisson or gamma arrivals, lognormal or fixed lengths,
  optionally a shared system prompt and multi-turn sessions with their prefix blocks),
  :func:`synthesize_profile` (arrivals whose rate follows a :class:`RateProfile` over time, from
  :func:`read_rate_profile`: the shipped production profiles or a CSV of per-window rates),
  :func:`synthesize_from_trace` (lengths, and blocks, resampled from a trace),
  :func:`scenario_workload`.

Randomness and common random numbers
------------------------------------
Every random number comes from a :class:`numpy.random.Generator` built from a child of one
:class:`numpy.random.SeedSequence`. :func:`unit_draws` returns, per request index, a unit-mean
inter-arrival gap, a standard normal variate for each length and a uniform variate for trace
resampling. The draws are made in blocks of ``DRAW_BLOCK`` requests, block ``b`` of stream ``s``
from the child with spawn key ``seed.spawn_key + (s, b)``, so request ``i`` always receives the
same variates whatever the rate, the horizon or the number of requests drawn. A workload at rate
``r`` places request ``i`` at ``cumsum(gaps)[i] / r``: two rates on one seed see the same
requests with the same lengths, the lower rate fewer of them within the horizon.

Sources: Azure LLM inference traces 2023 (Patel et al., "Splitwise", ISCA 2024; CC-BY-4.0, see
``fastsim/data/traces/ATTRIBUTION.md``); Mooncake traces (Qin et al., "Mooncake", FAST 2025;
Apache-2.0; ``hash_ids`` of 512-token blocks); vLLM automatic prefix caching (16-token KV blocks,
each hashed with its whole prefix); common random numbers (Law, "Simulation Modeling and
Analysis", 5th ed., §11.2).
"""
from __future__ import annotations

import gzip
import itertools
import json
import math
import os
import re
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import NamedTuple

import numpy as np

from .catalog import LengthDist, Scenario
from .errors import FastsimInputError, require_positive

__all__ = [
    "Workload", "PrefixBlocks", "UnitDraws", "BUILTIN_TRACES", "DRAW_BLOCK", "MOONCAKE_BLOCK_TOKENS",
    "SESSION_GAP_S", "prefix_reuse_bound", "read_trace", "trace_rate_warning", "PLAUSIBLE_RATE_REQ_PER_S",
    "unit_draws", "seeds_for", "synthesize", "synthesize_many",
    "synthesize_from_trace", "scenario_workload", "length_quantiles", "length_means",
    "served_lengths", "ServedLengths", "TRUNCATION_NEGLIGIBLE",
    "RateProfile", "ProfileGaps", "BUILTIN_PROFILES", "read_rate_profile", "synthesize_profile",
]

#: Requests per block of random draws. Part of the reproducibility contract: changing it changes
#: every synthetic workload.
DRAW_BLOCK = 4096

#: Largest number of requests one synthetic workload may hold (about 1.6 GB of arrays).
MAX_REQUESTS = 50_000_000

# Stream indices in the spawn key of a seed's children.
_S_GAPS, _S_PROMPT, _S_OUTPUT, _S_PICK = 0, 1, 2, 3

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

#: Largest number of prefix block ids one synthetic workload may hold (1.6 GB of int64).
MAX_PREFIX_BLOCKS = 200_000_000

_AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")
_O_ALLOWED = "an integer >= 1 (O counts the first token; a request with no output cannot be served)"
_P_ALLOWED = "an integer >= 1"


# --------------------------------------------------------------------------------------------
# The workload
# --------------------------------------------------------------------------------------------

def _readonly(a, dtype) -> np.ndarray:
    """A read-only C-ordered array of ``dtype``: shared when already so, otherwise a private copy."""
    if isinstance(a, np.ndarray) and a.dtype == dtype and a.flags.c_contiguous and not a.flags.writeable \
            and (a.base is None or (isinstance(a.base, np.ndarray) and not a.base.flags.writeable)):
        return a
    out = np.array(a, dtype=dtype, order="C", copy=True)
    out.flags.writeable = False
    return out


class PrefixBlocks(NamedTuple):
    """The prefix blocks of every request of a workload (compressed sparse rows), for prefix caching.

    Request i's prompt begins with the blocks ``ids[offsets[i]:offsets[i + 1]]``, in prompt order,
    each ``block_tokens`` tokens long. Equal ids mean equal content, and (as with Mooncake's
    ``hash_ids`` and vLLM's block hashes) an id identifies the whole prefix up to and including its
    block: two requests that list id x at position j share their first ``(j + 1) * block_tokens``
    prompt tokens. Only a full block, ``(j + 1) * block_tokens <= P``, can be cached and served;
    a request's last, partial block may be listed (Mooncake lists ``ceil(P / 512)`` ids per
    request). A request lists at most ``ceil(P / block_tokens)`` blocks; it may list fewer (none
    when its source has no ids), and the tokens after its listed blocks are content of its own.

    Attributes
    ----------
    block_tokens : int
        Tokens per block, >= 1 (:data:`MOONCAKE_BLOCK_TOKENS` = 512 for Mooncake traces; 16, vLLM's
        KV block size, for :func:`synthesize` by default).
    offsets : ndarray(int64) of shape ``(n + 1,)``
        Row pointers into ``ids``: ``offsets[0] == 0``, non-decreasing, ``offsets[n] == len(ids)``.
    ids : ndarray(int64) of shape ``(nnz,)``
        Block ids, >= 0, request after request (``nnz`` blocks in all).

    Notes
    -----
    A :class:`Workload` validates its ``prefix`` and stores these arrays read-only (int64, C
    order); every workload derived from another (rescaled, sorted by time, resampled) carries each
    request's blocks with it. Build one from per-request lists with :meth:`from_lists`.
    """

    block_tokens: int
    offsets: np.ndarray
    ids: np.ndarray

    @classmethod
    def from_lists(cls, block_tokens: int, blocks) -> "PrefixBlocks":
        """Build from one sequence of block ids per request.

        Parameters
        ----------
        block_tokens : int
            Tokens per block, >= 1 (checked when a :class:`Workload` receives the blocks).
        blocks : iterable of sequences of int
            Request i's block ids, in prompt order (an empty sequence: no listed blocks).

        Returns
        -------
        PrefixBlocks
            With int64 ``offsets`` of shape ``(n + 1,)`` and ``ids`` of shape ``(nnz,)`` (writable
            copies; a Workload stores read-only ones).

        Raises
        ------
        FastsimInputError
            An id that is not an integer from 0 to 2**63 - 1 (naming the request).
        """
        rows = [list(b) for b in blocks]
        for i, row in enumerate(rows):
            if not all(isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))
                       and 0 <= x <= _INT64_MAX for x in row):
                raise FastsimInputError(f"PrefixBlocks.from_lists blocks[{i}]", _clip(repr(row)),
                                        "a sequence of integer block ids from 0 to 2**63 - 1")
        offsets, ids = _csr(rows)
        return cls(block_tokens, offsets, ids)

    @property
    def n_requests(self) -> int:
        """Number of requests (int): ``len(offsets) - 1``."""
        return int(len(self.offsets)) - 1

    def blocks_per_request(self) -> np.ndarray:
        """Listed blocks per request.

        Returns
        -------
        ndarray(int64) of shape (n,)
            ``diff(offsets)`` (blocks; a new array).
        """
        return np.diff(np.asarray(self.offsets, dtype=np.int64))

    def blocks(self, i: int) -> np.ndarray:
        """The block ids of request i, in prompt order.

        Parameters
        ----------
        i : int
            Request index, ``0 <= i < n_requests`` (negative indices count from the end).

        Returns
        -------
        ndarray(int64) of shape (offsets[i + 1] - offsets[i],)
            A view of ``ids``.

        Raises
        ------
        FastsimInputError
            i not an integer index of a request.
        """
        n = self.n_requests
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)) or not -n <= i < n:
            raise FastsimInputError("request index", i, f"an integer from {-n} to {n - 1}")
        i = int(i) % n
        return self.ids[int(self.offsets[i]):int(self.offsets[i + 1])]


_INT64_MAX = int(np.iinfo(np.int64).max)


def _csr(rows: list) -> tuple:
    """(offsets int64 (n+1,), ids int64 (nnz,)) from a list of per-request sequences of ints."""
    n = len(rows)
    counts = np.fromiter(map(len, rows), dtype=np.int64, count=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    ids = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=int(offsets[-1]))
    return offsets, ids


def _segment_arange(counts: np.ndarray) -> np.ndarray:
    """``concatenate([arange(c) for c in counts])`` (int64), without a Python loop."""
    total = int(counts.sum())
    starts = np.zeros(counts.shape[0], dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    return np.arange(total, dtype=np.int64) - np.repeat(starts, counts)


def _take_prefix(prefix: PrefixBlocks | None, idx: np.ndarray) -> PrefixBlocks | None:
    """The blocks of requests ``idx`` (in that order; repeats allowed), or None without blocks."""
    if prefix is None:
        return None
    idx = np.asarray(idx, dtype=np.int64)
    starts = prefix.offsets[idx]
    counts = prefix.offsets[idx + 1] - starts
    offsets = np.zeros(idx.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    pos = np.repeat(starts, counts) + _segment_arange(counts)
    return PrefixBlocks(prefix.block_tokens, offsets, prefix.ids[pos])


def _prefix_int_array(a, label: str) -> np.ndarray:
    """A read-only int64 copy of a one-dimensional array of integers (integral floats accepted)."""
    try:
        arr = np.asarray(a)
    except (TypeError, ValueError):
        raise FastsimInputError(label, _clip(repr(a)), "a one-dimensional array of integers") from None
    if arr.ndim != 1:
        raise FastsimInputError(label, f"an array of shape {arr.shape}", "a one-dimensional array of integers")
    if arr.size:
        kind = arr.dtype.kind
        if kind == "f":
            bad = ~np.isfinite(arr) | (arr != np.trunc(arr)) | (np.abs(arr) > 2.0 ** 62)
            if bad.any():
                i = int(np.argmax(bad))
                raise FastsimInputError(f"{label}[{i}]", float(arr[i]), "an integer")
        elif kind == "u":
            if int(arr.max()) > _INT64_MAX:
                i = int(np.argmax(arr > _INT64_MAX))
                raise FastsimInputError(f"{label}[{i}]", int(arr[i]), "an integer <= 2**63 - 1")
        elif kind != "i":
            raise FastsimInputError(label, f"an array of dtype {arr.dtype}", "a one-dimensional array of integers")
    return _readonly(arr, np.int64)


def _check_prefix(prefix, p: np.ndarray) -> PrefixBlocks:
    """Validate a Workload's prefix blocks against its prompt tokens ``p``; read-only int64 arrays."""
    if not isinstance(prefix, PrefixBlocks):
        raise FastsimInputError("Workload.prefix", _clip(repr(prefix)),
                                "None or a PrefixBlocks(block_tokens, offsets, ids)")
    bt = prefix.block_tokens
    if isinstance(bt, (bool, np.bool_)) or not isinstance(bt, (int, np.integer)) or bt < 1:
        raise FastsimInputError("Workload.prefix.block_tokens", bt, "an integer >= 1 (tokens per block)")
    bt = int(bt)
    offsets = _prefix_int_array(prefix.offsets, "Workload.prefix.offsets")
    ids = _prefix_int_array(prefix.ids, "Workload.prefix.ids")
    n = p.shape[0]
    if offsets.shape[0] != n + 1:
        raise FastsimInputError("Workload.prefix.offsets", f"{offsets.shape[0]} row pointers",
                                f"n + 1 = {n + 1} row pointers (one per request, plus the end)")
    if offsets[0] != 0:
        raise FastsimInputError("Workload.prefix.offsets[0]", int(offsets[0]), "0")
    counts = np.diff(offsets)
    if np.any(counts < 0):
        i = int(np.argmax(counts < 0))
        raise FastsimInputError(f"Workload.prefix.offsets[{i + 1}]", int(offsets[i + 1]),
                                f"a row pointer >= offsets[{i}] = {int(offsets[i])} (non-decreasing)")
    if offsets[-1] != ids.shape[0]:
        raise FastsimInputError(f"Workload.prefix.offsets[{n}]", int(offsets[-1]),
                                f"len(Workload.prefix.ids) = {ids.shape[0]}")
    if ids.size and ids.min() < 0:
        i = int(np.argmax(ids < 0))
        raise FastsimInputError(f"Workload.prefix.ids[{i}]", int(ids[i]), "a block id >= 0")
    cap = -(-p // bt)
    if np.any(counts > cap):
        i = int(np.argmax(counts > cap))
        raise FastsimInputError(f"Workload.prefix.offsets (request {i})", f"{int(counts[i])} blocks",
                                f"at most ceil(prompt_tokens / block_tokens) = ceil({int(p[i])} / {bt}) = "
                                f"{int(cap[i])} blocks")
    return PrefixBlocks(bt, offsets, ids)


@dataclass(frozen=True, eq=False, repr=False)
class Workload:
    """A list of requests: arrival times and token lengths (immutable).

    Attributes
    ----------
    name : str
        Short label (``"azure-conv"``, ``"chat"``).
    arrival_s : ndarray(float64, ndim=1) of shape ``(n,)``
        Arrival times in seconds, non-decreasing, on a time axis that starts at 0 (a trace's first
        request arrives at 0; a synthetic workload's first request after its first gap).
    prompt_tokens : ndarray(int64, ndim=1) of shape ``(n,)``
        Prompt tokens P per request, each >= 1.
    output_tokens : ndarray(int64, ndim=1) of shape ``(n,)``
        Output tokens O per request, each >= 1 (the first token included).
    source : str
        Where the requests come from (trace file and licence, or the synthetic recipe and seed).
    horizon_s : float, optional
        End of the arrival window ``[0, horizon_s]`` in seconds. Defaults to the last arrival
        (traces); a synthetic workload records the horizon it was drawn over.
    time_unit : {"s", "ms"} or None, optional
        The unit a trace's numeric timestamps were read in (None: date-times, or not a trace).
    dropped : tuple of (int, str), optional
        Rows of the trace file that :func:`read_trace` dropped with ``skip_invalid``: (line
        number, why), in file order.
    prefix : PrefixBlocks or None, optional
        The prefix blocks of each request's prompt (``offsets`` of shape ``(n + 1,)``), for
        prefix caching; None when the source gives no block ids (then no request is known to
        share content with another).

    Raises
    ------
    FastsimInputError
        Arrays of different lengths or not one-dimensional, arrival times not finite,
        negative or decreasing, a length below 1, or a horizon before the last arrival. For
        ``prefix``, naming its field: not a PrefixBlocks, ``block_tokens`` not an integer >= 1,
        ``offsets`` not of length n + 1, not starting at 0, decreasing or not ending at
        ``len(ids)``, an id below 0 or not an integer, or a request listing more than
        ``ceil(P / block_tokens)`` blocks.

    Notes
    -----
    The arrays are stored read-only (float64 / int64, C order), so they can be shared between
    simulations without copies. Equality is identity (arrays do not compare as one bool).
    """

    name: str
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    source: str = ""
    horizon_s: float | None = field(default=None)
    time_unit: str | None = None
    dropped: tuple = ()
    prefix: PrefixBlocks | None = None

    def __post_init__(self):
        arr = _readonly(self.arrival_s, np.float64)
        p = _readonly(self.prompt_tokens, np.int64)
        o = _readonly(self.output_tokens, np.int64)
        if arr.ndim != 1 or p.shape != arr.shape or o.shape != arr.shape:
            raise FastsimInputError(
                "Workload arrays", (arr.shape, p.shape, o.shape),
                "three one-dimensional arrays of equal length (arrival_s, prompt_tokens, output_tokens)")
        n = arr.shape[0]
        if n:
            if not np.all(np.isfinite(arr)) or arr[0] < 0.0:
                raise FastsimInputError("Workload.arrival_s", _first_bad(arr, ~np.isfinite(arr) | (arr < 0)),
                                        "finite times >= 0 s")
            if n > 1 and np.any(arr[1:] < arr[:-1]):
                i = int(np.argmax(arr[1:] < arr[:-1])) + 1
                raise FastsimInputError(f"Workload.arrival_s[{i}]", float(arr[i]),
                                        f"a time >= the previous arrival {float(arr[i - 1])!r} (sorted)")
            for label, a, allowed in (("prompt_tokens", p, _P_ALLOWED), ("output_tokens", o, _O_ALLOWED)):
                if np.any(a < 1):
                    i = int(np.argmax(a < 1))
                    raise FastsimInputError(f"Workload.{label}[{i}]", int(a[i]), allowed)
        last = float(arr[-1]) if n else 0.0
        if self.horizon_s is None:
            horizon = last
        else:
            try:
                horizon = float(self.horizon_s)
            except (TypeError, ValueError):
                raise FastsimInputError("Workload.horizon_s", self.horizon_s, "a number of seconds") from None
            if not (math.isfinite(horizon) and horizon >= last):
                raise FastsimInputError("Workload.horizon_s", self.horizon_s,
                                        f"a finite time >= the last arrival ({last!r} s)")
        object.__setattr__(self, "arrival_s", arr)
        object.__setattr__(self, "prompt_tokens", p)
        object.__setattr__(self, "output_tokens", o)
        object.__setattr__(self, "horizon_s", horizon)
        if self.prefix is not None:
            object.__setattr__(self, "prefix", _check_prefix(self.prefix, p))

    def __repr__(self) -> str:
        return (f"Workload({self.name!r}, n={self.n}, duration_s={self.duration_s:.1f}, "
                f"mean_rate_req_per_s={self.mean_rate_req_per_s:.3f}, source={self.source!r})")

    def __len__(self) -> int:
        return self.n

    # ---- size and rate -----------------------------------------------------------------

    @property
    def n(self) -> int:
        """Number of requests (int)."""
        return int(self.arrival_s.shape[0])

    @property
    def duration_s(self) -> float:
        """Length of the arrival window (float, s): ``horizon_s`` (a trace: its last arrival)."""
        return float(self.horizon_s)

    @property
    def mean_rate_req_per_s(self) -> float:
        """Requests per second over the arrival window (float, req/s), ``n / duration_s`` (NaN when it is empty)."""
        d = self.duration_s
        if d <= 0.0:
            return float("nan")
        return self.n / d

    @property
    def interarrival_cv(self) -> float:
        """Coefficient of variation of the gaps between arrivals (float; 1 for Poisson; NaN below 3 requests)."""
        if self.n < 3:
            return float("nan")
        g = np.diff(self.arrival_s)
        m = g.mean()
        return float(g.std() / m) if m > 0 else float("nan")

    # ---- lengths -----------------------------------------------------------------------

    def _quantile(self, a: np.ndarray, q, label: str) -> float:
        q = _check_q(q)
        if self.n == 0:
            raise FastsimInputError(f"{label} of workload {self.name!r}", "no requests",
                                    "a workload with at least one request")
        return float(np.quantile(a, q))

    def prompt_quantile(self, q: float) -> float:
        """Empirical q-quantile of the prompt tokens (``numpy.quantile``, linear interpolation).

        Parameters
        ----------
        q : float
            Probability in [0, 1] (0.9 for P90).

        Returns
        -------
        float
            Tokens (may fall between two integers: Azure conv P90 is 2,734.5).

        Raises
        ------
        FastsimInputError
            q outside [0, 1] or an empty workload.
        """
        return self._quantile(self.prompt_tokens, q, "prompt quantile")

    def output_quantile(self, q: float) -> float:
        """Empirical q-quantile of the output tokens (``numpy.quantile``, linear interpolation).

        Parameters
        ----------
        q : float
            Probability in [0, 1] (0.9 for P90).

        Returns
        -------
        float
            Tokens (may fall between two integers).

        Raises
        ------
        FastsimInputError
            q outside [0, 1] or an empty workload.
        """
        return self._quantile(self.output_tokens, q, "output quantile")

    @property
    def mean_prompt_tokens(self) -> float:
        """Mean prompt tokens per request (float; NaN when empty)."""
        return float(self.prompt_tokens.mean()) if self.n else float("nan")

    @property
    def mean_output_tokens(self) -> float:
        """Mean output tokens per request (float; NaN when empty)."""
        return float(self.output_tokens.mean()) if self.n else float("nan")

    def total_tokens(self) -> np.ndarray:
        """P + O per request, the KV tokens a request reserves.

        Returns
        -------
        ndarray(int64) of shape (n,)
            A new array (tokens).
        """
        return self.prompt_tokens + self.output_tokens

    def exceeding_context(self, max_context_tokens: int) -> int:
        """Count the requests whose P + O exceeds a model's context window.

        Such requests cannot be served by that model; a planner must report them, not truncate them.

        Parameters
        ----------
        max_context_tokens : int
            The model's context window in tokens (``Model.max_context_tokens``), >= 1.

        Returns
        -------
        int
            Number of requests with ``P + O > max_context_tokens``.

        Raises
        ------
        FastsimInputError
            max_context_tokens not a positive integer.
        """
        if isinstance(max_context_tokens, bool) or not isinstance(max_context_tokens, (int, np.integer)) \
                or max_context_tokens < 1:
            raise FastsimInputError("max_context_tokens", max_context_tokens, "a positive integer")
        return int(np.count_nonzero(self.total_tokens() > int(max_context_tokens)))

    # ---- transforms --------------------------------------------------------------------

    def rescaled(self, rate_req_per_s: float) -> "Workload":
        """A copy whose time axis is stretched so that its mean rate is the target.

        Every gap between arrivals (and the horizon) is multiplied by
        ``mean_rate_req_per_s / rate_req_per_s``; the requests, their order, their lengths and
        their prefix blocks are unchanged. This keeps a trace's burstiness (its inter-arrival CV)
        at any rate.

        Parameters
        ----------
        rate_req_per_s : float
            Target mean rate in requests per second, finite and > 0.

        Returns
        -------
        Workload
            With ``mean_rate_req_per_s == rate_req_per_s`` (to rounding).

        Raises
        ------
        FastsimInputError
            A rate that is not a finite positive number, or a workload whose arrival window has
            zero length (fewer than two distinct arrival times), which has no rate to rescale.
        """
        rate = require_positive("rate_req_per_s", rate_req_per_s)
        old = self.mean_rate_req_per_s
        if not (old > 0.0):
            raise FastsimInputError(f"rescaled({self.name!r})", self.duration_s,
                                    "a workload whose arrival window is longer than 0 s")
        k = old / rate
        return Workload(self.name, self.arrival_s * k, self.prompt_tokens, self.output_tokens,
                        f"{self.source}; time axis x {k:.6g} to {rate:g} req/s", self.horizon_s * k,
                        self.time_unit, self.dropped, self.prefix)

    def summary(self) -> dict:
        """Headline figures: n, duration, rate, inter-arrival CV, length mean/P50/P90/P99/max, prefix reuse.

        Returns
        -------
        dict
            Keys ``n``, ``duration_s``, ``mean_rate_req_per_s``, ``interarrival_cv``; for
            ``prompt`` and ``output``, ``{kind}_mean``, ``{kind}_p50``, ``{kind}_p90``,
            ``{kind}_p99``, ``{kind}_max`` (tokens, float; NaN for an empty workload, which
            raises nothing); ``prefix_block_tokens`` (int, or None without prefix blocks),
            ``prefix_blocks_per_request_mean`` (blocks, float) and ``prefix_reuse_bound``
            (:func:`prefix_reuse_bound`, a fraction of the prompt tokens), both NaN without prefix
            blocks or requests.
        """
        out = {"n": self.n, "duration_s": self.duration_s,
               "mean_rate_req_per_s": self.mean_rate_req_per_s, "interarrival_cv": self.interarrival_cv}
        for kind, a in (("prompt", self.prompt_tokens), ("output", self.output_tokens)):
            if self.n:
                p50, p90, p99 = np.quantile(a, [0.5, 0.9, 0.99])
                out.update({f"{kind}_mean": float(a.mean()), f"{kind}_p50": float(p50),
                            f"{kind}_p90": float(p90), f"{kind}_p99": float(p99), f"{kind}_max": float(a.max())})
            else:
                out.update({f"{kind}_{s}": float("nan") for s in ("mean", "p50", "p90", "p99", "max")})
        has = self.prefix is not None and self.n > 0
        out["prefix_block_tokens"] = None if self.prefix is None else self.prefix.block_tokens
        out["prefix_blocks_per_request_mean"] = (float(self.prefix.ids.shape[0] / self.n) if has
                                                 else float("nan"))
        out["prefix_reuse_bound"] = prefix_reuse_bound(self) if has else float("nan")
        return out


def prefix_reuse_bound(workload: Workload) -> float:
    """The share of all prompt tokens an unbounded prefix cache could serve (an upper bound).

    Requests are taken in arrival order (index order, which breaks ties of equal arrival times).
    Request i hits the longest run of its leading full blocks whose ids appeared, as full blocks
    (``(j + 1) * block_tokens <= P``), in any earlier request, capped so that at least one
    prompt token is computed: at most ``floor((P_i - 1) / block_tokens)`` blocks, so its hit
    tokens are at most ``P_i - 1``. A request's own blocks serve only later requests. Nothing is
    ever evicted, so no real cache serves more.

    Parameters
    ----------
    workload : Workload
        With ``prefix`` blocks (:class:`PrefixBlocks`).

    Returns
    -------
    float
        ``sum_i hit_tokens_i / sum_i P_i``, a fraction in [0, 1) (hit tokens are whole blocks of
        ``block_tokens`` tokens). NaN for a workload with no requests.

    Raises
    ------
    FastsimInputError
        ``workload`` not a Workload, or a Workload without prefix blocks (``prefix`` None).

    Notes
    -----
    A block is available to request i when the first request listing its id as a full block comes
    before i; the hit run is the leading run of available blocks within the cap (vectorised, about
    40 ms for the Mooncake conversation trace). Sources: block ids that name a whole prefix as in
    vLLM's automatic prefix caching and Mooncake's ``hash_ids`` (Qin et al., "Mooncake", FAST
    2025), whose traces report how much of the prompts a large enough cache could reuse.
    """
    if not isinstance(workload, Workload):
        raise FastsimInputError("workload", _clip(repr(workload)), "a Workload")
    pb = workload.prefix
    if pb is None:
        raise FastsimInputError(f"workload {workload.name!r}.prefix", None,
                                "PrefixBlocks (from a trace with hash_ids, or synthesize with "
                                "shared_prefix_tokens or session_turns)")
    n = workload.n
    if n == 0:
        return float("nan")
    p = workload.prompt_tokens
    bt = pb.block_tokens
    counts = np.diff(pb.offsets)
    row = np.repeat(np.arange(n, dtype=np.int64), counts)
    pos = _segment_arange(counts)                       # block index j within its request
    full = (pos + 1) * bt <= p[row]
    # first request listing each id as a full block (rows ascend along ids: the first occurrence)
    fids = pb.ids[full]
    uniq, first_at = np.unique(fids, return_index=True)
    first_row = row[full][first_at]
    k = np.searchsorted(uniq, pb.ids)
    k_ok = k < uniq.shape[0]
    known = np.zeros(pb.ids.shape[0], dtype=bool)
    known[k_ok] = uniq[k[k_ok]] == pb.ids[k_ok]
    avail = np.zeros(pb.ids.shape[0], dtype=bool)
    avail[known] = first_row[k[known]] < row[known]
    ok = avail & (pos < (p[row] - 1) // bt)
    # leading run of ok per request: positions with no miss at or before them in their request
    miss_upto = np.cumsum(~ok)
    miss_before_row = np.concatenate(([0], miss_upto))[pb.offsets[:-1]]   # misses in earlier requests
    leading = miss_upto == miss_before_row[row]
    hit_blocks = np.bincount(row[leading], minlength=n)
    return float((hit_blocks.astype(np.float64) * bt).sum() / p.sum(dtype=np.float64))


def _first_bad(a: np.ndarray, mask: np.ndarray):
    i = int(np.argmax(mask))
    return f"{float(a[i])!r} at index {i}"


def _check_q(q) -> float:
    try:
        qf = float(q)
    except (TypeError, ValueError):
        raise FastsimInputError("q", q, "a probability in [0, 1] (0.9 for P90)") from None
    if not (0.0 <= qf <= 1.0):
        raise FastsimInputError("q", q, "a probability in [0, 1] (0.9 for P90)")
    return qf


# --------------------------------------------------------------------------------------------
# Trace readers
# --------------------------------------------------------------------------------------------

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
        Requests stably sorted by arrival time (each with its prefix blocks), arrival times
        shifted so that the first is 0, ``horizon_s`` at the last arrival. Built-in traces are
        read once and cached (the arrays are read-only).

    Raises
    ------
    FastsimInputError
        One line, naming the file and, where relevant, the line number: unknown built-in name
        (the message lists them), missing or unreadable file, empty file or no rows, missing
        header column, malformed row (wrong number of fields, unparsable timestamp, non-integer
        length, ``hash_ids`` not a list of integers >= 0 or longer than
        ``ceil(input_length / 512)``), prompt tokens below 1, or output tokens below 1 (a request
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
    res = resources.files(__package__).joinpath("data", "traces", fname)
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
    return _finish(name, t_s, np.array(ps, dtype=np.int64), np.array(os_, dtype=np.int64), source, unit,
                   tuple(dropped))


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
    ts, ps, os_, hs, dropped = [], [], [], [], []
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
    if not saw_line:
        raise FastsimInputError(f"{where}", "an empty file", "one JSON object per line, at least one")
    if not ts:
        raise FastsimInputError(f"{where}", f"no valid rows ({len(dropped):,} dropped)", "at least one request row")
    t = np.array(ts, dtype=np.float64)
    t = (t - t.min()) / (1e3 if time_unit == "ms" else 1.0)
    prefix = PrefixBlocks(bt, *_csr(hs)) if any_hash else None
    return _finish(name, t, np.array(ps, dtype=np.int64), np.array(os_, dtype=np.int64), source, time_unit,
                   tuple(dropped), prefix)


def _clip(s: str, n: int = 80) -> str:
    s = s.strip()
    return s if len(s) <= n else s[:n] + "..."


def _finish(name: str, t_s: np.ndarray, p: np.ndarray, o: np.ndarray, source: str, time_unit=None,
            dropped: tuple = (), prefix: PrefixBlocks | None = None) -> Workload:
    """The Workload of parsed rows: stably sorted by time (blocks carried along), shifted to start at 0."""
    if t_s.shape[0] > 1 and np.any(t_s[1:] < t_s[:-1]):
        order = np.argsort(t_s, kind="stable")
        t_s, p, o = t_s[order], p[order], o[order]
        prefix = _take_prefix(prefix, order)
    t_s = t_s - t_s[0]
    return Workload(name, t_s, p, o, source, time_unit=time_unit, dropped=dropped, prefix=prefix)


# --------------------------------------------------------------------------------------------
# Random draws with common random numbers
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class UnitDraws:
    """Rate-free random variates for ``n`` requests, fixed by the seed and the request index.

    Attributes
    ----------
    gaps : ndarray(float64) of shape ``(n,)``
        Unit-mean inter-arrival gaps (exponential for ``poisson``; gamma with shape ``1 / cv^2``
        and scale ``cv^2`` for ``gamma``). At rate r, request i arrives at ``cumsum(gaps)[i] / r``.
    prompt_z, output_z : ndarray(float64) of shape ``(n,)``
        Standard normal variates for the prompt and output lengths (a lognormal length is
        ``exp(mu + sigma z)``).
    pick_u : ndarray(float64) of shape ``(n,)``
        Uniform variates in [0, 1) for resampling a trace's requests (index ``floor(u m)``).
    arrival : str
        ``"poisson"`` or ``"gamma"``.
    cv : float
        Coefficient of variation of the gaps (1 for Poisson).
    """

    gaps: np.ndarray
    prompt_z: np.ndarray
    output_z: np.ndarray
    pick_u: np.ndarray
    arrival: str = "poisson"
    cv: float = 1.0

    @property
    def n(self) -> int:
        """Number of requests drawn (int)."""
        return int(self.gaps.shape[0])


def _seed_seq(seed) -> np.random.SeedSequence:
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise FastsimInputError("seed", seed, "an integer >= 0 or a numpy.random.SeedSequence")
    return np.random.SeedSequence(int(seed))


def _seed_label(ss: np.random.SeedSequence) -> str:
    key = tuple(int(k) for k in ss.spawn_key)
    return f"seed {ss.entropy}" + (f" spawn {key}" if key else "")


def _block_rng(ss: np.random.SeedSequence, stream: int, block: int) -> np.random.Generator:
    child = np.random.SeedSequence(ss.entropy, spawn_key=tuple(ss.spawn_key) + (stream, block),
                                   pool_size=ss.pool_size)
    return np.random.Generator(np.random.PCG64(child))


def _check_arrival(arrival: str, cv) -> tuple:
    if arrival not in ("poisson", "gamma"):
        raise FastsimInputError("arrival", arrival, "'poisson' or 'gamma'")
    try:
        cvf = float(cv)
    except (TypeError, ValueError):
        raise FastsimInputError("cv", cv, "a finite number > 0") from None
    if not (math.isfinite(cvf) and cvf > 0.0):
        raise FastsimInputError("cv", cv, "a finite number > 0")
    if arrival == "poisson" and cvf != 1.0:
        raise FastsimInputError("cv", cv, "1.0 for Poisson arrivals (use arrival='gamma' for another cv)")
    return arrival, cvf


def unit_draws(seed, n_requests: int, *, arrival: str = "poisson", cv: float = 1.0) -> UnitDraws:
    """Draw rate-free variates for the first ``n_requests`` requests of a seed.

    Parameters
    ----------
    seed : int or numpy.random.SeedSequence
        Root of the random streams (an int >= 0, or a child from :func:`seeds_for`).
    n_requests : int
        Number of requests, >= 0.
    arrival : {'poisson', 'gamma'}
        Arrival process: exponential gaps, or gamma gaps (burstier when ``cv > 1``).
    cv : float
        Coefficient of variation of the gaps for ``gamma`` (shape ``1 / cv^2``); must be 1 for
        ``poisson``.

    Returns
    -------
    UnitDraws
        Arrays of shape ``(n_requests,)``. Request i's variates depend only on the seed, the
        arrival process and i: ``unit_draws(s, m)`` is a prefix of ``unit_draws(s, n)`` for
        m <= n.

    Raises
    ------
    FastsimInputError
        A bad seed, a negative or too large ``n_requests``, an unknown arrival process or a cv
        that is not a finite positive number.

    Notes
    -----
    Stream s (0 gaps, 1 prompt, 2 output, 3 resampling) is drawn in blocks of
    :data:`DRAW_BLOCK`; block b comes from a ``numpy.random.Generator(PCG64)`` seeded with the
    child ``SeedSequence(entropy, spawn_key=seed.spawn_key + (s, b))``.
    """
    ss = _seed_seq(seed)
    arrival, cvf = _check_arrival(arrival, cv)
    if isinstance(n_requests, bool) or not isinstance(n_requests, (int, np.integer)) \
            or not (0 <= n_requests <= MAX_REQUESTS):
        raise FastsimInputError("n_requests", n_requests, f"an integer from 0 to {MAX_REQUESTS:,}")
    n = int(n_requests)
    nb = -(-n // DRAW_BLOCK)
    shape = 1.0 / (cvf * cvf)
    gaps, pz, oz, pu = [], [], [], []
    for b in range(nb):
        g = _block_rng(ss, _S_GAPS, b)
        if arrival == "poisson":
            gaps.append(g.standard_exponential(DRAW_BLOCK))
        else:
            gaps.append(g.standard_gamma(shape, DRAW_BLOCK) / shape)
        pz.append(_block_rng(ss, _S_PROMPT, b).standard_normal(DRAW_BLOCK))
        oz.append(_block_rng(ss, _S_OUTPUT, b).standard_normal(DRAW_BLOCK))
        pu.append(_block_rng(ss, _S_PICK, b).random(DRAW_BLOCK))

    def cat(parts):
        return np.concatenate(parts)[:n] if parts else np.empty(0, dtype=np.float64)

    return UnitDraws(cat(gaps), cat(pz), cat(oz), cat(pu), arrival, cvf)


def seeds_for(seed, n: int) -> list:
    """Independent child seeds for ``n`` replications: ``SeedSequence(seed).spawn(n)``.

    Parameters
    ----------
    seed : int or numpy.random.SeedSequence
        Root seed. A SeedSequence is not modified: the same children come back on every call.
    n : int
        Number of children, >= 1.

    Returns
    -------
    list of numpy.random.SeedSequence
        Pass each to :func:`synthesize`; the same list at every rate gives common random numbers
        across rates for each replication.

    Raises
    ------
    FastsimInputError
        A bad seed or n < 1.
    """
    ss = _seed_seq(seed)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise FastsimInputError("n", n, "an integer >= 1")
    root = np.random.SeedSequence(ss.entropy, spawn_key=ss.spawn_key, pool_size=ss.pool_size)
    return root.spawn(int(n))


def _check_dist(d, label: str) -> LengthDist:
    if not isinstance(d, LengthDist):
        raise FastsimInputError(label, d, "a LengthDist")
    if d.kind not in ("lognormal", "fixed"):
        raise FastsimInputError(f"{label}.kind", d.kind, "'lognormal' or 'fixed'")
    if not (math.isfinite(d.mean) and d.mean > 0.0):
        raise FastsimInputError(f"{label}.mean", d.mean, "a finite number of tokens > 0")
    if not (math.isfinite(d.sigma) and d.sigma >= 0.0):
        raise FastsimInputError(f"{label}.sigma", d.sigma, "a finite number >= 0")
    return d


def _dists(scenario_or_dists) -> tuple:
    """(name, prompt LengthDist, output LengthDist) from a Scenario, its name or a pair."""
    obj = scenario_or_dists
    if isinstance(obj, str):
        from .catalog import default_catalog
        obj = default_catalog().scenario(obj)
    if isinstance(obj, Scenario):
        return obj.name, _check_dist(obj.prompt, "scenario.prompt"), _check_dist(obj.output, "scenario.output")
    if isinstance(obj, (tuple, list)) and len(obj) == 2:
        return "synthetic", _check_dist(obj[0], "prompt"), _check_dist(obj[1], "output")
    raise FastsimInputError("scenario_or_dists", obj,
                            "a Scenario, a scenario name or a (prompt, output) pair of LengthDist")


def _lengths(d: LengthDist, z: np.ndarray) -> np.ndarray:
    if d.kind == "fixed":
        return np.full(z.shape[0], max(int(round(d.mean)), 1), dtype=np.int64)
    x = np.rint(np.exp(d.mu + d.sigma * z))
    return np.maximum(x, 1.0).astype(np.int64)


def _describe(d: LengthDist) -> str:
    if d.kind == "fixed":
        return f"fixed {d.mean:g}"
    return f"lognormal(mean {d.mean:g}, sigma {d.sigma:g})"


def _initial_draws(expect: float, cv: float) -> int:
    """Requests to draw first: the mean count plus ten standard deviations (and 100) covers the window."""
    return int(math.ceil(expect + 10.0 * max(cv, 1.0) * math.sqrt(expect) + 100.0))


def _arrivals(ss, rate: float, horizon: float, arrival: str, cv: float):
    """Unit draws covering the horizon and the count of arrivals inside ``[0, horizon)``."""
    expect = rate * horizon
    if expect > MAX_REQUESTS:
        raise FastsimInputError("rate_req_per_s x horizon_s", expect,
                                f"at most {MAX_REQUESTS:,} expected requests")
    n = _initial_draws(expect, cv)
    while True:
        ud = unit_draws(ss, min(n, MAX_REQUESTS), arrival=arrival, cv=cv)
        t = np.cumsum(ud.gaps) / rate
        if ud.n and t[-1] >= horizon:
            return ud, t, int(np.searchsorted(t, horizon, side="left"))
        if n >= MAX_REQUESTS:  # pragma: no cover  (needs ~1e7 standard deviations of bad luck)
            raise FastsimInputError("rate_req_per_s x horizon_s", expect,
                                    f"a window that {MAX_REQUESTS:,} arrivals cover")
        n *= 2  # more blocks of the same streams: the first n draws do not change


def _check_horizon(horizon_s) -> float:
    return require_positive("horizon_s", horizon_s)


#: Default mean time from one turn of a synthetic session to the next (s). The Mooncake
#: conversation trace puts a median of about 126 s (mean 217 s) between a request and the latest
#: earlier request whose prompt it extends by more than two 512-token blocks; 120 s is used.
SESSION_GAP_S = 120.0


def _check_count(label: str, v, lo: int) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < lo:
        raise FastsimInputError(label, v, f"an integer >= {lo}")
    return int(v)


def _session_slots(rate: float, session_turns: int, session_gap_s: float) -> int:
    """Concurrent session slots S: ``max(1, round(rate x session_gap_s))`` (1 without sessions)."""
    if session_turns == 1:
        return 1
    return max(1, int(round(rate * session_gap_s)))


def _sessions(n: int, n_slots: int, turns: int) -> tuple:
    """(turn, prev) per request, int64 of shape (n,): turn index in its session, previous turn's index or -1.

    Request i goes to slot ``s = i % n_slots`` as the slot's ``k = i // n_slots``-th request. A
    slot's requests form consecutive sessions of ``turns`` turns, except its first session, cut
    to ``b = turns - s % turns`` turns (staggered starts): turn = k for k < b, else (k - b) % turns.
    """
    i = np.arange(n, dtype=np.int64)
    s = i % n_slots
    k = i // n_slots
    b = turns - s % turns
    turn = np.where(k < b, k, (k - b) % turns)
    prev = np.where(turn > 0, i - n_slots, -1)
    return turn, prev


def _compose_prompts(u: np.ndarray, o: np.ndarray, turn: np.ndarray, prev: np.ndarray,
                     shared_tokens: int, bt: int) -> tuple:
    """Prompt tokens and prefix blocks of system prompt + sessions (see :func:`synthesize`)."""
    n = u.shape[0]
    p = np.empty(n, dtype=np.int64)
    kept = np.empty(n, dtype=np.int64)   # leading blocks equal to the previous turn's (or the system prompt's)
    k0 = shared_tokens // bt
    first = turn == 0
    p[first] = shared_tokens + u[first]
    kept[first] = k0
    t = 1
    while True:
        m = np.flatnonzero(turn == t)
        if m.shape[0] == 0:
            break
        pp = prev[m]
        p[m] = p[pp] + o[pp] + u[m]
        kept[m] = p[pp] // bt                   # every full block of the previous prompt
        t += 1
    nb = -(-p // bt)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(nb, out=offsets[1:])
    total = int(offsets[-1])
    if total > MAX_PREFIX_BLOCKS:
        raise FastsimInputError("prefix_block_tokens", bt, f"a block size giving at most {MAX_PREFIX_BLOCKS:,} "
                                f"prefix blocks in all ({total:,} at {bt} tokens per block)")
    ids = np.empty(total, dtype=np.int64)
    # new content: fresh ids, numbered request after request from k0
    fresh = nb - kept
    fresh_start = np.zeros(n, dtype=np.int64)
    np.cumsum(fresh[:-1], out=fresh_start[1:])
    r = _segment_arange(fresh)
    ids[np.repeat(offsets[:-1] + kept, fresh) + r] = np.repeat(fresh_start + k0, fresh) + r
    # first turns: the system prompt's full blocks, ids 0 .. k0 - 1
    if k0:
        f = np.flatnonzero(first)
        ids[(offsets[f][:, None] + np.arange(k0)).ravel()] = np.tile(np.arange(k0, dtype=np.int64), f.shape[0])
    # later turns, in turn order: the previous turn's full blocks
    t = 1
    while True:
        m = np.flatnonzero(turn == t)
        if m.shape[0] == 0:
            break
        c = kept[m]
        r = _segment_arange(c)
        ids[np.repeat(offsets[m], c) + r] = ids[np.repeat(offsets[prev[m]], c) + r]
        t += 1
    return p, PrefixBlocks(bt, offsets, ids)


def synthesize(scenario_or_dists, rate_req_per_s: float, horizon_s: float, seed=0, *,
               arrival: str = "poisson", cv: float = 1.0, name: str | None = None,
               shared_prefix_tokens: int = 0, session_turns: int = 1, prefix_block_tokens: int = 16,
               session_gap_s: float = SESSION_GAP_S) -> Workload:
    """Draw a synthetic workload: Poisson or gamma arrivals, lognormal or fixed lengths, shared prefixes.

    Parameters
    ----------
    scenario_or_dists : Scenario, str or (LengthDist, LengthDist)
        A scenario (its prompt and output distributions are used, not its rate), a built-in
        scenario name, or a ``(prompt, output)`` pair.
    rate_req_per_s : float
        Arrival rate in requests per second, finite and > 0.
    horizon_s : float
        Arrival window in seconds; requests arrive in ``[0, horizon_s)``. SPEC §6 uses 600 s.
    seed : int or numpy.random.SeedSequence
        Root of the random streams (see :func:`unit_draws`).
    arrival : {'poisson', 'gamma'}
        Arrival process.
    cv : float
        Inter-arrival coefficient of variation for ``gamma`` (1 for ``poisson``).
    name : str, optional
        Label of the workload (default: the scenario's name).
    shared_prefix_tokens : int, default 0
        Tokens N of a system prompt prepended to every prompt (>= 0): a session's first prompt is
        ``N + u_i``, u_i the drawn prompt length, and its first ``floor(N / prefix_block_tokens)``
        blocks are shared by every request.
    session_turns : int, default 1
        Turns T per multi-turn session (>= 1; 1: every request is its own conversation). Turn
        t > 0's prompt is the previous turn's prompt, the previous turn's output and the new
        user message: ``P_i = P_prev + O_prev + u_i``, so its blocks extend the previous turn's.
    prefix_block_tokens : int, default 16
        Tokens per prefix block (>= 1), the hashing granularity of the ids (16 is vLLM's KV block
        size).
    session_gap_s : float, default :data:`SESSION_GAP_S` (120 s)
        Mean time from one turn of a session to its next (s, finite and > 0); it sets the number
        of concurrent sessions, see Notes. Used only when ``session_turns > 1``.

    Returns
    -------
    Workload
        Request i arrives at ``cumsum(gaps)[i] / rate_req_per_s``; its lengths are
        ``max(rint(exp(mu + sigma z_i)), 1)`` with ``mu = ln(mean) - sigma^2 / 2`` (so the
        lognormal has the scenario's mean), or the rounded mean for ``fixed``. Enough draws are
        made to pass the horizon (more are drawn if the first batch falls short), so the window is
        never cut short. ``horizon_s`` is recorded on the workload. With ``shared_prefix_tokens``
        or ``session_turns`` set, prompts are composed as above and ``prefix`` holds each
        request's ``ceil(P_i / prefix_block_tokens)`` blocks (its last one possibly partial);
        otherwise ``prefix`` is None.

    Raises
    ------
    FastsimInputError
        A bad scenario or distribution, rate, horizon, seed, arrival process or cv, or more than
        :data:`MAX_REQUESTS` expected requests; ``shared_prefix_tokens`` not an integer >= 0,
        ``session_turns`` or ``prefix_block_tokens`` not an integer >= 1, ``session_gap_s`` not a
        finite number > 0, or more than :data:`MAX_PREFIX_BLOCKS` blocks in all.

    Notes
    -----
    Common random numbers (SPEC §6): the same seed at two rates gives the same requests, in the
    same order, with identical lengths; arrival times scale exactly as 1 / rate, and the lower
    rate sees a prefix of the higher rate's requests. The prefix options change no random draw:
    arrivals, output lengths and the drawn message lengths u_i are those of the same seed
    without them, and the same seed gives the same workload.

    Sessions: request i (in arrival order) is dealt to slot ``s = i mod S`` of
    ``S = max(1, round(rate_req_per_s x session_gap_s))`` concurrent slots, as that slot's
    ``k = i // S``-th request. Each slot runs its sessions one after another, T turns each, except
    its first session, cut to ``T - (s mod T)`` turns so that sessions of different slots start at
    staggered times: the request's turn is ``k`` when ``k < T - (s mod T)``, else
    ``(k - T + s mod T) mod T``, and a turn > 0 continues request ``i - S``, which arrived
    earlier (about ``session_gap_s`` earlier: S gaps at the rate; the next turn is not made to
    wait for the previous answer to finish). Because S depends on the rate, two rates on one seed
    compose sessions from the same draws differently, so prompts of later turns differ between
    rates; at the end of the horizon sessions are cut short. Prompts grow with every turn: see
    :meth:`Workload.exceeding_context`.

    Block ids (``prefix_block_tokens`` tokens per block; an id names the whole prefix up to its
    block): ids ``0 .. floor(N / prefix_block_tokens) - 1`` are the system prompt's full blocks;
    turn t > 0 repeats the ids of every full block of the previous turn's prompt; every other
    block (user messages, previous outputs, a block straddling the end of a previous prompt or of
    the system prompt) is new content and gets the next unused id, request after request. Drawn
    messages are taken never to repeat, so equal ids are exactly equal content. Outputs are part
    of the next turn's prompt but get new ids (only prompt blocks are listed).
    """
    wname, pd, od = _dists(scenario_or_dists)
    rate = require_positive("rate_req_per_s", rate_req_per_s)
    horizon = _check_horizon(horizon_s)
    ss = _seed_seq(seed)
    arrival, cvf = _check_arrival(arrival, cv)
    n_sys = _check_count("shared_prefix_tokens", shared_prefix_tokens, 0)
    turns = _check_count("session_turns", session_turns, 1)
    bt = _check_count("prefix_block_tokens", prefix_block_tokens, 1)
    gap = require_positive("session_gap_s", session_gap_s)
    ud, t, k = _arrivals(ss, rate, horizon, arrival, cvf)
    src = (f"synthetic: {arrival} arrivals" + (f" (cv {cvf:g})" if arrival == "gamma" else "")
           + f" at {rate:g} req/s over {horizon:g} s, {_seed_label(ss)}; prompt {_describe(pd)}, "
           f"output {_describe(od)}")
    p = _lengths(pd, ud.prompt_z[:k])
    o = _lengths(od, ud.output_z[:k])
    prefix = None
    if n_sys or turns > 1:
        n_slots = _session_slots(rate, turns, gap)
        turn, prev = _sessions(k, n_slots, turns)
        p, prefix = _compose_prompts(p, o, turn, prev, n_sys, bt)
        if n_sys:
            src += f"; a shared {n_sys}-token system prompt before every first turn"
        if turns > 1:
            src += (f"; sessions of {turns} turns (prompt = previous prompt + output + message) in "
                    f"{n_slots} concurrent slots, about {n_slots / rate:.4g} s between turns")
        src += f"; prefix blocks of {bt} tokens"
    return Workload(name or wname, t[:k], p, o, src, horizon, prefix=prefix)


def synthesize_many(scenario_or_dists, rate_req_per_s: float, horizon_s: float, seed=0,
                    n_seeds: int = 4, *, arrival: str = "poisson", cv: float = 1.0,
                    name: str | None = None, shared_prefix_tokens: int = 0, session_turns: int = 1,
                    prefix_block_tokens: int = 16, session_gap_s: float = SESSION_GAP_S) -> list:
    """Draw one workload per child seed: ``[synthesize(..., s) for s in seeds_for(seed, n_seeds)]``.

    Parameters
    ----------
    scenario_or_dists, rate_req_per_s, horizon_s, arrival, cv, name
        As for :func:`synthesize`.
    shared_prefix_tokens, session_turns, prefix_block_tokens, session_gap_s
        As for :func:`synthesize` (system prompt, multi-turn sessions and their prefix blocks).
    seed : int or numpy.random.SeedSequence
        Root seed; the children are the same on every call, so replication j sees common random
        numbers at every rate.
    n_seeds : int
        Number of replications, >= 1.

    Returns
    -------
    list of Workload
        Of length ``n_seeds``.

    Raises
    ------
    FastsimInputError
        As for :func:`synthesize` and :func:`seeds_for`.
    """
    return [synthesize(scenario_or_dists, rate_req_per_s, horizon_s, s, arrival=arrival, cv=cv, name=name,
                       shared_prefix_tokens=shared_prefix_tokens, session_turns=session_turns,
                       prefix_block_tokens=prefix_block_tokens, session_gap_s=session_gap_s)
            for s in seeds_for(seed, n_seeds)]


def synthesize_from_trace(trace: Workload, rate_req_per_s: float, horizon_s: float, seed=0, *,
                          arrival: str = "poisson", cv: float = 1.0,
                          name: str | None = None) -> Workload:
    """Draw arrivals at a rate and resample a trace's (P, O) pairs with replacement.

    Parameters
    ----------
    trace : Workload
        The empirical length distribution: request ``floor(u_i m)`` of the trace's m requests
        gives request i its prompt and output lengths together (their correlation is kept), and
        its prefix blocks when the trace has them (a row drawn twice is the same prompt twice, so
        the two requests share all its blocks).
    rate_req_per_s, horizon_s, seed, arrival, cv
        As for :func:`synthesize` (Poisson by default; the trace's own timestamps are not used,
        see :meth:`Workload.rescaled` to replay them at another rate).
    name : str, optional
        Label (default: ``"<trace name>-resampled"``).

    Returns
    -------
    Workload
        With ``prefix`` the sampled rows' blocks (None when the trace has none).

    Raises
    ------
    FastsimInputError
        ``trace`` not a Workload or empty, and as for :func:`synthesize`.
    """
    if not isinstance(trace, Workload) or trace.n == 0:
        raise FastsimInputError("trace", trace, "a Workload with at least one request (see read_trace)")
    rate = require_positive("rate_req_per_s", rate_req_per_s)
    horizon = _check_horizon(horizon_s)
    ss = _seed_seq(seed)
    arrival, cvf = _check_arrival(arrival, cv)
    ud, t, k = _arrivals(ss, rate, horizon, arrival, cvf)
    m = trace.n
    idx = np.minimum((ud.pick_u[:k] * m).astype(np.int64), m - 1)
    src = (f"resampled lengths of {trace.name!r} ({trace.source}); {arrival} arrivals"
           + (f" (cv {cvf:g})" if arrival == "gamma" else "")
           + f" at {rate:g} req/s over {horizon:g} s, {_seed_label(ss)}")
    return Workload(name or f"{trace.name}-resampled", t[:k], trace.prompt_tokens[idx],
                    trace.output_tokens[idx], src, horizon, prefix=_take_prefix(trace.prefix, idx))


def scenario_workload(scenario, horizon_s: float = 600.0, seed=0, *, shared_prefix_tokens: int = 0,
                      session_turns: int = 1, prefix_block_tokens: int = 16,
                      session_gap_s: float = SESSION_GAP_S) -> Workload:
    """The workload of a scenario at its own target rate (Poisson arrivals, its lognormal lengths).

    Parameters
    ----------
    scenario : Scenario or str
        A scenario or a built-in scenario name (``"chat"``, ``"coding-agent"``, ...).
    horizon_s : float
        Arrival window in seconds (600 s by default, SPEC §6).
    seed : int or numpy.random.SeedSequence
    shared_prefix_tokens, session_turns, prefix_block_tokens, session_gap_s
        As for :func:`synthesize` (system prompt, multi-turn sessions and their prefix blocks).

    Returns
    -------
    Workload
        ``synthesize(scenario, scenario.rate_req_per_s, horizon_s, seed, ...)``.

    Raises
    ------
    FastsimInputError
        An unknown scenario name, or as for :func:`synthesize`.
    """
    if isinstance(scenario, str):
        from .catalog import default_catalog
        scenario = default_catalog().scenario(scenario)
    if not isinstance(scenario, Scenario):
        raise FastsimInputError("scenario", scenario, "a Scenario or a scenario name")
    return synthesize(scenario, scenario.rate_req_per_s, horizon_s, seed,
                      shared_prefix_tokens=shared_prefix_tokens, session_turns=session_turns,
                      prefix_block_tokens=prefix_block_tokens,
                      session_gap_s=session_gap_s)


# --------------------------------------------------------------------------------------------
# Length figures for planners
# --------------------------------------------------------------------------------------------

def length_quantiles(obj, q: float = 0.9) -> tuple:
    """The q-quantiles of prompt and output tokens, as planners use them (SPEC §5: P90, not mean).

    Parameters
    ----------
    obj : Scenario, str, (LengthDist, LengthDist) or Workload
        A scenario (or its name) or a pair of distributions: the analytic quantile of each
        distribution (lognormal ``exp(mu + sigma Phi^-1(q))``; a fixed length is its own
        quantile). A workload: the empirical quantile (``numpy.quantile``, linear method).
    q : float
        Probability in [0, 1]; 0.9 by default.

    Returns
    -------
    (float, float)
        ``(prompt_q, output_q)`` in tokens, unrounded (coding-agent prompt P90: 16,195.3).

    Raises
    ------
    FastsimInputError
        q outside [0, 1], an empty workload, or an object of another type.
    """
    qf = _check_q(q)
    if isinstance(obj, Workload):
        return obj.prompt_quantile(qf), obj.output_quantile(qf)
    _, pd, od = _dists(obj)
    return float(pd.quantile(qf)), float(od.quantile(qf))


def length_means(obj) -> tuple:
    """Mean prompt and output tokens: analytic for a scenario or distributions, empirical for a workload.

    Parameters
    ----------
    obj : Scenario, str, (LengthDist, LengthDist) or Workload

    Returns
    -------
    (float, float)
        ``(mean_prompt_tokens, mean_output_tokens)``. For a lognormal this is the distribution's
        ``mean`` (draws are rounded to integers >= 1, which moves the sample mean by well under
        one token).

    Raises
    ------
    FastsimInputError
        An object of another type.
    """
    if isinstance(obj, Workload):
        return obj.mean_prompt_tokens, obj.mean_output_tokens
    _, pd, od = _dists(obj)
    return float(pd.mean), float(od.mean)


class ServedLengths(NamedTuple):
    """Length moments of the requests a model serves: those whose prompt + output fit its context.

    Attributes
    ----------
    served_fraction : float
        ``P(P + O <= C)``: the share of requests the simulator accepts (the rest are rejected at
        arrival, counted as misses, and cost no work).
    mean_prompt_tokens, mean_output_tokens : float
        ``E[P | P + O <= C]`` and ``E[O | P + O <= C]`` (tokens).
    work_prompt_tokens : float
        ``E[P^2 | P + O <= C] / E[P | P + O <= C]`` (tokens): the work-weighted prompt
        (:attr:`fastsim.catalog.LengthDist.work_mean` of the served requests).
    binds : bool
        False when the truncation moves none of these figures by more than
        :data:`TRUNCATION_NEGLIGIBLE` (relative; ``C`` infinite included): they are then the
        untruncated ones, bit for bit.
    """

    served_fraction: float
    mean_prompt_tokens: float
    mean_output_tokens: float
    work_prompt_tokens: float
    binds: bool


#: Relative change below which the truncation at the context is taken not to bind: when neither
#: the rejected share nor any truncated figure (means, work-weighted prompt) differs from the
#: untruncated one by more than this, :func:`served_lengths` returns the untruncated figures bit
#: for bit (chat on a 131,072-token context: rejected share 4e-11, work-weighted prompt 5e-7).
#: The screen's figures are quoted to four digits and the simulator's sampling noise is far larger.
TRUNCATION_NEGLIGIBLE = 1e-6


def _fixed_value(d: LengthDist):
    """A degenerate distribution's length (fixed, or lognormal with sigma 0); None otherwise."""
    return float(d.mean) if d.kind == "fixed" or d.sigma == 0.0 else None


def _partial_moment(d: LengthDist, k: int, c: float) -> float:
    """``E[X^k; X <= c]`` of a length distribution (closed form: ``exp(k mu + k^2 s^2 / 2)
    Phi((ln c - mu - k s^2) / s)``, evaluated in log space so sigma up to ~25 does not overflow)."""
    if not c > 0.0:
        return 0.0
    v = _fixed_value(d)
    if v is not None:
        return v ** k if v <= c else 0.0
    mu, s = d.mu, d.sigma
    if math.isinf(c):
        return math.exp(k * mu + 0.5 * k * k * s * s)
    from scipy.special import log_ndtr
    return math.exp(k * mu + 0.5 * k * k * s * s + float(log_ndtr((math.log(c) - mu - k * s * s) / s)))


def _upper_tail(d: LengthDist, k: int, c: float) -> float:
    """``E[X^k; X > c] / E[X^k]``: the share of the k-th moment beyond c."""
    v = _fixed_value(d)
    if v is not None:
        return 1.0 if v > c else 0.0
    from scipy.special import ndtr
    return float(ndtr(-(math.log(c) - d.mu - k * d.sigma ** 2) / d.sigma))


def served_lengths(obj, max_context_tokens) -> ServedLengths:
    """Moments of the prompt and output lengths a model with a context of C tokens actually serves.

    The simulator rejects a request whose prompt + output exceeds the context at arrival (SPEC
    §7; :mod:`fastsim.sim.engine`): it is counted (a miss) but costs no work. The analytic
    screen's throughput figures must therefore be those of the distribution truncated to
    ``P + O <= C``, with P and O independent (as :func:`synthesize` draws them). With
    ``M_k(c) = E[P^k; P <= c] = exp(k mu + k^2 s^2 / 2) Phi((ln c - mu - k s^2) / s)`` (closed
    form),

    - ``served_fraction = E_O[M_0(C - O)]``, ``E[P^k; P + O <= C] = E_O[M_k(C - O)]`` and
      ``E[O; P + O <= C] = E_O[O M_0(C - O)]``;
    - the outer expectation is exact when either length is fixed (one closed form) and
      otherwise a one-dimensional integral over the output's underlying normal, taken by
      adaptive quadrature (``scipy.integrate.quad``, relative tolerance 1e-12) on
      ``z in [-12, min(12, (ln C - mu_O) / s_O)]`` (the mass outside is below 1e-32).

    Lengths are treated as continuous (the simulator rounds each draw to an integer >= 1, which
    moves a mean by well under one token). No sampling is involved.

    Parameters
    ----------
    obj : Scenario, str or (LengthDist, LengthDist)
        A scenario, its name, or a (prompt, output) pair of distributions.
    max_context_tokens : float
        The model's context C (tokens, > 0; ``math.inf`` for none).

    Returns
    -------
    ServedLengths
        When the truncation does not bind (C infinite, or no figure moved by more than
        :data:`TRUNCATION_NEGLIGIBLE` relative), exactly the untruncated figures
        (``LengthDist.mean``, ``LengthDist.work_mean``) with ``served_fraction`` 1.0 and
        ``binds`` False. When no request fits, ``served_fraction`` 0.0 and the untruncated
        figures (nothing is served; callers must not size for it).

    Raises
    ------
    FastsimInputError
        ``max_context_tokens`` not a number > 0, or ``obj`` of another type.
    """
    _, pd, od = _dists(obj)
    c = max_context_tokens
    if isinstance(c, bool) or not isinstance(c, (int, float, np.integer, np.floating)) or not c > 0:
        raise FastsimInputError("max_context_tokens", c, "a number of tokens > 0 (math.inf for no context limit)")
    return _served_lengths(pd, od, float(c))


@lru_cache(maxsize=256)
def _served_lengths(pd: LengthDist, od: LengthDist, c: float) -> ServedLengths:
    plain = ServedLengths(1.0, float(pd.mean), float(od.mean), float(pd.work_mean), False)
    if math.isinf(c):
        return plain
    half = c / 2.0
    # P + O > C needs P > C/2 or O > C/2: a bound on every moment's share beyond C (1e-15: no work)
    if max(_upper_tail(pd, 2, half), _upper_tail(pd, 1, half), _upper_tail(pd, 0, half),
           _upper_tail(od, 1, half), _upper_tail(od, 0, half)) < 1e-15:
        return plain
    vp, vo = _fixed_value(pd), _fixed_value(od)
    if vo is not None:
        f = _partial_moment(pd, 0, c - vo)
        ep, ep2, eo = _partial_moment(pd, 1, c - vo), _partial_moment(pd, 2, c - vo), vo * f
    elif vp is not None:
        f = _partial_moment(od, 0, c - vp)
        ep, ep2, eo = vp * f, vp * vp * f, _partial_moment(od, 1, c - vp)
    else:
        from scipy.integrate import quad
        mu_o, s_o = od.mu, od.sigma
        hi = min(12.0, (math.log(c) - mu_o) / s_o)
        inv = 1.0 / math.sqrt(2.0 * math.pi)

        def outer(g):
            if hi <= -12.0:
                return 0.0

            def h(z):
                o = math.exp(mu_o + s_o * z)
                return inv * math.exp(-0.5 * z * z) * g(o)
            return quad(h, -12.0, hi, epsabs=0.0, epsrel=1e-12, limit=400)[0]

        f = outer(lambda o: _partial_moment(pd, 0, c - o))
        ep = outer(lambda o: _partial_moment(pd, 1, c - o))
        ep2 = outer(lambda o: _partial_moment(pd, 2, c - o))
        eo = outer(lambda o: o * _partial_moment(pd, 0, c - o))
    if not (f > 0.0 and ep > 0.0):
        return plain._replace(served_fraction=0.0, binds=True)
    out = ServedLengths(min(f, 1.0), ep / f, eo / f, ep2 / ep, True)
    if max(1.0 - out.served_fraction, abs(out.mean_prompt_tokens / plain.mean_prompt_tokens - 1.0),
           abs(out.mean_output_tokens / plain.mean_output_tokens - 1.0),
           abs(out.work_prompt_tokens / plain.work_prompt_tokens - 1.0)) < TRUNCATION_NEGLIGIBLE:
        return plain
    return out


# --------------------------------------------------------------------------------------------
# Time-varying arrivals: rate profiles
# --------------------------------------------------------------------------------------------

#: Built-in rate profiles shipped in ``fastsim/data/traffic``: name -> (file, description).
#: Per-window request rates of production models over 1-14 days, derived from ServeGen
#: (alibaba/ServeGen @ f891d1189eb32b3868dfc443800c4150548c282a, Apache-2.0; the rates of all
#: of a model's clients summed per 600-s window): see ``fastsim/data/traffic/ATTRIBUTION.md``.
BUILTIN_PROFILES = {
    "m-large": ("language_m-large.csv", "ServeGen language model M-large, 14 days of 600-s windows (162 clients "
                "summed; alibaba/ServeGen @ f891d1189eb32b3868dfc443800c4150548c282a, Apache-2.0)"),
    "m-mid": ("language_m-mid.csv", "ServeGen language model M-mid, 14 days of 600-s windows (109 clients "
              "summed; alibaba/ServeGen @ f891d1189eb32b3868dfc443800c4150548c282a, Apache-2.0)"),
    "m-small": ("language_m-small.csv", "ServeGen language model M-small, 14 days of 600-s windows (43 clients "
                "summed; alibaba/ServeGen @ f891d1189eb32b3868dfc443800c4150548c282a, Apache-2.0)"),
    "deepseek-r1": ("reason_deepseek-r1.csv", "ServeGen reasoning model DeepSeek-R1, 1 day of 600-s windows "
                    "(73 clients summed; alibaba/ServeGen @ f891d1189eb32b3868dfc443800c4150548c282a, "
                    "Apache-2.0)"),
}

_PROFILE_COLUMNS = ("window_start_s", "rate_req_per_s")


class ProfileGaps(NamedTuple):
    """Runs of zero-rate windows of a :class:`RateProfile` (missing data, not idle traffic).

    Attributes
    ----------
    start_s, end_s : ndarray(float64) of shape ``(g,)``
        Start and end (s) of each of the ``g`` runs, in time order; a run covers
        ``[start_s, end_s)``.
    """

    start_s: np.ndarray
    end_s: np.ndarray

    @property
    def count(self) -> int:
        """Number of runs of zero-rate windows (int)."""
        return int(self.start_s.shape[0])

    @property
    def total_s(self) -> float:
        """Total duration of the runs (s)."""
        return float(np.sum(self.end_s - self.start_s))

    @property
    def longest_s(self) -> float:
        """Duration of the longest run (s; 0 without gaps)."""
        return float(np.max(self.end_s - self.start_s)) if self.count else 0.0

    def describe(self) -> str:
        """Describe the gaps in one line.

        Returns
        -------
        str
            ``"none"``, or the number of runs, their total duration and the longest.
        """
        if not self.count:
            return "none"
        return (f"{self.count} run{'s' if self.count != 1 else ''} of zero-rate windows (missing data, no "
                f"arrivals drawn), {_hours(self.total_s)} in all, longest {_hours(self.longest_s)}")


def _hours(s: float) -> str:
    return f"{s / 3600.0:.3g} h" if s >= 3600.0 else f"{s:g} s"


class RateProfile(NamedTuple):
    """A piecewise-constant arrival rate over consecutive windows.

    Attributes
    ----------
    name : str
        Label (a built-in name or the file's stem).
    window_start_s : ndarray(float64) of shape ``(w,)``
        Window starts in seconds, strictly ascending, the first 0.
    rate_req_per_s : ndarray(float64) of shape ``(w,)``
        Mean arrival rate in each window (req/s, finite, >= 0). Zero-rate windows are gaps
        (missing data): no arrivals are drawn in them, and :attr:`gaps` reports them.
    window_end_s : ndarray(float64) of shape ``(w,)``
        Window ends (s): the next window's start; the last window ends ``last_window_s`` after
        its start.
    source : str
        Where the profile comes from.

    Notes
    -----
    Build one with :func:`read_rate_profile` or :meth:`constant`; the arrays are read-only.
    """

    name: str
    window_start_s: np.ndarray
    rate_req_per_s: np.ndarray
    window_end_s: np.ndarray
    source: str = ""

    @classmethod
    def from_arrays(cls, name: str, window_start_s, rate_req_per_s, last_window_s: float | None = None,
                    source: str = "") -> "RateProfile":
        """A profile from window starts and rates, checked.

        Parameters
        ----------
        name : str
        window_start_s : array_like of float, shape ``(w,)``
            Window starts (s), strictly ascending from 0; w >= 1.
        rate_req_per_s : array_like of float, shape ``(w,)``
            Rates (req/s), finite and >= 0, at least one > 0.
        last_window_s : float, optional
            Length of the last window (s, > 0). Default: the previous window's length (required
            when ``w == 1``).
        source : str

        Returns
        -------
        RateProfile

        Raises
        ------
        FastsimInputError
            Shapes that differ or are empty, a first start other than 0, starts not strictly
            ascending, a rate negative or not finite, every rate 0, or no last window length.
        """
        t = np.asarray(window_start_s, dtype=np.float64).ravel()
        r = np.asarray(rate_req_per_s, dtype=np.float64).ravel()
        if t.shape != r.shape or t.shape[0] == 0:
            raise FastsimInputError("window_start_s, rate_req_per_s", (t.shape, r.shape),
                                    "two arrays of the same length >= 1")
        if not (np.all(np.isfinite(t)) and t[0] == 0.0):
            raise FastsimInputError("window_start_s[0]", float(t[0]), "0 (a profile's time axis starts at 0)")
        bad = np.flatnonzero(~(np.diff(t) > 0.0))
        if bad.shape[0]:
            i = int(bad[0]) + 1
            raise FastsimInputError(f"window_start_s[{i}]", float(t[i]), f"a start after {t[i - 1]:g} s "
                                    "(windows strictly ascending)")
        bad = np.flatnonzero(~(np.isfinite(r) & (r >= 0.0)))
        if bad.shape[0]:
            i = int(bad[0])
            raise FastsimInputError(f"rate_req_per_s[{i}]", float(r[i]), "a finite rate >= 0 (req/s)")
        if not np.any(r > 0.0):
            raise FastsimInputError("rate_req_per_s", "all 0", "at least one window with a rate > 0")
        if last_window_s is None:
            if t.shape[0] < 2:
                raise FastsimInputError("last_window_s", None, "the last window's length in seconds (required "
                                        "for a profile of one window)")
            last = float(t[-1] - t[-2])
        else:
            last = require_positive("last_window_s", last_window_s)
        end = np.append(t[1:], t[-1] + last)
        return cls(str(name), _readonly(t, np.float64), _readonly(r, np.float64), _readonly(end, np.float64),
                   source)

    @classmethod
    def constant(cls, rate_req_per_s: float, duration_s: float, *, window_s: float | None = None,
                 name: str = "constant") -> "RateProfile":
        """A profile of one rate over ``[0, duration_s)``, in windows of ``window_s`` (default one window).

        Parameters
        ----------
        rate_req_per_s : float
            Rate (req/s, > 0).
        duration_s : float
            Span (s, > 0).
        window_s : float, optional
            Window length (s, > 0); the last window is cut at ``duration_s``.
        name : str

        Returns
        -------
        RateProfile

        Raises
        ------
        FastsimInputError
            A rate, duration or window length that is not a finite number > 0.
        """
        rate = require_positive("rate_req_per_s", rate_req_per_s)
        dur = require_positive("duration_s", duration_s)
        w = dur if window_s is None else require_positive("window_s", window_s)
        starts = np.arange(0.0, dur, w)
        return cls.from_arrays(name, starts, np.full(starts.shape[0], rate), dur - starts[-1],
                               f"constant {rate:g} req/s over {dur:g} s")

    @property
    def n_windows(self) -> int:
        """Number of windows (int)."""
        return int(self.window_start_s.shape[0])

    @property
    def span_s(self) -> float:
        """End of the last window (s): the profile covers ``[0, span_s)``."""
        return float(self.window_end_s[-1])

    @property
    def window_s(self) -> np.ndarray:
        """Window lengths (s), ndarray(float64) of shape ``(w,)``."""
        return self.window_end_s - self.window_start_s

    @property
    def gaps(self) -> ProfileGaps:
        """Runs of consecutive zero-rate windows (:class:`ProfileGaps`)."""
        z = np.concatenate(([False], self.rate_req_per_s == 0.0, [False]))
        d = np.diff(z.astype(np.int8))
        first, past = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
        return ProfileGaps(self.window_start_s[first].copy(), self.window_end_s[past - 1].copy())

    @property
    def peak_rate_req_per_s(self) -> float:
        """Highest window rate (req/s)."""
        return float(np.max(self.rate_req_per_s))

    @property
    def trough_rate_req_per_s(self) -> float:
        """Lowest rate outside the gaps (req/s)."""
        r = self.rate_req_per_s
        return float(np.min(r[r > 0.0]))

    @property
    def mean_rate_req_per_s(self) -> float:
        """Time-weighted mean rate outside the gaps (req/s): expected requests / traffic time."""
        r, w = self.rate_req_per_s, self.window_s
        return float(np.sum(r * w) / np.sum(w[r > 0.0]))

    def expected_requests(self, horizon_s: float | None = None) -> float:
        """Expected arrivals: the integral of the rate over ``[0, horizon_s)``.

        Parameters
        ----------
        horizon_s : float, optional
            End of the window (s); default, and at most, the profile's span.

        Returns
        -------
        float
            Expected number of requests.
        """
        h = self.span_s if horizon_s is None else min(float(horizon_s), self.span_s)
        w = np.clip(np.minimum(self.window_end_s, h) - self.window_start_s, 0.0, None)
        return float(np.sum(self.rate_req_per_s * w))

    def scaled(self, factor: float) -> "RateProfile":
        """Every rate multiplied by ``factor`` (``--rate-scale``: fit a profile to a fleet size).

        Parameters
        ----------
        factor : float
            Finite and > 0.

        Returns
        -------
        RateProfile
            Same windows; gaps stay gaps.

        Raises
        ------
        FastsimInputError
            ``factor`` not a finite number > 0.
        """
        f = require_positive("rate_scale", factor)
        if f == 1.0:
            return self
        return self._replace(rate_req_per_s=_readonly(self.rate_req_per_s * f, np.float64),
                             source=f"{self.source}; rates x {f:g}")

    def describe(self) -> str:
        """Describe the profile in one line.

        Returns
        -------
        str
            Windows, span, peak, mean and trough rates (req/s) and gaps.
        """
        return (f"profile {self.name}: {self.n_windows:,} windows over {_hours(self.span_s)}; peak "
                f"{self.peak_rate_req_per_s:,.4g} req/s, mean {self.mean_rate_req_per_s:,.4g}, trough "
                f"{self.trough_rate_req_per_s:,.4g} (outside gaps); gaps: {self.gaps.describe()}")


def _profile_field(where: str, line: int, col: int, name: str) -> str:
    return f"{where}, line {line}, column {col} ({name})"


def _parse_profile_csv(text: str, where: str, name: str, source: str,
                       last_window_s: float | None) -> RateProfile:
    lines = text.splitlines()
    hdr = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    if hdr is None:
        raise FastsimInputError(where, "an empty file", "a CSV with the header "
                                + ",".join(_PROFILE_COLUMNS) + " and one row per window")
    cols = [c.strip() for c in lines[hdr].split(",")]
    if cols != list(_PROFILE_COLUMNS):
        raise FastsimInputError(f"{where}, line {hdr + 1}", lines[hdr][:80],
                                "the header " + ",".join(_PROFILE_COLUMNS))
    starts, rates = [], []
    for i in range(hdr + 1, len(lines)):
        ln = lines[i]
        if not ln.strip():
            continue
        cells = ln.split(",")
        if len(cells) != 2:
            raise FastsimInputError(f"{where}, line {i + 1}", _clip(ln), "two comma-separated columns: "
                                    + ",".join(_PROFILE_COLUMNS))
        vals = []
        for c, (cell, col) in enumerate(zip(cells, _PROFILE_COLUMNS), 1):
            try:
                v = float(cell)
            except ValueError:
                v = math.nan
            if not math.isfinite(v):
                raise FastsimInputError(_profile_field(where, i + 1, c, col), cell.strip(), "a finite number")
            vals.append(v)
        t, r = vals
        if not starts and t != 0.0:
            raise FastsimInputError(_profile_field(where, i + 1, 1, _PROFILE_COLUMNS[0]), cells[0].strip(),
                                    "0 for the first window (a profile's time axis starts at 0)")
        if starts and not t > starts[-1]:
            raise FastsimInputError(_profile_field(where, i + 1, 1, _PROFILE_COLUMNS[0]), cells[0].strip(),
                                    f"a start after the previous window's {starts[-1]:g} s (windows sorted, "
                                    "strictly ascending)")
        if r < 0.0:
            raise FastsimInputError(_profile_field(where, i + 1, 2, _PROFILE_COLUMNS[1]), cells[1].strip(),
                                    "a rate >= 0 in req/s (0 marks a gap)")
        starts.append(t)
        rates.append(r)
    if not starts:
        raise FastsimInputError(where, "no rows", "at least one window row after the header")
    if not any(r > 0.0 for r in rates):
        raise FastsimInputError(where, "every rate 0", "at least one window with a rate > 0")
    if len(starts) == 1 and last_window_s is None:
        raise FastsimInputError(where, "one window", "two or more windows, or last_window_s (the length of "
                                "a lone window)")
    return RateProfile.from_arrays(name, starts, rates, last_window_s, source)


def read_rate_profile(name_or_path, *, last_window_s: float | None = None) -> RateProfile:
    """Read a rate profile: a built-in name or a CSV ``window_start_s,rate_req_per_s``.

    Parameters
    ----------
    name_or_path : str or os.PathLike
        A key of :data:`BUILTIN_PROFILES` (``m-large``, ``m-mid``, ``m-small``, ``deepseek-r1``:
        production rates per 600-s window, 2,016 windows (14 days) for the first three, 144 (one
        day) for ``deepseek-r1``), or a CSV file (optionally gzip-compressed) whose header is
        ``window_start_s,rate_req_per_s`` and whose rows give each window's start (s, the first
        0, strictly ascending) and mean rate (req/s, >= 0; 0 marks a gap, missing data).
    last_window_s : float, optional
        Length of the last window (s). Default: the length of the window before it.

    Returns
    -------
    RateProfile
        Named by the built-in name or the file's stem.

    Raises
    ------
    FastsimInputError
        An unknown name or unreadable file; a wrong header; a row whose cell is not a finite
        number, whose start is not after the previous one (or, first, not 0) or whose rate is
        negative, named by file, line and column; no row with a rate > 0; a single row without
        ``last_window_s``.

    Notes
    -----
    Source of the built-in profiles: ServeGen (Alibaba Cloud Model Studio production traffic,
    alibaba/ServeGen @ f891d1189eb32b3868dfc443800c4150548c282a, Apache-2.0), per-client rates
    summed per window; see ``fastsim/data/traffic/ATTRIBUTION.md``.
    """
    key = os.fspath(name_or_path) if isinstance(name_or_path, (str, os.PathLike)) else None
    if key is None:
        raise FastsimInputError("profile", name_or_path, "a built-in profile name ("
                                + ", ".join(BUILTIN_PROFILES) + ") or a CSV path")
    if key in BUILTIN_PROFILES:
        fname, desc = BUILTIN_PROFILES[key]
        raw = resources.files(__package__).joinpath("data", "traffic", fname).read_bytes()
        where = f"{fname} (built-in {key})"
        name, source = key, desc
    else:
        try:
            with open(key, "rb") as fh:
                raw = fh.read()
        except OSError as exc:
            raise FastsimInputError("profile", key, "a built-in profile name (" + ", ".join(BUILTIN_PROFILES)
                                    + f") or a readable CSV file ({exc.strerror or exc})") from None
        where = key
        base = os.path.basename(key)
        for suf in (".gz", ".csv"):
            base = base[:-len(suf)] if base.endswith(suf) else base
        name, source = base, f"rate profile {key}"
    if raw[:2] == _GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, ValueError) as exc:
            raise FastsimInputError("profile file", where, f"a valid gzip file ({exc})") from None
    return _parse_profile_csv(_decode(raw, where), where, name, source, last_window_s)


def _profile_times(profile: RateProfile, u: np.ndarray) -> np.ndarray:
    """Arrival times ``Lambda^{-1}(u)`` of cumulative unit-rate times ``u`` (ascending), float64.

    Adjacent windows of equal rate are merged into one segment first, so a constant profile is
    one segment and its times are ``u / rate`` exactly, as :func:`synthesize` computes them.
    Times past the last positive segment continue at its rate when it reaches the profile's end,
    and are ``inf`` after a trailing gap; a time that rounding would put at or past the end of an
    inner segment is kept just before it (so never inside a gap).
    """
    r, s, e = profile.rate_req_per_s, profile.window_start_s, profile.window_end_s
    new = np.concatenate(([True], r[1:] != r[:-1]))
    first = np.flatnonzero(new)
    last = np.append(first[1:], r.shape[0]) - 1
    seg_r, seg_s, seg_e = r[first], s[first], e[last]
    pos = seg_r > 0.0
    seg_lam0 = np.concatenate(([0.0], np.cumsum(seg_r * (seg_e - seg_s))[:-1]))
    pr, ps, pe, pl = seg_r[pos], seg_s[pos], seg_e[pos], seg_lam0[pos]
    j = np.maximum(np.searchsorted(pl, u, side="right") - 1, 0)
    t = ps[j] + (u - pl[j]) / pr[j]
    inner = j < pr.shape[0] - 1
    if np.any(inner):
        cap = np.nextafter(pe[j[inner]], -np.inf)
        t[inner] = np.minimum(t[inner], cap)
    if pe[-1] < profile.span_s:  # a trailing gap: nothing after the last positive segment
        total = pl[-1] + pr[-1] * (pe[-1] - ps[-1])
        t[u >= total] = np.inf
        t[t >= pe[-1]] = np.inf
    return t


def synthesize_profile(scenario_or_dists, profile, seed=0, *, arrival: str = "poisson", cv: float = 1.0,
                       rate_scale: float = 1.0, horizon_s: float | None = None,
                       name: str | None = None) -> Workload:
    """Draw a workload whose arrival rate follows a profile: non-homogeneous Poisson (or gamma) arrivals.

    Parameters
    ----------
    scenario_or_dists : Scenario, str or (LengthDist, LengthDist)
        Where the lengths come from, as for :func:`synthesize` (a scenario's rate is not used).
    profile : RateProfile or str or os.PathLike
        The rate over time, or a name or CSV path for :func:`read_rate_profile`.
    seed : int or numpy.random.SeedSequence
        Root of the random streams (see :func:`unit_draws`).
    arrival : {'poisson', 'gamma'}
        Process of the unit-rate draws: exponential gaps (a non-homogeneous Poisson process),
        or gamma gaps (burstier with ``cv > 1``).
    cv : float
        Inter-arrival coefficient of variation of the unit-rate gaps for ``gamma`` (1 for
        ``poisson``).
    rate_scale : float, default 1
        Every rate multiplied by this (finite, > 0): fits a profile to a fleet size.
    horizon_s : float, optional
        End of the arrival window (s, > 0, at most the profile's span); default the span.
    name : str, optional
        Label (default ``"<scenario>@<profile>"``).

    Returns
    -------
    Workload
        Arrivals in ``[0, horizon)``, ``arrival_s`` ndarray(float64) of shape ``(k,)`` in
        seconds, ascending; prompt and output tokens ndarray(int64) of shape ``(k,)``: request
        i's lengths are drawn from the same variates ``z_i`` as :func:`synthesize` gives request
        i on this seed. ``horizon_s`` is recorded on the workload.

    Raises
    ------
    FastsimInputError
        A bad profile, scenario, seed, arrival process, cv, rate scale or horizon (not > 0, or
        past the profile's span), or more than :data:`MAX_REQUESTS` expected requests.

    Notes
    -----
    Time rescaling (Cinlar, "Introduction to Stochastic Processes", 1975, §4.7; Lewis and
    Shedler, Naval Res. Logist. Q. 26, 1979): with the cumulative intensity
    ``Lambda(t) = integral_0^t rate(x) dx`` (piecewise linear), request i arrives at
    ``Lambda^{-1}(U_i)``, ``U_i = cumsum(gaps)[i]`` the unit-rate arrival times of
    :func:`unit_draws`. With exponential gaps this is a non-homogeneous Poisson process; with
    gamma gaps, a renewal process of the given cv on the rescaled time axis (in each window,
    bursts of cv at the window's rate). Zero-rate windows (gaps) have a flat ``Lambda`` and get
    no arrivals. These are the same draws as :func:`synthesize`'s, so the same seed gives common
    random numbers across profiles, scales and constant rates: a constant profile of rate r over
    ``[0, H)`` (however many windows) gives exactly ``synthesize(scenario, r, H, seed)``'s
    arrival times and lengths, bit for bit (adjacent equal-rate windows are merged, so the
    inverse is ``U_i / r``).
    """
    wname, pd, od = _dists(scenario_or_dists)
    prof = profile if isinstance(profile, RateProfile) else read_rate_profile(profile)
    prof = prof.scaled(rate_scale)
    horizon = prof.span_s if horizon_s is None else _check_horizon(horizon_s)
    if horizon > prof.span_s:
        raise FastsimInputError("horizon_s", horizon_s, f"at most the profile's span, {prof.span_s:g} s")
    ss = _seed_seq(seed)
    arrival, cvf = _check_arrival(arrival, cv)
    expect = prof.expected_requests(horizon)
    if expect > MAX_REQUESTS:
        raise FastsimInputError("profile x rate_scale over horizon_s", expect,
                                f"at most {MAX_REQUESTS:,} expected requests (cut the horizon or scale the rates "
                                "down)")
    n = _initial_draws(expect, cvf)
    while True:
        ud = unit_draws(ss, min(n, MAX_REQUESTS), arrival=arrival, cv=cvf)
        t = _profile_times(prof, np.cumsum(ud.gaps))
        if ud.n and t[-1] >= horizon:
            k = int(np.searchsorted(t, horizon, side="left"))
            break
        if n >= MAX_REQUESTS:  # pragma: no cover  (needs ~1e7 standard deviations of bad luck)
            raise FastsimInputError("profile over horizon_s", expect, f"a window that {MAX_REQUESTS:,} arrivals cover")
        n *= 2  # more blocks of the same streams: the first n draws do not change
    g = prof.gaps
    src = (f"synthetic: {arrival} arrivals" + (f" (cv {cvf:g})" if arrival == "gamma" else "")
           + f" following {prof.name} ({prof.source}) over {horizon:g} s, {_seed_label(ss)}; prompt "
           f"{_describe(pd)}, output {_describe(od)}" + (f"; gaps: {g.describe()}" if g.count else ""))
    return Workload(name or f"{wname}@{prof.name}", t[:k], _lengths(pd, ud.prompt_z[:k]),
                    _lengths(od, ud.output_z[:k]), src, horizon)
