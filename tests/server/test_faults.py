"""Faults: disconnects free KV blocks, a full queue answers 503, engine or API death and SIGTERM end cleanly."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import threading
import time

import httpx
import pytest

LONG = {"model": "tiny", "prompt": "hello", "max_tokens": 200, "ignore_eos": True, "temperature": 0}


def _wait_until(predicate, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _kv(server) -> dict:
    return httpx.get(server.url + "/debug/kv_cache").json()


def _idle(server) -> bool:
    kv = _kv(server)
    return kv["num_free_blocks"] == kv["num_total_blocks"] and kv["num_running"] == kv["num_waiting"] == 0


def _stream_some(server, body: dict, chunks: int = 2) -> None:
    with httpx.stream("POST", server.url + "/v1/completions", json={**body, "stream": True}) as response:
        seen = 0
        for line in response.iter_lines():
            seen += line.startswith("data: {")
            if seen >= chunks:
                break  # leaving the block closes the connection mid-stream


def test_disconnects_free_kv_blocks(server) -> None:
    assert _wait_until(lambda: _idle(server))
    total = _kv(server)["num_total_blocks"]
    for _ in range(20):
        _stream_some(server, LONG)
    with pytest.raises(httpx.TimeoutException):  # a non-streaming client that gives up
        httpx.post(server.url + "/v1/completions", json={**LONG, "n": 16, "max_tokens": 250}, timeout=0.2)
    assert _wait_until(lambda: _idle(server)), _kv(server)
    assert _kv(server)["num_free_blocks"] == total
    metrics = httpx.get(server.url + "/metrics").text
    assert 'infercore:kv_cache_usage_perc{model_name="tiny"} 0.0' in metrics
    aborted = re.search(r'request_success_total\{finished_reason="abort",model_name="tiny"\} (\S+)', metrics)
    assert aborted and float(aborted.group(1)) >= 21


class HeldStream(threading.Thread):
    """A streaming request that reads until its first chunk, then holds the connection until released."""

    def __init__(self, server, body: dict) -> None:
        super().__init__(daemon=True)
        self.server, self.body = server, body
        self.first_chunk = threading.Event()
        self.release = threading.Event()
        self.status: int | None = None
        self.text = ""
        self.read_all = False

    def run(self) -> None:
        try:
            with httpx.stream("POST", self.server.url + "/v1/completions", json={**self.body, "stream": True},
                              timeout=60) as response:
                self.status = response.status_code
                for line in response.iter_lines():
                    self.text += line
                    self.first_chunk.set()
                    if self.release.is_set() and not self.read_all:
                        return
        except httpx.HTTPError as exc:
            self.text += f"transport error {exc}"
        finally:
            self.first_chunk.set()


SLOW = ["--max-model-len", "2048", "--num-gpu-blocks-override", "300"]
VERY_LONG = {**LONG, "max_tokens": 1900, "prompt": "a"}


def test_queue_full_gets_503_with_retry_after(start_server) -> None:
    server = start_server(*SLOW, "--max-num-seqs", "1", "--max-num-queued-requests", "1")
    running = HeldStream(server, VERY_LONG)
    running.start()
    assert running.first_chunk.wait(20) and running.status == 200
    # One running and room for one waiting: n=2 would need two waiting slots.
    response = httpx.post(server.url + "/v1/completions", json={**VERY_LONG, "n": 2})
    assert response.status_code == 503 and response.headers["retry-after"]
    assert response.json()["error"]["code"] == 503
    queued = HeldStream(server, VERY_LONG)
    queued.start()
    assert _wait_until(lambda: _kv(server)["num_waiting"] == 1)
    response = httpx.post(server.url + "/v1/completions", json=VERY_LONG)
    assert response.status_code == 503 and "Retry-After" in response.headers
    running.release.set()
    queued.release.set()
    assert queued.first_chunk.wait(30) and queued.status == 200
    assert _wait_until(lambda: _idle(server))


def test_a_client_that_leaves_while_queued_is_aborted_at_once(start_server) -> None:
    """A request still waiting for a slot (no response begun) whose client goes away leaves the queue at once,
    counted as aborted, while the running request goes on; nothing is left behind when both are gone."""
    server = start_server(*SLOW, "--max-num-seqs", "1")
    running = HeldStream(server, VERY_LONG)
    running.start()
    assert running.first_chunk.wait(20) and running.status == 200
    # The queued client sends its request on a socket of its own and closes it the moment the request waits:
    # no client-side timeout to race the running request's end.
    body = json.dumps(VERY_LONG).encode()
    queued = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    queued.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    assert _wait_until(lambda: _kv(server)["num_waiting"] == 1)
    queued.close()
    assert _wait_until(lambda: _kv(server)["num_waiting"] == 0, timeout=5.0), _kv(server)
    # The slot is still held (one sequence at most), so the waiting request left the queue, not through a run.
    assert "[DONE]" not in running.text and _kv(server)["num_running"] == 1  # the other request is untouched
    metrics = httpx.get(server.url + "/metrics").text
    aborted = re.search(r'request_success_total\{finished_reason="abort",model_name="tiny"\} (\S+)', metrics)
    assert aborted and float(aborted.group(1)) >= 1
    running.release.set()
    assert _wait_until(lambda: _idle(server))


def test_engine_killed_health_503_inflight_errors_server_exits(start_server) -> None:
    server = start_server(*SLOW)
    stream = HeldStream(server, VERY_LONG)
    stream.read_all = True
    stream.start()
    assert stream.first_chunk.wait(20)
    os.kill(server.engine_pid(), signal.SIGKILL)
    statuses = []

    def health_503() -> bool:
        try:
            statuses.append(httpx.get(server.url + "/health", timeout=1).status_code)
        except httpx.HTTPError:
            statuses.append(0)
        return 503 in statuses or statuses[-1] == 0

    assert _wait_until(health_503, 5)
    assert 503 in statuses
    stream.join(20)
    assert not stream.is_alive() and "error" in stream.text
    assert server.proc.wait(20) != 0


def test_api_process_killed_engine_exits(start_server) -> None:
    server = start_server()
    engine = server.engine_pid()
    server.proc.kill()
    server.proc.wait()

    def gone() -> bool:
        try:
            os.kill(engine, 0)
        except ProcessLookupError:
            return True
        return open(f"/proc/{engine}/stat").read().split()[2] == "Z"

    assert _wait_until(gone, 10)


def test_sigterm_drains_then_exits_zero(start_server) -> None:
    # A drain limit no loaded machine reaches: the request must finish, however slowly it decodes.
    server = start_server(*SLOW, "--shutdown-timeout", "150")
    # Long enough (seconds at this model's speed) to still be running when the next request arrives.
    stream = HeldStream(server, {**VERY_LONG, "max_tokens": 1000})
    stream.read_all = True
    stream.start()
    assert stream.first_chunk.wait(20)
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    refused = httpx.post(server.url + "/v1/completions", json={**LONG, "max_tokens": 2})
    assert refused.status_code == 503
    assert stream.is_alive(), "the stream ended before the refused request: the test no longer drains anything"
    stream.join(160)
    assert stream.text.endswith("data: [DONE]") and '"finish_reason":"length"' in stream.text.replace(" ", "")
    assert server.proc.wait(30) == 0


def test_sigterm_aborts_what_outlives_the_shutdown_timeout(start_server) -> None:
    server = start_server(*SLOW, "--shutdown-timeout", "0.5")
    stream = HeldStream(server, VERY_LONG)
    stream.read_all = True
    stream.start()
    assert stream.first_chunk.wait(20)
    server.proc.send_signal(signal.SIGTERM)
    stream.join(20)
    assert "shut down before the request finished" in stream.text and stream.text.endswith("data: [DONE]")
    assert server.proc.wait(20) == 0
