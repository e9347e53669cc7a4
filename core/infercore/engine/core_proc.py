"""The EngineCore process: build the engine, then loop over requests in, steps, outputs out.

It is started by :class:`infercore.frontend.core_client.EngineCoreClient` (or, with several API
server processes, by the launcher of ``infercore serve``) with the multiprocessing spawn context,
connects to the input and output socket of every API process, sends each a ready message (or the
startup error) and serves until told to stop, until its parent disappears or until a step fails.
With several API processes it polls all their input sockets and the output sender returns each
request's outputs to the API process that sent it.
A message it cannot decode or a request it cannot take fails that request alone (an error output
for its id), never the engine.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

import zmq

from infercore.config import InfercoreConfig
from infercore.distributed.dp_rendezvous import spans_data_parallel
from infercore.engine.latency_trace import EngineTrace, now_ns, open_writer
from infercore.engine.output_sender import OutputSender
from infercore.wire.codec import (
    AbortRequests,
    EngineFailure,
    EngineReady,
    MessageKind,
    WireCodec,
    leading_request_id,
)
from infercore.wire.messages import EngineCoreOutput, EngineCoreOutputs, FinishReason

logger = logging.getLogger("infercore.engine")

DEFAULT_ENGINE_FACTORY = "infercore.engine.core:EngineCore"
#: Longest the loop waits for input while idle; bounds how late a vanished parent is noticed.
_IDLE_POLL_MS = 200
#: The engine process's interpreter switch interval (Python's default is 5 ms). The output IO thread
#: needs the GIL a few times per batch (take it off the queue, encode, send); while the step loop runs
#: Python without blocking (a host-bound step), the thread waits up to this long for it. Short enough
#: that tokens leave within a fraction of a batch-1 decode step; it costs nothing while no other thread
#: asks for the GIL.
ENGINE_SWITCH_INTERVAL_S = 0.0002
#: Overrides :data:`ENGINE_SWITCH_INTERVAL_S` (seconds), to weigh token delivery against the step loop's
#: GIL hand-overs on a given host.
ENV_SWITCH_INTERVAL = "INFERCORE_ENGINE_SWITCH_INTERVAL_S"


def load_factory(spec: str) -> Any:
    """Resolve a ``"module:attr"`` string to the callable it names."""
    module_name, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def _user_message(exc: BaseException) -> str:
    """One line for the user: the exception's own words, never a traceback."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:2000]


class EngineLoop:
    """Owns the engine, the input sockets and the output IO thread; ``run`` returns the process exit code.

    ``inputs`` is one socket, or one per API server process (index ``i`` pairs with the sender's
    output socket ``i``). The loop never writes to an output socket itself: each step's outputs go
    to ``sender``, whose thread encodes and sends them while the next step runs. ``trace`` (with
    ``INFERCORE_TRACE_LATENCY=1``) stamps each request's arrival and steps.
    """

    def __init__(self, engine: Any, inputs: zmq.Socket | Sequence[zmq.Socket], sender: OutputSender,
                 parent_pid: int, trace: EngineTrace | None = None) -> None:
        self.engine = engine
        self.inputs = list(inputs) if isinstance(inputs, Sequence) else [inputs]
        self._poller: zmq.Poller | None = None
        if len(self.inputs) > 1:
            self._poller = zmq.Poller()
            for socket in self.inputs:
                self._poller.register(socket, zmq.POLLIN)
        self.sender = sender
        self.parent_pid = parent_pid
        self.trace = trace
        self.codec = WireCodec()
        #: Whether an idle step should report the emptied queues and freed KV blocks.
        self._report_idle = False

    def _parent_alive(self) -> bool:
        return os.getppid() == self.parent_pid

    def _handle(self, frames: list[bytes], client: int = 0, recv_ns: int = 0) -> bool:
        """Apply one message from API server ``client`` (read at ``recv_ns``, for the latency trace);
        returns True when it changed the set of requests."""
        try:
            kind, message = self.codec.decode(frames)
        except Exception as exc:  # whatever a peer sent, the engine lives on
            self._refuse_undecodable(frames, exc, client)
            return False
        if kind is MessageKind.ADD:
            self.sender.route(message.request_id, client)
            try:
                self.engine.add_request(message)
            except Exception as exc:  # a request the engine cannot take fails alone
                logger.warning("request %s refused: %s", message.request_id, _user_message(exc))
                self._fail_request(message.request_id, _user_message(exc))
            else:
                if self.trace is not None:
                    self.trace.received(message.request_id, recv_ns)
            return True
        if isinstance(message, AbortRequests):
            self.engine.abort_requests(message.request_ids)
            self.sender.forget(message.request_ids)
            if self.trace is not None:
                self.trace.forget(message.request_ids)
            return True
        return False

    def _refuse_undecodable(self, frames: list[bytes], exc: Exception, client: int) -> None:
        """Fail the request a message we cannot decode was adding, if its id can be read; else drop it."""
        request_id = None
        if len(frames) == 2 and bytes(frames[0]) == MessageKind.ADD.value:
            request_id = leading_request_id(bytes(frames[1]))
        reason = _user_message(exc)
        if request_id is None:
            logger.warning("dropped a message the engine could not decode: %s", reason)
            return
        logger.warning("request %s could not be decoded: %s", request_id, reason)
        self.sender.route(request_id, client)
        self._fail_request(request_id, f"the engine could not decode the request: {reason}")

    def _fail_request(self, request_id: str, message: str) -> None:
        self._send(EngineCoreOutputs(outputs=[
            EngineCoreOutput(request_id, [], finish_reason=FinishReason.ERROR, error=message)]))

    def _drain_input(self, timeout_ms: int) -> bool:
        if self._poller is None:
            ready = [0] if self.inputs[0].poll(timeout_ms) else []
        else:
            events = dict(self._poller.poll(timeout_ms))
            ready = [i for i, socket in enumerate(self.inputs) if socket in events]
        changed = False
        for client in ready:
            socket = self.inputs[client]
            while True:
                try:
                    frames = socket.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                changed |= self._handle(frames, client, now_ns() if self.trace is not None else 0)
        return changed

    def _send(self, outputs: EngineCoreOutputs) -> None:
        self.sender.send(outputs)

    def run_once(self) -> None:
        """Take the waiting messages (waiting a little for one while idle), then step if there is work."""
        busy = self.engine.has_unfinished_requests()
        self._report_idle |= self._drain_input(0 if busy else _IDLE_POLL_MS)
        if self.engine.has_unfinished_requests():
            self._send(self._step())
            self._report_idle = True
        elif self._report_idle:
            # One step with nothing scheduled reports the emptied queues and freed KV blocks to every
            # API server.
            self.sender.send(self.engine.step(), settled=True)
            self._report_idle = False

    def _step(self) -> EngineCoreOutputs:
        if self.trace is None:
            return self.engine.step()
        self.trace.step_started()
        outputs = self.engine.step()
        self.trace.step_done(outputs.outputs)
        return outputs

    def run(self) -> int:
        while self._parent_alive():
            self.run_once()
        logger.warning("the API process is gone; the engine is exiting")
        return 1


