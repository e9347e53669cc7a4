"""Choosing the attention backend for a built model on a platform."""

from __future__ import annotations

import logging

import torch
from torch import nn

from infercore.attention.backend import AttentionBackend, AttentionRequest
from infercore.attention.binding import layer_specs
from infercore.attention.encoder_only import ENCODER_ONLY, encoder_only_reasons
from infercore.attention.visible_bounds import needs_visible_bounds, visible_bounds_reasons
from infercore.kv_cache.spec import KVCacheSpec
from infercore.platforms.interface import Platform
from infercore.plugins.manager import get_plugin_manager

logger = logging.getLogger(__name__)


def select_attention_backend(model: nn.Module, platform: Platform, kv_spec: KVCacheSpec,
                             dtype: torch.dtype) -> type[AttentionBackend]:
    """The backend the platform picks for ``model``'s layers and cache; an error naming the reasons when
    it cannot run them."""
    specs = layer_specs(model)
    windows = [s.sliding_window for s in specs if s.sliding_window is not None]
    # Bidirectional layers with no KV cache (:mod:`infercore.attention.encoder_only`).
    encoder_only = all(s.attn_type == ENCODER_ONLY for s in specs)
    # Image tokens that see their whole span (:mod:`infercore.attention.visible_bounds`).
    bounded = needs_visible_bounds(model)
    request = AttentionRequest(
        num_heads=specs[0].num_heads, num_kv_heads=kv_spec.num_kv_heads, head_size=kv_spec.head_size,
        dtype=dtype, kv_cache_dtype=kv_spec.dtype, block_size=kv_spec.block_size,
        device_type=platform.device_type, sliding_window=max(windows) if windows else None,
        alibi=any(s.alibi_slopes is not None for s in specs), encoder_only=encoder_only,
        visible_bounds=bounded,
    )
    name = platform.select_attention_backend(request)
    backend: type[AttentionBackend] = get_plugin_manager().registry("attention_backend").load(name)
    reasons = (backend.validate(request) + encoder_only_reasons(backend, encoder_only)
               + visible_bounds_reasons(backend, bounded))
    if reasons:
        raise ValueError(f"attention backend {name!r} cannot run this model: {'; '.join(reasons)}")
    logger.info("attention backend: %s", name)
    return backend
