"""Length figures of a pair of length distributions: resolving them, and their moments truncated at a context.

:func:`_dists` turns a :class:`~fastsim.catalog.Scenario`, a scenario name or a ``(prompt,
output)`` pair of :class:`~fastsim.catalog.LengthDist` into checked distributions (the workload
draws and the planners' length figures start from it). :func:`served_lengths` gives the moments
of the requests a model with a context of C tokens serves, those with ``P + O <= C`` (SPEC
section 5, the analytic screen's throughput figures; section 7, rejection at arrival), in closed
form for lognormal or fixed lengths (the partial moments of a lognormal; one adaptive quadrature
over the output's underlying normal when both lengths vary).

Nothing here draws random numbers or reads a workload. scipy is imported inside the functions
that need it, so importing this module loads nothing the catalog does not (numpy, which
:mod:`fastsim.catalog.models` imports already).
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from ..errors import FastsimInputError
from .scenarios import LengthDist, Scenario

__all__ = ["served_lengths", "ServedLengths", "TRUNCATION_NEGLIGIBLE"]


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
        from . import default_catalog
        obj = default_catalog().scenario(obj)
    if isinstance(obj, Scenario):
        return obj.name, _check_dist(obj.prompt, "scenario.prompt"), _check_dist(obj.output, "scenario.output")
    if isinstance(obj, (tuple, list)) and len(obj) == 2:
        return "synthetic", _check_dist(obj[0], "prompt"), _check_dist(obj[1], "output")
    raise FastsimInputError("scenario_or_dists", obj,
                            "a Scenario, a scenario name or a (prompt, output) pair of LengthDist")


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
