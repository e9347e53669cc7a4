"""Every shipped tool-call format: whole-output results, and streaming that equals them however the
tokens are grouped."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from infercore.parsers import ExtractedToolCalls, ToolRequest, get_tool_parser
from tool_parsers.formats import FORMATS, Call, Format
from tool_parsers.streaming import Detokenized, Piece, Streamed

TYPES = {"s": "x", "i": 42, "f": -1500.5, "t": True, "b": False, "n": None,
         "o": {"k": [1, {"z": "y"}]}, "a": [1, "two", None], "e": {}}
ESCAPES = {"q": 'say "hi" \\ back', "u": "héllo 世界 😀", "nl": "a\nb\tc"}


def _tool(name: str, properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": properties}}}


REQUEST = ToolRequest(tools=[
    _tool("get_weather", {"city": {"type": "string"}, "unit": {"type": "string"}}),
    _tool("get_time", {"zone": {"type": "string"}}),
    _tool("all_types", {"s": {"type": "string"}, "i": {"type": "integer"}, "f": {"type": "number"},
                        "t": {"type": "boolean"}, "b": {"type": "boolean"}, "n": {"type": "null"},
                        "o": {"type": "object"}, "a": {"type": "array"}, "e": {"type": "object"}}),
    _tool("echo", {k: {"type": "string"} for k in ESCAPES}),
    _tool("noop", {}),
])

CALLS: dict[str, list[Call]] = {
    "one": [("get_weather", {"city": "Paris", "unit": "celsius"})],
    "parallel": [("get_weather", {"city": "Paris"}), ("get_time", {"zone": "UTC"})],
    "types": [("all_types", TYPES)],
    "empty": [("noop", {})],
    "escapes": [("echo", ESCAPES)],
}


@dataclass
class Case:
    """A model output and what the parser should make of it."""

    fmt: Format
    name: str
    text: str
    calls: list[Call]
    content: str | None

    @property
    def id(self) -> str:
        return f"{self.fmt.parser}-{self.fmt.variant}-{self.name}"


def _cases() -> list[Case]:
    cases = []
    for fmt in FORMATS:
        cases.append(Case(fmt, "no_call", "The weather in Paris is sunny, 20 °C.", [], None))
        cases[-1].content = cases[-1].text
        for name, calls in CALLS.items():
            cases.append(Case(fmt, name, fmt.write(calls), calls, None))
        written = fmt.write(CALLS["one"])
        cases.append(Case(fmt, "after", written + "\nDone.", CALLS["one"], "Done."))
        around = "Let me check. " + written + " Done."
        if fmt.anchored:
            cases.append(Case(fmt, "around", around, [], around))
        else:
            cases.append(Case(fmt, "around", around, CALLS["one"], "Let me check. Done."))
        for i, text in enumerate(fmt.malformed):
            cases.append(Case(fmt, f"malformed{i}", text, [], text))
    return cases


CASES = _cases()


def _whole(case: Case) -> ExtractedToolCalls:
    return get_tool_parser(case.fmt.parser).extract_tool_calls(case.text, REQUEST)


def _stream(case: Case, pieces: list[Piece]) -> Streamed:
    parser = get_tool_parser(case.fmt.parser)
    streamed = Streamed()
    for text, ids in pieces:
        streamed.add(parser.extract_tool_calls_streaming(text, ids, REQUEST))
    streamed.add(parser.flush(REQUEST))
    assert not streamed.reasoning
    return streamed


def _assert_same(streamed: Streamed, whole: ExtractedToolCalls, label: str) -> None:
    assert streamed.content == (whole.content or ""), label
    assert streamed.named_calls() == [(c.function.name, c.function.arguments) for c in whole.tool_calls], label


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_whole_output(case: Case) -> None:
    result = _whole(case)
    assert result.tools_called == bool(case.calls)
    assert [(c.function.name, json.loads(c.function.arguments)) for c in result.tool_calls] == case.calls
    assert result.content == case.content
    assert len({c.id for c in result.tool_calls}) == len(result.tool_calls)
    assert all(c.type == "function" and c.id for c in result.tool_calls)
    if case.name == "escapes":
        assert "😀" in result.tool_calls[0].function.arguments, "non-ASCII stays as written"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_streaming_equals_whole_output(case: Case, tokenizer: Any) -> None:
    whole = _whole(case)
    detok = Detokenized(tokenizer, case.text)
    _assert_same(_stream(case, list(detok.token_by_token())), whole, "token by token")
    for i, pieces in enumerate(detok.random_groupings(100, seed=len(case.text))):
        _assert_same(_stream(case, pieces), whole, f"random grouping {i}")


def test_streaming_character_by_character_holds_markers_back() -> None:
    text = "Sure.\n<tool_call>\n" + json.dumps({"name": "get_time", "arguments": {"zone": "UTC"}}) + "\n</tool_call>"
    parser = get_tool_parser("hermes")
    contents = []
    for char in text:
        message = parser.extract_tool_calls_streaming(char, [], REQUEST)
        if message is not None and message.content:
            contents.append(message.content)
    assert parser.flush(REQUEST) is None
    assert "".join(contents) == "Sure."


def test_kimi_keeps_the_ids_the_model_wrote() -> None:
    fmt = next(f for f in FORMATS if f.parser == "kimi_k2")
    result = get_tool_parser("kimi_k2").extract_tool_calls(fmt.write(CALLS["parallel"]), REQUEST)
    assert [c.id for c in result.tool_calls] == ["functions.get_weather:0", "functions.get_time:1"]


def test_typed_values_follow_the_schema() -> None:
    text = "<tool_call>\n<function=all_types>\n<parameter=i>\n7\n</parameter>\n<parameter=s>\n7\n</parameter>\n" \
           "<parameter=undeclared>\n[1]\n</parameter>\n</function>\n</tool_call>"
    result = get_tool_parser("qwen3_coder").extract_tool_calls(text, REQUEST)
    assert json.loads(result.tool_calls[0].function.arguments) == {"i": 7, "s": "7", "undeclared": "[1]"}


def test_a_call_that_breaks_after_it_streamed_keeps_what_was_sent() -> None:
    text = '<tool_call>{"name": "get_time", "arguments": {"zone": "UTC"}} oops</tool_call>'
    assert _whole(Case(FORMATS[0], "late", text, [], text)).content == text
    parser = get_tool_parser("hermes")
    streamed = Streamed()
    for char in text:
        streamed.add(parser.extract_tool_calls_streaming(char, [], REQUEST))
    streamed.add(parser.flush(REQUEST))
    assert streamed.named_calls() == [("get_time", '{"zone": "UTC"}')]
    assert streamed.content == text


def test_arguments_stream_while_they_are_written() -> None:
    text = '<tool_call>{"name": "echo", "arguments": {"q": "a long value written over many tokens"}}</tool_call>'
    parser = get_tool_parser("hermes")
    fragments = []
    for start in range(0, len(text), 3):
        message = parser.extract_tool_calls_streaming(text[start:start + 3], [], REQUEST)
        fragments += [d.function.arguments for d in message.tool_calls] if message else []
    assert parser.flush(REQUEST) is None
    assert len(fragments) > 10
    assert "".join(fragments) == '{"q": "a long value written over many tokens"}'
