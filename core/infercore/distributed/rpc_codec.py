"""The worker RPC wire: msgspec-encoded calls and replies, typed by the worker method's signature.

A call is ``Call(method, args)`` where ``args`` is the msgpack of the positional arguments; the
receiving side decodes them into the types the method declares (``SchedulerOutput``, tensors…), and
the caller decodes the reply's value into the declared return type. Tensors travel as
``[dtype, shape, raw bytes]``. Nothing is pickled, so a peer can never make a worker run code.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np
import torch


class Call(msgspec.Struct, array_like=True):
    """Run ``method`` on every worker with ``args`` (msgpack of the positional arguments)."""

    method: str
    args: msgspec.Raw = msgspec.Raw(b"\x90")


class Reply(msgspec.Struct, array_like=True):
    """A worker's answer: the msgpack of the method's return value, or the error it raised."""

    rank: int
    value: msgspec.Raw = msgspec.Raw(b"\xc0")
    error: str | None = None


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        host = obj.detach().contiguous().cpu()
        return [str(host.dtype).removeprefix("torch."), list(host.shape), host.view(torch.uint8).numpy().tobytes()]
    if isinstance(obj, set | frozenset):
        return sorted(obj)
    raise NotImplementedError(f"cannot send a {type(obj).__name__} to a worker")


def _dec_hook(kind: type, obj: Any) -> Any:
    if kind is torch.Tensor:
        dtype, shape, data = obj
        flat = torch.from_numpy(np.frombuffer(bytearray(data), dtype=np.uint8))
        return flat.view(getattr(torch, dtype)).reshape(shape)
    raise NotImplementedError(f"cannot decode a {kind.__name__} from a worker message")


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_CALL_DECODER = msgspec.msgpack.Decoder(Call)
_REPLY_DECODER = msgspec.msgpack.Decoder(Reply)


@functools.cache
def _signature(cls: type, method: str) -> tuple[Any, Any]:
    """(decoder of the argument tuple, decoder of the return value) for ``cls.method``."""
    fn = getattr(cls, method)
    hints = typing.get_type_hints(fn)
    params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
    arg_types = tuple(hints.get(p.name, Any) for p in params)
    n_required = sum(p.default is inspect.Parameter.empty for p in params)
    decoders = {n: msgspec.msgpack.Decoder(tuple[arg_types[:n]] if n else tuple, dec_hook=_dec_hook)  # type: ignore[misc]
                for n in range(n_required, len(params) + 1)}
    return decoders, msgspec.msgpack.Decoder(hints.get("return", Any), dec_hook=_dec_hook)


def encode_call(method: str, args: tuple[Any, ...] = ()) -> bytes:
    """The bytes of one call."""
    return _ENCODER.encode(Call(method, msgspec.Raw(_ENCODER.encode(list(args)))))


def decode_call(data: bytes) -> Call:
    return _CALL_DECODER.decode(data)


def _array_length(head: bytes) -> int:
    """The element count of the msgpack array starting ``head`` (read from its header alone)."""
    first = head[0]
    if 0x90 <= first <= 0x9F:
        return first & 0x0F
    if first == 0xDC:
        return int.from_bytes(head[1:3], "big")
    if first == 0xDD:
        return int.from_bytes(head[1:5], "big")
    raise ValueError("a worker call's arguments are not a msgpack array")


def decode_args(cls: type, call: Call) -> tuple[Any, ...]:
    """The call's arguments, typed by ``cls.<method>``'s annotations."""
    decoders, _ = _signature(cls, call.method)
    n = _array_length(bytes(memoryview(call.args)[:5]))
    if n not in decoders:
        raise TypeError(f"{call.method} takes {min(decoders)} to {max(decoders)} arguments, got {n}")
    return tuple(decoders[n].decode(call.args))


def encode_reply(rank: int, value: Any = None, error: str | None = None) -> bytes:
    return _ENCODER.encode(Reply(rank, msgspec.Raw(_ENCODER.encode(value)), error))


def decode_reply(data: bytes) -> Reply:
    return _REPLY_DECODER.decode(data)


def decode_value(cls: type, method: str, reply: Reply) -> Any:
    """The reply's value, typed by ``cls.<method>``'s return annotation."""
    _, decoder = _signature(cls, method)
    return decoder.decode(reply.value)


def dispatch(target: Any, allowed: Callable[[str], bool], call: Call) -> Any:
    """Run ``call`` on ``target`` if ``allowed(call.method)``; returns its result."""
    if not allowed(call.method):
        raise ValueError(f"workers do not offer the method {call.method!r}")
    return getattr(target, call.method)(*decode_args(type(target), call))
