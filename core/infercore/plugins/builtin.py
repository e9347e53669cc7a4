"""Core's own plugin: the built-in model zoo, reference custom ops, executors and the n-gram proposer
register here through the same hooks third-party plugins use."""

from __future__ import annotations

from infercore.plugins.hookspecs import RegisterFn, hookimpl

INFERCORE_PLUGIN_API = (1, 0)


#: Built-in architectures that take no images: registered with ``multimodal_processor=None``, so the front end
#: knows without importing the model (and torch with it).
_TEXT_MODELS = {
    "LlamaForCausalLM": "infercore.models.llama:LlamaForCausalLM",
    "MistralForCausalLM": "infercore.models.mistral:MistralForCausalLM",
    "Qwen2ForCausalLM": "infercore.models.qwen2:Qwen2ForCausalLM",
    "Qwen3ForCausalLM": "infercore.models.qwen3:Qwen3ForCausalLM",
    "Gemma3ForCausalLM": "infercore.models.gemma3:Gemma3ForCausalLM",
    "Phi3ForCausalLM": "infercore.models.phi3:Phi3ForCausalLM",
    "Qwen3MoeForCausalLM": "infercore.models.qwen3_moe:Qwen3MoeForCausalLM",
    "MixtralForCausalLM": "infercore.models.mixtral:MixtralForCausalLM",
    "BertModel": "infercore.models.bert:BertModel",
    "XLMRobertaModel": "infercore.models.bert:XLMRobertaModel",
    "RobertaModel": "infercore.models.bert:XLMRobertaModel",
    "BertForSequenceClassification": "infercore.models.bert:BertForSequenceClassification",
    "XLMRobertaForSequenceClassification": "infercore.models.bert:XLMRobertaForSequenceClassification",
    "RobertaForSequenceClassification": "infercore.models.bert:XLMRobertaForSequenceClassification",
    "Qwen3ForSequenceClassification": "infercore.models.decoder_classifier:Qwen3ForSequenceClassification",
    "Qwen2ForSequenceClassification": "infercore.models.decoder_classifier:Qwen2ForSequenceClassification",
}
#: Built-in vision-language architectures: (model, its image processor).
_VISION_MODELS = {
    "LlavaForConditionalGeneration": ("infercore.models.llava:LlavaForConditionalGeneration",
                                      "infercore.models.llava_processor:LlavaProcessor"),
    "Gemma3ForConditionalGeneration": ("infercore.models.gemma3_vl:Gemma3ForConditionalGeneration",
                                       "infercore.models.gemma3_vl_processor:Gemma3Processor"),
    "Qwen2_5_VLForConditionalGeneration": ("infercore.models.qwen2_5_vl:Qwen2_5_VLForConditionalGeneration",
                                           "infercore.models.qwen2_5_vl_processor:Qwen2_5_VLMultiModalProcessor"),
}


@hookimpl
def register_models(register: RegisterFn) -> None:
    for name, target in _TEXT_MODELS.items():
        register(name, target, multimodal_processor=None)
    for name, (target, processor) in _VISION_MODELS.items():
        register(name, target, multimodal_processor=processor)


@hookimpl
def register_attention_backends(register: RegisterFn) -> None:
    register("reference", "infercore.attention.reference_backend:ReferenceAttentionBackend")


@hookimpl
def register_custom_ops(register: RegisterFn) -> None:
    register("linear", "infercore.ops.reference:linear")
    register("lora_shrink", "infercore.ops.lora_reference:lora_shrink")
    register("lora_expand", "infercore.ops.lora_reference:lora_expand")
    register("lora_apply", "infercore.ops.lora_reference:lora_apply")
    register("lora_linear", "infercore.ops.lora_reference:lora_linear")
    register("fp8_linear", "infercore.ops.reference:fp8_linear")
    register("fp8_block_linear", "infercore.ops.reference:fp8_block_linear")
    register("fp8_block_linear_quantized", "infercore.ops.reference:fp8_block_linear_quantized")
    register("fp8_linear_quantized", "infercore.ops.reference:fp8_linear_quantized")
    register("rms_norm_quant", "infercore.ops.reference:rms_norm_quant")
    register("fused_add_rms_norm_quant", "infercore.ops.reference:fused_add_rms_norm_quant")
    register("silu_and_mul_quant", "infercore.ops.reference:silu_and_mul_quant")
    register("int4_linear", "infercore.ops.reference:int4_linear")
    register("rms_norm", "infercore.ops.reference:rms_norm")
    register("fused_add_rms_norm", "infercore.ops.reference:fused_add_rms_norm")
    register("rotary_embedding", "infercore.ops.reference:rotary_embedding")
    register("qk_norm_rotary", "infercore.ops.reference:qk_norm_rotary")
    register("silu_and_mul", "infercore.ops.reference:silu_and_mul")
    register("silu_and_mul_linear", "infercore.ops.reference:silu_and_mul_linear")
    register("layer_norm", "infercore.ops.reference:layer_norm")
    register("gelu", "infercore.ops.reference:gelu")
    register("gelu_and_mul", "infercore.ops.reference:gelu_and_mul")
    register("embedding", "infercore.ops.reference:embedding")
    register("alibi_bias", "infercore.ops.reference:alibi_bias")
    register("gumbel_argmax", "infercore.ops.reference:gumbel_argmax")
    register("apply_penalties", "infercore.ops.reference:apply_penalties")
    register("fused_moe", "infercore.ops.reference:fused_moe")
    register("fused_moe_fp8_block", "infercore.ops.reference:fused_moe_fp8_block")
    register("expert_dispatcher", "infercore.ops.reference:expert_dispatcher")
    register("accept_drafts", "infercore.ops.reference:accept_drafts")
    register("encoder_attention", "infercore.ops.reference:encoder_attention")


@hookimpl
def register_quantization_methods(register: RegisterFn) -> None:
    register("fp8", "infercore.quantization.fp8:Fp8Config")
    register("compressed-tensors", "infercore.quantization.compressed_tensors:CompressedTensorsConfig")
    register("awq", "infercore.quantization.int4_configs:AwqConfig")
    register("gptq", "infercore.quantization.int4_configs:GptqConfig")


@hookimpl
def register_executors(register: RegisterFn) -> None:
    register("uni", "infercore.executor.uniproc:UniProcExecutor")
    register("uniproc", "infercore.executor.uniproc:UniProcExecutor")  # the name before "uni"
    register("mp", "infercore.executor.multiproc:MultiprocExecutor")
    register("ray", "infercore.executor.ray_executor:RayExecutor")


@hookimpl
def register_speculative_methods(register: RegisterFn) -> None:
    register("ngram", "infercore.spec_decode.ngram:NgramProposer", needs_model=False)
    register("draft_model", "infercore.spec_decode.draft_model:DraftModelProposer", needs_model=True)
    register("eagle", "infercore.spec_decode.eagle:EagleProposer", needs_model=True)
    register("eagle3", "infercore.spec_decode.eagle:Eagle3Proposer", needs_model=True)
