"""Figures of simulations and capacity searches (matplotlib, Agg backend; nothing is shown)."""
from __future__ import annotations

import numpy as np

__all__ = ["plot_simulation", "plot_capacity"]


def _figure(nrows=1, ncols=1, size=(10, 4)):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=size, dpi=110)
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols)
    return fig, axes


def _cdf(ax, values, label):
    v = np.sort(values[np.isfinite(values)])
    if v.size:
        ax.plot(v, np.arange(1, v.size + 1) / v.size, label=label)


def plot_simulation(results, path: str, *, ttft_slo_s: float, tpot_slo_s: float, title: str = "") -> str:
    """TTFT and TPOT CDFs and the number of requests in the system over time, one line per run.

    Parameters
    ----------
    results : sequence of fastsim.sim.SimResult
    path : str
        PNG file to write.
    ttft_slo_s, tpot_slo_s : float
        Targets drawn as vertical lines (s).

    Returns
    -------
    str
        The path written.
    """
    fig, (a1, a2, a3) = _figure(1, 3, (14, 4))
    for i, r in enumerate(results):
        _cdf(a1, r.first_token_s - r.arrival_s, f"seed {i}")
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(r.output_tokens > 1, (r.finish_s - r.first_token_s) / (r.output_tokens - 1), np.nan)
        _cdf(a2, tpot * 1e3, f"seed {i}")
        a3.plot(r.sample_t_s, r.in_system, lw=0.8, label=f"seed {i}")
    a1.axvline(ttft_slo_s, color="k", ls="--", lw=1)
    a2.axvline(tpot_slo_s * 1e3, color="k", ls="--", lw=1)
    a1.axhline(0.9, color="grey", ls=":", lw=1)
    a2.axhline(0.9, color="grey", ls=":", lw=1)
    a1.set(xlabel="TTFT (s)", ylabel="fraction of requests", title="TTFT CDF")
    a2.set(xlabel="TPOT (ms)", title="TPOT CDF")
    a3.set(xlabel="time (s)", ylabel="requests in system", title="load over time")
    if len(results) <= 8:
        a3.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    return path


def plot_capacity(result, path: str, *, title: str = "") -> str:
    """Pooled attainment of every bisection probe against its rate, with the answer and its 95% CI.

    Parameters
    ----------
    result : fastsim.search.CapacityResult
    path : str
        PNG file to write.

    Returns
    -------
    str
    """
    fig, ax = _figure(1, 1, (7, 4.5))
    rates = np.array([p[0] for p in result.probes])
    att = np.array([p[1] for p in result.probes])
    ok = np.array([p[3] for p in result.probes])
    order = np.argsort(rates)
    ax.plot(rates[order], att[order], color="0.6", lw=1)
    ax.scatter(rates[ok], att[ok], color="tab:green", label="probe passed", zorder=3)
    ax.scatter(rates[~ok], att[~ok], color="tab:red", marker="x", label="probe failed", zorder=3)
    ax.axhline(0.9, color="k", ls="--", lw=1, label="attainment target")
    ax.axvline(result.rate_req_per_s, color="tab:blue", lw=1.5, label=f"capacity {result.rate_req_per_s:.2f} req/s")
    ax.axvspan(result.ci95[0], result.ci95[1], color="tab:blue", alpha=0.15, label="95% CI across seeds")
    if result.analytic_req_per_s > 0:
        ax.axvline(result.analytic_req_per_s, color="tab:orange", ls=":", label="analytic capacity")
    ax.set(xlabel="rate (req/s)", ylabel="SLO attainment (pooled)", title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    return path
