"""The analytic screen over the full configuration grid (SPEC section 5; lecture §2.2).

The grid is GPU x precision x TP x mode {colocated, disaggregated}. Per configuration a jitted kernel
(:func:`fastsim._analytic_nb.instances_nb`) computes, on arrays:

* decode instance: KV reserved for P + O per request, ``b <= KV tokens / (mean P + mean O)``; the
  largest b with ``step(b) <= 0.85 x TPOT``; throughput ``b / (step x mean O)``;
* prefill instance: M/D/1 queue, ``W = rho S_b / (2 (1 - rho))``, ``P90 TTFT ~ S + 2.3 W`` with S the
  step of the latency-quantile prompt and S_b that of the mean prompt; the largest rho meeting the
  TTFT target after the KV transfer (lecture exercise 4);
* colocated instance: each step carries b decodes and a chunk of c prompt tokens,
  ``c in {256, 512, 1024, 2048}``; ``step <= 0.85 x TPOT`` and ``ceil(P / c) x step <= TTFT / 2``;
  throughput ``min(b / O, c / P) / step`` maximised over b and c (Sarathi-Serve chunked prefill,
  Agrawal et al., OSDI 2024);
* disaggregated: DistServe's Algorithm 1 (Zhong et al., OSDI 2024): prefill and decode each pick
  the TP with the highest per-GPU throughput, then each side is replicated to cover the rate.

In every step the b decodes read ``b x (mean P + mean O / 2)`` tokens of KV. Latency checks use the
latency quantile (P90 by default) of the length distributions, never the mean (lecture §2.3,
lesson one). Instances are whole: each plan reports its integer cost and its efficiency cost. A
configuration that needs more than :data:`MAX_INSTANCES` (4,096) instances of a kind to carry the
rate is infeasible, with a reason that says so (counts never overflow, however large the rate).

Two options go beyond the lecture's screen (its §2.5 list, SPEC §10):

* speculative decoding (``ScreenOptions.spec_alpha``): every configuration is screened without
  speculation and with each ``gamma`` of ``spec_gammas``. A speculative instance decodes in rounds
  of ``gamma`` draft steps plus one verify step over ``gamma + 1`` tokens per sequence
  (:func:`fastsim.specdec.round_time_s`, the ledger's round, SPEC §4), yielding
  ``(1 - alpha^(gamma+1)) / (1 - alpha)`` tokens per sequence: the TPOT check applies to
  ``round / tokens per round`` and the decode throughput is ``b x tokens per round / (round x
  mean O)``; a colocated instance's prefill chunk rides in the verify step. The draft's weights
  and KV share the instance's memory (:func:`fastsim.specdec.spec_step_params`), on both sides
  of a disaggregated plan (its prefill instances would compute the draft's prompt KV);
* a prefix-cache hit fraction (``ScreenOptions.prefix_hit_fraction``): that fraction of every
  prompt's tokens is served from the cache. Their matmuls and their own causal attention are not
  recomputed; their KV is still held, read and attended by the new tokens. It shortens the
  prefill step (prefill instances) and the chunks a prompt needs (colocated instances); the KV
  reserved per request and the KV shipped to a decode instance stay those of the whole prompt.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from . import _analytic_nb as K
from .catalog import Catalog, LengthDist, Model, Scenario, default_catalog
from .errors import FastsimInputError, require_positive, require_tp
from .specdec import SpecDecoding, expected_tokens_per_round, spec_decoding, spec_refusal, spec_step_params
from .stepmodel import (LAYOUTS, N_PARAMS, P_KV_BUDGET_TOKENS, StepConstants, layout_degrees, layout_refusal,
                        step_params)
from .layouts import instance_label

if TYPE_CHECKING:
    import pandas as pd   # imported where a table is built: a command's first line does not wait for it

__all__ = ["Demand", "ScreenOptions", "Plan", "screen", "instance_table", "plan_for", "cost_usd_per_million_output_tokens",
           "instances_needed", "MAX_INSTANCES"]

#: Most instances of one kind a plan may have: a colocated plan's instances, or each side of a
#: disaggregated plan. The screen calls a configuration that needs more infeasible (its reason says
#: so); :func:`plan_for`, ``fastsim simulate`` and ``fastsim capacity`` refuse larger counts (the
#: limit of ``capacity --instance-counts``).
MAX_INSTANCES = 4096

#: Largest count :func:`instances_needed` returns: every count up to it is exact in float64, and
#: it times any GPU count of an instance stays far inside int64 (no overflow, however large the rate).
_INSTANCES_CEILING = 2.0 ** 53

#: Status of a grid row whose instance layout the model refuses (set here, not by the kernel).
REFUSED = 4

_REASONS = {REFUSED: "the layout does not fit the model (see the refusal column)",
            K.OK: "", K.NO_FIT: "weights + one request's KV do not fit in memory",
            K.TPOT_UNREACHABLE: "no batch meets the TPOT target",
            K.TTFT_UNREACHABLE: "the latency-quantile prompt cannot be prefilled within the TTFT target"}


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

    Raises
    ------
    FastsimInputError
        A rate, target, mean or quantile that is not a finite number > 0, or a
        ``served_fraction`` outside [0, 1].
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

    def __post_init__(self):
        if self.work_prompt_tokens is None:
            object.__setattr__(self, "work_prompt_tokens", self.mean_prompt_tokens)
        for name in ("rate_req_per_s", "ttft_s", "tpot_s", "mean_prompt_tokens", "mean_output_tokens",
                     "latency_prompt_tokens", "latency_output_tokens", "work_prompt_tokens"):
            require_positive(name, getattr(self, name))
        f = self.served_fraction
        if isinstance(f, bool) or not isinstance(f, (int, float, np.integer, np.floating)) or not 0.0 <= f <= 1.0:
            raise FastsimInputError("served_fraction", f, "a number from 0 to 1 (share of requests within the context)")

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
        from .workload import served_lengths
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
                      latency_quantile: float | None = 0.9) -> "Demand":
        """Demand of a scenario; ``latency_quantile=None`` screens with mean lengths (lesson one).

        The figures are the untruncated distributions'; the screen (:func:`screen`,
        :func:`instance_table`, :func:`plan_for`) truncates them at the model's context
        (:meth:`within_context`), since the simulator serves only requests that fit it.

        Parameters
        ----------
        scenario : Scenario
        rate_req_per_s, ttft_s, tpot_s : float, optional
            Override the scenario's rate (req/s) and P90 targets (s).
        latency_quantile : float or None
            Quantile of the length distributions used for the latency checks (0.9, SPEC §5);
            None uses the means.

        Returns
        -------
        Demand

        Raises
        ------
        FastsimInputError
            An override that is not a finite number > 0.
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
            prompt_dist=scenario.prompt, output_dist=scenario.output,
        )

    @classmethod
    def from_lengths(cls, prompt_tokens, output_tokens, *, rate_req_per_s, ttft_s, tpot_s,
                     latency_quantile: float | None = 0.9) -> "Demand":
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
                   work_prompt_tokens=float((p * p).mean() / p.mean()))


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
    layouts : tuple of str or None
        Instance layouts (:data:`fastsim.stepmodel.LAYOUTS`). None: ``tp`` for a dense model, all
        three for a MoE model. Layouts a model refuses (EP on a dense model, TP not dividing
        the heads) are rows with status :data:`REFUSED`, never plans.
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
        An empty ``tps`` or a TP that is not a power of two from 1 to 64; an unknown mode; a
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

    def __post_init__(self):
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


