"""The wire between the API process and the EngineCore process: typed msgpack frames over ZMQ.

Every message is two ZMQ frames: a one-byte kind and a msgpack payload decoded into the typed
struct for that kind. Nothing on the wire is pickled, so a peer can never make the other run code.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from infercore.wire.messages import EngineCoreOutputs, EngineCoreRequest, SchedulerStats
from infercore.wire.model_info import ModelInfo


class MessageKind(bytes, enum.Enum):
    """The first frame of every message, which names the payload's type."""

    ADD = b"A"
    ABORT = b"X"
    READY = b"R"
    STARTUP_FAILED = b"F"
    OUTPUTS = b"O"
    ENGINE_DEAD = b"D"


class AbortRequests(msgspec.Struct, array_like=True):
    """Engine request ids to drop (client gone, stop string seen, shutdown)."""

    request_ids: list[str]


class EngineReady(msgspec.Struct, array_like=True):
    """The engine built its model and KV cache; what the API process needs to know about it."""

    model_info: ModelInfo
    pid: int
    stats: SchedulerStats | None = None


class EngineFailure(msgspec.Struct, array_like=True):
    """The engine could not start, or died; ``message`` is a sentence for the user."""

    message: str


_TYPES: dict[MessageKind, type] = {
    MessageKind.ADD: EngineCoreRequest,
    MessageKind.ABORT: AbortRequests,
    MessageKind.READY: EngineReady,
    MessageKind.STARTUP_FAILED: EngineFailure,
    MessageKind.OUTPUTS: EngineCoreOutputs,
    MessageKind.ENGINE_DEAD: EngineFailure,
}
_KIND_OF: dict[type, MessageKind] = {
    EngineCoreRequest: MessageKind.ADD,
    AbortRequests: MessageKind.ABORT,
    EngineReady: MessageKind.READY,
    EngineCoreOutputs: MessageKind.OUTPUTS,
}


def leading_request_id(payload: bytes) -> str | None:
    """The request id that starts an ADD payload, read without decoding the rest (which may be what
    could not be decoded); None if the payload does not start with a msgpack array and a string."""
    data = memoryview(payload)
    if not data:
        return None
    head = data[0]
    offset = 1 if 0x90 <= head <= 0x9F else {0xDC: 3, 0xDD: 5}.get(head)
    if offset is None or offset >= len(data):
        return None
    tag = data[offset]
    if 0xA0 <= tag <= 0xBF:
        start, length = offset + 1, tag & 0x1F
    elif tag in _STR_LENGTH_BYTES:
        start = offset + 1 + _STR_LENGTH_BYTES[tag]
        length = int.from_bytes(data[offset + 1:start], "big")
    else:
        return None
    if start + length > len(data):
        return None
    try:
        return bytes(data[start:start + length]).decode()
    except UnicodeDecodeError:
        return None


#: msgpack str8 / str16 / str32 tags and the size of their length field.
_STR_LENGTH_BYTES = {0xD9: 1, 0xDA: 2, 0xDB: 4}


class WireCodec:
    """Encodes typed messages to ``[kind, payload]`` frames and decodes them back."""

    def __init__(self) -> None:
        self._encoder = msgspec.msgpack.Encoder()
        self._decoders = {kind: msgspec.msgpack.Decoder(cls) for kind, cls in _TYPES.items()}

    def encode(self, message: Any, kind: MessageKind | None = None) -> list[bytes]:
        """Frames for ``message``; ``kind`` is needed only where one type has several meanings."""
        kind = kind or _KIND_OF[type(message)]
        return [kind.value, self._encoder.encode(message)]

    def decode(self, frames: list[bytes]) -> tuple[MessageKind, Any]:
        """The kind and typed payload of a received message; raises ValueError on anything else."""
        if len(frames) != 2:
            raise ValueError(f"expected 2 frames on the engine wire, got {len(frames)}")
        try:
            kind = MessageKind(bytes(frames[0]))
        except ValueError:
            raise ValueError(f"unknown engine message kind {bytes(frames[0])[:8]!r}") from None
        return kind, self._decoders[kind].decode(frames[1])
