"""Pipeline-parallel instances in the serving simulator: :class:`fastsim.sim.PipelinePlan` runs (SPEC section 6).

:func:`fastsim.sim.simulate` and :func:`fastsim.sim.simulate_batch` hand a
:class:`~fastsim.sim.PipelinePlan` here (a batch may mix it with colocated and disaggregated
plans: each run goes to its own simulator and the results come back in run order); so does
:func:`fastsim.sim.simulate_drained`, which calls :func:`~fastsim.sim.simulate`. The kernel
(``_pipeline_nb.py``) and the plain-Python reference (``reference_pipeline.py``) implement exactly
the rules below, bit for bit.

Semantics
---------
Requests, rejection at arrival, routing (least-loaded or round-robin), samples, the horizon and
every metric are as in :mod:`fastsim.sim.engine` (lecture policy) and :mod:`fastsim.sim.policy`
(``trtllm``) for one colocated instance, unless said here.

An instance is ``S`` stages (the rows of ``PipelinePlan.stages``, :func:`fastsim.stepmodel.stage_params`).
Micro-batches flow through stages ``0 .. S - 1`` in order, first in first out, at most ``S`` in
flight per instance: vLLM's virtual engines (``--pipeline-parallel-size``, one scheduler pass per
virtual engine) and TensorRT-LLM's micro-batches (``PyExecutor._executor_loop_pp`` in
``tensorrt_llm/_torch/pyexecutor/py_executor.py``: ``num_micro_batches`` slots, one scheduled per
loop, the oldest completed). A request is in at most one micro-batch at a time: it needs its
previous token before its next step (TensorRT-LLM's schedulers skip ``inflight_req_ids``).

Launch. When stage 0 is free and fewer than ``S`` micro-batches are in flight, the instance admits
waiting requests and composes a micro-batch from its admitted requests NOT in flight, by the
policy's rules (below). If that is empty nothing launches, and the instance waits for a
completion or an arrival. A micro-batch of ``n_tok`` tokens reading ``kv_tok`` held KV tokens
takes ``d_s = step_time(stages[s], n_tok, kv_tok, attn_s, n_seqs)`` on stage ``s`` (``n_seqs`` the
micro-batch's sequences, decodes and prompt pieces)
(:func:`fastsim.stepmodel.step_time`, which adds the stage's activation send
``P_P2P_LAT + n_tok x P_P2P_S_PER_TOKEN``), where ``n_tok`` and ``kv_tok`` are the colocated
step's (the lecture's composition, :mod:`fastsim.sim.engine`) and ``attn_s`` its attention FLOPs
with THAT stage's ``P_LAYERS``, ``P_QDIM_DEC`` and ``P_QDIM_PF``. Launched at ``T``:
``start_0 = T``, ``end_0 = T + d_0``; ``start_s = max(end_{s-1}, free_s)``,
``end_s = start_s + d_s``; then ``free_s = end_s``. The micro-batch completes at ``end_{S-1}``:
its tokens are applied as the lecture's step boundary applies them (decodes gain a token, prompt
pieces advance, a finished prompt gives its first token at the completion time, a finished request
releases its KV) and its requests leave the in-flight set. The next launch opportunity is
``max(now, free_0)``, after a launch (if fewer than ``S`` are in flight), a completion, or an
arrival at the instance (if fewer than ``S`` are in flight).

Tie rules at equal times: arrivals first (by index), then instance events, by instance index,
and within an instance a completion before a launch. So a request arriving when a micro-batch
completes is in the queue at the launch that follows, and a micro-batch that completes when
stage 0 frees hands its requests to that launch.

Policies. ``lecture`` (SPEC section 6): FCFS admission while the reservations ``hold(P + O)`` fit
the KV budget and the admitted requests (in flight included) stay within ``max_batch``; a
micro-batch is every admitted decode not in flight plus up to ``chunk_tokens`` prompt tokens, FCFS
over the admitted prompts not in flight (one in flight is skipped: the next prompt is chunked).
``trtllm``: TensorRT-LLM's ``GUARANTEED_NO_EVICT`` capacity scheduler and its micro-batch
scheduler exactly as :mod:`fastsim.sim.policy` describes them (blocks of ``block_tokens``, the
whole ``P + O`` reserved at admission, one ``max_num_tokens`` budget per micro-batch, decodes then
contexts, chunked context or not, its rejection rules), over the requests not in flight, with
TensorRT-LLM's two caps under pipeline parallelism (``create_py_executor_instance`` in
``tensorrt_llm/_torch/pyexecutor/_util.py`` builds the capacity scheduler with
``max_num_sequences = max_batch_size * mapping.pp_size`` and the micro-batch scheduler with
``max_batch_size``; ``SimpleScheduler.schedule_request`` in ``scheduler.py`` runs the capacity
scheduler over all active requests, in flight included, and the micro-batch scheduler over those
not in ``inflight_request_ids``, stopping at ``scheduled_req_count >= max_batch_size``): the
capacity scheduler admits while fewer than ``max_batch_size x S`` requests run, and a micro-batch
holds at most ``max_batch_size`` requests; a request that would exceed it ends the pass (those
admitted after it get no tokens in this micro-batch). At ``S = 1`` both caps are the colocated
policy's ``max_batch_size``, so a one-stage run is the colocated ``trtllm`` run bit for bit.
Not supported with pipeline parallelism: prefix caching and speculative decoding (refused, naming
the field); the ``vllm`` and ``sglang`` policies (refused: vLLM's on-demand KV allocation and
preemption, and SGLang's, are not simulated with pipeline stages); prefix-aware routing.

Sliding windows. Every stage row must carry the same window and sliding fraction (the model's);
memory uses stage 0's whole-token rule (:func:`fastsim.sim.window.held_tokens`), time the float
rule, as for a colocated instance.

Early stop. :func:`fastsim.sim.simulate_batch`'s ``stop_after_misses`` does not apply: a
pipeline-parallel run always simulates its whole horizon (a valid answer: the run simply did not
stop), with ``stopped_at_s`` NaN and ``sure_misses`` 0, as a whole run reports.

Outputs. The colocated run's :class:`~fastsim.sim.SimResult` and :class:`~fastsim.sim.SimMetrics`,
with the metrics kernel (``_kernels._metrics_nb``), so percentiles, attainment, throughput and
overload mean the same. Per instance: ``busy_s`` is the mean over its stages of each stage's busy
time within the horizon (the utilisation of the pipeline's GPUs; a stage's interval that runs past
the horizon is cut there), ``steps`` the micro-batches launched, ``mean_batch`` requests per
micro-batch, ``kv_peak_tokens`` the largest reservation (lecture) or KV in use (``trtllm``).
"""
from __future__ import annotations

