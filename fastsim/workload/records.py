"""The workload record: :class:`Workload` (arrival times and token lengths) and its :class:`PrefixBlocks`.

A :class:`Workload` is three aligned read-only arrays, one entry per request (arrival time in
seconds, prompt tokens P, output tokens O >= 1, SPEC section 1), with optional prefix blocks in
compressed sparse rows (Mooncake's ``hash_ids``, vLLM's block hashes); :func:`prefix_reuse_bound`
is the share of prompt tokens an unbounded prefix cache could serve. :func:`length_quantiles` and
:func:`length_means` give a planner's length figures (SPEC section 5: P90, not the mean) of a
workload, empirically, or of a scenario's distributions, analytically.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..catalog.lengths import _dists
from ..errors import FastsimInputError, require_positive

__all__ = ["Workload", "PrefixBlocks", "prefix_reuse_bound", "length_quantiles", "length_means"]

_O_ALLOWED = "an integer >= 1 (O counts the first token; a request with no output cannot be served)"
_P_ALLOWED = "an integer >= 1"


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

    Request i's tokens begin with the blocks ``ids[offsets[i]:offsets[i + 1]]``, in token order,
    each ``block_tokens`` tokens long. Equal ids mean equal content, and (as with Mooncake's
    ``hash_ids`` and vLLM's block hashes) an id identifies the whole prefix up to and including its
    block: two requests that list id x at position j share their first ``(j + 1) * block_tokens``
    tokens. Only a full block can be cached and served; a request's last, partial block may be
    listed (Mooncake lists ``ceil(P / 512)`` ids per request). A request may list fewer blocks
    than allowed (none when its source has no ids); the tokens after its listed blocks are content
    of its own.

    A row covers the prompt only (``spans_output`` False, as a trace's ``hash_ids`` do): at most
    ``ceil(P / block_tokens)`` blocks, of which the full prompt blocks, ``(j + 1) * block_tokens
    <= P``, can be cached. Or it continues over the request's generated tokens (``spans_output``
    True, as :func:`synthesize` writes them): the blocks of its first ``P + O - 1`` tokens (the
    last output token never has KV), at most ``ceil((P + O - 1) / block_tokens)``, every full one
    of which the engine caches once computed, the answer's included. A chat's next turn (previous
    prompt + previous answer + new message) then lists the previous turn's blocks and hits its
    answer too, as vLLM's block hashes chain over all of a request's tokens
    (``get_request_block_hasher``, ``vllm/v1/core/kv_cache_utils.py``) and SGLang's radix cache
    inserts ``origin_input_ids + output_ids`` (``RadixCache.cache_finished_req``,
    ``python/sglang/srt/mem_cache/radix_cache.py``).

    Attributes
    ----------
    block_tokens : int
        Tokens per block, >= 1 (:data:`MOONCAKE_BLOCK_TOKENS` = 512 for Mooncake traces; 16, vLLM's
        KV block size, for :func:`synthesize` by default; 1 to match at SGLang's default page size).
    offsets : ndarray(int64) of shape ``(n + 1,)``
        Row pointers into ``ids``: ``offsets[0] == 0``, non-decreasing, ``offsets[n] == len(ids)``.
    ids : ndarray(int64) of shape ``(nnz,)``
        Block ids, >= 0, request after request (``nnz`` blocks in all).
    spans_output : bool, default False
        Whether the rows continue over the requests' generated tokens (see above).

    Notes
    -----
    A :class:`Workload` validates its ``prefix`` and stores these arrays read-only (int64, C
    order); every workload derived from another (rescaled, sorted by time, resampled) carries each
    request's blocks with it (a request drawn twice lists the same blocks twice, its answer's
    included). Build one from per-request lists with :meth:`from_lists`.
    """

    block_tokens: int
    offsets: np.ndarray
    ids: np.ndarray
    spans_output: bool = False

    @classmethod
    def from_lists(cls, block_tokens: int, blocks, spans_output: bool = False) -> "PrefixBlocks":
        """Build from one sequence of block ids per request.

        Parameters
        ----------
        block_tokens : int
            Tokens per block, >= 1 (checked when a :class:`Workload` receives the blocks).
        blocks : iterable of sequences of int
            Request i's block ids, in token order (an empty sequence: no listed blocks).
        spans_output : bool, default False
            Whether the rows continue over the generated tokens (class docstring).

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
        return cls(block_tokens, offsets, ids, spans_output)

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
    return PrefixBlocks(prefix.block_tokens, offsets, prefix.ids[pos], prefix.spans_output)


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


def _check_prefix(prefix, p: np.ndarray, o: np.ndarray) -> PrefixBlocks:
    """Validate a Workload's prefix blocks against its prompt and output tokens; read-only int64 arrays."""
    if not isinstance(prefix, PrefixBlocks):
        raise FastsimInputError("Workload.prefix", _clip(repr(prefix)),
                                "None or a PrefixBlocks(block_tokens, offsets, ids, spans_output=False)")
    spans = prefix.spans_output
    if not isinstance(spans, (bool, np.bool_)):
        raise FastsimInputError("Workload.prefix.spans_output", _clip(repr(spans)), "True or False")
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
    cap = -(-(p + o - 1) // bt) if spans else -(-p // bt)
    if np.any(counts > cap):
        i = int(np.argmax(counts > cap))
        if spans:
            allowed = (f"at most ceil((prompt_tokens + output_tokens - 1) / block_tokens) = ceil(({int(p[i])} + "
                       f"{int(o[i])} - 1) / {bt}) = {int(cap[i])} blocks (spans_output: the blocks of the tokens "
                       "with KV)")
        else:
            allowed = (f"at most ceil(prompt_tokens / block_tokens) = ceil({int(p[i])} / {bt}) = {int(cap[i])} "
                       "blocks (or spans_output=True for rows that continue over the output)")
        raise FastsimInputError(f"Workload.prefix.offsets (request {i})", f"{int(counts[i])} blocks", allowed)
    return PrefixBlocks(bt, offsets, ids, bool(spans))


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
        The prefix blocks of each request's prompt, and with ``spans_output`` of its generated
        tokens (``offsets`` of shape ``(n + 1,)``), for prefix caching; None when the source gives
        no block ids (then no request is known to share content with another).

    Raises
    ------
    FastsimInputError
        Arrays of different lengths or not one-dimensional, arrival times not finite,
        negative or decreasing, a length below 1, or a horizon before the last arrival. For
        ``prefix``, naming its field: not a PrefixBlocks, ``block_tokens`` not an integer >= 1,
        ``offsets`` not of length n + 1, not starting at 0, decreasing or not ending at
        ``len(ids)``, an id below 0 or not an integer, ``spans_output`` not a bool, or a request
        listing more than ``ceil(P / block_tokens)`` blocks (``ceil((P + O - 1) / block_tokens)``
        with ``spans_output``).

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
            object.__setattr__(self, "prefix", _check_prefix(self.prefix, p, o))

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
    Request i hits the longest run of its leading full blocks whose ids appeared, as cacheable full
    blocks, in any earlier request, capped so that at least one prompt token is computed: at most
    ``floor((P_i - 1) / block_tokens)`` blocks, so its hit tokens are at most ``P_i - 1``. A
    block is cacheable in the request that lists it when it is full within the prompt
    (``(j + 1) * block_tokens <= P``), or, with ``spans_output``, within the first ``P + O - 1``
    tokens (an earlier answer serves a later prompt). A request's own blocks serve only later
    requests. Nothing is ever evicted, and an earlier request is taken to have finished, so no real
    cache serves more.

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
    kv_tokens = p + workload.output_tokens - 1 if pb.spans_output else p
    full = (pos + 1) * bt <= kv_tokens[row]
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


def _clip(s: str, n: int = 80) -> str:
    s = s.strip()
    return s if len(s) <= n else s[:n] + "..."


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
