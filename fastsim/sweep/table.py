"""The analytic table of a sweep: its columns, and every point's analytic result, vectorized.

:func:`analytic_table` evaluates every point of a grid (SPEC section 5) in chunks: the points of
the mode-wise product (:func:`_codes`) less the layout copies of a plan
(:func:`fastsim.sweep.grid._layout_repeats`), then one :func:`fastsim._analytic_nb.instances_nb`
call per chunk over the distinct instances of its points, then numpy over the points.
:data:`COLUMNS` names the table's columns and dtypes; the simulation columns (:func:`_empty_sim`)
are filled later by :mod:`fastsim.sweep.tasks`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import _analytic_nb as AK
from ..catalog import Catalog
from ..stepmodel import (N_PARAMS, P_KVPG, P_NET_BW, layout_degrees, layout_refusal, pipeline_round_params,
                         pp_refusal, step_params)
from .grid import (AXES, _AUTO, MAX_INSTANCES, SweepGrid, SweepSettings, _disaggregated, _hex, _layout_repeats,
                   _mode_counts, _n_enumerated, _point_ids, _price_label, make_grid)

# reason codes of a point
(_R_OK, _R_NOFIT, _R_TPOT, _R_TTFT, _R_NOPEAK, _R_BELOW, _R_PRE_NOFIT, _R_PRE_TTFT, _R_DEC_NOFIT, _R_DEC_TPOT,
 _R_LAYOUT, _R_TOO_MANY, _R_PIPELINE) = range(13)
_REASONS = np.array([
    "",
    "weights + one request's KV do not fit in memory",
    "no batch meets the TPOT target",
    "the latency-quantile prompt cannot be prefilled within the TTFT target",
    "the GPU has no peak for this precision",
    "the given instances carry less than the target rate",
    "prefill: weights + one request's KV do not fit in memory",
    "prefill: the TTFT target leaves no room for queueing",
    "decode: weights + one request's KV do not fit in memory",
    "decode: no batch meets the TPOT target",
    "the model refuses this layout (a TP that does not divide its attention or KV heads, which vLLM "
    "refuses, or expert parallelism on a dense model)",
    f"the target rate needs more than {MAX_INSTANCES:,} instances (the most a point is sized to; per side when "
    "disaggregated)",
    "the pipeline does not fit the model or the node: more stages than the model's layers, a stage's TP "
    "group larger than a node of the GPU, or stages that cannot keep whole sliding-window layers "
    "(fastsim.stepmodel.pp_refusal)",
], dtype=object)

#: Columns of the sweep table and their dtypes (units in the names; seconds, US dollars). The
#: ``Int64`` columns are pandas nullable integers, missing where they do not apply: ``tp``, ``pp``,
#: ``instances`` and ``chunk_tokens`` on disaggregated rows, the ``prefill_*`` / ``decode_*`` ones on
#: colocated rows. ``gpus`` counts ``tp x pp`` GPUs per colocated instance.
COLUMNS = (
    ("point_id", "str"), ("point", "int64"),
    ("model", "str"), ("gpu", "str"), ("precision", "str"), ("mode", "str"),
    ("tp", "Int64"), ("pp", "Int64"), ("prefill_tp", "Int64"), ("decode_tp", "Int64"), ("layout", "str"),
    ("chunk_tokens", "Int64"),
    ("max_batch", "int64"), ("instances", "Int64"), ("prefill_instances", "Int64"), ("decode_instances", "Int64"),
    ("workload", "str"), ("rate_req_per_s", "float64"), ("ttft_s", "float64"), ("tpot_s", "float64"),
    ("price", "str"), ("price_usd_per_gpu_hour", "float64"),
    ("mean_prompt_tokens", "float64"), ("mean_output_tokens", "float64"),
    ("instance_capacity_req_per_s", "float64"), ("prefill_capacity_req_per_s", "float64"),
    ("decode_capacity_req_per_s", "float64"), ("capacity_req_per_s", "float64"), ("batch", "int64"),
    ("analytic_ttft_s", "float64"), ("analytic_tpot_s", "float64"),
    ("gpus", "int64"), ("usd_per_hour", "float64"), ("usd_per_million_output_tokens", "float64"),
    ("efficiency_usd_per_million_output_tokens", "float64"), ("output_tokens_per_s_per_gpu", "float64"),
    ("feasible", "bool"), ("reason", "str"),
    ("verified", "bool"), ("sim_runs", "int64"), ("sim_measured", "int64"), ("sim_rejected", "int64"),
    ("sim_attainment", "float64"), ("sim_attainment_ci95_lo", "float64"), ("sim_attainment_ci95_hi", "float64"),
    ("sim_ttft_p90_s", "float64"), ("sim_tpot_p90_s", "float64"),
    ("sim_overloaded", "bool"), ("sim_passed", "bool"), ("sim_reason", "str"),
    ("sim_capacity_req_per_s", "float64"), ("sim_capacity_ci95_lo_req_per_s", "float64"),
    ("sim_capacity_ci95_hi_req_per_s", "float64"), ("sim_capacity_probes", "int64"),
    ("sim_capacity_seed_runs", "int64"), ("sim_capacity_stopped_runs", "int64"),
)
_SIM_COLUMNS = tuple(c for c, _ in COLUMNS[COLUMNS.index(("verified", "bool")):])

#: Version of the table's layout, recorded in ``FILE.sweep.json``; a resume refuses another one.
#: 2: missing values (not 0) in the columns that do not apply to a row's mode. 3: the ``layout`` column.
#: 4: each plan once in grids of both modes (no copy per value of an axis its mode does not use;
#: ``point`` numbers the distinct plans; such an axis enters the id as not applicable).
#: 5: an MoE plan whose TPs are all 1 once, not once per layout (``tp+ep`` / ``dp+ep`` there are
#: the plain TP1 plan; the rows after such a plan are numbered afresh, their ids are unchanged).
#: 6: an infeasible row shows its point's chunk and instance counts where the grid gave them, and
#: leaves them missing where the axis was on auto (it showed 0, so such rows could not be told apart).
#: 7: a disaggregated point's id is that of its plan, not of its grid's spelling: the same sides give
#: the same id whether they come from ``tp`` / ``instances`` or from the side axes (equal sides hash
#: as the stand-in alone, differing ones as both side axes; those ids, and every colocated one, are
#: unchanged; the others changed).
#: 8: a scenario's figures are those of the requests within the model's context, as the screen's
#: (``Demand.within_context``): served means, sizing for the served rate, infeasible when fewer than
#: 90% fit (version 7 priced the untruncated lengths: heavy tails sized far too many instances).
#: 9: a point passes only when its attainment's 95% Wilson interval clears the target (seeds added
#: while it cannot decide: ``sim_runs`` counts them) and its capacity, when searched, does not
#: refute the rate; new columns ``sim_attainment_ci95_lo`` / ``_hi`` and ``sim_reason`` (why it fails).
#: 10: the capacity search's cost per point: ``sim_capacity_probes``, ``sim_capacity_seed_runs``,
#: ``sim_capacity_stopped_runs``.
#: 11: the ``pp`` column (pipeline stages of a colocated point; missing on disaggregated rows); a
#: pipelined point counts ``tp x pp`` GPUs per instance. The ids of points without stages are unchanged.
TABLE_VERSION = 11

#: Columns that make a "question" of a sweep: the plans of one question compete for one answer.
QUESTION = ("model", "workload", "rate_req_per_s", "ttft_s", "tpot_s", "price")


@dataclass
class _Tables:
    """Small lookup tables shared by every chunk of a grid (built once)."""

    models: list
    params: np.ndarray          # unique step-parameter rows
    ptab: np.ndarray            # (n_model_eff, n_gpu, n_prec, n_tp, n_layout, n_pp) -> params row, -1 (no peak),
    #                             -2 (layout refused), -3 (pipeline refused)
    tps: list
    pp_lut: np.ndarray          # (n_pp_axis,) -> index into ptab's last axis (one stage at 0)
    model_code_of_point_axis: np.ndarray   # (n_model_axis, n_source) -> index into models
    demand: np.ndarray          # (n_model_eff, n_source, n_ttft, n_tpot, 10): lengths within the model's context
    rate: np.ndarray            # (n_source, n_rate)
    ttft: np.ndarray            # (n_source, n_ttft)
    tpot: np.ndarray            # (n_source, n_tpot)
    price: np.ndarray           # (n_price, n_gpu)
    mean_o: np.ndarray          # (n_model_eff, n_source): served means (Demand.within_context)
    mean_p: np.ndarray          # (n_model_eff, n_source)
    lat_p: np.ndarray           # (n_source,): latency-quantile prompt (never truncated)
    served: np.ndarray          # (n_model_eff, n_source): share of the requests within the model's context
    ctx_reason: np.ndarray      # (n_model_eff, n_source): index into ``reasons``, -1 when the context allows a P90
    reasons: np.ndarray         # _REASONS, then the context reasons of this grid (object)


def _tables(grid: SweepGrid, s: SweepSettings) -> _Tables:
    cat = grid.catalog
    A = grid.axes
    srcs = grid.sources
    # effective models: the model axis, or each source's model
    if A["model"] == (None,):
        names = []
        for src in srcs:
            if src.model not in names:
                names.append(src.model)
        mcode = np.array([[names.index(src.model) for src in srcs]], dtype=np.int64)
    else:
        names = list(A["model"])
        mcode = np.repeat(np.arange(len(names), dtype=np.int64)[:, None], len(srcs), axis=1)
    models = [grid.models[n] for n in names]
    gpus = [cat.gpu(g) for g in A["gpu"]]
    precs = [cat.precision(p) for p in A["precision"]]
    tps = sorted({t for a in ("tp", "prefill_tp", "decode_tp") for t in A[a] if t})
    lays = A["layout"]
    # one stage first (a disaggregated side's, whatever the axis holds), then the axis' other values
    pps = (1,) + tuple(v for v in A["pp"] if v != 1)
    pp_lut = np.array([pps.index(v) for v in A["pp"]], dtype=np.int64)
    ptab = np.full((len(models), len(gpus), len(precs), len(tps), len(lays), len(pps)), -1, dtype=np.int64)
    rows = []
    for i, m in enumerate(models):
        for j, g in enumerate(gpus):
            for k, pr in enumerate(precs):
                if pr.flops_key not in g.peak_flops_per_s:
                    continue
                for t_i, tp in enumerate(tps):
                    for l_i, lay in enumerate(lays):
                        if layout_refusal(m, g, lay, tp) is not None:
                            ptab[i, j, k, t_i, l_i, :] = -2    # not a plan (SPEC §10)
                            continue
                        dp, ep = layout_degrees(lay, tp)
                        for q_i, pp in enumerate(pps):
                            if pp > 1 and pp_refusal(m, g, int(tp), int(pp)):
                                ptab[i, j, k, t_i, l_i, q_i] = -3     # no such pipeline (stage_params)
                                continue
                            ptab[i, j, k, t_i, l_i, q_i] = len(rows)
                            p = step_params(m, g, pr, tp, s.constants, dp=dp, ep=ep, pp=int(pp))
                            # a pipelined instance's step is its steady-state round (fastsim.analytic)
                            rows.append(pipeline_round_params(p) if pp > 1 else p)
    params = np.ascontiguousarray(np.stack(rows)) if rows else np.zeros((1, N_PARAMS))
    ns = len(srcs)
    nm = len(models)
    ttfts = A["ttft_s"]
    tpots = A["tpot_s"]
    rates = A["rate_req_per_s"]
    demand = np.zeros((nm, ns, len(ttfts), len(tpots), 10))
    ttft = np.zeros((ns, len(ttfts)))
    tpot = np.zeros((ns, len(tpots)))
    rate = np.zeros((ns, len(rates)))
    mean_p, mean_o = np.zeros((nm, ns)), np.zeros((nm, ns))
    served = np.ones((nm, ns))
    ctx_reason = np.full((nm, ns), -1, dtype=np.int64)
    reasons = list(_REASONS)
    used = np.zeros((nm, ns), dtype=bool)          # only the (model, source) pairs some point has
    used[mcode, np.arange(ns)[None, :]] = True
    from ..plans import ttft_tail_for
    tail = ttft_tail_for(s.slo_percentile, s.ttft_tail)
    for i, src in enumerate(srcs):
        for a, v in enumerate(ttfts):
            ttft[i, a] = v if v is not None else src.ttft_s
        for b, v in enumerate(tpots):
            tpot[i, b] = v if v is not None else src.tpot_s
        for r, v in enumerate(rates):
            rate[i, r] = v if v is not None else src.rate_req_per_s
        for k, m in enumerate(models):
            if not used[k, i]:
                continue
            mp, mo, lp, lo, wp, f = _served_lengths(src, m, s.slo_percentile)
            mean_p[k, i], mean_o[k, i], served[k, i] = mp, mo, f
            why = _context_reason(m, lp, lo, f)
            if why:
                if why not in reasons:
                    reasons.append(why)
                ctx_reason[k, i] = reasons.index(why)
            for a in range(len(ttfts)):
                for b in range(len(tpots)):
                    demand[k, i, a, b] = (mp, mo, lp, lo, ttft[i, a], tpot[i, b], s.tpot_margin, tail, wp, 0.0)
    price = np.zeros((len(A["price"]), len(gpus)))
    for i, pv in enumerate(A["price"]):
        for j, g in enumerate(gpus):
            if pv == "catalog":
                price[i, j] = g.price_usd_per_hour
            elif isinstance(pv, dict):
                price[i, j] = pv.get(g.name, g.price_usd_per_hour)
            else:
                price[i, j] = pv
    lens = np.array([_source_lengths(src, s.slo_percentile) for src in srcs], dtype=np.float64)
    return _Tables(models, params, ptab, tps, pp_lut, mcode, demand, rate, ttft, tpot, price,
                   mean_o, mean_p, lens[:, 2].copy(), served, ctx_reason, np.array(reasons, dtype=object))


def _source_lengths(src, percentile: float = 90.0) -> tuple:
    """A source's ``lengths`` (mean P, mean O, latency P, latency O, E[P^2] / E[P]) with the latency
    lengths at the SLO percentile (the grid holds the P90s)."""
    if percentile == 90.0:
        return src.lengths
    q = percentile / 100.0
    if src.kind == "scenario":
        lp, lo = src.obj.prompt.quantile(q), src.obj.output.quantile(q)
    else:
        lp = float(np.quantile(src.obj.prompt_tokens.astype(np.float64), q))
        lo = float(np.quantile(src.obj.output_tokens.astype(np.float64), q))
    mp, mo, _, _, wp = src.lengths
    return mp, mo, lp, lo, wp


def _served_lengths(src, model, percentile: float = 90.0) -> tuple:
    """A source's length figures on a model, as the screen prices them: ``(mean P, mean O, latency P,
    latency O, E[P^2] / E[P], served fraction)``, the latency lengths at the SLO ``percentile``.

    A scenario's are those of :meth:`fastsim.analytic.Demand.from_scenario` truncated at the
    model's context by :meth:`~fastsim.analytic.Demand.within_context` (the simulator rejects a
    request whose prompt + output exceeds it); a trace's are its own (the screen does not truncate
    empirical lengths either), with served fraction 1.
    """
    if src.kind != "scenario":
        mp, mo, lp, lo, wp = _source_lengths(src, percentile)
        return mp, mo, lp, lo, wp, 1.0
    from ..analytic import Demand
    d = Demand.from_scenario(src.obj, latency_quantile=percentile / 100.0,
                             slo_percentile=percentile).within_context(model.max_context_tokens)
    return (d.mean_prompt_tokens, d.mean_output_tokens, d.latency_prompt_tokens, d.latency_output_tokens,
            d.work_prompt_tokens, d.served_fraction)


def _context_reason(model, lat_p: float, lat_o: float, served: float) -> str:
    """The screen's reason why no plan of ``model`` can meet a P90 SLO on a workload (:func:`fastsim.analytic.screen`):
    the latency-quantile request is longer than the context, or fewer than 90% of the requests fit it; "" otherwise."""
    longest = lat_p + lat_o
    if longest > model.max_context_tokens:
        return (f"the latency-quantile request ({longest:,.0f} tokens of prompt + output) is longer than "
                f"{model.name}'s context of {model.max_context_tokens:,} tokens")
    if served < 0.9:
        return (f"only {served:.1%} of the requests fit {model.name}'s context of "
                f"{model.max_context_tokens:,} tokens (prompt + output); the rest are rejected, so a P90 "
                "SLO cannot hold")
    return ""


def _codes(grid: SweepGrid, ix: np.ndarray) -> dict:
    """The axis values of points, by their number in the mode-wise product (grid order).

    Parameters
    ----------
    grid : SweepGrid
    ix : numpy.ndarray of int64, shape (n,)
        Numbers in the mode-wise product, each in ``[0, _n_enumerated(grid.axes))``
        (:func:`fastsim.sweep.grid._n_enumerated`). Without layout copies
        (:func:`fastsim.sweep.grid._layout_repeats`; none unless an MoE model meets several
        layouts at TP 1) these are the point numbers; else :func:`analytic_table` leaves the copies
        out and numbers the points left.

    Returns
    -------
    dict of str to numpy.ndarray of int64, shape (n,)
        For every axis of :data:`AXES`, each point's index into ``grid.axes[axis]``; an axis the
        point's mode does not use (:func:`fastsim.sweep.grid._unused_axes`) at index 0.

    Notes
    -----
    The points are the product of the axes before ``mode``, and under each of its values, the
    modes in axis order, each the product of the axes after ``mode`` that it uses
    (:func:`fastsim.sweep.grid._mode_counts`): the order of the full product, with the copies of
    a plan over axes its mode does not use left out. Vectorized: no Python loop over points.
    """
    counts = _mode_counts(grid.axes)                      # (n_modes, n_axes)
    m_ax = AXES.index("mode")
    blocks = counts[:, m_ax + 1:].prod(axis=1)            # plans of each mode under one prefix
    ends = np.cumsum(blocks)
    codes = {}
    rest = ix // ends[-1]
    within = ix % ends[-1]
    if blocks.shape[0] == 1:
        mode = np.zeros_like(ix)
    else:
        mode = np.searchsorted(ends, within, side="right")
        within = within - (ends - blocks)[mode]
    codes["mode"] = mode
    for k in range(len(AXES) - 1, m_ax, -1):
        col = counts[:, k]
        if (col == col[0]).all():                          # the same for every mode: scalar arithmetic
            n = int(col[0])
            codes[AXES[k]] = within % n if n > 1 else np.zeros_like(ix)
            within = within // n if n > 1 else within
        else:
            n = col[mode]
            codes[AXES[k]] = within % n
            within = within // n
    for k in range(m_ax - 1, -1, -1):
        n = len(grid.axes[AXES[k]])
        codes[AXES[k]] = rest % n
        rest = rest // n
    return codes


def _analytic_chunk(grid: SweepGrid, s: SweepSettings, T: _Tables, c: dict, ix: np.ndarray) -> dict:
    """Analytic columns (numpy arrays) of the points of codes ``c`` (:func:`_codes`), numbered ``ix`` (int64)."""
    from .._analytic_nb import instances as sweep_instances
    A = grid.axes
    n = ix.shape[0]
    src = c["scenario"]
    mi = T.model_code_of_point_axis[c["model"], src]
    tp_vals = np.array(A["tp"], dtype=np.int64)[c["tp"]]
    tpos = {t: i for i, t in enumerate(T.tps)}
    def tp_pos(vals):
        lut = np.array([tpos.get(int(v), -1) for v in range(65)], dtype=np.int64)
        return lut[vals]
    pt = np.array(A["prefill_tp"], dtype=np.int64)[c["prefill_tp"]]
    dt = np.array(A["decode_tp"], dtype=np.int64)[c["decode_tp"]]
    pt = np.where(pt > 0, pt, tp_vals)
    dt = np.where(dt > 0, dt, tp_vals)
    disagg = _disaggregated(A, c)
    tp_a = np.where(disagg, dt, tp_vals)          # colocated instance or decode side
    pp_vals = np.where(disagg, 1, np.array(A["pp"], dtype=np.int64)[c["pp"]])
    # a disaggregated side is never pipelined: the one-stage rows (index 0 of the tables' stage counts)
    pp_code = np.where(disagg, 0, T.pp_lut[c["pp"]])
    row_a = T.ptab[mi, c["gpu"], c["precision"], tp_pos(tp_a), c["layout"], pp_code]
    row_b = T.ptab[mi, c["gpu"], c["precision"], tp_pos(pt), c["layout"], pp_code]
    nT, nP = len(A["ttft_s"]), len(A["tpot_s"])
    ns = T.demand.shape[1]
    drow = ((mi * ns + src) * nT + c["ttft_s"]) * nP + c["tpot_s"]
    chunk_vals = np.array([0 if v == _AUTO else v for v in A["chunk_tokens"]], dtype=np.int64)
    chunk = np.where(disagg, 0, chunk_vals[c["chunk_tokens"]])
    mb = np.array(A["max_batch"], dtype=np.int64)[c["max_batch"]]
    # unique instance rows: (params row, demand row, chunk, max_batch)
    nd = T.demand.shape[0] * ns * nT * nP
    cu, cinv = np.unique(chunk, return_inverse=True)
    mu, minv = np.unique(mb, return_inverse=True)
    ok_peak = (row_a >= 0) & ((row_b >= 0) | ~disagg)
    refused = (row_a == -2) | (disagg & (row_b == -2))
    piped_refused = row_a == -3
    key_a = ((np.maximum(row_a, 0) * nd + drow) * len(cu) + cinv) * len(mu) + minv
    key_b = ((np.maximum(row_b, 0) * nd + drow) * len(cu) + cinv) * len(mu) + minv
    both = np.concatenate([key_a, key_b])
    space = max(T.params.shape[0], 1) * nd * len(cu) * len(mu)
    if space <= max(8 * both.shape[0], 1 << 20):
        # small key space: uniqueness by a presence table, O(n + space), no sort (same result as np.unique)
        present = np.zeros(space, dtype=bool)
        present[both] = True
        keys = np.flatnonzero(present)
        inv = (np.cumsum(present) - 1)[both]
    else:
        keys, inv = np.unique(both, return_inverse=True)
    inv_a, inv_b = inv[:n], inv[n:]
    k_mb = keys % len(mu)
    rest = keys // len(mu)
    k_c = rest % len(cu)
    rest //= len(cu)
    k_d = rest % nd
    k_p = rest // nd
    m = keys.shape[0]
    f8 = lambda: np.empty(m, dtype=np.float64)  # noqa: E731
    i8 = lambda: np.empty(m, dtype=np.int64)  # noqa: E731
    st, cst = i8(), i8()
    dcap, db, dstep, pcap, prho, ps = f8(), i8(), f8(), f8(), f8(), f8()
    ccap, cb, cc, cstep = f8(), i8(), i8(), f8()
    sweep_instances(T.params, np.ascontiguousarray(k_p), np.ascontiguousarray(T.demand.reshape(-1, 10)),
                    np.ascontiguousarray(k_d), cu[k_c].astype(np.float64), np.ascontiguousarray(mu[k_mb]),
                    np.asarray(s.chunk_tokens, dtype=np.float64),
                    st, dcap, db, dstep, pcap, prho, ps, cst, ccap, cb, cc, cstep)
    rate = T.rate[src, c["rate_req_per_s"]]
    # the instances carry the requests within the model's context (Demand.served_rate_req_per_s)
    served = rate * T.served[mi, src]
    mean_o = T.mean_o[mi, src]
    ctx_bad = T.ctx_reason[mi, src]
    price = T.price[c["price"], c["gpu"]]
    inst_vals = np.array([0 if v == _AUTO else v for v in A["instances"]], dtype=np.int64)[c["instances"]]
    def side_inst(name):
        vals = A[name]
        if vals == ("",):
            return inst_vals
        return np.array([0 if v == _AUTO else v for v in vals], dtype=np.int64)[c[name]]
    # colocated
    col_ok = ok_peak & (cst[inv_a] == AK.OK)
    cap_c = np.where(col_ok, ccap[inv_a], 0.0)
    n_c, big_c = _sized(inst_vals, served, cap_c)
    # disaggregated
    cap_p = np.where(ok_peak, pcap[inv_b], 0.0)
    cap_d = np.where(ok_peak, dcap[inv_a], 0.0)
    dis_ok = ok_peak & (cap_p > 0) & (cap_d > 0)
    pi, di = side_inst("prefill_instances"), side_inst("decode_instances")
    n_p, big_p = _sized(pi, served, cap_p)
    n_d, big_d = _sized(di, served, cap_d)
    # a point whose rate needs more than MAX_INSTANCES (on auto) is not sized: infeasible, said so
    too_many = np.where(disagg, dis_ok & (big_p | big_d), col_ok & big_c)
    ok_plan = np.where(disagg, dis_ok, col_ok)     # the instance itself works (per-instance columns)
    ok = ok_plan & ~too_many                       # ... and the point is sized
    gpus = np.where(disagg, pt * n_p + dt * n_d, tp_vals * pp_vals * n_c)
    capacity = np.where(disagg, np.minimum(n_p * cap_p, n_d * cap_d), n_c * cap_c)
    reason = np.full(n, _R_OK, dtype=np.int64)
    cs = np.where(ok_peak, cst[inv_a], AK.OK)
    reason = np.where(~disagg & (cs == AK.NO_FIT), _R_NOFIT, reason)
    reason = np.where(~disagg & (cs == AK.TPOT_UNREACHABLE), _R_TPOT, reason)
    reason = np.where(~disagg & (cs == AK.TTFT_UNREACHABLE), _R_TTFT, reason)
    pre_bad = disagg & ok_peak & ~(cap_p > 0)
    dec_bad = disagg & ok_peak & (cap_p > 0) & ~(cap_d > 0)
    reason = np.where(pre_bad, np.where(st[inv_b] == AK.NO_FIT, _R_PRE_NOFIT, _R_PRE_TTFT), reason)
    reason = np.where(dec_bad, np.where(st[inv_a] == AK.NO_FIT, _R_DEC_NOFIT, _R_DEC_TPOT), reason)
    reason = np.where(~ok_peak, np.where(refused, _R_LAYOUT, np.where(piped_refused, _R_PIPELINE, _R_NOPEAK)),
                      reason)
    reason = np.where(too_many, _R_TOO_MANY, reason)
    below = ok & (capacity < served * (1.0 - 1e-9))
    reason = np.where(below, _R_BELOW, reason)
    # more than a tenth of the requests cannot be served by any plan of the model (the screen's rule)
    too_long = ctx_bad >= 0
    reason = np.where(too_long, ctx_bad, reason)
    ok = ok & ~too_long
    feasible = ok & ~below
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        cost = np.where(feasible, gpus * price / (served * mean_o * 3600.0) * 1e6, np.inf)
        eff_c = tp_vals * pp_vals * price / (cap_c * mean_o * 3600.0) * 1e6
        eff_d = (pt / cap_p + dt / cap_d) * price / (mean_o * 3600.0) * 1e6
        eff = np.where(ok_plan & ~too_long, np.where(disagg, eff_d, eff_c), np.inf)
        tok_gpu = np.where(feasible, served * mean_o / gpus, np.nan)
    lat_p = T.lat_p[src]
    chunk_eff = np.where(disagg, 0, cc[inv_a])
    step_c = cstep[inv_a]
    with np.errstate(invalid="ignore"):
        ttft_c = np.ceil(lat_p / np.maximum(chunk_eff, 1)) * step_c
        ttft_d = ps[inv_b] + lat_p * T.params[np.maximum(row_b, 0), P_KVPG] / T.params[np.maximum(row_b, 0), P_NET_BW]
    a_ttft = np.where(ok_plan, np.where(disagg, ttft_d, ttft_c), np.nan)
    a_tpot = np.where(ok_plan, np.where(disagg, dstep[inv_a], step_c), np.nan)
    chunk_row = np.where(col_ok, chunk_eff, np.where(disagg, 0, chunk_vals[c["chunk_tokens"]]))
    inst_row = np.where(ok, n_c, inst_vals)
    pi_row = np.where(ok, n_p, pi)
    di_row = np.where(ok, n_d, di)
    model_names = np.array([m.name for m in T.models], dtype=object)
    src_labels = np.array([x.label for x in grid.sources], dtype=object)
    price_labels = np.array([_price_label(v) for v in A["price"]], dtype=object)
    col = ~disagg
    return {
        "point_id": _hex(_point_ids(grid, c, n)), "point": ix.astype(np.int64),
        "model": model_names[mi], "gpu": np.array(A["gpu"], dtype=object)[c["gpu"]],
        "precision": np.array(A["precision"], dtype=object)[c["precision"]],
        "mode": np.array(A["mode"], dtype=object)[c["mode"]],
        "tp": _nullable(tp_vals, col), "pp": _nullable(pp_vals, col), "prefill_tp": _nullable(pt, disagg),
        "decode_tp": _nullable(dt, disagg),
        "layout": np.array(A["layout"], dtype=object)[c["layout"]],
        # the point's own chunk and counts, so that every row names its point: the screen's where it
        # sized them, the grid's where it gave them, missing where neither (an infeasible point
        # with the axis on auto: nothing was sized)
        "chunk_tokens": _nullable(chunk_row, col & (chunk_row > 0)), "max_batch": mb,
        "instances": _nullable(inst_row, col & (inst_row > 0)),
        "prefill_instances": _nullable(pi_row, disagg & (pi_row > 0)),
        "decode_instances": _nullable(di_row, disagg & (di_row > 0)),
        "workload": src_labels[src], "rate_req_per_s": rate, "ttft_s": T.ttft[src, c["ttft_s"]],
        "tpot_s": T.tpot[src, c["tpot_s"]], "price": price_labels[c["price"]], "price_usd_per_gpu_hour": price,
        "mean_prompt_tokens": T.mean_p[mi, src], "mean_output_tokens": mean_o,
        "instance_capacity_req_per_s": np.where(disagg, cap_d, cap_c),
        "prefill_capacity_req_per_s": np.where(disagg, cap_p, np.nan),
        "decode_capacity_req_per_s": np.where(disagg, cap_d, np.nan),
        "capacity_req_per_s": np.where(ok, capacity, 0.0),
        "batch": np.where(ok_peak, np.where(disagg, db[inv_a], cb[inv_a]), 0).astype(np.int64),
        "analytic_ttft_s": a_ttft, "analytic_tpot_s": a_tpot,
        "gpus": np.where(ok, gpus, 0).astype(np.int64), "usd_per_hour": np.where(ok, gpus * price, 0.0),
        "usd_per_million_output_tokens": cost, "efficiency_usd_per_million_output_tokens": eff,
        "output_tokens_per_s_per_gpu": tok_gpu, "feasible": feasible, "reason": T.reasons[reason],
    }


def _sized(given: np.ndarray, rate: np.ndarray, cap: np.ndarray) -> tuple:
    """Instances of points: the given count, else the planner's count for the rate, never overflowing.

    Parameters
    ----------
    given : numpy.ndarray of int64
        The axis value, 0 for ``auto`` (at most :data:`fastsim.sweep.grid.MAX_INSTANCES`, checked
        by :func:`fastsim.sweep.make_grid`).
    rate, cap : numpy.ndarray of float64
        Target rate and one instance's capacity (req/s; capacity <= 0: the instance does not work).

    Returns
    -------
    (numpy.ndarray of int64, numpy.ndarray of bool)
        The counts (:func:`fastsim.analytic.instances_needed`'s ``ceil(rate / capacity)``, computed
        in floating point; 0 where the capacity is not positive or the count is too large), and
        whether an ``auto`` count exceeds :data:`~fastsim.sweep.grid.MAX_INSTANCES` (a rate of
        1e308 req/s gave a count past int64 before: negative GPUs and costs).
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        n = np.ceil(rate / cap * (1.0 - 1e-9))
    n = np.where(cap > 0, np.maximum(n, 1.0), 0.0)
    big = (given == 0) & ~(n <= MAX_INSTANCES)            # NaN (inf / inf) counts as too large too
    n = np.where(given > 0, given, np.where(big, 0, n).astype(np.int64))
    return n.astype(np.int64), big & (cap > 0)


