"""Each measurement run the way its benchmark ran, on its engine's policy (``fastsim validate``).

- ``offline``: ``num_requests`` requests of fixed lengths, all arriving at t = 0, simulated until
  the last finishes (trtllm-bench throughput, ``vllm bench throughput``, MLPerf Offline); a
  TensorRT-LLM row publishing neither max_num_tokens nor max_batch_size runs with the settings
  trtllm-bench tunes for its lengths (:func:`fastsim.validate.trtllm_bench.bench_settings`);
- ``online``: ``num_requests`` Poisson arrivals at ``rate_req_per_s`` (seed :data:`ONLINE_SEED`;
  a row without ``num_requests`` is a steady stage of a longer run and sends
  ``rate x`` :data:`STAGE_S` requests), simulated until every request finishes;
- ``trace``: the JSONL trace's arrivals and lengths (:func:`fastsim.workload.read_trace`, Mooncake
  format, ms timestamps), simulated until every request finishes;
- ``step``: one decode step of ``batch`` requests at ``context_tokens`` each
  (:func:`fastsim.stepmodel.step_time`, SPEC §3).

The first three run :func:`fastsim.sim.simulate_drained` on the policy named by the engine
(:data:`ENGINE_POLICY`; no other policy stands in for a missing one) with the row's deployment and
settings, and read the row's figure with :func:`fastsim.sim.benchmark_figures`. Rows that describe
the same run (the TTFT and the ITL of one benchmark) share one simulation. A row fastsim cannot
express gets ``predicted = None`` and its reason: pipeline parallelism under a policy that does not simulate it, a policy
this fastsim lacks, a model feature the step model does not have, a statistic the simulator does
not give (ITL percentiles), a vLLM run of the V0 engine (before v0.8.0: fastsim's ``vllm`` policy is
V1's; :func:`fastsim.engine_rules.vllm_v0_engine`), a deployment whose weights leave no KV, engine settings the engine
would not start with (:func:`fastsim.engine_rules.vllm_refusal`,
:func:`~fastsim.engine_rules.sglang_refusal`), requests the engine would refuse (prompt + output
above the model's context, which every run uses as its engine does: all or some of a row's
requests), requests the simulator rejects at arrival (more KV than the instance holds). A figure
over the accepted rest of a run is never given.
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from ..engine_rules import vllm_v0_engine
from ..errors import FastsimInputError

__all__ = ["RowResult", "validate", "run_measurements", "run_group", "run_key", "unexpressible", "engine_constants", "engine_kv_dtype", "ENGINE_POLICY", "ONLINE_SEED", "STAGE_S"]

#: The fastsim policy each engine's rows run on (:mod:`fastsim.sim.policy`).
ENGINE_POLICY = {"trtllm": "trtllm", "vllm": "vllm", "sglang": "sglang"}
#: The policies under which fastsim simulates a pipeline-parallel instance (fastsim.sim.PipelinePlan).
PP_POLICIES = ("lecture", "trtllm")
#: Seed of the Poisson arrivals of ``online`` rows (numpy ``default_rng``; every row the same).
ONLINE_SEED = 0
#: Duration (s) of an ``online`` row without ``num_requests``: ``ceil(rate x STAGE_S)`` requests
#: (at least 100), a steady stage long enough for its mean and tail to settle.
STAGE_S = 600.0


class RowResult(NamedTuple):
    """One measurement beside fastsim's figure.

    Attributes
    ----------
    measurement : Measurement
    predicted : float or None
        fastsim's figure in the row's unit; None where the row cannot be expressed.
    reason : str or None
        Why not (None when predicted).
    policy : str
        The policy simulated (``step`` rows: ``"step model"``).
    requests, rejected : int
        Requests of the run, and those rejected at arrival or, for a row whose requests the engine
        would refuse (above the model's context; not simulated), those refused (0 for ``step`` rows).
    notes : tuple of str
        What the run assumed beyond the row (the arrival seed, the request count of a stage).
    """

    measurement: object
    predicted: float | None
    reason: str | None
    policy: str
    requests: int = 0
    rejected: int = 0
    notes: tuple = ()

    @property
    def ratio(self) -> float | None:
        """``predicted / real`` (None where not predicted)."""
        return None if self.predicted is None else self.predicted / self.measurement.value

    def record(self) -> dict:
        """The row as a JSON-ready dict: ``id, engine, benchmark, metric, stat, real, predicted, ratio,
        abs_pct_error, reason, family, policy, requests, rejected, notes``.

        Returns
        -------
        dict
        """
        m = self.measurement
        r = self.ratio
        return {"id": m.id, "engine": m.engine, "benchmark": m.benchmark, "metric": m.metric, "stat": m.stat,
                "real": m.value, "predicted": self.predicted, "ratio": r,
                "abs_pct_error": None if r is None else abs(r - 1.0) * 100.0, "reason": self.reason,
                "family": m.family, "model": _short(m.model),
                "gpu": m.gpu, "precision": m.precision, "tp": m.tp, "pp": m.pp, "layout": m.layout,
                "instances": m.instances, "policy": self.policy, "requests": self.requests,
                "rejected": self.rejected, "notes": list(self.notes)}


def run_key(m) -> tuple:
    """The fields that decide a measurement's run (rows with equal keys share one simulation).

    A vLLM row's engine generation is one of them (:func:`fastsim.engine_rules.vllm_v0_engine`: a V0
    run is not expressed, a V1 run of the same settings is), and so is its runtime
    (:attr:`Measurement.runtime`: a calibration may hold other constants for TensorRT-LLM's TensorRT
    engine than for its PyTorch backend).

    Parameters
    ----------
    m : Measurement

    Returns
    -------
    tuple
    """
    return (m.engine, m.benchmark, m.model, m.gpu, m.precision, m.tp, m.pp, m.layout, m.instances, m.input_tokens,
            m.output_tokens, m.num_requests, m.rate_req_per_s, m.trace, m.max_batch, m.max_num_batched_tokens,
            m.max_num_seqs, m.shared_prefix_tokens, m.batch, m.context_tokens, m.kv_cache_dtype,
            vllm_v0_engine(m.engine_version) if m.engine == "vllm" else None, m.runtime)


class _ModelRefused(Exception):
    """A model whose config fastsim refuses (a feature the step model does not have)."""


class _EngineRefused(Exception):
    """Settings the engine itself would refuse to start with (:mod:`fastsim.engine_rules`)."""


#: How each engine names the longest prompt + output it serves, and where it refuses a longer request.
_CONTEXT_RULE = {
    "vllm": "vLLM runs with max_model_len at most the model's and refuses a longer prompt "
            "(vllm/v1/engine/processor.py, Processor._validate_model_input) or prompt plus max_tokens "
            "(vllm/entrypoints/openai/serving_engine.py, OpenAIServing._validate_input)",
    "sglang": "SGLang runs with context_length at most the model's and refuses a request above it "
              "(python/sglang/srt/managers/tokenizer_manager.py, TokenizerManager._validate_one_request)",
    "trtllm": "TensorRT-LLM refuses a request above the max_seq_len it was built for",
}


#: Where each engine's default KV-cache dtype is stated (``kv_cache_dtype`` left at ``auto``).
_KV_DEFAULT_SOURCE = {
    "vllm": "vLLM's --kv-cache-dtype auto keeps the KV cache in the model's activation dtype, BF16, whatever the "
            "weights' quantisation (vllm/config/cache.py, CacheConfig.cache_dtype)",
    "sglang": "SGLang's --kv-cache-dtype auto uses the model's dtype, BF16 (python/sglang/srt/server_args.py, "
              "ServerArgs.kv_cache_dtype)",
    "trtllm": "trtllm-bench sets the KV cache to FP8 for FP8 and NVFP4 checkpoints and leaves it at the model's "
              "dtype (BF16) for every other (tensorrt_llm/bench/benchmark/utils/general.py, _KV_CACHE_MAP)",
}


def engine_kv_dtype(engine: str, precision) -> str:
    """The KV-cache dtype an engine runs a precision with when the run leaves it at its default.

    Parameters
    ----------
    engine : str
        ``trtllm``, ``vllm`` or ``sglang``.
    precision : Precision
        The row's catalog precision (its ``flops_key`` and ``name`` tell the checkpoint's
        quantisation).

    Returns
    -------
    str
        ``"bf16"`` or ``"fp8"``: vLLM and SGLang keep BF16 (their ``auto`` is the model's dtype);
        TensorRT-LLM's trtllm-bench uses FP8 for FP8 and NVFP4 checkpoints and BF16 for the rest
        (MXFP4 among them). Sources: :data:`_KV_DEFAULT_SOURCE`.
    """
    if engine == "trtllm" and precision.name.upper() in ("FP8", "NVFP4"):
        return "fp8"
    return "bf16"


def _row_precision(m, pr):
    """The row's precision with the KV bytes its engine ran (the row's ``kv_cache_dtype``, else the default)."""
    from dataclasses import replace
    dtype = m.kv_cache_dtype or engine_kv_dtype(m.engine, pr)
    kv_bytes = 2 if dtype == "bf16" else 1
    return pr if pr.kv_bytes == kv_bytes else replace(pr, kv_bytes=kv_bytes)


def _engine_refusal(engine: str, pol, kv: float, dp: int) -> str | None:
    """The engine's reason for refusing to start with a row's settings (:func:`fastsim.engine_rules.vllm_refusal`,
    :func:`~fastsim.engine_rules.sglang_refusal`), or None; vLLM's limits and KV are those of one data-parallel rank."""
    from ..engine_rules import sglang_refusal, vllm_refusal
    if engine == "vllm" and pol.name == "vllm":
        return vllm_refusal(max_num_seqs=int(pol.max_num_seqs), max_num_batched_tokens=int(pol.max_num_batched_tokens),
                            kv_tokens=kv / dp)
    if engine == "sglang" and pol.name == "sglang":
        return sglang_refusal(max_running_requests=int(pol.max_num_seqs),
                              chunked_prefill_size=int(pol.max_num_batched_tokens), kv_tokens=kv)
    return None


