"""Shared pieces of the tests that start ``infercore serve`` with worker processes and kill one of them:
the server on a free port, a streaming request read to its end, the server's processes, and the checks
RELIABILITY.md asks of a kill (the request errors within 10 s, /health answers 503, everything exits)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil

#: A generation long enough to still be running when a process is killed.
LONG = {"model": "tiny", "prompt": "a", "max_tokens": 1000, "ignore_eos": True, "temperature": 0, "stream": True}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: Path, log: Path, *flags: str) -> tuple[subprocess.Popen, str]:
    """``infercore serve MODEL FLAGS`` on a free port, once /health answers 200; (process, base URL)."""
    port = free_port()
    cmd = [sys.executable, "-m", "infercore.entrypoints.cli", "serve", str(model), "--port", str(port), *flags]
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"server did not start:\n{log.read_text()}")


class Stream(threading.Thread):
    """A streaming completion read to its end; records when its first chunk came and when it ended."""

    def __init__(self, url: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.body = body or LONG
        self.first_chunk = threading.Event()
        self.text = ""
        self.ended_at = 0.0

    def run(self) -> None:
        try:
            with httpx.stream("POST", self.url + "/v1/completions", json=self.body, timeout=60) as response:
                for line in response.iter_lines():
                    self.text += line
                    self.first_chunk.set()
        except httpx.HTTPError as exc:
            self.text += f"transport error {exc}"
        finally:
            self.ended_at = time.monotonic()
            self.first_chunk.set()


def worker_pids(server: psutil.Process, backend: str) -> list[int]:
    """The server's worker processes in launch order, so by rank (with Ray the engine started the local
    cluster, so they are its descendants too)."""
    marker = "infercore.executor.worker_proc" if backend == "mp" else "RayWorkerActor"
    found = []
    for child in server.children(recursive=True):
        try:
            if marker in " ".join(child.cmdline()) or marker in child.name():
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return [p.pid for p in sorted(found, key=lambda p: p.create_time())]


def engine_pid(server: psutil.Process) -> int:
    """The engine-core process the API server spawned."""
    return next(p.pid for p in server.children() if "multiprocessing" in " ".join(p.cmdline())
                and "resource_tracker" not in " ".join(p.cmdline()))


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill_mid_stream_and_check(proc: subprocess.Popen, url: str, log: Path, backend: str,
                              victim: Callable[[psutil.Process, list[int]], int]) -> None:
    """Start a long stream, SIGKILL the pid ``victim(server, workers)`` picks, then check that the stream
    ends with an error within 10 s, /health answers 503, and every process of the server is gone within
    30 s. The server runs two workers."""
    try:
        server = psutil.Process(proc.pid)
        workers = worker_pids(server, backend)
        assert len(workers) == 2, (workers, log.read_text())
        everything = {p.pid for p in server.children(recursive=True)} | {proc.pid} | set(workers)
        stream = Stream(url)
        stream.start()
        assert stream.first_chunk.wait(30) and "data: {" in stream.text
        os.kill(victim(server, workers), signal.SIGKILL)
        killed_at = time.monotonic()
        statuses: list[int] = []
        while time.monotonic() < killed_at + 10 and 503 not in statuses:
            try:
                statuses.append(httpx.get(url + "/health", timeout=1).status_code)
            except httpx.HTTPError:
                statuses.append(0)
            time.sleep(0.05)
        assert 503 in statuses, statuses
        stream.join(10)
        assert not stream.is_alive() and stream.ended_at - killed_at < 10
        assert "error" in stream.text and not stream.text.endswith('"finish_reason":"length"}]}data: [DONE]')
        deadline = killed_at + 30
        while time.monotonic() < deadline and any(running(p) for p in everything):
            time.sleep(0.2)
        left = [p for p in everything if running(p)]
        assert not left, f"still running 30 s after the kill: {left}\n{log.read_text()}"
        assert proc.wait(5) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
