"""Imports run one way: the layers, stated below as data, each importing only the layers under it.

Every import of every module under harness/ counts, read from the source (ast), wherever it sits:
at the top, inside a function (an import that runs later is still a dependency) and under
``if TYPE_CHECKING:`` (a layer tied upward by annotations is still tied to a reader). An import that
runs up fails naming the file and line, the module imported and both layers; a cycle fails with its
path. Only what the source writes counts: that importing ``harness.modes.base`` first runs
``harness/modes/__init__.py`` is Python's, and a package's submodules are its parts.

Test files (test_*.py, conftest.py) sit beside what they test and may import any layer: a test of a
lower layer builds its inputs with the case loader above it, as a user would. No library module
imports a test. docs/layout.md draws the layers.
"""

from __future__ import annotations

import ast
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.release_independent

HARNESS = Path(__file__).resolve().parents[1]

# The sub-packages of harness/, bottom first. A module may import its own layer and those before it.
LAYERS = (
    "base",        # the machine, the sglang release, where runs write, the command line, the case value
    "checks",      # the torch oracle, the comparison, invariants, canaries, graph buffers
    "modes",       # the mode registry: each speculative mode's production contract
    "fixtures",    # backend entries, pools, sglang's process state: what a backend is built on
    "families",    # attention families (dense, MLA): pools, draws, oracle, model stand-in, backend entries
    "runners",     # the runner-form registry and the CUDA-graph forms
    "case",        # case files -> validated cases: YAML, limits, traits, the scheduler's rules
    "bugs",        # seed bugs and fixes, their replay, the finding packets
    "ledger",      # known failures, failure classes, every cell accounted for, re-runs alone
    "cell",        # cases -> cells, one cell end to end
    "search",      # beyond the case files: pair coverage, the generated tier, shrinking
    "reporting",   # results.json, JUnit, SUMMARY.md, heatmap, the docs matrix
    "wheelhouse",  # the offline wheelhouse for air-gapped GPU runners
    "speed",       # warm-up, forked workers, GPU slots, quick exits, the benchmark
    "probes",      # real cells run with one thing changed: controls, the census probe and cascade
    "session",     # a run: pytest's hooks, recording into reports/, the run on every release
)
# The package's own files: __init__.py sits with base (it switches Triton and the kernel caches
# before anything loads, so it may import base alone); the CLI, the shared test fixtures and the
# matrix's one test sit on top.
ROOT_FILES = {"harness": "base"}
TOP = {"harness.__main__", "harness.conftest", "harness.test_cases"}
VALUE = "harness.base.case_spec"
VALUE_MAY_IMPORT = {"pydantic"}  # besides the standard library


@dataclass(frozen=True)
class Import:
    module: str  # what is imported, resolved to a harness module where it is one
    line: int
    where: str  # "top", "function" or "TYPE_CHECKING"


