"""Fixtures: one tiny-model `infercore serve` for the protocol tests, and the official client on it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from server.conftest import ServerProcess  # tests/ is on sys.path: its conftest has no package


@pytest.fixture(scope="session")
def protocol_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight Qwen3 folder (with its tokenizer)."""
    from infercore.tiny_models import build_model_folder

    return build_model_folder(tmp_path_factory.mktemp("protocol") / "tiny", "Qwen3ForCausalLM")


@pytest.fixture(scope="session")
def protocol_server(protocol_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """`infercore serve` of the tiny model, served as "tiny", shared by the protocol tests."""
    server = ServerProcess(protocol_model, tmp_path_factory.mktemp("protocol-logs"), ["--cpu-threads", "1"])
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def client(protocol_server: ServerProcess) -> openai.OpenAI:
    """The official OpenAI client, pointed at the protocol server."""
    return openai.OpenAI(base_url=protocol_server.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="session")
def offline_llm(protocol_model: Path):
    """The same model run offline by `LLM`, the reference for the server's logprobs."""
    from infercore import LLM

    return LLM(str(protocol_model), max_model_len=256, num_gpu_blocks_override=64)
