"""Reasoning, then a tool call: with `--reasoning-parser deepseek_r1 --tool-call-parser hermes` the
reasoning parser reads the reply first and the tool parser reads the content it leaves."""

from __future__ import annotations

import json

import pytest
from tools_cases import ASK, HERMES_CALL, SCRIPTED_FLAGS, WEATHER_TOOL, client_of, streamed

THOUGHT = "I should look the weather up."
SCRIPT = f"<think>{THOUGHT}</think>\n\n{HERMES_CALL}"


@pytest.fixture(scope="module")
def client(start, scripted_folder):
    return client_of(start(scripted_folder(SCRIPT), *SCRIPTED_FLAGS, "--reasoning-parser", "deepseek_r1",
                           "--tool-call-parser", "hermes", "--enable-auto-tool-choice"))


def test_whole_reply_has_reasoning_and_a_call(client) -> None:
    result = client.chat.completions.create(model="tiny", messages=ASK, tools=[WEATHER_TOOL])
    message = result.choices[0].message
    assert message.model_extra["reasoning_content"] == THOUGHT and message.content is None
    assert message.tool_calls[0].function.name == "get_weather"
    assert result.choices[0].finish_reason == "tool_calls"


def test_streamed_reply_has_reasoning_then_a_call(client) -> None:
    whole = client.chat.completions.create(model="tiny", messages=ASK, tools=[WEATHER_TOOL])
    [acc] = streamed(client.chat.completions.create(model="tiny", messages=ASK, tools=[WEATHER_TOOL],
                                                    stream=True)).values()
    assert acc["reasoning"] == THOUGHT and acc["content"] == "" and acc["finish"] == "tool_calls"
    arguments = "".join(d.function.arguments or "" for d in acc["calls"][0])
    assert arguments == whole.choices[0].message.tool_calls[0].function.arguments
    assert json.loads(arguments) == {"city": "Paris"}


def test_deepseek_r1_thinks_even_when_asked_not_to(client) -> None:
    body = {"chat_template_kwargs": {"enable_thinking": False}}
    result = client.chat.completions.create(model="tiny", messages=ASK, tools=[WEATHER_TOOL], tool_choice="none",
                                            extra_body=body)
    assert result.choices[0].message.model_extra["reasoning_content"] == THOUGHT
    assert result.choices[0].message.content == HERMES_CALL