def module_name(path: Path, harness: Path = HARNESS) -> str:
    parts = path.relative_to(harness.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def harness_modules(harness: Path = HARNESS) -> dict[str, Path]:
    return {module_name(path, harness): path for path in sorted(harness.rglob("*.py"))}


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


def import_graph(harness: Path = HARNESS) -> dict[str, dict[str, Import]]:
    """module -> {harness module it imports -> the first such import}: ``from harness.x import y``
    names the module harness.x.y where there is one, else harness.x."""
    modules = harness_modules(harness)
    graph: dict[str, dict[str, Import]] = {}
    for name, path in modules.items():
        edges = graph.setdefault(name, {})
        for found in imports_of(path, name):
            target = _resolved(found.module, modules)
            if target and target != name and target not in edges:
                edges[target] = found
    return graph


def layer_of(module: str) -> str | None:
    """The layer a module belongs to ("top" for the CLI and the matrix's test), or None: unplaced."""
    if module in TOP:
        return "top"
    if module in ROOT_FILES:
        return ROOT_FILES[module]
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[1] in LAYERS else None


def rank(layer: str) -> int:
    return len(LAYERS) if layer == "top" else LAYERS.index(layer)


def is_test(module: str) -> bool:
    last = module.rpartition(".")[2]
    return last.startswith("test_") or last == "conftest"


def _where(harness: Path, module: str, found: Import) -> str:
    path = harness_modules(harness)[module].relative_to(harness.parent)
    return f"{path}:{found.line}"


def unplaced(harness: Path = HARNESS) -> list[str]:
    """Files that belong to no layer: a module straight under harness/ that is none of ROOT_FILES and
    TOP, or a sub-package LAYERS does not name."""
    return [f"{path.relative_to(harness.parent)}: in no layer; move it into one of harness/{{{', '.join(LAYERS)}}}/ "
            "(or name a new sub-package in LAYERS)"
            for name, path in harness_modules(harness).items() if layer_of(name) is None]


def upward_imports(harness: Path = HARNESS) -> list[str]:
    """Each import that runs up a layer, or into a test, as one line: file:line, module, from-layer -> to-layer."""
    graph = import_graph(harness)
    found = []
    for module, edges in graph.items():
        source = layer_of(module)
        if source is None:
            continue
        for target, imported in edges.items():
            where = _where(harness, module, imported)
            if is_test(target) and not is_test(module):
                found.append(f"{where}: {module} imports the test {target} ({imported.where})")
                continue
            into = layer_of(target)
            if into is None or is_test(module) or rank(into) <= rank(source):
                continue
            found.append(f"{where}: {module} imports {target} ({imported.where}): layer {source} -> {into}, "
                         f"above it (a layer imports only {', '.join(LAYERS[:rank(source) + 1]) or 'itself'})")
    return found


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


def test_the_layers_are_the_folders():
    folders = {path.parent.name for path in HARNESS.glob("*/__init__.py")}
    assert folders == set(LAYERS), f"sub-packages not in LAYERS: {sorted(folders - set(LAYERS))}; " \
                                    f"LAYERS without a folder: {sorted(set(LAYERS) - folders)}"


def test_every_module_is_in_a_layer():
    problems = unplaced()
    assert not problems, "\n".join(problems)


def test_no_import_runs_up_a_layer():
    problems = upward_imports()
    assert not problems, "imports running up:\n" + "\n".join(problems)


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    cycle = find_cycle(graph)
    steps = [f"{a} imports {b} (line {graph[a][b].line}, {graph[a][b].where})" for a, b in zip(cycle, cycle[1:])] \
        if cycle else []
    assert cycle is None, "import cycle: " + "; ".join(steps)


def test_the_case_value_imports_nothing_of_the_harness():
    """harness/base/case_spec.py is the bottom: the standard library and pydantic only, at any depth."""
    found = imports_of(harness_modules()[VALUE], VALUE)
    roots = {imported.module.split(".")[0] for imported in found if imported.module}
    assert roots <= set(sys.stdlib_module_names) | VALUE_MAY_IMPORT, sorted(roots)
    assert "harness" not in roots


def _copy_of_the_harness(tmp_path: Path) -> Path:
    copy = tmp_path / "harness"
    shutil.copytree(HARNESS, copy, ignore=lambda folder, names: [n for n in names if n == "__pycache__" or (
        not n.endswith(".py") and not Path(folder, n).is_dir())])
    return copy


def test_a_planted_upward_import_is_named(tmp_path):
    """The checker fires: base's results.py made to import the cell layer, inside a function and for
    type checking, is named by file, line and both layers; the untouched copy passes."""
    copy = _copy_of_the_harness(tmp_path)
    assert upward_imports(copy) == [] and unplaced(copy) == []
    results = copy / "base" / "results.py"
    lines = results.read_text().splitlines()
    results.write_text("\n".join([*lines, "", "", "def _planted():",
                                  "    from harness.cell.run_cell import run_cell  # noqa: F401", ""]))
    planted_line = len(lines) + 4
    found = upward_imports(copy)
    assert found == [f"harness/base/results.py:{planted_line}: harness.base.results imports harness.cell.run_cell "
                     f"(function): layer base -> cell, above it (a layer imports only base)"], found
    (copy / "modes" / "planted.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                               "    from harness.session import record\n")
    assert any(line.startswith("harness/modes/planted.py:3: harness.modes.planted imports harness.session.record "
                               "(TYPE_CHECKING): layer modes -> session") for line in upward_imports(copy))


def test_same_layer_and_downward_imports_pass_and_tests_may_reach_up(tmp_path):
    copy = _copy_of_the_harness(tmp_path)
    (copy / "cell" / "planted.py").write_text("from harness.cell import run_cell\nfrom harness.base import cli\n")
    (copy / "base" / "test_planted.py").write_text("from harness.session import pytest_plugin\n")
    assert upward_imports(copy) == []
    (copy / "cell" / "planted.py").write_text("from harness.base import test_planted\n")
    assert upward_imports(copy) == ["harness/cell/planted.py:1: harness.cell.planted imports the test "
                                    "harness.base.test_planted (top)"]


def test_a_module_in_no_layer_is_named(tmp_path):
    copy = _copy_of_the_harness(tmp_path)
    (copy / "stray.py").write_text("")
    (copy / "newlayer").mkdir()
    (copy / "newlayer" / "__init__.py").write_text("")
    assert [line.split(":")[0] for line in unplaced(copy)] == ["harness/newlayer/__init__.py", "harness/stray.py"]


def test_every_import_kind_is_read(tmp_path):
    """The reader sees top-level, function-level, TYPE_CHECKING and relative imports."""
    source = ("from typing import TYPE_CHECKING\nimport harness.a\nif TYPE_CHECKING:\n    from harness.b import B\n"
              "def f():\n    from harness import c\nfrom . import d\n")
    path = tmp_path / "x.py"
    path.write_text(source)
    found = {(imported.module, imported.where) for imported in imports_of(path, "harness.x")}
    assert {("harness.a", "top"), ("harness.b.B", "TYPE_CHECKING"), ("harness.c", "function"),
            ("harness.d", "top")} <= found
