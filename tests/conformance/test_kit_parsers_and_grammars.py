"""The kit's parser and grammar-backend cases: the in-tree parsers and backends pass, and a parser whose
stream loses text and a backend whose bitmask allows a refused token fail, naming the case."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from test_kit import _summary, run_kit

BROKEN = Path(__file__).with_name("broken_parser_plugin.py")
HERMES_OUTPUTS = [
    {"output": 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n'
               "</tool_call>"},
    {"output": '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n<tool_call>\n{"name": "b", '
               '"arguments": {"x": [1, 2.5, "é"]}}\n</tool_call>'},
]
THINK_OUTPUTS = [{"output": "<think>Two and two.\nThat is four.</think>The answer is 4."}]


def _outputs(tmp_path: Path, outputs: list[dict]) -> str:
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(outputs))
    return str(path)


def test_kit_passes_in_tree_tool_parsers(tmp_path: Path) -> None:
    proc = run_kit("--infercore-tool-parser", "hermes", "--infercore-tool-parser", "pythonic",
                   "--infercore-parser-outputs", _outputs(tmp_path, HERMES_OUTPUTS), "-k", "tool_parser")
    assert proc.returncode == 0 and "6 passed" in proc.stdout, _summary(proc)


def test_kit_passes_in_tree_reasoning_parsers(tmp_path: Path) -> None:
    proc = run_kit("--infercore-reasoning-parser", "deepseek_r1", "--infercore-reasoning-parser", "qwen3",
                   "--infercore-parser-outputs", _outputs(tmp_path, THINK_OUTPUTS), "-k", "reasoning_parser")
    assert proc.returncode == 0 and "4 passed" in proc.stdout, _summary(proc)


def test_kit_passes_xgrammar() -> None:
    proc = run_kit("--infercore-grammar-backend", "xgrammar")
    assert proc.returncode == 0 and "4 passed" in proc.stdout, _summary(proc)


def test_kit_passes_guidance_but_its_json_schema_masks() -> None:
    proc = run_kit("--infercore-grammar-backend", "guidance", "-k", "not json-schema")
    assert proc.returncode == 0 and "3 passed" in proc.stdout, _summary(proc)


@pytest.mark.xfail(reason="guidance's bitmask refuses tokens its matcher accepts inside a JSON key "
                          "('a' after '{\"n' of \"name\"); over-strict, never unsafe", strict=True)
def test_kit_guidance_json_schema_masks() -> None:
    proc = run_kit("--infercore-grammar-backend", "guidance", "-k", "json-schema")
    assert proc.returncode == 0, _summary(proc)


@pytest.fixture
def broken_dir(tmp_path: Path) -> Path:
    shutil.copy(BROKEN, tmp_path / "conftest.py")
    return tmp_path


def test_kit_fails_a_parser_whose_stream_differs(broken_dir: Path) -> None:
    proc = run_kit("--infercore-tool-parser", "broken_stream", "-k", "tool_parser", str(broken_dir), cwd=broken_dir)
    assert proc.returncode == 1, _summary(proc)
    assert re.search(r"tool parser 'broken_stream', plain sentence, streamed character by character: content "
                     r"'TheweatherinParis", proc.stdout), _summary(proc)


def test_kit_fails_a_backend_whose_bitmask_allows_a_refused_token(broken_dir: Path) -> None:
    proc = run_kit("--infercore-grammar-backend", "broken_bitmask", "-k", "regex", str(broken_dir), cwd=broken_dir)
    assert proc.returncode == 1, _summary(proc)
    assert ("grammar backend 'broken_bitmask', regex, step 0: token 0 is allowed by the bitmask but "
            "validate_tokens refuses it") in proc.stdout, _summary(proc)

