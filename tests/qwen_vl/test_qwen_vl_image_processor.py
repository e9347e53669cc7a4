"""The Qwen2.5-VL image processor (no torchvision) against hand-checked values."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from infercore.models.qwen2_5_vl_image import (
    CLIP_MEAN,
    CLIP_STD,
    Qwen2_5_VLImageProcessor,
    QwenVLImageSettings,
    smart_resize,
)


def test_smart_resize_hand_checked() -> None:
    assert smart_resize(448, 448) == (448, 448)  # already multiples of 28
    assert smart_resize(100, 50) == (112, 56)  # rounded to 4 and 2 merge blocks
    assert smart_resize(20, 20) == (56, 56)  # grown to min_pixels = 56²
    # 2000x3000 shrinks by sqrt(6e6 / 1003520) = 2.445 to 817.9 x 1226.9, floored to multiples of 28.
    assert smart_resize(2000, 3000, max_pixels=28 * 28 * 1280) == (812, 1204)
    with pytest.raises(ValueError, match="aspect ratio"):
        smart_resize(10, 3000)


def test_patch_order_is_merge_blocks_then_channel_time_pixel() -> None:
    proc = Qwen2_5_VLImageProcessor(QwenVLImageSettings(patch_size=2, merge_size=2, temporal_patch_size=2))
    c, h, w = 3, 8, 12
    pixels = torch.arange(c * h * w, dtype=torch.float32).reshape(c, h, w)
    patches, grid = proc.patchify(pixels)
    assert grid == (1, 4, 6) and patches.shape == (24, 3 * 2 * 2 * 2)
    gw, m, p = 6, 2, 2
    for row in range(24):
        block, inner = divmod(row, m * m)
        bh, bw = divmod(block, gw // m)
        mh, mw = divmod(inner, m)
        y0, x0 = (bh * m + mh) * p, (bw * m + mw) * p
        expected = [pixels[ch, y0 + py, x0 + px].item() for ch in range(c) for _ in range(2)
                    for py in range(p) for px in range(p)]
        assert patches[row].tolist() == expected


def test_normalisation_grid_and_token_count() -> None:
    proc = Qwen2_5_VLImageProcessor()
    white = np.full((448, 448, 3), 255, dtype=np.uint8)
    out = proc([white, np.zeros((56, 84, 3), dtype=np.uint8)])
    assert out["image_grid_thw"].tolist() == [[1, 32, 32], [1, 4, 6]]
    assert out["pixel_values"].shape == (32 * 32 + 24, 3 * 2 * 14 * 14)
    first = out["pixel_values"][0].view(3, -1)
    for ch in range(3):
        torch.testing.assert_close(first[ch], torch.full_like(first[ch], (1 - CLIP_MEAN[ch]) / CLIP_STD[ch]))
    assert proc.num_image_tokens(448, 448) == 256
    assert proc.num_image_tokens(56, 84) == 6


def test_resize_keeps_a_uniform_image_uniform() -> None:
    proc = Qwen2_5_VLImageProcessor()
    grey = np.full((300, 200, 3), 128, dtype=np.uint8)
    out = proc(grey)
    assert out["image_grid_thw"].tolist() == [[1, 22, 14]]  # 308 x 196
    values = out["pixel_values"].view(-1, 3, 2 * 14 * 14)
    torch.testing.assert_close(values[:, 0], torch.full_like(values[:, 0], (128 / 255 - CLIP_MEAN[0]) / CLIP_STD[0]))


def test_settings_from_model_folder(tmp_path: Path) -> None:
    config = {"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
              "merge_size": 2, "image_mean": list(CLIP_MEAN), "image_std": list(CLIP_STD)}
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(config))
    settings = QwenVLImageSettings.from_model_folder(tmp_path)
    assert settings.max_pixels == 12845056 and settings.merge_size == 2
    size_form = {"size": {"shortest_edge": 784, "longest_edge": 50176}}
    assert QwenVLImageSettings.from_dict(size_form).max_pixels == 50176
    assert QwenVLImageSettings.from_dict(settings.to_dict()) == settings


@pytest.mark.parametrize("size", [(448, 448), (150, 100), (37, 500), (1000, 700)])
def test_matches_transformers_pil_processor(size: tuple[int, int]) -> None:
    image_module = pytest.importorskip("PIL.Image")
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    settings = QwenVLImageSettings(max_pixels=448 * 448)
    hf = Qwen2VLImageProcessorPil(**{k: v for k, v in settings.to_dict().items()
                                     if k not in ("image_processor_type", "processor_class")})
    rng = np.random.default_rng(sum(size))
    image = image_module.fromarray(rng.integers(0, 256, size=(*size, 3), dtype=np.uint8))
    expected = hf(images=[image], return_tensors="pt")
    got = Qwen2_5_VLImageProcessor(settings)([image])
    assert got["image_grid_thw"].tolist() == expected["image_grid_thw"].tolist()
    torch.testing.assert_close(got["pixel_values"], expected["pixel_values"].float(), atol=1e-5, rtol=0)


def test_torch_resize_is_close_to_pil() -> None:
    pytest.importorskip("PIL.Image")
    from infercore.models.qwen2_5_vl_image import resize_bicubic, resize_bicubic_torch

    yy, xx = np.mgrid[0:300, 0:200]
    smooth = np.stack([xx, yy, (xx + yy) // 2], axis=-1).clip(0, 255).astype(np.uint8)
    for height, width in [(308, 196), (112, 84), (448, 448)]:
        diff = np.abs(resize_bicubic(smooth, height, width).astype(int) - resize_bicubic_torch(smooth, height, width))
        assert diff.mean() < 1.0
