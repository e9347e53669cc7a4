"""The OpenAPI schema says what the server accepts: /tokenize takes exactly one of prompt and messages,
structured_outputs.choice is non-empty, detokenize ids are >= 0 (and a 400 names an id outside the
vocabulary), and /health answers the JSON its schema documents."""

from __future__ import annotations

import httpx
import jsonschema
import pytest


@pytest.fixture(scope="module")
def openapi(protocol_server) -> dict:
    return httpx.get(protocol_server.url + "/openapi.json").json()


def _resolved(openapi: dict, schema: dict) -> dict:
    """``schema`` with every ``$ref`` into components inlined (enough for jsonschema to validate)."""
    return {**schema, "components": openapi["components"]}


def _validator(openapi: dict, path: str, method: str = "post") -> jsonschema.Draft202012Validator:
    schema = openapi["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    return jsonschema.Draft202012Validator(_resolved(openapi, schema))


def _error(response: httpx.Response) -> dict:
    assert response.status_code == 400, response.text
    return response.json()["error"]


def test_tokenize_takes_exactly_one_of_prompt_and_messages(protocol_server, openapi) -> None:
    validator = _validator(openapi, "/tokenize")
    messages = [{"role": "user", "content": "hi"}]
    assert validator.is_valid({"prompt": "hi"}) and validator.is_valid({"messages": messages})
    for body in ({}, {"prompt": "hi", "messages": messages}):
        assert not validator.is_valid(body)
        assert "exactly one of prompt" in _error(httpx.post(protocol_server.url + "/tokenize", json=body))["message"]
    assert httpx.post(protocol_server.url + "/tokenize", json={"messages": messages}).json()["count"] > 0


def test_structured_outputs_choice_must_be_non_empty(protocol_server, openapi) -> None:
    validator = _validator(openapi, "/v1/completions")
    base = {"prompt": "hi", "max_tokens": 2}
    for body in ({**base, "structured_outputs": {"choice": []}}, {**base, "guided_choice": []},
                 {**base, "structured_outputs": {"choice": ["a"], "unknown": 1}}):
        assert not validator.is_valid(body)
        error = _error(httpx.post(protocol_server.url + "/v1/completions", json=body))
        assert "choice" in (error["param"] or "") or "unknown" in (error["param"] or ""), error
    assert validator.is_valid({**base, "structured_outputs": {"choice": ["a", "b"]}})


def test_detokenize_ids_are_in_the_vocabulary(protocol_server, openapi) -> None:
    validator = _validator(openapi, "/detokenize")
    assert not validator.is_valid({"tokens": [-1]}) and validator.is_valid({"tokens": [1, 2]})
    assert "vocabulary" in openapi["components"]["schemas"]["DetokenizeRequest"]["properties"]["tokens"]["description"]
    vocab = httpx.get(protocol_server.url + "/v1/models").json()["data"][0]
    error = _error(httpx.post(protocol_server.url + "/detokenize", json={"tokens": [1, 10**6]}))
    assert "1000000" in error["message"] and "vocabulary" in error["message"] and vocab["id"] == "tiny"
    assert _error(httpx.post(protocol_server.url + "/detokenize", json={"tokens": [-1]}))["param"] == "tokens.0"


def test_health_returns_the_documented_json(protocol_server, openapi) -> None:
    response = httpx.get(protocol_server.url + "/health")
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    schema = openapi["paths"]["/health"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema.get("$ref") or schema.get("properties"), schema
    jsonschema.validate(response.json(), _resolved(openapi, schema))
    assert response.json() == {"status": "ok"}
