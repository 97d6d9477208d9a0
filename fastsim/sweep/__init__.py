"""Sweeps over thousands of configurations: analytic table, batched verification, Pareto plots.

A sweep is the Cartesian product of axes (see :data:`AXES`)::

    model x gpu x precision x mode x tp x prefill_tp x decode_tp x chunk_tokens x max_batch
      x instances x prefill_instances x decode_instances x (scenario | trace)
      x rate_req_per_s x ttft_s x tpot_s x price

Every point gets its analytic result (SPEC section 5, one instance evaluated per row by
:func:`fastsim._analytic_nb.instances_nb`, vectorized over the grid); a selection of points is
verified in the discrete-event simulator (SPEC sections 6-7) in batches of (configuration x seed)
runs, each batch one :func:`fastsim.sim.simulate_batch` call; optionally each verified point gets
its maximum sustainable rate (:func:`fastsim.search.max_sustainable_rate`).

The result is one table, one row per point, columns named with their units. On disk it is written
in chunks as the sweep goes (CSV, JSON Lines, or a Parquet directory of part files), so an
interrupted sweep keeps what it finished and ``resume=True`` carries on from there. Points are
identified by a stable id, a 64-bit hash of the point's axis values, so a resumed
or distributed sweep recognises them whatever the execution order.

Randomness: the simulated workloads of a point come from ``SeedSequence(seed, spawn_key=h)``
where ``h`` hashes the point's workload axis value (scenario or trace name). Every configuration
of one scenario therefore sees the same requests (common random numbers), at every rate (the
arrival times scale as 1 / rate), whatever the chunking, the worker or the order of execution.

Dask (optional, ``pip install fastsim[dask]``): ``scheduler="tcp://host:8786"`` sends the
verification chunks to an existing cluster, ``workers=N`` starts a local one. Results are
identical to a local run.

The package, in the order a sweep runs:

- :mod:`fastsim.sweep.axes`: the axes, their values, what each mode uses, :func:`parse_axis`;
- :mod:`fastsim.sweep.grid`: :class:`SweepGrid` / :class:`SweepSettings`, grid files, point ids;
- :mod:`fastsim.sweep.table`: the table's :data:`COLUMNS` and :func:`analytic_table`;
- :mod:`fastsim.sweep.tasks`: which points are simulated, and the simulation of a chunk of them;
- :mod:`fastsim.sweep.scheduling`: chunks run here or on Dask;
- :mod:`fastsim.sweep.storage`: the table on disk, :func:`read_table`;
- :mod:`fastsim.sweep.run`: :func:`run_sweep`, chunking and resume;
- :mod:`fastsim.sweep.pareto`: questions, :func:`pareto_front`, :func:`plot_sweep`;
- :mod:`fastsim.sweep.command`: the ``fastsim sweep`` command.
"""
from __future__ import annotations

from .grid import AXES, SweepGrid, SweepSettings, load_grid, make_grid, parse_axis
from .pareto import pareto_front, plot_sweep, questions
from .run import run_sweep
from .storage import read_table
from .table import COLUMNS, QUESTION, analytic_table

# Besides __all__: the command (fastsim.cli runs it), the limits, and the two steps that run_sweep
# looks up here when it runs, so that replacing them on this package (tests interrupt a sweep so)
# takes effect.
from .command import cli_sweep  # noqa: F401
from .grid import MAX_INSTANCES, MAX_POINTS  # noqa: F401
from .pareto import MAX_PLOTS  # noqa: F401
from .storage import _write_chunk  # noqa: F401
from .table import TABLE_VERSION  # noqa: F401
from .tasks import _run_task, _workload_seed  # noqa: F401

__all__ = [
    "AXES", "SweepGrid", "SweepSettings", "load_grid", "make_grid", "parse_axis", "analytic_table",
    "run_sweep", "read_table", "pareto_front", "plot_sweep", "questions", "COLUMNS", "QUESTION",
]
