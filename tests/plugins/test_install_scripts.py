"""The set-up script installs what a user needs and no test fixture; the test script adds the fixtures.

A stand-in Python records the ``pip install`` lines the scripts would run, so nothing is installed here.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests" / "plugin_pkgs").iterdir()
                  if (p / "pyproject.toml").exists())
PLUGINS = sorted(p.name for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").exists())


def _installed(tmp_path: Path, script: str, *args: str) -> list[str]:
    """The editable paths ``script ARGS`` installs, read from a stand-in ``python`` that logs its calls."""
    log = tmp_path / "calls.log"
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    fake.chmod(0o755)
    proc = subprocess.run(["bash", script, *args], cwd=ROOT, env={**os.environ, "PYTHON": str(fake)},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    words = log.read_text().split()
    return [words[i + 1] for i, w in enumerate(words) if w == "-e"]


def test_setup_installs_core_and_user_plugins_but_no_fixture(tmp_path: Path) -> None:
    installed = _installed(tmp_path, "scripts/install.sh")
    assert installed[0] == "." and {"plugins/cpu", "plugins/tool_parsers", "plugins/structured_output"} <= set(installed)
    assert not [p for p in installed if p.startswith("tests/")], installed


def test_setup_all_installs_every_in_tree_plugin(tmp_path: Path) -> None:
    installed = _installed(tmp_path, "scripts/install.sh", "--all")
    assert sorted(p.removeprefix("plugins/") for p in installed if p.startswith("plugins/")) == PLUGINS
    assert not [p for p in installed if p.startswith("tests/")], installed


def test_the_test_script_adds_every_fixture_and_the_test_extra(tmp_path: Path) -> None:
    installed = _installed(tmp_path, "scripts/test.sh")
    assert set(FIXTURES) <= set(installed) and ".[test]" in installed
    assert {f"plugins/{p}" for p in PLUGINS} <= set(installed)


def test_an_unknown_option_is_refused_in_a_sentence() -> None:
    proc = subprocess.run(["bash", "scripts/install.sh", "--everything"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "the only option is --all" in proc.stderr
