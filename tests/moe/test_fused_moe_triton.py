"""The Triton fused-MoE kernel and its sort/align step against the torch reference: in Triton's
interpreter on CPU tensors where there is no GPU (the root conftest switches it on), on the GPU otherwise."""

from __future__ import annotations

import os

import pytest
import torch
from test_fused_moe_op import random_case

from infercore.ops.moe_reference import fused_moe as reference_fused_moe
from infercore.plugins import get_plugin_manager
from infercore_triton.fused_moe import block_sizes, fused_moe
from infercore_triton.fused_moe_align import align_slots_to_experts

DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available() else "cuda"


def test_alignment_groups_slots_by_expert_in_whole_blocks() -> None:
    topk_ids = torch.tensor([[2, 0], [2, 1], [0, 2], [2, 3]], dtype=torch.int32, device=DEVICE)
    align = align_slots_to_experts(topk_ids, num_experts=5, block_m=4)
    slots = align.sorted_slots.tolist()
    # Expert 0: slots 1, 4; expert 1: slot 3; expert 2: slots 0, 2, 5, 6; expert 3: slot 7; expert 4: none.
    # Within a run the order is free; 8 (no slot) pads each run to a whole block of 4.
    runs = [sorted(slots[b:b + 4]) for b in range(0, 16, 4)]
    assert runs == [[1, 4, 8, 8], [3, 8, 8, 8], [0, 2, 5, 6], [7, 8, 8, 8]]
    assert all(s == 8 for s in slots[16:]) and len(slots) == 8 + 5 * 3
    assert int(align.num_padded) == 16
    assert align.block_experts[:4].tolist() == [0, 1, 2, 3]


def test_alignment_skips_experts_no_slot_chose() -> None:
    topk_ids = torch.tensor([[3], [3], [1]], dtype=torch.int32, device=DEVICE)
    align = align_slots_to_experts(topk_ids, num_experts=4, block_m=16)
    assert int(align.num_padded) == 32
    assert align.block_experts[:2].tolist() == [1, 3]
    assert sorted(align.sorted_slots[:16].tolist())[:1] == [2] and sorted(align.sorted_slots[16:32].tolist())[:2] == [0, 1]


@pytest.mark.parametrize(("tokens", "hidden", "inter", "experts", "top_k"), [
    (1, 32, 16, 4, 2),     # one decode token
    (7, 48, 40, 6, 3),     # sizes that are not multiples of the blocks
    (40, 64, 32, 8, 2),    # more slots than 16 per expert: the prefill block size
    (9, 32, 16, 3, 1),     # one expert per row, weight one: how expert parallelism calls it
])
def test_triton_fused_moe_matches_reference(tokens: int, hidden: int, inter: int, experts: int, top_k: int) -> None:
    x, w13, w2, weights, ids = (t.to(DEVICE) for t in random_case(tokens, hidden, inter, experts, top_k, seed=tokens))
    ours = fused_moe(x, w13, w2, weights, ids)
    ref = reference_fused_moe(x, w13, w2, weights, ids)
    assert ours.shape == ref.shape and ours.dtype == ref.dtype
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)


def test_prefill_and_decode_pick_different_row_blocks() -> None:
    assert block_sizes(8, 128, 1536, 2048)[0] == 16
    assert block_sizes(256 * 8 * 4, 128, 1536, 2048)[0] == 64


@pytest.mark.parametrize("platform", ["cuda", "rocm", "xpu"])
def test_registered_for_gpu_platforms(platform: str) -> None:
    assert get_plugin_manager().registry("custom_op").load("fused_moe", platform) is fused_moe
