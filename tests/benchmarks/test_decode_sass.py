"""The decode kernel's sm_90 machine code, compiled on the host: the tool finds the context loop, and over an fp8
cache loading V as words drops the byte-wise gathers of V and issues fewer instructions per token."""

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


def test_fp8_v_words_drop_the_byte_gathers(tmp_path: Path) -> None:
    default, words, both = _run("--kv-cache-dtype", "fp8", "--settings", "128:4:3", "128:4:2:v", "128:4:1:kv",
                                tmp_path=tmp_path)
    assert not default["fp8_v_words"] and words["fp8_v_words"] and not words["fp8_k_words"]
    assert both["fp8_v_words"] and both["fp8_k_words"]
    # With K as words too, the query's operand loads whole: no pieces moved into place.
    assert both["watched"]["IMAD.MOV.U32"] < 0.2 * default["watched"]["IMAD.MOV.U32"]
    # Every trip of the loop runs the two dots: 64 tensor-core instructions per warp for a 128-token tile.
    assert default["watched"]["HMMA.16816.F32"] == words["watched"]["HMMA.16816.F32"] == 64
    assert default["watched"]["LDS.U8"] > 0 and words["watched"]["LDS.U8"] == 0
    assert words["watched"]["LDSM.16.MT88.4"] > 0  # fp16 V through transposing ldmatrix, as over bf16
    assert words["instructions_per_128_tokens"] < 0.8 * default["instructions_per_128_tokens"]
    assert 0 < words["registers"] <= 255 and 0 < words["shared_bytes"] <= 227 * 1024


def test_a_bf16_cache_has_no_conversions(tmp_path: Path) -> None:
    (bf16,) = _run("--kv-cache-dtype", "bfloat16", "--settings", "128:4:3", tmp_path=tmp_path)
    assert bf16["loop_instructions_per_warp"] > 0
    assert bf16["watched"]["F2FP.F16.E4M3.UNPACK_B"] == 0 and bf16["watched"]["LDS.U8"] == 0


def test_fp8_dots_run_on_the_warpgroup_fp8_tensor_cores(tmp_path: Path) -> None:
    """Q·K as K·Qᵀ takes sm_90's FP8 warpgroup MMA (64 tokens by the group's 16 padded rows, 32 values deep),
    K never converted; with P·V in e4m3 too, no fp16 MMA is left and the loop issues fewer instructions."""
    default, qk, both, wide, words = _run("--kv-cache-dtype", "fp8", "--settings", "128:4:3", "128:4:3:q",
                                          "128:4:3:qp", "256:4:3:qp", "128:4:3:qv", tmp_path=tmp_path)
    assert qk["fp8_qk_dot"] and not qk["fp8_pv_dot"] and both["fp8_qk_dot"] and both["fp8_pv_dot"]
    assert default["gmma"] == {}
    fp8_mma = "QGMMA.64x16x32.F32.E4M3.E4M3"
    # A 128-token tile: K·Qᵀ is 2 x 4 of them; Vᵀ·Pᵀ 2 x 4 more in e4m3, or 2 x 8 fp16 ones (64x16x16).
    assert qk["gmma"] == {fp8_mma: 8, "HGMMA.64x16x16.F32": 16}
    assert both["gmma"] == {fp8_mma: 16} and wide["gmma"] == {fp8_mma: 32}
    for record in (qk, both, wide):
        assert record["watched"]["HMMA.16816.F32"] == 0 and record["watched"]["LDS.U8"] == 0
        assert record["stack_bytes"] == 0 and 0 < record["registers"] <= 255
        assert 0 < record["shared_bytes"] <= 227 * 1024
    assert both["watched"]["F2FP.F16.E4M3.UNPACK_B"] == 0  # nothing converted to fp16
    assert both["instructions_per_128_tokens"] < 0.8 * default["instructions_per_128_tokens"]
    assert qk["instructions_per_128_tokens"] < default["instructions_per_128_tokens"]
    # V converted from words before Vᵀ·Pᵀ: no byte permutes left, the fewest instructions of all.
    assert words["fp8_v_words"] and words["gmma"] == qk["gmma"] and words["watched"]["PRMT"] < 8
    assert words["instructions_per_128_tokens"] < 0.6 * default["instructions_per_128_tokens"]



def test_verification_decodes_compile_for_sm90(tmp_path: Path) -> None:
    """Queries of up to 1 + k tokens attend as decodes of their tokens (a program row per token, split over the
    context): the kernel compiles for sm_90 with the request search, over bf16 and fp8 caches."""
    loop = ("for fp8 in (False, True):\n"
            "    k = compile_sm90(fp8, 128, 4, 3, v_words=False, short=4, splits=4)\n"
            "    print('st.global' in k.asm['ptx'])\n")
    assert _compile_lines(loop, tmp_path) == ["True", "True"]


def test_splits_merged_by_the_last_split_compile_for_sm90(tmp_path: Path) -> None:
    """The split of a (row, KV head) that arrives last merges the partials: the kernel compiles for sm_90 with
    the arrival counter's atomics (a decode step and a verification step, over bf16 and fp8 caches, and the
    walk over a whole mixed graph's requests with a run-time split count)."""
    loop = ("for fp8, short, walk in ((False, 0, False), (True, 0, False), (False, 4, False), (False, 0, True)):\n"
            "    k = compile_sm90(fp8, 128, 4, 3, v_words=False, short=short, splits=8, last_reduces=True,\n"
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
            "    k = compile_sm90(False, 128, 4, 3, v_words=False, splits=8, last_reduces=True,\n"
            "                     launch_dependents=early)\n"
            "    print('griddepcontrol.launch_dependents' in k.asm['ptx'])\n")
    assert _compile_lines(loop, tmp_path) == ["False", "True"]
