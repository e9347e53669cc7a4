"""The parsing glue of the chat route without a server: broken parsers give text back, one call
when parallel calls are off, and the 400 when no grammar backend is installed."""

from __future__ import annotations

import json

import pytest
from tools_cases import HERMES_CALL, WEATHER_TOOL

from infercore.config import ServeConfig
from infercore.entrypoints.openai import chat_parsing
from infercore.entrypoints.openai.chat_parsing import ChatParsers, ChoiceParser
from infercore.entrypoints.openai.errors import APIError
from infercore.entrypoints.openai.protocol import ChatCompletionRequest
from infercore.parsers import ReasoningParser, ToolParser, ToolRequest

ASK = [{"role": "user", "content": "weather?"}]
TWO_CALLS = HERMES_CALL + "\n" + HERMES_CALL.replace("Paris", "London")


class BrokenToolParser(ToolParser):
    """Fails on every input."""

    def _extract_tool_calls(self, model_output, request):
        raise RuntimeError("broken")

    def _extract_tool_calls_streaming(self, delta_text, delta_token_ids, request):
        raise RuntimeError("broken")

    def _flush(self, request):
        raise RuntimeError("broken")


class BrokenReasoningParser(ReasoningParser):
    """Fails on every input."""

    def is_reasoning_end(self, token_ids):
        return False

    def _extract_reasoning(self, text, request):
        raise RuntimeError("broken")

    def _extract_reasoning_streaming(self, delta_text, delta_token_ids):
        raise RuntimeError("broken")

    def _flush(self):
        raise RuntimeError("broken")


def _request(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest(messages=ASK, tools=[WEATHER_TOOL], **fields)


def _streamed(parser: ChoiceParser, text: str, size: int = 3) -> tuple[str, str, dict[int, str]]:
    reasoning, content, calls = "", "", {}
    deltas = [parser.feed(text[i:i + size], []) for i in range(0, len(text), size)] + [parser.finish()]
    for delta in filter(None, deltas):
        reasoning += delta.reasoning_content or ""
        content += delta.content or ""
        for call in delta.tool_calls or []:
            calls[call.index] = calls.get(call.index, "") + (call.function.arguments or "")
    return reasoning, content, calls


def test_broken_parsers_hand_the_text_back() -> None:
    text = "<think>hm</think>" + HERMES_CALL
    parser = ChoiceParser(BrokenReasoningParser(), BrokenToolParser(), ToolRequest(), True, True)
    parsed = parser.parse(text)
    assert (parsed.reasoning, parsed.content, parsed.tool_calls) == (None, text, [])
    assert parser.finish_reason("stop") == "stop"
    stream = ChoiceParser(BrokenReasoningParser(), BrokenToolParser(), ToolRequest(), True, True)
    assert _streamed(stream, text) == ("", text, {})


def test_parallel_tool_calls_false_keeps_the_first_call() -> None:
    parsers = ChatParsers(ServeConfig(tool_call_parser="hermes", enable_auto_tool_choice=True), None)
    both = parsers.for_request(_request()).parse(TWO_CALLS)
    assert [json.loads(c.function.arguments)["city"] for c in both.tool_calls] == ["Paris", "London"]
    one = parsers.for_request(_request(parallel_tool_calls=False))
    assert [json.loads(c.function.arguments)["city"] for c in one.parse(TWO_CALLS).tool_calls] == ["Paris"]
    _, content, calls = _streamed(parsers.for_request(_request(parallel_tool_calls=False)), TWO_CALLS)
    assert content == "" and list(calls) == [0] and json.loads(calls[0]) == {"city": "Paris"}


def test_constrained_choice_without_a_grammar_backend_is_refused(monkeypatch) -> None:
    class NoBackends:
        def registry(self, kind):
            return type("Empty", (), {"names": staticmethod(lambda: [])})()

    monkeypatch.setattr(chat_parsing, "get_plugin_manager", NoBackends)
    with pytest.raises(APIError, match="install infercore-structured-output") as info:
        chat_parsing.tool_choice_constraint(_request(tool_choice="required"))
    assert info.value.status == 400
    assert chat_parsing.tool_choice_constraint(_request(tool_choice="auto")) is None