@dataclass(frozen=True)
class Plan:
    """One deployment: what to buy and how to run it.

    For a colocated plan ``tp``/``instances`` describe the instances; for a disaggregated plan
    ``prefill_tp``/``prefill_instances`` and ``decode_tp``/``decode_instances`` do (``tp`` and
    ``instances`` then repeat the decode side). Capacities in req/s, costs in US dollars per
    million output tokens. Fields are not validated (the screen and :func:`plan_for` build
    valid plans; the simulator checks what it runs).

    Attributes
    ----------
    model, gpu, precision : str
        Catalog names.
    mode : str
        ``"colocated"`` or ``"disaggregated"``.
    tp, instances : int
        TP degree and count of the instances (for disaggregated plans: the decode side).
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

    def label(self, tp: int) -> str:
        """The label of an instance of this plan.

        Parameters
        ----------
        tp : int
            GPUs of the instance.

        Returns
        -------
        str
            ``TP8``, ``TP8+EP8`` or ``DP8+EP8`` for the ``tp``, ``tp+ep`` and ``dp+ep`` layouts.
        """
        return instance_label(self.layout, tp)

    @property
    def gpus(self) -> int:
        """Total GPUs of the plan (int): ``tp x instances``, or the sum over both sides."""
        if self.mode == "disaggregated":
            return self.prefill_tp * self.prefill_instances + self.decode_tp * self.decode_instances
        return self.tp * self.instances

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
            are not 0.
        """
        d = asdict(self)
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


def cost_usd_per_million_output_tokens(gpus, price_usd_per_gpu_hour, rate_req_per_s, mean_output_tokens):
    """Cost per million output tokens (SPEC §1; lecture exercise 2).

    ``gpus x price / (rate x mean O x 3600) x 1e6``; broadcasts over arrays. Inputs are not
    validated (a zero rate gives inf).

    Parameters
    ----------
    gpus : int or array_like
        GPUs of the plan.
    price_usd_per_gpu_hour : float or array_like
        Price of one GPU (US dollars per hour).
    rate_req_per_s : float or array_like
        Request rate served (req/s): the target rate for the integer cost, the capacity for the
        efficiency cost.
    mean_output_tokens : float or array_like
        Mean output tokens per request.

    Returns
    -------
    ndarray(float64)
        US dollars per million output tokens, shape of the broadcast inputs (0-d for scalars).

    Examples
    --------
    >>> round(cost_usd_per_million_output_tokens(2, 4.0, 20, 250), 3)
    0.444
    """
    return np.asarray(gpus, dtype=np.float64) * price_usd_per_gpu_hour / (
        np.asarray(rate_req_per_s, dtype=np.float64) * mean_output_tokens * 3600.0) * 1e6


