"""Bad constraints answer 400 quickly, naming the problem, and leave the engine serving; a stream of
distinct schemas keeps the compiled-grammar cache within its bound."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from transformers import AutoTokenizer

from infercore.config import StructuredOutputsConfig
from infercore.sampling_params import StructuredOutputsParams
from infercore.structured_output import StructuredOutputManager

FAST_S = 2.0

BAD = [
    ("invalid schema", {"guided_json": {"type": "object", "properties": {"a": {"type": "nonsense"}}}}, "schema"),
    ("schema not JSON", {"structured_outputs": {"json": "{not json"}}, "json"),
    ("invalid regex", {"guided_regex": "([a-z]+"}, "regex"),
    ("unknown grammar syntax", {"guided_grammar": "this is %%% not a grammar"}, "grammar"),
    ("grammar with an undefined rule", {"structured_outputs": {"grammar": "root ::= missing_rule"}}, "grammar"),
    ("schema that refers only to itself", {"guided_json": {"$ref": "#"}}, "finite document"),
    ("schema that nests forever", {"guided_json": {"type": "object", "properties": {"a": {"$ref": "#"}},
                                                   "required": ["a"]}}, "finite document"),
    ("grammar of one empty rule", {"structured_outputs": {"grammar": 'root ::= ""'}}, "empty reply"),
    ("external $ref", {"guided_json": {"$ref": "https://example.com/schema.json"}}, "$ref"),
]


def post(server: Any, route: str, body: dict[str, Any]) -> tuple[httpx.Response, float]:
    if route == "chat":
        body = {"messages": [{"role": "user", "content": "hi"}], **body}
    else:
        body = {"prompt": "hi", **body}
    start = time.monotonic()
    response = httpx.post(f"{server.url}/v1/{'chat/completions' if route == 'chat' else 'completions'}",
                          json={"model": "tiny", "max_tokens": 16, **body}, timeout=30)
    return response, time.monotonic() - start


@pytest.mark.parametrize("route", ["completions", "chat"])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("case", "fields", "word"), BAD, ids=[b[0] for b in BAD])
def test_bad_constraint_is_a_fast_400(server: Any, route: str, stream: bool, case: str,
                                      fields: dict[str, Any], word: str) -> None:
    response, elapsed = post(server, route, {**fields, "stream": stream})
    assert response.status_code == 400, (case, response.text)
    assert elapsed < FAST_S, f"{case} took {elapsed:.2f} s"
    assert word in response.json()["error"]["message"].lower(), response.text


def test_engine_serves_after_bad_constraints(server: Any) -> None:
    for _, fields, _ in BAD:
        post(server, "completions", fields)
    response, _ = post(server, "completions", {"guided_choice": ["yes", "no"]})
    assert response.status_code == 200 and response.json()["choices"][0]["text"] in ("yes", "no")
    assert httpx.get(server.url + "/health").status_code == 200


@pytest.mark.parametrize("route", ["completions", "chat"])
def test_catastrophic_backtracking_regex_is_refused_fast(server: Any, route: str) -> None:
    response, elapsed = post(server, route, {"guided_regex": "(a+)+b", "max_tokens": 64})
    assert elapsed < FAST_S, f"took {elapsed:.2f} s"
    assert response.status_code == 400, response.text
    assert "exponential time" in response.json()["error"]["message"]
    assert httpx.get(server.url + "/health").status_code == 200


def test_thousand_schemas_keep_the_cache_bounded(model_dir: Any) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    config = StructuredOutputsConfig(grammar_cache_size=32, structured_outputs_backend="xgrammar")
    manager = StructuredOutputManager(config, tokenizer, len(tokenizer))
    try:
        for i in range(1000):
            schema = {"type": "object", "properties": {f"k{i}": {"type": "integer", "maximum": i}},
                      "required": [f"k{i}"]}
            manager.submit(f"r{i}", StructuredOutputsParams(json=schema))
            assert manager.grammar_bitmask([f"r{i}"]) is not None
            manager.remove(f"r{i}")
            assert len(manager.cache) <= 32
        assert manager.num_requests == 0 and len(manager.cache) == 32
    finally:
        manager.shutdown()
