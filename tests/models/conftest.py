"""Session-wide tiny model folders, built once per (architecture, overrides)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from infercore.tiny_models import build_model_folder

TinyFolder = Callable[..., Path]


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> TinyFolder:
    """``tiny_folder(architecture, **overrides)`` → a HF model folder (cached for the session)."""
    built: dict[str, Path] = {}

    def make(architecture: str, **overrides: Any) -> Path:
        key = architecture + json.dumps(overrides, sort_keys=True)
        if key not in built:
            built[key] = build_model_folder(tmp_path_factory.mktemp(architecture), architecture, **overrides)
        return built[key]

    return make
