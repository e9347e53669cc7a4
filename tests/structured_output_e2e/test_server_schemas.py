"""Through `infercore serve` with the official client: every constrained reply follows its constraint,
on both routes, every request surface, greedy and seeded, streamed and not, batched with free requests."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest
from bounded_schemas import bounded_schemas
from transformers import AutoTokenizer

#: Enough for the longest document the bounded schemas allow.
MAX_TOKENS = 700
SCHEMAS = bounded_schemas(50)
PROMPT = "Describe the weather in Paris as data."


def constraint_body(surface: str, schema: dict[str, Any]) -> dict[str, Any]:
    """Request fields that ask for ``schema`` through one of the request surfaces."""
    if surface == "response_format":
        return {"response_format": {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}}
    if surface == "structured_outputs":
        return {"extra_body": {"structured_outputs": {"json": schema}}}
    return {"extra_body": {"guided_json": schema}}


async def ask(client: openai.AsyncOpenAI, route: str, stream: bool, index: int, **fields: Any) -> tuple[str, str]:
    """(text, finish_reason) of one request; ``index`` picks greedy (even) or seeded sampling (odd)."""
    sampling = {"temperature": 0.0} if index % 2 == 0 else {"temperature": 1.0, "seed": index}
    fields = {"model": "tiny", "max_tokens": MAX_TOKENS, **sampling, **fields}
    if route == "chat":
        fields["messages"] = [{"role": "user", "content": f"{PROMPT} ({index})"}]
        if not stream:
            choice = (await client.chat.completions.create(**fields)).choices[0]
            return choice.message.content or "", choice.finish_reason
        parts, finish = [], ""
        async for chunk in await client.chat.completions.create(stream=True, **fields):
            for choice in chunk.choices:
                parts.append(choice.delta.content or "")
                finish = choice.finish_reason or finish
        return "".join(parts), finish
    fields["prompt"] = f"{PROMPT} ({index})"
    if "response_format" in fields:  # the client's completions method has no such argument
        fields["extra_body"] = {**fields.get("extra_body", {}), "response_format": fields.pop("response_format")}
    if "logit_bias" in fields:  # the client's completions method types keys as ints
        fields["extra_body"] = {**fields.get("extra_body", {}), "logit_bias": fields.pop("logit_bias")}
    if not stream:
        choice = (await client.completions.create(**fields)).choices[0]
        return choice.text, choice.finish_reason
    parts, finish = [], ""
    async for chunk in await client.completions.create(stream=True, **fields):
        for choice in chunk.choices:
            parts.append(choice.text)
            finish = choice.finish_reason or finish
    return "".join(parts), finish


def test_fifty_schemas_all_validate(async_client: openai.AsyncOpenAI) -> None:
    surfaces = ["response_format", "structured_outputs", "guided_json"]

    async def run() -> list[Any]:
        constrained = [ask(async_client, ("completions", "chat")[i % 2], (i // 2) % 2 == 0, i,
                           **constraint_body(surfaces[i % 3], schema)) for i, schema in enumerate(SCHEMAS)]
        free = [ask(async_client, "completions", i % 2 == 0, i, max_tokens=48) for i in range(6)]
        return await asyncio.gather(*constrained, *free)

    results = asyncio.run(run())
    for schema, (text, finish) in zip(SCHEMAS, results[:len(SCHEMAS)]):
        assert finish == "stop", f"reply did not finish within {MAX_TOKENS} tokens: {text[:200]!r}"
        jsonschema.validate(json.loads(text), schema)
    free_texts = [text for text, _ in results[len(SCHEMAS):]]
    assert not all(_is_json(t) for t in free_texts), "the unconstrained model should not write JSON"


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


REGEXES = [r"[a-z]{3,8}@[a-z]{2,5}\.(com|org)", r"\d{3}-\d{4}", r"(yes|no|maybe)!?", r"[A-Z][a-z]{0,6} \d{1,2}"]
CHOICES = [["paris", "london", "tokyo"], ["alpha", "beta"], ["x", "xy", "xyz"]]


def closer_bias(model_dir: Path, strength: float) -> dict[str, float]:
    """A logit bias towards closing strings and objects: an open-ended ``json_object`` written by a
    random model then ends within the token limit (the grammar still decides which token is allowed)."""
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    return {str(tokenizer.convert_tokens_to_ids(t)): strength for t in ('"', "}")}


@pytest.mark.parametrize("route", ["completions", "chat"])
def test_regex_choice_and_json_object_always_match(async_client: openai.AsyncOpenAI, model_dir: Path,
                                                    route: str) -> None:
    cases: list[tuple[str, Any, dict[str, Any]]] = []
    for i, pattern in enumerate(REGEXES):
        field = {"structured_outputs": {"regex": pattern}} if i % 2 else {"guided_regex": pattern}
        cases.append(("regex", pattern, {"extra_body": field}))
    for i, choice in enumerate(CHOICES):
        field = {"structured_outputs": {"choice": choice}} if i % 2 else {"guided_choice": choice}
        cases.append(("choice", choice, {"extra_body": field}))
    for strength in (3.0, 5.0, 8.0):
        cases.append(("json_object", None, {"response_format": {"type": "json_object"},
                                            "logit_bias": closer_bias(model_dir, strength)}))

    async def run() -> list[tuple[str, str]]:
        return await asyncio.gather(*(ask(async_client, route, i % 2 == 1, i, **fields)
                                      for i, (_, _, fields) in enumerate(cases)))

    for (kind, expected, _), (text, finish) in zip(cases, asyncio.run(run())):
        assert finish == "stop", (kind, text[:200])
        if kind == "regex":
            assert re.fullmatch(expected, text), (expected, text)
        elif kind == "choice":
            assert text in expected
        else:
            assert isinstance(json.loads(text), dict), text


def test_free_request_unchanged_by_constrained_neighbours(async_client: openai.AsyncOpenAI) -> None:
    free = {"max_tokens": 40, "extra_body": {"ignore_eos": True}}

    async def alone() -> list[tuple[str, str]]:
        return list(await asyncio.gather(ask(async_client, "completions", False, 0, **free),
                                         ask(async_client, "completions", False, 1, **free)))

    async def beside_constrained() -> list[tuple[str, str]]:
        neighbours = [ask(async_client, ("completions", "chat")[i % 2], i % 2 == 0, i,
                          **constraint_body("structured_outputs", SCHEMAS[i])) for i in range(8)]
        results = await asyncio.gather(ask(async_client, "completions", False, 0, **free),
                                       ask(async_client, "completions", False, 1, **free), *neighbours)
        return list(results[:2])

    async def both() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        return await alone(), await beside_constrained()

    by_themselves, in_company = asyncio.run(both())
    assert in_company == by_themselves
