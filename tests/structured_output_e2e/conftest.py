"""Fixtures: one `infercore serve` subprocess on a random-weight tiny model, and OpenAI clients."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from server.conftest import ServerProcess

#: Room for the longest bounded document (a few hundred tokens) and a batch of 64 requests.
SERVER_FLAGS = ["--max-model-len", "1024", "--num-gpu-blocks-override", "1024", "--max-num-seqs", "64",
                "--served-model-name", "tiny", "--shutdown-timeout", "5", "--cpu-threads", "1"]


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from infercore.tiny_models import build_model_folder

    return build_model_folder(tmp_path_factory.mktemp("so-e2e") / "tiny", "Qwen3ForCausalLM")


@pytest.fixture(scope="session")
def server(model_dir: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(model_dir, model_dir.parent, SERVER_FLAGS)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture
def async_client(server: ServerProcess) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
