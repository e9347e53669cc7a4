"""Which projections of the dense decoders carry LoRA, where they sit in infercore's fused linears, and
the shapes a checkpoint's matrices must have."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TargetModule:
    """A PEFT target module (as HF names it) inside infercore's decoder layer: the fused linear
    ``layer_path`` holds it as the output slices ``slices`` (several for Phi-3's fused projections, whose
    one LoRA pair is the same ``A`` for each slice and ``B`` cut by rows)."""

    layer_path: str
    slices: tuple[int, ...]
    #: The single projection of each slice, whose output size cuts ``B``'s rows.
    parts: tuple[str, ...]


TARGET_MODULES: dict[str, TargetModule] = {
    "q_proj": TargetModule("self_attn.qkv_proj", (0,), ("q_proj",)),
    "k_proj": TargetModule("self_attn.qkv_proj", (1,), ("k_proj",)),
    "v_proj": TargetModule("self_attn.qkv_proj", (2,), ("v_proj",)),
    "qkv_proj": TargetModule("self_attn.qkv_proj", (0, 1, 2), ("q_proj", "k_proj", "v_proj")),
    "o_proj": TargetModule("self_attn.o_proj", (0,), ("o_proj",)),
    "gate_proj": TargetModule("mlp.gate_up_proj", (0,), ("gate_proj",)),
    "up_proj": TargetModule("mlp.gate_up_proj", (1,), ("up_proj",)),
    "gate_up_proj": TargetModule("mlp.gate_up_proj", (0, 1), ("gate_proj", "up_proj")),
    "down_proj": TargetModule("mlp.down_proj", (0,), ("down_proj",)),
}

#: The linears of a decoder layer that LoRA wraps, with whether each is row-parallel.
WRAPPED_LINEARS: dict[str, bool] = {
    "self_attn.qkv_proj": False, "self_attn.o_proj": True, "mlp.gate_up_proj": False, "mlp.down_proj": True,
}


def module_shapes(text_config: Any) -> dict[str, tuple[int, int]]:
    """(input features, output features) of every target module of a dense decoder with ``text_config``."""
    hidden = int(text_config.hidden_size)
    heads = int(text_config.num_attention_heads)
    kv_heads = int(getattr(text_config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(text_config, "head_dim", None) or hidden // heads)
    inter = int(text_config.intermediate_size)
    q, kv = heads * head_dim, kv_heads * head_dim
    return {"q_proj": (hidden, q), "k_proj": (hidden, kv), "v_proj": (hidden, kv), "qkv_proj": (hidden, q + 2 * kv),
            "o_proj": (q, hidden), "gate_proj": (hidden, inter), "up_proj": (hidden, inter),
            "gate_up_proj": (hidden, 2 * inter), "down_proj": (inter, hidden)}
