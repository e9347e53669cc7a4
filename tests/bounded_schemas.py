"""Distinct JSON schemas whose every valid document is short: bounded strings (maxLength), bounded
arrays (maxItems), integers and numbers with bounds, enums, consts, nested objects and required
fields. Shared by the grammar-backend tests and the server's end-to-end tests."""

from __future__ import annotations

import random
from typing import Any

_NAMES = ["id", "name", "city", "tags", "score", "items", "meta", "ok", "unit", "rank", "note", "size"]


def _leaf(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(["string", "integer", "number", "boolean", "enum", "null", "const"])
    if kind == "string":
        schema: dict[str, Any] = {"type": "string", "maxLength": rng.randint(1, 6)}
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


def _value(rng: random.Random, depth: int) -> dict[str, Any]:
    roll = rng.random()
    if depth > 0 and roll < 0.3:
        return _object(rng, depth - 1)
    if depth > 0 and roll < 0.5:
        schema = {"type": "array", "items": _value(rng, depth - 1), "maxItems": rng.randint(1, 3)}
        if rng.random() < 0.5:
            schema["minItems"] = rng.randint(0, schema["maxItems"])
        return schema
    return _leaf(rng)


def _object(rng: random.Random, depth: int) -> dict[str, Any]:
    names = rng.sample(_NAMES, rng.randint(1, 4))
    required = [n for n in names if rng.random() < 0.6] or names[:1]
    return {"type": "object", "properties": {n: _value(rng, depth) for n in names}, "required": required,
            "additionalProperties": False}


def bounded_schemas(count: int = 50, seed: int = 0) -> list[dict[str, Any]]:
    """``count`` distinct schemas, each an object at the top level."""
    schemas: list[dict[str, Any]] = []
    rng = random.Random(seed)
    while len(schemas) < count:
        schema = _object(rng, depth=2)
        if schema not in schemas:
            schemas.append(schema)
    return schemas
