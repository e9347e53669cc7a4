"""AttentionLayerSpec: everything one attention layer's implementation is built with."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infercore.kv_cache.fp8 import validate_kv_scale


@dataclass(frozen=True)
class AttentionLayerSpec:
    """What a backend's :class:`~infercore.attention.AttentionImpl` is built with, one per layer.

    A frozen dataclass rather than positional arguments: a field added in a later minor release of
    the plugin API has a default, so an implementation written before it keeps working (and may
    refuse, in its backend's ``validate``, a request for a feature it does not know).

    ``num_heads`` / ``num_kv_heads`` are this rank's heads (after tensor-parallel sharding);
    ``scale`` multiplies ``q·k`` before the softmax; ``sliding_window`` (None = full attention) lets a
    query at position ``p`` see keys at positions ``p - window < t <= p``; ``alibi_slopes`` (one per
    query head, None = no ALiBi) adds ``slope_h * (t - p)`` to every score of head ``h``.
    ``dtype`` is the activation dtype of ``q``/``k``/``v``, ``kv_cache_dtype`` the cache's.
    ``k_scale`` / ``v_scale`` (plugin API 1.2) are the layer's per-tensor KV cache scales: an fp8 cache
    (``kv_cache_dtype`` float8_e4m3fn) stores ``K / k_scale`` and ``V / v_scale`` saturated to +-448 and
    reads them back multiplied by the scale (see :mod:`infercore.kv_cache.fp8`); caches of other dtypes
    ignore them. A backend without fp8 support refuses such a cache in its ``validate``.
    """

    num_heads: int
    head_size: int
    num_kv_heads: int
    scale: float
    layer_index: int = 0
    sliding_window: int | None = None
    alibi_slopes: tuple[float, ...] | None = None
    dtype: torch.dtype = torch.float32
    kv_cache_dtype: torch.dtype = torch.float32
    k_scale: float = 1.0
    v_scale: float = 1.0
    #: ``"decoder"`` (causal over the paged KV cache) or ``"encoder_only"`` (bidirectional within each
    #: request, no KV cache; :mod:`infercore.attention.encoder_only`). Plugin API 1.6.
    attn_type: str = "decoder"

    def __post_init__(self) -> None:
        if self.num_heads <= 0 or self.num_kv_heads <= 0 or self.head_size <= 0:
            raise ValueError(f"attention layer {self.layer_index}: heads ({self.num_heads}), KV heads "
                             f"({self.num_kv_heads}) and head size ({self.head_size}) must be positive")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"attention layer {self.layer_index}: {self.num_heads} query heads are not a "
                             f"multiple of {self.num_kv_heads} KV heads")
        if self.sliding_window is not None and self.sliding_window <= 0:
            raise ValueError(f"attention layer {self.layer_index}: sliding_window must be positive or None, "
                             f"got {self.sliding_window}")
        if self.alibi_slopes is not None and len(self.alibi_slopes) != self.num_heads:
            raise ValueError(f"attention layer {self.layer_index}: {len(self.alibi_slopes)} ALiBi slopes for "
                             f"{self.num_heads} heads; give one slope per query head")
        if self.attn_type not in ("decoder", "encoder_only"):
            raise ValueError(f"attention layer {self.layer_index}: attn_type must be 'decoder' or 'encoder_only', "
                             f"got {self.attn_type!r}")
        validate_kv_scale("k_scale", self.k_scale, self.layer_index)
        validate_kv_scale("v_scale", self.v_scale, self.layer_index)
