"""Fixtures: `infercore serve` subprocesses with tool-call and reasoning parsers, on tiny models that
write a scripted reply (the test-only ``infercore-scripted`` plugin) or random text."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from server.conftest import ServerPool, ServerProcess  # tests/ is on sys.path: its conftest has no package


@pytest.fixture(scope="session")
def scripted_folder(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """A tiny model folder whose model replies ``text`` to every prompt (built once per text)."""
    from infercore_scripted.folder import build_scripted_folder

    built: dict[str, Path] = {}

    def make(text: str) -> Path:
        if text not in built:
            built[text] = build_scripted_folder(tmp_path_factory.mktemp("scripted") / "model", text)
        return built[text]

    return make


@pytest.fixture(scope="module")
def start(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., ServerProcess]]:
    """Start servers of one test module (model folder and extra flags); stopped when the module ends."""
    pool = ServerPool()
    yield lambda model, *flags: pool.start(model, tmp_path_factory.mktemp("logs"), list(flags))
    pool.stop_all()

