"""A pipeline stage killed mid-generation under ``infercore serve``: the request errors within 10 s,
/health answers 503, and every process of the server is gone within 30 s."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import psutil
import pytest
from pp_cases import start_server

FLAGS = ["--max-model-len", "1024", "--num-gpu-blocks-override", "80", "--max-num-seqs", "4", "--cpu-threads", "1",
         "--served-model-name", "tiny", "--pipeline-parallel-size", "2"]
LONG = {"model": "tiny", "prompt": "a", "max_tokens": 1000, "ignore_eos": True, "temperature": 0, "stream": True}


class Stream(threading.Thread):
    """A streaming completion read to its end; records when its first chunk came and when it ended."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.first_chunk = threading.Event()
        self.text = ""
        self.ended_at = 0.0

    def run(self) -> None:
        try:
            with httpx.stream("POST", self.url + "/v1/completions", json=LONG, timeout=60) as response:
                for line in response.iter_lines():
                    self.text += line
                    self.first_chunk.set()
        except httpx.HTTPError as exc:
            self.text += f"transport error {exc}"
        finally:
            self.ended_at = time.monotonic()
            self.first_chunk.set()


def stage_pids(server: psutil.Process, backend: str) -> list[int]:
    """The server's worker processes by rank (stage), read from their launch order (mp) or pid order."""
    marker = "infercore.executor.worker_proc" if backend == "mp" else "RayWorkerActor"
    found = []
    for child in server.children(recursive=True):
        try:
            if marker in " ".join(child.cmdline()) or marker in child.name():
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return [p.pid for p in sorted(found, key=lambda p: p.create_time())]


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize(("backend", "stage"), [
    ("mp", 0), pytest.param("mp", 1, marks=pytest.mark.heavy), pytest.param("ray", 1, marks=pytest.mark.heavy)])
def test_killed_stage_fails_request_health_503_and_everything_exits(tiny_model_factory, tmp_path, backend: str,
                                                                    stage: int) -> None:
    model = tiny_model_factory("Qwen3ForCausalLM")
    proc, url = start_server(model, tmp_path / "server.log", *FLAGS, "--distributed-executor-backend", backend)
    try:
        server = psutil.Process(proc.pid)
        workers = stage_pids(server, backend)
        assert len(workers) == 2, (workers, (tmp_path / "server.log").read_text())
        everything = {p.pid for p in server.children(recursive=True)} | {proc.pid} | set(workers)
        stream = Stream(url)
        stream.start()
        assert stream.first_chunk.wait(30) and "data: {" in stream.text
        os.kill(workers[stage], signal.SIGKILL)
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
        assert not left, f"still running 30 s after the kill: {left}\n{(tmp_path / 'server.log').read_text()}"
        assert proc.wait(5) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
