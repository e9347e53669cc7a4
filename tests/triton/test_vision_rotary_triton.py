"""The Qwen2.5-VL tower's 2D rotary through the Triton ``rotary_embedding`` kernel (interpreted): it rotates the
q and k heads in place inside the fused QKV output (row-strided views) and the tower's output equals the
one the torch reference op gives."""

from __future__ import annotations

import torch
from transformers import Qwen2_5_VLConfig

from infercore.models.qwen2_5_vl_vision import Qwen2_5_VisionTransformer
from infercore_triton.rotary import rotary_embedding


def _tower() -> Qwen2_5_VisionTransformer:
    config = Qwen2_5_VLConfig(vision_config={
        "depth": 2, "hidden_size": 32, "intermediate_size": 48, "num_heads": 2, "out_hidden_size": 24,
        "fullatt_block_indexes": [1], "window_size": 56, "patch_size": 14, "spatial_merge_size": 2,
        "temporal_patch_size": 2, "in_channels": 3}).vision_config
    torch.manual_seed(0)
    tower = Qwen2_5_VisionTransformer(config).eval()
    with torch.no_grad():
        for p in tower.parameters():
            p.normal_(0, 0.2)
    return tower


@torch.inference_mode()
def test_tower_rotary_through_the_triton_kernel() -> None:
    tower = _tower()
    grids = [(1, 4, 6), (1, 2, 4)]
    pixels = torch.randn(sum(t * h * w for t, h, w in grids), tower.patch_dim)
    want = tower(pixels, grids)
    strided = []

    def kernel(positions, q, k, table, head_size, is_neox):  # noqa: ANN001, ANN202
        strided.append(q.stride(0) > q.shape[1] and k.stride(0) > k.shape[1])
        return rotary_embedding(positions, q, k, table, head_size, is_neox)

    for block in tower.blocks:
        block.attn._rotary = kernel
    got = tower(pixels, grids)
    assert strided and all(strided), "the kernel should rotate the heads inside the fused QKV output"
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
