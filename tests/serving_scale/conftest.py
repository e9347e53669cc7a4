"""Fixtures: a tiny model folder and `infercore serve` subprocesses (one per module, stopped with it)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from server.conftest import ServerPool, ServerProcess  # tests/ is on sys.path: its conftest has no package


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from infercore.tiny_models import build_model_folder

    return build_model_folder(tmp_path_factory.mktemp("serving-scale") / "tiny", "Qwen3ForCausalLM")


@pytest.fixture(scope="module")
def start(tiny_folder: Path) -> Iterator[Callable[..., ServerProcess]]:
    """``start(*flags)`` → a ready server on the tiny folder; all are stopped when the module ends."""
    pool = ServerPool()
    yield lambda *extra: pool.start(tiny_folder, tiny_folder.parent, list(extra))
    pool.stop_all()
