"""Discrete-event simulation of a serving plan at one workload (SPEC section 6).

The public functions normalise their input to C-ordered, read-only arrays of fixed dtypes
(float64 times, int64 token counts: every kernel has one type signature, so it compiles once),
check the values with a kernel call per workload (numpy names the fault only when there is
one; the plans, these checks and the run's options are in :mod:`fastsim.sim.inputs`), build the
run and instance tables vectorized over the runs, and call ``_kernels.simulate_one`` once per
run: for one run on the calling thread; for many from worker threads that take the runs one by
one (longest first; the kernel releases the GIL, and a plain kernel compiles in a fraction of a
``prange`` kernel's time). It reads each workload's arrays in place, with no concatenation, and
also computes the run's metrics (percentiles by selection). Metrics-only batches keep
per-request results in per-worker buffers, so a batch of many long runs touches little memory.
Randomness is the caller's: arrivals and lengths come in as arrays (draw them from generators
spawned from one ``SeedSequence``). A :class:`~fastsim.sim.PipelinePlan` (pipeline-parallel
instances) goes to :mod:`fastsim.sim.pipeline`, whose docstring has its semantics; a batch may mix
it with the plans below.

Semantics (exactly what the kernels and ``tests/reference_sim.py`` implement)
---------------------------------------------------------------------------
Requests. Request i arrives at ``arrival_s[i]`` (ascending, in ``[0, horizon_s]``) with
``P = prompt_tokens[i] >= 1`` and ``O = output_tokens[i] >= 1``; O counts every generated
token, the first included.

KV held (sliding windows, SPEC §10; ``window.py``). With a window of W tokens on S of the L
layers (``f = S / L = p[P_SLIDE_FRAC]``), a sequence of c tokens holds
``held(c) = c - f x max(c - W, 0)`` full-context-equivalent tokens of KV. Memory counts it in
whole tokens, ``hold(c) = c - (S x max(c - W, 0)) // L`` (held rounded up); time (KV read,
attention, transfer) uses it in float64. Without a window both are ``c``, and every result is the
windowless one, bit for bit.

Rejection at arrival. A request is rejected (status ``REJECTED``, instance -1, counted, never
queued) when ``P + O > max_context_tokens`` (raw tokens), or ``hold(P + O)`` exceeds the whole KV
budget (``floor(p[P_KV_BUDGET_TOKENS])``) of a colocated or decode instance, or (disaggregated)
``hold(P)`` exceeds the KV budget of a prefill instance.

Routing at arrival, to a colocated or prefill instance: the fewest outstanding tokens, ties to
the lowest index; or round-robin over accepted requests (``routing="round-robin"``).
Outstanding tokens of an instance = sum over its unfinished requests of remaining prompt tokens
+ remaining output tokens; work counts as done at the end of the step that does it. A prefill
instance counts only the prompt tokens of prompts whose prefill step has not ended; a decode
instance counts the ``O - 1`` tokens it will generate. Disaggregated requests pick their decode
instance by the same rule (separate round-robin counter) when their KV transfer completes.

Colocated instance (and decode instance). FCFS waiting queue. At each step boundary: first the
running step completes; then requests are admitted from the head of the queue while
``reserved + hold(P + O) <= KV budget`` (``reserved`` = sum of ``hold(P + O)`` over admitted
unfinished requests: the KV of a request's whole P + O is reserved at admission) and the
number admitted stays within ``max_batch`` (0 = unlimited); strict FCFS, the head blocks the
queue. If anything is admitted, the next step starts at once; an idle instance
starts a step at the time work arrives (subject to the tie rule below). A step runs every
admitted request in decode phase (one token each) plus up to ``chunk_tokens`` prompt tokens
taken FCFS from admitted requests still in prefill (a step may finish one prompt and start the
next). A prompt finished by a step gives its first token at the step's end; the request then
decodes in the following ``O - 1`` steps; with ``O = 1`` it finishes at its first token. Step
time = ``step_time_nb(p, n_tokens, kv_tokens, attn_flops, n_seqs)`` (SPEC section 3) with::

    n_tokens   = decodes + prompt tokens in the step
    n_seqs     = decodes + prompt pieces in the step (what the step adds to the batch sum; the
                 host time per sequence, ``P_OVERHEAD_SEQ``, is charged for each)
    C, E       = sums over decodes of their context c (P + tokens generated so far) and of
                 max(c - W, 0)
    Cp, Ep     = C and E plus, for each prompt piece, s and max(s - W, 0) (s = the piece's
                 prompt tokens prefilled before it)
    kv_tokens  = float(Cp) - f x float(Ep)
    attn_flops = 4 L H x (float(C) - f x float(E))
                 + for each piece of x tokens after s prefilled: 2 L H x^2 + 4 L H x held(s)

(L layers, H the attention width ``p[P_QDIM_DEC]`` / ``p[P_QDIM_PF]``), evaluated in exactly this
order in float64, with ``held(s) = float(s) - f x float(s - W)`` when ``s > W``, else
``float(s)``. So decodes read and attend over their held context and a chunk over the held part
of its prompt's earlier chunks; the chunk's own causal part ``2 L H x^2`` ignores the window
(exact for chunks of at most W tokens; a longer chunk's attention within itself is overstated).

Disaggregated. A prefill instance keeps an FCFS queue; each step takes whole waiting prompts
FCFS while their total stays within ``min(prefill_token_budget, its KV budget)`` (raw prompt
tokens; the first prompt always goes, alone if it is larger) and reserves ``hold(P)`` of each;
``kv_tokens = 0``. At the step's end every prompt in it starts a KV transfer of
``held(P) x p_prefill[P_KVPG] / p_prefill[P_NET_BW]`` seconds (its held KV, ``held`` as above
with the prefill instance's window). When the
transfer completes the request has its first token (TTFT includes the transfer); with
``O = 1`` it finishes there, else it joins the chosen decode instance's FCFS queue, which runs
as a colocated instance without prefill (tokens 2 .. O; context P + 1 at its first decode).

Tie rule at equal times: arrivals first (by index), then KV-transfer completions (by time, then
request index), then instance step boundaries (lowest instance index first; prefill instances
are numbered before decode instances). So a request arriving exactly when a step ends is
already in the queue at that boundary, and requests arriving together at an idle instance are
admitted together.

Horizon. Events at times ``<= horizon_s`` are processed; the run then stops. Requests without
their last token by then are ``UNFINISHED`` (first/finish nan when not reached); busy time of a
step that runs past the horizon is cut at the horizon.

Samples. On the grid ``t_k = k x sample_dt_s`` (``k = 0 .. ceil(horizon / dt) - 1``), the state
after every event at times ``<= t_k``: waiting requests per instance (not admitted; for a
prefill instance, not in a step), KV tokens reserved per instance (``reserved``; prefill: the
``hold(P)`` of the running step's prompts), and the number of accepted requests not yet
finished (in system). The KV peak of an instance is its largest ``reserved`` (tracked at every
event, not read off the samples).

Sampling step. ``sample_dt_s=None`` (the default) takes :func:`auto_sample_dt`: 1 s for every
horizon of at most 1e7 s (results bit for bit those of the former fixed 1-s default), else the
smallest step of the 1-2-5 series (2, 5, 10, 20, 50 ... s) keeping at most ``MAX_SAMPLES`` (1e7)
samples; ``SimResult.sample_t_s`` holds the grid, so its step is the run's. A coarser step keeps
the meaning of what reads the samples: the overload slope ``b`` below is in requests per second
whatever the step (a least-squares slope against ``t_k`` in seconds, over at least 2.5e6 samples
of the second half when the step is automatic and above 1 s); ``queue_len``, ``kv_tokens`` and
``in_system`` stay the exact state at each grid time (only fewer of them: a spike shorter than
the step can fall between two samples, as it could between 1-s samples); the KV peak and every
metric other than the slope do not use the samples. An explicit step giving more than 1e7
samples is refused (``sample_dt_s`` named).

Metrics. Measured requests arrive in ``[f0 x horizon, f1 x horizon)`` (``measure_window``).
SLO attainment = fraction of measured requests that finished with TTFT <= ``ttft_slo_s`` and
(O = 1 or TPOT <= ``tpot_slo_s``), TPOT = (finish - first) / (O - 1); rejected and unfinished
measured requests are misses. TTFT / TPOT percentiles (linear interpolation) are over measured
requests with unreached values as +inf. Throughput = output tokens generated by the horizon /
horizon. Utilisation = busy time / horizon; mean batch = requests per step (decodes + prompt
pieces).

Overload. Let ``b`` be the least-squares slope (requests/s) of the sampled number in system
over the samples at ``t >= horizon / 2``, and ``lambda`` the accepted arrival rate. The run is
overloaded when ``b > OVERLOAD_SLOPE_FRACTION x lambda`` (the backlog absorbs more than 2% of
the arrivals) and ``b x horizon / 2 >= OVERLOAD_MIN_GROWTH`` (at least 10 more requests over
the second half). Using the number in system rather than the waiting queue alone also catches
an overload that first fills the KV cache; the fraction keeps a stable system at 90% load (whose
backlog only fluctuates) unflagged while 110% load (slope about 9% of lambda) is flagged.
"""
from __future__ import annotations

