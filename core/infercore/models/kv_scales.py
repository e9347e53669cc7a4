"""Per-layer KV cache scales from a checkpoint, routed to the model's Attention layers.

FP8 checkpoints name them after the attention block, as vLLM and compressed-tensors write them:
``<block>.k_scale`` / ``<block>.v_scale``, one ``<block>.kv_scale`` for both, or the older
``<block>.k_proj.output_scale`` / ``<block>.v_proj.output_scale``. ``<block>`` is the module that holds
the layer's :class:`~infercore.attention.layer.Attention` (e.g. ``model.layers.3.self_attn``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from infercore.attention.layer import Attention

#: Checkpoint name suffix -> the Attention attributes it sets.
KV_SCALE_SUFFIXES: dict[str, tuple[str, ...]] = {
    "k_scale": ("k_scale",),
    "v_scale": ("v_scale",),
    "kv_scale": ("k_scale", "v_scale"),
    "k_proj.output_scale": ("k_scale",),
    "v_proj.output_scale": ("v_scale",),
}


class KVScaleLoader:
    """Sets ``k_scale`` / ``v_scale`` of a model's Attention layers from checkpoint tensors."""

    def __init__(self, model: nn.Module) -> None:
        self._layers = {name: m for name, m in model.named_modules() if isinstance(m, Attention)}

    def _layer_in(self, block: str) -> Attention | None:
        """The one Attention layer at or under module ``block`` (None when there is not exactly one)."""
        found = [m for name, m in self._layers.items() if name == block or name.startswith(block + ".")]
        return found[0] if len(found) == 1 else None

    def load(self, name: str, tensor: torch.Tensor) -> bool:
        """Take checkpoint tensor ``name`` when it is a KV cache scale of an attention layer; False otherwise.

        A scale with several entries (per head) keeps the largest, so no head saturates earlier
        than its own scale would make it.
        """
        for suffix, attributes in KV_SCALE_SUFFIXES.items():
            if not name.endswith("." + suffix):
                continue
            layer = self._layer_in(name[: -len(suffix) - 1])
            if layer is None:
                return False
            value = float(tensor.float().max()) if tensor.numel() else float("nan")
            if not (value > 0.0 and math.isfinite(value)):
                raise ValueError(f"checkpoint tensor {name!r} is a KV cache scale of {value}; scales must be "
                                 "positive and finite: the checkpoint's KV scales are corrupt")
            for attribute in attributes:
                setattr(layer, attribute, value)
            return True
        return False
