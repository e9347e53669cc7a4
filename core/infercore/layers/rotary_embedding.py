"""Rotary position embedding with a precomputed cos/sin cache, and the factory that builds one."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from infercore.layers.layernorm import RMSNorm
from infercore.layers.longrope import LONGROPE_TYPES, longrope_cos_sin_cache
from infercore.layers.rope_frequencies import FREQUENCY_FUNCTIONS, base_inv_freq
from infercore.ops import get_op


class RotaryEmbedding(nn.Module):
    """Rotates q and k by their token positions. The cache is [max_position, rotary_dim] = cat(cos, sin)."""

    def __init__(self, head_size: int, rotary_dim: int, max_position: int, inv_freq: torch.Tensor,
                 attention_factor: float, dtype: torch.dtype, is_neox: bool = True) -> None:
        super().__init__()
        self.head_size = head_size
        self.rotary_dim = rotary_dim
        self.is_neox = is_neox
        angles = torch.outer(torch.arange(max_position, dtype=torch.float32), inv_freq)
        cache = torch.cat((angles.cos(), angles.sin()), dim=-1) * attention_factor
        self.register_buffer("cos_sin_cache", cache.to(dtype), persistent=False)
        self._op = get_op("rotary_embedding")
        self._qk_norm_op = get_op("qk_norm_rotary")

    @property
    def is_full(self) -> bool:
        """Whether every feature of a head rotates (``rotary_dim == head_size``)."""
        return self.rotary_dim == self.head_size

    def forward(self, positions: torch.Tensor, q: torch.Tensor,
                k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate ``q`` [T, heads*head_size] and ``k`` [T, kv_heads*head_size] by ``positions`` [T].

        Returns the rotated pair; a platform kernel may rotate in place and return its inputs.
        """
        return self._op(positions, q, k, self.cos_sin_cache, self.head_size, self.is_neox)

    def forward_with_qk_norm(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                             q_norm: RMSNorm, k_norm: RMSNorm) -> tuple[torch.Tensor, torch.Tensor]:
        """RMSNorm each head of ``q`` and ``k`` (Qwen3's q/k norm), then rotate them, in one op.

        ``q`` and ``k`` may be row-strided column slices of the fused QKV projection; they are
        updated in place and returned. Needs full rotary (:attr:`is_full`) and one ``eps`` for both norms.
        """
        if not self.is_full:
            raise ValueError(f"forward_with_qk_norm needs full rotary; rotary_dim is {self.rotary_dim} "
                             f"for head size {self.head_size}")
        if q_norm.eps != k_norm.eps:
            raise ValueError(f"q and k norms must share eps to be fused; got {q_norm.eps} and {k_norm.eps}")
        return self._qk_norm_op(positions, q, k, q_norm.weight, k_norm.weight, q_norm.eps,
                                self.cos_sin_cache, self.head_size, self.is_neox)


def get_rope(head_size: int, rotary_dim: int, max_position: int, base: float,
             rope_scaling: dict[str, Any] | None, dtype: torch.dtype, is_neox: bool = True) -> RotaryEmbedding:
    """Build the rotary embedding for a rope scaling dict in HF's format (``rope_type`` or ``type``:
    default, linear, llama3, yarn or longrope). Linear and YaRN extend the cache to ``max_position * factor``."""
    params = dict(rope_scaling or {})
    rope_type = params.get("rope_type") or params.get("type") or "default"
    if rope_type in LONGROPE_TYPES:
        rope = RotaryEmbedding(head_size, rotary_dim, 1, base_inv_freq(rotary_dim, base), 1.0, dtype, is_neox)
        rope.cos_sin_cache = longrope_cos_sin_cache(rotary_dim, base, max_position, params).to(dtype)
        return rope
    if rope_type not in FREQUENCY_FUNCTIONS:
        raise ValueError(f"rope scaling type {rope_type!r} is not supported; supported types: "
                         f"{', '.join(sorted([*FREQUENCY_FUNCTIONS, *LONGROPE_TYPES]))}")
    inv_freq, attention_factor = FREQUENCY_FUNCTIONS[rope_type](rotary_dim, base, max_position, params)
    length = max_position
    if rope_type in ("linear", "yarn") and params.get("factor"):
        length = max(max_position, int(max_position * float(params["factor"])))
    return RotaryEmbedding(head_size, rotary_dim, length, inv_freq, attention_factor, dtype, is_neox)