import math
import threading
from typing import Sequence

import numpy as np

from .._threads import num_threads, run_workers
from ..errors import FastsimInputError
from ..stepmodel import N_PARAMS, P_KV_BUDGET_TOKENS, P_PP
from . import _kernels as K
# the input types and checks, re-exported: ``fastsim.sim.engine.X is fastsim.sim.inputs.X``
from .inputs import (_DEGREES, _DIVISORS, _ROUTINGS, _UNLIMITED, MAX_SAMPLES, MAX_TOKENS,  # noqa: F401
                     OVERLOAD_MIN_GROWTH, OVERLOAD_SLOPE_FRACTION, ColocatedPlan, DisaggregatedPlan, PipelinePlan, _arrays,
                     _check, _count, _kv_floor, _option_row, _options, _params, _readonly, _token_array, _tokens,
                     _unpack, _workload, auto_sample_dt, measure_fractions)
from .pipeline import pipeline_policy, run_pipeline
from .policy import EnginePolicy, policy_metrics, run_policy
from .records import REQ_FINISHED, RUN_OK, RUN_SCRATCH_OVERFLOW, SimMetrics, SimResult
from .window import kv_window

__all__ = [
    "ColocatedPlan", "DisaggregatedPlan", "simulate", "simulate_batch", "warmup",
    "OVERLOAD_SLOPE_FRACTION", "OVERLOAD_MIN_GROWTH", "MAX_SAMPLES", "auto_sample_dt",
]


def _set_window(cfg, p) -> None:
    """The window columns (``I_WINDOW``, ``I_SLIDE_L``, ``I_N_LAYERS``) of rows ``cfg`` from ``p``."""
    w, s, lay, _ = kv_window(p)
    cfg[:, K.I_WINDOW] = w
    cfg[:, K.I_SLIDE_L] = s
    cfg[:, K.I_N_LAYERS] = lay


def _instances(plan, max_context: int):
    """Per-instance rows of one plan, without the timing wheel (its size depends on the run).

    Returns ``(pp, cfg, wheel_rank, n_entry, max_total, max_prompt)``: step parameters and int
    configuration rows, the index of each instance among the plan's wheel-keeping (colocated or
    decode) instances (-1 for a prefill instance), and the run constants: the context limit on
    P + O and the KV budget of an entry instance for a prompt alone (unlimited when colocated;
    the kernel checks the held P + O against the last instance's budget).
    """
    if isinstance(plan, ColocatedPlan):
        kvb = _kv_floor(plan.p)
        ni = plan.n_instances
        pp = np.repeat(plan.p[None, :], ni, axis=0)
        cfg = np.zeros((ni, K.N_ICOLS), dtype=np.int64)
        cfg[:, K.I_KIND] = K.KIND_COLOCATED
        cfg[:, K.I_TOKENS] = plan.chunk_tokens
        cfg[:, K.I_MAX_ADMIT] = plan.max_batch if plan.max_batch > 0 else _UNLIMITED
        cfg[:, K.I_KV_BUDGET] = kvb
        _set_window(cfg, plan.p)
        return pp, cfg, np.arange(ni, dtype=np.int64), ni, max_context, _UNLIMITED
    if isinstance(plan, DisaggregatedPlan):
        kp = _kv_floor(plan.p_prefill)
        kd = _kv_floor(plan.p_decode)
        npf, nd = plan.n_prefill, plan.n_decode
        ni = npf + nd
        pp = np.concatenate([np.repeat(plan.p_prefill[None, :], npf, axis=0),
                             np.repeat(plan.p_decode[None, :], nd, axis=0)])
        cfg = np.zeros((ni, K.N_ICOLS), dtype=np.int64)
        cfg[:npf, K.I_KIND] = K.KIND_PREFILL
        cfg[:npf, K.I_TOKENS] = min(plan.prefill_token_budget, kp)
        cfg[:npf, K.I_MAX_ADMIT] = _UNLIMITED
        cfg[:npf, K.I_KV_BUDGET] = kp
        cfg[npf:, K.I_KIND] = K.KIND_DECODE
        cfg[npf:, K.I_MAX_ADMIT] = plan.decode_max_batch if plan.decode_max_batch > 0 else _UNLIMITED
        cfg[npf:, K.I_KV_BUDGET] = kd
        _set_window(cfg[:npf], plan.p_prefill)
        _set_window(cfg[npf:], plan.p_decode)
        rank = np.concatenate([np.full(npf, -1, np.int64), np.arange(nd, dtype=np.int64)])
        return pp, cfg, rank, npf, max_context, kp
    raise FastsimInputError("plan", type(plan).__name__, "a ColocatedPlan, a DisaggregatedPlan or a PipelinePlan")


