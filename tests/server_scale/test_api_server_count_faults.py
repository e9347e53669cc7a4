"""``infercore serve --api-server-count 2``: an engine that dies stops the whole server with a non-zero
exit code, leaving no process or socket folder behind."""

from __future__ import annotations

import os
import signal

from api_server_cases import assert_nothing_left, started_pids


def test_a_dead_engine_stops_the_server_with_an_error(start) -> None:
    server = start("--api-server-count", "2")
    pids = started_pids(server.output())
    assert set(pids) == {"engine 0", "API server 0", "API server 1"}, pids
    os.kill(pids["engine 0"], signal.SIGKILL)
    assert server.proc.wait(30) != 0
    assert "infercore-engine-core-0 exited unexpectedly" in server.output()
    assert_nothing_left(server.proc.pid, pids)
