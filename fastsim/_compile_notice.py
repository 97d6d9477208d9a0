"""Say so while numba compiles fastsim's kernels (the first run after an install or an upgrade).

Numba compiles a kernel on its first call and caches it on disk; a fresh install pays that once,
about 15 s for the lecture-policy simulator's kernels on a 2-core machine (and 40 s more for the
engine policies'), during which a command would otherwise print nothing. :func:`compile_notice` listens to numba's ``numba:compile`` events, which
fire only on a real compilation (a kernel loaded from the cache fires none): at the first one of a
kernel family it prints one line on stderr, and on a terminal it shows a spinner with the elapsed
time while compilation runs. Set ``FASTSIM_COMPILE_NOTICE=0`` to silence it.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

__all__ = ["COMPILE_ESTIMATE_S", "compile_notice"]

#: Kernel families: module prefix -> (label, cold compile estimate in s, measured on 2 shared cores
#: with an empty NUMBA_CACHE_DIR: the simulator kernel and its metrics 12-15 s, the analytic screen's
#: 2-3 s, one engine-policy run about 40 s, the pipeline-parallel simulator's about 7 s).
COMPILE_ESTIMATE_S = {
    "fastsim.sim._policy_nb": ("engine-policy simulator", 40),
    "fastsim.sim._pipeline_nb": ("pipeline-parallel simulator", 7),
    "fastsim.sim": ("simulator", 15),
    "fastsim": ("analytic", 3),
}


def _family(module: str):
    for prefix, (label, est) in COMPILE_ESTIMATE_S.items():
        if module == prefix or module.startswith(prefix + "."):
            return label, est
    return None


class _Spinner:
    """A tqdm line with the elapsed time and the kernel being compiled, refreshed from a thread until stopped."""

    def __init__(self, stream, label):
        from tqdm import tqdm
        self._label = label
        self._bar = tqdm(total=None, desc=f"compiling {label} kernels", bar_format="{desc}: {elapsed}",
                         file=stream, leave=False)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(0.25):
            self._bar.refresh()

    def kernel(self, name):
        """Show ``name`` as the function being compiled."""
        self._bar.set_description_str(f"compiling {self._label} kernels ({name})", refresh=False)

    def close(self):
        self._stop.set()
        self._thread.join()
        self._bar.close()


class _Listener:
    """numba event listener: one line per kernel family, a spinner while compiling on a terminal."""

    def __init__(self, stream):
        self.stream = stream
        self.announced = set()
        self.depth = 0
        self.spinner = None
        self.started = None
        self.lock = threading.Lock()

    def on_start(self, event):
        disp = (event.data or {}).get("dispatcher")
        func = getattr(disp, "py_func", None)
        fam = _family(getattr(func, "__module__", "") or "")
        with self.lock:
            self.depth += 1
            if self.spinner is not None and fam is not None:
                self.spinner.kernel(getattr(func, "__name__", "?"))
            if fam is None or self.depth > 1:
                return
            label, est = fam
            if label not in self.announced:
                self.announced.add(label)
                print(f"fastsim: compiling {label} kernels, once per install, about {est} s", file=self.stream,
                      flush=True)
            if self.spinner is None and self.stream.isatty():
                self.spinner = _Spinner(self.stream, label)
                self.spinner.kernel(getattr(func, "__name__", "?"))
            self.started = time.perf_counter()

    def on_end(self, event):
        with self.lock:
            self.depth = max(self.depth - 1, 0)
            if self.depth == 0 and self.spinner is not None:
                self.spinner.close()
                self.spinner = None

    def close(self):
        with self.lock:
            if self.spinner is not None:
                self.spinner.close()
                self.spinner = None


@contextlib.contextmanager
def compile_notice(stream=None):
    """Within the block, announce numba compilations of fastsim kernels on ``stream`` (stderr).

    Parameters
    ----------
    stream : file-like, optional
        Where the line and the spinner go (default ``sys.stderr``); the spinner only when it is
        a terminal.

    Yields
    ------
    None
        Nothing is printed when every kernel comes from the cache, or when the environment sets
        ``FASTSIM_COMPILE_NOTICE=0``, or when numba's event API is missing.
    """
    if os.environ.get("FASTSIM_COMPILE_NOTICE", "1") == "0":
        yield
        return
    try:
        from numba.core import event as ev
    except ImportError:  # pragma: no cover  (numba without the event API)
        yield
        return
    listener = _Listener(stream or sys.stderr)

    class _Adapter(ev.Listener):
        def on_start(self, event):
            listener.on_start(event)

        def on_end(self, event):
            listener.on_end(event)

    adapter = _Adapter()
    ev.register("numba:compile", adapter)
    try:
        yield
    finally:
        listener.close()
        ev.unregister("numba:compile", adapter)
