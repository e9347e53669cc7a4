"""The engine process's IO thread: encode and send outputs off the step loop.

The step loop hands each step's :class:`EngineCoreOutputs` to :meth:`OutputSender.send`, which only
puts it on a queue; a thread encodes it with msgpack and writes it to the output socket. A step
therefore never waits on encoding or on a slow API process (ZMQ's own buffers absorb the rest), and
the socket is used by that one thread alone (ZMQ sockets are not thread-safe).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

import zmq

from infercore.engine.messages import EngineCoreOutputs
from infercore.engine.serial import MessageKind, WireCodec

logger = logging.getLogger("infercore.engine")

#: Put on the queue by ``close`` so the thread sends what came before it and then returns.
_STOP = object()


class OutputSender:
    """Owns the output socket once started; ``send`` queues, the IO thread encodes and writes."""

    def __init__(self, socket: zmq.Socket) -> None:
        self.socket = socket
        self.codec = WireCodec()
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="infercore-engine-output", daemon=True)
        self._thread.start()

    def send(self, outputs: EngineCoreOutputs) -> None:
        """Queue one batch of outputs for the IO thread (never blocks); stamps it if unstamped."""
        if not outputs.timestamp:
            outputs.timestamp = time.time()
        self._queue.put((outputs, None))

    def send_message(self, message: Any, kind: MessageKind) -> None:
        """Queue any other wire message (e.g. the engine's death notice), after the outputs before it."""
        self._queue.put((message, kind))

    def pending(self) -> int:
        """Batches queued and not yet written (approximate)."""
        return self._queue.qsize()

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued, then stop the thread (waiting at most ``timeout`` seconds)."""
        self._queue.put(_STOP)
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            message, kind = item
            try:
                frames = self.codec.encode(message, kind)
            except Exception:  # one batch that cannot be encoded must not silence the rest
                logger.exception("the engine could not encode an output message")
                continue
            try:
                self.socket.send_multipart(frames)
            except zmq.ZMQError as exc:  # the socket is closing: nothing more can be delivered
                logger.warning("the engine could not send its outputs: %s", exc)
                return
