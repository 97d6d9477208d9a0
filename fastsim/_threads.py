"""Run ``nogil`` numba kernels on several Python threads (instead of ``prange`` kernels).

A ``prange`` kernel costs numba much more to compile than the same loop without it (the parallel
lowering, then LLVM optimising everything the loop body calls a second time): about 7 s of the
simulator's and 2 s of the analytic screen's first-run compilation on 2 cores. fastsim's
kernels are plain loops compiled with ``nogil=True``; these helpers call one on
:func:`num_threads` threads at once, which run in parallel because the kernel releases the GIL.
Results never depend on the number of threads (each call writes only its own slots).
"""
from __future__ import annotations

import threading

__all__ = ["num_threads", "run_workers", "run_jobs", "run_row_blocks"]

#: Below this many rows, :func:`run_row_blocks` runs on the calling thread only.
MIN_ROWS_PER_THREAD = 2048


def num_threads() -> int:
    """Threads to use: ``numba.get_num_threads()`` (``NUMBA_NUM_THREADS``, or ``numba.set_num_threads``).

    Reads ``numba.config.NUMBA_NUM_THREADS`` while numba's own thread pool is not started (it is
    only needed for ``numba.set_num_threads``; starting it costs about 20 ms).

    Returns
    -------
    int
        At least 1.
    """
    import numba
    try:
        from numba.np.ufunc import parallel
        started = bool(getattr(parallel, "_is_initialized", True))
    except ImportError:  # pragma: no cover
        started = True
    n = numba.get_num_threads() if started else numba.config.NUMBA_NUM_THREADS
    return max(1, int(n))


def run_workers(kernel, args: tuple, n_workers: int) -> None:
    """Call ``kernel(*args, worker)`` for every ``worker`` in ``range(n_workers)``, concurrently.

    Worker 0 runs on the calling thread, the others each on a thread of its own.

    Parameters
    ----------
    kernel : numba dispatcher
        Compiled with ``nogil=True`` (otherwise the workers take turns).
    args : tuple
        Arguments before the worker index, shared by all workers.
    n_workers : int
        Number of workers (1: a plain call).

    Returns
    -------
    None

    Raises
    ------
    BaseException
        The first exception a worker raised, once every worker has finished.
    """
    if n_workers <= 1:
        kernel(*args, 0)
        return
    errors = []

    def work(w):
        try:
            kernel(*args, w)
        except BaseException as exc:   # noqa: BLE001  (re-raised on the calling thread)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,), daemon=True) for w in range(1, n_workers)]
    for t in threads:
        t.start()
    try:
        kernel(*args, 0)
    finally:
        for t in threads:
            t.join()
    if errors:
        raise errors[0]


def run_jobs(job, order, n_workers: int) -> None:
    """Call ``job(k)`` once for every ``k`` of ``order``, taken in that order by ``n_workers`` workers.

    A shared queue under a lock: each worker takes the next ``k`` when it is free (the simulators
    put their longest runs first, so the last ones to finish are short).

    Parameters
    ----------
    job : callable
        ``job(k)``; releases the GIL for the workers to overlap (a numba kernel with ``nogil=True``).
    order : iterable of int
        The jobs, in the order they are taken.
    n_workers : int
        Number of workers (:func:`run_workers`).

    Returns
    -------
    None

    Raises
    ------
    BaseException
        The first exception a job raised, once every worker has finished (:func:`run_workers`).
    """
    jobs = iter(order)
    lock = threading.Lock()

    def worker(_):
        while True:
            with lock:
                k = next(jobs, None)
            if k is None:
                return
            job(k)

    run_workers(worker, (), n_workers)


def run_row_blocks(kernel, args: tuple, rows: frozenset, n: int) -> None:
    """Call ``kernel`` on contiguous blocks of ``n`` rows, one block per thread.

    Parameters
    ----------
    kernel : numba dispatcher
        A ``nogil`` kernel that treats row i of its per-row arrays independently.
    args : tuple
        Its arguments; those at the positions ``rows`` are per-row arrays of length ``n`` (passed
        as views ``a[lo:hi]``; outputs written in place), the others are passed whole.
    rows : frozenset of int
        Positions of the per-row arguments.
    n : int
        Number of rows.

    Returns
    -------
    None
    """
    blocks = min(num_threads(), max(1, n // MIN_ROWS_PER_THREAD))
    if blocks <= 1:
        kernel(*args)
        return
    edges = [n * b // blocks for b in range(blocks + 1)]

    def call(block):
        lo, hi = edges[block], edges[block + 1]
        kernel(*(a[lo:hi] if i in rows else a for i, a in enumerate(args)))

    run_workers(lambda *a: call(a[-1]), (), blocks)