def _short(model: str) -> str:
    """A model field as a row shows it: a config.json path by its directory's name."""
    return model.replace("\\", "/").rsplit("/", 2)[-2] if model.endswith(".json") else model


class _Setup(NamedTuple):
    model: object
    plan: object
    policy: object
    p: np.ndarray


def _setup(m, cat, constants, models, policy=None, overrides=None):
    """The model, simulator plan and engine policy of a row (FastsimInputError: not expressible)."""
    from ..layouts import layout_degrees
    from ..sim import ColocatedPlan
    from ..sim.policy import engine_policy
    from ..sim import PipelinePlan
    from ..stepmodel import P_KV_BUDGET_TOKENS, stage_params, step_params
    if m.model not in models:
        try:
            models[m.model] = cat.model(m.model)
        except FastsimInputError as exc:
            raise _ModelRefused(f"a model feature fastsim does not model ({_short(m.model)}: "
                                f"{str(exc).replace(m.model, _short(m.model))})") from None
    model = models[m.model]
    g, pr = cat.gpu(m.gpu), _row_precision(m, cat.precision(m.precision))
    dp, ep = layout_degrees(m.layout, m.tp)
    pp = m.pp or 1
    stages = stage_params(model, g, pr, m.tp, constants, pp=pp, dp=dp, ep=ep) if pp > 1 else None
    p = step_params(model, g, pr, m.tp, constants, dp=dp, ep=ep, pp=pp)
    kv = float(p[P_KV_BUDGET_TOKENS])
    if not kv >= 1:
        raise FastsimInputError("tp", m.tp, f"a deployment whose weights leave KV room: {model.name} in "
                                f"{pr.name} on {m.tp * pp} x {g.name} has none in fastsim's memory model")
    pol = None
    if m.benchmark != "step":
        over = {k: getattr(m, k) for k in ("max_num_batched_tokens", "max_num_seqs") if getattr(m, k) is not None}
        if (m.engine == "trtllm" and m.benchmark == "offline" and not over and m.input_tokens
                and m.output_tokens and (policy or ENGINE_POLICY[m.engine]) == "trtllm"):
            # trtllm-bench tunes both settings to the dataset when none are given (trtllm_bench.py)
            from .trtllm_bench import bench_settings
            bs, tokens = bench_settings(kv, m.input_tokens, m.output_tokens, m.pp or 1)
            over = {"max_num_seqs": bs, "max_num_batched_tokens": tokens}
        over.update(overrides or {})
        pol = engine_policy(policy or ENGINE_POLICY[m.engine], g.hbm_bytes, kv_budget_tokens=kv,
                            context_tokens=model.max_context_tokens, **over)
        why = _engine_refusal(m.engine, pol, kv, dp)
        if why is not None:
            from ..constants import ENGINE_NAMES
            raise _EngineRefused(f"{ENGINE_NAMES[m.engine]} would not start with these settings "
                                 f"(max_num_batched_tokens {pol.max_num_batched_tokens}, max_num_seqs "
                                 f"{pol.max_num_seqs}): {why}")
        if pol.name == "vllm" and dp > 1:
            # vLLM's data-parallel ranks are engines of their own, each with these limits (as fastsim.search
            # scales them: vllm/v1/engine/core.py, DPEngineCoreProc)
            pol = pol._replace(max_num_batched_tokens=pol.max_num_batched_tokens * dp,
                               max_num_seqs=pol.max_num_seqs * dp, source=pol.source + f"; x {dp} data-parallel ranks")
    chunk = m.max_num_batched_tokens or 8192
    if stages is not None:
        plan = PipelinePlan(stages, m.instances, chunk, m.max_batch or 0)
    else:
        plan = ColocatedPlan(p, m.instances, chunk, m.max_batch or 0)
    return _Setup(model, plan, pol, p)


