"""The W4A16 kernels' machine code for sm_90 (an H100/H200), compiled on any machine, no GPU needed.

At decode a 4-bit GEMM is bound by the instructions that turn codes into numbers before it is bound by
memory: an H200 issues about 33e12 lane-instructions a second against 4.8 TB/s, so a kernel that spends
more than ~3.5 instructions per weight (two weights a byte) cannot read at full bandwidth. For each
setting this prints the instructions of the kernel's main loop by kind, per warp and per weight, its
registers, spills and shared memory:

    TRITON_INTERPRET=0 python benchmarks/int4_sass.py --gemv 1:512:8:8 --gemm 16:64:128:4:4:1

``--gemv M_PAD:BLOCK_N:WORDS:WARPS`` settings are the multiply-add kernel's (one row: ``M_PAD`` 1);
``--gemm BLOCK_M:BLOCK_N:BLOCK_K:WARPS:STAGES:UNPACK_WORDS`` the tensor-core kernel's;
``--skinny BLOCK_M:BLOCK_N:BLOCK_K:WARPS:STAGES:SWAP:ASM:K_MAJOR[:SCALE_WEIGHTS[:FLOAT16]]`` the packed
16-bit kernel's (``int4_skinny``). bfloat16
activations, group 128. Prints one JSON line per setting.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from typing import Any

import triton
from decode_sass import loop_instructions, resource_usage  # the sibling tool (this folder is on sys.path)
from triton.backends.compiler import GPUTarget

from infercore_triton.int4_gemm import _w4a16_kernel
from infercore_triton.int4_gemv import _w4a16_gemv_kernel
from infercore_triton.int4_skinny import _w4a16_skinny_kernel

#: Integer arguments a launch passes as multiples of 16 (sizes of Qwen3-8B's projections, strides).
ALIGNED_INTS = ("N", "K", "stride_xm", "stride_om", "k_per_split", "stride_qk", "stride_qn")


def _compile(kernel: Any, constants: dict[str, Any], warps: int, stages: int,
             float_type: str = "*bf16") -> triton.compiler.CompiledKernel:
    signature = {}
    for name in kernel.arg_names:
        if name in constants:
            signature[name] = "constexpr"
        elif name in ("qw_ptr", "rg_ptr", "lock_ptr"):
            signature[name] = "*i32"
        elif name == "z_ptr":
            signature[name] = "*u8"
        elif name == "part_ptr":
            signature[name] = "*fp32"
        elif name.endswith("_ptr"):
            signature[name] = float_type
        else:
            signature[name] = "i32"
    aligned = [i for i, name in enumerate(kernel.arg_names) if name.endswith("_ptr") or name in ALIGNED_INTS]
    source = triton.compiler.ASTSource(fn=kernel, signature=signature, constexprs=constants,
                                       attrs={(i,): [["tt.divisibility", 16]] for i in aligned})
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})


def gemv_report(setting: str) -> dict:
    """The multiply-add kernel at ``M_PAD:BLOCK_N:WORDS:WARPS``."""
    m_pad, block_n, words, warps = map(int, setting.split(":"))
    constants = {"GROUP": 128, "M_PAD": m_pad, "WORDS": words, "BLOCK_N": block_n, "HAS_BIAS": False, "SPLIT": True,
                 "INTERLEAVED": True}
    return _report("gemv", setting, _compile(_w4a16_gemv_kernel, constants, warps, 1), warps, block_n * words * 8)


def gemm_report(setting: str) -> dict:
    """The tensor-core kernel at ``BLOCK_M:BLOCK_N:BLOCK_K:WARPS:STAGES:UNPACK_WORDS``."""
    block_m, block_n, block_k, warps, stages, words = map(int, setting.split(":"))
    constants = {"GROUP": 128, "TILE_IN_GROUP": True, "ROW_GROUPS": False, "UNPACK_WORDS": bool(words), "INTERLEAVED": True,
                 "HAS_BIAS": False, "SPLIT": True, "DOT_PRECISION": "tf32", "BLOCK_M": block_m, "BLOCK_N": block_n,
                 "BLOCK_K": block_k}
    return _report("gemm", setting, _compile(_w4a16_kernel, constants, warps, stages), warps, block_n * block_k)


def skinny_report(setting: str) -> dict:
    """The packed 16-bit tensor-core kernel at
    ``BLOCK_M:BLOCK_N:BLOCK_K:WARPS:STAGES:SWAP:ASM:K_MAJOR[:SCALE_WEIGHTS[:FLOAT16]]`` (``K_MAJOR``: codes
    stored [N, K/8], each column's words contiguous; ``FLOAT16``: float16 activations, else bfloat16)."""
    block_m, block_n, block_k, warps, stages, swap, asm, k_major, *extra = map(int, setting.split(":"))
    scale, half = (extra + [0, 0])[:2]
    constants = {"GROUP": 128, "MAGIC": 0x6400 if half else 0x4300, "ASM": bool(asm), "SWAP": bool(swap),
                 "HAS_BIAS": False, "SPLIT": True, "FUSED_REDUCE": True, "SCALE_WEIGHTS": bool(scale),
                 "BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k,
                 "INTERLEAVED": True,
                 "stride_qk" if k_major else "stride_qn": 1}
    compiled = _compile(_w4a16_skinny_kernel, constants, warps, stages, "*fp16" if half else "*bf16")
    return _report("skinny", setting, compiled, warps, block_n * block_k)


def _report(kind: str, setting: str, compiled: triton.compiler.CompiledKernel, warps: int, weights: int) -> dict:
    ops = loop_instructions(compiled.asm["sass"])
    return {"benchmark": "int4_sass", "target": "sm_90", "kernel": kind, "setting": setting,
            "loop_instructions_per_warp": len(ops),
            "lane_instructions_per_weight": round(len(ops) * warps * 32 / weights, 3),
            **resource_usage(compiled), "shared_bytes": compiled.metadata.shared,
            "most_frequent": dict(Counter(ops).most_common(12)), "triton": triton.__version__}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gemv", nargs="*", default=["1:512:8:8", "1:256:8:4", "2:256:8:4"])
    parser.add_argument("--gemm", nargs="*", default=["16:64:128:4:4:1", "16:64:128:4:4:0", "64:128:64:4:3:1"])
    parser.add_argument("--skinny", nargs="*", default=["16:128:128:4:4:1:1:0", "16:256:128:8:3:1:1:0",
                                                        "64:128:64:4:3:0:1:0:1"])
    args = parser.parse_args()
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        raise SystemExit("compiling for sm_90 needs TRITON_INTERPRET=0")
    for setting in args.gemv:
        print(json.dumps(gemv_report(setting)), flush=True)
    for setting in args.gemm:
        print(json.dumps(gemm_report(setting)), flush=True)
    for setting in args.skinny:
        print(json.dumps(skinny_report(setting)), flush=True)


if __name__ == "__main__":
    main()
