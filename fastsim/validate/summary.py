"""The errors of a validation: per row, and summarised per metric, engine, source family and overall.

Per row: ``ratio = predicted / real`` and the absolute percentage error ``|ratio - 1| x 100``.
A group's figures are the **median absolute percentage error** (robust to a few wild rows, the
statistic inference-sim and the issue's tally report) and the **geometric-mean ratio**
``exp(mean(log ratio))``, whose side of 1 says whether fastsim is optimistic: above 1 on
throughput (it promises more tokens/s than the engine gave), below 1 on latency (it promises
faster responses). Rows fastsim cannot express are counted apart and enter no figure.
"""
from __future__ import annotations

import math

from typing import NamedTuple

import numpy as np

__all__ = ["ValidationReport", "summarize", "group_stats", "THROUGHPUT_METRICS", "optimism"]

#: Metrics where a ratio above 1 is optimistic; on every other metric (seconds) below 1 is.
THROUGHPUT_METRICS = ("output_tokens_per_s",)


def optimism(metric: str, ratio: float | None) -> str | None:
    """Whether a ratio is optimistic for its metric.

    Parameters
    ----------
    metric : str
        A metric of the measurement schema.
    ratio : float or None
        ``predicted / real``.

    Returns
    -------
    str or None
        ``"optimistic"`` (fastsim promises more than the engine gave), ``"pessimistic"``, or None
        without a ratio.
    """
    if ratio is None:
        return None
    better = ratio > 1.0 if metric in THROUGHPUT_METRICS else ratio < 1.0
    return "optimistic" if better else "pessimistic"


def group_stats(ratios) -> dict:
    """The figures of one group of rows.

    Parameters
    ----------
    ratios : sequence of float
        ``predicted / real`` of the group's expressed rows, each > 0.

    Returns
    -------
    dict
        ``rows`` (int), ``median_abs_pct_error`` (percent), ``geomean_ratio``; the two are None
        for an empty group.
    """
    r = np.asarray(list(ratios), dtype=np.float64)
    if r.size == 0:
        return {"rows": 0, "median_abs_pct_error": None, "geomean_ratio": None}
    return {"rows": int(r.size), "median_abs_pct_error": float(np.median(np.abs(r - 1.0)) * 100.0),
            "geomean_ratio": float(math.exp(np.mean(np.log(r))))}


def summarize(records) -> dict:
    """Summarise row records (:meth:`fastsim.validate.RowResult.record`, or dicts with ``engine``,
    ``metric``, ``family``, ``ratio`` and ``reason``).

    Parameters
    ----------
    records : sequence of dict

    Returns
    -------
    dict
        ``overall`` (:func:`group_stats` of every expressed row), ``per_metric``, ``per_engine``,
        ``per_family`` and ``per_metric_engine`` (``"metric / engine"``): each ``{name:
        group_stats}`` in sorted order; ``rows`` (all rows), ``expressed``, ``not_expressed``
        and ``not_expressed_reasons`` (``{reason's head: count}``, the head being the reason up to
        its first ``(`` or ``:``).
    """
    recs = list(records)
    done = [r for r in recs if r.get("ratio") is not None]

    def by(key):
        groups = {}
        for r in done:
            groups.setdefault(key(r), []).append(r["ratio"])
        return {k: group_stats(v) for k, v in sorted(groups.items())}
    heads = {}
    for r in recs:
        if r.get("ratio") is None:
            h = str(r.get("reason") or "no figure")
            for sep in (" (", ":"):
                h = h.split(sep, 1)[0]
            heads[h] = heads.get(h, 0) + 1
    return {"rows": len(recs), "expressed": len(done), "not_expressed": len(recs) - len(done),
            "not_expressed_reasons": dict(sorted(heads.items(), key=lambda kv: -kv[1])),
            "overall": group_stats(r["ratio"] for r in done),
            "per_metric": by(lambda r: r["metric"]), "per_engine": by(lambda r: r["engine"]),
            "per_family": by(lambda r: r["family"]),
            "per_metric_engine": by(lambda r: f"{r['metric']} / {r['engine']}")}


class ValidationReport(NamedTuple):
    """The rows of a validation and the notes on how they were run (:func:`fastsim.validate.validate`).

    Attributes
    ----------
    results : tuple of RowResult
        One per measurement, in file order.
    notes : tuple of str
    """

    results: tuple
    notes: tuple = ()

    def records(self) -> list:
        """Row records (:meth:`fastsim.validate.RowResult.record`), in file order.

        Returns
        -------
        list of dict
        """
        return [r.record() for r in self.results]

    def summary(self) -> dict:
        """:func:`summarize` of the rows.

        Returns
        -------
        dict
        """
        return summarize(self.records())

    def to_dict(self) -> dict:
        """The JSON document of ``fastsim validate --format json``.

        Returns
        -------
        dict
            ``{"rows": [...], "summary": {...}, "notes": [...]}``; a row fastsim cannot express has
            ``predicted``, ``ratio`` and ``abs_pct_error`` null and its ``reason``.
        """
        recs = self.records()
        return {"rows": recs, "summary": summarize(recs), "notes": list(self.notes)}
