"""The engine process's IO thread: encode and send outputs off the step loop, each to its API server.

The step loop hands each step's :class:`EngineCoreOutputs` to :meth:`OutputSender.send`, which only
puts it on a queue; a thread encodes it with msgpack and writes it to the output socket. A step
therefore never waits on encoding or on a slow API process (ZMQ's own buffers absorb the rest), and
the sockets are used by that one thread alone (ZMQ sockets are not thread-safe).

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
import queue
import threading
import time
from typing import Any

import zmq

from infercore.engine.latency_trace import EngineTrace
from infercore.wire.codec import MessageKind, WireCodec
from infercore.wire.messages import EngineCoreOutput, EngineCoreOutputs

logger = logging.getLogger("infercore.engine")

#: Put on the queue by ``close`` so the thread sends what came before it and then returns.
_STOP = object()
#: Marks a queued ``forget``: the request ids whose routes to drop.
_FORGET = object()
#: Marks a batch of outputs whose stats must reach every socket (see ``send``).
_SETTLED = object()
#: Default least time between two stats-only messages to one API server.
STATS_INTERVAL_S = 0.05


class OutputSender:
    """Owns the output sockets once started; ``send`` queues, the IO thread routes, encodes and writes.

    ``trace`` (with ``INFERCORE_TRACE_LATENCY=1``) stamps each output as it is written;
    ``stats_interval_s`` spaces out the stats-only messages to an API server without outputs."""

    def __init__(self, *sockets: zmq.Socket, trace: EngineTrace | None = None,
                 stats_interval_s: float = STATS_INTERVAL_S) -> None:
        if not sockets:
            raise ValueError("OutputSender needs at least one output socket")
        self.sockets = list(sockets)
        self.codec = WireCodec()
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
            self._queue.put((list(request_ids), _FORGET))

    def send(self, outputs: EngineCoreOutputs, settled: bool = False) -> None:
        """Queue one batch of outputs for the IO thread (never blocks); stamps it if unstamped.

        ``settled``: its stats go to every API server now, however recently each had some."""
        if not outputs.timestamp:
            outputs.timestamp = time.time()
        self._queue.put((outputs, _SETTLED if settled else None))
        # No explicit hand-over of the GIL here (``time.sleep(0)``): the thread is not awake yet, so the
        # step loop would sit idle through its wake-up (about 0.1 ms a step on a host-bound batch-1
        # decode). It wakes on another core and takes the GIL within the engine's switch interval.

    def send_message(self, message: Any, kind: MessageKind) -> None:
        """Queue any other wire message (e.g. the engine's death notice) for every socket, after the
        outputs before it."""
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
            if kind is _FORGET:
                for request_id in message:
                    self._routes.pop(request_id, None)
                continue
            settled = kind is _SETTLED
            if settled:
                kind = None  # a batch of outputs like any other; only its stats go to every socket now
            if kind is None and len(self.sockets) > 1:
                batches = self._split(message, settled)
            else:
                batches = [(socket, message, kind, False) for socket in self.sockets]
            for socket, batch, batch_kind, droppable in batches:
                if not self._write(socket, batch, batch_kind, droppable):
                    return

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
