"""The layers of docs/architecture/index.md hold: imports point down only (import-linter's contracts
in pyproject.toml, function-level imports included), and no module of ``workbench`` takes part
in an import cycle, however the import is written (module level, inside a function, or
under ``TYPE_CHECKING``)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "workbench"


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the workbench modules it imports anywhere in its code (``from a.b import c``
    counts as importing ``a.b.c`` when that is a module, else ``a.b``)."""
    paths = {module_name(path, package.parent): path for path in package.rglob("*.py")}
    root = package.name
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: resolve against this module's package
                    anchor = name.split(".")
                    anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in node.names:
                    candidate = f"{base}.{alias.name}"
                    targets.append(candidate if candidate in paths else base)
            for target in targets:
                if target.split(".")[0] == root and target in paths and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import(tmp_path):
    package = tmp_path / "demo"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text("def f():\n    from demo.high import g\n")
    (package / "high.py").write_text("from demo import low\n")
    (package / "alone.py").write_text("import demo.low\n")
    graph = import_graph(package)
    assert graph["demo.high"] == {"demo.low"} and graph["demo.low"] == {"demo.high"}
    assert cycles(graph) == [["demo.high", "demo.low"]]


def test_no_module_of_the_workbench_is_in_an_import_cycle():
    graph = import_graph()
    assert len(graph) > 100  # the walk saw the package
    assert cycles(graph) == []


def _lint_imports() -> subprocess.CompletedProcess:
    executable = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if executable is None:
        pytest.fail("lint-imports is missing: install the dev extra (import-linter)")
    return subprocess.run(
        [executable, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


@pytest.mark.integration
def test_every_package_is_in_a_layer_and_the_layers_hold():
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+")
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layered = {
        name.strip()
        for contract in contracts["contracts"]
        if contract["type"] == "layers"
        for layer in contract["layers"]
        for name in layer.split("|")
    }
    packages = {
        f"workbench.{path.stem if path.suffix else path.name}"
        for path in PACKAGE.iterdir()
        if (path.is_dir() and (path / "__init__.py").exists())
        or (path.suffix == ".py" and path.name != "__init__.py")
    }
    assert packages - layered == set(), "every package and top module belongs to a layer"
    result = _lint_imports()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.integration
def test_an_upward_import_breaks_the_layers(tmp_path):
    """A scratch module in a low layer that imports a front end makes lint-imports fail,
    naming the import: the contracts are not vacuous."""
    scratch = PACKAGE / "runtime" / "scratch_upward_import.py"
    scratch.write_text("def reach_up():\n    from workbench.cli import main\n    return main\n")
    try:
        result = _lint_imports()
    finally:
        scratch.unlink()
    assert result.returncode != 0
    assert "workbench.runtime.scratch_upward_import -> workbench.cli" in result.stdout
