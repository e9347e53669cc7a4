"""Idle connections lock nobody else out: 5,000 connections that never send a byte, all from one client
address, leave /health answering another client at once (a per-client cap), and a connection that sends no
headers is closed after the short header timeout, not the whole request's read timeout."""

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

#: The half-open connections of one client, as in the attack (past the default --max-connections of 4096).
NUM_IDLE = 5000
IDLE_ADDRESS = "127.0.0.2"
HEALTH_WITHIN_S = 2.0
HEADER_TIMEOUT_S = 1.0
SLACK_S = 2.0
_SOFT, _HARD = resource.getrlimit(resource.RLIMIT_NOFILE)
#: Descriptors the server is given: enough for both ends of every idle connection, within the hard limit.
WANTED = 3 * NUM_IDLE if _HARD == resource.RLIM_INFINITY else min(_HARD, 3 * NUM_IDLE)

pytestmark = [
    pytest.mark.serial,  # a time bound: runs after the parallel pass, alone
    pytest.mark.skipif(WANTED < 2 * NUM_IDLE + 256,
                       reason=f"the descriptor limit ({_HARD}) is too low for {NUM_IDLE} connections on each side"),
]


@pytest.fixture(scope="module")
def default_limits_server(attack_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server with the default connection limits, allowed enough descriptors to hold 5,000 sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, WANTED), hard))
    server = ServerProcess(attack_model, tmp_path_factory.mktemp("idle-logs"),
                           ["--cpu-threads", "1", "--request-header-timeout", str(HEADER_TIMEOUT_S)])
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@contextlib.contextmanager
def _idle_connections(url: str, count: int, source: str) -> Iterator[list[socket.socket]]:
    """``count`` connections from ``source`` that send nothing (connects in flight at once)."""
    parts = urlparse(url)
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket()
            socks.append(sock)
            sock.bind((source, 0))
            sock.setblocking(False)
            sock.connect_ex((parts.hostname, parts.port))
        yield socks
    finally:
        for sock in socks:
            sock.close()


def test_one_clients_idle_connections_leave_health_to_others(default_limits_server) -> None:
    url = default_limits_server.url
    with _idle_connections(url, NUM_IDLE, IDLE_ADDRESS):
        time.sleep(1.0)  # the server accepts them
        start = time.monotonic()
        response = httpx.get(url + "/health", timeout=HEALTH_WITHIN_S)
        elapsed = time.monotonic() - start
        assert response.status_code == 200 and elapsed < HEALTH_WITHIN_S
        completion = httpx.post(url + "/v1/completions", json={"model": "tiny", "prompt": "a", "max_tokens": 2},
                                timeout=30)
        assert completion.status_code == 200, completion.text


def test_connections_past_the_per_client_cap_get_503(default_limits_server) -> None:
    parts = urlparse(default_limits_server.url)
    with _idle_connections(default_limits_server.url, 1024, IDLE_ADDRESS):
        time.sleep(0.5)
        with socket.create_connection((parts.hostname, parts.port), timeout=10,
                                      source_address=(IDLE_ADDRESS, 0)) as extra:
            received = extra.recv(4096)
    assert received.startswith(b"HTTP/1.1 503 ") and b"per client" in received


def test_silent_connection_closed_after_the_header_timeout(default_limits_server) -> None:
    parts = urlparse(default_limits_server.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        start = time.monotonic()
        while sock.recv(4096):
            pass
        elapsed = time.monotonic() - start
    assert elapsed < HEADER_TIMEOUT_S + SLACK_S


def test_body_may_take_longer_than_the_header_timeout(default_limits_server) -> None:
    parts = urlparse(default_limits_server.url)
    body = b'{"model": "tiny", "prompt": "a", "max_tokens": 1}'
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body[:10])
        time.sleep(HEADER_TIMEOUT_S + 1.0)
        sock.sendall(body[10:])
        assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
