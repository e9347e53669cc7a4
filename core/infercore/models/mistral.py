"""Mistral: Llama without biases, with one sliding window for every layer."""

from __future__ import annotations

from transformers import PretrainedConfig

from infercore.models.llama import DecoderOptions, LlamaForCausalLM


class MistralForCausalLM(LlamaForCausalLM):
    """Mistral 7B-style models; ``sliding_window`` (when set) applies to all layers."""

    @classmethod
    def decoder_options(cls, config: PretrainedConfig) -> DecoderOptions:
        window = getattr(config, "sliding_window", None)
        return DecoderOptions(sliding_windows=(window,) * config.num_hidden_layers)
