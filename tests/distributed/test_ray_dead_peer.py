"""The Ray executor, like the multiprocess one: a worker's error beside an actor Ray reports dead makes the
executor dead (the engine fails and says so); an error with every actor alive fails that call only."""

from __future__ import annotations

import types

import pytest

from infercore.distributed.rpc_codec import encode_reply
from infercore.executor.base import ExecutorDeadError
from infercore.executor.ray_executor import RayExecutor


class _RayError(Exception):
    pass


class _Ref:
    def __init__(self, value: object) -> None:
        self.value = value


class _Method:
    def __init__(self, value: object) -> None:
        self.value = value

    def remote(self, *args: object) -> _Ref:
        return _Ref(self.value)


class _Actor:
    def __init__(self, dead: bool, reply: bytes) -> None:
        died = _RayError("the actor died unexpectedly")
        self.node_ip = _Method(died if dead else "127.0.0.1")
        self.call = _Method(died if dead else reply)


def _fake_ray() -> types.SimpleNamespace:
    def get(ref: _Ref, timeout: float | None = None) -> object:
        if isinstance(ref.value, BaseException):
            raise ref.value
        return ref.value

    def wait(refs: list[_Ref], num_returns: int = 1, timeout: float | None = None) -> tuple[list, list]:
        return refs[:num_returns], refs[num_returns:]

    return types.SimpleNamespace(get=get, wait=wait, exceptions=types.SimpleNamespace(RayError=_RayError))


def _executor(killed: bool) -> tuple[RayExecutor, list[_Ref]]:
    executor = RayExecutor.__new__(RayExecutor)
    executor.ray = _fake_ray()
    executor.timeout = 5.0
    executor.dead_reason = None
    executor.actors = [_Actor(killed, b""), _Actor(False, b"")]
    # Worker 0 replied before it was killed; worker 1's receive from it then failed.
    refs = [_Ref(encode_reply(0, None)), _Ref(encode_reply(1, error="RuntimeError: Connection reset by peer"))]
    return executor, refs


def test_an_error_beside_a_dead_actor_kills_the_executor() -> None:
    executor, refs = _executor(killed=True)
    with pytest.raises(ExecutorDeadError, match="Ray worker 0 died .*Connection reset"):
        executor._receive(refs, "execute_model")
    assert executor.dead_reason is not None
    with pytest.raises(ExecutorDeadError):  # every later call is refused at once
        executor._send("execute_model", ())


def test_an_error_with_every_actor_alive_fails_the_call_only() -> None:
    executor, refs = _executor(killed=False)
    with pytest.raises(RuntimeError, match="worker 1 failed in execute_model") as caught:
        executor._receive(refs, "execute_model")
    assert not isinstance(caught.value, ExecutorDeadError) and executor.dead_reason is None