def _workload(m):
    """(arrival_s, prompt_tokens, output_tokens, prefix, notes) of a row's benchmark."""
    notes = []
    if m.benchmark == "trace":
        from ..workload import read_trace
        wl = read_trace(m.trace, time_unit="ms")
        return wl.arrival_s - wl.arrival_s.min(), wl.prompt_tokens, wl.output_tokens, wl.prefix, notes
    if m.benchmark == "offline":
        n = m.num_requests
        arrival = np.zeros(n)
    else:
        n = m.num_requests
        if n is None:
            n = max(100, math.ceil(m.rate_req_per_s * STAGE_S))
            notes.append(f"no num_requests: a steady stage of {n:,} requests ({STAGE_S:g} s at the rate)")
        gaps = np.random.default_rng(ONLINE_SEED).exponential(1.0 / m.rate_req_per_s, n)
        arrival = np.cumsum(gaps) - gaps[0]
        notes.append(f"Poisson arrivals, seed {ONLINE_SEED}")
    prompt = np.full(n, m.input_tokens, dtype=np.int64)
    out = np.full(n, m.output_tokens, dtype=np.int64)
    prefix = None
    if m.shared_prefix_tokens:
        # the shared prompt's ids at the engine's KV block or page (vLLM 16 tokens, SGLang 1), so its
        # hits count in the engine's units; the ids cover the prompts (no request holds another's answer)
        from ..sim.policy import ENGINE_BLOCK_TOKENS
        from ..workload import PrefixBlocks
        bt = ENGINE_BLOCK_TOKENS[ENGINE_POLICY[m.engine]]
        k = m.shared_prefix_tokens // bt
        if k:
            ids = np.arange(k, dtype=np.int64)
            prefix = PrefixBlocks(bt, np.arange(n + 1, dtype=np.int64) * k, np.tile(ids, n))
    return arrival, prompt, out, prefix, notes


