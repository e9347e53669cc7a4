"""Fixtures: one tiny-model `infercore serve` with tight front-door limits, for the tests of attacks on
the API process (slow templates, huge prompts, fan-out, slow clients)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from server.conftest import ServerProcess  # tests/ is on sys.path: its conftest has no package

#: Limits of the attack server, small so that tests reach them quickly.
READ_TIMEOUT_S = 1.0
MAX_CONNECTIONS = 24
MAX_SEQUENCES = 64
ATTACK_FLAGS = ["--cpu-threads", "1", "--reasoning-parser", "qwen3", "--request-read-timeout", str(READ_TIMEOUT_S),
                "--max-connections", str(MAX_CONNECTIONS), "--max-sequences-per-request", str(MAX_SEQUENCES)]


@pytest.fixture(scope="session")
def attack_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight Qwen3 folder (with its tokenizer and chat template)."""
    from infercore.tiny_models import build_model_folder

    return build_model_folder(tmp_path_factory.mktemp("attack") / "tiny", "Qwen3ForCausalLM")


@pytest.fixture(scope="session")
def attack_server(attack_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """`infercore serve` of the tiny model with the limits above, shared by this folder's tests."""
    server = ServerProcess(attack_model, tmp_path_factory.mktemp("attack-logs"), ATTACK_FLAGS)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
