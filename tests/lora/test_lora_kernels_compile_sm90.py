"""The ``lora_apply`` kernels compile for sm_90 (H100/H200) without a GPU, within its shared memory: the
interpreter the other kernel tests run accepts code the compiler refuses. ``compile_lora_sm90.py``
without ``--one-each`` builds every variant the W-GPU and 8B shapes launch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SM90_SHARED_BYTES = 227 * 1024


def test_lora_kernels_compile_for_sm90(tmp_path: Path) -> None:
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp_path), "TRITON_DEFAULT_FP_FUSION": "1"}
    script = Path(__file__).with_name("compile_lora_sm90.py")
    done = subprocess.run([sys.executable, str(script), "--one-each"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 5, lines
    assert all(0 <= int(line.rsplit(": ", 1)[1].split()[0]) <= SM90_SHARED_BYTES for line in lines), lines