def _nullable(values: np.ndarray, valid: np.ndarray) -> pd.arrays.IntegerArray:
    """A nullable Int64 column: ``values`` where ``valid``, missing elsewhere."""
    valid = np.asarray(valid, dtype=bool)
    return pd.arrays.IntegerArray(np.where(valid, values, 0).astype(np.int64), ~valid)


def _empty_sim(n: int) -> dict:
    nan = np.full(n, np.nan)
    return {"verified": np.zeros(n, bool), "sim_runs": np.zeros(n, np.int64), "sim_measured": np.zeros(n, np.int64),
            "sim_rejected": np.zeros(n, np.int64), "sim_attainment": nan.copy(),
            "sim_attainment_ci95_lo": nan.copy(), "sim_attainment_ci95_hi": nan.copy(), "sim_ttft_p90_s": nan.copy(),
            "sim_tpot_p90_s": nan.copy(), "sim_overloaded": np.zeros(n, bool), "sim_passed": np.zeros(n, bool),
            "sim_reason": np.full(n, "", dtype=object),
            "sim_capacity_req_per_s": nan.copy(), "sim_capacity_ci95_lo_req_per_s": nan.copy(),
            "sim_capacity_ci95_hi_req_per_s": nan.copy(), "sim_capacity_probes": np.zeros(n, np.int64),
            "sim_capacity_seed_runs": np.zeros(n, np.int64), "sim_capacity_stopped_runs": np.zeros(n, np.int64)}


