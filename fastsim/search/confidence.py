"""How sure a verification's verdict is: a Wilson bound on the pooled SLO attainment, and the seeds it adds.

A verification (:func:`fastsim.search.verify`, the sweep's batched one) pools the measured
requests of its seeds (SPEC §7) and counts those that met both targets: ``met`` of ``measured``.
Their attainment ``met / measured`` is an estimate, and at the sizes a planner simulates (tens of
thousands of requests) a plan a few thousandths above the target passes on one set of seeds and
fails on the next: a sweep of chat and coding-agent passed coding-agent on B200 FP8 TP1 x 19 at
40 req/s with 0.902 on 4 seeds, which scores 0.786 on 16.

The rule, the one GuideLLM's goodput search applies to each probe
(``src/guidellm/benchmark/profiles/goodput.py``: ``wilson_interval`` and
``GoodputProfile._record_probe``, where a probe is *resolved* when its Wilson interval lies wholly
on one side of the target attainment):

- the 95% Wilson score interval ``[lo, hi]`` of the attainment (:func:`wilson_interval`; Wilson
  1927, "Probable inference, the law of succession, and statistical inference", JASA 22(158)),
  over the pooled counts;
- the attainment *passes* when ``lo >= target``, *fails* when ``hi < target``, and is *undecided*
  otherwise (:func:`attainment_verdict`);
- an undecided verification doubles its seeds (the next children of the same
  :class:`numpy.random.SeedSequence`, so the seeds already run stay in the pool: common random
  numbers), up to :data:`MAX_SEED_FACTOR` times the seeds asked for (:func:`next_seed_count`);
  still undecided there, it fails, and its reason says the pass is not sure. GuideLLM passes an
  unresolved probe on its point estimate and warns; fastsim does not pass it.

The interval treats the requests as independent trials. Requests of one run share its queue, so
the true spread is wider; the bound is a floor on the uncertainty, not its measure, and the seeds
it adds are independent runs.

Besides the bound, a plan whose own simulated capacity's 95% interval lies wholly below its
target rate (:func:`capacity_refutation`) does not pass, in ``fastsim plan --headroom`` and in a
sweep with ``--capacity``: its capacity search says the rate is more than it sustains.
"""
from __future__ import annotations

import math

from ..errors import FastsimInputError

__all__ = ["WILSON_Z95", "MAX_SEED_FACTOR", "wilson_interval", "attainment_verdict", "next_seed_count",
           "capacity_refutation", "SeedWorkloads"]

#: The two-sided 95% quantile of the standard normal, ``Phi^-1(0.975)`` (``scipy.stats.norm.ppf(0.975)``).
WILSON_Z95 = 1.959963984540054

#: An undecided verification doubles its seeds up to this many times the seeds asked for (two
#: doublings: 8 -> 16 -> 32 for ``fastsim plan``, 4 -> 8 -> 16 for a sweep).
MAX_SEED_FACTOR = 4


def wilson_interval(successes, trials, z: float = WILSON_Z95) -> tuple:
    """The Wilson score interval of a binomial proportion.

    With ``p = successes / trials`` and ``n = trials``::

        centre = (p + z^2 / (2 n)) / (1 + z^2 / n)
        half   = z sqrt(p (1 - p) / n + z^2 / (4 n^2)) / (1 + z^2 / n)

    and the interval is ``[centre - half, centre + half]`` (Wilson 1927; the form of GuideLLM's
    ``wilson_interval``, ``src/guidellm/benchmark/profiles/goodput.py``), clipped to [0, 1] against
    rounding (exactly 0 at ``successes = 0``, 1 at ``successes = trials``). Unlike the normal
    interval it stays inside [0, 1] and is not zero-width at ``p = 1``, where SLO attainments live.

    Parameters
    ----------
    successes : int or float
        Trials that succeeded (measured requests that met both targets), in ``[0, trials]``.
    trials : int or float
        Trials (measured requests), >= 0.
    z : float
        Normal quantile of the two-sided level (default :data:`WILSON_Z95`, 95%), > 0.

    Returns
    -------
    (float, float)
        ``(lo, hi)``; ``(0.0, 1.0)`` when ``trials`` is 0 (nothing measured: no information).

    Raises
    ------
    FastsimInputError
        ``trials`` negative or not finite, ``successes`` outside ``[0, trials]``, ``z`` not > 0
        (booleans refused).
    """
    def num(name, v):
        if isinstance(v, bool) or not isinstance(v, (int, float)) and not hasattr(v, "__float__"):
            raise FastsimInputError(name, v, "a finite number")
        return float(v)
    n, k, zf = num("trials", trials), num("successes", successes), num("z", z)
    if not (0.0 <= n < math.inf):
        raise FastsimInputError("trials", trials, "a finite count >= 0")
    if not (0.0 <= k <= n):
        raise FastsimInputError("successes", successes, f"a count from 0 to trials ({n:g})")
    if not (0.0 < zf < math.inf):
        raise FastsimInputError("z", z, "a finite normal quantile > 0 (1.96 for 95%)")
    if n == 0.0:
        return 0.0, 1.0
    p = k / n
    z2 = zf * zf
    den = 1.0 + z2 / n
    centre = (p + z2 / (2.0 * n)) / den
    half = zf * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n)) / den
    # the ends are exactly 0 at k = 0 and exactly 1 at k = n (the closed form; rounding leaves ~1e-17)
    return (0.0 if k == 0.0 else max(0.0, centre - half)), (1.0 if k == n else min(1.0, centre + half))


