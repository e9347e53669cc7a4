"""The lean HTTP/1.1 client of ``infercore bench serve``: one write per request, server-sent events read
straight off kept-alive connections and timed as their bytes arrive.

A general-purpose client (httpx) spends about a millisecond of Python per streamed request in its
layers (request building, connection pool, chunk decoding, line splitting), and at concurrency 1 the
benchmark charges that to the server. This one writes the request head and body in one ``write``,
decodes a chunked (or length-framed) body in a few lines and only splits events; the JSON of the events
is parsed after the response ends, off the timed path. It speaks plain ``http://`` only.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

#: An event's arrival (``time.perf_counter_ns()``) and its ``data`` field.
Event = tuple[int, bytes]


@dataclass
class StreamedResponse:
    """A response's status, its events (for a 200) or its body (otherwise)."""

    status: int
    events: list[Event] = field(default_factory=list)
    body: bytes = b""


class EventSplitter:
    """Splits a server-sent-event stream, fed in arbitrary pieces, into the ``data`` of its events."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._buffer = b""

    def feed(self, data: bytes, arrival: int) -> None:
        """Add ``data`` that arrived at ``arrival``; every event it completes is timed at ``arrival``."""
        buffer = self._buffer + data
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        *complete, self._buffer = buffer.split(b"\n\n")
        for event in complete:
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    value = line[5:]
                    self.events.append((arrival, value[1:] if value.startswith(b" ") else value))


class LeanClient:
    """POSTs JSON to one ``http://host:port`` server and collects the server-sent events of each response.

    Connections are kept alive and reused (one per request in flight); ``close`` closes them.
    """

    def __init__(self, base_url: str) -> None:
        url = urlsplit(base_url)
        if url.scheme != "http" or not url.hostname:
            raise ValueError(f"the lean client speaks plain http:// only, not {base_url!r}")
        self.host, self.port = url.hostname, url.port or 80
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 address
        self._authority = f"{host}:{self.port}".encode()
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def post_events(self, path: str, body: bytes, headers: dict[str, str]) -> StreamedResponse:
        """POST ``body`` (JSON) to ``path`` and read the whole response; a kept-alive connection the
        server closed meanwhile is replaced once."""
        for attempt in (0, 1):
            reused = bool(self._idle)
            reader, writer = await self._connection()
            try:
                writer.write(self._head(path, len(body), headers) + body)
                status_line = await reader.readline()
                if not status_line and reused and attempt == 0:
                    writer.close()
                    continue
                response, keep_alive = await self._read_response(status_line, reader)
            except BaseException:
                writer.close()
                raise
            if keep_alive:
                self._idle.append((reader, writer))
            else:
                writer.close()
            return response
        raise ConnectionError("the server closed the connection before answering")

    async def close(self) -> None:
        """Close the idle connections."""
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        while self._idle:
            reader, writer = self._idle.pop()
            if not writer.is_closing() and not reader.at_eof():
                return reader, writer
            writer.close()
        return await asyncio.open_connection(self.host, self.port)

    def _head(self, path: str, length: int, headers: dict[str, str]) -> bytes:
        lines = [f"POST {path} HTTP/1.1".encode(), b"Host: " + self._authority, b"Accept: text/event-stream",
                 b"Content-Type: application/json", f"Content-Length: {length}".encode()]
        lines += [f"{name}: {value}".encode() for name, value in headers.items()]
        return b"\r\n".join(lines) + b"\r\n\r\n"

    @staticmethod
    async def _read_response(status_line: bytes, reader: asyncio.StreamReader) -> tuple[StreamedResponse, bool]:
        parts = status_line.split()
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
            raise ConnectionError(f"not an HTTP response: {status_line[:100]!r}")
        status = int(parts[1])
        fields: dict[bytes, bytes] = {}
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.partition(b":")
            fields[name.strip().lower()] = value.strip().lower() if name.strip().lower() != b"content-length" \
                else value.strip()
        keep_alive = fields.get(b"connection") != b"close"
        splitter, body = EventSplitter(), bytearray()

        def take(data: bytes) -> None:
            if status == 200:
                splitter.feed(data, time.perf_counter_ns())
            else:
                body.extend(data)

        if b"chunked" in fields.get(b"transfer-encoding", b""):
            while size := int((await reader.readline()).split(b";")[0], 16):
                take(await reader.readexactly(size))
                await reader.readexactly(2)
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass  # trailers
        elif b"content-length" in fields:
            take(await reader.readexactly(int(fields[b"content-length"])))
        else:
            take(await reader.read())
            keep_alive = False
        return StreamedResponse(status, splitter.events, bytes(body)), keep_alive