import math

import numpy as np

from .._threads import num_threads, run_jobs
from ..errors import FastsimInputError
from ..stepmodel import PARAM_NAMES, P_REQ_OVERHEAD, P_SLIDE_FRAC, P_WINDOW
from . import _kernels as K
from . import _pipeline_nb as PN
from .inputs import _UNLIMITED, PipelinePlan, _kv_floor, _option_row, _readonly
from .policy import EnginePolicy, _check_policy
from .records import RUN_OK, SimMetrics, SimResult
from .window import kv_window

__all__ = ["pipeline_policy", "run_pipeline"]

_ROUTINGS = {"least-loaded": PN.ROUTE_LEAST_LOADED, "round-robin": PN.ROUTE_ROUND_ROBIN}


def pipeline_policy(policy, routing, spec=None, p_draft=None):
    """The scheduler of pipeline-parallel runs: None for the lecture's, else the ``trtllm`` EnginePolicy.

    Parameters
    ----------
    policy : {"lecture", "trtllm"} or EnginePolicy
    routing : str
    spec, p_draft : optional
        Must be None (speculative decoding is not simulated with pipeline stages).

    Returns
    -------
    EnginePolicy or None

    Raises
    ------
    FastsimInputError
        ``policy`` vllm or sglang (or another name), ``prefix_caching`` on, ``spec`` or
        ``p_draft`` given, ``routing`` not least-loaded or round-robin.
    """
    if spec is not None:
        raise FastsimInputError("spec", spec, "None with a PipelinePlan (speculative decoding is not simulated "
                                "with pipeline-parallel stages)")
    if p_draft is not None:
        raise FastsimInputError("p_draft", "given", "None with a PipelinePlan (no speculative decoding)")
    if routing not in _ROUTINGS:
        raise FastsimInputError("routing", routing, "least-loaded or round-robin with a PipelinePlan")
    name = policy.name if isinstance(policy, EnginePolicy) else policy
    if name == "lecture":
        return None
    if name in ("vllm", "sglang"):
        raise FastsimInputError("policy", name, "lecture or trtllm: pipeline-parallel plans run under the lecture "
                                "or trtllm policy; vLLM's on-demand KV allocation and preemption with PP are not "
                                "simulated")
    if name != "trtllm":
        raise FastsimInputError("policy", policy, "lecture or trtllm with a PipelinePlan")
    pol = _check_policy(policy)
    if pol.prefix_caching:
        raise FastsimInputError("prefix_caching", True, "False with a PipelinePlan (prefix caching is not simulated "
                                "with pipeline-parallel stages)")
    return pol


