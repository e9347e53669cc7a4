"""Compiles the FP8 fused-MoE grouped GEMM for sm_90 (an H100/H200) without a GPU, in the default settings
and the sweep's largest: both GEMMs (gate/up with its per-half block rows, down with the routing weight).

Run as a script in a process of its own with ``TRITON_INTERPRET=0``: the interpreter accepts code the
compiler refuses and knows nothing of shared memory. Prints one line per variant: its shared memory.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "triton"))

from compile_fp8_sm90 import compile_kernel  # noqa: E402

from infercore_triton.fused_moe_fp8 import _fp8_grouped_gemm_kernel  # noqa: E402

POINTERS = {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "a_scale_ptr": "*fp32", "b_scale_ptr": "*fp32",
            "weights_ptr": "*fp32", "sorted_slots_ptr": "*i32", "block_experts_ptr": "*i32",
            "num_padded_ptr": "*i32"}
#: (rows per A row, weighted, BLOCK_M, BLOCK_N, warps, stages): the defaults (decode, prefill) and the
#: sweep's widest and deepest.
VARIANTS = ((8, False, 16, 64, 4, 3), (1, True, 16, 64, 4, 3), (8, False, 64, 128, 4, 3), (1, True, 64, 128, 4, 3),
            (8, False, 128, 128, 8, 3), (1, True, 64, 128, 4, 4))


def main() -> None:
    for rows_per_a, weighted, bm, bn, warps, stages in VARIANTS:
        constants = {"ROWS_PER_A": rows_per_a, "MUL_WEIGHT": weighted, "GROUP_N": 128, "BLOCK_M": bm,
                     "BLOCK_N": bn, "BLOCK_K": 128, "GROUP_M": 8, "stride_bsk": 1}
        shared = compile_kernel(_fp8_grouped_gemm_kernel, constants, POINTERS, num_warps=warps, num_stages=stages)
        print(f"fp8_grouped_gemm {bm}x{bn} rows_per_a={rows_per_a} weighted={weighted} warps={warps} "
              f"stages={stages}: {shared} bytes of shared memory")
        if shared < (stages - 1) * (bm + bn) * 128:
            raise SystemExit(f"fp8_grouped_gemm {bm}x{bn}: {shared} bytes of shared memory hold fewer than "
                             f"{stages - 1} stages of its tiles: the loads are not pipelined")


if __name__ == "__main__":
    main()
