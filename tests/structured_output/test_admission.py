"""Bounds checked before a constraint reaches the engine, and SamplingParams decoded as the engine will."""

from __future__ import annotations

import time
from typing import Any

import pytest

from infercore.frontend.input_processor import InputError, InputProcessor
from infercore.regex_safety import MAX_REGEX_CHARS
from infercore.sampling_params import SamplingParams, SamplingParamsError, StructuredOutputsParams
from infercore.structured_output.admission import (
    MAX_CHOICES,
    MAX_CONSTRAINT_CHARS,
    MAX_SCHEMA_DEPTH,
    check_constraint,
)


def nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


@pytest.mark.parametrize(("params", "words"), [
    (StructuredOutputsParams(json="[" * 10_000 + "]" * 10_000), "deeper than"),
    (StructuredOutputsParams(json=nested(MAX_SCHEMA_DEPTH)), "deeper than"),
    (StructuredOutputsParams(json="{"), "not valid json"),
    (StructuredOutputsParams(json={"$ref": "other.json#/x"}), "outside itself"),
    (StructuredOutputsParams(json={"$defs": {"a": {"$ref": "https://x.org/a"}}, "$ref": "#/$defs/a"}), "outside itself"),
    (StructuredOutputsParams(grammar="root ::= \"a\"" + " " * MAX_CONSTRAINT_CHARS), "at most"),
    (StructuredOutputsParams(grammar="root ::= " + "a" * MAX_CONSTRAINT_CHARS), "at most"),
    (StructuredOutputsParams(choice=["x"] * (MAX_CHOICES + 1)), "alternatives"),
    (StructuredOutputsParams(json={"enum": ["y" * MAX_CONSTRAINT_CHARS]}), "at most"),
])
def test_over_a_bound_is_refused_with_advice(params: StructuredOutputsParams, words: str) -> None:
    with pytest.raises(SamplingParamsError, match="(?i)" + words) as info:
        check_constraint(params)
    assert info.value.param == "structured_outputs"


@pytest.mark.parametrize("params", [
    StructuredOutputsParams(json=nested(MAX_SCHEMA_DEPTH // 2 - 1)),
    StructuredOutputsParams(json={"$defs": {"a": {"type": "integer"}}, "items": {"$ref": "#/$defs/a"}}),
    StructuredOutputsParams(json={"const": {"$ref": "https://x.org/data, not a reference"}}),
    StructuredOutputsParams(regex="[a-z]+"),
    StructuredOutputsParams(choice=["yes", "no"]),
    StructuredOutputsParams(json_object=True),
])
def test_within_bounds_passes(params: StructuredOutputsParams) -> None:
    check_constraint(params)


@pytest.fixture
def processor() -> InputProcessor:
    return InputProcessor(None, max_model_len=64, vocab_size=100, max_logprobs=5, eos_token_id=0,
                          generation_stop_ids=[])


@pytest.mark.parametrize(("constraint", "words"), [
    (StructuredOutputsParams(choice="abc"), "choice"),  # type: ignore[arg-type]
    (StructuredOutputsParams(choice=[1, 2]), "choice"),  # type: ignore[list-item]
    (StructuredOutputsParams(json=5), "json"),  # type: ignore[arg-type]
    (StructuredOutputsParams(json_object="yes"), "json_object"),  # type: ignore[arg-type]
    (StructuredOutputsParams(regex=["a"]), "regex"),  # type: ignore[arg-type]
    (StructuredOutputsParams(json="[" * 10_000 + "]" * 10_000), "deeper than"),
])
def test_what_the_engine_could_not_decode_is_an_input_error(processor: InputProcessor,
                                                            constraint: StructuredOutputsParams, words: str) -> None:
    with pytest.raises(InputError, match=words) as info:
        processor.process("r", [1, 2, 3], SamplingParams(structured_outputs=constraint))
    assert info.value.param == "structured_outputs"


def test_the_engine_gets_the_decoded_params(processor: InputProcessor) -> None:
    params = SamplingParams(structured_outputs=StructuredOutputsParams(json={"type": "integer"}), max_tokens=4)
    processed = processor.process("r", [1, 2, 3], params)
    sent = processed.engine_requests[0].sampling_params
    assert sent.structured_outputs == params.structured_outputs and sent.max_tokens == 4


def test_long_regex_is_refused_before_it_is_scanned() -> None:
    started = time.monotonic()
    with pytest.raises(SamplingParamsError, match=f"at most {MAX_REGEX_CHARS}"):
        StructuredOutputsParams(regex="a" * 2_000_000)
    assert time.monotonic() - started < 0.5
