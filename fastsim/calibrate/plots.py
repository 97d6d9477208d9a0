"""Plots of a calibration: measured against modelled times, measured against simulated serving metrics.

matplotlib is imported when a plot is drawn (the Agg backend: files only), not with the package.
"""
from __future__ import annotations

import numpy as np

from .fit import CalibrationReport
from .serving import ServingFit

__all__ = ["plot_calibration", "plot_serving"]

def plot_calibration(report: CalibrationReport, path, *, title: str | None = None) -> None:
    """Measured vs modelled times, one panel per kind of fit (log-log, the identity and +-15%).

    Parameters
    ----------
    report : CalibrationReport
        Plots the first fit of each kind (the ones the calibration uses).
    path : str or path-like
        Image file (any format matplotlib writes).
    title : str, optional
        Figure title.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    firsts = {}
    for f in report.fits:
        firsts.setdefault(f.kind, f)
    fig, axes = plt.subplots(1, len(firsts), figsize=(5.2 * len(firsts), 4.8), squeeze=False)
    for ax, f in zip(axes[0], firsts.values()):
        p = f.points
        for op, g in p.groupby("operation", sort=True):
            ax.scatter(g.measured_s * 1e3, g.modelled_s * 1e3, s=5, alpha=0.5, label=op)
        lo = float(min(p.measured_s.min(), p.modelled_s.min())) * 1e3 * 0.8
        hi = float(max(p.measured_s.max(), p.modelled_s.max())) * 1e3 * 1.25
        xs = np.array([lo, hi])
        ax.plot(xs, xs, "k-", lw=1)
        ax.plot(xs, xs * 1.15, "k:", lw=0.8)
        ax.plot(xs, xs / 1.15, "k:", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured (ms)")
        ax.set_ylabel("modelled (ms)")
        ax.set_title(f"{f.label}\nmedian |error| {f.median_abs_rel_error:.1%}", fontsize=9)
        ax.legend(fontsize=7, markerscale=2)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_serving(fit: ServingFit, path, *, title: str | None = None) -> None:
    """Measured (markers) and simulated (lines) serving metrics against the request rate, one panel per metric.

    Parameters
    ----------
    fit : ServingFit
    path : str or path-like
        Image file (any format matplotlib writes).
    title : str, optional
        Figure title (default the fit's label).
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    p = fit.points
    kinds = [("ttft", "TTFT (ms)", 1e3), ("tpot", "TPOT (ms)", 1e3), ("output_throughput", "output tokens/s", 1.0)]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    for ax, (kind, ylabel, scale) in zip(axes, kinds):
        for metric, g in p[p.metric.str.startswith(kind)].groupby("metric", sort=True):
            g = g.sort_values("rate_req_per_s")
            line, = ax.plot(g.rate_req_per_s, g.simulated * scale, "-", label=f"{metric} simulated")
            ax.plot(g.rate_req_per_s, g.measured * scale, "o", color=line.get_color(), label=f"{metric} measured")
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
    fig.suptitle(title or fit.label, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
