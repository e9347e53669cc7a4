"""Compiles the shared-KV verification kernel for sm_90 (an H100/H200) without a GPU, at the 8B shape's
attention (a group of 4 query heads of 128 per KV head, 16-token pages) over a bf16 cache: 4 tokens (k = 3,
16 rows) and 6 tokens (k = 5, 32 rows), one split and several.

Run as a script in a process of its own with ``TRITON_INTERPRET=0`` (the interpreter accepts code the
compiler refuses). Prints one line per variant.
"""

from __future__ import annotations

import triton
from triton.backends.compiler import GPUTarget

from infercore_triton.verify_attention import _verify_split_kernel

POINTERS = {"q_ptr": "*bf16", "k_cache_ptr": "*bf16", "v_cache_ptr": "*bf16", "block_table_ptr": "*i32",
            "seq_lens_ptr": "*i32", "query_start_loc_ptr": "*i32", "out_ptr": "*bf16", "part_out_ptr": "*fp32",
            "part_lse_ptr": "*fp32"}
INTS = ("sliding_window", "num_splits", "stride_qt", "stride_qh", "stride_cb", "stride_cs", "stride_ch",
        "stride_bt", "stride_ot", "stride_oh", "stride_pt", "stride_ph", "stride_ps", "stride_lt", "stride_lh")


def compile_variant(short: int, one_split: bool, block_n: int = 64) -> int:
    """Build one variant for sm_90; returns the size of its cubin."""
    group = 4
    signature = {**POINTERS, "scale": "fp32"} | {name: "i32" for name in INTS}
    constants = {"GROUP": group, "SHORT": short, "ROWS": max(16, triton.next_power_of_2(short * group)), "HEAD": 128,
                 "HEAD_PAD": 128, "PAGE": 16, "BLOCK_N": block_n, "DOT_PRECISION": "ieee", "ONE_SPLIT": one_split}
    signature |= {name: "constexpr" for name in constants}
    source = triton.compiler.ASTSource(fn=_verify_split_kernel, signature=signature, constexprs=constants)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": 2})
    return len(compiled.asm["cubin"])


if __name__ == "__main__":
    for short, one_split in ((4, True), (4, False), (6, False)):
        print(f"sm_90 short={short} one_split={one_split}: {compile_variant(short, one_split)} bytes of cubin")