def switch_interval() -> float:
    """The engine process's switch interval: ``INFERCORE_ENGINE_SWITCH_INTERVAL_S`` (seconds, positive) when
    set, else :data:`ENGINE_SWITCH_INTERVAL_S`. A value that is not a positive number is reported and
    ignored."""
    value = os.environ.get(ENV_SWITCH_INTERVAL, "").strip()
    if not value:
        return ENGINE_SWITCH_INTERVAL_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds <= 1:
        logger.warning("%s=%r is not a number of seconds in (0, 1]; using %g", ENV_SWITCH_INTERVAL, value,
                       ENGINE_SWITCH_INTERVAL_S)
        return ENGINE_SWITCH_INTERVAL_S
    return seconds


def tune_interpreter() -> None:
    """Set the engine process's switch interval (:func:`switch_interval`)."""
    sys.setswitchinterval(switch_interval())


def _addresses(value: str | Sequence[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def run_engine_core(config_json: str, input_address: str | Sequence[str], output_address: str | Sequence[str],
                    parent_pid: int, engine_factory: str = DEFAULT_ENGINE_FACTORY) -> None:
    """Process entry point (must be importable for the spawn context).

    ``input_address`` and ``output_address`` are one address each, or one per API server process
    (paired by position)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the API process, which stops us.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    tune_interpreter()
    inputs, outputs = _addresses(input_address), _addresses(output_address)
    if len(inputs) != len(outputs):
        raise ValueError(f"{len(inputs)} input addresses but {len(outputs)} output addresses; give one pair "
                         "per API server")
    ctx = zmq.Context()
    input_sockets = [ctx.socket(zmq.PULL) for _ in inputs]
    output_sockets = [ctx.socket(zmq.PUSH) for _ in outputs]
    for socket, address in zip(input_sockets, inputs, strict=True):
        socket.connect(address)
    for socket, address in zip(output_sockets, outputs, strict=True):
        socket.setsockopt(zmq.LINGER, 1000)
        socket.connect(address)
    codec = WireCodec()
    engine = None
    sync = None
    code = 1
    try:
        try:
            config = InfercoreConfig.model_validate_json(config_json)
            if spans_data_parallel(config.parallel):
                from infercore.engine.dp_lockstep import DataParallelSync

                sync = DataParallelSync(config.parallel)  # before the engine: its workers meet through it
            engine = load_factory(engine_factory)(config)
            # A step with nothing to do reports the engine's starting figures (free KV blocks and so on).
            ready = EngineReady(model_info=engine.model_info, pid=os.getpid(), stats=engine.step().stats)
        except Exception as exc:
            logger.exception("engine startup failed")
            failure = codec.encode(EngineFailure(_user_message(exc)), MessageKind.STARTUP_FAILED)
            for socket in output_sockets:
                socket.send_multipart(failure)
            return
        for socket in output_sockets:
            socket.send_multipart(codec.encode(ready))
        writer = open_writer("engine")
        trace = EngineTrace(writer) if writer is not None else None
        sender = OutputSender(*output_sockets, trace=trace)
        try:
            if sync is None:
                loop = EngineLoop(engine, input_sockets, sender, parent_pid, trace)
            else:
                from infercore.engine.dp_lockstep import LockstepEngineLoop

                loop = LockstepEngineLoop(engine, input_sockets, sender, parent_pid, sync, trace)
            code = loop.run()
        except Exception as exc:
            logger.exception("engine step failed")
            sender.send_message(EngineFailure(_user_message(exc)), MessageKind.ENGINE_DEAD)
        finally:
            sender.close()
            if writer is not None:
                writer.close()
    finally:
        if engine is not None:
            engine.shutdown()
        for socket in input_sockets:
            socket.close(linger=0)
        for socket in output_sockets:
            socket.close()
        ctx.term()
        sys.exit(code)
