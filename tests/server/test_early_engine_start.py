"""`infercore serve` spawns its engine before importing the server's heavy modules, so both start-ups overlap."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROBE = r"""
import json, os, sys
from infercore.frontend.core_client import EngineCoreClient

def spawn(self):
    heavy = [name for name in ("torch", "transformers", "fastapi", "uvicorn") if name in sys.modules]
    print(json.dumps({"heavy_at_spawn": heavy, "model": self.config.model.model}), flush=True)
    os._exit(0)

EngineCoreClient.spawn = spawn
from infercore.entrypoints.cli import main
main(["serve", "--port", "0"])
"""


def _probe(cache: Path) -> dict:
    env = {**os.environ, "INFERCORE_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_engine_is_spawned_before_torch_and_the_server_are_imported(tmp_path: Path) -> None:
    first = _probe(tmp_path)  # builds the demo model's folder (with torch) before the engine looks for it
    assert (tmp_path / "demo" / "config.json").exists()
    assert first["model"] == str(tmp_path / "demo")
    again = _probe(tmp_path)
    assert again["heavy_at_spawn"] == []
