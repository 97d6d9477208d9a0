"""``fastsim validate --plot``: predicted against real on log-log axes, with the y = x line."""
from __future__ import annotations

__all__ = ["plot_validation"]

_COLOURS = {"trtllm": "tab:green", "vllm": "tab:blue", "sglang": "tab:orange"}


def plot_validation(records, path) -> None:
    """Scatter fastsim's figures against the measured ones, one panel per unit, coloured by engine.

    Parameters
    ----------
    records : sequence of dict
        Row records (:meth:`fastsim.validate.RowResult.record`); rows without a prediction are
        left out of the plot (they are listed in the table). With none, the figure says so (as
        ``fastsim sweep`` and ``fastsim capacity`` draw a plot with nothing to show): empty axes
        titled with the count of rows not expressed and their most common reason.
    path : str or os.PathLike
        The image to write (its format from the extension, checked first by
        :func:`fastsim.plots.check_plot_path`).

    Raises
    ------
    ValueError, OSError
        From matplotlib, for an unknown extension or a path that cannot be written.
    """
    from matplotlib.figure import Figure
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    records = list(records)
    done = [r for r in records if r.get("predicted") is not None]
    if not done:
        fig = Figure(figsize=(6.0, 5.5))
        FigureCanvasAgg(fig)
        ax = fig.subplots()
        heads = {}
        for r in records:
            h = str(r.get("reason") or "no figure").split(" (", 1)[0].split(":", 1)[0]
            heads[h] = heads.get(h, 0) + 1
        top = max(heads.items(), key=lambda kv: kv[1]) if heads else None
        text = f"no expressed row: none of the {len(records):,} rows has a fastsim figure"
        if top:
            text += f"\n(most common reason, {top[1]:,} row{'' if top[1] == 1 else 's'}: {top[0]})"
        ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, transform=ax.transAxes, fontsize=9)
        ax.set_xlabel("measured")
        ax.set_ylabel("fastsim")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title("fastsim against measured: nothing to compare")
        fig.savefig(path, dpi=110)
        return
    panels = [("tokens/s", [r for r in done if r["metric"] == "output_tokens_per_s"]),
              ("seconds", [r for r in done if r["metric"] != "output_tokens_per_s"])]
    panels = [(u, rs) for u, rs in panels if rs]
    fig = Figure(figsize=(6.0 * len(panels), 5.5))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (unit, rs) in zip(axes, panels):
        lo = min(min(r["real"], r["predicted"]) for r in rs) / 1.5
        hi = max(max(r["real"], r["predicted"]) for r in rs) * 1.5
        ax.plot([lo, hi], [lo, hi], color="0.3", lw=1, label="y = x")
        for f, ls in ((2.0, ":"),):
            ax.plot([lo, hi], [lo * f, hi * f], color="0.7", lw=0.8, ls=ls, label="x 2, x 1/2")
            ax.plot([lo, hi], [lo / f, hi / f], color="0.7", lw=0.8, ls=ls)
        for eng in sorted({r["engine"] for r in rs}):
            pts = [r for r in rs if r["engine"] == eng]
            ax.scatter([r["real"] for r in pts], [r["predicted"] for r in pts], s=14, alpha=0.75,
                       color=_COLOURS.get(eng, "tab:gray"), label=f"{eng} ({len(pts)})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel(f"measured ({unit})")
        ax.set_ylabel(f"fastsim ({unit})")
        ax.set_title("output throughput" if unit == "tokens/s" else "latencies (TTFT, ITL, TPOT, E2E, step)")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
