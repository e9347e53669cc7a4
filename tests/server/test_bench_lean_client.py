"""bench serve's lean HTTP client: the events it collects are httpx's, whatever the framing and however
the bytes are split, over kept-alive connections (a closed one is replaced), and errors keep their body."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from infercore.benchmarks.serve import _httpx_events
from infercore.benchmarks.serve_client import EventSplitter, LeanClient

EVENTS = [b'{"a": 1}', b'{"b": "x\\ny"}', b"[DONE]"]
STREAM = b"".join(b"data: " + e + b"\n\n" for e in EVENTS)


def test_splitter_finds_events_across_any_split() -> None:
    for cut in range(1, len(STREAM)):
        splitter = EventSplitter()
        splitter.feed(STREAM[:cut], 1)
        splitter.feed(STREAM[cut:], 2)
        assert [data for _, data in splitter.events] == EVENTS
    crlf = EventSplitter()
    crlf.feed(b"data:{\"a\": 1}\r\n\r\n: comment\r\n\r\nevent: x\r\ndata: 2\r\n\r\n", 5)
    assert crlf.events == [(5, b'{"a": 1}'), (5, b"2")]


def _chunked(pieces: list[bytes]) -> bytes:
    return b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces) + b"0\r\n\r\n"


class FakeServer:
    """Answers each request on a connection with the next scripted response; counts connections."""

    def __init__(self, responses: list[bytes], close_after: int | None = None) -> None:
        self.responses = list(responses)
        self.close_after = close_after
        self.connections = 0
        self.bodies: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        while self.responses:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            self.bodies.append(await reader.readexactly(length))
            writer.write(self.responses.pop(0))
            await writer.drain()
            served += 1
            if self.close_after is not None and served >= self.close_after:
                break
        writer.close()


async def _serve(fake: FakeServer, requests: int) -> tuple[list, str]:
    server = await asyncio.start_server(fake.handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    client = LeanClient(url)
    try:
        return [await client.post_events("/v1/completions", b'{"n": %d}' % i, {}) for i in range(requests)], url
    finally:
        await client.close()
        server.close()


def test_chunked_events_over_one_kept_alive_connection() -> None:
    ok = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + _chunked([STREAM[:7], STREAM[7:30], STREAM[30:]])
    fake = FakeServer([ok, ok])
    responses, _ = asyncio.run(_serve(fake, 2))
    assert [[data for _, data in r.events] for r in responses] == [EVENTS, EVENTS]
    assert fake.connections == 1 and fake.bodies == [b'{"n": 0}', b'{"n": 1}']
    arrivals = [t for _, r in enumerate(responses) for t, _ in r.events]
    assert arrivals == sorted(arrivals)


def test_closed_connection_is_replaced_and_errors_keep_their_body() -> None:
    error = b'{"error": {"message": "bad prompt"}}'
    sized = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(STREAM) + STREAM
    refused = b"HTTP/1.1 400 Bad Request\r\ncontent-length: %d\r\n\r\n" % len(error) + error
    fake = FakeServer([sized, refused], close_after=1)
    responses, _ = asyncio.run(_serve(fake, 2))
    assert [data for _, data in responses[0].events] == EVENTS
    assert responses[1].status == 400 and responses[1].body == error and responses[1].events == []
    assert fake.connections == 2


def test_lean_client_reads_what_httpx_reads(server) -> None:
    body = {"model": "tiny", "prompt": [5, 6, 7], "max_tokens": 6, "temperature": 0.0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}

    async def both() -> tuple[list[bytes], list[bytes]]:
        client = LeanClient(server.url)
        lean = await client.post_events("/v1/completions", json.dumps(body).encode(), {})
        await client.close()
        async with httpx.AsyncClient() as http:
            reference = await _httpx_events(http, server.url + "/v1/completions", body, {})
        return [d for _, d in lean.events], [d for _, d in reference.events]

    lean, reference = asyncio.run(both())

    def text(events: list[bytes]) -> str:  # chunk boundaries follow timing; their concatenation does not
        return "".join(c["text"] for e in events if e != b"[DONE]" for c in json.loads(e)["choices"])

    assert text(lean) == text(reference) and lean[-1] == reference[-1] == b"[DONE]"
    assert json.loads(lean[-2])["usage"]["completion_tokens"] == 6


def test_lean_client_refuses_https() -> None:
    with pytest.raises(ValueError, match="plain http"):
        LeanClient("https://example.com")