def _frame(cols: dict) -> pd.DataFrame:
    """The table of freshly computed columns (:func:`_analytic_chunk`, :func:`_empty_sim`), typed
    as :func:`_typed` types them but without its checks: the string columns are object arrays of
    str with no missing value, the others already have their dtypes."""
    out = {}
    for name, dt in COLUMNS:
        v = cols[name]
        if dt == "str":
            out[name] = pd.Series(v, dtype=object, copy=False)
        elif dt == "Int64":
            out[name] = pd.Series(v, dtype="Int64", copy=False)
        else:
            out[name] = pd.Series(np.asarray(v, dtype=dt), copy=False)
    return pd.DataFrame(out, copy=False)


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    """Columns in :data:`COLUMNS` order with their dtypes (strings as object)."""
    out = {}
    for name, dt in COLUMNS:
        col = df[name]
        if dt == "str":
            out[name] = col.astype(object).where(col.notna(), "").astype(str).astype(object)
        elif dt == "bool":
            out[name] = col.astype(bool)
        elif dt == "Int64":
            out[name] = pd.array(col.astype(object).where(col.notna(), None), dtype="Int64") \
                if col.dtype == object else col.astype("Int64")
        else:
            out[name] = col.astype(dt)
    return pd.DataFrame(out, index=df.index)


