"""Clients that send half a request and stop are cut off after ``--request-read-timeout``, and
connections past ``--max-connections`` are refused (raw sockets, as a slowloris attack sends)."""

from __future__ import annotations

import contextlib
import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
from server.conftest import ServerProcess
from server_attack.conftest import ATTACK_FLAGS, MAX_CONNECTIONS, READ_TIMEOUT_S

from infercore.entrypoints.openai.http_protocol import (
    RESERVED_FDS,
    bounded_h11_protocol,
    bounded_http_protocol,
    httptools_available,
)

pytestmark = pytest.mark.serial  # a time bound: runs after the parallel pass, alone

#: Slack on top of the read timeout for the server to notice and close.
SLACK_S = 2.0


@pytest.fixture(scope="module", params=["httptools", "h11"])
def guarded_server(request: pytest.FixtureRequest, attack_server: ServerProcess, attack_model: Path,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The attack server (httptools, the default parser) and one like it on the h11 parser."""
    if request.param == "httptools":
        yield attack_server
        return
    server = ServerProcess(attack_model, tmp_path_factory.mktemp("attack-h11-logs"),
                           [*ATTACK_FLAGS, "--http-parser", "h11"])
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def _connect(url: str) -> socket.socket:
    parts = urlparse(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=READ_TIMEOUT_S + SLACK_S + 5)
    return sock


def _closed_after(sock: socket.socket) -> tuple[float, bytes]:
    """Seconds until the server closed the connection, and what it sent before closing."""
    start = time.monotonic()
    received = b""
    while chunk := sock.recv(4096):
        received += chunk
    return time.monotonic() - start, received


def test_half_sent_headers_are_closed_with_408(guarded_server) -> None:
    with _connect(guarded_server.url) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
        elapsed, received = _closed_after(sock)
    assert elapsed < READ_TIMEOUT_S + SLACK_S
    assert received.startswith(b"HTTP/1.1 408 ")


def test_silent_connection_is_closed(guarded_server) -> None:
    with _connect(guarded_server.url) as sock:
        elapsed, _ = _closed_after(sock)
    assert elapsed < READ_TIMEOUT_S + SLACK_S


def test_half_sent_body_is_closed(guarded_server) -> None:
    with _connect(guarded_server.url) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"model\": ")
        elapsed, _ = _closed_after(sock)
    assert elapsed < READ_TIMEOUT_S + SLACK_S
    assert httpx.get(guarded_server.url + "/health", timeout=10).status_code == 200


def test_kept_alive_connection_gets_a_new_deadline_per_request(guarded_server) -> None:
    with _connect(guarded_server.url) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        elapsed, received = _closed_after(sock)
    assert elapsed < READ_TIMEOUT_S + SLACK_S and b"HTTP/1.1 408 " in received


@contextlib.contextmanager
def _open_connections(url: str, count: int) -> Iterator[list[socket.socket]]:
    socks = []
    try:
        for _ in range(count):
            socks.append(_connect(url))
        yield socks
    finally:
        for sock in socks:
            sock.close()


def test_connections_past_the_limit_get_503(guarded_server) -> None:
    with _open_connections(guarded_server.url, MAX_CONNECTIONS) as held, _connect(guarded_server.url) as extra:
        elapsed, received = _closed_after(extra)
        assert len(held) == MAX_CONNECTIONS
    assert elapsed < READ_TIMEOUT_S and received.startswith(b"HTTP/1.1 503 ")
    time.sleep(0.5)
    assert httpx.get(guarded_server.url + "/health", timeout=10).status_code == 200


def test_connection_cap_leaves_room_under_the_descriptor_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    try:
        assert bounded_h11_protocol(5.0, 4096).max_connections == 1024 - RESERVED_FDS
        assert bounded_h11_protocol(5.0, 100).max_connections == 100
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_httptools_is_the_default_parser_where_installed() -> None:
    assert httptools_available()
    assert bounded_http_protocol(5.0, 100).__mro__[1].__name__ == "BoundedHttpToolsProtocol"
    assert bounded_http_protocol(5.0, 100, "h11").__mro__[1].__name__ == "BoundedH11Protocol"