def _plan_rows(plan, max_context: int):
    """:func:`_instances` of a plan, kept on the plan (it is immutable; the rows are only read)."""
    if not isinstance(plan, (ColocatedPlan, DisaggregatedPlan)):
        return _instances(plan, max_context)     # raises, naming the field
    memo = plan.__dict__.get("_rows_memo")
    if memo is None or memo[0] != max_context:
        memo = (max_context, _instances(plan, max_context))
        object.__setattr__(plan, "_rows_memo", memo)
    return memo[1]




def _one_run_tables(plan, wk: int, w_n, w_max, max_context: int, n_samp: int, routing: int):
    """:func:`_run`'s tables for a single run, with Python scalars (a few microseconds)."""
    pp, cfg, rank, n_entry, max_total, max_prompt = _plan_rows(plan, max_context)
    n = int(w_n[wk])
    w = _wheel_size(min(int(w_max[wk]), max_context))
    ist = cfg.copy()
    keep = rank >= 0
    ist[:, K.I_WHEEL_MASK] = np.where(keep, w - 1, 0)
    ist[:, K.I_WHEEL_OFF] = np.where(keep, rank * (2 * w), 0)     # finish wheel, then window wheel
    ni = cfg.shape[0]
    wheel_len = int(np.count_nonzero(keep)) * (2 * w)
    row = [0] * K.N_RCOLS
    row[K.R_WORK] = wk
    row[K.R_N_REQ] = n
    row[K.R_N_INST] = ni
    row[K.R_N_ENTRY] = n_entry
    row[K.R_WHEEL_LEN] = wheel_len
    row[K.R_N_SAMP] = n_samp
    row[K.R_ROUTING] = routing
    row[K.R_MAX_TOTAL] = max_total
    row[K.R_MAX_PROMPT] = max_prompt
    return (np.array([row], dtype=np.int64), pp, ist, np.array([n], dtype=np.int64),
            np.array([wheel_len], dtype=np.int64))


def _run_worker(order, jobs, lock, run_i, run_f, pp, ist, fst, ro, out, work_arrays, full, cap, wheel_cap,
                samp_cap, worker):
    """Worker ``worker`` of a batch (:func:`fastsim._threads.run_workers`): runs of ``order``, one by one.

    Each run is a :func:`K.simulate_one` call (which releases the GIL) on its own slices of
    the per-request results and on the worker's slices of the working arrays (``cap`` requests,
    ``wheel_cap`` wheel buckets and ``samp_cap`` samples each); it writes nothing else, so the
    results do not depend on the number of workers.
    """
    nxt, done, wheel, wnext, xnext, tr_t, tr_r, buf_a, buf_b = work_arrays
    w0 = worker * cap
    h0 = worker * wheel_cap
    rows = run_i.tolist()
    while True:
        with lock:
            j = next(jobs, None)
        if j is None:
            return
        k = order[j]
        r = rows[k]
        n = r[K.R_N_REQ]
        if n > cap or r[K.R_WHEEL_LEN] > wheel_cap or r[K.R_N_SAMP] > samp_cap:
            out["run_status"][k] = RUN_SCRATCH_OVERFLOW
            continue
        w1 = w0 + n
        if full:
            o0 = r[K.R_OUT_OFF]
            s0 = r[K.R_SAMP_OFF]
        else:
            o0 = w0
            s0 = worker * samp_cap
        o1 = o0 + n
        s1 = s0 + r[K.R_N_SAMP]
        i0 = r[K.R_INST_OFF]
        i1 = i0 + r[K.R_N_INST]
        q0 = r[K.R_ISAMP_OFF]
        q1 = q0 + r[K.R_N_SAMP] * r[K.R_N_INST] if full else q0
        out["run_status"][k] = K.simulate_one(
            pp[i0:i1], ist[i0:i1], fst[i0:i1], *ro[r[K.R_WORK]], out["first"][o0:o1], out["finish"][o0:o1],
            out["inst"][o0:o1], out["dinst"][o0:o1], out["status"][o0:o1], nxt[w0:w1], done[w0:w1],
            wheel[h0:h0 + r[K.R_WHEEL_LEN]], wnext[w0:w1], xnext[w0:w1], tr_t[w0:w1], tr_r[w0:w1],
            out["wait_s"][q0:q1], out["kv_s"][q0:q1], out["sys_s"][s0:s1], buf_a[w0:w1], buf_b[w0:w1],
            run_i[k], run_f[k], out["met_f"][k], out["met_i"][k], full)


def _wheel_size(max_output: int) -> int:
    """Buckets of a decode timing wheel: a power of two >= the longest output (at least 1).

    Each colocated or decode instance keeps two wheels of this size (finishes, window crossings).
    """
    return 1 << max(0, int(max_output) - 1).bit_length()


