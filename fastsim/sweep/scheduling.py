"""Where a sweep's verification chunks run: in this process, or on Dask workers.

``scheduler="tcp://host:8786"`` sends the chunks to an existing Dask cluster, ``workers=N`` starts a
local one (``pip install fastsim[dask]``); results are identical to a local run, chunks are
handed back as they complete.
"""
from __future__ import annotations

from ..errors import FastsimInputError


_ADDRESS = "the address of a running Dask scheduler, such as tcp://10.0.0.5:8786"


def _check_scheduler(scheduler) -> None:
    """Refuse a scheduler address that cannot be one, before any work (Dask would raise a
    ``ValueError`` only when it connects, after the analytic table).

    Parameters
    ----------
    scheduler : str or object
        A ``--scheduler`` address; anything but a string (a ``dask.distributed`` cluster object
        given from Python) is left to Dask.

    Raises
    ------
    FastsimInputError
        A blank address, or (with Dask installed) one without a host and port where its protocol
        needs them (``tcp``, ``tls``, ``ws``, ``wss``, ``ucx``).
    """
    if not isinstance(scheduler, str):
        return
    if not scheduler.strip():
        raise FastsimInputError("--scheduler", scheduler, _ADDRESS)
    try:
        from distributed.comm.addressing import parse_address, parse_host_port
    except ImportError:
        return          # said when the cluster is needed: install Dask
    try:
        proto, loc = parse_address(scheduler.strip())
        if proto in ("tcp", "tls", "ws", "wss", "ucx"):
            parse_host_port(loc)
    except (ValueError, TypeError) as exc:
        raise FastsimInputError("--scheduler", scheduler, f"{_ADDRESS} ({exc})") from None


def _client(scheduler, workers):
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise FastsimInputError("--scheduler/--workers", scheduler or workers,
                                "an installed Dask (pip install 'fastsim[dask]')") from None
    if scheduler:
        try:
            return Client(scheduler), None
        except (OSError, ValueError, TypeError) as exc:     # OSError: TimeoutError, refused, unknown host
            raise FastsimInputError("--scheduler", scheduler, f"{_ADDRESS} that answers (connecting failed: "
                                    f"{type(exc).__name__}: {str(exc)[:200]})") from None
    cluster = LocalCluster(n_workers=int(workers), threads_per_worker=1, processes=True, dashboard_address=":0")  # any free port, never a clash
    return Client(cluster), cluster


def _execute(chunks, sel, build_task, run_task, finish, scheduler, workers) -> None:
    """Simulate the selected points of every chunk and hand each chunk to ``finish(rows, sim)``.

    Chunks without a selected point are finished at once with ``sim=None``. Locally the chunks run
    in order; with a scheduler or workers (and something to simulate) they are submitted to Dask
    and finished in completion order. The Dask client and cluster are closed on the way out,
    interrupted or not.
    """
    client = cluster = None
    try:
        if (scheduler or workers) and any(sel[c].any() for c in chunks):
            client, cluster = _client(scheduler, workers)
        futures = {}
        for rows in chunks:
            vrows = rows[sel[rows]]
            if vrows.shape[0] == 0:
                finish(rows, None)
                continue
            task = build_task(vrows)
            if client is not None:
                futures[client.submit(run_task, task, pure=False)] = rows
            else:
                finish(rows, run_task(task))
        if futures:
            from dask.distributed import as_completed
            for fut in as_completed(list(futures)):
                finish(futures[fut], fut.result())
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
