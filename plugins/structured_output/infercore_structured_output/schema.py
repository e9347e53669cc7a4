"""JSON-schema checks shared by the backends: parsing, meta-schema validation, keyword scan."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema

from infercore.plugin_api import check_schema
from infercore_structured_output.schema_productive import admits_finite_document

#: The constraint ``json_object`` stands for: any JSON object.
ANY_OBJECT_SCHEMA: dict[str, Any] = {"type": "object"}

#: Keywords whose values are JSON data, not schemas: never scanned for keywords.
_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples", "required", "description", "title"})
#: Keywords whose values map names to subschemas: the names are not keywords.
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})


def load_schema(schema: str | dict[str, Any] | None) -> dict[str, Any] | bool:
    """Parse a schema given as text or a dict and check it against its meta-schema and the server's bounds."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as exc:
            raise ValueError(f"the JSON schema is not valid JSON ({exc}); send a JSON object") from None
    if not isinstance(schema, (dict, bool)):
        raise ValueError(f"a JSON schema must be an object, got {type(schema).__name__}")
    check_schema(schema)  # bounded nesting and size, no external $ref
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "the top level"
        raise ValueError(f"the JSON schema is invalid at {where}: {exc.message}") from None
    if not admits_finite_document(schema):
        raise ValueError("the JSON schema admits no finite document: a required property or array item refers "
                         "back to its own schema with no way out; make that reference optional (or one "
                         "branch of an anyOf with a non-recursive choice)")
    return schema


def schema_keywords(schema: Any) -> Iterator[str]:
    """Every keyword used anywhere in ``schema`` (property names are not keywords)."""
    if isinstance(schema, list):
        for item in schema:
            yield from schema_keywords(item)
        return
    if not isinstance(schema, dict):
        return
    for key, value in schema.items():
        yield key
        if key in _DATA_KEYWORDS:
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            for sub in value.values():
                yield from schema_keywords(sub)
        else:
            yield from schema_keywords(value)


def map_subschemas(schema: Any, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
    """A copy of ``schema`` with ``fn`` applied to every (sub)schema object, innermost first."""
    if isinstance(schema, list):
        return [map_subschemas(item, fn) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DATA_KEYWORDS:
            out[key] = value
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: map_subschemas(sub, fn) for name, sub in value.items()}
        else:
            out[key] = map_subschemas(value, fn)
    return fn(out)
