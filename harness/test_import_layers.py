"""Imports run one way: the harness's import graph has no cycle, and the case value is its bottom.

Every import of every module under harness/ counts, read from the source (ast), wherever it sits:
at the top, inside a function (an import that runs later is still a dependency) and under
``if TYPE_CHECKING:`` (a circle tied by annotations is still a circle to a reader). A cycle fails
with its path and where each import sits. Only what the source writes counts: that importing
``harness.modes.base`` first runs ``harness/modes/__init__.py`` is Python's, and a package's
submodules are its parts. docs/layout.md draws the layers.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

HARNESS = Path(__file__).resolve().parent
VALUE = "harness.case_spec"
VALUE_MAY_IMPORT = {"pydantic"}  # besides the standard library


@dataclass(frozen=True)
class Import:
    module: str  # what is imported, resolved to a harness module where it is one
    line: int
    where: str  # "top", "function" or "TYPE_CHECKING"


def module_name(path: Path) -> str:
    parts = path.relative_to(HARNESS.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def harness_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(HARNESS.rglob("*.py"))}


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(path: Path, name: str) -> list[Import]:
    """Every module ``path`` imports, with its line and where it sits."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, where: str) -> None:
        if isinstance(node, ast.If) and _type_checking(node.test):
            for child in node.body:
                visit(child, "TYPE_CHECKING")
            for child in node.orelse:
                visit(child, where)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            where = "TYPE_CHECKING" if where == "TYPE_CHECKING" else "function"
        if isinstance(node, ast.Import):
            found.extend(Import(alias.name, node.lineno, where) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found.extend(Import(f"{base}.{alias.name}", node.lineno, where) for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(ast.parse(path.read_text(), str(path)), "top")
    return found


def _resolved(target: str, modules: dict[str, Path]) -> str | None:
    """The harness module an import names: the longest module prefix of it, or None outside the harness."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def import_graph() -> dict[str, dict[str, Import]]:
    """module -> {harness module it imports -> the first such import}: ``from harness.x import y``
    names the module harness.x.y where there is one, else harness.x."""
    modules = harness_modules()
    graph: dict[str, dict[str, Import]] = {}
    for name, path in modules.items():
        edges = graph.setdefault(name, {})
        for found in imports_of(path, name):
            target = _resolved(found.module, modules)
            if target and target != name and target not in edges:
                edges[target] = found
    return graph


def find_cycle(graph: dict[str, dict[str, Import]]) -> list[str] | None:
    """A cycle as a path of modules (first == last), or None."""
    state: dict[str, str] = {}  # "open" while on the DFS path, "done" after
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        path.append(module)
        for target in graph[module]:
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[module] = "done"
        return None

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for module in graph:
        if module not in state:
            cycle = visit(module)
            if cycle:
                return cycle
    return None


def layers(graph: dict[str, dict[str, Import]]) -> dict[str, int]:
    """Each module's layer: 0 for one that imports no harness module, else one above its highest import."""
    layer: dict[str, int] = {}

    def of(module: str) -> int:
        if module not in layer:
            layer[module] = 1 + max((of(target) for target in graph[module]), default=-1)
        return layer[module]

    for module in graph:
        of(module)
    return layer


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    cycle = find_cycle(graph)
    steps = [f"{a} imports {b} (line {graph[a][b].line}, {graph[a][b].where})" for a, b in zip(cycle, cycle[1:])] \
        if cycle else []
    assert cycle is None, "import cycle: " + "; ".join(steps)


def test_the_case_value_imports_nothing_of_the_harness():
    """harness/case_spec.py is the bottom: the standard library and pydantic only, at any depth."""
    found = imports_of(harness_modules()[VALUE], VALUE)
    roots = {imported.module.split(".")[0] for imported in found if imported.module}
    assert roots <= set(sys.stdlib_module_names) | VALUE_MAY_IMPORT, sorted(roots)
    assert "harness" not in roots


def test_every_import_kind_is_read(tmp_path):
    """The reader sees top-level, function-level, TYPE_CHECKING and relative imports."""
    source = ("from typing import TYPE_CHECKING\nimport harness.a\nif TYPE_CHECKING:\n    from harness.b import B\n"
              "def f():\n    from harness import c\nfrom . import d\n")
    path = tmp_path / "x.py"
    path.write_text(source)
    found = {(imported.module, imported.where) for imported in imports_of(path, "harness.x")}
    assert {("harness.a", "top"), ("harness.b.B", "TYPE_CHECKING"), ("harness.c", "function"),
            ("harness.d", "top")} <= found