def attainment_verdict(met, measured, target: float) -> tuple:
    """Whether a pooled attainment surely meets its target: ``(verdict, lo, hi)``.

    Parameters
    ----------
    met, measured : int
        Measured requests that met both targets, and measured requests.
    target : float
        The attainment target (``SLO.attainment``, 0.9 for a P90 SLO), in (0, 1].

    Returns
    -------
    (str, float, float)
        ``"pass"`` when the 95% Wilson interval's lower end is >= ``target``, ``"fail"`` when its
        upper end is below it, ``"undecided"`` otherwise (the module's rule); then the interval.
        Nothing measured fails (``(0, 1)`` would leave it undecided however many seeds ran).

    Raises
    ------
    FastsimInputError
        As for :func:`wilson_interval`.
    """
    lo, hi = wilson_interval(met, measured)
    if not measured:
        return "fail", lo, hi
    if lo >= target:
        return "pass", lo, hi
    if hi < target:
        return "fail", lo, hi
    return "undecided", lo, hi


def next_seed_count(seeds_run: int, seeds_asked: int, decided: bool, can_add: bool = True) -> int:
    """How many seeds an undecided verification runs next (0: stop).

    Parameters
    ----------
    seeds_run : int
        Seeds pooled so far.
    seeds_asked : int
        Seeds the verification was asked for (``--seeds``).
    decided : bool
        Whether the verdict is decided (:func:`attainment_verdict` not ``"undecided"``, or another
        criterion already fails the plan).
    can_add : bool
        Whether more seeds exist (False for a trace, replayed once).

    Returns
    -------
    int
        ``min(2 x seeds_run, MAX_SEED_FACTOR x seeds_asked)`` when undecided and below that cap,
        else 0.
    """
    cap = MAX_SEED_FACTOR * int(seeds_asked)
    if decided or not can_add or seeds_run >= cap:
        return 0
    return min(2 * int(seeds_run), cap)


def capacity_refutation(ci95, rate_req_per_s: float) -> str:
    """Why a plan's own simulated capacity refutes a pass at ``rate_req_per_s`` ("" when it does not).

    Parameters
    ----------
    ci95 : (float, float) or None
        The 95% interval of the plan's simulated capacity (req/s;
        :attr:`fastsim.search.CapacityResult.ci95`); None or NaN ends: no interval, no refutation.
    rate_req_per_s : float
        The rate the plan was verified at.

    Returns
    -------
    str
        When the interval's upper end is below the rate: the reason, naming both.
    """
    if ci95 is None:
        return ""
    lo, hi = (float(x) for x in ci95)
    if not (hi == hi) or not hi < float(rate_req_per_s):
        return ""
    return (f"its simulated capacity's 95% interval, {lo:.2f}-{hi:.2f} req/s, lies below the target "
            f"{float(rate_req_per_s):g} req/s")


class SeedWorkloads:
    """The workloads of a root seed's children, the first ``seeds`` of them, extendable.

    A sequence of ``seeds`` workloads (what :func:`fastsim.search.verify` simulates); an
    undecided verification asks :meth:`first` for more (:func:`next_seed_count`). Child ``i`` is
    ``fastsim.workload.seeds_for(root, n)[i]`` for every ``n > i`` (``SeedSequence.spawn``), so a
    longer list starts with the shorter one, and every plan sees the same workloads.

    Parameters
    ----------
    make : callable(numpy.random.SeedSequence) -> (arrival_s, prompt_tokens, output_tokens)
        Draws one workload (e.g. :func:`fastsim.workload.synthesize` at the target rate).
    root : int or numpy.random.SeedSequence
        Root seed.
    seeds : int
        Seeds asked for (>= 1).

    Attributes
    ----------
    seeds_asked : int
        ``seeds``.
    max_seeds : int
        ``MAX_SEED_FACTOR x seeds``.

    Raises
    ------
    FastsimInputError
        ``seeds`` not an integer >= 1, or a bad root (:func:`fastsim.workload.seeds_for`).
    """

    def __init__(self, make, root, seeds: int):
        from ..workload import seeds_for
        if isinstance(seeds, bool) or int(seeds) != seeds or seeds < 1:
            raise FastsimInputError("seeds", seeds, "an integer >= 1")
        self.seeds_asked = int(seeds)
        self.max_seeds = MAX_SEED_FACTOR * self.seeds_asked
        self._kids = seeds_for(root, self.max_seeds)
        self._make = make
        self._drawn: list = []

    def first(self, n: int) -> list:
        """The first ``n`` workloads, each drawn once and kept.

        Parameters
        ----------
        n : int
            From 1 to :attr:`max_seeds`.

        Returns
        -------
        list of (arrival_s, prompt_tokens, output_tokens)
            Child ``i``'s workload at position ``i``.

        Raises
        ------
        FastsimInputError
            ``n`` out of range.
        """
        if not 1 <= n <= self.max_seeds:
            raise FastsimInputError("n", n, f"an integer from 1 to {self.max_seeds}")
        while len(self._drawn) < n:
            self._drawn.append(self._make(self._kids[len(self._drawn)]))
        return self._drawn[:n]

    def __len__(self) -> int:
        return self.seeds_asked

    def __iter__(self):
        return iter(self.first(self.seeds_asked))

    def __getitem__(self, i):
        return self.first(self.seeds_asked)[i]
