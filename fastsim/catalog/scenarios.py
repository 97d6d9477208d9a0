"""Workloads: token-length distributions, scenarios with their SLOs, and the scenario-table reader (SPEC §9)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import FastsimInputError
from ._checks import _pos

__all__ = ["LengthDist", "Scenario"]


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution: ``lognormal`` (mean, sigma of the underlying normal) or ``fixed``.

    Attributes
    ----------
    kind : str
        ``"lognormal"`` or ``"fixed"``.
    mean : float
        Mean length (tokens); for ``fixed``, every length.
    sigma : float
        Standard deviation of the underlying normal (dimensionless; ignored for ``fixed``).

    Raises
    ------
    FastsimInputError
        ``kind`` is neither kind, ``mean`` is not a finite number > 0 or ``sigma`` is not a
        finite number >= 0.
    """

    kind: str
    mean: float
    sigma: float = 0.0

    def __post_init__(self):
        if self.kind not in ("lognormal", "fixed"):
            raise FastsimInputError("length kind", self.kind, "'lognormal' or 'fixed'")
        _pos("length", self.kind, "mean", self.mean)
        _pos("length", self.kind, "sigma", self.sigma, allow_zero=True)

    @property
    def mu(self) -> float:
        """Location of the underlying normal (float): ``ln(mean) - sigma^2 / 2``, so the lognormal's mean is ``mean``."""
        return math.log(self.mean) - self.sigma ** 2 / 2.0

    @property
    def work_mean(self) -> float:
        """The work-weighted length ``E[L^2] / E[L]`` (float, tokens): ``mean x exp(sigma^2)`` for ``lognormal``.

        Attention work grows as the square of a prompt's length, so the mean work per request
        is that of a prompt of ``E[P^2] / E[P]`` tokens (SPEC §5, revised); ``mean`` for ``fixed``.
        """
        if self.kind == "fixed":
            return float(self.mean)
        return float(self.mean * math.exp(self.sigma ** 2))

    def quantile(self, q: float) -> float:
        """The q-quantile of the length (lecture exercise 5: mean 8000, sigma 0.8 -> P90 16,195).

        Parameters
        ----------
        q : float
            Probability in (0, 1); not validated (0 and 1 give 0 and inf for ``lognormal``).

        Returns
        -------
        float
            ``exp(mu + Phi^-1(q) sigma)`` tokens (not rounded) for ``lognormal``; ``mean`` for
            ``fixed``.
        """
        if self.kind == "fixed":
            return float(self.mean)
        # the standard normal's quantile: scipy.stats.norm.ppf's own function, without importing
        # scipy.stats (0.7 s, a command's first line waits for it)
        from scipy.special import ndtri
        return math.exp(self.mu + float(ndtri(q)) * self.sigma)


@dataclass(frozen=True)
class Scenario:
    """A workload with its SLOs: model, length distributions, P90 TTFT and TPOT targets, rate.

    The built-in scenarios are SPEC §9's table (chat, coding-agent, offline-batch, low-latency-8b).

    Attributes
    ----------
    name : str
        Catalog key, e.g. ``"chat"``.
    model : str
        Model name (a key of :attr:`Catalog.models`) or a ``config.json`` path.
    prompt, output : LengthDist
        Prompt and output token-length distributions.
    ttft_s, tpot_s : float
        P90 TTFT and TPOT targets (s).
    rate_req_per_s : float
        Target request rate (req/s).

    Raises
    ------
    FastsimInputError
        ``ttft_s``, ``tpot_s`` or ``rate_req_per_s`` is not a finite number > 0.
    """

    name: str
    model: str
    prompt: LengthDist
    output: LengthDist
    ttft_s: float
    tpot_s: float
    rate_req_per_s: float

    def __post_init__(self):
        for f in ("ttft_s", "tpot_s", "rate_req_per_s"):
            _pos("scenario", self.name, f, getattr(self, f))



_SCENARIO_KEYS = {"model", "prompt", "output", "ttft_s", "tpot_s", "rate_req_per_s"}


def _scenario(name: str, d: dict) -> Scenario:
    if not isinstance(d, dict):
        raise FastsimInputError(f"scenario.{name}", d, "a table with keys " + ", ".join(sorted(_SCENARIO_KEYS)))
    unknown = set(d) - _SCENARIO_KEYS
    missing = _SCENARIO_KEYS - set(d)
    if unknown or missing:
        raise FastsimInputError(f"scenario.{name}", sorted(unknown) or None,
                                "exactly the keys " + ", ".join(sorted(_SCENARIO_KEYS))
                                + (f" (missing {', '.join(sorted(missing))})" if missing else ""))

    def num(v, field_):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise FastsimInputError(f"scenario.{name}.{field_}", v, "a number")
        return float(v)

    def dist(key):
        v = d[key]
        if not isinstance(v, dict) or "mean" not in v or set(v) - {"kind", "mean", "sigma"}:
            raise FastsimInputError(f"scenario.{name}.{key}", v, "a table { kind = 'lognormal'|'fixed', mean, sigma }")
        return LengthDist(kind=v.get("kind", "lognormal"), mean=num(v["mean"], f"{key}.mean"),
                          sigma=num(v.get("sigma", 0.0), f"{key}.sigma"))

    return Scenario(name=name, model=str(d["model"]), prompt=dist("prompt"), output=dist("output"),
                    ttft_s=num(d["ttft_s"], "ttft_s"), tpot_s=num(d["tpot_s"], "tpot_s"),
                    rate_req_per_s=num(d["rate_req_per_s"], "rate_req_per_s"))

