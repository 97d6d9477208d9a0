"""A first run compiles its kernels on two cores: ``fastsim plan`` with an empty numba cache.

Numba compiles one function at a time in a process, and caches each on disk (``cache=True``).
On an empty cache (a fresh install or an upgrade) ``fastsim plan`` needs the simulator kernel
``_run_nb`` (about two thirds of its compilation), the analytic screen's kernel and the metrics
kernel: one after the other, about 17 s on 2 cores. :func:`plan_kernels` checks whether
``_run_nb`` is in the cache; if not, it starts a helper process (:func:`main`, importing this
same fastsim) that compiles the screen's and the metrics' kernels into the cache while this
process compiles the simulator's (:func:`fastsim.sim.warmup`), then waits for the helper; the
screen and the simulations that follow load every kernel from the cache. The kernels and the
results are the same either way, only the wall time differs (about 5 s less). Set
``FASTSIM_PRECOMPILE=0`` to compile everything in the command's own process.
"""
from __future__ import annotations

import os
import subprocess
import sys

__all__ = ["in_cache", "plan_kernels"]

#: Longest wait for the helper once this process has compiled its own kernels (s); the command
#: goes on without it after that (compiling what the helper did not).
HELPER_TIMEOUT_S = 120.0


def in_cache(dispatcher) -> bool:
    """Whether numba's on-disk cache holds a compiled version of ``dispatcher`` for its current source.

    Parameters
    ----------
    dispatcher : numba dispatcher
        A function compiled with ``cache=True``.

    Returns
    -------
    bool
        True also when numba's cache cannot be inspected (its internals changed, or JIT is
        disabled): then nothing is compiled ahead.
    """
    try:
        return bool(dispatcher._cache._cache_file._load_index())
    except Exception:   # noqa: BLE001  (numba internals: any failure means "do not precompile")
        return True


def _screen_kernels() -> None:
    """Compile (or load) the analytic screen's kernel: a screen of the built-in chat scenario."""
    from .analytic import Demand, screen
    from .catalog import default_catalog
    cat = default_catalog()
    chat = cat.scenario("chat")
    screen(chat.model, Demand.from_scenario(chat), catalog=cat)


def _metrics_kernel() -> None:
    """Compile (or load) the simulator's metrics kernel, without the simulator kernel."""
    from .sim.engine import warmup_metrics
    warmup_metrics()


#: What the helper process can compile, by name (:func:`main`).
TASKS = {"screen": _screen_kernels, "metrics": _metrics_kernel}


def plan_kernels(screen: bool = True) -> None:
    """Compile (or load) the kernels of ``fastsim plan`` under the lecture policy, on two cores when the cache is empty.

    Parameters
    ----------
    screen : bool
        Also the analytic screen's kernel (the plain screen's: not the speculative-decoding one).

    Returns
    -------
    None
        The kernels of the screen (if ``screen``) and of the lecture-policy simulations are in
        numba's cache, the simulations' also loaded in this process.
    """
    from .sim import _kernels as K
    if os.environ.get("FASTSIM_PRECOMPILE", "1") == "0" or in_cache(K._run_nb):
        return
    tasks = (["screen"] if screen else []) + ["metrics"]
    helper = None
    # the helper imports this very fastsim (not another one its working directory may hold)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = f"import sys; sys.path.insert(0, {root!r}); from fastsim._precompile import main; sys.exit(main({tasks!r}))"
    try:
        helper = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
    except OSError:
        pass    # no helper: this process compiles everything, as without the cache check
    from .sim import warmup
    warmup(engine_policies=False)
    if helper is not None:
        try:
            helper.wait(timeout=HELPER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            helper.kill()
            helper.wait()


def main(argv=None) -> int:
    """Entry point of the helper process: compile the named tasks of :data:`TASKS`, in order.

    Parameters
    ----------
    argv : sequence of str, optional
        Task names; default ``sys.argv[1:]``.

    Returns
    -------
    int
        0.
    """
    os.environ["FASTSIM_COMPILE_NOTICE"] = "0"
    for name in (sys.argv[1:] if argv is None else argv):
        TASKS[name]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
