"""A documented command never vanishes: without httpx, `infercore bench serve` is still listed and fails
with the package's name; httpx itself is a dependency of the package, not only of its tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Runs the CLI as if httpx were not installed (a None entry in sys.modules makes its import fail).
_WITHOUT_HTTPX = ("import sys; sys.modules['httpx'] = None\n"
                  "from infercore.entrypoints.cli import main\n"
                  "sys.exit(main(sys.argv[1:]))")


def _cli_without_httpx(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _WITHOUT_HTTPX, *argv], capture_output=True, text=True,
                          timeout=120)


def test_bench_serve_without_httpx_names_the_package() -> None:
    done = _cli_without_httpx("bench", "serve", "--base-url", "http://127.0.0.1:9", "--num-prompts", "1")
    assert done.returncode == 1, done.stderr
    assert "invalid choice" not in done.stderr
    assert "'httpx'" in done.stderr and "pip install httpx" in done.stderr


def test_bench_help_lists_serve_without_httpx() -> None:
    done = _cli_without_httpx("bench", "--help")
    assert done.returncode == 0
    assert "serve" in done.stdout and "httpx" in done.stdout


def test_httpx_is_a_dependency_of_the_package() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    dependencies = text.split("\ndependencies = [", 1)[1].split("]", 1)[0]
    names = [line.strip().strip('",').split(">")[0].split("=")[0].split(";")[0]
             for line in dependencies.splitlines() if line.strip()]
    assert "httpx" in names
