"""Phi-3: the Llama decoder, loaded from checkpoints that store q/k/v and gate/up already fused.

The fused checkpoint tensors are cut into their projections (lazily: under tensor parallelism each
rank still reads only its rows) and go through the same stacked loading as Llama's. Rotary
scaling includes ``longrope`` (``su``), and ``partial_rotary_factor`` rotates part of each head.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
from transformers import PretrainedConfig

from infercore.models.llama import DecoderOptions, LlamaForCausalLM, head_dim_of


class Phi3ForCausalLM(LlamaForCausalLM):
    """Phi-3 and Phi-3.5 / Phi-4-mini dense models."""

    @classmethod
    def decoder_options(cls, config: PretrainedConfig) -> DecoderOptions:
        window = getattr(config, "sliding_window", None)
        return DecoderOptions(sliding_windows=(window,) * config.num_hidden_layers)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load HF-named checkpoint tensors, cutting the fused ``qkv_proj`` and ``gate_up_proj``."""
        super().load_weights(self._unfused(weights))

    def _unfused(self, weights: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
        config = self.config
        head_dim = head_dim_of(config)
        qkv = {"q_proj": config.num_attention_heads * head_dim, "k_proj": config.num_key_value_heads * head_dim,
               "v_proj": config.num_key_value_heads * head_dim}
        gate_up = {"gate_proj": config.intermediate_size, "up_proj": config.intermediate_size}
        for name, tensor in weights:
            if ".qkv_proj." in name:
                yield from split_fused_rows(name, tensor, "qkv_proj", qkv)
            elif ".gate_up_proj." in name:
                yield from split_fused_rows(name, tensor, "gate_up_proj", gate_up)
            else:
                yield name, tensor


def split_fused_rows(name: str, tensor: torch.Tensor, fused: str,
                parts: dict[str, int]) -> Iterator[tuple[str, torch.Tensor]]:
    """Cut a fused checkpoint tensor along its rows into the named projections of the given sizes."""
    total = sum(parts.values())
    if tensor.shape[0] != total:
        raise ValueError(f"checkpoint tensor {name!r} has {tensor.shape[0]} rows but the config's "
                         f"{' + '.join(parts)} need {total}; the config does not match the weights")
    offset = 0
    for source, rows in parts.items():
        yield name.replace(f".{fused}.", f".{source}."), tensor.narrow(0, offset, rows)
        offset += rows