def _run(plans, pk, wk, work, opts, full: bool, stop=None, columns=None):
    """Build the run and instance tables of runs (``plans[pk[k]]`` on workload ``wk[k]``), run the kernel.

    ``work`` is :func:`_check`'s output. Everything per run is vectorized over the runs.
    ``stop``: None, or ``(at, lag_s)`` with ``at`` float64 (runs,) the sure misses that end each
    run (0: never) and ``lag_s`` the TPOT check's lag (:func:`K._run_nb`'s early stop).
    ``columns``: ``{K.RF_* column: float64 (runs,)}``, per-run values of the option row.
    Returns the run table, the per-instance tables, the kernel's outputs and ``n_samp``.
    """
    horizon_s, _, _, max_context, routing, _, dt = opts
    ro, w_n, w_max = work
    R = pk.shape[0]
    n_samp = max(1, int(math.ceil(horizon_s / dt)))
    if R == 1:
        run_i, pp, ist, n_req, wheel_len = _one_run_tables(plans[int(pk[0])], int(wk[0]), w_n, w_max,
                                                           max_context, n_samp, routing)
    else:
        temps = [_plan_rows(pl, max_context) for pl in plans]
        t_ni = np.array([t[1].shape[0] for t in temps], dtype=np.int64)
        t_row0 = np.zeros(len(temps), dtype=np.int64)
        np.cumsum(t_ni[:-1], out=t_row0[1:])
        t_nwheel = np.array([int(np.count_nonzero(t[2] >= 0)) for t in temps], dtype=np.int64)
        t_const = np.array([t[3:6] for t in temps], dtype=np.int64)
        # per run: its workload's requests and the wheel size (a power of two >= the longest output
        # that can be admitted, at least 1)
        n_req = w_n[wk]
        m = np.maximum(np.minimum(w_max[wk], max_context) - 1, 0)
        wheel = np.left_shift(np.int64(1), np.frexp(m.astype(np.float64))[1].astype(np.int64))
        ni = t_ni[pk]
        inst_off = np.zeros(R, dtype=np.int64)
        np.cumsum(ni[:-1], out=inst_off[1:])
        n_inst = int(inst_off[-1] + ni[-1])
        rows = np.repeat(t_row0[pk] - inst_off, ni) + np.arange(n_inst, dtype=np.int64)
        pp = np.concatenate([t[0] for t in temps])[rows]
        ist = np.concatenate([t[1] for t in temps])[rows]
        rank = np.concatenate([t[2] for t in temps])[rows]
        w_row = np.repeat(wheel, ni)
        ist[:, K.I_WHEEL_MASK] = np.where(rank >= 0, w_row - 1, 0)
        ist[:, K.I_WHEEL_OFF] = np.where(rank >= 0, rank * (2 * w_row), 0)    # finish, then window wheel
        wheel_len = t_nwheel[pk] * (2 * wheel)
        run_i = np.empty((R, K.N_RCOLS), dtype=np.int64)
        run_i[:, K.R_WORK] = wk
        run_i[:, K.R_N_REQ] = n_req
        run_i[:, K.R_INST_OFF] = inst_off
        run_i[:, K.R_N_INST] = ni
        run_i[:, K.R_N_ENTRY] = t_const[pk, 0]
        run_i[:, K.R_WHEEL_OFF] = 0
        run_i[:, K.R_WHEEL_LEN] = wheel_len
        run_i[:, K.R_SAMP_OFF] = np.arange(R, dtype=np.int64) * n_samp
        run_i[:, K.R_N_SAMP] = n_samp
        run_i[:, K.R_ISAMP_OFF] = inst_off * n_samp
        run_i[:, K.R_ROUTING] = routing
        run_i[:, K.R_MAX_TOTAL] = t_const[pk, 1]
        run_i[:, K.R_MAX_PROMPT] = t_const[pk, 2]
        run_i[:, K.R_OUT_OFF] = 0
        np.cumsum(n_req[:-1], out=run_i[1:, K.R_OUT_OFF])
    row = _option_row(opts)[None, :]
    run_f = row if R == 1 else np.repeat(row, R, axis=0)      # the same option row for every run
    if stop is not None:
        run_f[:, K.RF_STOP_AT] = stop[0]
        run_f[:, K.RF_STOP_LAG] = stop[1]
    for col, v in (columns or {}).items():
        run_f[:, col] = v
    fst = np.zeros((ist.shape[0], K.N_FCOLS), dtype=np.float64)
    cap = max(1, int(n_req.max()))
    wheel_cap = max(1, int(wheel_len.max()))
    threads = 1 if R == 1 else min(num_threads(), R)
    nw = threads * cap                  # per-thread working arrays
    no = int(n_req.sum()) if full else nw   # per-request results
    n_isamp = ist.shape[0] * n_samp
    out = dict(
        first=np.empty(no, np.float64), finish=np.empty(no, np.float64),
        inst=np.empty(no, np.int32), dinst=np.empty(no, np.int32), status=np.empty(no, np.int8),
        wait_s=np.empty(n_isamp if full else 0, np.int64),
        kv_s=np.empty(n_isamp if full else 0, np.int64),
        sys_s=np.empty(R * n_samp if full else threads * n_samp, np.int64),
        met_f=np.empty((R, K.N_MFCOLS), np.float64), met_i=np.empty((R, K.N_MICOLS), np.int64),
        run_status=np.empty(R, np.int64),
    )
    disagg = any(isinstance(pl, DisaggregatedPlan) for pl in plans)
    work_arrays = (np.empty(nw, np.int32), np.empty(nw, np.int32), np.empty(threads * wheel_cap, np.int32),
                   np.empty(nw, np.int32), np.empty(nw, np.int32), np.empty(nw if disagg else 1, np.float64),
                   np.empty(nw if disagg else 1, np.int32), np.empty(nw, np.float64), np.empty(nw, np.float64))
    if R == 1:
        # one run: a plain call on this thread, the workload's arrays passed directly
        out["run_status"][0] = K.simulate_one(
            pp, ist, fst, *ro[int(wk[0])], out["first"], out["finish"], out["inst"], out["dinst"], out["status"],
            *work_arrays[:7], out["wait_s"], out["kv_s"], out["sys_s"], *work_arrays[7:], run_i[0], run_f[0],
            out["met_f"][0], out["met_i"][0], bool(full))
    else:
        # longest runs first (the workers take them one by one): the last one is a short one
        order = np.argsort(-n_req, kind="stable").tolist()
        run_workers(_run_worker, (order, iter(range(R)), threading.Lock(), run_i, run_f, pp, ist, fst, ro, out,
                                  work_arrays, bool(full), cap, wheel_cap, n_samp), threads)
    bad = np.flatnonzero(out["run_status"] != RUN_OK)
    if bad.size:
        raise RuntimeError(f"simulator kernel failed with status {int(out['run_status'][bad[0]])} "
                           f"on run {int(bad[0])}; this is a bug in fastsim")
    return run_i, ist, fst, out, n_samp


