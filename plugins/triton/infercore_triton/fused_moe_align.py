"""The sort/align step of the fused-MoE kernel: each token's expert slots, grouped by expert, in blocks.

Slots (token ``t``'s ``j``-th expert is slot ``t * top_k + j``) are sorted by expert and each
expert's run is padded to a multiple of the GEMM's row block, so every block of rows belongs to one
expert. Everything stays on the device with sizes fixed by the batch shape (no host sync), so the
step can be captured in a device graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


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


def align_slots_to_experts(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> ExpertAlignment:
    """Group the slots of ``topk_ids`` [T, k] by expert in blocks of ``block_m`` rows."""
    flat = topk_ids.reshape(-1).to(torch.int64)
    num_slots = flat.numel()
    counts = torch.zeros(num_experts, dtype=torch.int64, device=flat.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    padded_end = torch.cumsum(padded, 0)
    padded_start = padded_end - padded
    start = torch.cumsum(counts, 0) - counts
    sorted_experts, order = torch.sort(flat, stable=True)
    rank = torch.arange(num_slots, device=flat.device) - start[sorted_experts]
    capacity = num_slots + num_experts * (block_m - 1)
    sorted_slots = torch.full((capacity,), num_slots, dtype=torch.int32, device=flat.device)
    sorted_slots[padded_start[sorted_experts] + rank] = order.to(torch.int32)
    num_blocks = -(-capacity // block_m)
    block_starts = torch.arange(num_blocks, device=flat.device) * block_m
    block_experts = torch.searchsorted(padded_end, block_starts, right=True).clamp_(max=num_experts - 1)
    return ExpertAlignment(sorted_slots, block_experts.to(torch.int32), padded_end[-1:].to(torch.int32),
                           num_slots, block_m)
