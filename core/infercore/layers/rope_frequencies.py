"""Inverse frequencies of rotary embeddings for each rope scaling type (HF ``rope_type`` semantics).

Each function returns ``(inv_freq [rotary_dim // 2], attention_factor)``; the attention factor
scales cos and sin (only YaRN uses it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

RopeParams = dict[str, Any]


def base_inv_freq(rotary_dim: int, base: float) -> torch.Tensor:
    return 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim))


def default_frequencies(rotary_dim: int, base: float, max_position: int,
                        params: RopeParams) -> tuple[torch.Tensor, float]:
    return base_inv_freq(rotary_dim, base), 1.0


def linear_frequencies(rotary_dim: int, base: float, max_position: int,
                       params: RopeParams) -> tuple[torch.Tensor, float]:
    """Position interpolation: every frequency slowed by ``factor``."""
    return base_inv_freq(rotary_dim, base) / float(params["factor"]), 1.0


def llama3_frequencies(rotary_dim: int, base: float, max_position: int,
                       params: RopeParams) -> tuple[torch.Tensor, float]:
    """Llama 3.1: long wavelengths slowed by ``factor``, short ones kept, a smooth blend between."""
    inv_freq = base_inv_freq(rotary_dim, base)
    factor = float(params["factor"])
    low_freq_factor = float(params["low_freq_factor"])
    high_freq_factor = float(params["high_freq_factor"])
    old_len = float(params["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    smooth = (old_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    out = torch.where(wavelen > old_len / low_freq_factor, inv_freq / factor, blended)
    return torch.where(wavelen < old_len / high_freq_factor, inv_freq, out), 1.0


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_correction_dim(num_rotations: float, rotary_dim: int, base: float, original_len: int) -> float:
    return rotary_dim * math.log(original_len / (num_rotations * 2 * math.pi)) / (2 * math.log(base))


def yarn_frequencies(rotary_dim: int, base: float, max_position: int,
                     params: RopeParams) -> tuple[torch.Tensor, float]:
    """YaRN: interpolate low frequencies, extrapolate high ones, ramp between; scale attention."""
    original_len = int(params.get("original_max_position_embeddings") or max_position)
    factor = params.get("factor") or max_position / original_len
    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            attention_factor = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim)
        else:
            attention_factor = _yarn_mscale(factor)
    beta_fast = params.get("beta_fast") or 32
    beta_slow = params.get("beta_slow") or 1
    low = _yarn_correction_dim(beta_fast, rotary_dim, base, original_len)
    high = _yarn_correction_dim(beta_slow, rotary_dim, base, original_len)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rotary_dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(rotary_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extrapolation_weight = 1 - ramp
    inv_freq = base_inv_freq(rotary_dim, base)
    mixed = inv_freq / factor * (1 - extrapolation_weight) + inv_freq * extrapolation_weight
    return mixed, float(attention_factor)


FREQUENCY_FUNCTIONS: dict[str, Callable[[int, float, int, RopeParams], tuple[torch.Tensor, float]]] = {
    "default": default_frequencies,
    "linear": linear_frequencies,
    "llama3": llama3_frequencies,
    "yarn": yarn_frequencies,
}
