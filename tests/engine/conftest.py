"""Fixtures for the end-to-end engine tests: tiny model folders and small engines over them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from infercore import LLM

#: Small engine settings: every test engine fits a few hundred tokens per request. One torch thread: the
#: models are tiny, and on a busy two-core machine more threads only wait on each other.
ENGINE_DEFAULTS: dict[str, Any] = {
    "dtype": "float32",
    "max_model_len": 256,
    "num_gpu_blocks_override": 160,
    "max_num_seqs": 32,
    "cpu_threads": 1,
}

MakeLLM = Callable[..., LLM]


@pytest.fixture
def make_llm(qwen3_folder: Path) -> MakeLLM:
    """``make_llm(**engine_args)`` → an ``LLM`` over the tiny Qwen3 folder (or ``model=``), small defaults."""

    def make(**engine_args: Any) -> LLM:
        args = {**ENGINE_DEFAULTS, "model": str(qwen3_folder), **engine_args}
        return LLM(**args)

    return make
