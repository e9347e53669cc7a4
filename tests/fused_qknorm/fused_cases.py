"""Inputs of the fused q/k-norm + rotary + KV write and the unfused path it replaces, on any device."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infercore_triton.kv_cache_write import write_kv
from infercore_triton.qk_norm_rotary import qk_norm_rotary


@dataclass
class FusedCase:
    """One step's fused QKV output (q/k/v are its row-strided column slices) over a paged cache."""

    positions: torch.Tensor
    qkv: torch.Tensor
    q_weight: torch.Tensor
    k_weight: torch.Tensor
    cos_sin_cache: torch.Tensor
    kv_cache: torch.Tensor
    slot_mapping: torch.Tensor
    heads: int
    kv_heads: int
    head_size: int

    def split(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v as column slices of ``qkv``, as the model's fused projection yields them."""
        q_size, kv_size = self.heads * self.head_size, self.kv_heads * self.head_size
        q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)
        return q, k, v


def rope_cache(rot_dim: int, max_position: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    """``cat(cos, sin)`` per position with Llama's default frequencies."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, rot_dim, 2, device=device).float() / rot_dim))
    angles = torch.arange(max_position, device=device).float()[:, None] * inv_freq[None, :]
    return torch.cat((angles.cos(), angles.sin()), dim=-1).to(dtype)


def make_case(num_tokens: int, heads: int, kv_heads: int, head_size: int, dtype: torch.dtype,
              cache_dtype: torch.dtype, num_blocks: int = 8, block_size: int = 16, padding: int = 1,
              device: str = "cpu", seed: int = 0) -> FusedCase:
    """Random positions and distinct random slots; the last ``padding`` tokens have slot -1. The cache
    starts zeroed, so an entry written where it should not be shows."""
    gen = torch.Generator().manual_seed(seed)
    positions = torch.randint(0, 4096, (num_tokens,), generator=gen)
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:num_tokens]
    if padding:
        slots[-padding:] = -1
    qkv = 3 * torch.randn(num_tokens, (heads + 2 * kv_heads) * head_size, generator=gen)
    weights = torch.randn(2, head_size, generator=gen)
    cache = torch.zeros(2, num_blocks, block_size, kv_heads, head_size, dtype=cache_dtype, device=device)
    return FusedCase(positions.to(device), qkv.to(dtype).to(device), weights[0].to(dtype).to(device),
                     weights[1].to(dtype).to(device), rope_cache(head_size, 4096, dtype, device), cache,
                     slots.to(device), heads, kv_heads, head_size)


def unfused(case: FusedCase, is_neox: bool, k_scale: float, v_scale: float,
            eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """q and the cache after the Triton path the model took before: norm + rotary in place, then the
    backend's cache write. Works on copies; returns ``(q, kv_cache)``."""
    qkv, cache = case.qkv.clone(), case.kv_cache.clone()
    q, k, v = case.split(qkv)
    qk_norm_rotary(case.positions, q, k, case.q_weight, case.k_weight, eps, case.cos_sin_cache, case.head_size,
                   is_neox)
    n = q.shape[0]
    write_kv(k.view(n, case.kv_heads, case.head_size), v.view(n, case.kv_heads, case.head_size), cache,
             case.slot_mapping, k_scale, v_scale)
    return q, cache
