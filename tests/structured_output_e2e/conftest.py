"""Fixtures: one `infercore serve` subprocess on a random-weight tiny model, and OpenAI clients."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

STARTUP_TIMEOUT_S = 90
#: Room for the longest bounded document (a few hundred tokens) and a batch of 64 requests.
SERVER_FLAGS = ["--max-model-len", "1024", "--num-gpu-blocks-override", "1024", "--max-num-seqs", "64",
                "--served-model-name", "tiny", "--shutdown-timeout", "5", "--cpu-threads", "1"]


class Server:
    """A running server and where to reach it."""

    def __init__(self, model: Path, log_path: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self._log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        cmd = [sys.executable, "-m", "infercore.entrypoints.cli", "serve", str(model), "--port", str(port),
               *SERVER_FLAGS]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_path.read_text()}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"server did not start:\n{self.log_path.read_text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from infercore.tiny_models import build_model_folder

    return build_model_folder(tmp_path_factory.mktemp("so-e2e") / "tiny", "Qwen3ForCausalLM")


@pytest.fixture(scope="session")
def server(model_dir: Path) -> Iterator[Server]:
    server = Server(model_dir, model_dir.parent / "server.log")
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture
def async_client(server: Server) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