def _horizon_hint(s: _Setup, arrival, prompt, out) -> float:
    """A quick makespan estimate (s): the last arrival plus the work at the policy's batch (decode steps of
    the step model plus one compute-bound pass over every prompt), times 1.5 so a run rarely doubles."""
    from ..stepmodel import P_LAYERS, P_QDIM_DEC, decode_attn_flops, step_time, P_KV_BUDGET_TOKENS
    n = arrival.size
    p = s.p
    mean_p, mean_o = float(prompt.mean()), float(out.mean())
    seqs = s.policy.max_num_seqs if s.policy is not None else 256
    per_inst = max(1.0, n / s.plan.n_instances)
    b = max(1.0, min(seqs, per_inst, float(p[P_KV_BUDGET_TOKENS]) / max(mean_p + mean_o, 1.0)))
    ctx = mean_p + mean_o / 2.0
    t_dec = float(step_time(p, b, b * ctx, decode_attn_flops(p[P_LAYERS], p[P_QDIM_DEC], b * ctx), b))
    decode_s = per_inst * mean_o / b * t_dec
    t_pre = float(step_time(p, 8192.0, 0.0, 0.0, 1.0))
    prefill_s = per_inst * mean_p / 8192.0 * t_pre
    return 1.5 * (decode_s + prefill_s) + float(arrival.max()) + 1.0


