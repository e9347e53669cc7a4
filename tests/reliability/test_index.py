"""INDEX.md maps every line of the reliability list (1-23) to tests, and every test it names exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
LINES = range(1, 24)
HEADING = re.compile(r"^### (\d+)\. \S")
ENTRY = re.compile(r"^- (tests/\S+\.py)::(\S+)$")


def parse_index(text: str) -> dict[int, list[tuple[str, str]]]:
    """Line number -> the (file, test) pairs listed under it; a bullet that names no test must be a TODO."""
    index: dict[int, list[tuple[str, str]]] = {}
    current: int | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if heading := HEADING.match(line):
            current = int(heading.group(1))
            if current in index:
                raise ValueError(f"INDEX.md line {number}: reliability line {current} is listed twice")
            index[current] = []
        elif line.startswith("## "):
            current = None
        elif line.startswith("- "):
            entry = ENTRY.match(line)
            if current is None or (entry is None and not line.startswith("- TODO: ")):
                raise ValueError(f"INDEX.md line {number}: {line!r} is neither `- path::test` under a numbered "
                                 "heading nor a `- TODO: ` note")
            if entry is not None:
                index[current].append((entry.group(1), entry.group(2)))
    return index


def defined_tests(path: Path) -> set[str]:
    """``name`` and ``Class::name`` of every test function in a file."""
    tree = ast.parse(path.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.update(f"{node.name}::{item.name}" for item in node.body
                         if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name.startswith("test"))
    return names


@pytest.fixture(scope="module")
def index() -> dict[int, list[tuple[str, str]]]:
    return parse_index((HERE / "INDEX.md").read_text())


def test_every_line_has_a_test(index) -> None:
    assert sorted(index) == list(LINES)
    assert not [line for line, tests in index.items() if not tests]


def test_every_named_test_exists(index) -> None:
    missing = []
    for line, tests in index.items():
        for file, name in tests:
            path = ROOT / file
            if not path.is_file() or name not in defined_tests(path):
                missing.append(f"line {line}: {file}::{name}")
    assert not missing, missing


def test_the_parser_refuses_what_it_cannot_read() -> None:
    with pytest.raises(ValueError, match="neither"):
        parse_index("### 1. a line\n- tests/x.py\n")
    with pytest.raises(ValueError, match="twice"):
        parse_index("### 2. a\n### 2. b\n")
    assert parse_index("### 3. c\n- tests/a.py::test_b\n- TODO: more\n") == {3: [("tests/a.py", "test_b")]}
    assert defined_tests(Path(__file__)) >= {"test_every_line_has_a_test", "test_every_named_test_exists"}
