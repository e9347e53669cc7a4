"""No core file grows past 600 lines, and the model runner stays an orchestrator (450 at most)."""

from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2] / "core" / "infercore"


def test_no_core_file_over_600_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in ROOT.rglob("*.py") if (n := len(p.read_text().splitlines())) > 600}
    assert not long, f"split these files: {long}"


def test_the_model_runner_stays_under_450_lines() -> None:
    lines = len((ROOT / "worker" / "model_runner.py").read_text().splitlines())
    assert lines <= 450, f"worker/model_runner.py has {lines} lines; move set-up or per-row state out of it"
