"""KV cache scales from a checkpoint reach each Attention layer and, through the binding, its impl."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from fp8_cases import with_kv_scales

from infercore.attention.binding import attention_layers, bind_attention
from infercore.attention.reference_backend import ReferenceAttentionBackend
from infercore.config import InfercoreConfig
from infercore.kv_cache.fp8 import FP8_KV_DTYPE
from infercore.models.loader import load_model


def _load(folder: Path) -> torch.nn.Module:
    config = InfercoreConfig.from_kwargs(model=str(folder), dtype="float32", kv_cache_dtype="fp8")
    return load_model(config, torch.device("cpu"), torch.float32)


def test_scales_in_every_naming_reach_the_layers_and_their_impls(checkpoint_folder: Path, tmp_path: Path) -> None:
    folder = with_kv_scales(checkpoint_folder, tmp_path / "scaled", {
        "model.layers.0.self_attn.k_scale": torch.tensor(0.02),
        "model.layers.0.self_attn.v_scale": torch.tensor([0.03]),
        "model.layers.1.self_attn.kv_scale": torch.tensor(0.05),
    })
    layers = attention_layers(_load(folder))
    assert [s for m in layers for s in (m.k_scale, m.v_scale)] == pytest.approx([0.02, 0.03, 0.05, 0.05])
    model = _load(folder)
    caches = [torch.zeros(2, 4, 16, 2, 16, dtype=FP8_KV_DTYPE) for _ in layers]
    bind_attention(model, ReferenceAttentionBackend, caches, torch.float32)
    specs = [m.impl.spec for m in attention_layers(model)]
    assert [x for s in specs for x in (s.k_scale, s.v_scale)] == pytest.approx([0.02, 0.03, 0.05, 0.05])
    assert all(s.kv_cache_dtype == FP8_KV_DTYPE for s in specs)


def test_output_scale_names_and_missing_scales(checkpoint_folder: Path, tmp_path: Path) -> None:
    folder = with_kv_scales(checkpoint_folder, tmp_path / "output-scale", {
        "model.layers.1.self_attn.k_proj.output_scale": torch.tensor([0.5]),
        "model.layers.1.self_attn.v_proj.output_scale": torch.tensor([0.25]),
    })
    layers = attention_layers(_load(folder))
    # Layer 0 has no scales in the checkpoint: 1.0.
    assert [(m.k_scale, m.v_scale) for m in layers] == [(1.0, 1.0), (0.5, 0.25)]


def test_a_corrupt_scale_is_refused_naming_the_tensor(checkpoint_folder: Path, tmp_path: Path) -> None:
    folder = with_kv_scales(checkpoint_folder, tmp_path / "corrupt",
                            {"model.layers.0.self_attn.v_scale": torch.tensor(-1.0)})
    with pytest.raises(ValueError, match=r"'model.layers.0.self_attn.v_scale' is a KV cache scale of -1.0"):
        _load(folder)
