"""The packed 16-bit W4A16 kernel compiles for sm_90 with its inline assembly (which Triton's interpreter
cannot run): bfloat16 and float16, scaled and unscaled weights, both operand orders, split-K reduced by the
last program; it fits an H100/H200's shared memory and spends few instructions a weight."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

#: Shared memory one thread block of an H100/H200 may use.
SM90_SHARED_BYTES = 227 * 1024
#: BLOCK_M:BLOCK_N:BLOCK_K:WARPS:STAGES:SWAP:ASM:K_MAJOR:SCALE_WEIGHTS:FLOAT16 -> most instructions a weight.
SETTINGS = {"16:128:128:4:4:1:1:0:0:0": 3.5, "16:128:128:4:4:1:1:0:0:1": 3.5, "64:128:64:4:3:0:1:0:1:0": 5.0,
            "16:64:128:4:4:0:1:0:1:1": 8.0}


def test_skinny_compiles_for_sm90(tmp_path: Path) -> None:
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp_path), "TRITON_DEFAULT_FP_FUSION": "1"}
    script = Path(__file__).parents[2] / "benchmarks" / "int4_sass.py"
    done = subprocess.run([sys.executable, str(script), "--gemv", "--gemm", "--skinny", *SETTINGS], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["setting"] for r in reports] == list(SETTINGS)
    for report in reports:
        assert 0 < report["shared_bytes"] <= SM90_SHARED_BYTES, report
        assert report["lane_instructions_per_weight"] <= SETTINGS[report["setting"]], report
