"""The engine process's IO thread: encode and send outputs off the step loop, each to its API server.

The step loop hands each step's :class:`EngineCoreOutputs` to :meth:`OutputSender.send`, which puts
it on a queue; a thread encodes it with msgpack and writes it to the output socket. A step therefore
never waits on encoding or on a slow API process (ZMQ's own buffers absorb the rest).

One exception keeps a small step's tokens from paying for the thread: a batch of at most
``inline_max_outputs`` outputs, sent while the thread has nothing queued, is encoded and handed to ZMQ
by the loop itself, without blocking (ZMQ's own native IO thread writes it to the wire). Waking the
thread costs the loop two GIL hand-overs per step, about 80 µs on an H200 host: 8% of a batch-1 decode
step. A socket that cannot take the batch at once gets it through the thread, like everything after it
until the thread's queue is empty again, so the order per socket holds. The sockets are used by one
thread at a time (ZMQ sockets are not thread-safe): the loop writes only while the thread is idle, and
only the loop gives the thread work.

With several output sockets (``--api-server-count N``: one per API server process) every request's
outputs go only to the socket of the API server that sent it. The loop records that with
:meth:`OutputSender.route` before the engine sees the request; the IO thread drops the entry when it
sends the request's last output, and :meth:`OutputSender.forget` (queued behind the outputs before it)
drops the entries of aborted requests. Request ids must therefore be unique across API servers (each
server prefixes its own). The engine's stats ride along with every batch of outputs; an API server with no
outputs in a step gets them on their own at most every ``stats_interval_s`` (each such message wakes
that process and costs this thread an encode), and always with a batch sent as ``settled`` (the idle
report after the last request: the emptied queues must reach every server).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from typing import Any

import zmq

from infercore.engine.latency_trace import EngineTrace
from infercore.engine.messages import EngineCoreOutput, EngineCoreOutputs
from infercore.engine.serial import MessageKind, WireCodec

logger = logging.getLogger("infercore.engine")

#: Put on the queue by ``close`` so the thread sends what came before it and then returns.
_STOP = object()
#: Marks a queued ``forget``: the request ids whose routes to drop.
_FORGET = object()
#: Marks a batch of outputs whose stats must reach every socket (see ``send``).
_SETTLED = object()
#: Marks a batch already routed to one socket (the part of an inline send that socket could not take).
_ROUTED = object()
#: Default least time between two stats-only messages to one API server.
STATS_INTERVAL_S = 0.05
#: Default largest batch of outputs that the step loop sends itself when the IO thread is idle (see the
#: module's docstring); encoding costs about a microsecond per output.
INLINE_MAX_OUTPUTS = 8
#: Overrides :data:`INLINE_MAX_OUTPUTS` (0: every batch through the IO thread).
ENV_INLINE_MAX_OUTPUTS = "INFERCORE_ENGINE_INLINE_SEND_MAX"


def default_inline_max_outputs() -> int:
    """:data:`ENV_INLINE_MAX_OUTPUTS` when it is set to a whole number ≥ 0, else :data:`INLINE_MAX_OUTPUTS`
    (a bad value is reported and ignored)."""
    value = os.environ.get(ENV_INLINE_MAX_OUTPUTS, "").strip()
    if not value:
        return INLINE_MAX_OUTPUTS
    if not value.isdigit():
        logger.warning("%s=%r is not a whole number ≥ 0; using %d", ENV_INLINE_MAX_OUTPUTS, value,
                       INLINE_MAX_OUTPUTS)
        return INLINE_MAX_OUTPUTS
    return int(value)


class OutputSender:
    """Owns the output sockets once started; ``send`` queues, the IO thread routes, encodes and writes
    (or the caller does, for a small batch while the thread is idle).

    ``trace`` (with ``INFERCORE_TRACE_LATENCY=1``) stamps each output as it is written;
    ``stats_interval_s`` spaces out the stats-only messages to an API server without outputs;
    ``inline_max_outputs`` is the largest batch sent without the thread (0: none; default from
    :func:`default_inline_max_outputs`)."""

    def __init__(self, *sockets: zmq.Socket, trace: EngineTrace | None = None,
                 stats_interval_s: float = STATS_INTERVAL_S, inline_max_outputs: int | None = None) -> None:
        if not sockets:
            raise ValueError("OutputSender needs at least one output socket")
        self.sockets = list(sockets)
        #: The IO thread's codec, and the caller's for inline sends (an encoder is not shared across threads).
        self.codec = WireCodec()
        self._inline_codec = WireCodec()
        self.inline_max_outputs = default_inline_max_outputs() if inline_max_outputs is None else inline_max_outputs
        #: Items put on the queue (by the caller) and items the thread has finished: each has one writer,
        #: and the thread is idle, with the sockets free, exactly when they are equal.
        self._queued = 0
        self._done = 0
        #: Batches sent inline, for tests and benchmarks.
        self.inline_sends = 0
        self.trace = trace
        #: Request id → index of the socket (API server) its outputs go to; used with several sockets.
        self._routes: dict[str, int] = {}
        self.stats_interval_s = stats_interval_s
        #: ``time.monotonic()`` of each socket's last message that carried stats.
        self._stats_sent_at = [float("-inf")] * len(self.sockets)
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        #: ``time.perf_counter()`` of the last message written (for benchmarks/output_handoff.py).
        self.last_write_at = 0.0
        self._thread = threading.Thread(target=self._run, name="infercore-engine-output", daemon=True)
        self._thread.start()

    @property
    def num_routes(self) -> int:
        """Requests whose outputs are still routed to an API server."""
        return len(self._routes)

    def route(self, request_id: str, client: int) -> None:
        """Send ``request_id``'s outputs to socket ``client``; call before the engine can produce any."""
        if len(self.sockets) > 1:
            self._routes[request_id] = client

    def forget(self, request_ids: list[str]) -> None:
        """Drop the routes of aborted requests once the outputs queued before this call are sent."""
        if len(self.sockets) > 1 and request_ids:
            self._put((list(request_ids), _FORGET))

    def send(self, outputs: EngineCoreOutputs, settled: bool = False) -> None:
        """Send one batch of outputs without blocking: inline when it is small and the IO thread is idle,
        else queued for the thread. Stamps it if unstamped.

        ``settled``: its stats go to every API server now, however recently each had some."""
        if not outputs.timestamp:
            outputs.timestamp = time.time()
        if self._queued == self._done and len(outputs.outputs) <= self.inline_max_outputs:
            self._send_inline(outputs, settled)
            return
        self._put((outputs, _SETTLED if settled else None))
        # No explicit hand-over of the GIL here (``time.sleep(0)``): the thread is not awake yet, so the
        # step loop would sit idle through its wake-up (about 0.1 ms a step on a host-bound batch-1
        # decode). It wakes on another core and takes the GIL within the engine's switch interval.

    def send_message(self, message: Any, kind: MessageKind) -> None:
        """Queue any other wire message (e.g. the engine's death notice) for every socket, after the
        outputs before it."""
        self._put((message, kind))

    def pending(self) -> int:
        """Items queued for the thread and not yet handled."""
        return self._queued - self._done

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued, then stop the thread (waiting at most ``timeout`` seconds)."""
        self._queue.put(_STOP)
        self._thread.join(timeout)

    def _put(self, item: tuple[Any, Any]) -> None:
        self._queued += 1
        self._queue.put(item)

    def _batches(self, message: Any, kind: Any) -> list[tuple[zmq.Socket, Any, MessageKind | None, bool]]:
        """The (socket, message, kind, droppable) writes of one queued or inline item."""
        settled = kind is _SETTLED
        if settled:
            kind = None  # a batch of outputs like any other; only its stats go to every socket now
        if kind is None and len(self.sockets) > 1:
            return self._split(message, settled)
        return [(socket, message, kind, False) for socket in self.sockets]

    def _send_inline(self, outputs: EngineCoreOutputs, settled: bool) -> None:
        """Encode and hand ``outputs`` to ZMQ on the caller's thread, never blocking; a write that ZMQ
        cannot take at once goes to the thread (and with it everything after, until its queue is empty)."""
        self.inline_sends += 1
        for socket, batch, kind, droppable in self._batches(outputs, _SETTLED if settled else None):
            if self._queued != self._done:  # an earlier socket's write was queued: keep the order behind it
                self._put(((socket, batch, kind, droppable), _ROUTED))
                continue
            try:
                frames = self._inline_codec.encode(batch, kind)
            except Exception:
                logger.exception("the engine could not encode an output message")
                continue
            try:
                socket.send_multipart(frames, zmq.NOBLOCK)
            except zmq.Again:
                if not droppable:
                    self._put(((socket, batch, kind, droppable), _ROUTED))
                continue
            except zmq.ZMQError as exc:
                logger.warning("the engine could not send its outputs: %s", exc)
                continue
            if self.trace is not None:
                self.trace.written(batch.outputs)
            self.last_write_at = time.perf_counter()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            try:
                if not self._handle(*item):
                    return
            finally:
                self._done += 1

    def _handle(self, message: Any, kind: Any) -> bool:
        """Carry out one queued item; False once a socket is closing (nothing more can be delivered)."""
        if kind is _FORGET:
            for request_id in message:
                self._routes.pop(request_id, None)
            return True
        batches = [message] if kind is _ROUTED else self._batches(message, kind)
        for socket, batch, batch_kind, droppable in batches:
            if not self._write(socket, batch, batch_kind, droppable):
                return False
        return True

    def _split(self, outputs: EngineCoreOutputs,
               settled: bool = False) -> list[tuple[zmq.Socket, Any, MessageKind | None, bool]]:
        """One batch per socket: the outputs of that API server's requests with the stats, or the stats
        alone where that socket's last stats are ``stats_interval_s`` old (or ``settled``).

        A batch with stats only may be dropped when its socket cannot take it at once (an API server
        that has drained and gone must not hold up the others; the next stats supersede it)."""
        per_client: list[list[EngineCoreOutput]] = [[] for _ in self.sockets]
        for output in outputs.outputs:
            client = self._routes.pop(output.request_id, None) if output.finished else \
                self._routes.get(output.request_id)
            if client is None:  # aborted by its API server after this step ran: nobody waits for it
                continue
            per_client[client].append(output)
        batches: list[tuple[zmq.Socket, Any, MessageKind | None, bool]] = []
        now = time.monotonic()
        has_stats = outputs.stats is not None
        for index, (socket, mine) in enumerate(zip(self.sockets, per_client, strict=True)):
            stats_due = has_stats and (settled or now - self._stats_sent_at[index] >= self.stats_interval_s)
            if mine or stats_due:
                batch = EngineCoreOutputs(outputs=mine, stats=outputs.stats, timestamp=outputs.timestamp)
                batches.append((socket, batch, None, not mine))
                if has_stats:
                    self._stats_sent_at[index] = now
        return batches

    def _write(self, socket: zmq.Socket, message: Any, kind: MessageKind | None, droppable: bool) -> bool:
        """Encode and send one message; False once the socket is closing (nothing more can be delivered)."""
        try:
            frames = self.codec.encode(message, kind)
        except Exception:  # one batch that cannot be encoded must not silence the rest
            logger.exception("the engine could not encode an output message")
            return True
        if self.trace is not None and isinstance(message, EngineCoreOutputs):
            self.trace.written(message.outputs)
        try:
            if droppable:
                socket.send_multipart(frames, zmq.NOBLOCK)
            else:
                socket.send_multipart(frames)
        except zmq.Again:
            pass
        except zmq.ZMQError as exc:
            logger.warning("the engine could not send its outputs: %s", exc)
            return False
        self.last_write_at = time.perf_counter()
        return True
