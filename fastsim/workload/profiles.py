"""Time-varying arrivals: rate profiles over hours to days, and workloads drawn along them.

A :class:`RateProfile` is a piecewise-constant rate over consecutive windows (the shipped
production profiles from ServeGen, or a CSV of per-window rates, :func:`read_rate_profile`);
zero-rate windows are gaps (missing data, :class:`ProfileGaps`). :func:`synthesize_profile` draws
a non-homogeneous Poisson (or gamma renewal) workload along it by time rescaling of the same unit
draws :func:`~fastsim.workload.draws.synthesize` uses, so profiles, scales and constant rates see
common random numbers. Sources: Cinlar, "Introduction to Stochastic Processes", 1975, §4.7;
Lewis and Shedler, Naval Res. Logist. Q. 26, 1979; ServeGen (alibaba/ServeGen, Apache-2.0, see
``fastsim/data/traffic/ATTRIBUTION.md``).
"""
from __future__ import annotations

import gzip
import math
import os
from importlib import resources
from typing import NamedTuple

import numpy as np

from ..catalog.lengths import _dists
from ..errors import FastsimInputError, require_positive
from .draws import (MAX_REQUESTS, _check_arrival, _check_horizon, _describe, _lengths, _seed_label, _seed_seq,
                    unit_draws)
from .records import Workload, _clip, _readonly
from .traces import _GZIP_MAGIC, _decode

__all__ = ["RateProfile", "ProfileGaps", "BUILTIN_PROFILES", "read_rate_profile", "synthesize_profile"]

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
        raw = resources.files("fastsim").joinpath("data", "traffic", fname).read_bytes()
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
    from . import _initial_draws   # looked up on the package when called (see draws._arrivals)
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
