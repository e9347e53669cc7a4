"""Qwen3-MoE: Qwen3's attention with a sparse mixture-of-experts block in place of the MLP.

The decoder here is shared with Mixtral, which differs in its attention options and in what its
checkpoint calls the block and its experts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

import torch
from torch import nn
from transformers import PretrainedConfig

from infercore.layers.fused_moe import ExpertNames, ExpertWeightLoader, FusedMoE
from infercore.models.llama import (
    STACKED_PARAMS,
    DecoderOptions,
    LlamaForCausalLM,
    LlamaMLP,
    windows_from_layer_types,
)
from infercore.models.weight_loading import load_checkpoint_weights


class SparseMoeBlock(nn.Module):
    """A replicated router (``gate``) picks each token's experts; :class:`FusedMoE` runs and sums them."""

    def __init__(self, config: PretrainedConfig, num_experts: int, intermediate_size: int, renormalize: bool,
                 prefix: str) -> None:
        super().__init__()
        self.gate = nn.Linear(config.hidden_size, num_experts, bias=False)
        self.experts = FusedMoE(num_experts, config.num_experts_per_tok, config.hidden_size, intermediate_size,
                                renormalize=renormalize, prefix=f"{prefix}.experts")

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.experts(hidden, self.gate(hidden))


class Qwen3MoeForCausalLM(LlamaForCausalLM):
    """Qwen3-MoE models (Qwen3-30B-A3B, Qwen3-235B-A22B). Layers in ``mlp_only_layers``, or off the
    ``decoder_sparse_step`` grid, keep a dense MLP; ``norm_topk_prob`` renormalises the top-k weights."""

    #: Its weight loaders narrow checkpoint tensors to this rank's shard before reading them, so under
    #: tensor parallelism the loader hands it lazy slices (see models/checkpoint_slice.py).
    loads_checkpoint_slices = True

    #: The decoder layer's attribute (and checkpoint name) for its feed-forward block.
    ffn_name: ClassVar[str] = "mlp"
    expert_names: ClassVar[ExpertNames] = ExpertNames()

    @classmethod
    def decoder_options(cls, config: PretrainedConfig) -> DecoderOptions:
        bias = bool(getattr(config, "attention_bias", False))
        return DecoderOptions(qkv_bias=bias, o_bias=bias, qk_norm=True, sliding_windows=windows_from_layer_types(config),
                              feed_forward=cls.feed_forward, ffn_name=cls.ffn_name)

    @classmethod
    def is_sparse(cls, config: PretrainedConfig, layer_index: int) -> bool:
        """Whether layer ``layer_index`` has experts (HF's rule for Qwen3-MoE)."""
        step = getattr(config, "decoder_sparse_step", 1) or 1
        return (layer_index not in (getattr(config, "mlp_only_layers", None) or [])
                and config.num_experts > 0 and (layer_index + 1) % step == 0)

    @classmethod
    def feed_forward(cls, config: PretrainedConfig, layer_index: int) -> nn.Module:
        """Layer ``layer_index``'s feed-forward block."""
        if not cls.is_sparse(config, layer_index):
            return LlamaMLP(config, DecoderOptions())
        prefix = f"model.layers.{layer_index}.{cls.ffn_name}"
        return SparseMoeBlock(config, config.num_experts, config.moe_intermediate_size,
                              bool(getattr(config, "norm_topk_prob", False)), prefix)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load HF-named checkpoint tensors: q/k/v and gate/up fused, experts stacked per layer."""
        ignore = ("lm_head.",) if self.tie_word_embeddings else ()
        load_checkpoint_weights(self, weights, STACKED_PARAMS, ignore_prefixes=ignore,
                                extra=ExpertWeightLoader(self, self.expert_names))
