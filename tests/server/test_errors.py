"""Bad input is refused at the front door with OpenAI-shaped 4xx errors; the server stays healthy."""

from __future__ import annotations

import re
import time

import httpx
import pytest

OK = {"model": "tiny", "prompt": "hello", "max_tokens": 4}

BAD_COMPLETION_PARAMS = [
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": -3}, "max_tokens"),
    ({"max_tokens": 4, "min_tokens": 5}, "min_tokens"),
    ({"temperature": -0.5}, "temperature"),
    ({"temperature": float("inf")}, "temperature"),
    ({"temperature": float("nan")}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_k": -2}, "top_k"),
    ({"min_p": 1.5}, "min_p"),
    ({"presence_penalty": 3}, "presence_penalty"),
    ({"frequency_penalty": -2.5}, "frequency_penalty"),
    ({"repetition_penalty": 0}, "repetition_penalty"),
    ({"stop": [""]}, "stop"),
    ({"n": 10**9}, "n"),
    ({"logprobs": 10**6}, "logprobs"),
    ({"logprobs": 21}, "logprobs"),
    ({"logit_bias": {str(i): 1 for i in range(5000)}}, "logit_bias"),
    ({"logit_bias": {"999999": 1}}, "logit_bias"),
    ({"logit_bias": {"x": 1}}, "logit_bias"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": [1, 2, 10**6]}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": "word " * 300}, "prompt"),
    ({"prompt": "hello", "max_tokens": 300}, "max_tokens"),
    ({"stop_token_ids": [10**6]}, "stop_token_ids"),
    ({"seed": 2**70}, "seed"),
]


def _error(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) == {"error"}, body
    assert {"message", "type", "param", "code"} <= set(body["error"])
    return body["error"]


@pytest.mark.parametrize(("change", "param"), BAD_COMPLETION_PARAMS, ids=[p for _, p in BAD_COMPLETION_PARAMS])
def test_bad_completion_params_get_400(server, change, param) -> None:
    started = time.monotonic()
    response = httpx.post(server.url + "/v1/completions", content=_json({**OK, **change}),
                          headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    error = _error(response)
    assert param in (error["param"] or "") or param in error["message"], error
    assert time.monotonic() - started < 2


def _json(body: dict) -> str:
    import json

    return json.dumps(body)  # allows NaN / Infinity literals, as lenient clients send them


@pytest.mark.parametrize("change", [{"messages": []}, {"messages": [{"role": "robot", "content": "x"}]},
                                    {"top_logprobs": 5}, {"logprobs": True, "top_logprobs": 10**6},
                                    {"max_completion_tokens": 0},
                                    {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}])
def test_bad_chat_params_get_400(server, change) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **change}
    response = httpx.post(server.url + "/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    _error(response)


def test_over_long_prompt_names_the_limit(server) -> None:
    response = httpx.post(server.url + "/v1/completions", json={**OK, "prompt": list(range(1, 258))})
    message = _error(response)["message"]
    assert response.status_code == 400 and "256" in message and "257" in message


def test_unknown_model_404(server) -> None:
    response = httpx.post(server.url + "/v1/completions", json={**OK, "model": "gpt-17"})
    assert response.status_code == 404 and _error(response)["param"] == "model"


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b"\"text\"", b"", b"\xff\xfe"])
def test_malformed_or_non_object_body_400(server, body) -> None:
    for route in ("/v1/completions", "/v1/chat/completions", "/tokenize"):
        response = httpx.post(server.url + route, content=body, headers={"content-type": "application/json"})
        assert response.status_code == 400, (route, body, response.text)
        _error(response)


def test_oversized_body_413_bounded(server) -> None:
    huge = b'{"prompt": "' + b"a" * 200_000 + b'"}'
    response = httpx.post(server.url + "/v1/completions", content=huge, headers={"content-type": "application/json"})
    assert response.status_code == 413 and len(response.content) < 2000

    def chunks():
        yield huge  # no content-length: the server counts what it reads

    response = httpx.post(server.url + "/v1/completions", content=chunks(),
                          headers={"content-type": "application/json"})
    assert response.status_code == 413 and len(response.content) < 2000


def test_header_flood_is_refused(server) -> None:
    try:
        response = httpx.get(server.url + "/v1/models", headers={f"x-h{i}": "v" * 1000 for i in range(200)})
    except httpx.HTTPError:
        return  # the server closed the connection: refused without a response
    assert 400 <= response.status_code < 500 and len(response.content) < 2000


def test_errors_never_echo_huge_input_nor_leak_internals(server) -> None:
    responses = [
        httpx.post(server.url + "/v1/completions", json={**OK, "model": "m" * 50_000}),
        httpx.post(server.url + "/v1/completions", json={**OK, "stop": "s" * 50_000, "temperature": -1}),
        httpx.post(server.url + "/v1/completions", json={**OK, "prompt": [[1] * 40_000]}),
        httpx.post(server.url + "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "hi"}], "chat_template": "{{ ''.__class__.__mro__ }}"}),
        httpx.post(server.url + "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "hi"}], "chat_template": "{% for i in range(10**9) %}x{% endfor %}"}),
        httpx.get(server.url + "/no/such/route"),
    ]
    for response in responses:
        assert 400 <= response.status_code < 500, response.text
        text = response.text
        assert len(text) < 3000
        assert "Traceback" not in text and not re.search(r"0x[0-9a-f]{6,}", text)
        assert "/work/" not in text and "site-packages" not in text and "/tmp/" not in text
    assert httpx.get(server.url + "/health").status_code == 200
