"""Fixtures: a tiny model folder and `infercore serve` subprocesses (one set per module, stopped with it)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from server.conftest import ServerPool, ServerProcess  # tests/ is on sys.path: its conftest has no package

#: Fewer torch threads than cores: several engines and API servers share CI's two cores.
FLAGS = ["--cpu-threads", "1", "--dtype", "float32"]


@pytest.fixture(scope="session")
def scale_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from infercore.tiny_models import build_model_folder

    return build_model_folder(tmp_path_factory.mktemp("server-scale") / "tiny", "Qwen3ForCausalLM")


@pytest.fixture(scope="module")
def start(scale_folder: Path) -> Iterator[Callable[..., ServerProcess]]:
    """``start(*flags)`` → a ready server on the tiny folder; all are stopped when the module ends."""
    pool = ServerPool()
    yield lambda *extra: pool.start(scale_folder, scale_folder.parent, [*FLAGS, *extra])
    pool.stop_all()
