"""Compiles the FP8 kernels for sm_90 (an H100/H200) without a GPU: the norm and SiLU kernels that quantize
for the block-scaled linear (groups of 128, and one group per row), and the block GEMM in its largest
sweep settings, with split-K summed by the last split and with per-column (per-channel) weight scales.

Run as a script in a process of its own with ``TRITON_INTERPRET=0``: the interpreter accepts code the
compiler refuses and knows nothing of shared memory. Prints one line per variant: its shared memory.
"""

from __future__ import annotations

from typing import Any

import triton
from triton.backends.compiler import GPUTarget

from infercore_triton.fp8_block_gemm import _fp8_block_gemm_kernel
from infercore_triton.fp8_fused_quant import _rms_norm_quant_kernel, _silu_and_mul_quant_kernel

FLOATS = ("eps", "fp8_max", "min_scale")


def compile_kernel(kernel: Any, constants: dict[str, Any], pointers: dict[str, str], num_warps: int,
                   num_stages: int = 3) -> int:
    """Build ``kernel`` for sm_90 with ``constants``; pointers typed by ``pointers`` (default ``*bf16``),
    other arguments int32 (float32 for :data:`FLOATS`). Returns the shared memory it asks for."""
    signature = {}
    for name in kernel.arg_names:
        if name in constants:
            signature[name] = "constexpr"
        elif name.endswith("_ptr"):
            signature[name] = pointers.get(name, "*bf16")
        else:
            signature[name] = "fp32" if name in FLOATS else "i32"
    # A launch on the GPU takes its pointers, sizes and strides as multiples of 16 (and unit strides as the
    # constant 1), which lets the compiler vectorise and pipeline the loads: declare the same.
    aligned = [i for i, name in enumerate(kernel.arg_names)
               if name.endswith("_ptr") or name.startswith("stride_") or name in ("N", "K", "hidden", "inter")]
    source = triton.compiler.ASTSource(fn=kernel, signature=signature, constexprs=constants,
                                       attrs={(i,): [["tt.divisibility", 16]] for i in aligned})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": num_warps, "num_stages": num_stages})
    return compiled.metadata.shared


def main() -> None:
    quant = {"q_ptr": "*fp8e4nv", "scale_ptr": "*fp32"}
    for residual in (False, True):
        for group, block in ((128, 4096), (4096, 4096)):
            shared = compile_kernel(_rms_norm_quant_kernel, {"HAS_RESIDUAL": residual, "GROUP": group, "BLOCK": block},
                                    quant, num_warps=16)
            print(f"rms_norm_quant residual={residual} group={group}: {shared} bytes of shared memory")
    shared = compile_kernel(_silu_and_mul_quant_kernel, {"GROUP": 128, "BLOCK": 1024}, quant, num_warps=4)
    print(f"silu_and_mul_quant group=128: {shared} bytes of shared memory")
    # Per token over the 8B shape's 12288 columns: the whole row in one program of 16 warps.
    shared = compile_kernel(_silu_and_mul_quant_kernel, {"GROUP": 16384, "BLOCK": 16384}, quant, num_warps=16)
    print(f"silu_and_mul_quant group=16384 (per token): {shared} bytes of shared memory")
    gemm = {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "a_scale_ptr": "*fp32", "b_scale_ptr": "*fp32",
            "part_ptr": "*fp32", "counter_ptr": "*i32"}
    for bm, bn, split, warps, stages, per_column in ((16, 32, True, 4, 4, False), (128, 128, False, 8, 5, False),
                                                     (64, 128, True, 8, 4, False), (16, 64, True, 4, 3, True)):
        constants = {"GROUP_N": 1 if per_column else 128, "PER_COLUMN": per_column, "HAS_BIAS": True,
                     "SPLIT": split, "LAST_REDUCES": split, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 128,
                     "stride_ak": 1, "stride_bk": 1, "stride_cn": 1, "stride_ask": 0 if per_column else 1}
        shared = compile_kernel(_fp8_block_gemm_kernel, constants, gemm, num_warps=warps, num_stages=stages)
        print(f"fp8_block_gemm {bm}x{bn} split={split} warps={warps} stages={stages} per_column={per_column}: "
              f"{shared} bytes of shared memory")
        if shared < (stages - 1) * (bm + bn) * 128:
            raise SystemExit(f"fp8_block_gemm {bm}x{bn}: {shared} bytes of shared memory hold fewer than "
                             f"{stages - 1} stages of its tiles: the loads are not pipelined")


if __name__ == "__main__":
    main()
