"""Compiles the fused q/k-norm + rotary + KV write kernel, and the unfused q/k-norm + rotary kernel that
shares its per-head helper, for sm_90 (an H100/H200) without a GPU.

Run as a script in a process of its own with ``TRITON_INTERPRET=0``: the interpreter accepts code that
the compiler refuses, so this is what shows the kernel builds for the device. Prints one line per variant.
"""

from __future__ import annotations

import triton
from triton.backends.compiler import GPUTarget

from infercore_triton.qk_norm_rotary import _qk_norm_rotary_kernel
from infercore_triton.qk_norm_rotary_kv_write import _qk_norm_rotary_kv_write_kernel

#: The W-GPU model's attention (Qwen3-0.6B: 16 query heads, 8 KV heads of 128), 16-token pages.
SHAPE = {"HEAD": 128, "HALF": 64, "HALF_PAD": 64, "Q_BLOCK_HEADS": 16, "K_BLOCK_HEADS": 8, "ROW": 1024,
         "ROW_PAD": 1024, "PAGE": 16, "FP8_MAX": 448.0}
POINTERS = ("positions_ptr", "slot_ptr", "q_ptr", "k_ptr", "v_ptr", "q_weight_ptr", "k_weight_ptr",
            "cos_sin_ptr")
INTS = ("stride_qt", "stride_kt", "stride_vt", "stride_cos_sin", "stride_cache_block", "stride_cache_slot",
        "num_q_heads", "num_kv_heads")


def compile_variant(cache_type: str, fp8: bool, is_neox: bool) -> int:
    """Build one variant for sm_90 over bf16 activations; returns the size of its cubin."""
    signature = {name: "*i64" if name in ("positions_ptr", "slot_ptr") else "*bf16" for name in POINTERS}
    signature |= {"k_cache_ptr": cache_type, "v_cache_ptr": cache_type}
    signature |= {name: "i32" for name in INTS} | {"eps": "fp32", "k_scale": "fp32", "v_scale": "fp32"}
    constants = {**SHAPE, "IS_NEOX": is_neox, "FP8": fp8}
    signature |= {name: "constexpr" for name in constants}
    source = triton.compiler.ASTSource(fn=_qk_norm_rotary_kv_write_kernel, signature=signature, constexprs=constants)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    return len(compiled.asm["cubin"])


def compile_unfused(is_neox: bool) -> int:
    """Build the in-place q/k-norm + rotary kernel for sm_90 over bf16 activations; returns its cubin's size."""
    signature = {"positions_ptr": "*i64", "q_ptr": "*bf16", "k_ptr": "*bf16", "q_weight_ptr": "*bf16",
                 "k_weight_ptr": "*bf16", "cache_ptr": "*bf16"}
    signature |= {name: "i32" for name in ("stride_qt", "stride_kt", "stride_cache", "num_q_heads", "num_k_heads")}
    signature |= {"eps": "fp32"}
    constants = {"HEAD": 128, "HALF": 64, "HALF_PAD": 64, "Q_BLOCK_HEADS": 16, "K_BLOCK_HEADS": 8, "IS_NEOX": is_neox}
    signature |= {name: "constexpr" for name in constants}
    source = triton.compiler.ASTSource(fn=_qk_norm_rotary_kernel, signature=signature, constexprs=constants)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    return len(compiled.asm["cubin"])


if __name__ == "__main__":
    for cache_type, fp8, is_neox in (("*bf16", False, True), ("*fp8e4nv", True, False)):
        print(f"sm_90 {cache_type} neox={is_neox}: {compile_variant(cache_type, fp8, is_neox)} bytes of cubin")
    print(f"sm_90 unfused neox=True: {compile_unfused(True)} bytes of cubin")
