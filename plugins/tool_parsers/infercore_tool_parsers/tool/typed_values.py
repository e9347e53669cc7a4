"""Typing raw parameter text (XML-like formats) by the JSON schema of the request's tools."""

from __future__ import annotations

from typing import Any

from infercore.plugin_api import Malformed, parse_partial, partial_json


def is_string(schema: dict[str, Any] | None) -> bool:
    """A parameter is text unless its schema names only other types; unknown parameters are text."""
    if not schema:
        return True
    types: list[Any] = []
    for part in [schema, *schema.get("anyOf", []), *schema.get("oneOf", [])]:
        declared = part.get("type") if isinstance(part, dict) else None
        types.extend(declared if isinstance(declared, list) else [declared] if declared else [])
    return not types or "string" in types


def typed_value(raw: str, schema: dict[str, Any] | None, complete: bool) -> partial_json.Node | None:
    """The value node of a raw parameter: text streams as it comes; other types are read as JSON
    (then as a Python literal) once complete, falling back to text. None while undecided."""
    if is_string(schema):
        return partial_json.Str(complete, raw)
    if not complete:
        return None
    text = raw.strip()
    for python in (False, True):
        try:
            node, end = parse_partial(text, 0, final=True, python=python)
        except Malformed:
            continue
        if node is not None and end == len(text):
            return node
    return partial_json.Str(True, raw)
