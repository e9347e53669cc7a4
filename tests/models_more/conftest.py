"""Session-wide tiny model folders of the dense-family cases, built once per case."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from dense_cases import CASES

from infercore.tiny_models import build_model_folder


@pytest.fixture(scope="session")
def case_folder(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``case_folder(case)`` → the tiny model folder of ``CASES[case]`` (built once per session)."""
    built: dict[str, Path] = {}

    def make(case: str) -> Path:
        architecture, overrides = CASES[case]
        key = architecture + json.dumps(overrides, sort_keys=True)
        if key not in built:
            built[key] = build_model_folder(tmp_path_factory.mktemp(architecture), architecture, **overrides)
        return built[key]

    return make
