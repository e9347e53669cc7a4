"""The HTTP/1.1 connection guard: deadlines for reading each request and caps on open connections.

uvicorn's HTTP protocols wait for a request's headers and body as long as the client likes, and hold
any number of connections, so clients that send half a request and stop (slowloris) pile up until the
process runs out of file descriptors. These protocols close a connection whose request's headers are
not in ``header_timeout`` seconds after it opened (or after the request's first byte, on a kept-alive
connection), or whose request is not whole ``read_timeout`` seconds after it began (answering 408 when
nothing reached the application yet); they answer 503 to connections past ``max_connections``, and to
those of one client address past ``max_connections_per_client``, so that one client's idle connections
never lock everybody else out. Idle keep-alive connections stay uvicorn's business (``timeout_keep_alive``).

Two parsers carry the guard: httptools (C; the default where it is installed: every streamed chunk of
every response goes through the protocol, and h11 frames each one in Python) and h11 (pure Python).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import resource
from collections import Counter
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from infercore.engine.latency_trace import SCOPE_KEY, now_ns, trace_enabled
from infercore.entrypoints.openai.errors import error_body

#: Client states in which a request has begun (or may begin) but is not whole yet.
_READING = (h11.IDLE, h11.SEND_BODY)
#: Largest request line plus headers either parser takes (h11's ``max_incomplete_event_size``).
MAX_HEAD_BYTES = 65536
#: File descriptors kept for everything but client connections (sockets to the engine, model files,
#: logs), so the connection cap is reached before the process runs out of descriptors.
RESERVED_FDS = 128


def _raw_response(status: int, phrase: str, message: str) -> bytes:
    body = json.dumps(error_body(status, message)).encode()
    head = (f"HTTP/1.1 {status} {phrase}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n")
    return head.encode() + body


class _ReadGuard:
    """The guard both protocols share (mixed in before uvicorn's protocol class): the connection cap
    checked as a connection opens, and the read deadline's timer. A protocol says when a request is
    being read (:meth:`_reading`) and whether nothing of it reached the application yet, so a 408 can
    still be written (:meth:`_may_answer_408`)."""

    read_timeout: float = 30.0
    header_timeout: float = 5.0
    max_connections: int = 4096
    max_connections_per_client: int = 1024
    #: Open connections per client address, shared by the connections of one configured class (process).
    clients: Counter[str] = Counter()

    _read_deadline: asyncio.TimerHandle | None = None
    _request_began = 0.0
    _headers_in = False
    _client: str | None = None
    connections: Any
    transport: Any
    loop: Any

    def _reading(self) -> bool:
        raise NotImplementedError

    def _may_answer_408(self) -> bool:
        raise NotImplementedError

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and peer:
            self._client = str(peer[0])
            self.clients[self._client] += 1
        refusal = None
        if len(self.connections) > self.max_connections:
            refusal = f"the server holds its limit of {self.max_connections} connections; retry later"
        elif self._client is not None and self.clients[self._client] > self.max_connections_per_client:
            refusal = (f"this client address holds the server's limit of {self.max_connections_per_client} "
                       "connections per client; close idle connections or retry later")
        if refusal is not None:
            transport.write(_raw_response(503, "Service Unavailable", refusal))
            transport.close()
            return
        self._start_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_deadline()
        if self._client is not None:
            self.clients[self._client] -= 1
            if self.clients[self._client] <= 0:
                del self.clients[self._client]
            self._client = None
        super().connection_lost(exc)  # type: ignore[misc]

    def _start_deadline(self) -> None:
        """A request may begin: its headers must be in within ``header_timeout``."""
        self._stop_deadline()
        self._request_began = self.loop.time()
        self._headers_in = False
        self._read_deadline = self.loop.call_later(min(self.header_timeout, self.read_timeout),
                                                   self._deadline_passed)

    def _headers_done(self) -> None:
        """The request's headers are in: what is left of ``read_timeout`` bounds its body."""
        if self._read_deadline is None or self._headers_in:
            return
        self._headers_in = True
        self._read_deadline.cancel()
        left = self.read_timeout - (self.loop.time() - self._request_began)
        self._read_deadline = self.loop.call_later(max(left, 0.0), self._deadline_passed)

    def _stop_deadline(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _deadline_passed(self) -> None:
        self._read_deadline = None
        if self.transport.is_closing() or not self._reading():
            return
        if self._may_answer_408():
            # Nothing reached the application yet, so the 408 can't interleave with its response.
            message = (f"the request was not sent whole within {self.read_timeout:g} s" if self._headers_in else
                       f"the request's headers were not sent within {min(self.header_timeout, self.read_timeout):g} s")
            self.transport.write(_raw_response(408, "Request Timeout", message))
        self.transport.close()


class BoundedH11Protocol(_ReadGuard, H11Protocol):
    """uvicorn's h11 protocol with a per-request read deadline and a connection cap (class attributes;
    make a configured subclass with :func:`bounded_h11_protocol`)."""

    def _reading(self) -> bool:
        return self.conn.their_state in _READING

    def _may_answer_408(self) -> bool:
        return self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE

    def data_received(self, data: bytes) -> None:
        if self._read_deadline is None and self._reading():
            self._start_deadline()  # the next request of a kept-alive connection begins
        super().data_received(data)
        if not self._reading():
            self._stop_deadline()
        elif self.conn.their_state is h11.SEND_BODY:
            self._headers_done()


def httptools_available() -> bool:
    """Whether the httptools parser (and so :class:`BoundedHttpToolsProtocol`) can be used."""
    return importlib.util.find_spec("httptools") is not None


def _httptools_protocol() -> type[Any]:
    """:class:`BoundedHttpToolsProtocol`, defined on first use: uvicorn's httptools module imports
    httptools, which is optional."""
    global BoundedHttpToolsProtocol
    if BoundedHttpToolsProtocol is not None:
        return BoundedHttpToolsProtocol
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class _Bounded(_ReadGuard, HttpToolsProtocol):  # type: ignore[misc]
        """uvicorn's httptools protocol with the same read deadline, connection cap and header-size
        limit as :class:`BoundedH11Protocol` (h11 refuses a request whose head passes
        ``MAX_HEAD_BYTES``; httptools has no limit of its own, so this one answers 431 and closes). A
        request is being read from its first byte until the parser completes it; a new connection
        counts as one that may begin a request."""

        _head_bytes = 0
        _refused = False
        _in_request = True  # a fresh connection: nothing read yet, but its deadline runs
        _headers_seen = False
        #: Stamp each request's first bytes for the latency trace (INFERCORE_TRACE_LATENCY=1).
        trace_latency = False

        def _reading(self) -> bool:
            return self._in_request

        def _may_answer_408(self) -> bool:
            return not self._headers_seen and (self.cycle is None or self.cycle.response_complete)

        def data_received(self, data: bytes) -> None:
            if self._read_deadline is None and not self._in_request:
                self._in_request = True  # the next request of a kept-alive connection begins
                self._headers_seen = False
                self._start_deadline()
            super().data_received(data)
            if not self._in_request:
                self._stop_deadline()

        def on_message_begin(self) -> None:
            self._in_request = True
            self._headers_seen = False
            self._head_bytes = 0
            super().on_message_begin()
            if self.trace_latency:
                self.scope[SCOPE_KEY] = {"http_begin": now_ns()}  # type: ignore[typeddict-unknown-key]

        def on_url(self, url: bytes) -> None:
            self._count_head(len(url))
            if not self._refused:
                super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._count_head(len(name) + len(value) + 4)
            if not self._refused:
                super().on_header(name, value)

        def _count_head(self, size: int) -> None:
            self._head_bytes += size
            if self._head_bytes > MAX_HEAD_BYTES and not self._refused:
                self._refused = True
                self._stop_deadline()
                self.transport.write(_raw_response(431, "Request Header Fields Too Large",
                                                   f"the request's headers are over {MAX_HEAD_BYTES} bytes; "
                                                   "send fewer or shorter headers"))
                self.transport.close()

        def on_headers_complete(self) -> None:
            if self._refused:
                return
            self._headers_seen = True
            self._headers_done()
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            if not self._refused:
                super().on_body(body)

        def on_message_complete(self) -> None:
            self._in_request = False
            if not self._refused:
                super().on_message_complete()

    _Bounded.__name__ = _Bounded.__qualname__ = "BoundedHttpToolsProtocol"
    BoundedHttpToolsProtocol = _Bounded
    return _Bounded


#: uvicorn's httptools protocol with the guard (built by :func:`bounded_http_protocol` on first use).
BoundedHttpToolsProtocol: type[Any] | None = None


def bounded_http_protocol(read_timeout: float, max_connections: int, parser: str = "auto", *,
                          header_timeout: float = 5.0, max_connections_per_client: int = 1024) -> type[Any]:
    """The guarded protocol class for ``parser`` ("httptools", "h11", or "auto": httptools where
    installed) with these limits, to pass to ``uvicorn.Config(http=...)``."""
    use_httptools = parser == "httptools" or (parser == "auto" and httptools_available())
    if parser == "httptools" and not httptools_available():
        raise ValueError("--http-parser httptools needs the httptools package; pip install httptools "
                         "or use --http-parser h11")
    if not use_httptools:
        return bounded_h11_protocol(read_timeout, max_connections, header_timeout=header_timeout,
                                    max_connections_per_client=max_connections_per_client)
    return type("ConfiguredHttpToolsProtocol", (_httptools_protocol(),),
                {**_limits(read_timeout, max_connections, header_timeout, max_connections_per_client),
                 "trace_latency": trace_enabled()})


def _limits(read_timeout: float, max_connections: int, header_timeout: float,
            max_connections_per_client: int) -> dict[str, Any]:
    """The class attributes of a configured guard, with a per-client count of its own."""
    return {"read_timeout": read_timeout, "header_timeout": header_timeout,
            "max_connections": connection_cap(max_connections),
            "max_connections_per_client": max_connections_per_client, "clients": Counter()}


def connection_cap(max_connections: int) -> int:
    """``max_connections``, lowered to what the process's descriptor limit leaves for clients."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return max_connections
    return max(1, min(max_connections, soft - RESERVED_FDS))


def bounded_h11_protocol(read_timeout: float, max_connections: int, *, header_timeout: float = 5.0,
                         max_connections_per_client: int = 1024) -> type[BoundedH11Protocol]:
    """A :class:`BoundedH11Protocol` with these limits (the connection cap as :func:`connection_cap`
    allows), to pass to ``uvicorn.Config(http=...)``."""
    return type("ConfiguredH11Protocol", (BoundedH11Protocol,),
                _limits(read_timeout, max_connections, header_timeout, max_connections_per_client))
