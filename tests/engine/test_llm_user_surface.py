"""What a Python user meets first: ``python -m infercore`` is the ``infercore`` command, and an ``LLM``
shows its engine's INFO lines unless the program configured logging itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import logging, sys
if sys.argv[2] == "configured":
    logging.basicConfig(level=logging.WARNING)
from infercore import LLM
LLM(model=sys.argv[1], dtype="float32", max_model_len=64, num_gpu_blocks_override=8, cpu_threads=1).shutdown()
"""


def test_python_m_infercore_is_the_command() -> None:
    proc = subprocess.run([sys.executable, "-m", "infercore", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: infercore"), proc.stderr


def _stderr(model: Path, mode: str) -> str:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(model), mode], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stderr


def test_llm_shows_engine_logs_when_logging_is_unconfigured(qwen3_folder: Path) -> None:
    logged = _stderr(qwen3_folder, "unconfigured")
    assert "INFO" in logged and "engine ready" in logged, logged[-2000:]


def test_llm_leaves_configured_logging_alone(qwen3_folder: Path) -> None:
    assert "engine ready" not in _stderr(qwen3_folder, "configured")
