"""Fixtures for the engine fault tests: small engines over the tiny Qwen3 folder, and a step that fails."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from infercore import LLM

#: One torch thread and a small cache: the models are tiny and CI has two cores.
ENGINE_DEFAULTS: dict[str, Any] = {
    "dtype": "float32",
    "max_model_len": 128,
    "num_gpu_blocks_override": 64,
    "max_num_seqs": 8,
    "cpu_threads": 1,
}


@pytest.fixture
def make_llm(qwen3_folder: Path) -> Callable[..., LLM]:
    """``make_llm(**engine_args)`` → an ``LLM`` over the tiny Qwen3 folder with small defaults."""

    def make(**engine_args: Any) -> LLM:
        return LLM(**{**ENGINE_DEFAULTS, "model": str(qwen3_folder), **engine_args})

    return make
