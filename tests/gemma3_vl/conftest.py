"""A tiny random Gemma 3 vision-language folder (SigLIP tower, sliding + global text layers), built once."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("PIL")


@pytest.fixture(scope="session")
def gemma3_vl_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from infercore.tiny_vision_models import build_gemma3_vl_folder

    return build_gemma3_vl_folder(tmp_path_factory.mktemp("gemma3_vl"))
