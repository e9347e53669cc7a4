"""The ``--api-server-count N`` launcher asks once which tokenizer class ``AutoTokenizer`` picks (after spawning the
engines, so its helper process runs beside their start, and before the API servers) and hands the answer to every
API server, which loads its tokenizer with it; with ``--skip-tokenizer-init``, or where the answer is not known,
nothing is handed and each API server asks itself as a single one does."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from infercore.config import InfercoreConfig
from infercore.entrypoints import api_server_procs
from infercore.entrypoints.api_server_procs import ApiServerSlot


class _Spawned:
    """A process the launcher made: its start is recorded, nothing runs."""

    def __init__(self, events: list[str], target: Any, name: str, daemon: bool, args: tuple) -> None:
        self.events, self.name, self.args = events, name, args
        self.pid: int | None = None

    def start(self) -> None:
        self.events.append(self.name)
        self.pid = 1000 + len(self.events)

    def is_alive(self) -> bool:
        return self.pid is not None


class _Context:
    def __init__(self, events: list[str]) -> None:
        self.events = events

    def Process(self, **kwargs: Any) -> _Spawned:  # noqa: N802 - multiprocessing's name
        return _Spawned(self.events, **kwargs)


def _started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: Callable[[Any], str | None], **kwargs: Any
             ) -> tuple[api_server_procs._Launcher, list[str], list[str]]:
    """A launcher of 3 API servers over ``tmp_path``, started with its spawns recorded (the events: process names
    and "ask" where the tokenizer class was asked) and the tokenizer class answered by ``answer(launcher)``; the
    models it was asked about."""
    events: list[str] = []
    asked: list[str] = []
    config = InfercoreConfig.from_kwargs(model=str(tmp_path), api_server_count=3, **kwargs)
    launcher = api_server_procs._Launcher(config, "factory")

    def ask(model_config: Any, give_up: Callable[[], bool] | None = None) -> str | None:
        events.append("ask")
        asked.append(model_config.model)
        assert give_up is not None and not give_up()  # the engines live and no stop came: worth waiting
        return answer(launcher)

    monkeypatch.setattr(api_server_procs, "auto_tokenizer_class_remembered", ask)
    launcher.ctx = _Context(events)  # type: ignore[assignment]
    with socket.socket() as sock:
        launcher.start(sock, str(tmp_path))
    return launcher, events, asked


def _slots(launcher: api_server_procs._Launcher) -> list[ApiServerSlot]:
    return [process.args[2] for process in launcher.servers]


def test_the_launcher_asks_once_beside_the_engines_and_every_api_server_gets_the_answer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    launcher, events, asked = _started(tmp_path, monkeypatch, lambda launcher: "Qwen2Tokenizer")
    servers = [f"infercore-api-server-{i}" for i in range(3)]
    assert events == ["infercore-engine-core-0", "ask", *servers]
    assert asked == [str(tmp_path)]
    assert [slot.tokenizer_class for slot in _slots(launcher)] == ["Qwen2Tokenizer"] * 3
    assert [slot.index for slot in _slots(launcher)] == [0, 1, 2]


def test_no_answer_leaves_every_api_server_to_ask(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(launcher: Any) -> str:
        raise OSError("no cache folder")

    for answer in (lambda launcher: None, failing):
        launcher, events, _ = _started(tmp_path, monkeypatch, answer)
        assert events.count("ask") == 1 and len(launcher.servers) == 3
        assert [slot.tokenizer_class for slot in _slots(launcher)] == [None] * 3


def test_nothing_is_asked_without_a_tokenizer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    launcher, events, _ = _started(tmp_path, monkeypatch, lambda launcher: "Qwen2Tokenizer",
                                   skip_tokenizer_init=True)
    assert "ask" not in events and len(launcher.servers) == 3
    assert [slot.tokenizer_class for slot in _slots(launcher)] == [None] * 3


def test_a_stop_while_asking_starts_no_api_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(launcher: api_server_procs._Launcher) -> None:
        launcher._on_signal(signal.SIGINT, None)  # Ctrl-C: the helper process got it too, and failed
        return None

    launcher, events, _ = _started(tmp_path, monkeypatch, interrupted)
    assert events == ["infercore-engine-core-0", "ask"] and launcher.servers == []


def test_a_stop_or_a_dead_engine_ends_the_wait_for_the_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    # What the helper process's wait polls: a stop signal, or an engine that already ended, ends it.
    seen: list[bool] = []

    def stopped(launcher: api_server_procs._Launcher) -> None:
        launcher._on_signal(signal.SIGTERM, None)
        seen.append(launcher._not_worth_waiting())
        return None

    _started(tmp_path, monkeypatch, stopped)

    def engine_died(launcher: api_server_procs._Launcher) -> str:
        launcher.engines[0].pid = None  # type: ignore[attr-defined]  # _Spawned.is_alive is now False
        seen.append(launcher._not_worth_waiting())
        return "Qwen2TokenizerFast"

    _started(tmp_path, monkeypatch, engine_died)
    assert seen == [True, True]


def test_an_api_server_loads_with_the_class_of_its_slot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from infercore.entrypoints import serve as serve_module
    from infercore.frontend import dp_client

    seen: list[dict[str, Any]] = []

    async def start(config: Any, engine_factory: str, **kwargs: Any) -> None:
        seen.append(kwargs)
        raise ValueError("stopped here")

    # prometheus_client picks its value class once, at import, from this variable: import it before setting it, or
    # every later test in this process would keep multiprocess values after the variable is gone.
    import prometheus_client.values  # noqa: F401

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    monkeypatch.setattr(serve_module.AsyncLLM, "start", start)
    monkeypatch.setattr(serve_module, "freeze_startup_heap", lambda: None)  # not this test process's heap
    monkeypatch.setattr(dp_client, "make_engine_client", lambda config, factory, endpoints: "client")
    config = InfercoreConfig.from_kwargs(model=str(tmp_path), api_server_count=2)
    with socket.socket() as sock:
        slot = ApiServerSlot(1, [], sock, "Qwen2Tokenizer")
        assert asyncio.run(serve_module.serve(config, "factory", slot)) == 1
    assert len(seen) == 1
    assert seen[0]["tokenizer_class"] == "Qwen2Tokenizer" and seen[0]["client"] == "client"


# `infercore serve --api-server-count 2` on the demo model, its process spawns recorded, not made; the tokenizer
# class asked for real (a cold cache folder whose demo folder is the built one).
_PROBE = textwrap.dedent("""
    import json, sys
    from infercore import tokenizer_loading
    from infercore.entrypoints import api_server_procs, cli

    seen = {"asked": [], "spawned": [], "classes": []}
    real_ask = api_server_procs.auto_tokenizer_class_remembered

    def ask(model_config, give_up=None):
        seen["asked"].append(model_config.model)
        return real_ask(model_config)  # the recorded engines never run: nothing to give up for

    class Spawned:
        def __init__(self, target, name, daemon, args):
            self.name, self.args, self.pid, self.exitcode = name, args, None, 0

        def start(self):
            self.pid = 1000 + len(seen["spawned"])
            seen["spawned"].append(self.name)
            if "api-server" in self.name:
                seen["classes"].append(self.args[2].tokenizer_class)
                seen["heavy_at_spawn"] = sorted(m for m in ("torch", "transformers") if m in sys.modules)

        def is_alive(self):
            return False

        def join(self, timeout=None):
            pass

    class Context:
        def Process(self, **kwargs):
            return Spawned(**kwargs)

    api_server_procs.auto_tokenizer_class_remembered = ask
    api_server_procs.multiprocessing.get_context = lambda method: Context()
    api_server_procs._Launcher.watch = lambda self: None
    code = cli.main(["serve", "--api-server-count", "2", "--port", "0"])
    print(json.dumps({"code": code, **seen}))
""")


def test_the_launcher_asks_about_the_demo_folder_the_api_servers_load(tmp_path: Path) -> None:
    import os

    from transformers import AutoTokenizer

    from infercore.demo import DEMO_FOLDER, ensure_demo_model
    from infercore.tokenizer_loading import AUTO_CLASS_CACHE_FILE

    demo = ensure_demo_model()  # built here: the launcher builds a missing one itself, with torch
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / DEMO_FOLDER).symlink_to(demo, target_is_directory=True)
    env = {**os.environ, "INFERCORE_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=300, env=env,
                          check=False)
    assert done.stdout.strip(), done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["code"] == 0, done.stderr[-2000:]
    assert seen["spawned"] == ["infercore-engine-core-0", "infercore-api-server-0", "infercore-api-server-1"]
    assert seen["asked"] == [str(cache / DEMO_FOLDER)]  # the folder, not the demo's name
    expected = type(AutoTokenizer.from_pretrained(str(demo))).__name__
    assert seen["classes"] == [expected, expected]
    assert seen["heavy_at_spawn"] == []  # the class was asked of another process
    remembered = json.loads((cache / AUTO_CLASS_CACHE_FILE).read_text())
    assert list(remembered.values()) == [expected]
