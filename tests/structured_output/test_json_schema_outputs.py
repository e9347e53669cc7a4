"""Every output sampled under a JSON-schema constraint is valid JSON that follows the schema."""

from __future__ import annotations

import json

import jsonschema
import pytest
from bounded_schemas import bounded_schemas

from infercore.sampling_params import StructuredOutputsParams

SCHEMAS = bounded_schemas(50)


def test_schemas_are_distinct() -> None:
    assert len({json.dumps(s, sort_keys=True) for s in SCHEMAS}) == 50


@pytest.mark.parametrize("backend_name", ["xgrammar", "guidance"])
def test_fifty_schemas(backend_name: str, backends, model, tokenizer) -> None:
    backend = backends[backend_name]
    for index, schema in enumerate(SCHEMAS):
        compiled = backend.compile(StructuredOutputsParams(json=schema))
        for seed in range(3):
            tokens, terminated = model.generate(compiled.matcher(), seed=seed + 100 * index)
            text = tokenizer.decode(tokens)
            assert terminated, f"schema {index} did not finish: {text!r}"
            jsonschema.validate(json.loads(text), schema)


@pytest.mark.parametrize("backend_name", ["xgrammar", "guidance"])
def test_json_object_parses(backend_name: str, backends, model, tokenizer) -> None:
    compiled = backends[backend_name].compile(StructuredOutputsParams(json_object=True))
    for seed in range(10):
        tokens, terminated = model.generate(compiled.matcher(), seed=seed, cap=600)
        assert terminated
        assert isinstance(json.loads(tokenizer.decode(tokens)), dict)


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 7, "minimum": 0, "maximum": 90}},
     "required": ["n"]},
    {"allOf": [{"type": "object", "properties": {"a": {"type": "boolean"}}}, {"required": ["a"]}]},
])
def test_guidance_enforces_what_xgrammar_refuses(schema, backends, model, tokenizer) -> None:
    params = StructuredOutputsParams(json=schema)
    with pytest.raises(ValueError, match="cannot enforce"):
        backends["xgrammar"].validate(params)
    compiled = backends["guidance"].compile(params)
    for seed in range(10):
        tokens, terminated = model.generate(compiled.matcher(), seed=seed)
        assert terminated
        jsonschema.validate(json.loads(tokenizer.decode(tokens)), schema)


@pytest.mark.parametrize("backend_name", ["xgrammar", "guidance"])
def test_strings_never_hold_raw_control_characters(backend_name: str, backends, model, tokenizer) -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "minLength": 1, "maxLength": 6}},
              "required": ["s"], "additionalProperties": False}
    compiled = backends[backend_name].compile(StructuredOutputsParams(json=schema))
    for seed in range(30):
        tokens, _ = model.generate(compiled.matcher(), seed=seed)
        jsonschema.validate(json.loads(tokenizer.decode(tokens)), schema)
