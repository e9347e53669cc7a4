"""The Qwen2.5-VL vision tower against transformers' with the same random weights."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2_5_VLConfig
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel

from infercore.models.qwen2_5_vl_vision import Qwen2_5_VisionTransformer, VisionLayout


def tiny_vision_config(intermediate_size: int = 48) -> object:
    return Qwen2_5_VLConfig(vision_config={
        "depth": 3, "hidden_size": 32, "intermediate_size": intermediate_size, "num_heads": 4, "out_hidden_size": 24,
        "fullatt_block_indexes": [1], "window_size": 56, "patch_size": 14, "spatial_merge_size": 2,
        "temporal_patch_size": 2, "in_channels": 3}).vision_config


def test_window_layout_small_grid() -> None:
    # A 4x6 patch grid: 2x3 merge blocks; windows of 2x2 blocks → [blocks 0,1,3,4] then [2,5].
    layout = VisionLayout.build([(1, 4, 6)], merge=2, window_blocks=2)
    assert layout.block_order.tolist() == [0, 1, 3, 4, 2, 5]
    assert layout.window_cu.tolist() == [0, 16, 24]
    assert layout.image_cu.tolist() == [0, 24]
    # Patch 0 of block 2 (third merge block of the first row) is at row 0, column 4.
    assert (layout.rows[16].item(), layout.cols[16].item()) == (0, 4)


@pytest.mark.parametrize(("grids", "intermediate_size"), [([(1, 4, 4)], 48), ([(1, 6, 10), (1, 4, 8)], 48),
                                                          ([(1, 10, 6)], 48), ([(1, 6, 10), (1, 4, 8)], 44)])
def test_tower_matches_transformers(grids: list[tuple[int, int, int]], intermediate_size: int) -> None:
    """44 wide, the MLP holds 48 (zero-padded to a multiple of 8, as 7B's 3420 becomes 3424): the same output."""
    torch.manual_seed(0)
    config = tiny_vision_config(intermediate_size)
    config._attn_implementation = "sdpa"
    hf = Qwen2_5_VisionTransformerPretrainedModel._from_config(config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0, 0.2)
    ours = Qwen2_5_VisionTransformer(config)
    filled = ours.load_weights((n, t.clone()) for n, t in hf.state_dict().items())
    assert filled == {n for n, _ in ours.named_parameters()}
    assert ours.blocks[0].mlp.down_proj.weight.shape[1] == 48
    patches = sum(t * h * w for t, h, w in grids)
    pixels = torch.randn(patches, 3 * 2 * 14 * 14)
    with torch.no_grad():
        expected = hf(pixels, grid_thw=torch.tensor(grids)).pooler_output
        got = ours(pixels, grids)
    assert got.shape == expected.shape == (patches // 4, 24)
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-4)
