"""Qwen2: Llama with biases on the q, k and v projections."""

from __future__ import annotations

from transformers import PretrainedConfig

from infercore.models.llama import DecoderOptions, LlamaForCausalLM, windows_from_layer_types


class Qwen2ForCausalLM(LlamaForCausalLM):
    """Qwen2 and Qwen2.5 models."""

    @classmethod
    def decoder_options(cls, config: PretrainedConfig) -> DecoderOptions:
        return DecoderOptions(qkv_bias=True, sliding_windows=windows_from_layer_types(config))