def _step_figure(m, s: _Setup) -> float:
    from ..stepmodel import P_LAYERS, P_QDIM_DEC, decode_attn_flops, step_time
    kv = m.batch * float(s.model.kv_tokens_held(float(m.context_tokens)))
    return float(step_time(s.p, float(m.batch), kv, decode_attn_flops(s.p[P_LAYERS], s.p[P_QDIM_DEC], kv),
                           float(m.batch)))


def unexpressible(m) -> str | None:
    """Why a row cannot be run at all, before any setup or simulation (None: it can be tried).

    Parameters
    ----------
    m : Measurement

    Returns
    -------
    str or None
        The reason, worded for ``fastsim validate``'s table: pipeline parallelism under a policy
        without pipelines (:data:`PP_POLICIES`), a pipeline's step time, a vLLM run of the V0 engine
        (:func:`fastsim.engine_rules.vllm_v0_engine`), an engine whose policy this fastsim lacks, a
        step row's statistic other than the mean. A row that passes may still be refused at setup
        (a model feature, engine settings) or by its run (:func:`run_group`).
    """
    from ..sim.policy import POLICIES
    if m.pp > 1 and m.benchmark != "step" and ENGINE_POLICY[m.engine] not in PP_POLICIES:
        return (f"pipeline parallelism (pp {m.pp}) under the {ENGINE_POLICY[m.engine]} policy: fastsim simulates "
                f"pipelines under {' and '.join(PP_POLICIES)} only")
    if m.pp > 1 and m.benchmark == "step":
        return (f"a step time of a pipeline (pp {m.pp}): fastsim's step is one stage's, and the row does not say "
                "whether it gives a stage's step or the pipeline's round")
    if m.engine == "vllm" and vllm_v0_engine(m.engine_version):
        return (f"vLLM's V0 engine (engine_version '{m.engine_version}', before v0.8.0 made V1 the default): fastsim's "
                "vllm policy is the V1 scheduler (vllm/v1/core/sched/scheduler.py) with V1's defaults and host path; "
                "V0's scheduler, defaults and per-step host work are not modelled (fastsim.engine_rules.vllm_v0_engine)")
    if m.benchmark != "step" and ENGINE_POLICY[m.engine] not in POLICIES:
        return (f"no '{ENGINE_POLICY[m.engine]}' policy in this fastsim (policies: {', '.join(POLICIES)}); "
                "no other policy stands in for it")
    if m.benchmark == "step" and m.stat != "mean":
        return f"a step's {m.stat}: the step model gives one time per step"
    return None


