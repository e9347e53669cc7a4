"""Qwen3: Llama with an RMSNorm on every query and key head before rotary."""

from __future__ import annotations

from transformers import PretrainedConfig

from infercore.models.llama import DecoderOptions, LlamaForCausalLM, windows_from_layer_types


class Qwen3ForCausalLM(LlamaForCausalLM):
    """Qwen3 dense models."""

    @classmethod
    def decoder_options(cls, config: PretrainedConfig) -> DecoderOptions:
        bias = bool(getattr(config, "attention_bias", False))
        return DecoderOptions(qkv_bias=bias, o_bias=bias, qk_norm=True,
                              sliding_windows=windows_from_layer_types(config))
