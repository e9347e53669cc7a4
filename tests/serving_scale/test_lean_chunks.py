"""The lean SSE encoder writes the same JSON fields and values, in the same order, as the pydantic chunks."""

from __future__ import annotations

import json

import pytest

from infercore.entrypoints.openai.protocol import (
    ChatChunkChoice,
    ChatCompletionChunk,
    CompletionChoice,
    CompletionResponse,
    DeltaMessage,
)
from infercore.entrypoints.openai.serving_base import sse
from infercore.entrypoints.openai.stream_chunks import chat_chunk, completion_chunk

TEXTS = ["", "plain", 'quote " and \\ backslash', "héllo wörld ✓ 🚀", "line\nbreak\ttab\x01", "</script>"]
ENDINGS = [(None, None), ("stop", None), ("stop", 42), ("stop", "END"), ("length", None)]


def _fields(event: bytes | str) -> dict:
    text = event.decode() if isinstance(event, bytes) else event
    assert text.startswith("data: ") and text.endswith("\n\n")
    body = json.loads(text[len("data: "):])
    body.pop("created")  # the clock's second, read separately by each side
    return body


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize(("finish_reason", "stop_reason"), ENDINGS)
def test_completion_chunk_matches_pydantic(text, finish_reason, stop_reason) -> None:
    reference = CompletionResponse(id="cmpl-1", model="tiny", choices=[CompletionChoice(
        index=3, text=text, finish_reason=finish_reason, stop_reason=stop_reason)])
    expected = _fields(sse(reference.model_dump(exclude={"usage"})))
    lean = _fields(completion_chunk("cmpl-1", "tiny", 3, text, finish_reason, stop_reason))
    assert lean == expected
    assert list(lean) == list(expected) and list(lean["choices"][0]) == list(expected["choices"][0])


@pytest.mark.parametrize("text", [*TEXTS, None])
@pytest.mark.parametrize("role", ["assistant", None])
@pytest.mark.parametrize(("finish_reason", "stop_reason"), ENDINGS)
def test_chat_chunk_matches_pydantic(text, role, finish_reason, stop_reason) -> None:
    reference = ChatCompletionChunk(id="chatcmpl-1", model="tiny", choices=[ChatChunkChoice(
        index=1, delta=DeltaMessage(role=role, content=text), finish_reason=finish_reason, stop_reason=stop_reason)])
    expected = _fields(sse(reference.model_dump(exclude={"usage"}, exclude_none=True)))
    lean = _fields(chat_chunk("chatcmpl-1", "tiny", 1, role, text, finish_reason, stop_reason))
    assert lean == expected
    assert list(lean["choices"][0]) == list(expected["choices"][0])
