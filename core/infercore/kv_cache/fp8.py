"""FP8 (e4m3) KV cache entries: the dtype names, and how a value is stored and read back.

An fp8 cache holds ``K / k_scale`` (and ``V / v_scale``) rounded to float8 e4m3 after saturating to the
format's largest finite value, 448; reading multiplies by the scale again. The scales are per tensor,
one for K and one for V per attention layer, from the checkpoint or 1.0. Kernels must quantize the same
way (divide in float32, clamp, round to nearest) so that their caches match this reference bit for bit.
"""

from __future__ import annotations

import torch

#: The storage dtype of an fp8 KV cache.
FP8_KV_DTYPE = torch.float8_e4m3fn
#: Largest finite e4m3 value: stored values saturate here instead of overflowing to NaN.
FP8_KV_MAX = float(torch.finfo(FP8_KV_DTYPE).max)
#: ``--kv-cache-dtype`` names of the fp8 cache.
FP8_KV_NAMES = ("fp8", "fp8_e4m3")


def is_fp8_kv(dtype: torch.dtype) -> bool:
    """Whether a cache of ``dtype`` stores scaled fp8 entries."""
    return dtype == FP8_KV_DTYPE


def kv_cache_dtype(name: str, model_dtype: torch.dtype) -> torch.dtype:
    """The cache dtype for a ``--kv-cache-dtype`` name: ``auto`` is the model's, ``fp8`` is e4m3."""
    if name == "auto":
        return model_dtype
    if name in FP8_KV_NAMES:
        return FP8_KV_DTYPE
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"kv_cache_dtype {name!r} is not a dtype; use auto, float32, bfloat16, float16 or fp8")
    return dtype


def quantize_kv(x: torch.Tensor, scale: float) -> torch.Tensor:
    """``x / scale`` in float32, saturated to +-448, rounded to e4m3."""
    return (x.float() / scale).clamp(-FP8_KV_MAX, FP8_KV_MAX).to(FP8_KV_DTYPE)


def dequantize_kv(x: torch.Tensor, scale: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Stored fp8 entries back in ``dtype``: ``x * scale``, computed in float32."""
    return (x.float() * scale).to(dtype)


def validate_kv_scale(name: str, value: float, layer_index: int) -> None:
    """An error naming the layer when a KV scale is not a positive finite number."""
    if not (value > 0.0 and value != float("inf")):
        raise ValueError(f"attention layer {layer_index}: {name} must be a positive finite number, got {value}; "
                         "the checkpoint's KV cache scales are corrupt")