def _all_metrics(run_i, ist, fst, out, horizon_s) -> list:
    """The :class:`SimMetrics` of every run, from the kernel's metric rows (vectorized over runs)."""
    steps = ist[:, K.I_STEP]
    mean_batch = ist[:, K.I_BATCH_SUM] / np.maximum(steps, 1)
    mean_batch[steps == 0] = np.nan
    util = fst[:, K.F_BUSY] / horizon_s
    kv_peak = ist[:, K.I_KV_PEAK].copy()
    i0 = run_i[:, K.R_INST_OFF]
    i1 = (i0 + run_i[:, K.R_N_INST]).tolist()
    n = run_i[:, K.R_N_REQ]
    rejected = out["met_i"][:, K.MI_REJECTED]
    thr = (np.add.reduceat(ist[:, K.I_TOKENS_OUT], i0).astype(np.float64) / horizon_s).tolist()
    rate = ((n - rejected).astype(np.float64) / horizon_s).tolist()
    mf = out["met_f"].tolist()
    mi = out["met_i"].tolist()
    n = n.tolist()
    i0 = i0.tolist()
    res = []
    for k in range(len(n)):
        f = mf[k]
        rej, fin, meas, over, sure = mi[k]
        a, b = i0[k], i1[k]
        res.append(SimMetrics(f[K.M_ATTAIN], f[K.M_TTFT50], f[K.M_TTFT90], f[K.M_TTFT99],
                              f[K.M_TPOT50], f[K.M_TPOT90], f[K.M_TPOT99], thr[k], rej,
                              n[k] - rej - fin, fin, meas, n[k], over != 0, f[K.M_SLOPE], rate[k],
                              util[a:b], mean_batch[a:b], kv_peak[a:b], stopped_at_s=f[K.M_STOP_T],
                              sure_misses=sure))
    return res


def _result(k, m, works, run_i, fst, out, n_samp, dt) -> SimResult:
    w = int(run_i[k, K.R_WORK])
    o0 = int(run_i[k, K.R_OUT_OFF])
    o1 = o0 + int(run_i[k, K.R_N_REQ])
    i0 = int(run_i[k, K.R_INST_OFF])
    ni = int(run_i[k, K.R_N_INST])
    s0 = int(run_i[k, K.R_SAMP_OFF])
    q0 = int(run_i[k, K.R_ISAMP_OFF])
    return SimResult(
        arrival_s=works[w][0].copy(), prompt_tokens=works[w][1].copy(), output_tokens=works[w][2].copy(),
        first_token_s=out["first"][o0:o1], finish_s=out["finish"][o0:o1],
        instance=out["inst"][o0:o1].astype(np.int64), decode_instance=out["dinst"][o0:o1].astype(np.int64),
        status=out["status"][o0:o1].astype(np.int64),
        sample_t_s=np.arange(n_samp, dtype=np.float64) * dt,
        queue_len=out["wait_s"][q0:q0 + n_samp * ni].reshape(n_samp, ni),
        kv_tokens=out["kv_s"][q0:q0 + n_samp * ni].reshape(n_samp, ni),
        in_system=out["sys_s"][s0:s0 + n_samp], busy_s=fst[i0:i0 + ni, K.F_BUSY].copy(), metrics=m,
    )


def simulate(plan, arrival_s, prompt_tokens, output_tokens, *, horizon_s: float, ttft_slo_s: float,
             tpot_slo_s: float, max_context_tokens: int = 131072, routing: str = "least-loaded",
             measure_window=(0.2, 0.8), sample_dt_s: float | None = None, policy="lecture", prefix=None,
             spec=None, p_draft=None, spec_seed: int = 0) -> SimResult:
    """Simulate one plan serving one workload (SPEC section 6; semantics in the module docstring).

    Parameters
    ----------
    plan : ColocatedPlan, DisaggregatedPlan or PipelinePlan
        A PipelinePlan runs under the lecture or the trtllm policy (:mod:`fastsim.sim.pipeline`).
    arrival_s : ndarray(float64) of shape (n,)
        Arrival times (s), ascending, in ``[0, horizon_s]``.
    prompt_tokens, output_tokens : ndarray(int64) of shape (n,)
        Prompt tokens P >= 1 and output tokens O >= 1 (O includes the first token); any integer
        dtype, or floats holding whole numbers, is converted to int64.
    horizon_s : float
        Simulated seconds; no event after it is processed.
    ttft_slo_s, tpot_slo_s : float
        TTFT and TPOT targets (s) for SLO attainment.
    max_context_tokens : int
        Requests with P + O above it are rejected (>= 2; raw tokens, whatever the window).
    routing : {"least-loaded", "round-robin", "prefix-aware"}
        Routing of arrivals to instances (SPEC §6); ``prefix-aware`` under an engine policy only
        (:mod:`fastsim.sim.policy`).
    measure_window : (float, float)
        Fractions ``(f0, f1)`` of the horizon bounding the arrivals of measured requests,
        ``0 <= f0 < f1 <= 1`` (SPEC §1: the middle 60%).
    sample_dt_s : float or None
        Step of the sampling grid (s); at most 1e7 samples per run (``horizon_s / sample_dt_s <=
        1e7``). None (default): :func:`auto_sample_dt` of the horizon, 1 s up to a 1e7-s horizon,
        else the smallest 1-2-5 step (2, 5, 10, 20 ... s) within 1e7 samples (module docstring,
        "Sampling step").
    policy : {"lecture", "vllm", "sglang", "trtllm"} or EnginePolicy
        The scheduler (:mod:`fastsim.sim.policy`); a name takes the engine's defaults for an
        80 GB GPU (:func:`fastsim.sim.policy.engine_policy` builds others). Engine policies
        simulate colocated plans; the plan's ``chunk_tokens`` is then unused and its
        ``max_batch`` must be 0 (the policy's ``max_num_batched_tokens`` and ``max_num_seqs``,
        the batch cap, apply).
    prefix : PrefixBlocks, optional
        Prefix block ids of the requests (:class:`fastsim.workload.PrefixBlocks`), for prefix
        caching under an engine policy.
    spec : SpecDecoding, optional
        Speculative decoding (``gamma``, ``alpha``; :mod:`fastsim.specdec`), engine policies only.
    p_draft : ndarray(float64) of shape (N_PARAMS,), optional
        The draft model's step parameters, with ``spec``.
    spec_seed : int
        Seed of the acceptance draws (common random numbers across rates).

    Returns
    -------
    SimResult
        Per-request arrays of shape (n,), samples of shape (m, n_instances) and ``.metrics``.

    Raises
    ------
    FastsimInputError
        Unsorted, negative, non-finite or past-the-horizon arrivals; token counts < 1, above
        2**30 or not whole; arrays not 1-d or of mismatched lengths; a non-positive horizon,
        SLO or sample step, or an explicit sample step giving more than 1e7 samples;
        ``max_context_tokens`` < 2; an unknown
        routing; a bad window; a plan of another type; a plan's ``max_batch`` under an engine policy;
        a PipelinePlan under the vllm or sglang policy, with prefix caching, speculative decoding,
        prefix-aware routing, or stage rows of different windows.
    RuntimeError
        A kernel reported an internal failure status (a bug in fastsim, never bad input).
    """
    if isinstance(plan, PipelinePlan):
        # pipeline-parallel instances (semantics and refusals: fastsim.sim.pipeline)
        pol = pipeline_policy(policy, routing, spec, p_draft)
        if prefix is not None and pol is None:
            raise FastsimInputError("prefix", "given", "None under the lecture policy (it has no prefix cache)")
        opts = _options(horizon_s, ttft_slo_s, tpot_slo_s, max_context_tokens, routing, measure_window, sample_dt_s)
        raw = (arrival_s, prompt_tokens, output_tokens)
        work = _check([_arrays(raw)], [raw], opts[0])
        return run_pipeline([plan], [work[0][0]], opts, pol, routing, True)[0]
    engine = _engine_policy(policy, routing, spec)
    opts = _options(horizon_s, ttft_slo_s, tpot_slo_s, max_context_tokens, "least-loaded" if engine else routing,
                    measure_window, sample_dt_s)
    raw = (arrival_s, prompt_tokens, output_tokens)
    works = [_arrays(raw)]
    work = _check(works, [raw], opts[0])
    if engine:
        return _policy_results([plan], works, [prefix], opts, policy, routing, spec, p_draft, spec_seed, True)[0]
    if prefix is not None or p_draft is not None:
        raise FastsimInputError("prefix" if prefix is not None else "p_draft", "given",
                                "None under the lecture policy (it has no prefix cache and no speculative "
                                "decoding; policy='vllm' or 'sglang' has both)")
    one = np.zeros(1, np.int64)
    run_i, ist, fst, out, n_samp = _run([plan], one, one, work, opts, True)
    m = _all_metrics(run_i, ist, fst, out, opts[0])[0]
    return _result(0, m, works, run_i, fst, out, n_samp, opts[6])


