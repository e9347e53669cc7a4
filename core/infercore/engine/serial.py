"""The wire between the API process and the EngineCore process: typed msgpack frames over ZMQ.

Every message is two ZMQ frames: a one-byte kind and a msgpack payload decoded into the typed
struct for that kind. Nothing on the wire is pickled, so a peer can never make the other run code.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from infercore.engine.messages import EngineCoreOutputs, EngineCoreRequest, SchedulerStats
from infercore.engine.model_info import ModelInfo


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
