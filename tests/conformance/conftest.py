"""Fixtures of the conformance tests: a tiny GPT-2 folder for the example plugin's model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def gpt2_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from infercore_acme.folder import build_gpt2_folder

    return build_gpt2_folder(tmp_path_factory.mktemp("gpt2"))


def run_kit(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``pytest -p infercore.testing ARGS`` in a fresh process (the kit changes process-wide state)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "infercore.testing", "-p", "no:cacheprovider", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=600,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