def simulate_batch(plans: Sequence, workloads: Sequence, *, horizon_s: float, ttft_slo_s: float,
                   tpot_slo_s: float, max_context_tokens: int = 131072, routing: str = "least-loaded",
                   measure_window=(0.2, 0.8), sample_dt_s: float | None = None, product: bool = False,
                   full: bool = False, policy="lecture", spec=None, p_draft=None, spec_seed: int = 0,
                   stop_after_misses=None, stop_lag_s: float | None = None) -> list:
    """Simulate many (plan, workload) runs in parallel, on numba's thread count (SPEC sections 6 and 7).

    Each run is independent and writes only its own slots, so the results are identical to
    :func:`simulate` run by run, whatever ``NUMBA_NUM_THREADS`` is.

    Early stop (the capacity searches', :mod:`fastsim.search`): a run given ``stop_after_misses``
    ends as soon as that many of its measured requests have surely missed the SLO, judged at
    each sample time by the metrics' own rule on what is already decided: a rejection, a TTFT
    past its target (no first token ``ttft_slo_s`` after the arrival), or, ``stop_lag_s``
    after the arrival, a TPOT past its target (finished too slowly, or already too slow to
    finish in time). Its metrics then cover what it simulated (attainment a lower bound, every
    request unfinished at the stop a miss), it reads as overloaded with the whole accepted rate
    as its backlog slope, and ``SimMetrics.stopped_at_s`` says when it stopped;
    ``SimMetrics.sure_misses`` holds the count either way. A run that does not stop is bit for
    bit the run without the check.

    Parameters
    ----------
    plans : sequence of ColocatedPlan, DisaggregatedPlan or PipelinePlan
        One per workload (run k is ``plans[k]`` on ``workloads[k]``), or a single plan for all.
        The types may be mixed; a PipelinePlan's run always simulates its whole horizon (no early
        stop: ``stopped_at_s`` NaN, ``sure_misses`` 0; :mod:`fastsim.sim.pipeline`).
    workloads : sequence of (arrival_s, prompt_tokens, output_tokens) or of ``Workload``
        Arrays as in :func:`simulate`: ``ndarray(float64) of shape (n,)`` arrival times (s) and
        ``ndarray(int64) of shape (n,)`` token counts, ``n`` per workload (e.g. one per seed x
        rate, drawn with common random numbers).
    product : bool
        True: every plan with every workload instead, plan-major
        (``len(plans) * len(workloads)`` runs).
    full : bool
        Return :class:`SimResult` objects instead of :class:`SimMetrics`.
    horizon_s, ttft_slo_s, tpot_slo_s, max_context_tokens, routing, measure_window, sample_dt_s
        As in :func:`simulate`, shared by all runs; under the lecture policy ``ttft_slo_s`` and
        ``tpot_slo_s`` may also be sequences of one per run (each run's SLO: its attainment,
        percentiles are unaffected, and its early stop).
    policy, spec, p_draft, spec_seed
        As in :func:`simulate`, shared by all runs; a ``Workload`` with prefix blocks
        (``.prefix``) brings them to the engine policies' prefix caching.
    stop_after_misses : int, or sequence of int (one per run), optional
        Sure misses of the measured requests that end a run early (0 or None: never). Lecture
        policy only.
    stop_lag_s : float, or sequence of float (one per run), optional
        Seconds after its arrival at which a request that met its TTFT is judged on its TPOT by
        the early stop; None: ``ttft_slo_s + tpot_slo_s x (O - 1)`` for the longest output O
        of all the workloads (every such request is then decided when judged).

    Returns
    -------
    list of SimMetrics (or SimResult when ``full``)
        One per run, in run order.

    Raises
    ------
    FastsimInputError
        As :func:`simulate`, plus empty or mismatched ``plans`` / ``workloads`` and workloads
        that are neither triples nor ``Workload`` objects; ``stop_after_misses`` not None, an
        integer >= 0 or a sequence of one per run, or given with an engine policy;
        ``stop_lag_s`` not None, a finite number >= 0 or a sequence of one per run.
    RuntimeError
        A kernel reported an internal failure status (a bug in fastsim, never bad input).
    """
    engine = _engine_policy(policy, routing, spec)
    slo_runs = {}
    for name, col, v in (("ttft_slo_s", K.RF_TTFT_SLO, ttft_slo_s), ("tpot_slo_s", K.RF_TPOT_SLO, tpot_slo_s)):
        if np.ndim(v) == 1:         # one per run: the lecture policy's runs read it from their row
            if engine:
                raise FastsimInputError(name, "a sequence", "one number under an engine policy")
            from ..errors import require_positive
            slo_runs[col] = np.array([require_positive(f"{name}[{j}]", x) for j, x in enumerate(v)], np.float64)
            if not slo_runs[col].size:
                raise FastsimInputError(name, v, "a number, or a sequence of one per run")
    opts = _options(horizon_s, slo_runs[K.RF_TTFT_SLO].max() if K.RF_TTFT_SLO in slo_runs else ttft_slo_s,
                    slo_runs[K.RF_TPOT_SLO].max() if K.RF_TPOT_SLO in slo_runs else tpot_slo_s, max_context_tokens,
                    "least-loaded" if engine else routing, measure_window, sample_dt_s)
    plans = list(plans)
    raw = list(workloads)
    works = [_arrays(w) for w in raw]
    if not plans:
        raise FastsimInputError("plans", plans, "at least one plan")
    if not works:
        raise FastsimInputError("workloads", workloads, "at least one workload")
    work = _check(works, raw, opts[0])
    for pl in plans:
        if not isinstance(pl, PipelinePlan):
            _instances(pl, opts[3])
    P, W = len(plans), len(works)
    if product:
        pk = np.repeat(np.arange(P, dtype=np.int64), W)
        wk = np.tile(np.arange(W, dtype=np.int64), P)
    elif P == 1:
        pk = np.zeros(W, np.int64)
        wk = np.arange(W, dtype=np.int64)
    else:
        if P != W:
            raise FastsimInputError("plans", f"{P} plans", f"one plan, or one per workload ({W})")
        pk = wk = np.arange(W, dtype=np.int64)
    stop = _stop_options(stop_after_misses, stop_lag_s, pk.shape[0], work, opts, engine)
    for col, v in slo_runs.items():
        if v.shape[0] != pk.shape[0]:
            raise FastsimInputError("ttft_slo_s" if col == K.RF_TTFT_SLO else "tpot_slo_s", f"{v.shape[0]} values",
                                    f"a number, or one per run ({pk.shape[0]})")
    is_pp = np.array([isinstance(plans[int(k)], PipelinePlan) for k in pk], dtype=bool)
    if not is_pp.any():
        return _batch_runs(plans, pk, wk, works, raw, work, opts, full, engine, policy, routing, spec, p_draft,
                           spec_seed, stop, slo_runs)
    # pipeline-parallel runs go to their simulator (fastsim.sim.pipeline; no early stop), the others
    # to theirs; the results come back in run order
    pol = pipeline_policy(policy, routing, spec, p_draft)
    pp = np.flatnonzero(is_pp)
    res = [None] * pk.shape[0]
    for k, r in zip(pp.tolist(), run_pipeline([plans[int(pk[k])] for k in pp], [work[0][int(wk[k])] for k in pp],
                                               opts, pol, routing, full, {c: v[pp] for c, v in slo_runs.items()})):
        res[k] = r
    rest = np.flatnonzero(~is_pp)
    if rest.size:
        keep = sorted(set(pk[rest].tolist()))
        remap = np.zeros(len(plans), np.int64)
        remap[keep] = np.arange(len(keep))
        sub_stop = None if stop is None else (stop[0][rest], stop[1][rest] if np.ndim(stop[1]) else stop[1])
        for k, r in zip(rest.tolist(), _batch_runs([plans[j] for j in keep], remap[pk[rest]], wk[rest], works, raw,
                                                    work, opts, full, engine, policy, routing, spec, p_draft,
                                                    spec_seed, sub_stop, {c: v[rest] for c, v in slo_runs.items()})):
            res[k] = r
    return res


