"""The decode kernel's sm_90 machine code, compiled on the host: the tool finds the context loop, and over an fp8
cache loading K as words lets the Q·K dot read fp16 K with ldmatrix and issues fewer instructions per token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "benchmarks" / "decode_sass.py"


def _run(*args: str, tmp_path: Path) -> list[dict]:
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp_path), "TRITON_DEFAULT_FP_FUSION": "1"}
    done = subprocess.run([sys.executable, str(TOOL), *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_fp8_k_words_load_k_through_ldmatrix(tmp_path: Path) -> None:
    default, words = _run("--kv-cache-dtype", "fp8", "--settings", "128:4:3", "128:4:1:k", tmp_path=tmp_path)
    assert not default["fp8_k_words"] and words["fp8_k_words"]
    # Every trip of the loop runs the two dots: 64 tensor-core instructions per warp for a 128-token tile.
    assert default["watched"]["HMMA.16816.F32"] == words["watched"]["HMMA.16816.F32"] == 64
    # fp16 K through ldmatrix, stored there once converted; V is still gathered byte by byte.
    assert words["watched"]["LDSM.16.M88.4"] > default["watched"]["LDSM.16.M88.4"]
    assert words["watched"]["STS.128"] > 0 and words["watched"]["LDS.U8"] == default["watched"]["LDS.U8"] > 0
    # The query's operand is moved into place in fewer pieces.
    assert words["watched"]["IMAD.MOV.U32"] < 0.75 * default["watched"]["IMAD.MOV.U32"]
    assert words["instructions_per_128_tokens"] < default["instructions_per_128_tokens"]
    assert 0 < words["registers"] <= 255 and 0 < words["shared_bytes"] <= 227 * 1024


def test_a_bf16_cache_has_no_conversions(tmp_path: Path) -> None:
    (bf16,) = _run("--kv-cache-dtype", "bfloat16", "--settings", "128:4:3", tmp_path=tmp_path)
    assert bf16["loop_instructions_per_warp"] > 0
    assert bf16["watched"]["F2FP.F16.E4M3.UNPACK_B"] == 0 and bf16["watched"]["LDS.U8"] == 0


def test_verification_decodes_compile_for_sm90(tmp_path: Path) -> None:
    """Queries of up to 1 + k tokens attend as decodes of their tokens (a program row per token, split over the
    context): the kernel compiles for sm_90 with the request search, over bf16 and fp8 caches."""
    loop = ("for fp8 in (False, True):\n"
            "    k = compile_sm90(fp8, 128, 4, 3, short=4, splits=4)\n"
            "    print('st.global' in k.asm['ptx'])\n")
    assert _compile_lines(loop, tmp_path) == ["True", "True"]


def test_splits_merged_by_the_last_split_compile_for_sm90(tmp_path: Path) -> None:
    """The split of a (row, KV head) that arrives last merges the partials: the kernel compiles for sm_90 with
    the arrival counter's atomics (a decode step and a verification step, over bf16 and fp8 caches, and the
    walk over a whole mixed graph's requests with a run-time split count)."""
    loop = ("for fp8, short, walk in ((False, 0, False), (True, 0, False), (False, 4, False), (False, 0, True)):\n"
            "    k = compile_sm90(fp8, 128, 4, 3, short=short, splits=8, last_reduces=True,\n"
            "                     query_starts=walk, runtime_splits=walk)\n"
            "    print('atom.global' in k.asm['ptx'])\n")
    assert _compile_lines(loop, tmp_path) == ["True", "True", "True", "True"]


def _compile_lines(loop: str, cache: Path) -> list[str]:
    """What ``loop`` prints, run with ``compile_sm90`` imported in a process of its own (no interpreter)."""
    code = "import sys; sys.path.insert(0, sys.argv[1]); from decode_sass import compile_sm90\n" + loop
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(cache), "TRITON_DEFAULT_FP_FUSION": "1"}
    done = subprocess.run([sys.executable, "-c", code, str(TOOL.parent)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()


def test_the_decode_kernel_lets_a_programmatic_dependent_start_early_only_when_asked(tmp_path: Path) -> None:
    loop = ("for early in (False, True):\n"
            "    k = compile_sm90(False, 128, 4, 3, splits=8, last_reduces=True,\n"
            "                     launch_dependents=early)\n"
            "    print('griddepcontrol.launch_dependents' in k.asm['ptx'])\n")
    assert _compile_lines(loop, tmp_path) == ["False", "True"]
