"""Conformance checks of tool-call and reasoning parsers: a stream, cut anywhere, gives what the whole
output gives.

A client assembles a stream from the deltas; the kit does the same for every way of cutting each
output (whole, character by character, in fixed and in random chunks) and compares the calls (names and
argument strings, in order), the reasoning and the content with what the whole-output method returns.
The outputs are a plain sentence (which must come back as content) and those of
``--infercore-parser-outputs FILE``: a JSON list of ``{"output": TEXT, "tools": [...]}`` (``tools`` as in
a chat request, optional), written in the parser's format.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from infercore.parsers import DeltaMessage, ToolRequest, get_reasoning_parser, get_tool_parser

PLAIN = "The weather in Paris is mild today, with light wind from the west."


@dataclass(frozen=True)
class ParserOutput:
    """One model output and the tools of its request."""

    name: str
    text: str
    tools: tuple[dict[str, Any], ...] = ()

    def request(self) -> ToolRequest:
        return ToolRequest(tools=list(self.tools))


@dataclass
class Assembled:
    """What a client builds from the deltas of one stream."""

    content: str = ""
    reasoning: str = ""
    calls: dict[int, list[str]] = field(default_factory=dict)  # index -> [name, arguments]

    def add(self, message: DeltaMessage | None) -> None:
        if message is None:
            return
        self.content += message.content or ""
        self.reasoning += message.reasoning or ""
        for call in message.tool_calls:
            name, arguments = self.calls.setdefault(call.index, ["", ""])
            self.calls[call.index] = [name + (call.function.name or ""), arguments + (call.function.arguments or "")]

    def named_calls(self) -> list[tuple[str, str]]:
        return [(name, arguments) for _, (name, arguments) in sorted(self.calls.items())]


def parser_outputs(path: str | None) -> list[ParserOutput]:
    """The plain sentence, then the outputs of ``path`` (see the module docstring)."""
    outputs = [ParserOutput("plain sentence", PLAIN)]
    if path:
        for i, item in enumerate(json.loads(Path(path).read_text())):
            outputs.append(ParserOutput(f"output {i}", item["output"], tuple(item.get("tools", ()))))
    return outputs


def cuttings(text: str, seed: int = 0) -> Iterator[tuple[str, list[str]]]:
    """(label, pieces) for every way the kit streams ``text``."""
    yield "whole", [text]
    yield "character by character", list(text)
    for size in (2, 3, 5, 7):
        yield f"chunks of {size}", [text[i:i + size] for i in range(0, len(text), size)]
    rng = random.Random(seed)
    for n in range(8):
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 12)))) if len(text) > 1 else []
        bounds = [0, *cuts, len(text)]
        yield f"random cut {n}", [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def test_tool_parser_stream_matches_whole_output(tool_parser_name: str, parser_output: ParserOutput) -> None:
    """Streamed in any pieces, an output gives the calls and content its whole extraction gives."""
    request = parser_output.request()
    whole = get_tool_parser(tool_parser_name).extract_tool_calls(parser_output.text, request)
    if parser_output.text == PLAIN:
        assert not whole.tools_called and whole.content == PLAIN, (
            f"tool parser {tool_parser_name!r}: a plain sentence must come back as content, got {whole}")
    expected = [(c.function.name, c.function.arguments) for c in whole.tool_calls]
    for label, pieces in cuttings(parser_output.text):
        parser = get_tool_parser(tool_parser_name)
        assembled = Assembled()
        for piece in pieces:
            assembled.add(parser.extract_tool_calls_streaming(piece, [], request))
        assembled.add(parser.flush(request))
        where = f"tool parser {tool_parser_name!r}, {parser_output.name}, streamed {label}"
        assert assembled.named_calls() == expected, f"{where}: calls {assembled.named_calls()}, whole {expected}"
        assert assembled.content == (whole.content or ""), (
            f"{where}: content {assembled.content!r}, whole {whole.content!r}")


def test_reasoning_parser_stream_matches_whole_output(reasoning_parser_name: str,
                                                      parser_output: ParserOutput) -> None:
    """Streamed in any pieces, an output splits into the reasoning and content its whole split gives."""
    reasoning, content = get_reasoning_parser(reasoning_parser_name).extract_reasoning(parser_output.text)
    for label, pieces in cuttings(parser_output.text):
        parser = get_reasoning_parser(reasoning_parser_name)
        assembled = Assembled()
        for piece in pieces:
            assembled.add(parser.extract_reasoning_streaming(piece, []))
        assembled.add(parser.flush())
        where = f"reasoning parser {reasoning_parser_name!r}, {parser_output.name}, streamed {label}"
        assert (assembled.reasoning, assembled.content) == (reasoning or "", content or ""), (
            f"{where}: reasoning {assembled.reasoning!r} and content {assembled.content!r}, whole "
            f"{reasoning!r} and {content!r}")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One case per parser named on the command line and per output."""
    for fixture, option in (("tool_parser_name", "--infercore-tool-parser"),
                            ("reasoning_parser_name", "--infercore-reasoning-parser")):
        if fixture in metafunc.fixturenames:
            names = metafunc.config.getoption(option) or []
            metafunc.parametrize(fixture, names or [pytest.param(None, marks=pytest.mark.skip(
                reason=f"no {option} was given"))], ids=[n for n in names] or ["none"])
    if "parser_output" in metafunc.fixturenames:
        outputs = parser_outputs(metafunc.config.getoption("--infercore-parser-outputs"))
        metafunc.parametrize("parser_output", outputs, ids=[o.name.replace(" ", "-") for o in outputs])