def _batch_runs(plans, pk, wk, works, raw, work, opts, full, engine, policy, routing, spec, p_draft, spec_seed, stop,
                slo_runs) -> list:
    """:func:`simulate_batch`'s runs of colocated and disaggregated plans (``plans[pk[k]]`` on ``works[wk[k]]``)."""
    if engine:
        prefixes = [getattr(w, "prefix", None) for w in raw]
        return _policy_results([plans[int(k)] for k in pk], [works[int(k)] for k in wk],
                               [prefixes[int(k)] for k in wk], opts, policy, routing, spec, p_draft, spec_seed, full)
    run_i, ist, fst, out, n_samp = _run(plans, pk, wk, work, opts, full, stop, slo_runs)
    ms = _all_metrics(run_i, ist, fst, out, opts[0])
    if not full:
        return ms
    return [_result(k, m, works, run_i, fst, out, n_samp, opts[6]) for k, m in enumerate(ms)]


def _stop_options(stop_after_misses, stop_lag_s, runs: int, work, opts, engine: bool):
    """:func:`simulate_batch`'s early-stop arguments as :func:`_run`'s ``stop`` (None: no stop).

    Raises
    ------
    FastsimInputError
        ``stop_after_misses`` neither None, an integer >= 0 nor a sequence of ``runs`` of them,
        or given with an engine policy; ``stop_lag_s`` neither None, a finite number >= 0 nor a
        sequence of ``runs`` of them.
    """
    if stop_after_misses is None:
        return None
    allowed = f"None, an integer >= 0, or a sequence of {runs} (one per run) of them"
    at = np.asarray(stop_after_misses)
    if at.ndim == 0:
        at = np.full(runs, at)
    if at.shape != (runs,) or at.dtype.kind not in "iu" or (at < 0).any():
        raise FastsimInputError("stop_after_misses", stop_after_misses, allowed)
    if engine:
        raise FastsimInputError("stop_after_misses", stop_after_misses, "None under an engine policy (the early "
                                "stop is the lecture kernel's)")
    if stop_lag_s is None:
        return at.astype(np.float64), opts[1] + opts[2] * max(float(work[2].max()) - 1.0, 0.0)
    lag = np.asarray(stop_lag_s)
    if lag.ndim == 0:
        lag = np.full(runs, lag)
    if lag.shape != (runs,) or lag.dtype.kind not in "iuf" or not (np.isfinite(lag) & (lag >= 0)).all():
        raise FastsimInputError("stop_lag_s", stop_lag_s, f"None, or a finite number of seconds >= 0 or a sequence "
                                f"of {runs} (one per run) of them")
    return at.astype(np.float64), lag.astype(np.float64)


