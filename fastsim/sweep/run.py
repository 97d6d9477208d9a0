"""run_sweep: a whole sweep, from the grid to the table, written in chunks and resumable.

The analytic table of every point first, then chunks in grid order (a chunk closes at
``chunk_points`` points or ``chunk_verify`` points to simulate), each simulated
(:mod:`fastsim.sweep.tasks`, locally or on Dask: :mod:`fastsim.sweep.scheduling`) and appended to
the output (:mod:`fastsim.sweep.storage`) as it completes. ``resume=True`` keeps the points already
written (by point id) and computes only the others, once ``FILE.sweep.json`` shows that they were
written with this grid and these settings.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import numpy as np
import pandas as pd

from ..catalog import Catalog
from ..errors import FastsimInputError
from .grid import SweepGrid, SweepSettings, _tuple, load_grid, make_grid
from .pareto import MAX_PLOTS, plot_sweep
from .scheduling import _check_scheduler, _execute
from .storage import _format, _has_content, _meta_path, _read_meta, _repair_tail, read_table
from .table import _SIM_COLUMNS, TABLE_VERSION, _tables, _typed, analytic_table
from .tasks import _build_task, _select


def _feed(h, obj) -> None:
    """Add ``obj`` to the hash ``h``: arrays by dtype, shape and bytes; dataclasses, dicts and
    sequences field by field; anything else by its ``repr`` (refused if it holds an address)."""
    if isinstance(obj, np.ndarray):
        h.update(f"{obj.dtype}{obj.shape}".encode())
        h.update(np.ascontiguousarray(obj).tobytes())
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        h.update(type(obj).__name__.encode())
        for f in dataclasses.fields(obj):
            h.update(f.name.encode())
            _feed(h, getattr(obj, f.name))
    elif isinstance(obj, dict):
        h.update(b"{")
        for k in sorted(obj, key=repr):
            h.update(repr(k).encode())
            _feed(h, obj[k])
        h.update(b"}")
    elif isinstance(obj, (list, tuple)):
        h.update(b"[")
        for x in obj:
            _feed(h, x)
        h.update(b"]")
    else:
        text = repr(obj)
        if " at 0x" in text:        # an object without a stable description: a bug, never a silent pass
            raise TypeError(f"sweep inputs digest: no stable description of {type(obj).__name__}")
        h.update(text.encode())


def _inputs_digest(grid: SweepGrid) -> str:
    """SHA-256 of what the table depends on besides the axes and the settings.

    The catalog the names were resolved against (GPUs and their prices, precisions, models,
    scenarios: ``--catalog``, ``--price``), the grid's models (a Hugging Face ``config.json``
    included) and each workload's data (a trace's requests as read, after ``--time-unit`` and
    ``--skip-invalid``). Recorded in ``FILE.sweep.json`` so that a resume refuses rows computed
    from other inputs.

    Parameters
    ----------
    grid : SweepGrid

    Returns
    -------
    str
        64 hexadecimal digits.
    """
    h = hashlib.sha256()
    _feed(h, grid.catalog)
    _feed(h, grid.models)
    _feed(h, grid.sources)
    return h.hexdigest()


def _check_resume(out: str, meta: dict) -> None:
    """Refuse a resume whose output cannot be shown to come from this run (before anything is written).

    Parameters
    ----------
    out : str
        The sweep output to resume.
    meta : dict
        This run's ``table_version``, ``axes`` and ``settings``, as written to ``FILE.sweep.json``.

    Raises
    ------
    FastsimInputError
        ``out`` has content but no ``FILE.sweep.json`` beside it (its rows could come from any
        grid, settings or fastsim version); the sidecar is unreadable, from another table version,
        or records another grid or other settings.

    Notes
    -----
    Accepted besides a matching sidecar beside a table: neither ``out`` nor its sidecar (nothing
    to keep, the sweep starts afresh), and a matching sidecar with ``out`` missing or empty (a run
    interrupted before its first chunk was written).
    """
    mp = _meta_path(out)
    name = os.path.basename(mp)
    if not os.path.exists(mp):
        if _has_content(out):
            raise FastsimInputError("--resume", out, f"a table with its {name} beside it, which records the grid "
                                    f"and settings a resume must match ({name} is missing, so the rows already "
                                    "there cannot be checked against this run); start afresh without --resume")
        return
    old = _read_meta(out)
    if old.get("table_version", 1) != TABLE_VERSION:
        raise FastsimInputError("--resume", out, f"a table of this fastsim version (it was written with "
                                f"table version {old.get('table_version', 1)}, this is {TABLE_VERSION}); "
                                "start afresh without --resume")
    if old != json.loads(json.dumps(meta)):
        what = [label for k, label in (("axes", "grid"), ("settings", "settings"),
                                       ("inputs_sha256", "inputs (catalog and prices, models, trace data)"))
                if old.get(k) != json.loads(json.dumps(meta.get(k)))]
        raise FastsimInputError("--resume", out, "the grid, settings and inputs of the run that wrote it (see "
                                f"{name}; this run differs in its {', '.join(what) or 'record'}); start afresh "
                                "without --resume")




def _check_out(out: str) -> str:
    """The format of an output path, once its directory is shown to take it (before any work).

    Parameters
    ----------
    out : str
        The ``--out`` path.

    Returns
    -------
    str
        ``"csv"``, ``"jsonl"`` or ``"parquet"`` (:func:`fastsim.sweep.storage._format`).

    Raises
    ------
    FastsimInputError
        An unknown extension; a directory that does not exist, is not a directory or cannot be
        written (the ``FILE.sweep.json`` beside the output goes there too); a CSV / JSON output
        that is a directory, or a Parquet output that is a file.
    """
    fmt = _format(out)
    parent = os.path.dirname(os.path.abspath(os.fspath(out).rstrip("/\\") or "."))
    if not os.path.exists(parent):
        raise FastsimInputError("--out", out, f"a path in an existing directory ({parent} does not exist; create it "
                                "first)")
    if not os.path.isdir(parent):
        raise FastsimInputError("--out", out, f"a path in an existing directory ({parent} is not a directory)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise FastsimInputError("--out", out, f"a path in a directory you can write to ({parent} is not writable)")
    if fmt != "parquet" and os.path.isdir(out):
        raise FastsimInputError("--out", out, f"a {fmt} file (this path is a directory)")
    if fmt == "parquet" and os.path.exists(out) and not os.path.isdir(out):
        raise FastsimInputError("--out", out, "a .parquet directory of part files (this path is a file)")
    return fmt


def _check_settings_used(grid: SweepGrid, s: SweepSettings, top_k=None, name=lambda key: key) -> None:
    """Refuse a setting the sweep would ignore, or an instance count it cannot simulate (before any work).

    Parameters
    ----------
    grid : SweepGrid
    s : SweepSettings
    top_k : int, optional
        ``top_k`` when it was given explicitly (None: left at its default).
    name : callable(str) -> str
        The field to name for a setting (``"--top-k"`` on the command line, ...).

    Raises
    ------
    FastsimInputError
        ``top_k`` given with a ``verify`` other than ``top-k-per-scenario`` (it counts the points
        that mode simulates per question); ``capacity`` with a trace axis (the search synthesizes
        a scenario's requests at each probed rate: scenario rows only). ``capacity`` with ``verify
        = "none"`` is refused by :class:`SweepSettings` itself.
    """
    if top_k is not None and s.verify != "top-k-per-scenario":
        raise FastsimInputError(name("top_k"), top_k, "only with verify top-k-per-scenario (it is the number of "
                                f"points that verify mode simulates per question; verify {s.verify} "
                                + ("simulates none" if s.verify == "none" else "simulates every feasible point")
                                + "): drop it, or verify top-k-per-scenario")
    if s.capacity and any(src.kind == "trace" for src in grid.sources):
        raise FastsimInputError(name("capacity"), True, "false on a grid of traces: the capacity search is for "
                                "scenario rows only (it synthesizes a scenario's requests at each probed rate; a "
                                "trace has its own arrivals); drop it, or sweep a scenario axis")


#: Columns that make a capacity family (:func:`fastsim.search.max_sustainable_rates`): every
#: column of a point that its capacity search depends on but its instance count.
_FAMILY_COLUMNS = ("model", "gpu", "precision", "mode", "tp", "pp", "prefill_tp", "decode_tp", "layout", "chunk_tokens",
                   "max_batch", "prefill_instances", "workload", "ttft_s", "tpot_s", "price", "rate_req_per_s")


def _family_last(table: pd.DataFrame, todo: np.ndarray, sel: np.ndarray) -> np.ndarray:
    """For each position of ``todo``, the last position of a point to simulate of the same capacity family.

    A family is the points that differ only in their (decode) instance count
    (:data:`_FAMILY_COLUMNS`); positions of points not simulated get -1.
    """
    sub = table.iloc[todo]
    fam = sub.groupby(list(_FAMILY_COLUMNS), dropna=False, sort=False).ngroup().to_numpy()
    pos = np.arange(todo.shape[0])
    simulated = sel[todo]
    last = np.full(int(fam.max()) + 1 if fam.size else 0, -1, dtype=np.int64)
    np.maximum.at(last, fam[simulated], pos[simulated])
    return np.where(simulated, last[fam], -1)


def _chunks(todo: np.ndarray, sel: np.ndarray, chunk_points: int, chunk_verify: int, family_last=None) -> list:
    """The chunks of a sweep: runs of ``todo`` in grid order, each closed at ``chunk_points`` points
    or ``chunk_verify`` points to simulate.

    With ``family_last`` (:func:`_family_last`; capacity sweeps) a chunk closes only where no
    family's points to simulate lie on both sides, so that each family's searches warm-start
    each other in one :func:`fastsim.search.max_sustainable_rates` call; a family too large for
    4 x ``chunk_verify`` points to simulate is still cut there.

    Returns
    -------
    list of ndarray(int64)
        Positions in the table, in grid order, every one of ``todo`` once.
    """
    chunks = []
    start = 0
    n = todo.shape[0]
    csum = np.concatenate([[0], np.cumsum(sel[todo])])
    while start < n:
        stop = min(start + chunk_points, n)
        over = np.searchsorted(csum[start + 1:stop + 1] - csum[start], chunk_verify, side="right")
        stop = min(stop, start + max(int(over), 1))
        if family_last is not None:
            reach = int(family_last[start:stop].max()) + 1
            while reach > stop and csum[reach] - csum[start] <= 4 * chunk_verify:
                stop, reach = reach, max(reach, int(family_last[stop:reach].max()) + 1)
        chunks.append(todo[start:stop])
        start = stop
    return chunks


def run_sweep(grid, *, catalog: Catalog | None = None, settings: SweepSettings | None = None,
              out: str | None = None, resume: bool = False, scheduler: str | None = None,
              workers: int | None = None, progress: bool | None = None, chunk_points: int = 20_000,
              chunk_verify: int = 128, max_requests_per_call: int = 3_000_000,
              plot_dir: str | None = None, max_plots: int | None = MAX_PLOTS, **settings_kw) -> pd.DataFrame:
    """Run a sweep: analytic table, batched verification, optional capacity, written in chunks.

    Parameters
    ----------
    grid : SweepGrid, mapping of axes, or str
        A validated grid, a mapping for :func:`make_grid`, or the path of a grid file
        (:func:`load_grid`; its ``[sweep]`` table gives default settings).
    catalog : Catalog, optional
    settings : SweepSettings, optional
        Or give its fields as keyword arguments (``verify="all"``, ``seeds=4``, ...).
    out : str, optional
        Output file: ``.parquet`` (a directory of part files; needs pyarrow), ``.csv`` or
        ``.json`` / ``.jsonl`` (JSON Lines). Written chunk by chunk, rows in completion order;
        :func:`read_table` returns them in grid order. A ``FILE.sweep.json`` beside it records the
        grid and settings.
    resume : bool
        Keep the points already in ``out`` (by point id) and compute only the others. Without it
        an existing ``out`` is replaced. An ``out`` with content needs its ``FILE.sweep.json``
        recording this grid and these settings; with neither ``out`` nor ``FILE.sweep.json`` the
        sweep starts afresh.
    scheduler : str, optional
        Address of a running Dask scheduler; simulation chunks are sent there.
    workers : int, optional
        Start a local Dask cluster of this many worker processes instead.
    progress : bool, optional
        Show a tqdm bar on stderr (default: when stderr is a terminal); with ``capacity`` it says
        how many probes and seed-runs a search took on average, and the share of runs stopped early.
    chunk_points, chunk_verify : int
        A chunk closes at this many points, or at this many points to simulate; with
        ``capacity``, only where no capacity family (the points that differ only in their
        instance count) has points on both sides, up to 4 x ``chunk_verify`` points to simulate
        (so that a family's searches warm-start each other).
    max_requests_per_call : int
        Simulated requests per ``simulate_batch`` call (bounds memory: about 100 bytes each).
    plot_dir : str, optional
        Write the Pareto plots there (:func:`plot_sweep`).
    max_plots : int or None, default 12
        Plot the first ``max_plots`` questions only (None: every question).

    Returns
    -------
    pandas.DataFrame
        Every point of the grid, in grid order, the columns of :data:`COLUMNS`.

    Raises
    ------
    FastsimInputError
        A bad grid or setting (before any work starts), an unknown output extension, an ``out``
        whose directory does not exist or cannot be written, a resume whose grid or settings
        differ from the interrupted run's, a resume of an ``out`` with content but no (or an
        unreadable) ``FILE.sweep.json`` (``out`` is then left as it was), Dask requested but not
        installed; a setting the sweep would ignore (``top_k`` given without ``verify =
        "top-k-per-scenario"``, ``capacity`` with ``verify = "none"`` or a trace axis, ``settings``
        beside keyword settings, ``workers`` beside ``scheduler``); a ``scheduler`` that is no
        address or does not answer. (An instance count above
        :data:`~fastsim.sweep.grid.MAX_INSTANCES` is refused by the grid; a point whose rate needs
        more on ``auto`` is an infeasible row, never simulated.)
    """
    import sys
    # looked up on the package when called, so that replacing fastsim.sweep._run_task or
    # fastsim.sweep._write_chunk (as the tests that interrupt a sweep do) takes effect here
    from . import _run_task, _write_chunk
    file_settings = {}
    if isinstance(grid, (str, os.PathLike)):
        axes, file_settings = load_grid(os.fspath(grid))
        grid = make_grid(axes, catalog)
    elif not isinstance(grid, SweepGrid):
        grid = make_grid(grid, catalog)
    kw = dict(file_settings)
    kw.update(settings_kw)
    top_k = kw.get("top_k") if settings is None else None      # given explicitly (file or keyword)
    if settings is None:
        if "chunk_tokens" in kw:
            kw["chunk_tokens"] = _tuple(kw["chunk_tokens"])
        try:
            settings = SweepSettings(**kw)
        except TypeError as exc:
            raise FastsimInputError("sweep settings", sorted(kw), f"fields of SweepSettings ({exc})") from None
    elif settings_kw:
        raise FastsimInputError("sweep settings", sorted(settings_kw), "either settings=SweepSettings(...) or its "
                                "fields as keyword arguments, not both (the keywords would be ignored)")
    s = settings
    for name, v in (("chunk_points", chunk_points), ("chunk_verify", chunk_verify),
                    ("max_requests_per_call", max_requests_per_call)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise FastsimInputError(name, v, "an integer >= 1")
    if workers is not None and (isinstance(workers, bool) or int(workers) != workers or workers < 1):
        raise FastsimInputError("--workers", workers, "an integer >= 1")
    if workers is not None and scheduler:
        raise FastsimInputError("--workers", workers, "either --workers (start a local Dask cluster) or --scheduler "
                                f"(use the running one at {scheduler}), not both")
    if scheduler:
        _check_scheduler(scheduler)
    _check_settings_used(grid, s, top_k)
    fmt = _check_out(out) if out else None
    meta = {"table_version": TABLE_VERSION, "axes": grid.describe(), "settings": s.to_dict(),
            "inputs_sha256": _inputs_digest(grid)}
    if out and resume:
        _check_resume(out, meta)
    # 1. analytic table of every point (cheap, deterministic), and the points to simulate
    table = analytic_table(grid, settings=s)
    sel = _select(table, s, grid)
    if out:
        mp = _meta_path(out)
        if not resume:
            if os.path.isdir(out):
                for f in os.listdir(out):
                    if f.endswith(".parquet") or f.endswith(".tmp"):
                        os.remove(os.path.join(out, f))
            elif os.path.exists(out):
                os.remove(out)
        with open(mp, "w", encoding="utf-8") as fh:
            json.dump(meta, fh, indent=1)
    done = np.zeros(len(table), bool)
    previous = None
    part = 0
    if out and resume and os.path.exists(out):      # a resume with no output yet computes every point
        if fmt in ("csv", "jsonl") and os.path.isfile(out):
            _repair_tail(out)       # the rows after an interruption are appended after whole lines
        previous = read_table(out)
        done = table["point_id"].isin(set(previous["point_id"])).to_numpy()
        if fmt == "parquet" and os.path.isdir(out):
            part = len([f for f in os.listdir(out) if f.endswith(".parquet")])
    todo = np.flatnonzero(~done)
    # 2. chunks in grid order
    chunks = _chunks(todo, sel, chunk_points, chunk_verify, _family_last(table, todo, sel) if s.capacity else None)
    T = _tables(grid, s) if sel.any() else None
    show = progress if progress is not None else sys.stderr.isatty()
    bar = None
    if show:
        from tqdm import tqdm
        bar = tqdm(total=int(todo.shape[0]), unit="point", desc="sweep", file=sys.stderr, leave=False)
    results = []
    cost = np.zeros(4, np.int64)        # capacity searches, probes, seed-runs, runs stopped early

    def finish(rows, sim):
        nonlocal part
        chunk = table.iloc[rows].copy()
        if sim is not None:
            pos = {int(p): j for j, p in enumerate(sim["point"])}
            idx = np.array([pos.get(int(p), -1) for p in chunk["point"]])
            has = idx >= 0
            for c in _SIM_COLUMNS:
                col = chunk[c].to_numpy().copy()
                col[has] = np.asarray(sim[c])[idx[has]]
                chunk[c] = col
        chunk = _typed(chunk)
        if out:
            _write_chunk(out, fmt, chunk, part)
            part += 1
        results.append(chunk)
        if bar is not None:
            if s.capacity and sim is not None:
                probes = np.asarray(sim["sim_capacity_probes"])
                cost += [int(np.count_nonzero(probes)), int(probes.sum()), int(np.sum(sim["sim_capacity_seed_runs"])),
                         int(np.sum(sim["sim_capacity_stopped_runs"]))]
                if cost[0]:
                    bar.set_postfix_str(f"capacity: {cost[1] / cost[0]:.1f} probes, {cost[2] / cost[0]:.0f} seed-runs "
                                        f"a search, {cost[3] / max(cost[2], 1):.0%} of runs stopped early",
                                        refresh=False)
            bar.update(len(rows))

    try:
        _execute(chunks, sel, lambda vrows: _build_task(table, vrows, grid, T, s, max_requests_per_call),
                 _run_task, finish, scheduler, workers)
    finally:
        if bar is not None:
            bar.close()
    frames = [f for f in ([previous] if previous is not None else []) + results if len(f)]
    keep = table["point_id"].to_numpy()
    if frames:
        full = pd.concat(frames, ignore_index=True)
        full = full[full["point_id"].isin(set(keep))].drop_duplicates("point_id", keep="last")
        full = _typed(full.sort_values("point", kind="stable").reset_index(drop=True))
    else:
        full = table.iloc[:0]
    if plot_dir:
        plot_sweep(full, plot_dir, max_plots=max_plots, slo_percentile=s.slo_percentile)
    return full
