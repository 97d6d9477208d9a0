"""The package's import graph has no circle, and its files stay readable.

The graph is built from the source, as ``tests/test_import_structure.py`` walks it: every
``import`` and ``from ... import`` at any depth, imports inside functions included. ``from P import
N`` is an edge to ``P.N`` where that is a module of the package, else to ``P``. An edge from a
module to a package that contains it is left out: Python runs a package's ``__init__`` before any
of its modules, so that dependency holds for every submodule whatever its code says, and a face
that re-exports its modules is read back by them only at call time (the precedent is
``fastsim/sweep/run.py``).

A circle is reported as its strongly connected component (Tarjan, 1972), with one edge of each
member that keeps it closed and the line that makes it.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fastsim"

# numba kernel modules: their long functions are deliberate (one event loop a kernel; numba keys
# its cache on the file, so they keep their paths and their size)
KERNEL_FILES = {"sim/_kernels.py", "sim/_policy_nb.py", "_analytic_nb.py", "fleet/_fleet_nb.py"}
MAX_LINES = 1000
MAX_CLI_LINES = 300


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path = PACKAGE, sources: dict | None = None) -> dict:
    """``{module: {imported module: line}}`` over the package at ``root``; ``sources`` maps a path
    relative to ``root`` to text standing in for (or added to) the files on disk."""
    files = {p.relative_to(root).as_posix(): p.read_text(encoding="utf-8")
             for p in root.rglob("*.py") if "__pycache__" not in p.parts}
    files.update(sources or {})
    paths = {rel: root / rel for rel in files}
    mods = {_module_name(p, root): rel for rel, p in paths.items()}
    graph = {}
    for mod, rel in mods.items():
        package = mod if rel.endswith("__init__.py") else mod.rpartition(".")[0]
        edges = {}
        for node in ast.walk(ast.parse(files[rel], filename=rel)):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                targets = [f"{src}.{a.name}" if f"{src}.{a.name}" in mods else src for a in node.names]
            for t in targets:
                if t in mods and t != mod and not mod.startswith(t + "."):
                    edges.setdefault(t, node.lineno)
        graph[mod] = edges
    return graph


def circles(graph: dict) -> list:
    """Strongly connected components of more than one module, each sorted; iterative Tarjan."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(graph[w])))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def _describe(graph: dict, comp: list) -> str:
    members = set(comp)
    links = [f"{m} -> {t} (line {line})" for m in comp for t, line in sorted(graph[m].items()) if t in members]
    return "; ".join(links)


def test_no_import_circle():
    graph = import_graph()
    found = circles(graph)
    assert not found, "import circles: " + " | ".join(_describe(graph, c) for c in found)


@pytest.mark.parametrize("sources, expected", [
    # a circle held together by an import inside a function is still a circle
    ({"planner.py": "def f():\n    from .verified import x\n",
      "verified.py": "from .planner import y\n"}, ["fastsim.planner", "fastsim.verified"]),
    # three modules in a ring, one through ``from . import name``
    ({"analytic.py": "from . import specdec\n", "specdec.py": "import fastsim.ledger\n",
      "ledger.py": "from fastsim.analytic import Plan\n"},
     ["fastsim.analytic", "fastsim.ledger", "fastsim.specdec"]),
])
def test_the_walk_finds_a_circle(tmp_path, sources, expected):
    root = tmp_path / "fastsim"
    root.mkdir()
    (root / "__init__.py").write_text("")
    for rel, text in sources.items():
        (root / rel).write_text(text)
    assert circles(import_graph(root)) == [expected]


def test_a_module_reading_its_own_face_is_no_circle(tmp_path):
    root = tmp_path / "fastsim"
    (root / "sweep").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sweep" / "__init__.py").write_text("from .run import run_sweep\n")
    (root / "sweep" / "run.py").write_text("def run_sweep():\n    from .. import sweep\n    return sweep\n")
    graph = import_graph(root)
    assert graph["fastsim.sweep"] == {"fastsim.sweep.run": 1}
    assert circles(graph) == []


def _line_counts() -> dict:
    return {p.relative_to(PACKAGE).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
            for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}


def test_no_file_over_a_thousand_lines_but_the_kernels():
    long = {rel: n for rel, n in _line_counts().items() if n > MAX_LINES and rel not in KERNEL_FILES}
    assert not long, f"files over {MAX_LINES} lines (split them by what they hold): {long}"


def test_cli_only_builds_the_parser():
    n = _line_counts()["cli.py"]
    assert n < MAX_CLI_LINES, f"fastsim/cli.py has {n} lines: commands belong in fastsim/commands/"


def test_the_kernel_files_exist():
    """The exemption names real files: a kernel module that moved must be renamed here too."""
    assert KERNEL_FILES <= set(_line_counts())
