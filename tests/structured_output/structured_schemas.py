"""Fifty different bounded JSON schemas built from a seed: nested objects, arrays, enums, bounded
numbers, required fields and strings with maxLength."""

from __future__ import annotations

import random
from typing import Any


def _leaf(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(["string", "integer", "number", "boolean", "enum", "null", "const"])
    if kind == "string":
        schema: dict[str, Any] = {"type": "string", "maxLength": rng.randint(1, 8)}
        if rng.random() < 0.4:
            schema["minLength"] = rng.randint(0, schema["maxLength"])
        return schema
    if kind == "integer":
        low = rng.randint(-50, 50)
        return {"type": "integer", "minimum": low, "maximum": low + rng.randint(0, 500)}
    if kind == "number":
        low = rng.randint(-10, 10)
        return {"type": "number", "minimum": low, "maximum": low + rng.randint(1, 100)}
    if kind == "enum":
        return {"enum": rng.sample(["red", "green", "blue", "paris", 1, 2, 3.5, True, None], rng.randint(1, 4))}
    if kind == "const":
        return {"const": rng.choice(["fixed", 7, False])}
    return {"type": kind}


def _schema(rng: random.Random, depth: int) -> dict[str, Any]:
    roll = rng.random()
    if depth > 0 and roll < 0.35:
        return _object(rng, depth - 1)
    if depth > 0 and roll < 0.55:
        schema = {"type": "array", "items": _schema(rng, depth - 1), "maxItems": rng.randint(1, 3)}
        if rng.random() < 0.5:
            schema["minItems"] = rng.randint(0, schema["maxItems"])
        return schema
    return _leaf(rng)


def _object(rng: random.Random, depth: int) -> dict[str, Any]:
    names = rng.sample(["id", "name", "city", "tags", "score", "items", "meta", "ok", "unit"], rng.randint(1, 4))
    properties = {name: _schema(rng, depth) for name in names}
    required = [n for n in names if rng.random() < 0.6]
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def bounded_schemas(count: int = 50) -> list[dict[str, Any]]:
    """``count`` distinct schemas, each with an object at the top."""
    return [_object(random.Random(seed), depth=2) for seed in range(count)]
