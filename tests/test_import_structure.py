"""Import structure: the command line sits on top; no module of the package imports it back.

Helpers that the command line and the modules implementing commands share live in
``fastsim._command_helpers``, below both. Only ``fastsim.cli`` itself and ``fastsim.__main__`` (the
``python -m fastsim`` entry point) may import ``fastsim.cli``.
"""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fastsim"
ALLOWED = {"fastsim.cli", "fastsim.__main__"}

# ``fastsim.sweep.__all__`` when the sweep was one module; the package keeps it.
SWEEP_ALL = [
    "AXES", "SweepGrid", "SweepSettings", "load_grid", "make_grid", "parse_axis", "analytic_table",
    "run_sweep", "read_table", "pareto_front", "plot_sweep", "questions", "COLUMNS", "QUESTION",
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> list:
    return sorted((p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts), key=str)


def _imported(path: Path, text: str | None = None) -> list:
    """``(line, name)`` of every module an ``import`` / ``from ... import`` in the file may bind, at
    any depth (function-level imports included), names made absolute; ``text`` stands in for the
    file's contents."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    text = path.read_text(encoding="utf-8") if text is None else text
    out = []
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append((node.lineno, mod))
            # ``from . import cli`` / ``from fastsim import cli``: the names may be submodules
            out += [(node.lineno, f"{mod}.{a.name}") for a in node.names]
    return out


def _imports_cli(name: str) -> bool:
    return name == "fastsim.cli" or name.startswith("fastsim.cli.")


@pytest.mark.parametrize("code, where", [
    ("from .cli import main", "planner.py"),
    ("from . import cli", "planner.py"),
    ("from ..cli import _fmt", "sweep/command.py"),
    ("from .. import cli", "sweep/command.py"),
    ("from ..cli import _fmt", "sweep/__init__.py"),
    ("import fastsim.cli", "planner.py"),
    ("from fastsim.cli import main", "planner.py"),
    ("from fastsim import cli", "planner.py"),
    ("def f():\n    from .cli import _catalog", "planner.py"),
])
def test_the_walk_sees_every_form_of_import(code, where):
    assert any(_imports_cli(n) for _, n in _imported(PACKAGE / where, code)), code


@pytest.mark.parametrize("code, where", [
    ("from .client import x", "planner.py"),
    ("import fastsim.clip", "planner.py"),
    ("from .cli import x", "sweep/command.py"),          # fastsim.sweep.cli, not fastsim.cli
    ("from . import cli", "sweep/__init__.py"),
])
def test_the_walk_resolves_relative_imports(code, where):
    assert not any(_imports_cli(n) for _, n in _imported(PACKAGE / where, code)), code


@pytest.mark.parametrize("path", _modules(), ids=lambda p: _module_name(p))
def test_no_module_imports_the_cli(path):
    name = _module_name(path)
    if name in ALLOWED:
        return
    bad = [f"line {line}: {mod}" for line, mod in _imported(path) if _imports_cli(mod)]
    assert not bad, f"{name} imports the command line (move what it needs to fastsim._command_helpers): {bad}"


def test_the_walk_covers_the_sweep_package():
    names = {_module_name(p) for p in _modules()}
    assert {"fastsim.sweep", "fastsim.sweep.grid", "fastsim._command_helpers", "fastsim.cli"} <= names


def test_sweep_public_api_unchanged():
    sweep = importlib.import_module("fastsim.sweep")
    assert list(sweep.__all__) == SWEEP_ALL
    for name in SWEEP_ALL:
        assert hasattr(sweep, name), name
    # what the command line and the tests reach for besides __all__
    for name in ("cli_sweep", "TABLE_VERSION", "MAX_PLOTS", "_run_task", "_write_chunk", "_workload_seed"):
        assert hasattr(sweep, name), name


def test_cli_keeps_the_shared_helpers():
    """The moved helpers are still reachable under their old names in ``fastsim.cli``."""
    cli = importlib.import_module("fastsim.cli")
    helpers = importlib.import_module("fastsim._command_helpers")
    for name in ("_catalog", "_constants", "_trace_notes", "_fmt", "_check_plot"):
        assert getattr(cli, name) is getattr(helpers, name), name
    imported = {mod for _, mod in _imported(PACKAGE / "_command_helpers.py")}
    assert not {m for m in imported if m.startswith(("fastsim.cli", "fastsim.sweep"))}
