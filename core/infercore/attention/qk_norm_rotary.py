"""QKNormRotary: the per-head q/k norm and rotary a layer hands its backend to fuse with the KV cache write."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class QKNormRotary:
    """What to do to q and k before attention: RMSNorm every head, then rotary embedding (Qwen3).

    The meaning is the custom op ``qk_norm_rotary`` (:func:`infercore.ops.reference.qk_norm_rotary`):
    each head of q is normed with ``q_weight`` and each head of k with ``k_weight`` [head_size], both
    with ``eps``, rounded to the activation dtype, then rotated by ``positions`` [T] through
    ``cos_sin_cache`` [max_position, head_size] (``cat(cos, sin)``; full rotary only), halves when
    ``is_neox`` and interleaved pairs otherwise.
    """

    positions: torch.Tensor
    q_weight: torch.Tensor
    k_weight: torch.Tensor
    eps: float
    cos_sin_cache: torch.Tensor
    is_neox: bool = True
