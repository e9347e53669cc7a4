"""Automatic tool calls: a model that writes a Hermes ``<tool_call>`` gets OpenAI ``tool_calls`` back,
whole and streamed, through `infercore serve --tool-call-parser hermes --enable-auto-tool-choice`."""

from __future__ import annotations

import json

import pytest
from tools_cases import ASK, HERMES_CALL, SCRIPTED_FLAGS, TIME_TOOL, WEATHER_TOOL, client_of, streamed

TOOLS = [WEATHER_TOOL, TIME_TOOL]


@pytest.fixture(scope="module")
def client(start, scripted_folder):
    server = start(scripted_folder(HERMES_CALL), *SCRIPTED_FLAGS, "--tool-call-parser", "hermes",
                   "--enable-auto-tool-choice")
    return client_of(server)


def test_whole_reply_is_a_tool_call(client) -> None:
    result = client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS)
    choice = result.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}


def test_streamed_call_fragments_make_the_whole_arguments(client) -> None:
    whole = client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS, tool_choice="auto")
    stream = client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS, tool_choice="auto",
                                            stream=True)
    [(index, acc)] = streamed(stream).items()
    assert index == 0 and acc["finish"] == "tool_calls" and acc["content"] == ""
    [(call_index, deltas)] = acc["calls"].items()
    first, rest = deltas[0], deltas[1:]
    assert call_index == 0 and first.id.startswith("call_") and first.type == "function"
    assert first.function.name == "get_weather"
    assert rest and all(d.id is None and d.function.name is None for d in rest)
    arguments = "".join(d.function.arguments or "" for d in deltas)
    assert arguments == whole.choices[0].message.tool_calls[0].function.arguments


def test_every_choice_streams_its_own_calls(client) -> None:
    stream = client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS, n=2, stream=True,
                                            stream_options={"include_usage": True})
    choices = streamed(stream)
    assert sorted(choices) == [0, 1]
    for acc in choices.values():
        deltas = acc["calls"][0]
        assert deltas[0].function.name == "get_weather" and acc["finish"] == "tool_calls"
        assert json.loads("".join(d.function.arguments or "" for d in deltas)) == {"city": "Paris"}


def test_tool_choice_none_and_no_tools_return_the_text(client) -> None:
    for extra in ({"tools": TOOLS, "tool_choice": "none"}, {}):
        result = client.chat.completions.create(model="tiny", messages=ASK, **extra)
        assert result.choices[0].message.content == HERMES_CALL
        assert not result.choices[0].message.tool_calls
        assert result.choices[0].finish_reason == "stop"
        stream = client.chat.completions.create(model="tiny", messages=ASK, stream=True, **extra)
        [acc] = streamed(stream).values()
        assert acc["content"] == HERMES_CALL and not acc["calls"] and acc["finish"] == "stop"


def test_a_call_history_renders_and_answers(client) -> None:
    history = [*ASK,
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    result = client.chat.completions.create(model="tiny", messages=history, tools=TOOLS)
    assert result.choices[0].message.tool_calls[0].function.name == "get_weather"


def test_logprobs_stream_while_the_parser_holds_text_back(client) -> None:
    chunks = list(client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS, stream=True,
                                                 logprobs=True, top_logprobs=1,
                                                 stream_options={"include_usage": True}))
    entries = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert len(entries) == chunks[-1].usage.completion_tokens
    calls = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []]
    assert calls[0].function.name == "get_weather"
