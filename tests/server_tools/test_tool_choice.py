"""``tool_choice`` ``required`` and a named function on a random-weight model: constrained decoding
makes the reply valid calls, returned as ``tool_calls``; what the server refuses, it refuses with 400."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest
from tools_cases import ASK, TOOL_FLAGS, WEATHER_TOOL, client_of, streamed

TOOLS = [WEATHER_TOOL, {"type": "function", "function": {
    "name": "get_mood", "parameters": {"type": "object", "properties": {"mood": {"enum": ["good", "bad"]}},
                                       "required": ["mood"], "additionalProperties": False}}}]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
GREEDY = {"temperature": 0, "max_tokens": 64}


@pytest.fixture(scope="module")
def server(start, qwen3_folder):
    return start(qwen3_folder, *TOOL_FLAGS)


@pytest.fixture(scope="module")
def client(server):
    return client_of(server)


def _check_call(call, name: str | None = None) -> None:
    assert name is None or call.function.name == name
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def test_named_choice_calls_that_function(client) -> None:
    choice = {"type": "function", "function": {"name": "get_mood"}}
    result = client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS, tool_choice=choice, **GREEDY)
    [call] = result.choices[0].message.tool_calls
    _check_call(call, "get_mood")
    assert result.choices[0].finish_reason == "tool_calls" and result.choices[0].message.content is None
    stream = client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS, tool_choice=choice,
                                            stream=True, **GREEDY)
    [acc] = streamed(stream).values()
    deltas = acc["calls"][0]
    assert deltas[0].function.name == "get_mood" and acc["finish"] == "tool_calls"
    assert "".join(d.function.arguments or "" for d in deltas) == call.function.arguments


def test_required_choice_returns_the_generated_calls(client) -> None:
    result = client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS, tool_choice="required",
                                            **GREEDY)
    calls = result.choices[0].message.tool_calls
    assert calls and result.choices[0].finish_reason == "tool_calls"
    for call in calls:
        _check_call(call)
    stream = client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS, tool_choice="required",
                                            stream=True, **GREEDY)
    [acc] = streamed(stream).values()
    assert [d[0].function.name for d in acc["calls"].values()] == [c.function.name for c in calls]
    assert ["".join(x.function.arguments or "" for x in d) for d in acc["calls"].values()] == [
        c.function.arguments for c in calls]


def test_history_with_tool_calls_and_results_renders(server, client) -> None:
    history = [*ASK,
               {"role": "assistant", "content": "", "tool_calls": [
                   {"id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    tokens = httpx.post(server.url + "/tokenize", json={"messages": history}).json()["tokens"]
    prompt = httpx.post(server.url + "/detokenize", json={"tokens": tokens}).json()["prompt"]
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in prompt
    assert "<tool_response>\nsunny, 21 C\n</tool_response>" in prompt
    result = client.chat.completions.create(model="tiny", messages=history, tools=TOOLS, tool_choice="none",
                                            max_tokens=4)
    assert result.usage.prompt_tokens > len(tokens)  # the tools went into the system prompt as well


@pytest.mark.parametrize(("body", "words"), [
    ({"tools": TOOLS}, "--enable-auto-tool-choice and --tool-call-parser"),
    ({"tools": TOOLS, "tool_choice": "auto"}, "--enable-auto-tool-choice and --tool-call-parser"),
    ({"tool_choice": "required"}, "lists no tools"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "not among"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "drop response_format"),
])
def test_refusals_say_what_to_do(client, body, words) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="tiny", messages=ASK, max_tokens=4, **body)
    assert words in info.value.message
