"""No import cycles among the modules of ``flamestream`` and ``pyspark_flamestream``.

A module-level import runs when the module is first imported; two modules that need each
other at import time work only in one import order, and a module moved or split later
fails in the other. The edges counted are the imports a module runs at import time: at its
top level, in a class body, or under a top-level ``if``/``try``. Not those inside a function
(run later) or under ``if TYPE_CHECKING:`` (never run). A second check counts the imports in
functions too: an import moved into a function to dodge a cycle still names it. Pure
``ast``: nothing is imported.
"""

from __future__ import annotations

import ast
from collections.abc import Container, Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "python"
PACKAGES = ("flamestream", "pyspark_flamestream")


def _modules() -> dict[str, Path]:
    """Every module of :data:`PACKAGES` by dotted name (a package by its ``__init__``)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    name = test.attr if isinstance(test, ast.Attribute) else getattr(test, "id", None)
    return name == "TYPE_CHECKING"


def _imports(body: list[ast.stmt], later: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of ``body`` that run when the module is imported.

    ``later``: also those in functions (run when the function is first called).
    """
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _imports(node.orelse, later)
        elif later or not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for field in ("body", "orelse", "finalbody", "handlers"):
                for block in getattr(node, field, []):
                    inner = block.body if isinstance(block, ast.ExceptHandler) else [block]
                    yield from _imports(inner, later)


def _imported(
    name: str, is_package: bool, node: ast.Import | ast.ImportFrom, modules: Container[str]
) -> list[str]:
    """The modules ``node`` (in module ``name``) imports by name.

    ``from package import module`` imports the module (its package is under way already
    when a module of it runs); ``from module import name`` the module.
    """
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = name.split(".")
        anchor = parts if is_package else parts[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    return [
        f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
        for alias in node.names
    ]


@cache
def _parsed() -> dict[str, tuple[ast.Module, bool]]:
    """Every module's syntax tree, and whether it is a package (parsed once for the tests)."""
    return {
        name: (ast.parse(path.read_text(), str(path)), path.name == "__init__.py")
        for name, path in _modules().items()
    }


def import_graph(later: bool = False) -> dict[str, set[str]]:
    """Each module -> the project's modules it imports at import time (``later``: or after)."""
    modules = _parsed()
    graph: dict[str, set[str]] = {}
    for name, (tree, is_package) in modules.items():
        graph[name] = {
            target
            for node in _imports(tree.body, later)
            for target in _imported(name, is_package, node, modules)
            if target in modules and target != name
        }
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        for after in sorted(graph[node]):
            if after not in index:
                visit(after)
                low[node] = min(low[node], low[after])
            elif after in stack:
                low[node] = min(low[node], index[after])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(_cycle_in(graph, set(component)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the first (by name) module of ``component``."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for after in sorted(graph[node] & component):
                if after == start:
                    return [*paths[node], start]
                if after not in paths:
                    paths[after] = [*paths[node], after]
                    following.append(after)
        frontier = following
    raise AssertionError(component)  # a strongly connected component has a cycle


def test_the_graph_sees_the_imports_that_run_at_import_time():
    graph = import_graph()
    assert "flamestream.warm_start" in graph["flamestream.launcher"]
    # a function's import runs later: the warm server imports the connector in one
    assert "pyspark_flamestream" not in graph["flamestream.warm_start"]
    assert "pyspark_flamestream" in import_graph(later=True)["flamestream.warm_start"]
    assert "flamestream.spark.plan.execution" in graph["flamestream.spark.apply"]
    # `from flamestream import warm_start` imports the module, not the package's __init__
    assert "flamestream" not in graph["flamestream.launcher"]


def test_the_launcher_is_a_command_no_module_imports():
    graph = import_graph()
    importers = sorted(name for name, imports in graph.items() if "flamestream.launcher" in imports)
    assert importers == []
    assert graph["flamestream.python_env"] == set()  # what they share instead: a leaf


def test_a_cycle_is_found_and_named():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_level_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" -> ".join(cycle) for cycle in found)


def test_no_cycle_hidden_in_a_function():
    """Nor with the imports in functions: moving one into a function does not break a cycle."""
    found = cycles(import_graph(later=True))
    assert not found, "import cycles: " + "; ".join(" -> ".join(cycle) for cycle in found)
