"""The engine process sends outputs from an IO thread: a stalled output socket never stalls the step loop,
and every batch still arrives, in order, once the socket drains."""

from __future__ import annotations

import os
import threading

from infercore.engine.core_proc import EngineLoop
from infercore.engine.output_sender import OutputSender
from infercore.wire.codec import MessageKind, WireCodec
from infercore.wire.messages import EngineCoreOutput, EngineCoreOutputs

STEPS = 5


class StalledSocket:
    """An output socket whose writes block until ``release`` is set (a slow API process)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.sent: list[list[bytes]] = []

    def send_multipart(self, frames: list[bytes]) -> None:
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


def test_stalled_output_socket_does_not_stall_steps() -> None:
    socket, engine = StalledSocket(), CountingEngine()
    sender = OutputSender(socket)
    loop = EngineLoop(engine, QuietInput(), sender, os.getppid())
    stepping = threading.Thread(target=lambda: [loop.run_once() for _ in range(STEPS)], daemon=True)
    stepping.start()
    stepping.join(timeout=5)
    assert not stepping.is_alive(), "the step loop waited on the output socket"
    assert engine.steps == STEPS and socket.sent == []
    socket.release.set()
    sender.close()
    codec = WireCodec()
    decoded = [codec.decode(frames) for frames in socket.sent]
    assert [kind for kind, _ in decoded] == [MessageKind.OUTPUTS] * STEPS
    assert [out.outputs[0].new_token_ids for _, out in decoded] == [[i] for i in range(1, STEPS + 1)]
    assert all(out.timestamp > 0 for _, out in decoded)
