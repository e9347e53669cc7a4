"""``tool_choice: required`` with `--reasoning-parser qwen3`: the model reasons freely, the grammar
holds from the end of the reasoning, and the JSON list it then writes comes back as ``tool_calls``."""

from __future__ import annotations

import json

import pytest
from tools_cases import ASK, SCRIPTED_FLAGS, WEATHER_TOOL, client_of, streamed

THOUGHT = "Two cities to look up."
CALLS = [{"name": "get_weather", "arguments": {"city": "Paris"}},
         {"name": "get_weather", "arguments": {"city": "London"}}]
SCRIPT = f"<think>{THOUGHT}</think>{json.dumps(CALLS)}"


@pytest.fixture(scope="module")
def client(start, scripted_folder):
    return client_of(start(scripted_folder(SCRIPT), *SCRIPTED_FLAGS, "--reasoning-parser", "qwen3"))


def test_reasoning_then_required_calls(client) -> None:
    result = client.chat.completions.create(model="tiny", messages=ASK, tools=[WEATHER_TOOL],
                                            tool_choice="required")
    message = result.choices[0].message
    assert message.model_extra["reasoning_content"] == THOUGHT and message.content is None
    assert [{"name": c.function.name, "arguments": json.loads(c.function.arguments)}
            for c in message.tool_calls] == CALLS
    assert result.choices[0].finish_reason == "tool_calls"
    [acc] = streamed(client.chat.completions.create(model="tiny", messages=ASK, tools=[WEATHER_TOOL],
                                                    tool_choice="required", stream=True)).values()
    assert acc["reasoning"] == THOUGHT and acc["content"] == "" and acc["finish"] == "tool_calls"
    assert ["".join(d.function.arguments or "" for d in deltas) for deltas in acc["calls"].values()] == [
        c.function.arguments for c in message.tool_calls]


def test_parallel_tool_calls_false_returns_the_first_call(client) -> None:
    result = client.chat.completions.create(model="tiny", messages=ASK, tools=[WEATHER_TOOL],
                                            tool_choice="required", parallel_tool_calls=False)
    [call] = result.choices[0].message.tool_calls
    assert json.loads(call.function.arguments) == {"city": "Paris"}