def instances_needed(rate_req_per_s, capacity_req_per_s):
    """Whole instances to carry a rate: ``ceil(rate / capacity)`` (lecture exercise 6: 20 / 16.2 -> 2).

    A relative tolerance of 1e-9 keeps 20 / 10 from rounding up to 3; capacity <= 0 gives 0
    (infeasible). Counts saturate at 2**53 (a rate of 1e21 req/s gives 2**53, never an int64
    overflow); the screen calls a count above :data:`MAX_INSTANCES` infeasible.

    Parameters
    ----------
    rate_req_per_s : float or array_like
        Rate to carry (req/s).
    capacity_req_per_s : float or array_like
        Capacity of one instance (req/s).

    Returns
    -------
    ndarray(int64)
        Instances (from 1 to 2**53 where capacity > 0, else 0), shape of the broadcast inputs
        (0-d for scalars).
    """
    cap = np.asarray(capacity_req_per_s, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        n = np.ceil(np.asarray(rate_req_per_s, dtype=np.float64) / cap * (1.0 - 1e-9))
    n = np.where((cap > 0) & ~np.isnan(n), np.clip(n, 1.0, _INSTANCES_CEILING), 0.0)
    return n.astype(np.int64)


def _grid_arrays(model: Model, catalog: Catalog, options: ScreenOptions):
    """Rows ``(gpu, precision, tp, layout, refusal)`` of the grid and their step parameters.

    A refused layout (``refusal`` a sentence) gets a parameter row with a negative KV budget,
    so the kernel reports NO_FIT; :func:`instance_table` then marks it REFUSED."""
    gpus = [catalog.gpu(g) for g in (options.gpus or catalog.default_gpus())]
    precs = [catalog.precision(p) for p in (options.precisions or catalog.default_precisions())]
    rows = []
    for g in gpus:
        for pr in precs:
            if pr.flops_key not in g.peak_flops_per_s:
                continue
            for tp in options.tps_for(model):
                for lay in options.layouts_for(model):
                    rows.append((g, pr, int(tp), lay, layout_refusal(model, g, lay, int(tp))))
    if not rows:
        raise FastsimInputError("precision", ", ".join(p.name for p in precs),
                                "a precision that a selected GPU (" + ", ".join(g.name for g in gpus)
                                + ") has a peak for: " + ", ".join(sorted({k for g in gpus for k in g.peak_flops_per_s})))
    refused = None
    params = []
    for g, pr, tp, lay, why in rows:
        if why is None:
            dp, ep = layout_degrees(lay, tp)
            params.append(step_params(model, g, pr, tp, options.constants, dp=dp, ep=ep))
        else:
            if refused is None:
                refused = np.ones(N_PARAMS)
                refused[P_KV_BUDGET_TOKENS] = -1.0
            params.append(refused)
    return rows, np.ascontiguousarray(np.stack(params))


def instance_table(model: Model | str, demand: Demand, *, catalog: Catalog | None = None,
                   options: ScreenOptions = ScreenOptions(), max_batch: int = 0) -> pd.DataFrame:
    """Per-instance analytic capacities of every GPU x precision x TP of the grid (SPEC §5).

    Decode capacity ``b / (step x mean O)``; prefill capacity ``rho / S_b`` from the M/D/1 wait
    (lecture exercise 4); colocated capacity ``min(b / O, c / P) / step`` (Sarathi-Serve); see
    the module docstring.

    Parameters
    ----------
    model : Model or str
        A model or a catalog name / ``config.json`` path.
    demand : Demand
        Rate, SLOs and length statistics.
    catalog : Catalog, optional
        Defaults to the built-in catalog.
    options : ScreenOptions
        The grid (GPUs, precisions, TPs, chunk sizes) and the screen's constants; ``modes`` is
        not used here.
    max_batch : int, default 0
        Cap on every instance's batch (requests; :attr:`Plan.max_batch`); 0: only the KV budget
        limits it.

    Returns
    -------
    pandas.DataFrame
        One row per GPU x precision x TP x layout (pairs whose GPU has no peak for the precision
        are skipped): ``gpu, precision, tp, layout, refusal`` (why the model cannot run that
        layout, e.g. a TP that does not divide its heads; "" when it can)``,
        price_usd_per_gpu_hour, status, kv_budget_tokens,
        decode_capacity_req_per_s, decode_batch, decode_step_s, prefill_capacity_req_per_s,
        prefill_utilisation, prefill_step_s, colocated_status, colocated_capacity_req_per_s,
        colocated_batch, chunk_tokens, colocated_step_s`` (capacities 0 where infeasible;
        ``status`` codes are those of :mod:`fastsim._analytic_nb`). With ``options.spec_alpha``
        each configuration appears once per gamma (0 first, then ``options.spec_gammas``), with
        the columns ``spec_gamma`` and ``spec_tokens_per_round`` after ``layout``; a speculative
        row's ``decode_step_s`` and ``colocated_step_s`` are round times (s per round, which
        yields ``spec_tokens_per_round`` tokens per sequence), its ``kv_budget_tokens`` the
        budget left beside the draft, and its ``refusal`` may be the draft's.

    Raises
    ------
    FastsimInputError
        An unknown model, GPU or precision name, a model config that cannot be read, no
        selected GPU with a peak for any selected precision, a speculative-decoding draft
        that is unknown or has another vocabulary than the model, or ``max_batch`` not an
        integer >= 0.
    """
    catalog = catalog or default_catalog()
    if isinstance(model, str):
        model = catalog.model(model)
    if isinstance(max_batch, (bool, np.bool_)) or not isinstance(max_batch, (int, np.integer)) or max_batch < 0:
        raise FastsimInputError("max_batch", max_batch, "an integer >= 0 (requests per instance; 0 = no cap)")
    demand = demand.within_context(model.max_context_tokens)
    rows, params = _grid_arrays(model, catalog, options)
    ext = options.screens_extensions
    if ext:
        rows, params, pidx, dpidx, gam, tpr = _extend_grid(model, catalog, options, rows, params)
    n = len(rows)
    f8 = lambda: np.zeros(n, dtype=np.float64)  # noqa: E731
    i8 = lambda: np.zeros(n, dtype=np.int64)  # noqa: E731
    status, col_status = i8(), i8()
    dec_cap, dec_b, dec_step = f8(), i8(), f8()
    pre_cap, pre_rho, pre_s = f8(), f8(), f8()
    col_cap, col_b, col_c, col_step = f8(), i8(), i8(), f8()
    dm = np.array([[demand.mean_prompt_tokens, demand.mean_output_tokens, demand.latency_prompt_tokens,
                    demand.latency_output_tokens, demand.ttft_s, demand.tpot_s, options.tpot_margin,
                    options.ttft_tail, demand.work_prompt_tokens, 1.0 if options.queueing else 0.0]],
                  dtype=np.float64)
    if n and not ext:
        K.instances_nb(params, np.arange(n, dtype=np.int64), dm, np.zeros(n, dtype=np.int64),
                       np.zeros(n, dtype=np.float64), np.full(n, int(max_batch), dtype=np.int64),
                       np.asarray(options.chunk_tokens, dtype=np.float64),
                       status, dec_cap, dec_b, dec_step, pre_cap, pre_rho, pre_s,
                       col_status, col_cap, col_b, col_c, col_step)
    elif n:
        K.instances_spec_nb(params, pidx, dpidx, dm, np.zeros(n, dtype=np.int64),
                            np.zeros(n, dtype=np.float64), np.full(n, int(max_batch), dtype=np.int64),
                            np.asarray(options.chunk_tokens, dtype=np.float64), gam, tpr,
                            np.full(n, float(options.prefix_hit_fraction), dtype=np.float64),
                            status, dec_cap, dec_b, dec_step, pre_cap, pre_rho, pre_s,
                            col_status, col_cap, col_b, col_c, col_step)
    refused = np.array([r[4] is not None for r in rows], dtype=bool)
    status[refused] = REFUSED
    col_status[refused] = REFUSED
    budget = (params[pidx] if ext else params)[:, P_KV_BUDGET_TOKENS] if n else f8()
    cols = dict(gpu=[r[0].name for r in rows], precision=[r[1].name for r in rows], tp=[r[2] for r in rows],
                layout=[r[3] for r in rows])
    if options.spec_alpha is not None:
        cols.update(spec_gamma=gam.astype(np.int64), spec_tokens_per_round=tpr)
    cols.update(
        refusal=[r[4] or "" for r in rows],
        price_usd_per_gpu_hour=[r[0].price_usd_per_hour for r in rows],
        status=status, kv_budget_tokens=np.where(refused, np.nan, budget),
        decode_capacity_req_per_s=dec_cap, decode_batch=dec_b, decode_step_s=dec_step,
        prefill_capacity_req_per_s=pre_cap, prefill_utilisation=pre_rho, prefill_step_s=pre_s,
        colocated_status=col_status, colocated_capacity_req_per_s=col_cap, colocated_batch=col_b,
        chunk_tokens=col_c, colocated_step_s=col_step)
    import pandas as pd
    return pd.DataFrame(cols)


def _extend_grid(model: Model, catalog: Catalog, options: ScreenOptions, rows: list, params: np.ndarray):
    """The grid with speculative decoding: each row once without it and once per gamma of ``spec_gammas``.

    Returns ``(rows, params, pidx, dpidx, gamma, tokens_per_round)``: rows ``(gpu, precision, tp,
    layout, refusal)`` (a refusal may now be the draft's), the stacked parameter rows (plain
    targets, then per configuration the target beside its draft and the draft,
    :func:`fastsim.specdec.spec_step_params`, then one refused row), and per grid row the target
    and draft parameter rows, gamma (0 = no speculation) and the expected tokens per round (1).
    Without ``spec_alpha`` every row keeps gamma 0 (a prefix-cache-only screen)."""
    spec = options.spec_for(model, catalog)
    gammas = (0,) + tuple(dict.fromkeys(int(g) for g in options.spec_gammas)) if spec else (0,)
    n0 = len(rows)
    extra = []
    any_refused = False
    out_rows, pidx, dpidx, gam, tpr = [], [], [], [], []
    for i, (g, pr, tp, lay, why) in enumerate(rows):
        pair = None
        swhy = None
        if spec is not None and why is None:
            dp, ep = layout_degrees(lay, tp)
            swhy = spec_refusal(model, spec, g, tp, dp, ep, catalog)
            if swhy is None:
                p_t, p_d = spec_step_params(model, g, pr, tp, options.constants, spec, dp=dp, ep=ep, catalog=catalog)
                pair = n0 + len(extra)
                extra.extend((p_t, p_d))
        for gm in gammas:
            if gm == 0:
                out_rows.append((g, pr, tp, lay, why))
                pidx.append(i)
                dpidx.append(i)
                gam.append(0.0)
                tpr.append(1.0)
                continue
            r_why = why or swhy
            if r_why is not None:
                any_refused = True
                out_rows.append((g, pr, tp, lay, r_why))
                pidx.append(-1)
                dpidx.append(-1)
            else:
                out_rows.append((g, pr, tp, lay, None))
                pidx.append(pair)
                dpidx.append(pair + 1)
            gam.append(float(gm))
            tpr.append(expected_tokens_per_round(spec.alpha, gm))
    stack = [params] + ([np.stack(extra)] if extra else [])
    if any_refused:
        r = np.ones((1, N_PARAMS))
        r[0, P_KV_BUDGET_TOKENS] = -1.0
        stack.append(r)
    allp = np.ascontiguousarray(np.concatenate(stack, axis=0))
    last = allp.shape[0] - 1
    pidx = np.array([last if k < 0 else k for k in pidx], dtype=np.int64)
    dpidx = np.array([last if k < 0 else k for k in dpidx], dtype=np.int64)
    return out_rows, allp, pidx, dpidx, np.array(gam, dtype=np.float64), np.array(tpr, dtype=np.float64)


def screen(model: Model | str, demand: Demand, *, catalog: Catalog | None = None,
           options: ScreenOptions = ScreenOptions()) -> pd.DataFrame:
    """Evaluate the whole grid analytically and rank it by integer cost.

    Parameters
    ----------
    model : Model or str
        A model or a catalog name / ``config.json`` path.
    demand : Demand
        Rate, SLOs and length statistics; truncated at the model's context
        (:meth:`Demand.within_context`: the simulator serves only requests whose prompt + output
        fit it) and sized for :attr:`Demand.served_rate_req_per_s`.
    catalog : Catalog, optional
        Defaults to the built-in catalog.
    options : ScreenOptions

    Returns
    -------
    pandas.DataFrame
        One row per grid point (colocated: one per GPU x precision x TP; disaggregated: one per
        GPU x precision, TPs chosen per DistServe), sorted feasible first, then by integer cost,
        efficiency cost and GPU count. Columns: ``gpu, precision, mode, tp, instances, prefill_tp,
        prefill_instances, decode_tp, decode_instances, gpus, chunk_tokens, batch,
        instance_capacity_req_per_s, capacity_req_per_s, usd_per_million_output_tokens,
        efficiency_usd_per_million_output_tokens, feasible, reason, plan`` (a :class:`Plan`, or
        None when infeasible), and ``layout``. With ``options.spec_alpha`` every point appears
        once per ``spec_gamma`` (0 and each of ``options.spec_gammas``; disaggregated points
        then per GPU x precision x layout x gamma) with the columns ``spec_gamma, spec_alpha,
        spec_draft``; with ``options.prefix_hit_fraction`` > 0 a ``prefix_hit_fraction`` column.
        Infeasible points are rows with ``feasible=False`` and a reason, never exceptions: a
        configuration that needs more than :data:`MAX_INSTANCES` instances of a kind to carry
        the rate is one; a GPU x precision x layout whose every TP the model refuses is one
        disaggregated row with TPs 0 and the refusal. On an MoE model a plan whose TPs are all
        1 is listed once, under ``tp`` when the grid's layouts have it, else under the first of
        them (at TP 1 every layout gives EP 1 and DP 1, :func:`fastsim.stepmodel.layout_degrees`).
        A screen without rows still has every column with its dtype.

    Raises
    ------
    FastsimInputError
        Unknown names in the grid or the model, no selected GPU with a peak for any selected
        precision, or a speculative-decoding draft that is unknown or has another vocabulary
        than the model (:func:`fastsim.specdec.spec_decoding`).
    """
    catalog = catalog or default_catalog()
    if isinstance(model, str):
        model = catalog.model(model)
    demand = demand.within_context(model.max_context_tokens)
    t = instance_table(model, demand, catalog=catalog, options=options)
    rows = [(catalog.gpu(g), catalog.precision(p), int(tp), lay)
            for g, p, tp, lay in zip(t.gpu, t.precision, t.tp, t.layout)]
    refusal = t.refusal.tolist()
    status, col_status = t.status.to_numpy(), t.colocated_status.to_numpy()
    dec_cap, dec_b = t.decode_capacity_req_per_s.to_numpy(), t.decode_batch.to_numpy()
    pre_cap = t.prefill_capacity_req_per_s.to_numpy()
    col_cap, col_b, col_c = (t.colocated_capacity_req_per_s.to_numpy(), t.colocated_batch.to_numpy(),
                             t.chunk_tokens.to_numpy())
    rate, mean_o = demand.served_rate_req_per_s, demand.mean_output_tokens
    spec = options.spec_for(model, catalog)
    gam = t.spec_gamma.to_numpy() if spec is not None else np.zeros(len(t), dtype=np.int64)
    hit = float(options.prefix_hit_fraction)

    def plan_extra(i):
        """Speculative-decoding and prefix-cache fields of the plan of table row i (none by default)."""
        e = {}
        if spec is not None:
            e.update(spec_gamma=int(gam[i]), spec_alpha=spec.alpha, spec_draft=spec.draft)
        if hit:
            e["prefix_hit_fraction"] = hit
        return e

    out = []
    if "colocated" in options.modes:
        inst = instances_needed(rate, col_cap)
        for i, (g, pr, tp, lay) in enumerate(rows):
            ok = col_status[i] == K.OK
            reason = refusal[i] or _REASONS[int(col_status[i])]
            if ok and inst[i] > MAX_INSTANCES:
                ok, reason = False, _too_many(rate)
            plan = Plan(model=model.name, gpu=g.name, precision=pr.name, mode="colocated", tp=tp,
                        instances=int(inst[i]), chunk_tokens=int(col_c[i]), batch=int(col_b[i]),
                        instance_capacity_req_per_s=float(col_cap[i]),
                        price_usd_per_gpu_hour=g.price_usd_per_hour, layout=lay, **plan_extra(i)) if ok else None
            out.append(dict(
                gpu=g.name, precision=pr.name, mode="colocated", layout=lay, **plan_extra(i), tp=tp,
                instances=int(inst[i]) if ok else 0,
                prefill_tp=0, prefill_instances=0, decode_tp=0, decode_instances=0,
                gpus=plan.gpus if ok else 0, chunk_tokens=int(col_c[i]), batch=int(col_b[i]),
                instance_capacity_req_per_s=float(col_cap[i]),
                capacity_req_per_s=plan.capacity_req_per_s if ok else 0.0,
                usd_per_million_output_tokens=float(cost_usd_per_million_output_tokens(
                    plan.gpus, g.price_usd_per_hour, rate, mean_o)) if ok else np.inf,
                efficiency_usd_per_million_output_tokens=float(tp * g.price_usd_per_hour / (
                    col_cap[i] * mean_o * 3600.0) * 1e6) if ok else np.inf,
                feasible=bool(ok), reason=reason, plan=plan))
    if "disaggregated" in options.modes:
        groups: dict = {}
        refused_groups: dict = {}
        for i, (g, pr, tp, lay) in enumerate(rows):
            key = (g.name, pr.name, lay, int(gam[i]))
            if not refusal[i]:
                groups.setdefault(key, []).append(i)
            else:
                refused_groups.setdefault(key, i)
        for (gname, pname, lay, _), idx in groups.items():
            g = catalog.gpu(gname)
            idx = np.asarray(idx)
            tps = np.array([rows[i][2] for i in idx], dtype=np.float64)
            # DistServe Algorithm 1: each side picks the TP with the highest per-GPU throughput
            per_gpu_p = pre_cap[idx] / tps
            per_gpu_d = dec_cap[idx] / tps
            ip, idd = idx[int(np.argmax(per_gpu_p))], idx[int(np.argmax(per_gpu_d))]
            ok = pre_cap[ip] > 0 and dec_cap[idd] > 0
            reason = ""
            if not ok:
                reason = ("prefill: " + (_REASONS[int(status[ip])] or "the TTFT target leaves no room for queueing")
                          if pre_cap[ip] <= 0 else "decode: " + (_REASONS[int(status[idd])] or _REASONS[K.TPOT_UNREACHABLE]))
            n_p = int(instances_needed(rate, pre_cap[ip])) if ok else 0
            n_d = int(instances_needed(rate, dec_cap[idd])) if ok else 0
            if ok and max(n_p, n_d) > MAX_INSTANCES:
                side = "prefill" if n_p > MAX_INSTANCES else "decode"
                ok, reason, n_p, n_d = False, f"{side}: {_too_many(rate)}", 0, 0
            tp_p, tp_d = rows[ip][2], rows[idd][2]
            plan = Plan(model=model.name, gpu=gname, precision=pname, mode="disaggregated", tp=tp_d,
                        instances=n_d, prefill_tp=tp_p, prefill_instances=n_p, decode_tp=tp_d,
                        decode_instances=n_d, batch=int(dec_b[idd]),
                        prefill_capacity_req_per_s=float(pre_cap[ip]),
                        decode_capacity_req_per_s=float(dec_cap[idd]),
                        instance_capacity_req_per_s=float(dec_cap[idd]),
                        price_usd_per_gpu_hour=g.price_usd_per_hour, layout=lay, **plan_extra(idd)) if ok else None
            eff = (tp_p / pre_cap[ip] + tp_d / dec_cap[idd]) * g.price_usd_per_hour / (mean_o * 3600.0) * 1e6 \
                if ok else np.inf
            out.append(dict(
                gpu=gname, precision=pname, mode="disaggregated", layout=lay, **plan_extra(idd), tp=tp_d, instances=n_d,
                prefill_tp=tp_p, prefill_instances=n_p, decode_tp=tp_d, decode_instances=n_d,
                gpus=plan.gpus if ok else 0, chunk_tokens=0, batch=int(dec_b[idd]),
                instance_capacity_req_per_s=float(dec_cap[idd]),
                capacity_req_per_s=plan.capacity_req_per_s if ok else 0.0,
                usd_per_million_output_tokens=float(cost_usd_per_million_output_tokens(
                    plan.gpus, g.price_usd_per_hour, rate, mean_o)) if ok else np.inf,
                efficiency_usd_per_million_output_tokens=float(eff), feasible=bool(ok), reason=reason,
                plan=plan))
        for key, i in refused_groups.items():
            if key in groups:
                continue
            # every TP of this GPU x precision x layout is refused: no TP pair to pick, one refused row
            gname, pname, lay, _ = key
            out.append(dict(
                gpu=gname, precision=pname, mode="disaggregated", layout=lay, **plan_extra(i), tp=0, instances=0,
                prefill_tp=0, prefill_instances=0, decode_tp=0, decode_instances=0, gpus=0, chunk_tokens=0, batch=0,
                instance_capacity_req_per_s=0.0, capacity_req_per_s=0.0, usd_per_million_output_tokens=np.inf,
                efficiency_usd_per_million_output_tokens=np.inf, feasible=False, reason=refusal[i], plan=None))
        if options.heterogeneous:
            out += _heterogeneous_rows(model, catalog, groups, rows, pre_cap, dec_cap, dec_b, rate, mean_o, plan_extra)
    if model.is_moe:
        out = _one_row_per_plan(out, options.layouts_for(model))
    import pandas as pd
    df = pd.DataFrame(out) if out else _empty_screen(spec is not None, bool(hit), options.heterogeneous)
    longest = demand.latency_prompt_tokens + demand.latency_output_tokens
    too_long = ""
    if longest > model.max_context_tokens:
        too_long = (f"the latency-quantile request ({longest:,.0f} tokens of prompt + output) is longer than "
                    f"{model.name}'s context of {model.max_context_tokens:,} tokens")
    elif demand.served_fraction < 0.9:
        too_long = (f"only {demand.served_fraction:.1%} of the requests fit {model.name}'s context of "
                    f"{model.max_context_tokens:,} tokens (prompt + output); the rest are rejected, so a P90 "
                    "SLO cannot hold")
    if len(df) and too_long:
        # more than a tenth of the requests cannot be served by any plan: a P90 SLO cannot hold
        df["feasible"] = False
        df["reason"] = too_long
        df["plan"] = None
        for col in ("usd_per_million_output_tokens", "efficiency_usd_per_million_output_tokens"):
            df[col] = np.inf
    if len(df):
        df = df.sort_values(["feasible", "usd_per_million_output_tokens",
                             "efficiency_usd_per_million_output_tokens", "gpus"],
                            ascending=[False, True, True, True], kind="stable").reset_index(drop=True)
    return df


def _too_many(rate: float) -> str:
    """The screen's reason for a configuration that needs more than :data:`MAX_INSTANCES` instances of a kind."""
    return (f"needs more than {MAX_INSTANCES:,} instances to carry {rate:,.4g} req/s ({MAX_INSTANCES:,} is the most "
            "a plan may have of a kind)")


#: Columns of :func:`screen`, in order; ``spec_*`` after ``layout`` with speculative decoding,
#: ``prefix_hit_fraction`` after them with a prefix-cache hit fraction, ``prefill_gpu`` and
#: ``prefill_precision`` last when heterogeneous plans were screened (and found).
_SCREEN_COLUMNS = (("gpu", "str"), ("precision", "str"), ("mode", "str"), ("layout", "str"),
                   ("tp", "int64"), ("instances", "int64"), ("prefill_tp", "int64"),
                   ("prefill_instances", "int64"), ("decode_tp", "int64"), ("decode_instances", "int64"),
                   ("gpus", "int64"), ("chunk_tokens", "int64"), ("batch", "int64"),
                   ("instance_capacity_req_per_s", "float64"), ("capacity_req_per_s", "float64"),
                   ("usd_per_million_output_tokens", "float64"),
                   ("efficiency_usd_per_million_output_tokens", "float64"), ("feasible", "bool"),
                   ("reason", "str"), ("plan", "object"))


def _empty_screen(spec: bool, prefix: bool, heterogeneous: bool):
    """A screen without rows that still has every column, with its dtype (nothing downstream breaks on it)."""
    import pandas as pd
    cols = list(_SCREEN_COLUMNS)
    extra = ([("spec_gamma", "int64"), ("spec_alpha", "float64"), ("spec_draft", "str")] if spec else []) \
        + ([("prefix_hit_fraction", "float64")] if prefix else [])
    cols[4:4] = extra
    if heterogeneous:
        cols += [("prefill_gpu", "str"), ("prefill_precision", "str")]
    return pd.DataFrame({c: pd.Series([], dtype=str if t == "str" else t) for c, t in cols})


def _one_row_per_plan(out: list, layouts: tuple) -> list:
    """The screen rows of an MoE model with each plan once: an EP layout at TP 1 is the plain TP1 plan.

    At one GPU per instance ``tp``, ``tp+ep`` and ``dp+ep`` all give EP 1 and DP 1
    (:func:`fastsim.stepmodel.layout_degrees`): a row whose TPs are all 1 (``tp`` of a colocated
    row, both sides of a disaggregated one) is listed under ``tp`` when ``layouts`` has it, else
    under the first of ``layouts`` (as :mod:`fastsim.sweep` lists it), and rows that are then
    alike are kept once (the first).
    """
    listed = "tp" if "tp" in layouts else layouts[0]
    seen = set()
    kept = []
    for r in out:
        tps = (r["tp"],) if r["mode"] == "colocated" else (r["prefill_tp"], r["decode_tp"])
        if r["layout"] != listed and all(t == 1 for t in tps):
            r = dict(r, layout=listed)
            if r["plan"] is not None:
                r["plan"] = replace(r["plan"], layout=listed)
        key = tuple((k, v) for k, v in r.items() if k != "plan") + (r["plan"],)
        if key not in seen:
            seen.add(key)
            kept.append(r)
    return kept


def _heterogeneous_rows(model, catalog, groups, rows, pre_cap, dec_cap, dec_b, rate, mean_o, plan_extra) -> list:
    """Screen rows of disaggregated plans whose two sides differ in GPU or precision (``ScreenOptions.heterogeneous``).

    ``groups`` maps ``(gpu, precision, layout, gamma)`` to the instance rows of that GPU and
    precision; each side picks, within its group, the TP with the highest per-GPU throughput
    (DistServe's Algorithm 1), without speculative decoding, and is priced at its own GPU's price.
    """
    best_p, best_d = {}, {}
    for (gname, pname, lay, gam), idx in groups.items():
        if gam:
            continue
        idx = np.asarray(idx)
        tps = np.array([rows[i][2] for i in idx], dtype=np.float64)
        best_p[(gname, pname, lay)] = idx[int(np.argmax(pre_cap[idx] / tps))]
        best_d[(gname, pname, lay)] = idx[int(np.argmax(dec_cap[idx] / tps))]
    out = []
    for (gp, pp, lay), ip in best_p.items():
        for (gd, pd_, lay_d), idd in best_d.items():
            if lay_d != lay or (gp, pp) == (gd, pd_) or not (pre_cap[ip] > 0 and dec_cap[idd] > 0):
                continue
            price_p, price_d = catalog.gpu(gp).price_usd_per_hour, catalog.gpu(gd).price_usd_per_hour
            n_p = int(instances_needed(rate, pre_cap[ip]))
            n_d = int(instances_needed(rate, dec_cap[idd]))
            if max(n_p, n_d) > MAX_INSTANCES:     # infeasible (its homogeneous rows give the reason)
                continue
            tp_p, tp_d = rows[ip][2], rows[idd][2]
            plan = Plan(model=model.name, gpu=gd, precision=pd_, mode="disaggregated", tp=tp_d, instances=n_d,
                        prefill_tp=tp_p, prefill_instances=n_p, decode_tp=tp_d, decode_instances=n_d,
                        batch=int(dec_b[idd]), prefill_capacity_req_per_s=float(pre_cap[ip]),
                        decode_capacity_req_per_s=float(dec_cap[idd]), instance_capacity_req_per_s=float(dec_cap[idd]),
                        price_usd_per_gpu_hour=price_d, layout=lay, **plan_extra(idd),
                        prefill_gpu=gp, prefill_precision=pp, prefill_price_usd_per_gpu_hour=price_p)
            eff = (tp_p * price_p / pre_cap[ip] + tp_d * price_d / dec_cap[idd]) / (mean_o * 3600.0) * 1e6
            out.append(dict(
                gpu=gd, precision=pd_, mode="disaggregated", layout=lay, **plan_extra(idd), tp=tp_d, instances=n_d,
                prefill_tp=tp_p, prefill_instances=n_p, decode_tp=tp_d, decode_instances=n_d, gpus=plan.gpus,
                chunk_tokens=0, batch=int(dec_b[idd]), instance_capacity_req_per_s=float(dec_cap[idd]),
                capacity_req_per_s=plan.capacity_req_per_s,
                usd_per_million_output_tokens=float(cost_usd_per_million_output_tokens(1, plan.price_usd_per_hour,
                                                                                       rate, mean_o)),
                efficiency_usd_per_million_output_tokens=float(eff), feasible=True, reason="", plan=plan,
                prefill_gpu=gp, prefill_precision=pp))
    return out


def plan_for(model: Model | str, demand: Demand, *, gpu: str, precision: str, mode: str = "colocated",
             tp: int = 1, instances: int | None = None, prefill_tp: int | None = None,
             decode_tp: int | None = None, prefill_instances: int | None = None,
             decode_instances: int | None = None, chunk_tokens: int | None = None,
             catalog: Catalog | None = None, options: ScreenOptions = ScreenOptions(),
             layout: str = "tp", spec_gamma: int = 0, max_batch: int = 0,
             prefill_gpu: str | None = None, prefill_precision: str | None = None) -> Plan:
    """A :class:`Plan` for a configuration the user names, with its analytic capacities filled in.

    Instance counts left as None are sized by the analytic screen for
    ``demand.served_rate_req_per_s`` (at least one): the offered rate times the share of the
    requests that fit the model's context; the length figures are those of the requests served
    (:meth:`Demand.within_context`). ``chunk_tokens`` None takes the screen's best chunk (512 when the colocated
    configuration is analytically infeasible). The capacities come from
    :func:`instance_table` (SPEC §5): a given ``chunk_tokens`` is recorded in the plan but the
    colocated capacity is the one of the best chunk in ``options.chunk_tokens``.

    Parameters
    ----------
    model : Model or str
        A model or a catalog name / ``config.json`` path.
    demand : Demand
        Rate (sizes the instance counts left as None), SLOs and length statistics.
    gpu, precision : str
        Catalog names (of the decode side of a disaggregated plan).
    mode : str
        ``"colocated"`` or ``"disaggregated"``.
    tp : int
        TP of a colocated instance; default TP of both sides of a disaggregated plan.
    instances : int, optional
        Colocated instances, 1 to :data:`MAX_INSTANCES`.
    prefill_tp, decode_tp : int, optional
        TP of each side of a disaggregated plan (default ``tp``).
    prefill_instances, decode_instances : int, optional
        Instances of each side of a disaggregated plan, 1 to :data:`MAX_INSTANCES` each.
    chunk_tokens : int, optional
        Prefill chunk of a colocated instance (tokens).
    catalog : Catalog, optional
        Defaults to the built-in catalog.
    options : ScreenOptions
        Screen constants; its GPU, precision, TP and layout lists are replaced by the named ones.
    layout : str, default "tp"
        Instance layout (:data:`fastsim.stepmodel.LAYOUTS`) of every instance of the plan.
    spec_gamma : int, default 0
        Draft tokens per speculative-decoding round (0: none); > 0 needs ``options.spec_alpha``
        (and takes ``options.spec_draft``).
    max_batch : int, default 0
        Most requests per (decode) instance (:attr:`Plan.max_batch`, applied by the simulator
        and by the analytic capacities); 0: no cap beyond the KV budget.
    prefill_gpu, prefill_precision : str, optional
        The prefill side of a heterogeneous disaggregated plan (catalog names; each defaults to
        the decode side's ``gpu`` / ``precision``); its GPUs are priced at their own price.

    Returns
    -------
    Plan
        Analytically infeasible configurations are returned too, with capacity 0 (and one
        instance unless given): the simulator decides.

    Raises
    ------
    FastsimInputError
        Unknown names, TP not a power of two from 1 to 64, a mode other than colocated /
        disaggregated, instance counts not integers from 1 to :data:`MAX_INSTANCES`, a chunk
        not an integer >= 1, ``max_batch`` not an integer >= 0, a GPU without a peak for the
        precision, a layout the model refuses (e.g. a TP that does not divide its attention
        heads, SPEC §10), ``spec_gamma`` not an integer >= 0 or > 0 without
        ``options.spec_alpha``, a draft that cannot share the layout, a prefill GPU or
        precision on a colocated plan, or a count left to the sizing that would exceed
        :data:`MAX_INSTANCES` at the demand's rate (field ``rate_req_per_s``).
    """
    catalog = catalog or default_catalog()
    if isinstance(model, str):
        model = catalog.model(model)
    if mode not in ("colocated", "disaggregated"):
        raise FastsimInputError("mode", mode, "colocated or disaggregated")
    for name, v in (("instances", instances), ("prefill_instances", prefill_instances),
                    ("decode_instances", decode_instances)):
        if v is not None and (isinstance(v, bool) or int(v) != v or not 1 <= v <= MAX_INSTANCES):
            raise FastsimInputError(name, v, f"an integer from 1 to {MAX_INSTANCES:,} (MAX_INSTANCES)")
    if chunk_tokens is not None and (int(chunk_tokens) != chunk_tokens or chunk_tokens < 1):
        raise FastsimInputError("chunk_tokens", chunk_tokens, "an integer >= 1")
    if isinstance(max_batch, (bool, np.bool_)) or not isinstance(max_batch, (int, np.integer)) or max_batch < 0:
        raise FastsimInputError("max_batch", max_batch, "an integer >= 0 (requests per instance; 0 = no cap)")
    g, pr = catalog.gpu(gpu), catalog.precision(precision)
    gp = catalog.gpu(prefill_gpu) if prefill_gpu is not None else g
    prp = catalog.precision(prefill_precision) if prefill_precision is not None else pr
    hetero = (gp.name, prp.name) != (g.name, pr.name)
    for name, gg, pp in (("precision", g, pr), ("prefill_precision", gp, prp)):
        if pp.flops_key not in gg.peak_flops_per_s:
            raise FastsimInputError(name, pp.name, f"a precision {gg.name} has a peak for: "
                                    + ", ".join(sorted(gg.peak_flops_per_s)))
    if hetero and mode != "disaggregated":
        raise FastsimInputError("prefill_gpu" if gp.name != g.name else "prefill_precision",
                                gp.name if gp.name != g.name else prp.name,
                                "None for a colocated plan (a prefill side of its own is disaggregated)")
    tps = tuple(sorted({require_tp("tp", tp), require_tp("prefill_tp", prefill_tp or tp),
                        require_tp("decode_tp", decode_tp or tp)}))
    for gg in ((g,) if gp.name == g.name else (g, gp)):
        for t_ in tps:
            why = layout_refusal(model, gg, layout, t_)
            if why:
                raise FastsimInputError("tp" if layout == "tp" else "layout", t_ if layout == "tp" else layout, why)
    if isinstance(spec_gamma, bool) or not isinstance(spec_gamma, (int, np.integer)) or spec_gamma < 0:
        raise FastsimInputError("spec_gamma", spec_gamma, "an integer >= 0 (draft tokens per round; 0 = none)")
    if spec_gamma and options.spec_alpha is None:
        raise FastsimInputError("spec_gamma", spec_gamma, "0 unless options.spec_alpha (the acceptance) is given")
    opts = replace(options, gpus=tuple(dict.fromkeys((g.name, gp.name))),
                   precisions=tuple(dict.fromkeys((pr.name, prp.name))), tps=tps, layouts=(layout,),
                   spec_gammas=(int(spec_gamma),) if spec_gamma else options.spec_gammas)
    demand = demand.within_context(model.max_context_tokens)
    t = instance_table(model, demand, catalog=catalog, options=opts, max_batch=int(max_batch))
    extra = {}
    if options.spec_alpha is not None:
        t = t[t.spec_gamma == int(spec_gamma)]
        spec = options.spec_for(model, catalog)
        extra.update(spec_gamma=int(spec_gamma), spec_alpha=spec.alpha, spec_draft=spec.draft)
        why = next((r for r in t.refusal if r), "")
        if spec_gamma and why:
            raise FastsimInputError("spec_draft", spec.draft, why)
    if options.prefix_hit_fraction:
        extra["prefix_hit_fraction"] = float(options.prefix_hit_fraction)
    if max_batch:
        extra["max_batch"] = int(max_batch)
    t_p = t[(t.gpu == gp.name) & (t.precision == prp.name)].set_index("tp")
    t = t[(t.gpu == g.name) & (t.precision == pr.name)].set_index("tp")
    rate = demand.served_rate_req_per_s

    def sized(name, n, cap, what):
        if n is not None:
            return int(n)
        n = max(int(instances_needed(rate, cap)), 1)
        if n > MAX_INSTANCES:
            raise FastsimInputError("rate_req_per_s", demand.rate_req_per_s, f"a rate that at most {MAX_INSTANCES:,} instances of "
                                    f"{what} carry ({cap:,.4g} req/s each), or name {name}")
        return n

    if mode == "colocated":
        row = t.loc[tp]
        cap = float(row.colocated_capacity_req_per_s)
        n = sized("the instances", instances, cap, f"{g.name} {pr.name} {instance_label(layout, int(tp))}")
        return Plan(model=model.name, gpu=g.name, precision=pr.name, mode="colocated", tp=int(tp), instances=n,
                    chunk_tokens=int(chunk_tokens or row.chunk_tokens or 512), batch=int(row.colocated_batch),
                    instance_capacity_req_per_s=cap, price_usd_per_gpu_hour=g.price_usd_per_hour, layout=layout,
                    **extra)
    tp_p, tp_d = int(prefill_tp or tp), int(decode_tp or tp)
    cap_p = float(t_p.loc[tp_p].prefill_capacity_req_per_s)
    cap_d = float(t.loc[tp_d].decode_capacity_req_per_s)
    n_p = sized("the prefill instances", prefill_instances, cap_p,
                f"the prefill side ({gp.name} {prp.name} {instance_label(layout, tp_p)})")
    n_d = sized("the decode instances", decode_instances, cap_d,
                f"the decode side ({g.name} {pr.name} {instance_label(layout, tp_d)})")
    if hetero:
        extra.update(prefill_gpu=gp.name, prefill_precision=prp.name,
                     prefill_price_usd_per_gpu_hour=gp.price_usd_per_hour)
    return Plan(model=model.name, gpu=g.name, precision=pr.name, mode="disaggregated", tp=tp_d, instances=n_d,
                prefill_tp=tp_p, prefill_instances=n_p, decode_tp=tp_d, decode_instances=n_d,
                batch=int(t.loc[tp_d].decode_batch), prefill_capacity_req_per_s=cap_p,
                decode_capacity_req_per_s=cap_d, instance_capacity_req_per_s=cap_d,
                price_usd_per_gpu_hour=g.price_usd_per_hour, layout=layout, **extra)
