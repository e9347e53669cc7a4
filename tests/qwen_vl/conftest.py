"""Fixtures for the Qwen2.5-VL tests: one tiny random-weight model folder per session, and test images."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def qwen_vl_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from infercore.models.qwen2_5_vl_folder import build_qwen2_5_vl_folder

    return build_qwen2_5_vl_folder(tmp_path_factory.mktemp("qwen2_5_vl"))

