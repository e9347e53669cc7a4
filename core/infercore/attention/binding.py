"""Connects a built model's Attention layers to the chosen backend and their KV caches."""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from infercore.attention.backend import AttentionBackend
from infercore.attention.layer import Attention
from infercore.attention.spec import AttentionLayerSpec


def attention_layers(model: nn.Module) -> list[Attention]:
    """The model's :class:`Attention` layers, by layer index."""
    return sorted((m for m in model.modules() if isinstance(m, Attention)), key=lambda m: m.layer_index)


def first_layer_index(model: nn.Module) -> int:
    """The layer index of ``model``'s first Attention layer: 0, or where a pipeline stage's layers start."""
    layers = attention_layers(model)
    return layers[0].layer_index if layers else 0


def layer_specs(model: nn.Module) -> list[AttentionLayerSpec]:
    """The spec each Attention layer of ``model`` declares, by layer index; an error when there is none
    or the layer indices are not ``first..first+n-1`` (``first`` is 0 but on a later pipeline stage)."""
    layers = attention_layers(model)
    if not layers:
        raise ValueError(f"{type(model).__name__} has no infercore Attention layer; build its attention with "
                         "infercore.plugin_api.Attention so the engine can size and bind the KV cache")
    indices = [m.layer_index for m in layers]
    first = indices[0]
    if indices != list(range(first, first + len(layers))):
        raise ValueError(f"{type(model).__name__}'s Attention layers have indices {indices}; give each layer "
                         f"a distinct layer_index from 0 to {len(layers) - 1}")
    return [m.spec for m in layers]


def bind_attention(model: nn.Module, backend_cls: type[AttentionBackend], kv_caches: list[torch.Tensor],
                   dtype: torch.dtype | None = None, layer_groups: list[int] | None = None) -> None:
    """Give every :class:`Attention` layer of ``model`` an impl of ``backend_cls`` (built with the layer's
    spec, completed with the model's dtype, its cache's dtype and the layer's KV cache scales), its cache,
    ``kv_caches[i]``, and its KV cache group, ``layer_groups[i]`` (0 for every layer when None), where
    ``i`` is the layer's place among the model's attention layers (its layer index, but on a pipeline
    stage after the first)."""
    impl_cls = backend_cls.get_impl_cls()
    first = first_layer_index(model)
    for module in attention_layers(model):
        i = module.layer_index - first
        if i >= len(kv_caches):
            raise ValueError(f"attention layer {module.layer_index} has no KV cache; {len(kv_caches)} "
                             "caches were allocated, one per attention layer is needed")
        cache = kv_caches[i]
        spec = dataclasses.replace(module.spec, dtype=dtype or module.spec.dtype,
                                   kv_cache_dtype=cache.dtype,
                                   k_scale=module.k_scale, v_scale=module.v_scale)
        module.impl = impl_cls(spec)
        module.kv_cache = cache
        module.kv_group = layer_groups[i] if layer_groups is not None else 0