def run_group(rows, cat, constants, *, models=None, policy=None, overrides=None) -> list:
    """Run the rows of one run key (one simulation, or one step time) and read each row's figure.

    Parameters
    ----------
    rows : list of Measurement
        Rows with equal :func:`run_key`.
    cat : Catalog
    constants : StepConstants or Calibration
    models : dict, optional
        A cache of resolved models by ``model`` field.
    policy : str, optional
        A policy name in place of the engine's (a diagnosis rerun; ``fastsim validate`` never sets it).
    overrides : dict, optional
        Engine-policy overrides (``max_num_seqs``, ``max_num_batched_tokens``: a diagnosis rerun).

    Returns
    -------
    list of RowResult
        In the order of ``rows``.
    """
    from ..sim import benchmark_figures, simulate_drained
    from ..stepmodel import P_KV_BUDGET_TOKENS
    models = {} if models is None else models
    m0 = rows[0]
    pol_name = "step model" if m0.benchmark == "step" else (policy or ENGINE_POLICY[m0.engine])
    why = None if policy else unexpressible(m0)
    if why:
        return [RowResult(m, None, why, pol_name) for m in rows]
    try:
        s = _setup(m0, cat, constants, models, policy, overrides)
    except (_ModelRefused, _EngineRefused) as exc:
        return [RowResult(m, None, str(exc), pol_name) for m in rows]
    except FastsimInputError as exc:
        return [RowResult(m, None, f"fastsim refuses this deployment: {exc}", pol_name) for m in rows]
    if m0.benchmark == "step":
        t = _step_figure(m0, s)
        return [RowResult(m, t, None, pol_name) for m in rows]
    arrival, prompt, out, prefix, notes = _workload(m0)
    # the engine serves at most the model's context: a longer request is refused, never served
    ctx = int(s.model.max_context_tokens)
    n = int(arrival.size)
    over = int(np.count_nonzero(prompt + out > ctx))
    if over:
        why = (f"requests the engine would refuse ({over:,} of {n:,} need more than the model's context of "
               f"{ctx:,} tokens, prompt + output; {_CONTEXT_RULE.get(m0.engine, 'the engine refuses them')})")
        return [RowResult(m, None, why, pol_name, n, over, tuple(notes)) for m in rows]
    try:
        res = simulate_drained(s.plan, arrival, prompt, out, horizon_hint_s=_horizon_hint(s, arrival, prompt, out),
                               max_context_tokens=ctx, policy=s.policy, prefix=prefix)
    except FastsimInputError as exc:
        return [RowResult(m, None, f"fastsim cannot run it: {exc}", pol_name, int(arrival.size)) for m in rows]
    fig = benchmark_figures(res)
    if fig.rejected:
        # a figure over the accepted rest is not the benchmark's figure
        why = (f"requests rejected at arrival ({fig.rejected:,} of {fig.requests:,} need more KV than the "
               f"instance holds, {float(s.p[P_KV_BUDGET_TOKENS]):,.0f} tokens); a figure over the rest is not the benchmark's")
        return [RowResult(m, None, why, pol_name, fig.requests, fig.rejected, tuple(notes)) for m in rows]
    outs = []
    for m in rows:
        try:
            v = fig.value(m.metric, m.stat)
        except FastsimInputError as exc:
            outs.append(RowResult(m, None, f"the simulator does not give {m.metric} {m.stat}: {exc.allowed}", pol_name,
                                  fig.requests, fig.rejected, tuple(notes)))
            continue
        if not (isinstance(v, float) and math.isfinite(v) and v > 0):
            outs.append(RowResult(m, None, f"no finished request gives {m.metric} {m.stat} ({v})", pol_name,
                                  fig.requests, fig.rejected, tuple(notes)))
            continue
        outs.append(RowResult(m, float(v), None, pol_name, fig.requests, fig.rejected, tuple(notes)))
    return outs


def engine_constants(constants):
    """The step constants of each engine's rows: a function ``engine -> constants``.

    Parameters
    ----------
    constants : None, StepConstants, Calibration, sequence of Calibration, or dict
        None: SPEC §3's constants for every engine. A :class:`~fastsim.stepmodel.StepConstants`
        or an untagged calibration (``engine == ""``): every engine. A calibration tagged with an
        engine (:attr:`fastsim.constants.Calibration.engine`): that engine's rows, the others on
        SPEC §3's. A sequence of calibrations: each tagged one for its engine, an untagged one for
        the engines no tagged one names. A dict ``{engine: constants}``, with ``"*"`` for the rest.

    Returns
    -------
    callable
        ``engine (str) -> StepConstants or Calibration``.

    Raises
    ------
    FastsimInputError
        Two calibrations for one engine, two untagged ones, or something else than the above.
    """
    from ..constants import Calibration
    from ..stepmodel import StepConstants
    if constants is None or isinstance(constants, StepConstants):
        c = constants if constants is not None else StepConstants()
        return lambda engine: c
    if isinstance(constants, dict):
        table = dict(constants)
    else:
        cals = [constants] if isinstance(constants, Calibration) else list(constants)
        table = {}
        for cal in cals:
            if not isinstance(cal, Calibration):
                raise FastsimInputError("constants", type(cal).__name__,
                                        "StepConstants, a Calibration, calibrations or a dict engine -> constants")
            key = cal.engine or "*"
            if key in table:
                raise FastsimInputError("calibration", key if key != "*" else "untagged",
                                        "one calibration per engine (and at most one untagged)")
            table[key] = cal
    rest = table.get("*", StepConstants())
    return lambda engine: table.get(engine, rest)


