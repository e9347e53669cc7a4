"""JSON schemas whose every document would nest forever are refused; recursive schemas with a way out pass."""

from __future__ import annotations

import time
from typing import Any

import pytest

from infercore_structured_output.schema import load_schema
from infercore_structured_output.schema_productive import admits_finite_document

NODE = "#/$defs/node"

ENDLESS: list[tuple[str, Any]] = [
    ("refers to itself", {"$ref": "#"}),
    ("required property is the root", {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}),
    ("linked list without an end", {"$defs": {"node": {"type": "object", "properties": {"next": {"$ref": NODE}},
                                                       "required": ["next"]}}, "$ref": NODE}),
    ("non-empty array of itself", {"$defs": {"node": {"type": "array", "items": {"$ref": NODE}, "minItems": 1}},
                                   "$ref": NODE}),
    ("two definitions naming each other", {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                                           "$ref": "#/$defs/a"}),
    ("every anyOf branch recurses", {"type": "object", "required": ["a"],
                                     "properties": {"a": {"anyOf": [{"$ref": "#"}, {"allOf": [{"$ref": "#"}]}]}}}),
]

FINITE: list[tuple[str, Any]] = [
    ("optional recursion", {"type": "object", "properties": {"a": {"$ref": "#"}}}),
    ("recursion or null", {"type": "object", "required": ["a"],
                           "properties": {"a": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}}),
    ("tree with an array of children", {"$defs": {"node": {"type": "object", "required": ["kids"],
                                                           "properties": {"kids": {"type": "array",
                                                                                   "items": {"$ref": NODE}}}}},
                                        "$ref": NODE}),
    ("chain ending in an integer", {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"type": "integer"}},
                                    "$ref": "#/$defs/a"}),
    ("plain string", {"type": "string"}),
]


@pytest.mark.parametrize("schema", [s for _, s in ENDLESS], ids=[n for n, _ in ENDLESS])
def test_endless_schema_is_refused(schema: Any) -> None:
    assert not admits_finite_document(schema)
    with pytest.raises(ValueError, match="no finite document"):
        load_schema(schema)


@pytest.mark.parametrize("schema", [s for _, s in FINITE], ids=[n for n, _ in FINITE])
def test_recursive_schema_with_a_way_out_passes(schema: Any) -> None:
    assert admits_finite_document(schema)
    load_schema(schema)


def test_judging_a_huge_recursive_schema_is_bounded() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(3000)},
                              "required": [f"p{i}" for i in range(3000)] + ["x"]}
    schema["$defs"] = {f"a{i}": {"anyOf": [{"$ref": f"#/$defs/a{i + 1}"}]} for i in range(200)}
    schema["$defs"]["a200"] = {"type": "integer"}
    schema["properties"]["x"] = {"$ref": "#/$defs/a0"}
    started = time.monotonic()
    assert admits_finite_document(schema)
    assert time.monotonic() - started < 1.0
