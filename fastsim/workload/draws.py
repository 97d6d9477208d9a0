"""Synthetic workloads drawn with common random numbers (SPEC section 6).

Every random number comes from a :class:`numpy.random.Generator` built from a child of one
:class:`numpy.random.SeedSequence`: :func:`unit_draws` gives request i its unit-mean gap, its two
length variates and its resampling variate from block ``i // DRAW_BLOCK`` of each stream, so a
request's draws do not depend on the rate, the horizon or how many requests are drawn.
:func:`synthesize` turns them into a :class:`~fastsim.workload.records.Workload` at a rate
(lognormal or fixed lengths; optionally a shared system prompt and multi-turn sessions with their
prefix blocks), :func:`synthesize_many` one per child of :func:`seeds_for`,
:func:`synthesize_from_trace` resamples a trace's lengths, :func:`scenario_workload` draws at a
scenario's own rate. Source: common random numbers (Law, "Simulation Modeling and Analysis",
5th ed., §11.2).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..catalog import LengthDist, Scenario
from ..catalog.lengths import _dists
from ..errors import FastsimInputError, require_count, require_positive
from .records import PrefixBlocks, Workload, _segment_arange, _take_prefix

__all__ = ["UnitDraws", "DRAW_BLOCK", "SESSION_GAP_S", "unit_draws", "seeds_for", "synthesize",
           "synthesize_many", "synthesize_from_trace", "scenario_workload"]

#: Requests per block of random draws. Part of the reproducibility contract: changing it changes
#: every synthetic workload.
DRAW_BLOCK = 4096

#: Largest number of requests one synthetic workload may hold (about 1.6 GB of arrays).
MAX_REQUESTS = 50_000_000

# Stream indices in the spawn key of a seed's children.
_S_GAPS, _S_PROMPT, _S_OUTPUT, _S_PICK = 0, 1, 2, 3

#: Largest number of prefix block ids one synthetic workload may hold (1.6 GB of int64).
MAX_PREFIX_BLOCKS = 200_000_000


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
    # looked up on the package when called, so that replacing fastsim.workload._initial_draws (as
    # a test of a short first draw does) takes effect here
    from . import _initial_draws
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

#: The old name of the count check (:func:`fastsim.errors.require_count`, shared with the fleet strategies).
_check_count = require_count


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
    """Prompt tokens and prefix blocks of system prompt + sessions (see :func:`synthesize`).

    Rows span the output: request i lists the ``ceil((P_i + O_i - 1) / bt)`` blocks of its tokens
    with KV, and a later turn repeats every full one of the previous turn's (its answer's too).
    """
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
        kept[m] = (p[pp] + o[pp] - 1) // bt     # every full block of the previous prompt and answer
        t += 1
    nb = -(-(p + o - 1) // bt)
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
    # read-only already: the Workload keeps these arrays instead of copying them (they can be large)
    offsets.flags.writeable = False
    ids.flags.writeable = False
    return p, PrefixBlocks(bt, offsets, ids, spans_output=True)


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
        user message: ``P_i = P_prev + O_prev + u_i``, so its blocks extend the previous turn's,
        answer included.
    prefix_block_tokens : int, default 16
        Tokens per prefix block (>= 1), the granularity at which the ids match: the engine's KV
        block (vLLM's ``block_size`` 16, TensorRT-LLM's ``tokens_per_block`` 32) or page (SGLang's
        ``page_size``, 1 by default: the radix cache then matches token by token, one id per
        token).
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
        or ``session_turns`` set, prompts are composed as above and ``prefix`` (``spans_output``
        True) holds the ``ceil((P_i + O_i - 1) / prefix_block_tokens)`` blocks of each request's
        prompt and answer, the tokens that get KV (its last one possibly partial); otherwise
        ``prefix`` is None.

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
    block): a request lists the blocks of its first ``P_i + O_i - 1`` tokens, prompt then answer
    (the last output token never has KV). Ids ``0 .. floor(N / prefix_block_tokens) - 1`` are the
    system prompt's full blocks; turn t > 0 repeats the ids of every full block of the previous
    turn's first ``P_prev + O_prev - 1`` tokens, its answer's included, as a chat client resends
    the conversation; every other block (user messages, answers, a block straddling the end of the
    system prompt or of what the previous turn computed) is new content and gets the next unused
    id, request after request. Drawn messages and answers are taken never to repeat, so equal ids
    are exactly equal content. An engine caches a finished turn's answer blocks (vLLM hashes full
    blocks of all of a request's tokens, ``get_request_block_hasher`` in
    ``vllm/v1/core/kv_cache_utils.py``; SGLang inserts prompt and output at the finish,
    ``RadixCache.cache_finished_req``), so the next turn hits them.
    """
    wname, pd, od = _dists(scenario_or_dists)
    rate = require_positive("rate_req_per_s", rate_req_per_s)
    horizon = _check_horizon(horizon_s)
    ss = _seed_seq(seed)
    arrival, cvf = _check_arrival(arrival, cv)
    n_sys = require_count("shared_prefix_tokens", shared_prefix_tokens, 0)
    turns = require_count("session_turns", session_turns, 1)
    bt = require_count("prefix_block_tokens", prefix_block_tokens, 1)
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
        from ..catalog import default_catalog
        scenario = default_catalog().scenario(scenario)
    if not isinstance(scenario, Scenario):
        raise FastsimInputError("scenario", scenario, "a Scenario or a scenario name")
    return synthesize(scenario, scenario.rate_req_per_s, horizon_s, seed,
                      shared_prefix_tokens=shared_prefix_tokens, session_turns=session_turns,
                      prefix_block_tokens=prefix_block_tokens,
                      session_gap_s=session_gap_s)
