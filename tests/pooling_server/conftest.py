"""Fixtures: `infercore serve` subprocesses of tiny pooling models (a BERT embedder, a BERT cross-encoder)
and of a generating model, for the pooling routes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import server.conftest as server_fixtures
from server.conftest import ServerPool, ServerProcess  # tests/ is on sys.path: its conftest has no package

#: Three servers start at once here; give them longer than one.
server_fixtures.STARTUP_TIMEOUT_S = max(server_fixtures.STARTUP_TIMEOUT_S, 300)


@pytest.fixture(scope="session")
def pooling_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from infercore.pooling.tiny_encoders import build_encoder_folder
    from infercore.tiny_models import build_model_folder

    root = tmp_path_factory.mktemp("pooling_server")
    return {
        "embedder": build_encoder_folder(root / "embedder", "BertModel", "MEAN"),
        "cross": build_encoder_folder(root / "cross", "BertForSequenceClassification", None, num_labels=1),
        "generator": build_model_folder(root / "generator", "Qwen3ForCausalLM"),
    }


@pytest.fixture(scope="session")
def pooling_servers(pooling_folders: dict[str, Path]) -> Iterator[dict[str, ServerProcess]]:
    """One server per folder, started together."""
    pool = ServerPool()
    servers = {name: pool.start(folder, folder.parent, [], wait=False) for name, folder in pooling_folders.items()}
    try:
        for server in servers.values():
            server.wait_ready()
        yield servers
    finally:
        pool.stop_all()
