"""The EngineCore process: build the engine, then loop over requests in, steps, outputs out.

It is started by :class:`infercore.engine.core_client.EngineCoreClient` with the multiprocessing
spawn context, connects to the two sockets the API process bound, sends a ready message (or the
startup error) and serves until told to stop, until its parent disappears or until a step fails.
A message it cannot decode or a request it cannot take fails that request alone (an error output
for its id), never the engine.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
from typing import Any

import zmq

from infercore.config import InfercoreConfig
from infercore.engine.messages import EngineCoreOutput, EngineCoreOutputs, FinishReason
from infercore.engine.output_sender import OutputSender
from infercore.engine.serial import (
    AbortRequests,
    EngineFailure,
    EngineReady,
    MessageKind,
    WireCodec,
    leading_request_id,
)

logger = logging.getLogger("infercore.engine")

DEFAULT_ENGINE_FACTORY = "infercore.engine.core:EngineCore"
#: Longest the loop waits for input while idle; bounds how late a vanished parent is noticed.
_IDLE_POLL_MS = 200


def load_factory(spec: str) -> Any:
    """Resolve a ``"module:attr"`` string to the callable it names."""
    module_name, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def _user_message(exc: BaseException) -> str:
    """One line for the user: the exception's own words, never a traceback."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:2000]


class EngineLoop:
    """Owns the engine, the input socket and the output IO thread; ``run`` returns the process exit code.

    The loop never writes to the output socket itself: each step's outputs go to ``sender``, whose
    thread encodes and sends them while the next step runs.
    """

    def __init__(self, engine: Any, input_socket: zmq.Socket, sender: OutputSender, parent_pid: int) -> None:
        self.engine = engine
        self.input = input_socket
        self.sender = sender
        self.parent_pid = parent_pid
        self.codec = WireCodec()
        #: Whether an idle step should report the emptied queues and freed KV blocks.
        self._report_idle = False

    def _parent_alive(self) -> bool:
        return os.getppid() == self.parent_pid

    def _handle(self, frames: list[bytes]) -> bool:
        """Apply one message; returns True when it changed the set of requests."""
        try:
            kind, message = self.codec.decode(frames)
        except Exception as exc:  # whatever a peer sent, the engine lives on
            self._refuse_undecodable(frames, exc)
            return False
        if kind is MessageKind.ADD:
            try:
                self.engine.add_request(message)
            except Exception as exc:  # a request the engine cannot take fails alone
                logger.warning("request %s refused: %s", message.request_id, _user_message(exc))
                self._fail_request(message.request_id, _user_message(exc))
            return True
        if isinstance(message, AbortRequests):
            self.engine.abort_requests(message.request_ids)
            return True
        return False

    def _refuse_undecodable(self, frames: list[bytes], exc: Exception) -> None:
        """Fail the request a message we cannot decode was adding, if its id can be read; else drop it."""
        request_id = None
        if len(frames) == 2 and bytes(frames[0]) == MessageKind.ADD.value:
            request_id = leading_request_id(bytes(frames[1]))
        reason = _user_message(exc)
        if request_id is None:
            logger.warning("dropped a message the engine could not decode: %s", reason)
            return
        logger.warning("request %s could not be decoded: %s", request_id, reason)
        self._fail_request(request_id, f"the engine could not decode the request: {reason}")

    def _fail_request(self, request_id: str, message: str) -> None:
        self._send(EngineCoreOutputs(outputs=[
            EngineCoreOutput(request_id, [], finish_reason=FinishReason.ERROR, error=message)]))

    def _drain_input(self, timeout_ms: int) -> bool:
        changed = False
        if self.input.poll(timeout_ms):
            while True:
                try:
                    frames = self.input.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                changed |= self._handle(frames)
        return changed

    def _send(self, outputs: EngineCoreOutputs) -> None:
        self.sender.send(outputs)

    def run_once(self) -> None:
        """Take the waiting messages (waiting a little for one while idle), then step if there is work."""
        busy = self.engine.has_unfinished_requests()
        self._report_idle |= self._drain_input(0 if busy else _IDLE_POLL_MS)
        if self.engine.has_unfinished_requests():
            self._send(self.engine.step())
            self._report_idle = True
        elif self._report_idle:
            # One step with nothing scheduled reports the emptied queues and freed KV blocks.
            self._send(self.engine.step())
            self._report_idle = False

    def run(self) -> int:
        while self._parent_alive():
            self.run_once()
        logger.warning("the API process is gone; the engine is exiting")
        return 1


def run_engine_core(config_json: str, input_address: str, output_address: str, parent_pid: int,
                    engine_factory: str = DEFAULT_ENGINE_FACTORY) -> None:
    """Process entry point (must be importable for the spawn context)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the API process, which stops us.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    ctx = zmq.Context()
    input_socket = ctx.socket(zmq.PULL)
    output_socket = ctx.socket(zmq.PUSH)
    output_socket.setsockopt(zmq.LINGER, 1000)
    input_socket.connect(input_address)
    output_socket.connect(output_address)
    codec = WireCodec()
    engine = None
    code = 1
    try:
        try:
            config = InfercoreConfig.model_validate_json(config_json)
            engine = load_factory(engine_factory)(config)
            # A step with nothing to do reports the engine's starting figures (free KV blocks and so on).
            ready = EngineReady(model_info=engine.model_info, pid=os.getpid(), stats=engine.step().stats)
        except Exception as exc:
            logger.exception("engine startup failed")
            output_socket.send_multipart(codec.encode(EngineFailure(_user_message(exc)), MessageKind.STARTUP_FAILED))
            return
        output_socket.send_multipart(codec.encode(ready))
        sender = OutputSender(output_socket)
        try:
            code = EngineLoop(engine, input_socket, sender, parent_pid).run()
        except Exception as exc:
            logger.exception("engine step failed")
            sender.send_message(EngineFailure(_user_message(exc)), MessageKind.ENGINE_DEAD)
        finally:
            sender.close()
    finally:
        if engine is not None:
            engine.shutdown()
        input_socket.close(linger=0)
        output_socket.close()
        ctx.term()
        sys.exit(code)
