"""Records of the fleet simulator: instance lifetimes in, per-window metrics out.

A fleet is a pool of identical colocated instances of one plan whose membership changes over
time. Each *lifetime* is one instance from the moment it is provisioned (billed from then) until
it is gone:

- ``provision_s``: the instance is requested (GPU time is billed from here);
- ``ready_s``: it has loaded its weights and joins the router (``ready_s >= provision_s``; the
  difference is the cold start);
- ``end_s``: it leaves (``inf``: it stays to the end of the run) by ``end_kind``:

  - ``END_DRAIN``: the router stops sending it requests; it finishes every request it holds
    and is released when empty (billed until then: :attr:`FleetRun.off_s`);
  - ``END_FAIL``: it fails; every request it holds, waiting or running, is recomputed from
    scratch on the instances still available (counted as recomputed), and it is released at
    ``end_s``.

A request that arrives when no instance is available, or that a failure leaves with none, is
not served (counted as ``rejected_no_instance``, an SLO miss).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["END_DRAIN", "END_FAIL", "FleetSchedule", "FleetRun", "WINDOW_COLUMNS"]

END_DRAIN = 0
END_FAIL = 1


class FleetSchedule(NamedTuple):
    """Instance lifetimes of a fleet (module docstring), one entry per lifetime.

    Attributes
    ----------
    provision_s, ready_s, end_s : ndarray(float64) of shape (m,)
        Seconds from the start of the run; ``0 <= provision_s <= ready_s < end_s``
        (``end_s`` may be ``inf``).
    end_kind : ndarray(int8) of shape (m,)
        ``END_DRAIN`` or ``END_FAIL`` (ignored where ``end_s`` is ``inf``).
    """

    provision_s: np.ndarray
    ready_s: np.ndarray
    end_s: np.ndarray
    end_kind: np.ndarray


# per-window integer counts, in this order (columns of FleetRun.counts)
WINDOW_COLUMNS = ("arrived", "rejected_context", "rejected_no_instance", "finished", "met",
                  "met_ttft", "met_tpot", "unfinished", "recomputed", "output_tokens", "met_output_tokens")


class FleetRun(NamedTuple):
    """What one fleet simulation returns: per-window metrics (by arrival window) and lifetimes.

    Attributes
    ----------
    window_start_s : ndarray(float64) of shape (w,)
        Start of each metric window (s); window k is ``[k x window_s, (k + 1) x window_s)``.
    window_s : float
        Width of the metric windows (s).
    counts : ndarray(int64) of shape (w, len(WINDOW_COLUMNS))
        Per window of *arrival*: requests arrived, rejected for the context / KV limit, not
        served for want of an available instance, finished, meeting both SLOs, meeting the
        TTFT SLO, meeting the TPOT SLO, unfinished at the end of the run, recomputed after a
        failure (a request recomputed twice counts twice), and output tokens of the finished
        requests.
    ttft_hist, tpot_hist : ndarray(int64) of shape (w, n_bins)
        Per window, histograms of the finished requests' TTFT and TPOT (s) on the log bins
        ``hist_edges_s``.
    hist_edges_s : ndarray(float64) of shape (n_bins + 1,)
        Bin edges (s); the first bin also takes values below ``hist_edges_s[1]``, the last those
        above ``hist_edges_s[-2]``.
    off_s : ndarray(float64) of shape (m,)
        Per lifetime, when the instance was released: the end of its drain, its failure time,
        or ``nan`` if it was still up at the end of the run.
    recomputed_by_lifetime : ndarray(int64) of shape (m,)
        Requests each failed lifetime handed back for recomputation (0 for a drain).
    attainment : float
        Requests meeting both SLOs over requests arrived (rejected, unserved and unfinished
        ones count as misses); ``nan`` if none arrived.
    n_requests : int
        Requests arrived over the run.
    horizon_s : float
        End of the arrival window (s); the run continues to ``horizon_s + drain_s`` to finish
        the requests in flight.
    met_output_tokens : ndarray(int64) of shape (w,) or None
        Per window of arrival, output tokens of the requests meeting both SLOs (the goodput);
        None in a record built without it.
    """

    window_start_s: np.ndarray
    window_s: float
    counts: np.ndarray
    ttft_hist: np.ndarray
    tpot_hist: np.ndarray
    hist_edges_s: np.ndarray
    off_s: np.ndarray
    recomputed_by_lifetime: np.ndarray
    attainment: float
    n_requests: int
    horizon_s: float
    met_output_tokens: np.ndarray | None = None
