"""Compiles the ``lora_apply`` kernels for sm_90 (an H100/H200) without a GPU, with the launch settings
``infercore_triton.lora`` picks at the W-GPU and 8B shapes' projections (rank 16) for decode and prompt
steps.

Run as a script in a process of its own with ``TRITON_INTERPRET=0``: the interpreter accepts code the
compiler refuses. Prints one line per variant: its shared memory.
"""

from __future__ import annotations

from typing import Any

import triton
from triton.backends.compiler import GPUTarget

from infercore.lora.step_state import max_tiles, tile_rows
from infercore_triton.lora import SGMV_MAX_SPLITS, _expand_block_n, bgmv_settings, sgmv_settings
from infercore_triton.lora_bgmv import bgmv_expand_kernel, bgmv_shrink_kernel
from infercore_triton.lora_fused import bgmv_fused_kernel, default_settings, rank_block
from infercore_triton.lora_sgmv import sgmv_expand_kernel, sgmv_shrink_kernel

#: (hidden, output slices) of the projections: W-GPU's and the 8B shape's q/k/v, o, gate/up, down.
SHAPES = [(1024, (2048, 1024, 1024)), (2048, (1024,)), (1024, (3072, 3072)), (3072, (1024,)),
          (4096, (4096, 1024, 1024)), (4096, (4096,)), (4096, (12288, 12288)), (12288, (4096,))]
POINTERS = {"part_ptr": "*fp32", "slots_ptr": "*i32", "sorted_ptr": "*i32", "tiles_ptr": "*i32"}
RANK = 16


def compile_kernel(kernel: Any, constants: dict[str, Any]) -> int:
    """Build ``kernel`` over bf16 activations for sm_90 (``constants`` may hold ``num_warps``, default 4);
    returns the shared memory it asks for."""
    constants = dict(constants)
    options = {"num_warps": constants.pop("num_warps", 4)}
    signature = {name: "constexpr" if name in constants else
                 POINTERS.get(name, "*bf16") if name.endswith("_ptr") else "i32" for name in kernel.arg_names}
    aligned = [i for i, name in enumerate(kernel.arg_names) if name.endswith("_ptr")]
    source = triton.compiler.ASTSource(fn=kernel, signature=signature, constexprs=constants,
                                       attrs={(i,): [["tt.divisibility", 16]] for i in aligned})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    return compiled.metadata.shared


def variants() -> dict[str, tuple[Any, dict[str, Any]]]:
    """Every distinct kernel variant the shapes launch, by name."""
    out: dict[str, tuple[Any, dict[str, Any]]] = {}
    for hidden, sizes in SHAPES:
        nr, slices = len(sizes) * RANK, len(sizes)
        block_n, block_k, splits = bgmv_settings(hidden, nr)
        consts: dict[str, Any] = {"BLOCK_N": block_n, "BLOCK_K": block_k}
        out[f"bgmv_shrink {consts}"] = (bgmv_shrink_kernel, consts)
        consts = {"NUM_SLICES": slices, "BLOCK_N": _expand_block_n(RANK), "BLOCK_R": RANK,
                  "SPLITS": triton.next_power_of_2(splits)}
        out[f"bgmv_expand {consts}"] = (bgmv_expand_kernel, consts)
        for rank in (RANK, 64):  # the fused kernel at the default rule's settings (the rule or a table picks it)
            fused = default_settings(hidden, rank, sum(sizes))
            consts = {"NUM_SLICES": slices, "BLOCK_N": fused.block_n, "BLOCK_K": fused.block_k,
                      "BLOCK_R": rank_block(rank), "K_ITERS": fused.k_iters(hidden)}
            consts["USE_PDL"] = rank == RANK  # as a measured table may launch it
            out[f"bgmv_fused {consts}"] = (bgmv_fused_kernel, {**consts, "num_warps": fused.num_warps})
        for tokens in (64, 256, 8192):
            rows = tile_rows(tokens)
            block_n, block_k, _, _ = sgmv_settings(max_tiles(tokens, 8), hidden, nr)
            consts = {"BLOCK_M": rows, "BLOCK_N": block_n, "BLOCK_K": block_k, "IEEE": False}
            out[f"sgmv_shrink {consts}"] = (sgmv_shrink_kernel, consts)
            consts = {"NUM_SLICES": slices, "MAX_SPLITS": SGMV_MAX_SPLITS, "BLOCK_M": rows,
                      "BLOCK_N": _expand_block_n(RANK), "BLOCK_R": RANK, "IEEE": False}
            out[f"sgmv_expand {consts}"] = (sgmv_expand_kernel, consts)
    return out


if __name__ == "__main__":
    import sys

    chosen = variants()
    if "--one-each" in sys.argv:  # the five kernels, each at the W-GPU q/k/v projection's largest tiles
        chosen = {name: v for name, v in chosen.items() if "NUM_SLICES': 3" in name or "shrink" in name}
        chosen = {kind: next(v for name, v in reversed(list(chosen.items())) if name.startswith(kind))
                  for kind in ("bgmv_shrink", "bgmv_expand", "bgmv_fused", "sgmv_shrink", "sgmv_expand")}
    for name, (kernel, constants) in chosen.items():
        print(f"{name}: {compile_kernel(kernel, constants)} bytes of shared memory")
