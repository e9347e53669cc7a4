"""Fixtures: a tiny model folder and real `infercore serve` subprocesses on free ports."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

STARTUP_TIMEOUT_S = 90
#: Small, fast server settings shared by every test server.
BASE_FLAGS = ["--max-model-len", "256", "--num-gpu-blocks-override", "128", "--max-num-seqs", "16",
              "--shutdown-timeout", "10", "--served-model-name", "tiny"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """A running `infercore serve` subprocess and how to reach it."""

    def __init__(self, model: Path | None, log_dir: Path, extra: list[str], env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"server-{self.port}.log"
        self.log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        model_arg = [str(model)] if model is not None else []
        cmd = [sys.executable, "-m", "infercore.entrypoints.cli", "serve", *model_arg, "--port", str(self.port),
               *BASE_FLAGS, *extra]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})})

    def wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"server did not start:\n{self.output()}")

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text()

    def engine_pid(self) -> int:
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout.split()
        pids = [int(p) for p in out]
        for pid in pids:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"multiprocessing" in cmdline and b"resource_tracker" not in cmdline:
                return pid
        raise RuntimeError(f"no engine process among children {pids}")

    def stop(self) -> None:
        self.interrupt()
        self.wait_stopped()

    def interrupt(self) -> None:
        """Ask the server to shut down (SIGINT), without waiting."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)

    def wait_stopped(self, grace_s: float = 20.0) -> None:
        """Wait up to ``grace_s`` for the server to exit after :meth:`interrupt`, then kill it."""
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class ServerPool:
    """The servers one fixture started; ``stop_all`` stops them when the fixture ends."""

    def __init__(self) -> None:
        self.servers: list[ServerProcess] = []

    def start(self, model: Path | None, log_dir: Path, extra: list[str], env: dict[str, str] | None = None,
              wait: bool = True) -> ServerProcess:
        server = ServerProcess(model, log_dir, extra, env)
        self.servers.append(server)
        if wait:
            server.wait_ready()
        return server

    def stop_all(self) -> None:
        """Interrupt every server at once, then wait for each (the slowest sets the time, not the sum)."""
        for server in self.servers:
            server.interrupt()
        for server in self.servers:
            server.wait_stopped()


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from infercore.tiny_models import build_model_folder

    return build_model_folder(tmp_path_factory.mktemp("server") / "tiny", "Qwen3ForCausalLM")


@pytest.fixture(scope="session")
def start_server(model_dir: Path) -> Iterator:
    """Start servers with extra flags; all are stopped at the end of the session."""
    pool = ServerPool()

    def start(*extra: str, env: dict[str, str] | None = None, wait: bool = True, model: Path | None = model_dir
              ) -> ServerProcess:
        return pool.start(model, model_dir.parent, list(extra), env, wait)

    yield start
    pool.stop_all()


@pytest.fixture(scope="session")
def server(start_server) -> ServerProcess:
    """The default server every API test shares."""
    return start_server("--max-request-body-bytes", "65536")
