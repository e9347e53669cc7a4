"""The HTTP/1.1 connection guard: a deadline for reading each request and a cap on open connections.

uvicorn's h11 protocol waits for a request's headers and body as long as the client likes, and holds
any number of connections, so clients that send half a request and stop (slowloris) pile up until the
process runs out of file descriptors. This protocol closes a connection whose request is not whole
``read_timeout`` seconds after it began (answering 408 when nothing was parsed yet), and answers 503
to connections past ``max_connections``. Idle keep-alive connections stay uvicorn's business
(``timeout_keep_alive``).
"""

from __future__ import annotations

import asyncio
import json
import resource

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from infercore.entrypoints.openai.errors import error_body

#: Client states in which a request has begun (or may begin) but is not whole yet.
_READING = (h11.IDLE, h11.SEND_BODY)
#: File descriptors kept for everything but client connections (sockets to the engine, model files,
#: logs), so the connection cap is reached before the process runs out of descriptors.
RESERVED_FDS = 128


def _raw_response(status: int, phrase: str, message: str) -> bytes:
    body = json.dumps(error_body(status, message)).encode()
    head = (f"HTTP/1.1 {status} {phrase}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n")
    return head.encode() + body


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a per-request read deadline and a connection cap (class attributes;
    make a configured subclass with :func:`bounded_h11_protocol`)."""

    read_timeout: float = 30.0
    max_connections: int = 4096

    _read_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            transport.write(_raw_response(503, "Service Unavailable",
                                          f"the server holds its limit of {self.max_connections} connections; "
                                          "retry later"))
            transport.close()
            return
        self._start_deadline()

    def data_received(self, data: bytes) -> None:
        if self._read_deadline is None and self.conn.their_state in _READING:
            self._start_deadline()  # the next request of a kept-alive connection begins
        super().data_received(data)
        if self.conn.their_state not in _READING:
            self._stop_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_deadline()
        super().connection_lost(exc)

    def _start_deadline(self) -> None:
        self._stop_deadline()
        self._read_deadline = self.loop.call_later(self.read_timeout, self._deadline_passed)

    def _stop_deadline(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _deadline_passed(self) -> None:
        self._read_deadline = None
        if self.transport.is_closing() or self.conn.their_state not in _READING:
            return
        if self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE:
            # Nothing reached the application yet, so the 408 can't interleave with its response.
            self.transport.write(_raw_response(408, "Request Timeout",
                                               f"the request was not sent whole within {self.read_timeout:g} s"))
        self.transport.close()


def connection_cap(max_connections: int) -> int:
    """``max_connections``, lowered to what the process's descriptor limit leaves for clients."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return max_connections
    return max(1, min(max_connections, soft - RESERVED_FDS))


def bounded_h11_protocol(read_timeout: float, max_connections: int) -> type[BoundedH11Protocol]:
    """A :class:`BoundedH11Protocol` with these limits (the connection cap as :func:`connection_cap`
    allows), to pass to ``uvicorn.Config(http=...)``."""
    return type("ConfiguredH11Protocol", (BoundedH11Protocol,),
                {"read_timeout": read_timeout, "max_connections": connection_cap(max_connections)})
