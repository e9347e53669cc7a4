"""``--max-num-queued-requests`` bounds the engine's one queue, whichever API server a request reaches."""

from __future__ import annotations

import threading
import time

import httpx

LONG = {"model": "tiny", "prompt": "a", "max_tokens": 1900, "ignore_eos": True, "temperature": 0, "stream": True}


class _Held(threading.Thread):
    """A streaming request that holds its connection once the first chunk came, until released."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.first_chunk = threading.Event()
        self.release = threading.Event()

    def run(self) -> None:
        try:
            with httpx.stream("POST", self.url + "/v1/completions", json=LONG, timeout=60) as response:
                for _ in response.iter_lines():
                    self.first_chunk.set()
                    if self.release.is_set():
                        return
        except httpx.HTTPError:
            pass
        finally:
            self.first_chunk.set()


def _num_waiting(url: str) -> int:
    return httpx.get(url + "/debug/kv_cache").json()["num_waiting"]


def test_the_queue_limit_is_the_engines_not_each_servers(start) -> None:
    server = start("--api-server-count", "2", "--max-num-seqs", "1", "--max-num-queued-requests", "1",
                   "--max-model-len", "2048", "--num-gpu-blocks-override", "300")
    running, queued = _Held(server.url), _Held(server.url)
    running.start()
    assert running.first_chunk.wait(30)
    queued.start()
    deadline = time.monotonic() + 15
    while _num_waiting(server.url) != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _num_waiting(server.url) == 1
    # One running and one waiting: the queue is full. Each request opens a connection of its own, so
    # they reach both API servers, including the one that has sent the engine nothing yet.
    statuses = []
    for _ in range(8):
        with httpx.Client() as client:
            statuses.append(client.post(server.url + "/v1/completions", json={**LONG, "stream": False},
                                        timeout=30).status_code)
    running.release.set()
    queued.release.set()
    assert statuses == [503] * 8, statuses
