"""The sort/align step of the fused-MoE kernel: each token's expert slots, grouped by expert, in blocks.

Slots (token ``t``'s ``j``-th expert is slot ``t * top_k + j``) are grouped by expert and each
expert's run is padded to a multiple of the GEMM's row block, so every block of rows belongs to one
expert. Three small kernels do it (count the slots per expert, lay out the padded runs, place each
slot with an atomic cursor of its expert), all on the device with sizes fixed by the batch shape
(no host sync), so decode graphs capture them. The order of slots within an expert's run is not
fixed (atomics); each slot's row is computed on its own, so results do not depend on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl


@dataclass(frozen=True)
class ExpertAlignment:
    """Slots sorted by expert, block-aligned.

    ``sorted_slots`` [S + E * (block_m - 1)] holds slot ids (int32), each expert's run padded with
    ``num_slots`` (no slot); ``block_experts`` [blocks] is the expert of each block of ``block_m``
    entries; ``num_padded`` [1] counts the entries in use (blocks past it hold nothing).
    """

    sorted_slots: torch.Tensor
    block_experts: torch.Tensor
    num_padded: torch.Tensor
    num_slots: int
    block_m: int


@triton.jit(do_not_specialize=["num_slots"])
def _count_kernel(ids_ptr, counts_ptr, num_slots, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < num_slots
    experts = tl.load(ids_ptr + offs, mask=mask, other=0)
    tl.atomic_add(counts_ptr + experts, 1, mask=mask)


@triton.jit(do_not_specialize=["num_blocks"])
def _layout_kernel(counts_ptr, cursors_ptr, block_experts_ptr, num_padded_ptr, num_experts, num_blocks,
                   BLOCK_M: tl.constexpr, BLOCK_E: tl.constexpr, CHUNK: tl.constexpr):
    experts = tl.arange(0, BLOCK_E)
    in_range = experts < num_experts
    counts = tl.load(counts_ptr + experts, mask=in_range, other=0)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    end = tl.cumsum(padded, 0)
    tl.store(cursors_ptr + experts, end - padded, mask=in_range)
    tl.store(num_padded_ptr, tl.sum(padded, 0))
    # Block b belongs to the expert whose run covers row b * BLOCK_M: the number of runs ending at or before it.
    for first in range(0, num_blocks, CHUNK):
        blocks = first + tl.arange(0, CHUNK)
        ended = (end[None, :] <= (blocks * BLOCK_M)[:, None]) & in_range[None, :]
        expert = tl.minimum(tl.sum(ended.to(tl.int32), 1), num_experts - 1)
        tl.store(block_experts_ptr + blocks, expert, mask=blocks < num_blocks)


@triton.jit(do_not_specialize=["num_slots"])
def _place_kernel(ids_ptr, cursors_ptr, sorted_slots_ptr, num_slots, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < num_slots
    experts = tl.load(ids_ptr + offs, mask=mask, other=0)
    position = tl.atomic_add(cursors_ptr + experts, 1, mask=mask)
    tl.store(sorted_slots_ptr + position, offs, mask=mask)


def align_slots_to_experts(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> ExpertAlignment:
    """Group the slots of ``topk_ids`` [T, k] by expert in blocks of ``block_m`` rows."""
    ids = topk_ids.reshape(-1).to(torch.int32)
    num_slots = ids.numel()
    device = ids.device
    capacity = num_slots + num_experts * (block_m - 1)
    num_blocks = triton.cdiv(capacity, block_m)
    counts = torch.zeros(num_experts, dtype=torch.int32, device=device)
    cursors = torch.empty(num_experts, dtype=torch.int32, device=device)
    sorted_slots = torch.full((capacity,), num_slots, dtype=torch.int32, device=device)
    block_experts = torch.empty(num_blocks, dtype=torch.int32, device=device)
    num_padded = torch.empty(1, dtype=torch.int32, device=device)
    block = 256
    grid = (triton.cdiv(num_slots, block),)
    _count_kernel[grid](ids, counts, num_slots, BLOCK=block)
    _layout_kernel[(1,)](counts, cursors, block_experts, num_padded, num_experts, num_blocks, BLOCK_M=block_m,
                         BLOCK_E=max(16, triton.next_power_of_2(num_experts)), CHUNK=32)
    _place_kernel[grid](ids, cursors, sorted_slots, num_slots, BLOCK=block)
    return ExpertAlignment(sorted_slots, block_experts, num_padded, num_slots, block_m)
