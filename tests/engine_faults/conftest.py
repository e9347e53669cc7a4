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


class StepFailure(RuntimeError):
    """The error a test makes the model step raise."""


#: The executor methods that launch a step (synchronously, or overlapped with the next one).
LAUNCH_METHODS = ("execute_model", "execute_model_async")


def fail_next_launch(executor: object) -> list[int]:
    """Make the next step the executor is asked to launch raise StepFailure (later ones run normally).

    Returns a list that counts the failures, so a test can check the failure happened.
    """
    failures: list[int] = []
    for method in LAUNCH_METHODS:
        real = getattr(executor, method, None)
        if real is not None:
            setattr(executor, method, _failing_once(real, failures))
    return failures


def _failing_once(real: Callable[..., Any], failures: list[int]) -> Callable[..., Any]:
    def failing(*args: Any, **kwargs: Any) -> Any:
        if not failures:
            failures.append(1)
            raise StepFailure("the device fell over")
        return real(*args, **kwargs)

    return failing
