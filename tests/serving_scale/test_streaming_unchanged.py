"""Streaming through the lean chunk path gives what the non-streamed answer gives: per choice, the
chunks' text concatenates to the same text, and the usage chunk counts the same tokens."""

from __future__ import annotations

import json

import httpx
import pytest

#: Prompts of one request: several texts, or one list of token ids.
PROMPTS = [["the engine streams", "tokens to the client"], [5, 17, 29, 41]]
MAX_TOKENS = 12


@pytest.fixture(scope="module")
def server(start):
    return start()


def _events(response: httpx.Response) -> list[dict]:
    events = []
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            events.append(json.loads(line[len("data: "):]))
    return events


def _counts(usage: dict) -> tuple[int, int]:
    """Prompt and completion tokens (the second request of a prompt may hit the prefix cache)."""
    return usage["prompt_tokens"], usage["completion_tokens"]


def _streamed(url: str, path: str, body: dict) -> list[dict]:
    with httpx.stream("POST", url + path, json={**body, "stream": True, "stream_options": {"include_usage": True}},
                      timeout=60) as response:
        assert response.status_code == 200, response.read()
        return _events(response)


@pytest.mark.parametrize("prompt", PROMPTS, ids=["texts", "token-ids"])
def test_completion_stream_concatenates_to_the_whole_answer(server, prompt) -> None:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0.0, "n": 2,
            "ignore_eos": True}
    response = httpx.post(server.url + "/v1/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    whole = response.json()
    events = _streamed(server.url, "/v1/completions", body)
    texts: dict[int, str] = {}
    finish: dict[int, str] = {}
    for event in events[:-1]:
        [choice] = event["choices"]
        texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
        if choice["finish_reason"] is not None:
            finish[choice["index"]] = choice["finish_reason"]
    assert texts == {c["index"]: c["text"] for c in whole["choices"]}
    assert finish == {c["index"]: c["finish_reason"] for c in whole["choices"]}
    assert events[-1]["choices"] == [] and _counts(events[-1]["usage"]) == _counts(whole["usage"])


def test_chat_stream_concatenates_to_the_whole_reply(server) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "say something"}],
            "max_tokens": MAX_TOKENS, "temperature": 0.0, "ignore_eos": True}
    response = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    whole = response.json()
    events = _streamed(server.url, "/v1/chat/completions", body)
    deltas = [event["choices"][0]["delta"] for event in events[:-1]]
    assert deltas[0]["role"] == "assistant"
    assert "".join(d.get("content") or "" for d in deltas) == whole["choices"][0]["message"]["content"]
    assert events[-2]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert _counts(events[-1]["usage"]) == _counts(whole["usage"])


def test_stream_without_tokenizer_sends_a_chunk_per_step(start) -> None:
    """With --skip-tokenizer-init there is no text, yet the steps' tokens still reach the client as
    chunks (empty text) while the request runs, not all at its end."""
    server = start("--skip-tokenizer-init")
    body = {"model": "tiny", "prompt": [5, 17, 29], "max_tokens": 16, "temperature": 0.0, "ignore_eos": True}
    events = _streamed(server.url, "/v1/completions", body)
    chunks = [event for event in events if event["choices"]]
    assert len(chunks) >= 2, "the whole answer arrived as one chunk"
    assert all(chunk["choices"][0]["text"] == "" for chunk in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length" and events[-1]["usage"]["completion_tokens"] == 16
