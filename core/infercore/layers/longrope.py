"""LongRoPE (Phi-3's ``longrope``, once called ``su``): per-frequency rescaling, short and long sets.

Positions below ``original_max_position_embeddings`` rotate with the ``short_factor`` set and
later positions with ``long_factor``; cos and sin are scaled by the attention factor
(``sqrt(1 + ln(factor) / ln(original))`` unless the config gives one). HF switches every position
of a sequence to the long set once the sequence passes the original length; the two agree on any
sequence within it.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from infercore.layers.rope_frequencies import base_inv_freq

LONGROPE_TYPES = ("longrope", "su")


def _factors(params: dict[str, Any], key: str, rotary_dim: int) -> torch.Tensor:
    values = params.get(key)
    if values is None or len(values) != rotary_dim // 2:
        got = "none" if values is None else f"{len(values)}"
        raise ValueError(f"longrope needs {key} with {rotary_dim // 2} entries (one per rotary frequency), got "
                         f"{got}; the config's rope scaling does not match the model's head size")
    return torch.tensor(values, dtype=torch.float32)


def longrope_attention_factor(params: dict[str, Any], max_position: int, original: int) -> float:
    """The config's ``attention_factor``, or the one LongRoPE derives from the context extension."""
    if params.get("attention_factor") is not None:
        return float(params["attention_factor"])
    factor = float(params.get("factor") or max_position / original)
    return 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))


def longrope_cos_sin_cache(rotary_dim: int, base: float, max_position: int,
                           params: dict[str, Any]) -> torch.Tensor:
    """The [max(max_position, original), rotary_dim] ``cat(cos, sin)`` cache, short set then long set."""
    original = int(params.get("original_max_position_embeddings") or max_position)
    scale = longrope_attention_factor(params, max_position, original)
    inv = base_inv_freq(rotary_dim, base)
    short = inv / _factors(params, "short_factor", rotary_dim)
    long = inv / _factors(params, "long_factor", rotary_dim)
    positions = torch.arange(max(max_position, original), dtype=torch.float32)
    inv_per_position = torch.where((positions < original).unsqueeze(-1), short, long)
    angles = positions.unsqueeze(-1) * inv_per_position
    return torch.cat((angles.cos(), angles.sin()), dim=-1) * scale
