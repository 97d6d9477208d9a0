"""Pareto frontiers and plots of a sweep table, one figure per question.

A question is one model x workload x rate x TTFT target x TPOT target x price (:data:`QUESTION`);
:func:`questions` lists them, :func:`pareto_front` finds the points no other beats on two
coordinates, :func:`plot_sweep` draws each question's points, frontier and chosen plan.
"""
from __future__ import annotations

import os

import numpy as np
import pandas as pd

from ..errors import FastsimInputError
from ..layouts import instance_label
from .table import QUESTION

#: Figures :func:`plot_sweep` writes by default (one per question, in grid order).
MAX_PLOTS = 12


def pareto_front(x, y, *, maximize=(False, False)) -> np.ndarray:
    """Mask of the points no other point beats on both coordinates (the Pareto frontier).

    Parameters
    ----------
    x, y : array_like of float, shape (n,)
        Coordinates; NaN points are never on the frontier.
    maximize : (bool, bool)
        Whether larger is better on x and on y (default: smaller is better on both).

    Returns
    -------
    ndarray(bool) of shape (n,)
        True on the frontier. Ties: of identical points all are kept.

    Notes
    -----
    Inputs are not validated; ``x`` and ``y`` must have the same length.
    """
    x = np.asarray(x, dtype=np.float64) * (-1.0 if maximize[0] else 1.0)
    y = np.asarray(y, dtype=np.float64) * (-1.0 if maximize[1] else 1.0)
    ok = np.isfinite(x) & np.isfinite(y)
    idx = np.flatnonzero(ok)
    order = idx[np.lexsort((y[idx], x[idx]))]
    mask = np.zeros(x.shape[0], bool)
    best = np.inf          # lowest y among points of strictly smaller x
    k = 0
    while k < order.shape[0]:
        j = k
        while j < order.shape[0] and x[order[j]] == x[order[k]]:
            j += 1
        ymin = y[order[k]]  # sorted by y within equal x
        if ymin < best:
            for i in order[k:j]:
                if y[i] == ymin:
                    mask[i] = True
            best = ymin
        k = j
    return mask


def questions(df: pd.DataFrame) -> list:
    """The questions of a sweep table, in grid order of their first point.

    A question is one setting of :data:`QUESTION` (model, workload, rate, TTFT and TPOT targets,
    price): the plans of one question compete for one answer, and ``top-k-per-scenario`` verifies
    the ``top_k`` cheapest of each.

    Parameters
    ----------
    df : pandas.DataFrame
        A sweep table (columns of :data:`COLUMNS`, at least those of :data:`QUESTION` and
        ``point``).

    Returns
    -------
    list of (dict, ndarray(int64) of shape (k,))
        Per question its column values and the positions (``iloc``) of its k rows, sorted;
        empty for an empty table.
    """
    if not len(df):
        return []
    grouped = df.groupby(list(QUESTION), sort=False, dropna=False).indices
    out = [(dict(zip(QUESTION, key)), np.sort(rows)) for key, rows in grouped.items()]
    pos = df["point"].to_numpy()
    out.sort(key=lambda q: pos[q[1]].min())
    return out


def _chosen(g: pd.DataFrame):
    """Label of the answer of one question: the cheapest verified passing point when any point of the
    question was verified (None if none passed), else the cheapest analytically feasible one."""
    cand = g[g["verified"] & g["sim_passed"]] if g["verified"].any() else g[g["feasible"]]
    if not len(cand):
        return None
    return cand.sort_values(["usd_per_million_output_tokens", "efficiency_usd_per_million_output_tokens", "gpus",
                             "point"], kind="stable").index[0]


def _safe(text) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(text))


def _question_file(q: dict, with_model: bool) -> str:
    parts = ["pareto"] + ([_safe(q["model"])] if with_model else []) + [
        _safe(q["workload"]), f"{q['rate_req_per_s']:g}rps", f"ttft{q['ttft_s']:g}s",
        f"tpot{q['tpot_s'] * 1e3:g}ms", _safe(q["price"])]
    return "_".join(parts) + ".png"


