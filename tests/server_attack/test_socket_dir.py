"""The engine's ipc:// socket folder does not outlive the server: the engine removes it when the API
process is killed, and a new client removes folders of processes that are gone."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from infercore.frontend.core_client import remove_stale_socket_dirs

#: An API process stand-in: start an engine (the echo engine of the wire tests), say where its sockets
#: are, and wait to be killed.
_API_PROCESS = """
import asyncio, sys, time
from infercore.config import InfercoreConfig
from infercore.frontend.core_client import EngineCoreClient
client = EngineCoreClient(InfercoreConfig(), "fake_engine:EchoEngine")
asyncio.run(client.start(timeout=120))
print(client._dir, client.process.pid, flush=True)
time.sleep(600)
"""


def test_engine_removes_the_socket_folder_when_the_api_process_is_killed() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent.parent / "server"), *sys.path])}
    api = subprocess.Popen([sys.executable, "-c", _API_PROCESS], stdout=subprocess.PIPE, text=True, env=env)
    try:
        folder, engine_pid = api.stdout.readline().split()
        assert Path(folder).is_dir() and Path(folder).name.startswith(f"infercore-ipc-{api.pid}-")
    finally:
        api.kill()
        api.wait()
    deadline = time.monotonic() + 15
    while Path(folder).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(folder).exists(), f"engine {engine_pid} left {folder} behind"


def test_stale_socket_folders_of_dead_processes_are_removed(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"infercore-ipc-{dead.pid}-abc"
    live = tmp_path / f"infercore-ipc-{os.getpid()}-def"
    other = tmp_path / "infercore-something-else"
    for folder in (stale, live, other):
        folder.mkdir()
        (folder / "input").write_text("")
    assert remove_stale_socket_dirs(str(tmp_path)) == [str(stale)]
    assert not stale.exists() and live.exists() and other.exists()
