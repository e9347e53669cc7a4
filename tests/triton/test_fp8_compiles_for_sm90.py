"""The FP8 kernels (norm and SiLU with quantization, the block GEMM's split-K, large-tile and per-channel
variants) compile for sm_90, their loads pipelined, within its shared memory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: Shared memory one thread block of an H100/H200 may use.
SM90_SHARED_BYTES = 227 * 1024


def test_fp8_kernels_compile_for_sm90(tmp_path: Path) -> None:
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp_path),
           "TRITON_DEFAULT_FP_FUSION": "1"}
    script = Path(__file__).with_name("compile_fp8_sm90.py")
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 10, lines
    shared = [int(line.split(": ")[1].split()[0]) for line in lines]
    assert all(size <= SM90_SHARED_BYTES for size in shared), lines