def plot_sweep(df: pd.DataFrame, out_dir: str, *, max_plots: int | None = MAX_PLOTS,
               slo_percentile: float = 90.0) -> list:
    """Pareto plots of a sweep table, one PNG per question (matplotlib, Agg backend).

    A question is one model x workload x rate x TTFT target x TPOT target x price of the table
    (:func:`questions`); only its own points are drawn, in three panels: cost per million output
    tokens against P90 TPOT and against P90 TTFT, and output tokens/s per GPU against tokens/s per
    user (1 / TPOT), latencies on log axes (the cost too where the costs drawn span more than a
    decade), the targets as dashed lines. Latencies are the
    simulated P90 where a point was verified, the analytic estimate elsewhere. Verified points that
    passed are drawn filled with a black edge, unverified feasible points faint, verified points
    that failed as grey crosses; analytically infeasible points have no cost and are only counted
    in the title. The Pareto frontier is over the points that did not fail; the chosen plan,
    circled, is the cheapest passing point of the question when any was verified (none if none
    passed), else its cheapest analytically feasible point.

    Parameters
    ----------
    df : pandas.DataFrame
        A sweep table (:func:`run_sweep`, :func:`read_table`), or a selection of its rows.
    out_dir : str
        Directory to write (created if needed).
    max_plots : int or None, default 12
        Plot only the first questions in grid order (None: all). Select rows to plot others.
    slo_percentile : float, default 90
        The percentile the sweep judged its targets at (:attr:`SweepSettings.slo_percentile`),
        named in each title.

    Returns
    -------
    list of str
        The files written, one per question plotted.

    Raises
    ------
    FastsimInputError
        ``max_plots`` not None nor an integer >= 1.
    OSError
        ``out_dir`` cannot be created or a file cannot be written.
    """
    from ..plots import _figure
    if max_plots is not None and (isinstance(max_plots, bool) or int(max_plots) != max_plots or max_plots < 1):
        raise FastsimInputError("max_plots", max_plots, "an integer >= 1 or None")
    os.makedirs(out_dir, exist_ok=True)
    qs = questions(df)
    if max_plots is not None:
        qs = qs[:int(max_plots)]
    with_model = df["model"].nunique() > 1
    paths = []
    for q, rows in qs:
        g = df.iloc[rows].reset_index(drop=True)
        feas = g["feasible"].to_numpy(bool)
        ver = g["verified"].to_numpy(bool)
        passed = ver & g["sim_passed"].to_numpy(bool)
        failed = ver & ~passed
        tpot = np.where(ver, g["sim_tpot_p90_s"], g["analytic_tpot_s"]).astype(np.float64)
        ttft = np.where(ver, g["sim_ttft_p90_s"], g["analytic_ttft_s"]).astype(np.float64)
        cost = g["usd_per_million_output_tokens"].to_numpy(np.float64)
        per_gpu = g["output_tokens_per_s_per_gpu"].to_numpy(np.float64)
        with np.errstate(divide="ignore"):
            per_user = 1.0 / tpot
        ch = _chosen(g)
        disagg = (g["mode"] == "disaggregated").to_numpy()
        fig, axes = _figure(1, 3, (17, 5.2))
        for ax, x, y, xl, yl, mx, target in (
                (axes[0], tpot * 1e3, cost, "P90 TPOT (ms)", "$ per million output tokens",
                 (False, False), q["tpot_s"] * 1e3),
                (axes[1], ttft, cost, "P90 TTFT (s)", "$ per million output tokens",
                 (False, False), q["ttft_s"]),
                (axes[2], per_user, per_gpu, "tokens/s per user (1 / P90 TPOT)",
                 "output tokens/s per GPU", (True, True), 1.0 / q["tpot_s"])):
            drawn = feas & np.isfinite(x) & (x > 0) & np.isfinite(y)
            for mode_sel, mk, colour, mode in ((~disagg, "o", "C0", "colocated"), (disagg, "s", "C1", "disaggregated")):
                m = drawn & mode_sel & ~ver
                if m.any():
                    ax.scatter(x[m], y[m], s=14, alpha=0.35, marker=mk, color=colour, label=f"{mode} (analytic)")
                m = drawn & mode_sel & passed
                if m.any():
                    ax.scatter(x[m], y[m], s=34, marker=mk, color=colour, edgecolors="k", lw=0.8,
                               label=f"{mode}, simulated: passed")
            m = drawn & failed
            if m.any():
                ax.scatter(x[m], y[m], s=34, marker="x", color="0.55", lw=1.2, label="simulated: failed")
            ok = drawn & ~failed
            front = pareto_front(np.where(ok, x, np.nan), y, maximize=mx)
            o = np.flatnonzero(front)
            o = o[np.argsort(x[o])]
            if o.size:
                ax.plot(x[o], y[o], "-", color="crimson", lw=1.3, marker="+", ms=9,
                        label="Pareto frontier (not failing)")
            if ch is not None and drawn[ch]:
                ax.scatter([x[ch]], [y[ch]], s=200, facecolors="none", edgecolors="k", lw=2,
                           label=f"chosen: {_describe_row(g.loc[ch])}, ${cost[ch]:.3f}/M")
            if drawn.any():
                ax.axvline(target, color="k", ls="--", lw=1, label="target")
                _log_x(ax)
                if ax is not axes[2]:
                    _log_cost(ax, y[drawn])
            else:
                ax.text(0.5, 0.5, "no feasible configuration", ha="center", va="center", transform=ax.transAxes)
            ax.set(xlabel=xl, ylabel=yl)
            ax.grid(alpha=0.3, which="both")
            if ax is axes[0] and drawn.any():
                ax.legend(fontsize=7)
        head = (f"{q['model']}: " if with_model else "") + (
            f"{q['workload']} at {q['rate_req_per_s']:g} req/s, P{slo_percentile:g} TTFT <= {q['ttft_s']:g} s, "
            f"P{slo_percentile:g} TPOT <= {q['tpot_s'] * 1e3:g} ms, price {q['price']}")
        n_inf = int((~feas).sum())
        sub = (f"{int(feas.sum())} feasible configurations ({int(ver.sum())} simulated: {int(passed.sum())} passed, "
               f"{int(failed.sum())} failed), {n_inf} analytically infeasible (not drawn)")
        if ch is None:
            sub += "; no verified configuration passed" if ver.any() else "; nothing feasible"
        fig.suptitle(head + "\n" + sub, fontsize=10)
        fig.tight_layout()
        p = os.path.join(out_dir, _question_file(q, with_model))
        fig.savefig(p)
        paths.append(p)
    return paths