def _window_rows(plan: PipelinePlan):
    """``kv_window`` of stage 0, checked to be every stage's window and sliding fraction."""
    st = plan.stages
    w0 = kv_window(st[0], "stages[0]")
    for s in range(1, st.shape[0]):
        for col in (P_WINDOW, P_SLIDE_FRAC):
            if st[s, col] != st[0, col]:
                raise FastsimInputError(f"stages[{s}][{PARAM_NAMES[col]}]", float(st[s, col]),
                                        f"{float(st[0, col])}, stage 0's (one model: every stage has its window)")
    return w0


def _config(plan: PipelinePlan, pol, opts, routing: str, n_samp: int):
    """The kernel's int64 and float64 configuration rows of one run (``PN.C_*``, ``PN.CF_*``)."""
    horizon_s, _, _, max_context, _, _, dt = opts
    if pol is not None and plan.max_batch:
        raise FastsimInputError("plan.max_batch", plan.max_batch, f"0 under the trtllm policy (its batch cap is "
                                f"max_batch_size, now {pol.max_num_seqs}: engine_policy(..., max_num_seqs=N))")
    w, s, lay, f = _window_rows(plan)
    c = np.zeros(PN.N_CCOLS, np.int64)
    c[PN.C_POLICY] = PN.LECTURE if pol is None else PN.TRTLLM
    c[PN.C_N_INST] = plan.n_instances
    c[PN.C_CHUNK] = plan.chunk_tokens
    c[PN.C_MAX_ADMIT] = plan.max_batch if plan.max_batch > 0 else _UNLIMITED
    c[PN.C_KV_BUDGET] = _kv_floor(plan.stages[0])
    c[PN.C_BT] = 1
    c[PN.C_MB_CAP] = _UNLIMITED
    c[PN.C_CAP_ALL] = _UNLIMITED
    if pol is not None:
        c[PN.C_BUDGET] = pol.max_num_batched_tokens
        c[PN.C_MB_CAP] = pol.max_num_seqs
        c[PN.C_CAP_ALL] = pol.max_num_seqs * plan.n_stages
        c[PN.C_BT] = pol.block_tokens
        c[PN.C_CHUNKED] = 1 if pol.chunked_context else 0
    c[PN.C_WINDOW] = w
    c[PN.C_SLIDE_L] = s
    c[PN.C_N_LAYERS] = lay
    c[PN.C_ROUTING] = _ROUTINGS[routing]
    c[PN.C_MAX_CONTEXT] = max_context
    c[PN.C_N_SAMP] = n_samp
    cf = np.zeros(PN.N_CFCOLS, np.float64)
    cf[PN.CF_SLIDE] = f
    cf[PN.CF_HORIZON] = horizon_s
    cf[PN.CF_DT] = dt
    return c, cf


def _one(plan, w, c, cf, rf, n_samp: int, full: bool):
    """One run: the kernel, then the metrics kernel; the raw outputs."""
    n = w[0].shape[0]
    ni = plan.n_instances
    S = plan.n_stages
    first = np.empty(n, np.float64)
    finish = np.empty(n, np.float64)
    inst = np.empty(n, np.int32)
    status = np.empty(n, np.int8)
    busy = np.empty(ni, np.float64)
    sbusy = np.empty((ni, S), np.float64)
    iout = np.empty((ni, PN.N_OCOLS), np.int64)
    wait_s = np.empty(n_samp * ni if full else 0, np.int64)
    kv_s = np.empty(n_samp * ni if full else 0, np.int64)
    sys_s = np.empty(n_samp, np.int64)
    code = PN.pipeline_run_nb(plan.stages, c, cf, w[0], w[1], w[2], first, finish, inst, status, busy, sbusy, iout,
                              wait_s, kv_s, sys_s, bool(full))
    if code != RUN_OK:
        raise RuntimeError(f"pipeline kernel failed with status {code}; this is a bug in fastsim")
    c_req = float(plan.stages[0, P_REQ_OVERHEAD])
    if c_req != 0.0:          # StepConstants.request_overhead_s: the client's first-token and finish times
        K.client_times_nb(first, finish, c_req)
    mf = np.empty((1, K.N_MFCOLS), np.float64)
    mi = np.empty((1, K.N_MICOLS), np.int64)
    K._metrics_nb(w[0], w[2], first, finish, status, sys_s, np.empty(max(n, 1), np.float64),
                  np.empty(max(n, 1), np.float64), rf, mf[0], mi[0])
    return dict(first=first, finish=finish, inst=inst, status=status, busy=busy, sbusy=sbusy, iout=iout,
                wait_s=wait_s, kv_s=kv_s, sys_s=sys_s, mf=mf[0], mi=mi[0])


