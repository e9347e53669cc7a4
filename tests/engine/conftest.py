"""Fixtures for the end-to-end engine tests: tiny model folders and small engines over them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from engine_cases import ENGINE_DEFAULTS

from infercore import LLM

MakeLLM = Callable[..., LLM]


@pytest.fixture
def make_llm(qwen3_folder: Path) -> MakeLLM:
    """``make_llm(**engine_args)`` → an ``LLM`` over the tiny Qwen3 folder (or ``model=``), small defaults."""

    def make(**engine_args: Any) -> LLM:
        args = {**ENGINE_DEFAULTS, "model": str(qwen3_folder), **engine_args}
        return LLM(**args)

    return make