def _log_cost(ax, cost) -> None:
    """A logarithmic cost axis (labelled with plain numbers) when the costs drawn span more than a
    decade: on a linear axis one outlier (a $158/M plan) squashes the frontier against the floor."""
    cost = np.asarray(cost, np.float64)
    cost = cost[np.isfinite(cost) & (cost > 0)]
    if cost.size and cost.max() > 10.0 * cost.min():
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())


def _log_x(ax) -> None:
    """Log x axis labelled with plain numbers at 1, 2, 5 x 10^k."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _inst_label(r, tp, pp=1) -> str:
    """An instance of ``tp`` GPUs (per stage, of ``pp`` stages) in the row's layout
    (:func:`fastsim.layouts.instance_label`; a pipelined one counts its nodes of the row's GPU in the
    built-in catalog, 8 GPUs a node for a GPU it does not hold)."""
    lay = r["layout"] if "layout" in r else "tp"
    pp = 1 if pp is None or pd.isna(pp) else int(pp)
    if pp == 1:
        return instance_label(lay, tp)
    from ..catalog import default_catalog
    try:
        gpn = int(default_catalog().gpu(r["gpu"]).gpus_per_node)
    except FastsimInputError:
        gpn = 8
    return instance_label(lay, tp, pp, gpn)


def _describe_row(r) -> str:
    """A row's plan label, as :meth:`fastsim.analytic.Plan.describe` writes it."""
    def inst(n, tp, pp=1):
        return f"{n} instance{'s' if n != 1 else ''} of {_inst_label(r, tp, pp)}"
    gpus = f"({r['gpus']} GPU{'s' if r['gpus'] != 1 else ''})"
    if r["mode"] == "disaggregated":
        return (f"{r['gpu']} {r['precision']} disaggregated, prefill {inst(r['prefill_instances'], r['prefill_tp'])}"
                f" + decode {inst(r['decode_instances'], r['decode_tp'])} {gpus}")
    return f"{r['gpu']} {r['precision']} colocated, {inst(r['instances'], r['tp'], r.get('pp', 1))} {gpus}"
