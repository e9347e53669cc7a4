"""Every parser is listed by `infercore plugins`; an unknown parser name stops `infercore serve` at
once, listing the known names."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

TOOL_PARSERS = {"hermes", "llama3_json", "pythonic", "llama4_pythonic", "mistral", "qwen3_coder", "deepseek_v3",
                "deepseek_v31", "kimi_k2", "glm45", "granite", "internlm", "jamba", "xlam", "phi4_mini_json"}
REASONING_PARSERS = {"deepseek_r1", "qwen3", "glm45", "granite"}
CLI = [sys.executable, "-m", "infercore.entrypoints.cli"]


def test_plugins_command_lists_every_parser() -> None:
    out = subprocess.run([*CLI, "plugins", "--json"], capture_output=True, text=True, check=True).stdout
    registered = [record["registered"] for record in json.loads(out)]
    assert {n for r in registered for n in r.get("tool_parser", [])} == TOOL_PARSERS
    assert {n for r in registered for n in r.get("reasoning_parser", [])} == REASONING_PARSERS


@pytest.mark.parametrize(("flags", "known"), [
    (["--tool-call-parser", "nope"], TOOL_PARSERS),
    (["--reasoning-parser", "nope"], REASONING_PARSERS),
])
def test_unknown_parser_stops_serve_with_the_known_names(qwen3_folder, flags, known) -> None:
    done = subprocess.run([*CLI, "serve", str(qwen3_folder), *flags], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "'nope'" in done.stderr and all(name in done.stderr for name in known)


def test_auto_tool_choice_without_a_parser_stops_serve(qwen3_folder) -> None:
    done = subprocess.run([*CLI, "serve", str(qwen3_folder), "--enable-auto-tool-choice"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "--tool-call-parser" in done.stderr
