"""response_format / guided_* / structured_outputs merging, and tool_choice constraints."""

from __future__ import annotations

import pytest

from infercore.sampling_params import StructuredOutputsParams
from infercore.structured_output.request import structured_outputs_from_request, tool_choice_params

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "now"}},
]


def test_response_format_kinds() -> None:
    assert structured_outputs_from_request(response_format={"type": "text"}) is None
    assert structured_outputs_from_request(response_format={"type": "json_object"}).json_object
    schema = {"type": "integer"}
    params = structured_outputs_from_request(
        response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema, "strict": True}})
    assert params.json == schema
    with pytest.raises(ValueError, match="json_schema.schema"):
        structured_outputs_from_request(response_format={"type": "json_schema", "json_schema": {"name": "n"}})


def test_legacy_fields_and_conflicts() -> None:
    assert structured_outputs_from_request(guided_regex="a+").regex == "a+"
    assert structured_outputs_from_request(guided_choice=["x"]).choice == ["x"]
    assert structured_outputs_from_request(structured_outputs={"grammar": 'root ::= "a"'}).grammar
    same = structured_outputs_from_request(guided_json='{"type": "integer"}',
                                           structured_outputs=StructuredOutputsParams(json={"type": "integer"}))
    assert same is not None
    with pytest.raises(ValueError, match="guided_regex"):
        structured_outputs_from_request(guided_regex="a", guided_choice=["b"])
    with pytest.raises(ValueError, match="response_format"):
        structured_outputs_from_request(response_format={"type": "json_object"}, guided_regex="a")
    assert structured_outputs_from_request() is None


def test_tool_choice_required_and_named(backends, model, tokenizer) -> None:
    import json

    import jsonschema

    assert tool_choice_params("auto", TOOLS) is None
    named = tool_choice_params({"type": "function", "function": {"name": "get_weather"}}, TOOLS)
    assert named.json == TOOLS[0]["function"]["parameters"]
    required = tool_choice_params("required", TOOLS)
    jsonschema.validate([{"name": "now", "arguments": {}}], required.json)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([], required.json)
    compiled = backends["guidance"].compile(required)
    tokens, _ = model.generate(compiled.matcher(), seed=1, cap=600)
    calls = json.loads(tokenizer.decode(tokens))
    assert calls and all(c["name"] in ("get_weather", "now") for c in calls)
    with pytest.raises(ValueError, match="not among"):
        tool_choice_params({"type": "function", "function": {"name": "missing"}}, TOOLS)
    with pytest.raises(ValueError, match="no tools"):
        tool_choice_params("required", [])
