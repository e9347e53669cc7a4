"""The launcher's signal handling: the first SIGTERM/SIGINT reaches every API server at once (their drain
starts then, not when the watch loop next wakes), stopping afterwards sends no second one, and a second
signal sends another to each (which stops a draining server at once)."""

from __future__ import annotations

import signal

import pytest

from infercore.entrypoints import api_server_procs


class _Process:
    def __init__(self, pid: int) -> None:
        self.pid = pid

    def is_alive(self) -> bool:
        return True


def test_signals_reach_each_api_server_once_then_again_on_a_second_signal(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(api_server_procs.os, "kill", lambda pid, sig: sent.append((pid, sig)))
    launcher = api_server_procs._Launcher(None, "factory")  # type: ignore[arg-type]
    launcher.servers = [_Process(11), _Process(12)]
    launcher._on_signal(signal.SIGTERM, None)
    assert sent == [(11, signal.SIGTERM), (12, signal.SIGTERM)]
    assert launcher.stop_signal == signal.SIGTERM
    launcher._signal_servers()  # what stop() does first: nothing new to signal
    launcher.servers.append(_Process(13))  # one that started after the signal still gets its SIGTERM
    launcher._signal_servers()
    assert sent == [(11, signal.SIGTERM), (12, signal.SIGTERM), (13, signal.SIGTERM)]
    sent.clear()
    launcher._on_signal(signal.SIGINT, None)
    assert sent == [(11, signal.SIGTERM), (12, signal.SIGTERM), (13, signal.SIGTERM)]
