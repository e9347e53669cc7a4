"""The fp8 KV cache format: names, quantization with saturation, scale checks and the block size in bytes."""

from __future__ import annotations

import pytest
import torch

from infercore.attention.spec import AttentionLayerSpec
from infercore.config import InfercoreConfig
from infercore.kv_cache.fp8 import FP8_KV_DTYPE, dequantize_kv, kv_cache_dtype, quantize_kv
from infercore.kv_cache.spec import KVCacheSpec


@pytest.mark.parametrize("name", ["fp8", "fp8_e4m3"])
def test_fp8_names_are_e4m3_and_the_config_takes_them(name: str) -> None:
    assert kv_cache_dtype(name, torch.bfloat16) == torch.float8_e4m3fn
    assert InfercoreConfig.from_kwargs(model="m", kv_cache_dtype=name).cache.kv_cache_dtype == name
    assert kv_cache_dtype("auto", torch.bfloat16) == torch.bfloat16
    assert kv_cache_dtype("float16", torch.bfloat16) == torch.float16


def test_quantize_divides_by_the_scale_and_saturates() -> None:
    x = torch.tensor([0.0, 1.0, -3.0, 200.0, -1e6, 0.3])
    stored = quantize_kv(x, 0.25)
    assert stored.dtype == FP8_KV_DTYPE
    assert stored.float().tolist()[:5] == [0.0, 4.0, -12.0, 448.0, -448.0]
    back = dequantize_kv(stored, 0.25)
    assert back[:3].tolist() == [0.0, 1.0, -3.0] and back[3] == 112.0 and back[4] == -112.0
    # e4m3 keeps 3 mantissa bits: a value is back within half a step (1/16 relative).
    assert abs(float(back[5]) - 0.3) <= 0.3 / 16


def test_an_fp8_block_takes_half_the_bytes_of_bf16() -> None:
    bf16 = KVCacheSpec(16, 8, 128, torch.bfloat16).page_size_bytes
    fp8 = KVCacheSpec(16, 8, 128, FP8_KV_DTYPE).page_size_bytes
    assert fp8 == 2 * 16 * 8 * 128 and bf16 == 2 * fp8


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_layer_spec_refuses_a_bad_kv_scale(bad: float) -> None:
    with pytest.raises(ValueError, match="layer 3: v_scale must be a positive finite number"):
        AttentionLayerSpec(num_heads=4, head_size=16, num_kv_heads=2, scale=0.25, layer_index=3, v_scale=bad)
