"""Figures of simulations and capacity searches (matplotlib, Agg backend; nothing is shown).

:func:`check_plot_path` is the one check of a ``--plot`` destination, run by every command that
draws before it does any work, so that a bad path ends in a one-line error instead of a traceback
after the run.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np

from .errors import FastsimInputError

__all__ = ["plot_simulation", "plot_capacity", "check_plot_path", "plot_formats"]

# Formats matplotlib lists that need more than matplotlib itself (pgf runs LaTeX).
_NEEDS_EXTERNAL = {"pgf"}


def plot_formats() -> tuple:
    """File extensions a plot may be written as (without the dot), from matplotlib's own list.

    Returns
    -------
    tuple of str
        Sorted, lower case, e.g. ``('eps', 'jpeg', 'jpg', 'pdf', 'png', ..., 'svg', ...)``;
        ``pgf`` is left out (it needs a LaTeX installation).
    """
    from matplotlib.backend_bases import FigureCanvasBase
    return tuple(sorted(set(FigureCanvasBase.get_supported_filetypes()) - _NEEDS_EXTERNAL))


def _formats_text(formats) -> str:
    common = [f".{f}" for f in ("png", "pdf", "svg") if f in formats]
    rest = [f".{f}" for f in formats if f not in ("png", "pdf", "svg")]
    return ", ".join(common + rest)


def _writable_dir(field: str, path: str, directory: str, what: str) -> None:
    """Raise unless a file can be created in ``directory`` (tried, not guessed: root ignores modes)."""
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".fastsim-write-check-"):
            pass
    except OSError as exc:
        raise FastsimInputError(field, path, f"{what} (cannot write in {directory!r}: "
                                             f"{exc.strerror or exc})") from None


def check_plot_path(path, kind: str = "file", *, field: str = "--plot", files=()) -> str:
    """Check where a plot is to be written, before any work is done.

    Parameters
    ----------
    path : str or path-like
        The destination as the user gave it.
    kind : {'file', 'dir'}, default 'file'
        ``'file'``: one figure. Its extension must be a format matplotlib writes
        (:func:`plot_formats`: .png, .pdf, .svg, ...), the path must not be a directory and its
        parent directory must exist and be writable; an existing file is overwritten.
        ``'dir'``: a directory to write several figures into. It is created when missing and its
        parent exists; an existing file of that name is an error; it must be writable.
    field : str, default '--plot'
        The name the error gives the value (a CLI flag or an argument name).
    files : sequence of str, optional
        With ``kind='dir'``: names of the files that will be written inside; none of them may be
        an existing directory (existing files are overwritten).

    Returns
    -------
    str
        ``path`` as a string.

    Raises
    ------
    FastsimInputError
        Naming ``field``, the value and what is allowed, for every case above.
    """
    if kind not in ("file", "dir"):
        raise FastsimInputError("kind", kind, "'file' or 'dir'")
    try:
        text = os.fspath(path)
    except TypeError:
        raise FastsimInputError(field, path, "a file or directory path") from None
    if not isinstance(text, str) or not text.strip():
        raise FastsimInputError(field, path, "a non-empty file or directory path")
    if kind == "file":
        formats = plot_formats()
        ext = os.path.splitext(text)[1].lower().lstrip(".")
        if ext not in formats:
            raise FastsimInputError(field, text, "a file name ending in a format matplotlib writes: "
                                                 + _formats_text(formats))
        if os.path.isdir(text):
            raise FastsimInputError(field, text, "a file name (it is an existing directory)")
        parent = os.path.dirname(text) or "."
        what = "a file in an existing, writable directory"
        if not os.path.isdir(parent):
            reason = "is not a directory" if os.path.exists(parent) else "does not exist"
            raise FastsimInputError(field, text, f"{what} ({parent!r} {reason})")
        if os.path.exists(text) and not os.access(text, os.W_OK):
            raise FastsimInputError(field, text, f"{what} (the existing file is read-only)")
        _writable_dir(field, text, parent, what)
        return text
    what = "a directory, or a new one in an existing, writable directory"
    if os.path.exists(text) and not os.path.isdir(text):
        raise FastsimInputError(field, text, f"{what} (it is an existing file)")
    if not os.path.isdir(text):
        parent = os.path.dirname(os.path.normpath(text)) or "."
        if not os.path.isdir(parent):
            reason = "is not a directory" if os.path.exists(parent) else "does not exist"
            raise FastsimInputError(field, text, f"{what} ({parent!r} {reason})")
        try:
            os.mkdir(text)
        except OSError as exc:
            raise FastsimInputError(field, text, f"{what} (cannot create it: {exc.strerror or exc})") from None
    _writable_dir(field, text, text, what)
    for name in files:
        inside = os.path.join(text, name)
        if os.path.isdir(inside):
            raise FastsimInputError(field, text, f"{what} where {name!r} can be written "
                                                 "(it is an existing directory)")
        if os.path.exists(inside) and not os.access(inside, os.W_OK):
            raise FastsimInputError(field, text, f"{what} where {name!r} can be written (it is read-only)")
    return text


def _figure(nrows=1, ncols=1, size=(10, 4)):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=size, dpi=110)
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols)
    return fig, axes


def _cdf(ax, values, label):
    """Empirical CDF over all values; +inf values count in the denominator but are not drawn."""
    n = values.size
    v = np.sort(values[np.isfinite(values)])
    if v.size:
        ax.plot(v, np.arange(1, v.size + 1) / n, label=label)


def plot_simulation(results, path: str, *, ttft_slo_s: float, tpot_slo_s: float, title: str = "",
                    horizon_s: float | None = None, measure_window=(0.2, 0.8),
                    end_s: float | None = None) -> str:
    """TTFT and TPOT CDFs of the measured requests and the requests in system over time, per run.

    The CDFs are over the measured requests (arrival in ``measure_window`` x ``horizon_s``), the
    same ones the attainment and the percentiles count; a request that never reached its first
    (last) token counts as +inf, so its curve stays below 1, as the P90 in the table does.

    Parameters
    ----------
    results : sequence of fastsim.sim.SimResult
        One per run (seed), each drawn as one curve.
    path : str
        Image file to write, its format taken from the extension (checked with
        :func:`check_plot_path` by the command line, not here).
    ttft_slo_s, tpot_slo_s : float
        Targets drawn as vertical lines (s).
    title : str
        Figure title.
    horizon_s : float, optional
        Arrival window of the runs; default: the end of the sample grid.
    measure_window : (float, float)
        Fractions of the horizon whose arrivals are measured.
    end_s : float, optional
        Where the load-over-time panel ends (s): a run that drains passes its last finish (first
        arrival plus makespan), not the horizon it was simulated to; default: the sample grid's end.

    Returns
    -------
    str
        The path written.

    Raises
    ------
    ValueError, OSError
        From matplotlib, for an unknown extension or a path that cannot be written (call
        :func:`check_plot_path` first to get a :class:`FastsimInputError` instead).
    """
    fig, (a1, a2, a3) = _figure(1, 3, (14, 4))
    for i, r in enumerate(results):
        h = horizon_s if horizon_s is not None else (float(r.sample_t_s[-1]) + float(r.sample_t_s[1] - r.sample_t_s[0])
                                                     if len(r.sample_t_s) > 1 else float(np.max(r.arrival_s)))
        sel = (r.arrival_s >= measure_window[0] * h) & (r.arrival_s < measure_window[1] * h)
        first, fin, o = r.first_token_s[sel], r.finish_s[sel], r.output_tokens[sel]
        ttft = np.where(np.isnan(first), np.inf, first - r.arrival_s[sel])
        many = o > 1
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(np.isnan(fin[many]) | np.isnan(first[many]), np.inf,
                            (fin[many] - first[many]) / (o[many] - 1))
        _cdf(a1, ttft, f"seed {i}")
        _cdf(a2, tpot * 1e3, f"seed {i}")
        keep = slice(None) if end_s is None else r.sample_t_s <= end_s
        a3.plot(r.sample_t_s[keep], r.in_system[keep], lw=0.8, label=f"seed {i}")
    a1.axvline(ttft_slo_s, color="k", ls="--", lw=1)
    a2.axvline(tpot_slo_s * 1e3, color="k", ls="--", lw=1)
    a1.axhline(0.9, color="grey", ls=":", lw=1)
    a2.axhline(0.9, color="grey", ls=":", lw=1)
    a1.set(xlabel="TTFT (s)", ylabel="fraction of measured requests", title="TTFT CDF (measured requests)")
    a2.set(xlabel="TPOT (ms)", title="TPOT CDF (measured, O > 1)")
    a3.set(xlabel="time (s)", ylabel="requests in system", title="load over time")
    if end_s is not None and end_s > 0:
        a3.set_xlim(0.0, end_s)
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
        From :func:`fastsim.search.max_sustainable_rate`.
    path : str
        Image file to write, its format taken from the extension (.png, .pdf, .svg, ...; not
        checked here: see :func:`check_plot_path`).
    title : str
        Axes title.

    Returns
    -------
    str
        The path written.

    Raises
    ------
    ValueError, OSError
        From matplotlib, for an unknown extension or a path that cannot be written.
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
    # an unstable result (contradicting probes) or an undetermined one has no capacity to draw
    # (fastsim.search.CapacityResult.unstable): the probes alone are shown, and the title says why
    stable = not getattr(result, "unstable", False) and np.isfinite(result.rate_req_per_s)
    if stable:
        ax.axvline(result.rate_req_per_s, color="tab:blue", lw=1.5,
                   label=f"capacity {result.rate_req_per_s:.2f} req/s")
        if np.isfinite(result.ci95[0]) and np.isfinite(result.ci95[1]) and result.ci95[1] > result.ci95[0]:
            ax.axvspan(result.ci95[0], result.ci95[1], color="tab:blue", alpha=0.15, label="95% CI across seeds")
    else:
        title = (title + "\n" if title else "") + ("no stable answer: the probes contradict each other"
                                                   if getattr(result, "unstable", False) else "no probe measured a request")
    if result.analytic_req_per_s > 0:
        ax.axvline(result.analytic_req_per_s, color="tab:orange", ls=":", label="analytic capacity")
    ax.set(xlabel="rate (req/s)", ylabel="SLO attainment (pooled)", title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    return path
