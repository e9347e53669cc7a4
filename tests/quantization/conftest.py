"""Fixtures of the quantization tests: one tiny Qwen3 folder, and its FP8 checkpoints per scheme."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from fp8_checkpoints import write_fp8_pair

from infercore.tiny_models import build_model_folder


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny float32 Qwen3 (hidden 64, q 64 / kv 32 rows, intermediate 128: whole 32x32 blocks)."""
    return build_model_folder(tmp_path_factory.mktemp("qwen3"), "Qwen3ForCausalLM")


@pytest.fixture(scope="session")
def fp8_pair(tiny_qwen3: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[Path, Path]]:
    """``fp8_pair(scheme)`` → (FP8 checkpoint, dequantized float32 twin), written once per scheme."""
    built: dict[str, tuple[Path, Path]] = {}

    def make(scheme: str) -> tuple[Path, Path]:
        if scheme not in built:
            built[scheme] = write_fp8_pair(tiny_qwen3, tmp_path_factory.mktemp(scheme), scheme)
        return built[scheme]

    return make