def _engine_policy(policy, routing, spec) -> bool:
    """True for an engine policy (vllm / sglang / trtllm); checks what only they accept."""
    if isinstance(policy, EnginePolicy) or (isinstance(policy, str) and policy in ("vllm", "sglang", "trtllm")):
        return True
    if policy != "lecture":
        raise FastsimInputError("policy", policy, "lecture, vllm, sglang, trtllm or an EnginePolicy")
    if routing == "prefix-aware":
        raise FastsimInputError("routing", routing, "least-loaded or round-robin under the lecture policy "
                                "(prefix-aware routing needs an engine policy with a prefix cache: vllm or sglang)")
    if spec is not None:
        raise FastsimInputError("spec", spec, "None under the lecture policy (speculative decoding is "
                                "simulated under the vllm, sglang and trtllm policies)")
    return False


def _policy_results(plans, works, prefixes, opts, policy, routing, spec, p_draft, spec_seed, full):
    """Run engine-policy runs and wrap them as the engine's results (:mod:`fastsim.sim.policy`)."""
    pol, spec, results, n_samp = run_policy(plans, works, prefixes, opts, policy=policy, routing=routing,
                                            spec=spec, p_draft=p_draft, spec_seed=spec_seed, full=full)
    out = []
    dt = opts[6]
    for w, res in zip(works, results):
        n = int(w[0].shape[0])
        m = policy_metrics(pol, spec, res, n, opts[0])
        if not full:
            out.append(m)
            continue
        _, _, busy, _, rq, (wait_s, kv_s, sys_s), _ = res
        out.append(SimResult(
            arrival_s=w[0].copy(), prompt_tokens=w[1].copy(), output_tokens=w[2].copy(),
            first_token_s=rq["first"], finish_s=rq["finish"], instance=rq["inst"].astype(np.int64),
            decode_instance=np.full(n, -1, np.int64), status=rq["status"].astype(np.int64),
            sample_t_s=np.arange(n_samp, dtype=np.float64) * dt, queue_len=wait_s, kv_tokens=kv_s,
            in_system=sys_s, busy_s=busy.copy(), metrics=m, cached_tokens=rq["cached"],
            preemptions=rq["preempted"].astype(np.int64)))
    return out


def warmup(engine_policies: bool = True) -> None:
    """Compile (or load from cache) the simulator kernels with a tiny run of each plan kind.

    Single runs and batches, writable and read-only inputs all call the same two lecture-policy
    kernels with the same types (the engine passes read-only views), so nothing compiles later.

    Parameters
    ----------
    engine_policies : bool
        Also the engine-policy kernel (:mod:`fastsim.sim.policy`; about 40 s to compile on 2
        cores, once per install) and the pipeline-parallel kernel (:mod:`fastsim.sim.pipeline`;
        about 7 s).

    Returns
    -------
    None
    """
    p = np.ones(N_PARAMS)
    p[P_KV_BUDGET_TOKENS] = 1000.0
    a = np.array([0.0, 0.5])
    pt = np.array([10, 20])
    ot = np.array([2, 3])
    kw = dict(horizon_s=10.0, ttft_slo_s=1.0, tpot_slo_s=1.0)
    ro = [x.copy() for x in (a, pt, ot)]
    for x in ro:
        x.setflags(write=False)
    simulate_batch([ColocatedPlan(p, 1, 8), DisaggregatedPlan(p, 1, p, 1)], [(a, pt, ot), tuple(ro)], product=True,
                   **kw)
    # one run (its inputs go to the kernel as read-only views, writable or not)
    simulate(ColocatedPlan(p, 1, 8), a, pt, ot, **kw)
    if not engine_policies:
        return
    # the engine policies: one run and a batch
    p[P_KV_BUDGET_TOKENS] = 1024.0
    simulate(ColocatedPlan(p, 1, 8), a, pt, ot, policy="vllm", **kw)
    simulate_batch([ColocatedPlan(p, 1, 8)], [(a, pt, ot), tuple(ro)], policy="vllm", **kw)
    # pipeline-parallel plans (one kernel for both of their policies)
    stages = np.stack([p, p])
    stages[:, P_PP] = 2.0
    simulate(PipelinePlan(stages, 1, 8), a, pt, ot, **kw)


def warmup_metrics() -> None:
    """Compile (or load from cache) the metrics kernel alone, for the types the engine passes it.

    :func:`fastsim._precompile.plan_kernels` compiles it in a helper process while the command's
    own process compiles the simulator kernel; a test checks that the types are the engine's.

    Returns
    -------
    None
    """
    n = 4
    arrival = _readonly(np.arange(n, dtype=np.float64))
    output = _readonly(np.full(n, 2, dtype=np.int64))
    first = arrival + 0.5
    finish = arrival + 1.0
    status = np.full(n, REQ_FINISHED, dtype=np.int8)
    sys_s = np.zeros(n, dtype=np.int64)
    run_f = np.zeros((1, K.N_RFCOLS), dtype=np.float64)
    run_f[0, K.RF_HORIZON] = float(n)
    run_f[0, K.RF_DT] = 1.0
    run_f[0, K.RF_MEAS_HI] = 1.0
    met_f = np.empty((1, K.N_MFCOLS), dtype=np.float64)
    met_i = np.empty((1, K.N_MICOLS), dtype=np.int64)
    K._metrics_nb(arrival, output, first, finish, status, sys_s, np.empty(n, np.float64), np.empty(n, np.float64),
                  run_f[0], met_f[0], met_i[0])
