"""``infercore serve --api-server-count 2``: an API server or engine that dies takes the whole server
down with a non-zero exit code, and leaves no process or socket folder behind."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path

import pytest
from api_server_cases import alive, started_pids


@pytest.mark.parametrize("victim", ["API server 1", "engine 0"])
def test_a_dead_child_stops_the_server_with_an_error(start, victim) -> None:
    server = start("--api-server-count", "2")
    pids = started_pids(server.output())
    assert set(pids) == {"engine 0", "API server 0", "API server 1"}, pids
    os.kill(pids[victim], signal.SIGKILL)
    code = server.proc.wait(30)
    assert code != 0
    assert f"infercore-{victim.lower().replace(' ', '-')}" in server.output() or "exited unexpectedly" in server.output()
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [name for name, pid in pids.items() if alive(pid)]
    assert not list(Path(tempfile.gettempdir()).glob(f"infercore-ipc-{server.proc.pid}-*"))
