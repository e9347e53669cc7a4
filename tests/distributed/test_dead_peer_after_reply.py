"""A worker's error that comes from a peer's death (a pipeline stage whose recv lost the stage before it, which
had already replied) makes the executor dead, so the engine fails and says so, rather than failing one step
and idling with a dead worker until the next request. An error with every worker alive stays a step error."""

from __future__ import annotations

import pytest

from infercore.distributed.rpc_codec import encode_reply
from infercore.executor.base import ExecutorDeadError
from infercore.executor.multiproc import MultiprocExecutor


class _Proc:
    def __init__(self, pid: int, returncode: int | None) -> None:
        self.pid, self.returncode = pid, returncode

    def poll(self) -> int | None:
        return self.returncode


class _Replies:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, timeout: float | None = None, still_alive: object = None) -> bytes:
        return self.data


def _executor(killed: bool) -> MultiprocExecutor:
    executor = MultiprocExecutor.__new__(MultiprocExecutor)
    executor.timeout = 5.0
    executor.dead_reason = None
    executor.procs = [_Proc(101, -9 if killed else None), _Proc(102, None)]  # type: ignore[list-item]
    executor.replies = [_Replies(encode_reply(0, None)),  # type: ignore[list-item]
                        _Replies(encode_reply(1, error="RuntimeError: Connection reset by peer"))]
    return executor


def test_an_error_beside_a_dead_peer_kills_the_executor() -> None:
    executor = _executor(killed=True)
    with pytest.raises(ExecutorDeadError, match="worker 0 .*exited with code -9"):
        executor._receive("execute_model")
    assert executor.dead_reason is not None


def test_an_error_with_every_worker_alive_fails_the_call_only() -> None:
    executor = _executor(killed=False)
    with pytest.raises(RuntimeError, match="worker 1 failed in execute_model") as caught:
        executor._receive("execute_model")
    assert not isinstance(caught.value, ExecutorDeadError) and executor.dead_reason is None
