"""Mixtral: Mistral's attention with a sparse mixture-of-experts block (``block_sparse_moe``)."""

from __future__ import annotations

from typing import ClassVar

from torch import nn
from transformers import PretrainedConfig

from infercore.layers.fused_moe import MIXTRAL_EXPERT_NAMES, ExpertNames
from infercore.models.llama import DecoderOptions
from infercore.models.qwen3_moe import Qwen3MoeForCausalLM, SparseMoeBlock


class MixtralForCausalLM(Qwen3MoeForCausalLM):
    """Mixtral 8x7B-style models: every layer sparse, top-k weights always renormalised, experts named
    ``w1`` (gate), ``w3`` (up) and ``w2`` (down); ``sliding_window`` (when set) applies to all layers."""

    ffn_name: ClassVar[str] = "block_sparse_moe"
    expert_names: ClassVar[ExpertNames] = MIXTRAL_EXPERT_NAMES

    @classmethod
    def decoder_options(cls, config: PretrainedConfig) -> DecoderOptions:
        window = getattr(config, "sliding_window", None)
        return DecoderOptions(sliding_windows=(window,) * config.num_hidden_layers, feed_forward=cls.feed_forward,
                              ffn_name=cls.ffn_name)

    @classmethod
    def feed_forward(cls, config: PretrainedConfig, layer_index: int) -> nn.Module:
        prefix = f"model.layers.{layer_index}.{cls.ffn_name}"
        return SparseMoeBlock(config, config.num_local_experts, config.intermediate_size, True, prefix)