def analytic_table(grid, *, catalog: Catalog | None = None, settings: SweepSettings | None = None,
                   chunk_points: int = 1_000_000) -> pd.DataFrame:
    """The analytic result of every point of a grid (no simulation), vectorized.

    Parameters
    ----------
    grid : SweepGrid or mapping of axes
    catalog : Catalog, optional
        Used when ``grid`` is a mapping.
    settings : SweepSettings, optional
        Margins, chunk set and step constants (defaults as the planner's).
    chunk_points : int
        Points evaluated per kernel call (bounds memory).

    Returns
    -------
    pandas.DataFrame
        One row per distinct plan (``grid.n_points`` rows) in grid order, ``point`` numbering them
        from 0, the columns of :data:`COLUMNS` (simulation columns empty: ``verified`` False,
        numbers NaN). A point is not repeated over the values of an axis its mode does not use,
        nor an MoE plan whose TPs are all 1 over the layouts (the same plan at TP 1: listed under
        ``tp``, else under the first layout named; :func:`fastsim.sweep.make_grid`, Notes).

    Raises
    ------
    FastsimInputError
        A bad grid (see :func:`make_grid`).
    """
    grid = grid if isinstance(grid, SweepGrid) else make_grid(grid, catalog)
    s = settings or SweepSettings()
    T = _tables(grid, s)
    parts = []
    n_enum = _n_enumerated(grid.axes)
    done = 0                                    # points numbered so far
    for a in range(0, n_enum, chunk_points):
        c = _codes(grid, np.arange(a, min(a + chunk_points, n_enum), dtype=np.int64))
        copy = _layout_repeats(grid, c)
        if copy.any():
            c = {k: v[~copy] for k, v in c.items()}
        n = c["mode"].shape[0]
        if n == 0:
            continue
        cols = _analytic_chunk(grid, s, T, c, np.arange(done, done + n, dtype=np.int64))
        cols.update(_empty_sim(n))
        parts.append(_frame(cols))
        done += n
    if done != grid.n_points:                   # the count and the enumeration must agree
        raise RuntimeError(f"sweep grid: {done} points enumerated, SweepGrid.n_points counts {grid.n_points}")
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
