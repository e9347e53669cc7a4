"""Compiles the prefill kernel with each of its Hopper launch configurations for sm_90 (an H100/H200)
without a GPU, over a bf16 cache and, for the W-GPU model's head size, an fp8 one and the uniform grid
of a captured mixed step.

Run as a script in a process of its own with ``TRITON_INTERPRET=0``: the interpreter accepts code the
compiler refuses and knows nothing of shared memory. Prints one line per variant: its shared memory.
"""

from __future__ import annotations

import triton
from triton.backends.compiler import GPUTarget

from infercore_triton.prefill_attention import _HOPPER, PrefillConfig, _prefill_kernel

FLOATS = ("scale", "v_scale")
STEP_VARYING = ("block_table_ptr", "seq_lens_ptr", "query_start_loc_ptr", "visible_ptr", "stride_bt", "num_reqs")
#: The W-GPU model's KV groups are 2 query heads; pages of 16 tokens.
GROUP, PAGE = 2, 16


def compile_variant(config: PrefillConfig, head_pad: int, cache_type: str, windowed: bool,
                    uniform_grid: bool = False, bounded: bool = False) -> int:
    """Build one variant over bf16 activations for sm_90; returns the shared memory it asks for."""
    pack = config.heads_per_program(GROUP)
    constants = {"GROUP": GROUP, "PACK": pack, "HEAD": head_pad, "HEAD_PAD": head_pad, "PAGE": PAGE,
                 "BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "DOT_PRECISION": "ieee",
                 "WINDOWED": windowed, "M_BLOCKS_INNER": config.m_blocks_inner,
                 "UNIFORM_GRID": uniform_grid, "BOUNDED": bounded, "SHORT": 1}
    signature = {}
    for name in _prefill_kernel.arg_names:
        if name in constants:
            signature[name] = "constexpr"
        elif name.endswith("_ptr"):
            signature[name] = {"k_cache_ptr": cache_type, "v_cache_ptr": cache_type}.get(
                name, "*i32" if name in ("block_table_ptr", "seq_lens_ptr", "query_start_loc_ptr", "visible_ptr") else "*bf16")
        else:
            signature[name] = "fp32" if name in FLOATS else "i32"
    # A launch on the GPU takes its pointers and strides (but not the step-varying ones) as multiples of
    # 16, which lets the compiler vectorise and pipeline the K/V loads: declare the same.
    aligned = [i for i, name in enumerate(_prefill_kernel.arg_names)
               if (name.endswith("_ptr") or name.startswith("stride_")) and name not in STEP_VARYING]
    source = triton.compiler.ASTSource(fn=_prefill_kernel, signature=signature, constexprs=constants,
                                       attrs={(i,): [["tt.divisibility", 16]] for i in aligned})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": config.num_warps, "num_stages": config.num_stages})
    return compiled.metadata.shared


if __name__ == "__main__":
    for (group, head_pad), config in sorted(_HOPPER.items()):
        print(f"sm_90 {group} {head_pad} *bf16: {compile_variant(config, head_pad, '*bf16', False)} bytes of shared memory")
    w_gpu = _HOPPER[(1, 128)]
    print(f"sm_90 1 128 *fp8e4nv: {compile_variant(w_gpu, 128, '*fp8e4nv', False)} bytes of shared memory")
    print(f"sm_90 1 128 *bf16 uniform grid: {compile_variant(w_gpu, 128, '*bf16', False, True)} bytes of shared memory")
    # Gemma 3 with images: visibility bounds, head 256, sliding window, plain and uniform grids.
    gemma = _HOPPER[(1, 256)]
    print(f"sm_90 2 256 *bf16 bounded window: {compile_variant(gemma, 256, '*bf16', True, False, True)} bytes of "
          "shared memory")
    print(f"sm_90 2 256 *bf16 bounded uniform grid: {compile_variant(gemma, 256, '*bf16', False, True, True)} bytes "
          "of shared memory")
