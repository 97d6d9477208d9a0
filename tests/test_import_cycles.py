"""The package's import graph has no circle, and its files stay readable.

The graph is built from the source, as ``tests/test_import_structure.py`` walks it: every
``import`` and ``from ... import`` at any depth, imports inside functions included. ``from P import
N`` is an edge to ``P.N`` where that is a module of the package, else to ``P``. An edge from a
module to a package that contains it is left out: Python runs a package's ``__init__`` before any
of its modules, so that dependency holds for every submodule whatever its code says, and a face
that re-exports its modules is read back by them only at call time (the precedent is
``fastsim/sweep/run.py``).

A circle is reported as its strongly connected component (Tarjan, 1972), with the edges among
its members and the lines that make them.

Beyond circles, imports point one way, down :data:`LAYERS` (the table of README's code map and
LAYOUT's "who may import whom"): a module imports only modules of a lower row, modules of its own
package (or group), and the few same-row arrows :data:`SAME_ROW` names.
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

#: Rows of the package, top to bottom; each member is a module or package (with everything under it).
LAYERS = {
    10: ["fastsim", "fastsim.__main__"],               # the lazy face, ``python -m fastsim``
    9: ["fastsim.cli"],                                # the parser, built from the command modules
    8: ["fastsim.commands"],                           # one module per command
    7: ["fastsim.whatif", "fastsim.sweep", "fastsim.fleet", "fastsim.calibrate", "fastsim.ledger",
        "fastsim.bench", "fastsim._precompile", "fastsim.validate"],
    6: ["fastsim.planner", "fastsim.verified", "fastsim.emit", "fastsim._command_helpers"],
    5: ["fastsim.search"],
    4: ["fastsim.analytic", "fastsim.sim"],            # sim takes vectors and arrays
    3: ["fastsim.plans", "fastsim.workload"],
    2: ["fastsim.constants", "fastsim.specdec", "fastsim.stepmodel",
        "fastsim.engine_rules"],                       # the engines' start-up rules: emit, commands, calibrate ask it
    1: ["fastsim.catalog"],
    0: ["fastsim.errors", "fastsim._output", "fastsim._threads", "fastsim.layouts", "fastsim.formulas",
        "fastsim.plots", "fastsim._compile_notice"],
}
#: Groups of flat modules that are one unit (a face and the files it re-exports).
GROUPS = {"fastsim.ledger": ("fastsim.ledger_",), "fastsim.analytic": ("fastsim._analytic_nb",)}
#: The arrows allowed within a row: (importer, imported).
SAME_ROW = {("fastsim.planner", "fastsim.verified"), ("fastsim.constants", "fastsim.stepmodel"),
            ("fastsim.constants", "fastsim.engine_rules"),     # a calibration's [[runtime]] names: the engine's runtimes
            ("fastsim.specdec", "fastsim.stepmodel")} | {
    (m, "fastsim.errors") for m in LAYERS[0] if m != "fastsim.errors"}
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


def layer_of(module: str):
    """``(row, member)`` of the most specific member of :data:`LAYERS` that holds ``module``, or None."""
    best = None
    for row, members in LAYERS.items():
        for member in members:
            held = (module == member or module.startswith(member + ".")
                    or any(module.startswith(p) for p in GROUPS.get(member, ())))
            if held and (best is None or len(member) > len(best[1])):
                best = (row, member)
    return best


def upward_imports(graph: dict) -> list:
    """``"importer -> imported (line N)"`` for every edge that does not point down :data:`LAYERS`."""
    bad = []
    for mod, edges in sorted(graph.items()):
        src = layer_of(mod)
        for target, line in sorted(edges.items()):
            dst = layer_of(target)
            if dst[0] < src[0] or dst[1] == src[1] or (src[1], dst[1]) in SAME_ROW:
                continue
            bad.append(f"{mod} (row {src[0]}) -> {target} (row {dst[0]}), line {line}")
    return bad


def test_every_module_has_a_row():
    missing = sorted(m for m in import_graph() if layer_of(m) is None)
    assert not missing, f"modules missing from LAYERS (place each in its row): {missing}"


def test_imports_point_down():
    bad = upward_imports(import_graph())
    assert not bad, "imports that point up or sideways: " + "; ".join(bad)


def test_the_layer_check_sees_an_upward_import():
    graph = {"fastsim.search.rate": {"fastsim.planner": 12}, "fastsim.planner": {"fastsim.search": 3}}
    assert upward_imports(graph) == ["fastsim.search.rate (row 5) -> fastsim.planner (row 6), line 12"]
    graph = {"fastsim.workload.draws": {"fastsim.plans": 7}}          # a sideways import within a row
    assert upward_imports(graph) == ["fastsim.workload.draws (row 3) -> fastsim.plans (row 3), line 7"]
    assert upward_imports({"fastsim.ledger_step": {"fastsim.ledger_spec": 1}}) == []   # one group


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
