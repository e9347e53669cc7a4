"""Reasoning: `infercore serve --reasoning-parser qwen3` splits ``<think>…</think>`` from the answer,
whole and streamed, honours ``include_reasoning`` and ``chat_template_kwargs.enable_thinking``."""

from __future__ import annotations

import pytest
from tools_cases import ASK, SCRIPTED_FLAGS, client_of, streamed

THOUGHT = "The user asks about Paris."
ANSWER = "It is sunny in Paris."
SCRIPT = f"<think>{THOUGHT}</think>{ANSWER}"


@pytest.fixture(scope="module")
def client(start, scripted_folder):
    return client_of(start(scripted_folder(SCRIPT), *SCRIPTED_FLAGS, "--reasoning-parser", "qwen3"))


def test_whole_reply_splits_reasoning_from_content(client) -> None:
    result = client.chat.completions.create(model="tiny", messages=ASK)
    message = result.choices[0].message
    assert message.content == ANSWER
    assert message.model_extra["reasoning_content"] == THOUGHT
    assert message.model_extra["reasoning"] == THOUGHT
    assert result.choices[0].finish_reason == "stop"


def test_streamed_reply_splits_the_same(client) -> None:
    stream = client.chat.completions.create(model="tiny", messages=ASK, stream=True)
    [acc] = streamed(stream).values()
    assert acc["reasoning"] == THOUGHT and acc["content"] == ANSWER and acc["finish"] == "stop"


def test_include_reasoning_false_drops_it(client) -> None:
    body = {"include_reasoning": False}
    message = client.chat.completions.create(model="tiny", messages=ASK, extra_body=body).choices[0].message
    assert message.content == ANSWER and message.model_extra.get("reasoning_content") is None
    [acc] = streamed(client.chat.completions.create(model="tiny", messages=ASK, stream=True, extra_body=body)).values()
    assert acc["reasoning"] == "" and acc["content"] == ANSWER


def test_enable_thinking_false_makes_everything_content(client) -> None:
    body = {"chat_template_kwargs": {"enable_thinking": False}}
    message = client.chat.completions.create(model="tiny", messages=ASK, extra_body=body).choices[0].message
    assert message.content == SCRIPT and message.model_extra.get("reasoning_content") is None
    [acc] = streamed(client.chat.completions.create(model="tiny", messages=ASK, stream=True, extra_body=body)).values()
    assert acc["reasoning"] == "" and acc["content"] == SCRIPT
