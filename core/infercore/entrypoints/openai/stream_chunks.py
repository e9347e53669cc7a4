"""Lean SSE chunks for the streaming hot path: msgspec structs encoded straight to bytes.

The common streamed chunk (text only: no logprobs, no prompt logprobs, no per-chunk usage, no tool
calls or reasoning) is built here without a pydantic model, ``model_dump`` and ``json.dumps`` round
trip; its JSON has the same fields and values as the pydantic chunk of ``protocol`` would have (the
test in tests/serving_scale proves it field for field). Anything richer still goes through ``protocol``.
"""

from __future__ import annotations

import time

import msgspec


class CompletionChunkChoice(msgspec.Struct, kw_only=True):
    """A text-only choice of a streamed /v1/completions chunk (``CompletionChoice``'s fields)."""

    index: int
    text: str
    logprobs: None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    prompt_logprobs: None = None


class CompletionChunk(msgspec.Struct, kw_only=True):
    """A streamed /v1/completions chunk without ``usage`` (``CompletionResponse``'s other fields)."""

    id: str
    object: str = "text_completion"
    created: int
    model: str
    choices: list[CompletionChunkChoice]


class ChatDelta(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The role and content of a streamed chat delta; unset fields are left out, as with pydantic's
    ``exclude_none``."""

    role: str | None = None
    content: str | None = None


class ChatChunkChoice(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A choice of a streamed chat chunk without logprobs."""

    index: int
    delta: ChatDelta
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class ChatChunk(msgspec.Struct, kw_only=True):
    """A streamed chat chunk without ``usage``."""

    id: str
    object: str = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]


_ENCODER = msgspec.json.Encoder()


def sse_bytes(chunk: msgspec.Struct) -> bytes:
    """One server-sent event carrying ``chunk`` as JSON."""
    return b"data: " + _ENCODER.encode(chunk) + b"\n\n"


def completion_chunk(request_id: str, model: str, index: int, text: str, finish_reason: str | None,
                     stop_reason: int | str | None) -> bytes:
    """The SSE event of a text-only completion chunk."""
    return sse_bytes(CompletionChunk(id=request_id, created=int(time.time()), model=model, choices=[
        CompletionChunkChoice(index=index, text=text, finish_reason=finish_reason, stop_reason=stop_reason)]))


def chat_chunk(request_id: str, model: str, index: int, role: str | None, content: str | None,
               finish_reason: str | None, stop_reason: int | str | None) -> bytes:
    """The SSE event of a chat chunk whose delta holds at most a role and content."""
    return sse_bytes(ChatChunk(id=request_id, created=int(time.time()), model=model, choices=[
        ChatChunkChoice(index=index, delta=ChatDelta(role=role, content=content), finish_reason=finish_reason,
                        stop_reason=stop_reason)]))