def _metrics(pol, o, n: int, horizon_s: float) -> SimMetrics:
    f, mi, iout = o["mf"], o["mi"], o["iout"]
    steps = iout[:, PN.O_STEPS]
    mean_batch = iout[:, PN.O_BATCH_SUM] / np.maximum(steps, 1)
    mean_batch = np.where(steps == 0, np.nan, mean_batch)
    rej, fin, meas, over = (int(x) for x in mi[:K.MI_SURE])
    thr = float(iout[:, PN.O_TOKENS_OUT].sum()) / horizon_s
    extra = {} if pol is None else dict(policy=pol.name, prompt_tokens_admitted=int(iout[:, PN.O_PROMPT_ADMITTED].sum()))
    return SimMetrics(float(f[K.M_ATTAIN]), float(f[K.M_TTFT50]), float(f[K.M_TTFT90]), float(f[K.M_TTFT99]),
                      float(f[K.M_TPOT50]), float(f[K.M_TPOT90]), float(f[K.M_TPOT99]), thr, rej, n - rej - fin, fin,
                      meas, n, over != 0, float(f[K.M_SLOPE]), float(n - rej) / horizon_s, o["busy"] / horizon_s,
                      mean_batch, iout[:, PN.O_KV_PEAK].copy(), stopped_at_s=math.nan, sure_misses=0, **extra)


def run_pipeline(plans, works, opts, pol, routing: str, full: bool, columns=None) -> list:
    """Run pipeline-parallel runs (called by :func:`fastsim.sim.simulate` and ``simulate_batch``).

    Parameters
    ----------
    plans : list of PipelinePlan
        One per run.
    works : list of tuple
        The runs' workloads, checked read-only array triples (``inputs._check``), aligned with ``plans``.
    opts : tuple
        The options normalised by :func:`fastsim.sim.inputs._options`.
    pol : EnginePolicy or None
        :func:`pipeline_policy`'s answer.
    routing : {"least-loaded", "round-robin"}
    full : bool
        Return :class:`SimResult` objects (else :class:`SimMetrics`).
    columns : dict, optional
        ``{K.RF_* column: float64 (runs,)}``, per-run values of the option row (per-run SLOs).

    Returns
    -------
    list of SimResult or SimMetrics
        One per run, in order.

    Raises
    ------
    FastsimInputError
        A plan's ``max_batch`` under ``trtllm``; stage rows with different windows.
    RuntimeError
        The kernel reported a failure (a bug in fastsim, never bad input).
    """
    horizon_s, dt = opts[0], opts[6]
    n_samp = max(1, int(math.ceil(horizon_s / dt)))
    row = _option_row(opts)
    R = len(plans)
    rows = []
    for k, (pl, w) in enumerate(zip(plans, works)):
        if not isinstance(pl, PipelinePlan):
            raise FastsimInputError("plan", type(pl).__name__, "a PipelinePlan")
        rf = row.copy()
        for col, v in (columns or {}).items():
            rf[col] = v[k]
        c, cf = _config(pl, pol, opts, routing, n_samp)
        rows.append((pl, tuple(_readonly(x) for x in w), c, cf, rf))
    outs = [None] * R
    if R == 1 or num_threads() == 1:
        for k, r in enumerate(rows):
            outs[k] = _one(*r, n_samp, full)
    else:
        # many runs: one kernel call per run from worker threads (both kernels release the GIL),
        # the longest first
        def job(k):
            outs[k] = _one(*rows[k], n_samp, full)

        run_jobs(job, sorted(range(R), key=lambda k: -rows[k][1][0].shape[0]), min(num_threads(), R))
    res = []
    for (pl, w, _, _, _), o in zip(rows, outs):
        n = int(w[0].shape[0])
        m = _metrics(pol, o, n, horizon_s)
        if not full:
            res.append(m)
            continue
        ni = pl.n_instances
        zeros = None if pol is None else np.zeros(n, np.int64)
        res.append(SimResult(
            arrival_s=w[0].copy(), prompt_tokens=w[1].copy(), output_tokens=w[2].copy(),
            first_token_s=o["first"], finish_s=o["finish"], instance=o["inst"].astype(np.int64),
            decode_instance=np.full(n, -1, np.int64), status=o["status"].astype(np.int64),
            sample_t_s=np.arange(n_samp, dtype=np.float64) * dt, queue_len=o["wait_s"].reshape(n_samp, ni),
            kv_tokens=o["kv_s"].reshape(n_samp, ni), in_system=o["sys_s"], busy_s=o["busy"].copy(), metrics=m,
            cached_tokens=zeros, preemptions=None if zeros is None else zeros.copy()))
    return res
