"""The 400 sentence for a request the schema refuses: union members (``prompt`` is text, texts, token ids or
lists of ids) are one problem named by the field the client wrote, never by pydantic's member names."""

from __future__ import annotations

import pytest
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from infercore.entrypoints.openai.errors import validation_message
from infercore.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _message(model: type[BaseModel], body: dict) -> tuple[str, str | None]:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(body)
    errors = [dict(e, loc=("body", *e["loc"])) for e in caught.value.errors()]
    return validation_message(RequestValidationError(errors))


@pytest.mark.parametrize(("model", "body", "field", "says"), [
    (CompletionRequest, {"model": "m", "prompt": ""}, "prompt",
     "String should have at least 1 character (got ''); prompt takes 4 forms and this fits none"),
    (CompletionRequest, {"model": "m", "prompt": []}, "prompt", "List should have at least 1 item"),
    (CompletionRequest, {"model": "m", "prompt": [[1], "a"]}, "prompt.0", "prompt takes 4 forms"),
    (CompletionRequest, {"model": "m", "prompt": "a", "stop": 5}, "stop", "stop takes 2 forms and this fits none"),
    (ChatCompletionRequest, {**CHAT, "messages": [{"role": "user", "content": 5}]}, "messages.0.content",
     "Input should be a valid string (got 5); messages.0.content takes 2 forms"),
    (ChatCompletionRequest, {**CHAT, "tool_choice": "maybe"}, "tool_choice",
     "Input should be 'none', 'auto' or 'required' (got 'maybe'); tool_choice takes 2 forms"),
])
def test_a_union_that_nothing_fits_is_one_problem_named_by_its_field(model, body, field, says) -> None:
    message, param = _message(model, body)
    assert param == field
    assert message.startswith(f"invalid value for {field}: ") and says in message, message
    assert "more problem" not in message and "constrained" not in message and "list[" not in message, message


def test_each_field_counts_once_and_keys_are_not_member_names() -> None:
    message, param = _message(CompletionRequest, {"model": "m", "prompt": "", "stop": 5, "n": 0})
    assert param == "n" and message.endswith("; and 2 more problem(s)"), message  # n, then prompt and stop
    message, param = _message(CompletionRequest, {"model": "m", "prompt": "a", "logit_bias": {"a": "b", "c": "d"}})
    assert param == "logit_bias.a" and message.endswith("(got 'b'); and 1 more problem(s)"), message
