"""The records every stage passes on: what to serve (:class:`Demand`), how to screen it
(:class:`ScreenOptions`) and what to buy (:class:`Plan`).

The analytic screen (:mod:`fastsim.analytic`, SPEC section 5) reads a :class:`Demand` and a
:class:`ScreenOptions` and writes :class:`Plan` rows; verification and repair
(:mod:`fastsim.search`, :mod:`fastsim.planner`, SPEC section 7), the what-if studies
(:mod:`fastsim.whatif`, SPEC section 8), the sweep and the fleet pass them on. A demand's lengths
are the latency quantile (P90 by default) and the means of its length distributions (SPEC
section 5; lecture §2.3, lesson one), truncated at a model's context where the simulator would
reject a request (SPEC section 7). A plan's cost is the SPEC section 1 cost per million output
tokens. ``fastsim.analytic`` re-exports all three.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import numpy as np

from .catalog import Catalog, LengthDist, Model, Scenario
from .errors import FastsimInputError, require_positive, require_tp
from .layouts import LAYOUTS, instance_label, layout_degrees, nodes_of
from .specdec import SpecDecoding, spec_decoding
from .stepmodel import StepConstants

__all__ = ["Demand", "ScreenOptions", "Plan", "SLO_PERCENTILE_RANGE", "DEFAULT_PPS", "check_slo_percentile",
           "ttft_tail_for", "check_pp"]

#: The SLO percentiles fastsim judges (``--slo-percentile``): from the median to P99.9.
SLO_PERCENTILE_RANGE = (50.0, 99.9)

#: Pipeline stages the screen tries by default where a model's weights do not fit one node of a GPU
#: (:meth:`ScreenOptions.pps_for`); 1 alone where they do.
DEFAULT_PPS = (1, 2, 4)


def check_pp(value, field: str = "pp", layers: int | None = None) -> int:
    """A pipeline-stage count, checked: an integer from 1 to ``layers`` (4096 without a model).

    Parameters
    ----------
    value : int
        The count (booleans and floats refused).
    field : str
        The name the error gives (``--pp``, ``pp``, a plan key).
    layers : int, optional
        The model's transformer layers: a stage needs at least one (vLLM's partition,
        :func:`fastsim.stepmodel.stage_layers`).

    Returns
    -------
    int

    Raises
    ------
    FastsimInputError
        ``value`` not an integer from 1 to ``layers`` (or 4096).
    """
    hi = int(layers) if layers is not None else 4096
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not 1 <= value <= hi:
        raise FastsimInputError(field, value, f"an integer from 1 to {hi:,}" + (
            f" (the model's {hi} layers: a pipeline stage needs a layer)" if layers is not None else ""))
    return int(value)


def check_slo_percentile(value, field: str = "slo_percentile") -> float:
    """An SLO percentile, checked: the float ``value`` from 50 to 99.9.

    SPEC §1 judges TTFT and TPOT at P90 and passes a plan when the attainment (the share of the
    measured requests that meet both targets) is >= 0.90; at percentile P the attainment target
    is ``P / 100`` and the screen's latency lengths are the P-th percentiles (SPEC §5's rule at P).

    Parameters
    ----------
    value : float
        The percentile.
    field : str
        The name the error gives (a flag, ``--slo-percentile``, or a key).

    Returns
    -------
    float

    Raises
    ------
    FastsimInputError
        ``value`` not a number from 50 to 99.9 (booleans, strings and NaN refused).
    """
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    f = float(value) if ok else float("nan")
    lo, hi = SLO_PERCENTILE_RANGE
    if not lo <= f <= hi:
        raise FastsimInputError(field, value, f"a percentile from {lo:g} to {hi:g} (90: P90 TTFT and TPOT, "
                                "attainment >= 0.90)")
    return f


def ttft_tail_for(percentile: float, default: float = 2.3) -> float:
    """The queueing screen's tail factor at an SLO percentile: the P-th percentile of an
    exponential wait is ``ln(1 / (1 - P / 100))`` times its mean (2.3 ~ ln 10 at P90, the
    :attr:`ScreenOptions.ttft_tail` default, kept as it is at 90).

    Parameters
    ----------
    percentile : float
        From 50 to 99.9 (:func:`check_slo_percentile`).
    default : float
        The factor at P90.

    Returns
    -------
    float
        ``default`` at 90; ``ln(100 / (100 - P))`` otherwise (4.61 at P99, 0.69 at P50).

    Raises
    ------
    FastsimInputError
        As :func:`check_slo_percentile`.
    """
    import math
    p = check_slo_percentile(percentile)
    return float(default) if p == 90.0 else math.log(100.0 / (100.0 - p))


@dataclass(frozen=True)
class Demand:
    """What a deployment must serve: rate, SLOs and the length statistics the screen uses.

    Attributes
    ----------
    rate_req_per_s : float
        Target request rate (req/s).
    ttft_s, tpot_s : float
        P90 targets (s).
    mean_prompt_tokens, mean_output_tokens : float
        Means of the length distributions (throughput, KV per step).
    latency_prompt_tokens, latency_output_tokens : float
        Lengths used for the latency checks: the P90 by default (lecture §2.3, lesson one).
    work_prompt_tokens : float, optional
        The work-weighted prompt length ``E[P^2] / E[P]`` that stands for P in the throughput
        of prompt attention (SPEC §5, revised); default the mean (a fixed length).
    prompt_dist, output_dist : LengthDist, optional
        The distributions the lengths come from (:meth:`from_scenario` sets them): with them
        :meth:`within_context` can truncate the throughput figures at a model's context.
    served_fraction : float, default 1.0
        Share of the offered requests that fit the context and are served (the simulator rejects
        the rest at arrival: they count as misses and cost no work). The screen sizes instances
        for ``rate_req_per_s x served_fraction``.
    context_tokens : float, optional
        The context the means and the work-weighted prompt are truncated at (None: not
        truncated). Set by :meth:`within_context`.
    slo_percentile : float, default 90.0
        The percentile at which TTFT and TPOT are judged, 50 to 99.9 (:func:`check_slo_percentile`):
        a plan passes when :attr:`slo_attainment` of the measured requests meet both targets.

    Raises
    ------
    FastsimInputError
        A rate, target, mean or quantile that is not a finite number > 0, a
        ``served_fraction`` outside [0, 1], or a ``slo_percentile`` outside [50, 99.9].
    """

    rate_req_per_s: float
    ttft_s: float
    tpot_s: float
    mean_prompt_tokens: float
    mean_output_tokens: float
    latency_prompt_tokens: float
    latency_output_tokens: float
    work_prompt_tokens: float | None = None
    prompt_dist: LengthDist | None = None
    output_dist: LengthDist | None = None
    served_fraction: float = 1.0
    context_tokens: float | None = None
    slo_percentile: float = 90.0

    def __post_init__(self):
        object.__setattr__(self, "slo_percentile", check_slo_percentile(self.slo_percentile))
        if self.work_prompt_tokens is None:
            object.__setattr__(self, "work_prompt_tokens", self.mean_prompt_tokens)
        for name in ("rate_req_per_s", "ttft_s", "tpot_s", "mean_prompt_tokens", "mean_output_tokens",
                     "latency_prompt_tokens", "latency_output_tokens", "work_prompt_tokens"):
            require_positive(name, getattr(self, name))
        f = self.served_fraction
        if isinstance(f, bool) or not isinstance(f, (int, float, np.integer, np.floating)) or not 0.0 <= f <= 1.0:
            raise FastsimInputError("served_fraction", f, "a number from 0 to 1 (share of requests within the context)")

    @property
    def slo_attainment(self) -> float:
        """The attainment a plan needs (float): ``slo_percentile / 100``, 0.9 by default (SPEC §1)."""
        return self.slo_percentile / 100.0

    @property
    def served_rate_req_per_s(self) -> float:
        """The rate the instances must carry (float, req/s): ``rate_req_per_s x served_fraction``."""
        if self.served_fraction == 1.0:
            return self.rate_req_per_s
        return self.rate_req_per_s * self.served_fraction

    def within_context(self, max_context_tokens) -> "Demand":
        """This demand with its throughput figures those of the requests a context serves.

        The simulator rejects a request whose prompt + output exceeds the model's context
        (SPEC §7): it costs no work. The means and the work-weighted prompt become those of the
        distributions truncated to ``P + O <= C`` (:func:`fastsim.workload.served_lengths`,
        exact closed forms and a one-dimensional quadrature, no sampling) and
        ``served_fraction`` the share that fits. The latency lengths stay the untruncated
        quantiles: a rejected request is a miss, so a P90 SLO over all requests needs the
        served requests up to the truncated distribution's ``0.9 / served_fraction``
        quantile, which is the untruncated P90 (``F(x) / F(C) = 0.9 / F(C)``).

        Parameters
        ----------
        max_context_tokens : float
            The model's context (tokens, > 0).

        Returns
        -------
        Demand
            ``self`` when there are no distributions (:meth:`from_lengths`, or built by hand),
            when it is already truncated, or when the truncation does not bind (figures
            bit-for-bit unchanged); otherwise a copy with ``context_tokens`` set. When no
            request fits, the figures stay untruncated with ``served_fraction`` 0 (the screen
            calls every plan infeasible).

        Raises
        ------
        FastsimInputError
            ``max_context_tokens`` not a number > 0.
        """
        if self.prompt_dist is None or self.output_dist is None or self.context_tokens is not None:
            return self
        from .catalog.lengths import served_lengths
        s = served_lengths((self.prompt_dist, self.output_dist), max_context_tokens)
        if not s.binds:
            return self
        if s.served_fraction <= 0.0:
            return replace(self, served_fraction=0.0, context_tokens=float(max_context_tokens))
        return replace(self, mean_prompt_tokens=s.mean_prompt_tokens, mean_output_tokens=s.mean_output_tokens,
                       work_prompt_tokens=s.work_prompt_tokens, served_fraction=s.served_fraction,
                       context_tokens=float(max_context_tokens))

    @classmethod
    def from_scenario(cls, scenario: Scenario, *, rate_req_per_s=None, ttft_s=None, tpot_s=None,
                      latency_quantile: float | None = 0.9, slo_percentile: float = 90.0) -> "Demand":
        """Demand of a scenario; ``latency_quantile=None`` screens with mean lengths (lesson one).

        The figures are the untruncated distributions'; the screen
        (:func:`fastsim.analytic.screen`, :func:`~fastsim.analytic.instance_table`,
        :func:`~fastsim.analytic.plan_for`) truncates them at the model's context
        (:meth:`within_context`), since the simulator serves only requests that fit it.

        Parameters
        ----------
        scenario : Scenario
        rate_req_per_s, ttft_s, tpot_s : float, optional
            Override the scenario's rate (req/s) and P90 targets (s).
        latency_quantile : float or None
            Quantile of the length distributions used for the latency checks (0.9, SPEC §5);
            None uses the means.
        slo_percentile : float
            The percentile the targets are judged at (90; :attr:`slo_percentile`).

        Returns
        -------
        Demand

        Raises
        ------
        FastsimInputError
            An override that is not a finite number > 0, or a percentile outside [50, 99.9].
        """
        q = latency_quantile
        return cls(
            rate_req_per_s=float(rate_req_per_s if rate_req_per_s is not None else scenario.rate_req_per_s),
            ttft_s=float(ttft_s if ttft_s is not None else scenario.ttft_s),
            tpot_s=float(tpot_s if tpot_s is not None else scenario.tpot_s),
            mean_prompt_tokens=scenario.prompt.mean, mean_output_tokens=scenario.output.mean,
            latency_prompt_tokens=scenario.prompt.mean if q is None else scenario.prompt.quantile(q),
            latency_output_tokens=scenario.output.mean if q is None else scenario.output.quantile(q),
            work_prompt_tokens=scenario.prompt.work_mean,
            prompt_dist=scenario.prompt, output_dist=scenario.output, slo_percentile=slo_percentile,
        )

    @classmethod
    def from_lengths(cls, prompt_tokens, output_tokens, *, rate_req_per_s, ttft_s, tpot_s,
                     latency_quantile: float | None = 0.9, slo_percentile: float = 90.0) -> "Demand":
        """Demand from empirical lengths (a trace): means and quantiles taken from the data itself.

        Parameters
        ----------
        prompt_tokens, output_tokens : array_like of shape (n,)
            Per-request lengths (tokens); converted to float64.
        rate_req_per_s : float
            Target rate (req/s).
        ttft_s, tpot_s : float
            P90 targets (s).
        latency_quantile : float or None
            Quantile of the data used for the latency checks (``numpy.quantile``, linear
            interpolation); None uses the means.
        slo_percentile : float
            The percentile the targets are judged at (90; :attr:`slo_percentile`).

        Returns
        -------
        Demand

        Raises
        ------
        FastsimInputError
            ``prompt_tokens`` is empty, or a rate, target, mean or quantile is not a finite
            number > 0.
        """
        p = np.asarray(prompt_tokens, dtype=np.float64)
        o = np.asarray(output_tokens, dtype=np.float64)
        if p.size == 0:
            raise FastsimInputError("prompt_tokens", "[]", "at least one request")
        q = latency_quantile
        return cls(rate_req_per_s=float(rate_req_per_s), ttft_s=float(ttft_s), tpot_s=float(tpot_s),
                   mean_prompt_tokens=float(p.mean()), mean_output_tokens=float(o.mean()),
                   latency_prompt_tokens=float(p.mean() if q is None else np.quantile(p, q)),
                   latency_output_tokens=float(o.mean() if q is None else np.quantile(o, q)),
                   work_prompt_tokens=float((p * p).mean() / p.mean()), slo_percentile=slo_percentile)


@dataclass(frozen=True)
class ScreenOptions:
    """The grid and the screen's constants.

    Attributes
    ----------
    gpus, precisions : tuple of str or None
        Catalog names; ``None`` means the catalog's default grid (:meth:`Catalog.default_gpus`,
        H100, H200 and B200 built in) for GPUs and :meth:`Catalog.default_precisions` (BF16 and FP8) for precisions.
    tps : tuple of int or None
        GPUs per instance (powers of two; the TP degree of the ``tp`` layout). None: 1, 2, 4, 8
        for a dense model (the lecture's grid) and 1 to 64 for a MoE model, whose instances may
        span nodes (SPEC §10).
    pps : tuple of int or None
        Pipeline stages per instance (pipeline parallelism, :func:`fastsim.stepmodel.stage_params`):
        with ``pp > 1`` a TP of ``tps`` is the GPUs of one stage (at most a node) and the instance
        has ``tp x pp`` GPUs. Any integer from 1 to the model's layers (uneven stages are vLLM's
        partition). None: :meth:`pps_for`'s default, 1 where the model's weights fit one node of
        the GPU, else :data:`DEFAULT_PPS`. Colocated plans only: a disaggregated plan with
        ``pp > 1`` is not screened (its pools are plain TP instances).
    layouts : tuple of str or None
        Instance layouts (:data:`fastsim.stepmodel.LAYOUTS`). None: ``tp`` for a dense model, all
        three for a MoE model. Layouts a model refuses (EP on a dense model, TP not dividing
        the heads) are rows with status :data:`fastsim.analytic.REFUSED`, never plans.
    modes : tuple of str
        ``"colocated"`` and/or ``"disaggregated"``.
    chunk_tokens : tuple of int
        Chunk sizes tried for colocated instances.
    tpot_margin : float
        A step must take at most ``tpot_margin x TPOT`` (0.85: 15% for length spread and the tail).
    ttft_tail : float
        P90 wait ~ ``ttft_tail x W`` (2.3 ~ ln 10).
    constants : StepConstants
        Efficiencies and overheads of the step model (SPEC §3).
    spec_alpha : float or None
        Per-token acceptance probability of speculative decoding, in [0, 1). None (default): no
        speculative decoding is screened. Given: every configuration is screened without it
        (``spec_gamma`` 0) and with each of ``spec_gammas`` (:mod:`fastsim.specdec`).
    spec_gammas : tuple of int
        Draft tokens per round to screen when ``spec_alpha`` is given (default 2 and 4).
    spec_draft : str or None
        Draft model: a catalog name, a ``config.json`` path or ``"mtp"``; None takes
        :func:`fastsim.specdec.default_draft` of the screened model (Llama-3.1-8B for
        Llama-3.1-70B / 405B, SPEC §4). Used only with ``spec_alpha``.
    prefix_hit_fraction : float
        Fraction of prompt tokens served from the prefix cache, in [0, 1) (default 0): their
        prefill compute is skipped (see the module docstring).
    heterogeneous : bool
        Also screen disaggregated plans whose prefill and decode sides run on different GPU
        types or precisions (H100 prefill + H200 decode, ...), each side priced at its own GPU's
        price, each picking its own TP as in DistServe's Algorithm 1; the prefill side's KV is
        sent over its network as in a homogeneous plan. Default False.
    queueing : bool
        Queueing-aware colocated screen (``fastsim plan --screen queueing``): a colocated
        instance's capacity is also capped by the wait for its chunk slot. The chunk slot serves
        prompts FCFS, a prompt of P tokens in P / c steps, so it is an M/G/1 queue with service
        ``S = P / c x step`` (``E[S^2]`` from ``E[P^2] = E[P] x E[P^2] / E[P]``); the P90 TTFT
        ~ ``ceil(P90 / c) x step + ttft_tail x W`` with ``W = lambda E[S^2] / (2 (1 - lambda
        E[S]))`` (Pollaczek-Khinchine) must meet the TTFT target, which bounds lambda. Default
        False: the lecture's screen (throughput and ``ceil(P90 / c)`` steps within TTFT / 2).

    Raises
    ------
    FastsimInputError
        An empty ``tps`` or a TP that is not a power of two from 1 to 64; an empty ``pps``, a
        repeated one, or one that is not an integer from 1 to 4096; an unknown mode; a
        chunk size that is not a positive integer; ``tpot_margin`` outside (0, 1];
        ``ttft_tail`` not a finite number > 0; ``spec_alpha`` not None or a number in [0, 1);
        ``spec_gammas`` empty or not integers >= 1; ``spec_draft`` not None or a non-empty
        string; ``prefix_hit_fraction`` not a number in [0, 1).
    """

    gpus: tuple | None = None
    precisions: tuple | None = None
    tps: tuple | None = None
    layouts: tuple | None = None
    modes: tuple = ("colocated", "disaggregated")
    chunk_tokens: tuple = (256, 512, 1024, 2048)
    tpot_margin: float = 0.85
    ttft_tail: float = 2.3
    constants: StepConstants = field(default_factory=StepConstants)
    spec_alpha: float | None = None
    spec_gammas: tuple = (2, 4)
    spec_draft: str | None = None
    prefix_hit_fraction: float = 0.0
    queueing: bool = False
    heterogeneous: bool = False
    pps: tuple | None = None

    def __post_init__(self):
        if self.pps is not None:
            if isinstance(self.pps, (str, bytes)) or not hasattr(self.pps, "__iter__") or not tuple(self.pps):
                raise FastsimInputError("pps", self.pps, "one or more integers >= 1 (pipeline stages)")
            vals = tuple(check_pp(v, "pp") for v in self.pps)
            if len(set(vals)) != len(vals):
                raise FastsimInputError("pps", list(vals), "distinct pipeline-stage counts (one is repeated)")
            object.__setattr__(self, "pps", vals)
        if self.tps is not None:
            for t in self.tps:
                require_tp("tp", t)
            if not self.tps:
                raise FastsimInputError("tps", self.tps, "at least one power of two")
        if self.layouts is not None:
            if not self.layouts:
                raise FastsimInputError("layouts", self.layouts, "at least one of " + ", ".join(LAYOUTS))
            for x in self.layouts:
                if x not in LAYOUTS:
                    raise FastsimInputError("layout", x, "one of " + ", ".join(LAYOUTS))
        for m in self.modes:
            if m not in ("colocated", "disaggregated"):
                raise FastsimInputError("mode", m, "colocated or disaggregated")
        for c in self.chunk_tokens:
            if int(c) != c or c < 1:
                raise FastsimInputError("chunk_tokens", c, "positive integers")
        if not (0 < self.tpot_margin <= 1):
            raise FastsimInputError("tpot_margin", self.tpot_margin, "a fraction in (0, 1]")
        require_positive("ttft_tail", self.ttft_tail)
        a = self.spec_alpha
        if a is not None and (isinstance(a, (bool, str, bytes)) or not isinstance(a, (int, float, np.integer, np.floating))
                              or not (0.0 <= float(a) < 1.0)):
            raise FastsimInputError("spec_alpha", a, "None or a probability in [0, 1) (per-token acceptance)")
        gs = self.spec_gammas
        if isinstance(gs, (str, bytes)) or not hasattr(gs, "__iter__") or not tuple(gs) or any(
                isinstance(g, (bool, np.bool_)) or not isinstance(g, (int, np.integer)) or g < 1 for g in gs):
            raise FastsimInputError("spec_gammas", gs, "one or more integers >= 1 (draft tokens per round)")
        if self.spec_draft is not None and (not isinstance(self.spec_draft, str) or not self.spec_draft.strip()):
            raise FastsimInputError("spec_draft", self.spec_draft, "None, 'mtp' or a model name / config.json path")
        v = self.prefix_hit_fraction
        if isinstance(v, (bool, str, bytes)) or not isinstance(v, (int, float, np.integer, np.floating)) \
                or not (0.0 <= float(v) < 1.0):
            raise FastsimInputError("prefix_hit_fraction", v, "a fraction in [0, 1) of the prompt tokens")

    @property
    def screens_extensions(self) -> bool:
        """True when speculative decoding or a prefix-cache hit fraction is screened (bool)."""
        return self.spec_alpha is not None or self.prefix_hit_fraction != 0.0

    def spec_for(self, model: Model, catalog: Catalog | None = None) -> SpecDecoding | None:
        """The speculative decoding screened for a model (draft resolved), or None without ``spec_alpha``.

        Parameters
        ----------
        model : Model
            The target.
        catalog : Catalog, optional
            Resolves the draft; defaults to the built-in catalog.

        Returns
        -------
        SpecDecoding or None
            With the first of ``spec_gammas`` (the screen tries each).

        Raises
        ------
        FastsimInputError
            An unknown draft or one whose vocabulary differs from the model's
            (:func:`fastsim.specdec.spec_decoding`).
        """
        if self.spec_alpha is None:
            return None
        return spec_decoding(int(self.spec_gammas[0]), self.spec_alpha, self.spec_draft, model, catalog=catalog)

    def tps_for(self, model: Model) -> tuple:
        """GPUs per instance to screen for a model: ``tps``, or its default.

        Parameters
        ----------
        model : Model

        Returns
        -------
        tuple of int
            ``tps`` when given; else (1, 2, 4, 8) for a dense model and (1, ..., 64) for a MoE
            model (instances may span nodes, SPEC §10).
        """
        if self.tps is not None:
            return tuple(self.tps)
        return (1, 2, 4, 8, 16, 32, 64) if model.is_moe else (1, 2, 4, 8)

    def layouts_for(self, model: Model) -> tuple:
        """Instance layouts to screen for a model: ``layouts``, or its default.

        Parameters
        ----------
        model : Model

        Returns
        -------
        tuple of str
            ``layouts`` when given; else ``("tp",)`` for a dense model and every layout of
            :data:`fastsim.stepmodel.LAYOUTS` for a MoE model.
        """
        if self.layouts is not None:
            return tuple(self.layouts)
        return LAYOUTS if model.is_moe else ("tp",)

    @property
    def pps_given(self) -> bool:
        """Whether the pipeline-stage counts were given (bool): a given count the grid cannot run is a
        refused row with its reason; a default one that cannot run is left out of the grid."""
        return self.pps is not None

    def pps_for(self, model: Model, gpu=None, precision=None) -> tuple:
        """Pipeline stages to screen for a model on a GPU and precision: ``pps``, or its default.

        The default: ``(1,)`` where the model's weights fit one node of the GPU (the KV budget of
        :func:`fastsim.stepmodel.kv_budget_tokens` on ``gpu.gpus_per_node`` GPUs is positive:
        ``memory_utilization`` of the node's memory holds them), else :data:`DEFAULT_PPS` up to
        the model's layers (a stage needs a layer). As vLLM's guide puts it: tensor parallelism
        inside a node, pipeline parallelism across nodes when the model does not fit one
        (``docs/serving/parallelism_scaling.md``, "Distributed inference strategies for a
        single-model replica").

        Parameters
        ----------
        model : Model
        gpu : GPU, optional
            Without it (or without ``precision``) the default is ``(1,)``.
        precision : Precision, optional

        Returns
        -------
        tuple of int

        Raises
        ------
        FastsimInputError
            A given count above the model's layers (field ``pp``).
        """
        if self.pps is not None:
            return tuple(check_pp(v, "pp", model.layers) for v in self.pps)
        if gpu is None or precision is None:
            return (1,)
        from .stepmodel import kv_budget_tokens
        gpn = int(getattr(gpu, "gpus_per_node", 8))
        try:
            fits = kv_budget_tokens(model, precision, gpu, gpn, self.constants) > 0
        except FastsimInputError:
            fits = True             # a precision the model is not served in: nothing to split
        if fits:
            return (1,)
        return tuple(v for v in DEFAULT_PPS if v <= model.layers)


@dataclass(frozen=True)
class Plan:
    """One deployment: what to buy and how to run it.

    For a colocated plan ``tp``/``pp``/``instances`` describe the instances (``tp x pp`` GPUs
    each); for a disaggregated plan
    ``prefill_tp``/``prefill_instances`` and ``decode_tp``/``decode_instances`` do (``tp`` and
    ``instances`` then repeat the decode side). Capacities in req/s, costs in US dollars per
    million output tokens. Fields are not validated (the screen and
    :func:`fastsim.analytic.plan_for` build valid plans; the simulator checks what it runs).

    Attributes
    ----------
    model, gpu, precision : str
        Catalog names.
    mode : str
        ``"colocated"`` or ``"disaggregated"``.
    tp, instances : int
        TP degree and count of the instances (for disaggregated plans: the decode side); with
        ``pp > 1`` ``tp`` is the TP of one pipeline stage.
    prefill_tp, prefill_instances, decode_tp, decode_instances : int
        The two sides of a disaggregated plan (0 for colocated plans).
    chunk_tokens : int
        Prefill chunk of a colocated instance (tokens; 0 for disaggregated plans).
    batch : int
        Analytic decode batch per instance (requests).
    instance_capacity_req_per_s : float
        Analytic capacity of one instance (the decode side for disaggregated plans) (req/s).
    prefill_capacity_req_per_s, decode_capacity_req_per_s : float
        Analytic capacity of one prefill / decode instance (req/s; 0 for colocated plans).
    price_usd_per_gpu_hour : float
        Price of one GPU (US dollars per hour).
    layout : str
        Instance layout of every instance of the plan (:data:`fastsim.stepmodel.LAYOUTS`):
        ``tp`` (SPEC §3), ``tp+ep`` or ``dp+ep`` (MoE models, SPEC §10); ``tp`` counts the
        instance's GPUs in every layout.
    spec_gamma : int
        Draft tokens per speculative-decoding round of the (decode) instances; 0 = no
        speculative decoding.
    spec_alpha : float or None
        Per-token acceptance the plan was screened with; None when the screen did not consider
        speculative decoding (then ``spec_gamma`` is 0).
    spec_draft : str or None
        The draft model (catalog name, path or ``"mtp"``) the screen considered; None as above.
    prefix_hit_fraction : float
        Fraction of prompt tokens the screen took from the prefix cache (0 = none).
    prefill_gpu, prefill_precision : str or None
        A heterogeneous disaggregated plan's prefill side, when it differs from the decode side
        (``gpu``, ``precision``); None: the same as the decode side.
    prefill_price_usd_per_gpu_hour : float or None
        Price of one prefill GPU when the prefill side differs (US dollars per hour); None: the
        decode side's ``price_usd_per_gpu_hour``.
    max_batch : int
        Most admitted requests per (decode) instance, the engine's batch cap (vLLM's
        ``max_num_seqs``); 0 = no cap beyond the KV budget. The simulator applies it
        (:func:`fastsim.search.sim_plan`).
    pp : int
        Pipeline stages of a colocated instance (pipeline parallelism, 1 = none): the instance runs
        its layers in ``pp`` stages of ``tp`` GPUs each (:func:`fastsim.stepmodel.stage_params`),
        ``tp x pp`` GPUs in all (:attr:`gpus_per_instance`). Always 1 for a disaggregated plan.
    """

    model: str
    gpu: str
    precision: str
    mode: str
    tp: int
    instances: int
    prefill_tp: int = 0
    prefill_instances: int = 0
    decode_tp: int = 0
    decode_instances: int = 0
    chunk_tokens: int = 0
    batch: int = 0
    instance_capacity_req_per_s: float = 0.0
    prefill_capacity_req_per_s: float = 0.0
    decode_capacity_req_per_s: float = 0.0
    price_usd_per_gpu_hour: float = 0.0
    layout: str = "tp"
    spec_gamma: int = 0
    spec_alpha: float | None = None
    spec_draft: str | None = None
    prefix_hit_fraction: float = 0.0
    prefill_gpu: str | None = None
    prefill_precision: str | None = None
    prefill_price_usd_per_gpu_hour: float | None = None
    max_batch: int = 0
    pp: int = 1

    @property
    def gpus_per_instance(self) -> int:
        """GPUs of one instance (int): ``tp x pp`` (a disaggregated plan: its decode instance's ``tp``)."""
        return int(self.tp) * int(self.pp)

    def gpus_per_node(self, catalog=None) -> int:
        """GPUs of one node of the plan's (decode) GPU (int): :attr:`fastsim.catalog.GPU.gpus_per_node`.

        Parameters
        ----------
        catalog : Catalog, optional
            Where the GPU is looked up; default the built-in catalog. A GPU it does not hold
            counts 8 GPUs a node (an HGX board).

        Returns
        -------
        int
        """
        from .catalog import default_catalog
        try:
            return int((catalog or default_catalog()).gpu(self.gpu).gpus_per_node)
        except FastsimInputError:
            return 8

    @property
    def nodes_per_instance(self) -> int:
        """Nodes one instance spans (int): ``ceil(tp x pp / gpus_per_node)`` on the built-in catalog's node
        of the plan's GPU (:func:`fastsim.layouts.nodes_of`)."""
        return nodes_of(self.gpus_per_instance, self.gpus_per_node())

    @property
    def heterogeneous(self) -> bool:
        """Whether the prefill side runs on another GPU type or precision than the decode side (bool)."""
        return self.prefill_gpu is not None or self.prefill_precision is not None

    @property
    def prefill_gpu_name(self) -> str:
        """The prefill side's GPU (str; ``gpu`` unless the plan is heterogeneous)."""
        return self.prefill_gpu or self.gpu

    @property
    def prefill_precision_name(self) -> str:
        """The prefill side's precision (str; ``precision`` unless the plan is heterogeneous)."""
        return self.prefill_precision or self.precision

    @property
    def spec(self) -> SpecDecoding | None:
        """The plan's speculative decoding (:class:`fastsim.specdec.SpecDecoding`), None when ``spec_gamma`` is 0."""
        if not self.spec_gamma:
            return None
        return SpecDecoding(int(self.spec_gamma), float(self.spec_alpha), str(self.spec_draft))

    def layout_kwargs(self, gpus: int) -> dict:
        """The data-parallel and expert-parallel degrees of this plan's layout.

        Parameters
        ----------
        gpus : int
            GPUs of the instance (``tp``, ``prefill_tp`` or ``decode_tp``).

        Returns
        -------
        dict
            ``dict(dp=..., ep=...)`` for :func:`fastsim.stepmodel.step_params`.
        """
        dp, ep = layout_degrees(self.layout, gpus)
        return dict(dp=dp, ep=ep)

    def label(self, tp: int, gpus_per_node: int | None = None) -> str:
        """The label of an instance of this plan.

        Parameters
        ----------
        tp : int
            GPUs of the instance (of one pipeline stage when ``pp > 1``).
        gpus_per_node : int, optional
            GPUs of one node, for a pipelined instance's node count; default
            :meth:`gpus_per_node` of the built-in catalog.

        Returns
        -------
        str
            ``TP8``, ``TP8+EP8`` or ``DP8+EP8`` for the ``tp``, ``tp+ep`` and ``dp+ep`` layouts;
            ``TP8 x PP2 on 2 nodes`` with ``pp = 2`` (:func:`fastsim.layouts.instance_label`).
        """
        if self.pp == 1:
            return instance_label(self.layout, tp)
        gpn = self.gpus_per_node() if gpus_per_node is None else int(gpus_per_node)
        return instance_label(self.layout, tp, self.pp, gpn)

    @property
    def gpus(self) -> int:
        """Total GPUs of the plan (int): ``tp x pp x instances``, or the sum over both sides."""
        if self.mode == "disaggregated":
            return self.prefill_tp * self.prefill_instances + self.decode_tp * self.decode_instances
        return self.tp * self.pp * self.instances

    @property
    def capacity_req_per_s(self) -> float:
        """Analytic capacity of the whole plan (float, req/s); the smaller side for disaggregated plans."""
        if self.mode == "disaggregated":
            return min(self.prefill_instances * self.prefill_capacity_req_per_s,
                       self.decode_instances * self.decode_capacity_req_per_s)
        return self.instances * self.instance_capacity_req_per_s

    @property
    def price_usd_per_hour(self) -> float:
        """What the plan's GPUs cost (float, US dollars per hour): ``gpus x price_usd_per_gpu_hour``,
        each side at its own price for a heterogeneous plan."""
        if self.mode == "disaggregated" and self.prefill_price_usd_per_gpu_hour is not None:
            return (self.prefill_tp * self.prefill_instances * self.prefill_price_usd_per_gpu_hour
                    + self.decode_tp * self.decode_instances * self.price_usd_per_gpu_hour)
        return self.gpus * self.price_usd_per_gpu_hour

    def with_instances(self, instances=None, prefill_instances=None, decode_instances=None) -> "Plan":
        """A copy with other instance counts (repair, SPEC §7).

        Parameters
        ----------
        instances : int, optional
            New count of a colocated plan (ignored for disaggregated plans).
        prefill_instances, decode_instances : int, optional
            New counts of a disaggregated plan (ignored for colocated plans); ``instances``
            follows ``decode_instances``.

        Returns
        -------
        Plan
            Capacities per instance are unchanged; counts are not validated.
        """
        if self.mode == "disaggregated":
            d = self.decode_instances if decode_instances is None else int(decode_instances)
            return replace(self, prefill_instances=self.prefill_instances if prefill_instances is None
                           else int(prefill_instances), decode_instances=d, instances=d)
        return replace(self, instances=self.instances if instances is None else int(instances))

    def describe(self) -> str:
        """A short human label that names the instances and the GPUs separately.

        Returns
        -------
        str
            E.g. ``B200 FP8 colocated, 2 instances of TP1 (2 GPUs)`` or ``H200 FP8
            disaggregated, prefill 3 instances of TP1 + decode 1 instance of TP4 (7 GPUs)``.
        """
        def inst(n, tp):
            return f"{n} instance{'s' if n != 1 else ''} of {self.label(tp)}"
        gpus = f"({self.gpus} GPU{'s' if self.gpus != 1 else ''})"
        extra = ""
        if self.spec_gamma:
            extra += (f", speculative decoding gamma {self.spec_gamma} (alpha {self.spec_alpha:g}, "
                      f"draft {self.spec_draft})")
        if self.prefix_hit_fraction:
            extra += f", {self.prefix_hit_fraction:.0%} prefix-cache hits"
        if self.max_batch:
            extra += f", at most {self.max_batch} requests per {'decode ' if self.mode == 'disaggregated' else ''}instance"
        if self.mode == "disaggregated" and self.heterogeneous:
            return (f"disaggregated, prefill {self.prefill_gpu_name} {self.prefill_precision_name} "
                    f"{inst(self.prefill_instances, self.prefill_tp)} + decode {self.gpu} {self.precision} "
                    f"{inst(self.decode_instances, self.decode_tp)} {gpus}{extra}")
        if self.mode == "disaggregated":
            return (f"{self.gpu} {self.precision} disaggregated, prefill {inst(self.prefill_instances, self.prefill_tp)}"
                    f" + decode {inst(self.decode_instances, self.decode_tp)} {gpus}{extra}")
        return f"{self.gpu} {self.precision} colocated, {inst(self.instances, self.tp)} {gpus}{extra}"

    def to_dict(self) -> dict:
        """The fields as a plain dict (for JSON).

        Returns
        -------
        dict
            Every field, plus the derived ``gpus`` and ``capacity_req_per_s``; the
            ``spec_*`` fields only when the plan was screened with speculative decoding
            (``spec_alpha`` not None), ``prefix_hit_fraction`` and ``max_batch`` only when they
            are not 0, ``pp`` (and the derived ``gpus_per_instance``) only when it is above 1.
        """
        d = asdict(self)
        if self.pp == 1:
            d.pop("pp")
        else:
            d["gpus_per_instance"] = self.gpus_per_instance
        if self.spec_alpha is None:
            for k in ("spec_gamma", "spec_alpha", "spec_draft"):
                d.pop(k)
        if not self.prefix_hit_fraction:
            d.pop("prefix_hit_fraction")
        if not self.max_batch:
            d.pop("max_batch")
        if not self.heterogeneous:
            for k in ("prefill_gpu", "prefill_precision", "prefill_price_usd_per_gpu_hour"):
                d.pop(k)
        d["gpus"] = self.gpus
        d["capacity_req_per_s"] = self.capacity_req_per_s
        return d
