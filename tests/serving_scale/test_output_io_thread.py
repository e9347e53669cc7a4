"""The engine process sends outputs from an IO thread: a stalled output socket never stalls the step loop,
and every batch still arrives, in order, once the socket drains. A small batch while the thread is idle
goes straight to ZMQ without blocking; one ZMQ cannot take at once goes through the thread, and so does
everything after it until the thread is idle again."""

from __future__ import annotations

import os
import threading

import pytest
import zmq

from infercore.engine.core_proc import EngineLoop
from infercore.engine.messages import EngineCoreOutput, EngineCoreOutputs
from infercore.engine.output_sender import (
    ENV_INLINE_MAX_OUTPUTS,
    INLINE_MAX_OUTPUTS,
    OutputSender,
    default_inline_max_outputs,
)
from infercore.engine.serial import MessageKind, WireCodec

STEPS = 5


class StalledSocket:
    """An output socket whose writes block until ``release`` is set (a slow API process whose ZMQ queue is
    full); a non-blocking write raises ``zmq.Again`` meanwhile, as ZMQ's does."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.sent: list[list[bytes]] = []
        self.refused = 0

    def send_multipart(self, frames: list[bytes], flags: int = 0) -> None:
        if flags & zmq.NOBLOCK and not self.release.is_set():
            self.refused += 1
            raise zmq.Again()
        self.release.wait()
        self.sent.append(frames)


class QuietInput:
    """An input socket with nothing to read."""

    def poll(self, timeout: int) -> int:
        return 0


class CountingEngine:
    """An engine with work for ``STEPS`` steps; each step outputs one token numbered by the step."""

    def __init__(self) -> None:
        self.steps = 0

    def has_unfinished_requests(self) -> bool:
        return self.steps < STEPS

    def step(self) -> EngineCoreOutputs:
        self.steps += 1
        return EngineCoreOutputs(outputs=[EngineCoreOutput("r", [self.steps])])


@pytest.mark.parametrize("inline_max_outputs", [0, 8])
def test_stalled_output_socket_does_not_stall_steps(inline_max_outputs: int) -> None:
    socket, engine = StalledSocket(), CountingEngine()
    sender = OutputSender(socket, inline_max_outputs=inline_max_outputs)
    loop = EngineLoop(engine, QuietInput(), sender, os.getppid())
    stepping = threading.Thread(target=lambda: [loop.run_once() for _ in range(STEPS)], daemon=True)
    stepping.start()
    stepping.join(timeout=5)
    assert not stepping.is_alive(), "the step loop waited on the output socket"
    assert engine.steps == STEPS and socket.sent == []
    # Inline, the first step's batch was refused by ZMQ and queued; the rest queued behind it.
    assert (socket.refused, sender.inline_sends) == ((1, 1) if inline_max_outputs else (0, 0))
    socket.release.set()
    sender.close()
    codec = WireCodec()
    decoded = [codec.decode(frames) for frames in socket.sent]
    assert [kind for kind, _ in decoded] == [MessageKind.OUTPUTS] * STEPS
    assert [out.outputs[0].new_token_ids for _, out in decoded] == [[i] for i in range(1, STEPS + 1)]
    assert all(out.timestamp > 0 for _, out in decoded)


def test_small_batches_go_inline_while_the_thread_is_idle_and_keep_their_order() -> None:
    ctx = zmq.Context()
    pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    pull.bind("inproc://inline")
    push.connect("inproc://inline")
    sender = OutputSender(push, inline_max_outputs=2)
    try:
        sender.send(EngineCoreOutputs(outputs=[EngineCoreOutput("a", [1])]))
        # Too big to go inline: the thread sends it.
        sender.send(EngineCoreOutputs(outputs=[EngineCoreOutput(r, [2]) for r in "abc"]))
        sender.send(EngineCoreOutputs(outputs=[EngineCoreOutput("a", [3])]))
        codec = WireCodec()
        received = []
        for _ in range(3):
            assert pull.poll(2000), "a batch was lost"
            received.append(codec.decode(pull.recv_multipart())[1])
        assert [[o.new_token_ids[0] for o in batch.outputs] for batch in received] == [[1], [2, 2, 2], [3]]
        # The first went inline; the third too, unless the thread was still busy with the second.
        assert sender.inline_sends in (1, 2)
    finally:
        sender.close()
        pull.close(linger=0)
        push.close(linger=0)
        ctx.term()


def test_a_refused_inline_write_keeps_every_socket_in_order() -> None:
    stalled, open_socket = StalledSocket(), StalledSocket()
    open_socket.release.set()
    sender = OutputSender(stalled, open_socket, inline_max_outputs=8)
    sender.route("s", 0)
    sender.route("o", 1)
    for token in (1, 2, 3):
        sender.send(EngineCoreOutputs(outputs=[EngineCoreOutput("s", [token]), EngineCoreOutput("o", [token])]))
    stalled.release.set()
    sender.close()
    codec = WireCodec()
    for socket, request_id in ((stalled, "s"), (open_socket, "o")):
        batches = [codec.decode(frames)[1] for frames in socket.sent]
        assert [[(o.request_id, o.new_token_ids[0]) for o in b.outputs] for b in batches] == \
            [[(request_id, token)] for token in (1, 2, 3)]
    assert stalled.refused == 1


@pytest.mark.parametrize(("value", "expected"), [("", INLINE_MAX_OUTPUTS), ("0", 0), ("32", 32),
                                                 ("many", INLINE_MAX_OUTPUTS), ("-1", INLINE_MAX_OUTPUTS)])
def test_the_inline_batch_limit_can_be_set_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str,
                                                                expected: int) -> None:
    monkeypatch.setenv(ENV_INLINE_MAX_OUTPUTS, value)
    assert default_inline_max_outputs() == expected
