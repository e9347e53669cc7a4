"""Core's top-level packages form a layered graph: walking every import (function-local ones too,
``TYPE_CHECKING`` ones not) finds no cycle between them, and the wire imports nothing above it."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2] / "core" / "infercore"

#: Packages the wire must never import: it is what they share.
ABOVE_THE_WIRE = {"engine", "executor", "frontend", "scheduler", "worker", "entrypoints"}


def _unit(path: pathlib.Path) -> str:
    """The top-level package (or module) of core that ``path`` belongs to."""
    first = path.relative_to(ROOT).parts[0]
    return first[:-3] if first.endswith(".py") else first


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    return skipped


def _imported_modules(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text())
    skipped = _type_checking_nodes(tree)
    package = ["infercore", *path.relative_to(ROOT).with_suffix("").parts]
    package = package[:-1]  # a module's (and an __init__'s) relative imports start at its folder
    found: list[str] = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                found.append(".".join(base + ([node.module] if node.module else [])))
            else:
                found.append(node.module or "")
    return found


def _edges() -> dict[str, dict[str, str]]:
    """unit -> {imported unit: the first file that imports it}."""
    edges: dict[str, dict[str, str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        source = _unit(path)
        for module in _imported_modules(path):
            parts = module.split(".")
            if parts[0] != "infercore" or len(parts) < 2 or parts[1] == source:
                continue
            edges.setdefault(source, {}).setdefault(parts[1], str(path.relative_to(ROOT)))
    return edges


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_between_top_level_packages() -> None:
    edges = _edges()
    cycles = _cycles({unit: set(targets) for unit, targets in edges.items()})
    detail = [
        f"{a} -> {b} ({edges[a][b]})" for cycle in cycles for a in cycle for b in cycle if b in edges.get(a, {})
    ]
    assert not cycles, f"import cycles between core packages {cycles}: " + "; ".join(detail)


@pytest.mark.parametrize("unit", ["wire"])
def test_the_wire_imports_nothing_above_it(unit: str) -> None:
    above = {target: where for target, where in _edges().get(unit, {}).items() if target in ABOVE_THE_WIRE}
    assert not above, f"{unit} imports {above}"


def test_executor_and_worker_import_the_wire_not_the_engine() -> None:
    edges = _edges()
    for unit in ("executor", "worker", "sample", "distributed"):
        bad = {t: w for t, w in edges.get(unit, {}).items() if t in {"engine", "frontend", "scheduler"}}
        assert not bad, f"{unit} imports {bad}"
