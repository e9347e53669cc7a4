"""A worker (or the engine above the workers) killed mid-generation under ``infercore serve``: the
request errors within 10 s, /health answers 503, and every process of the server is gone within 30 s
(mp and Ray executors)."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest
from server_faults import Stream, engine_pid, kill_mid_stream_and_check, running, start_server, worker_pids

FLAGS = ["--max-model-len", "1024", "--num-gpu-blocks-override", "80", "--max-num-seqs", "4", "--cpu-threads", "1",
         "--served-model-name", "tiny", "--tensor-parallel-size", "2"]

@pytest.mark.parametrize(("backend", "victim"), [("mp", "worker"), ("ray", "worker"), ("mp", "engine")])
def test_killed_process_fails_request_health_503_and_everything_exits(qwen3_folder, tmp_path, backend: str,
                                                                      victim: str) -> None:
    log = tmp_path / "server.log"
    proc, url = start_server(qwen3_folder, log, *FLAGS, "--distributed-executor-backend", backend)
    kill_mid_stream_and_check(proc, url, log, backend,
                              lambda server, workers: workers[1] if victim == "worker" else engine_pid(server))


@pytest.mark.parametrize("backend", ["mp", "ray"])
def test_api_process_killed_engine_and_workers_exit(qwen3_folder, tmp_path, backend: str) -> None:
    """RELIABILITY line 10 under a multi-process executor: SIGKILL of the API process mid-generation
    leaves no engine or worker behind within 30 s."""
    proc, url = start_server(qwen3_folder, tmp_path / "server.log", *FLAGS, "--distributed-executor-backend", backend)
    rest: set[int] = set()
    try:
        server = psutil.Process(proc.pid)
        workers = worker_pids(server, backend)
        assert len(workers) == 2, (workers, (tmp_path / "server.log").read_text())
        rest |= {p.pid for p in server.children(recursive=True)} | set(workers)
        stream = Stream(url)
        stream.start()
        assert stream.first_chunk.wait(30) and "data: {" in stream.text
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(running(p) for p in rest):
            time.sleep(0.2)
        left = [p for p in rest if running(p)]
        assert not left, f"still running 30 s after the API process was killed: {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in rest:
            if running(pid):
                os.kill(pid, signal.SIGKILL)

