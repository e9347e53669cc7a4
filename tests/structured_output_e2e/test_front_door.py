"""Malformed constraints are refused by the API process: every structured field, while other streams run,
gets a 400 naming the field, the streams finish normally and /health stays 200."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

DEEP_ARRAY_TEXT = "[" * 5000 + "]" * 5000


def nested(depth: int) -> dict[str, Any]:
    """A JSON schema whose objects nest ``depth`` levels deep."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


#: (case, request fields): one or more malformed values of every structured field.
MALFORMED: list[tuple[str, dict[str, Any]]] = [
    ("choice is a string", {"structured_outputs": {"choice": "abc"}}),
    ("choice holds numbers", {"structured_outputs": {"choice": [1, 2]}}),
    ("choice is empty", {"structured_outputs": {"choice": []}}),
    ("json is a number", {"structured_outputs": {"json": 5}}),
    ("json text nests too deep", {"structured_outputs": {"json": DEEP_ARRAY_TEXT}}),
    ("json object nests too deep", {"structured_outputs": {"json": nested(200)}}),
    ("regex is a number", {"structured_outputs": {"regex": 5}}),
    ("regex is a list", {"structured_outputs": {"regex": ["a"]}}),
    ("regex is huge", {"structured_outputs": {"regex": "a" * 300_000}}),
    ("grammar is an object", {"structured_outputs": {"grammar": {"root": "x"}}}),
    ("json_object is a word", {"structured_outputs": {"json_object": "maybe"}}),
    ("json_object is an object", {"structured_outputs": {"json_object": {"type": "object"}}}),
    ("structural_tag", {"structured_outputs": {"structural_tag": {"structures": [], "triggers": ["<"]}}}),
    ("backend is a number", {"structured_outputs": {"choice": ["a"], "backend": 5}}),
    ("structured_outputs is a list", {"structured_outputs": ["choice"]}),
    ("unknown constraint", {"structured_outputs": {"choices": ["a"]}}),
    ("guided_json text nests too deep", {"guided_json": DEEP_ARRAY_TEXT}),
    ("guided_json is a number", {"guided_json": 5}),
    ("guided_regex is a number", {"guided_regex": 5}),
    ("guided_choice is a string", {"guided_choice": "abc"}),
    ("guided_choice has too many entries", {"guided_choice": [str(i) for i in range(5000)]}),
    ("guided_grammar is a list", {"guided_grammar": ["root ::= \"a\""]}),
    ("response_format schema is text", {"response_format": {"type": "json_schema", "json_schema": {"schema": "x"}}}),
    ("response_format schema nests too deep",
     {"response_format": {"type": "json_schema", "json_schema": {"schema": nested(200)}}}),
    ("response_format structural_tag", {"response_format": {"type": "structural_tag", "structures": []}}),
    ("response_format without schema", {"response_format": {"type": "json_schema"}}),
]


async def stream_to_the_end(client: httpx.AsyncClient, url: str) -> tuple[int, str | None]:
    """Stream one unconstrained completion; its completion tokens and finish reason."""
    body = {"model": "tiny", "prompt": "the engine", "max_tokens": 120, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    tokens, finish = 0, None
    async with client.stream("POST", url + "/v1/completions", json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            payload = json.loads(line[len("data: "):])
            assert "error" not in payload, payload
            if payload.get("usage"):
                tokens = payload["usage"]["completion_tokens"]
            if payload["choices"]:
                finish = payload["choices"][0]["finish_reason"] or finish
    return tokens, finish


async def send_malformed(client: httpx.AsyncClient, url: str) -> list[tuple[str, int, str]]:
    results = []
    for i, (case, fields) in enumerate(MALFORMED):
        route = "/v1/chat/completions" if i % 2 else "/v1/completions"
        body = {"model": "tiny", "max_tokens": 4, **fields}
        body.update({"messages": [{"role": "user", "content": "hi"}]} if i % 2 else {"prompt": "hi"})
        response = await client.post(url + route, json=body)
        results.append((case, response.status_code, response.text))
        health = await client.get(url + "/health")
        assert health.status_code == 200, f"/health is {health.status_code} after {case!r}"
    return results


def test_malformed_constraints_are_refused_while_streams_run(server: Any) -> None:
    async def scenario() -> tuple[list[tuple[int, str | None]], list[tuple[str, int, str]]]:
        async with httpx.AsyncClient(timeout=120) as client:
            streams = [asyncio.create_task(stream_to_the_end(client, server.url)) for _ in range(3)]
            await asyncio.sleep(0.3)
            results = await send_malformed(client, server.url)
            return list(await asyncio.gather(*streams)), results

    finished, results = asyncio.run(scenario())
    for case, status, text in results:
        assert status == 400, (case, status, text[:300])
        error = json.loads(text)["error"]
        assert error["message"] and len(text) < 2000, (case, text[:300])
    assert finished == [(120, "length")] * 3, finished
    assert httpx.get(server.url + "/health").status_code == 200


@pytest.mark.parametrize(("field", "value", "word"), [
    ("choice", "abc", "choice"),
    ("json", DEEP_ARRAY_TEXT, "nest"),
    ("regex", "a" * 300_000, "regex"),
], ids=["choice", "json", "regex"])
def test_malformed_field_is_named(server: Any, field: str, value: Any, word: str) -> None:
    started = time.monotonic()
    response = httpx.post(server.url + "/v1/completions", timeout=30,
                          json={"model": "tiny", "prompt": "hi", "structured_outputs": {field: value}})
    assert time.monotonic() - started < 2.0
    assert response.status_code == 400, response.text[:300]
    assert word in response.json()["error"]["message"].lower(), response.text[:300]


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "f"}}],
                         ids=["required", "named"])
@pytest.mark.parametrize("parameters", [
    {"type": "object", "properties": {"a": {"type": "nonsense"}}},
    nested(200),
    {"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}},
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
], ids=["invalid schema", "nests too deep", "external ref", "missing ref"])
def test_malformed_tool_schema_is_a_400(server: Any, parameters: dict[str, Any], tool_choice: Any) -> None:
    body = {"model": "tiny", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": parameters}}],
            "tool_choice": tool_choice}
    response = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 400, response.text[:300]
    assert httpx.get(server.url + "/health").status_code == 200