def run_measurements(measurements, catalog=None, constants=None, *, threads: int | None = None) -> list:
    """Run every measurement the way its benchmark ran and read fastsim's figure (module docstring).

    Rows that share a :func:`run_key` share one run; the runs are spread over a thread pool (the
    simulator's kernels release the GIL), largest first. Results do not depend on ``threads``.

    Parameters
    ----------
    measurements : sequence of Measurement
        From :func:`fastsim.validate.read_measurements`.
    catalog : Catalog, optional
        The catalog the rows were read with (default: the built-in one).
    constants : StepConstants, Calibration, sequence of Calibration or dict, optional
        Step-model constants (default: SPEC §3's), as :func:`engine_constants` reads them: a
        calibration tagged with an engine applies to that engine's rows only.
    threads : int, optional
        Worker threads (default: :func:`fastsim._threads.num_threads`).

    Returns
    -------
    list of RowResult
        One per measurement, in input order.

    Raises
    ------
    FastsimInputError
        ``threads`` below 1. Rows fastsim cannot express do not raise: they carry their reason.
    """
    from .._threads import num_threads
    from ..catalog import default_catalog
    from ..constants import Calibration
    cat = catalog if catalog is not None else default_catalog()
    for_engine = engine_constants(constants)
    threads = num_threads() if threads is None else threads
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise FastsimInputError("threads", threads, "an integer >= 1")
    groups = {}
    for i, m in enumerate(measurements):
        groups.setdefault(run_key(m), []).append(i)
    models = {}
    for m in measurements:      # resolve each model once, on this thread
        if m.model not in models:
            try:
                models[m.model] = cat.model(m.model)
            except FastsimInputError:
                pass

    def cost(idx):
        m = measurements[idx[0]]
        if m.benchmark == "trace":
            return 1e9
        return float(m.num_requests or 1000) * float(m.output_tokens or 1)
    order = sorted(groups.values(), key=cost, reverse=True)
    out = [None] * len(measurements)

    def work(idx):
        rows = [measurements[i] for i in idx]
        c = for_engine(rows[0].engine)
        if isinstance(c, Calibration):
            c = c.for_runtime(rows[0].runtime)       # its [[runtime]] table's constants, where it has one
        for i, r in zip(idx, run_group(rows, cat, c, models=models)):
            out[i] = r
    if threads == 1 or len(order) == 1:
        for idx in order:
            work(idx)
    else:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(work, order))
    return out


def validate(measurements, catalog=None, constants=None, *, threads: int | None = None):
    """Read (if given a path) and run a measurement set: the whole of ``fastsim validate``'s work.

    Parameters
    ----------
    measurements : str, os.PathLike or sequence of Measurement
        A measurement CSV (:func:`fastsim.validate.read_measurements`) or its rows.
    catalog : Catalog, optional
        Default: the built-in catalog, plus the user GPU entries of the shipped set when the
        file is the shipped set or a copy of it (:func:`fastsim.validate.is_shipped_set`,
        :data:`fastsim.validate.SHIPPED_CATALOG`).
    constants : StepConstants or Calibration, optional
    threads : int, optional
        As in :func:`run_measurements`.

    Returns
    -------
    ValidationReport

    Raises
    ------
    FastsimInputError
        As :func:`fastsim.validate.read_measurements` and :func:`run_measurements`.
    """
    import os
    from .records import SHIPPED_CATALOG, is_shipped_set, read_measurements
    from .summary import ValidationReport
    notes = []
    if isinstance(measurements, (str, os.PathLike)):
        if catalog is None:
            from ..catalog import load_catalog
            catalog = load_catalog([str(SHIPPED_CATALOG)] if is_shipped_set(measurements) else [])
        measurements = read_measurements(measurements, catalog)
    results = run_measurements(list(measurements), catalog, constants, threads=threads)
    if any(r.measurement.benchmark == "online" for r in results):
        notes.append(f"online rows: Poisson arrivals drawn with numpy default_rng({ONLINE_SEED}); rows without "
                     f"num_requests are a steady stage of rate x {STAGE_S:g} s")
    return ValidationReport(tuple(results), tuple(notes))
