"""Text that can't be tokenized (a lone surrogate) and ``chat_template_kwargs`` that a parser can't take
are 400s at the front door, before anything is generated."""

from __future__ import annotations

import json

import httpx
import pytest

#: A JSON body escapes the surrogate as ``\\ud800``; Python reads it back as a lone surrogate.
SURROGATE = "a\ud800b"
CASES = {
    "completion": ("/v1/completions", {"model": "tiny", "prompt": SURROGATE, "max_tokens": 1}, "prompt"),
    "completion list": ("/v1/completions", {"model": "tiny", "prompt": ["ok", SURROGATE], "max_tokens": 1}, "prompt"),
    "chat": ("/v1/chat/completions", {"model": "tiny", "max_tokens": 1,
                                      "messages": [{"role": "user", "content": SURROGATE}]}, "messages"),
    "tokenize prompt": ("/tokenize", {"model": "tiny", "prompt": SURROGATE}, "prompt"),
    "tokenize messages": ("/tokenize", {"model": "tiny", "messages": [{"role": "user", "content": SURROGATE}]},
                          "messages"),
}


def _post(url: str, body: dict) -> httpx.Response:
    return httpx.post(url, content=json.dumps(body), headers={"content-type": "application/json"}, timeout=60)


@pytest.mark.parametrize(("path", "body", "param"), CASES.values(), ids=CASES.keys())
def test_lone_surrogate_is_a_400(attack_server, path: str, body: dict, param: str) -> None:
    response = _post(attack_server.url + path, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert "lone surrogate" in error["message"] and "U+D800" in error["message"] and error["param"] == param
    assert httpx.get(attack_server.url + "/health", timeout=10).status_code == 200


@pytest.mark.parametrize("stream", [False, True])
def test_kwargs_a_parser_cannot_take_are_a_400_before_generating(attack_server, stream: bool) -> None:
    body = {"model": "tiny", "max_tokens": 4, "stream": stream, "messages": [{"role": "user", "content": "hi"}],
            "chat_template_kwargs": {"tokenizer": "x"}}
    response = _post(attack_server.url + "/v1/chat/completions", body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "chat_template_kwargs" and "tokenizer" in error["message"]


def test_kwargs_a_parser_takes_still_work(attack_server) -> None:
    body = {"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}],
            "chat_template_kwargs": {"enable_thinking": False}}
    response = _post(attack_server.url + "/v1/chat/completions", body)
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] == 4
