"""Fixtures: real `infercore serve` subprocesses for the reliability tests, stopped when the module ends."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from server.conftest import ServerPool, ServerProcess  # tests/ is on sys.path: its conftest has no package


@pytest.fixture(scope="module")
def start(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., ServerProcess]]:
    """Start a server of a model folder (None: the built-in demo model) with extra flags and environment."""
    pool = ServerPool()

    def run(model: Path | None, *flags: str, env: dict[str, str] | None = None) -> ServerProcess:
        return pool.start(model, tmp_path_factory.mktemp("logs"), list(flags), env)

    yield run
    pool.stop_all()
