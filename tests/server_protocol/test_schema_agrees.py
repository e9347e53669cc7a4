"""Validation says what /openapi.json says: a boolean field takes only true/false, an integer field no
boolean, and what the server refuses anyway (an empty prompt, chat ``max_tokens`` 0) the schema refuses
too; error messages keep the API's own routes that hints name."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError

from infercore.entrypoints.openai.errors import scrub
from infercore.entrypoints.openai.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeRequest,
)

_CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
_COMPLETION = {"model": "tiny", "prompt": "hi"}
#: (model, body, accepted?) — each body is judged alike by validation and by the model's JSON schema.
CASES: dict[str, tuple[Any, dict[str, Any], bool]] = {
    "detokenize false": (DetokenizeRequest, {"tokens": [False]}, False),
    "detokenize ids": (DetokenizeRequest, {"tokens": [1, 2]}, True),
    "add_generation_prompt 0": (ChatCompletionRequest, {**_CHAT, "add_generation_prompt": 0}, False),
    "tokenize add_generation_prompt 0": (TokenizeRequest, {**_CHAT, "add_generation_prompt": 0}, False),
    "json_object yes": (ChatCompletionRequest, {**_CHAT, "structured_outputs": {"json_object": "yes"}}, False),
    "stream 1": (CompletionRequest, {**_COMPLETION, "stream": 1}, False),
    "n true": (CompletionRequest, {**_COMPLETION, "n": True}, False),
    "max_tokens string": (CompletionRequest, {**_COMPLETION, "max_tokens": "5"}, False),
    "temperature integer": (CompletionRequest, {**_COMPLETION, "temperature": 1}, True),
    "empty prompt": (CompletionRequest, {**_COMPLETION, "prompt": ""}, False),
    "empty prompt in a list": (CompletionRequest, {**_COMPLETION, "prompt": ["a", ""]}, False),
    "completion max_tokens 0": (CompletionRequest, {**_COMPLETION, "max_tokens": 0, "echo": True}, True),
    "chat max_tokens 0": (ChatCompletionRequest, {**_CHAT, "max_tokens": 0}, False),
    "chat max_completion_tokens 0": (ChatCompletionRequest, {**_CHAT, "max_completion_tokens": 0}, False),
    "chat max_tokens 1": (ChatCompletionRequest, {**_CHAT, "max_tokens": 1}, True),
}


def _validates(model: Any, body: dict[str, Any]) -> bool:
    try:
        if isinstance(model, type) and issubclass(model, BaseModel):
            model.model_validate(body)
        else:
            TypeAdapter(model).validate_python(body)
    except ValidationError:
        return False
    return True


def _schema_accepts(model: Any, body: dict[str, Any]) -> bool:
    schema = TypeAdapter(model).json_schema()
    return jsonschema.Draft202012Validator(schema).is_valid(body)


@pytest.mark.parametrize(("model", "body", "accepted"), CASES.values(), ids=CASES.keys())
def test_validation_and_schema_agree(model: Any, body: dict[str, Any], accepted: bool) -> None:
    assert _validates(model, body) is accepted
    assert _schema_accepts(model, body) is accepted


def test_scrubber_keeps_the_apis_routes_and_hides_server_paths() -> None:
    hint = "max_tokens must be at least 1 (0 is allowed with echo=true on /v1/completions, to score the prompt)"
    assert scrub(hint) == hint
    assert scrub("failed to open /home/user/models/x.bin") == "failed to open <path>"
