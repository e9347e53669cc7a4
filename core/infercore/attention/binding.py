"""Connects a built model's Attention layers to the chosen backend and their KV caches."""

from __future__ import annotations

import torch
from torch import nn

from infercore.attention.backend import AttentionBackend
from infercore.attention.layer import Attention


def bind_attention(model: nn.Module, backend_cls: type[AttentionBackend], kv_caches: list[torch.Tensor]) -> None:
    """Give every :class:`Attention` layer of ``model`` an impl of ``backend_cls`` and its cache,
    ``kv_caches[layer.layer_index]``."""
    impl_cls = backend_cls.get_impl_cls()
    for module in model.modules():
        if isinstance(module, Attention):
            if module.layer_index >= len(kv_caches):
                raise ValueError(f"attention layer {module.layer_index} has no KV cache; {len(kv_caches)} "
                                 "caches were allocated, one per attention layer is needed")
            module.impl = impl_cls(module.num_heads, module.head_size, module.scale, module.num_kv_heads,
                                   module.sliding_window)
            module.kv_cache = kv_caches[module.layer_index]
