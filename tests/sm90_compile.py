"""Running a kernel-compiling script for sm_90 (an H100/H200) on a machine without a GPU: in a process of its
own, with the interpreter off (it accepts code the compiler refuses) and a private Triton cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: Shared memory one thread block of an H100/H200 may use.
SM90_SHARED_BYTES = 227 * 1024


def run_compile_script(script: Path, cache_dir: Path, *args: str) -> list[str]:
    """Run ``script`` (with ``args``) for sm_90 and return the lines it printed; fails the test if it fails."""
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(cache_dir), "TRITON_DEFAULT_FP_FUSION": "1"}
    done = subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()
