"""The API server process imports what a front end needs, not the engine's model code: no layer, no loader, no
architecture (they load on first use of ``infercore.models``' names, in the engine's processes)."""

from __future__ import annotations

import json
import subprocess
import sys

_SCRIPT = """
import json, sys
import infercore.entrypoints.openai.app
engine = sorted(m for m in sys.modules if m.startswith(("infercore.layers", "infercore.models.loader",
                                                         "infercore.models.llama", "infercore.worker")))
from infercore.models import load_model, resolve_dtype
print(json.dumps({"engine_modules": engine, "lazy_names": [load_model.__name__, resolve_dtype.__name__]}))
"""


def test_the_api_server_imports_no_model_code() -> None:
    done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["engine_modules"] == [], report["engine_modules"]
    assert report["lazy_names"] == ["load_model", "resolve_dtype"]
