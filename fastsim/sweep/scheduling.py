"""Where a sweep's verification chunks run: in this process, or on Dask workers.

``scheduler="tcp://host:8786"`` sends the chunks to an existing Dask cluster, ``workers=N`` starts a
local one (``pip install fastsim[dask]``); results are identical to a local run, chunks are
handed back as they complete.
"""
from __future__ import annotations

from ..errors import FastsimInputError


def _client(scheduler, workers):
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise FastsimInputError("--scheduler/--workers", scheduler or workers,
                                "an installed Dask (pip install 'fastsim[dask]')") from None
    if scheduler:
        return Client(scheduler), None
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
