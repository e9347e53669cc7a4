"""Fixtures of the conformance tests: a tiny GPT-2 folder for the example plugin's model."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def gpt2_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from infercore_acme.folder import build_gpt2_folder

    return build_gpt2_folder(tmp_path_factory.mktemp("gpt2"))
