"""The plugin API of infercore: the one module a plugin imports.

Everything a platform, attention backend, custom op, model, tool-call or reasoning parser and grammar
backend plugin needs is here; the rest of ``infercore`` is private and may change in any release.
In-tree plugins are held to this module by a test that reads their imports.

**Versions.** :data:`API_VERSION` is ``(major, minor)``. A plugin's hook module declares the oldest
version it needs, ``INFERCORE_PLUGIN_API = (1, 0)``; core loads it when the majors are equal and the
plugin's minor is at most core's. A minor release only adds: keyword arguments with defaults,
optional methods, fields with defaults on the frozen specs. A removal or change of meaning is
announced by a ``DeprecationWarning`` for one minor release and happens in the next major.

**Contracts** (each written out on the class it concerns):

* :class:`Platform`: ``probe()`` never initialises a device runtime; ``capabilities`` are what core
  branches on (never a vendor name). A platform whose ``capabilities.profile_memory`` is false is
  never profiled: unless the user sets ``--kv-cache-memory-bytes`` or ``--num-gpu-blocks-override``
  (or the platform's ``update_config`` does), the KV cache gets :data:`UNPROFILED_KV_FRACTION` of
  ``free_memory()`` measured after the weights are loaded.
* :class:`CommonAttentionMetadata`: the slot-mapping rule, and that ``*_cpu`` tensors may be longer
  than the batch (read the first ``num_reqs (+1)`` entries).
* :class:`AttentionImpl`: built with an :class:`AttentionLayerSpec`; ``forward`` writes every K/V of
  the step before any attention of the layer reads the cache (same-step prefix sharing). One that sets
  ``writes_kv_alone`` (1.16) implements ``write_kv``: the same cache write with no attention.
* :class:`CausalLM` / :class:`ModelSpec`: a model is built with ``from_spec(spec)`` in the dtype the
  loader sets, declares its KV cache through its :class:`Attention` layers, and ``load_weights``
  receives raw checkpoint names and returns the parameter names it filled.
* Custom ops: a platform registers a kernel under an op's name with ``platform=NAME``; it must compute
  what the torch reference in :data:`op_reference` computes, with the same signature
  (:data:`CUSTOM_OPS` lists them). A name with no registration for the platform and no reference is
  an error, never another platform's kernel.
* :class:`ToolParser` / :class:`ReasoningParser` (1.6): one instance per request; streamed pieces
  and a whole output give the same calls, arguments and content; the public methods never raise.
* :class:`StructuredOutputBackend` (1.6): ``compile`` is thread-safe; a :class:`GrammarMatcher`'s
  bitmask allows exactly the tokens its ``accept_tokens`` accepts.
* :class:`Proposer`: a speculative method's draft tokens, built with a :class:`ProposerSpec`; in, each
  speculating row's token history (prompt + output) and how many drafts it may take; out, :class:`Drafts`
  (a padded int array of draft tokens and per-row counts). Added in 1.6 with the
  ``register_speculative_methods`` hook and the ``accept_drafts`` custom op. A :class:`ModelProposer`
  (1.9) drafts with a model on the device: ``bind(target, make_runner)`` loads it before the KV cache
  is sized, and each step's ``propose_step`` catches its cache up on the step and drafts ``k`` tokens
  (the in-tree ``draft_model``, ``eagle`` and ``eagle3`` methods).
* Expert parallelism (1.7): the ``expert_dispatcher`` custom op is a *class*, an
  :class:`ExpertDispatcher` built with ``cls(rank, size)``; a platform's class must honour the
  dispatch/combine contract written on :class:`ExpertDispatcher`. An :class:`ExpertPlacementPolicy`
  installed with :func:`set_expert_placement_policy` (from a ``configure`` hook: it runs in every
  worker) chooses each fused-MoE layer's expert → rank map, the same on every rank.
* Multimodal models (1.8): a model that takes images sets ``supports_multimodal`` and names its front-end
  :class:`MultiModalProcessor` (``multimodal_processor`` on the class, or ``multimodal_processor=`` in the
  model's registration); it implements ``embed_multimodal`` and merges :class:`MultiModalStepInputs` after its
  token embedding (:class:`SupportsMultiModal` has the whole contract; M-RoPE models add ``mrope_positions``).
  Vision towers attend with :class:`EncoderAttention`, which runs the ``encoder_attention`` custom op.
* ``lora_apply`` (1.10): a LoRA linear's whole adapter term in place, ``out += (x A^T) B^T`` per token of
  its slot; a platform may read the grouped layout (tiles of one slot) or each token's slot.
* ``lora_linear`` (1.15): a LoRA-wrapped linear whole, the base product (of ``silu(gate) * up`` with
  ``gated``) and the adapter term; a platform that registers it may add the term inside its GEMM. The layer
  calls it only where the base weight is unquantized and the platform registered a kernel (else the base
  method, then ``lora_apply``).
* Encoder-only attention (1.6): a backend that sets ``supports_encoder_only`` runs layers whose spec
  says ``attn_type=ENCODER_ONLY`` bidirectionally within each sequence, with no KV cache
  (:func:`encoder_only_attention` is the reference).
* Visibility bounds: a backend that sets ``supports_visible_bounds`` lets prefill query ``j`` see context
  positions up to ``CommonAttentionMetadata.visible_until[j]`` (image tokens of models with
  ``bidirectional_image_spans``, Gemma 3); ``attention_reference.paged_attention(..., visible_until=)`` is the
  reference. Models that need it are refused on other backends.

Importing this module is cheap (hook modules import :func:`hookimpl` from it): everything but the
hook marker and the version is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from infercore.plugins.hookspecs import RegisterFn, hookimpl
from infercore.version import PLUGIN_API_VERSION as API_VERSION

if TYPE_CHECKING:
    from infercore.attention import reference as attention_reference
    from infercore.attention.backend import (
        AttentionBackend,
        AttentionImpl,
        AttentionMetadataBuilder,
        AttentionRequest,
        CommonAttentionMetadata,
    )
    from infercore.attention.encoder_attention import EncoderAttention
    from infercore.attention.encoder_only import ENCODER_ONLY, encoder_only_attention
    from infercore.attention.layer import (
        Attention,
    )
    from infercore.attention.qk_norm_rotary import (
        QKNormRotary,
    )
    from infercore.attention.reference_backend import (
        ReferenceAttentionBackend,
    )
    from infercore.attention.spec import (
        AttentionLayerSpec,
    )
    from infercore.config import (
        InfercoreConfig,
    )
    from infercore.cpus import available_cpus
    from infercore.kv_cache import fp8 as kv_cache_fp8
    from infercore.kv_cache.spec import (
        KVCacheSpec,
    )
    from infercore.layers import (
        GELU,
        ColumnParallelLinear,
        GeGLU,
        LayerNorm,
        LearnedPositionEmbedding,
        MergedColumnParallelLinear,
        ParallelLMHead,
        QKVParallelLinear,
        RMSNorm,
        RotaryEmbedding,
        RowParallelLinear,
        SiluAndMul,
        VocabParallelEmbedding,
        alibi_slopes,
        get_rope,
    )
    from infercore.layers.fused_moe import (
        ExpertPlacement,
        ExpertPlacementPolicy,
        contiguous_placement,
        placement_from_owners,
        set_expert_placement_policy,
    )
    from infercore.models.contract import (
        CausalLM,
        ModelSpec,
    )
    from infercore.models.loader import (
        model_class,
    )
    from infercore.models.multimodal import (
        MultiModalProcessor,
        MultiModalStepInputs,
        ProcessedImage,
        SupportsMultiModal,
        content_hash,
    )
    from infercore.models.weight_loading import (
        StackedParam,
        load_checkpoint_weights,
    )
    from infercore.ops import fp8_math as fp8_reference
    from infercore.ops import int4_math as int4_reference
    from infercore.ops import reference as op_reference
    from infercore.ops.dispatch import (
        get_op,
    )
    from infercore.ops.expert_dispatch import (
        DispatchedTokens,
        ExpertDispatcher,
    )
    from infercore.parsers import (
        DeltaFunctionCall,
        DeltaMessage,
        DeltaToolCall,
        ExtractedToolCalls,
        FunctionCall,
        Malformed,
        MarkerReasoningParser,
        NeedMore,
        PartialCall,
        ReasoningParser,
        RegionToolParser,
        Scanner,
        ToolCall,
        ToolParser,
        ToolRequest,
        make_tool_call_id,
        parse_partial,
        partial_json,
    )
    from infercore.platforms.capabilities import (
        KernelSettings,
    )
    from infercore.platforms.gpu import (
        GPU_CAPABILITIES,
        GpuPlatform,
    )
    from infercore.platforms.interface import (
        UNPROFILED_KV_FRACTION,
        Platform,
        PlatformCapabilities,
        ProbeResult,
    )
    from infercore.platforms.kernel_builds import building_ahead
    from infercore.platforms.selection import (
        current_platform,
    )
    from infercore.plugins.manager import (
        PluginError,
    )
    from infercore.quantization import (
        LinearWeightSpec,
        ParamLayout,
        QuantizationConfig,
        QuantizationMethod,
        set_layout,
    )
    from infercore.sampling_params import (
        StructuredOutputsParams,
    )
    from infercore.spec_decode.model_proposer import (
        ModelProposer,
    )
    from infercore.spec_decode.proposer import (
        Drafts,
        Proposer,
        ProposerSpec,
    )
    from infercore.speculative_config import (
        SpeculativeConfig,
    )
    from infercore.structured_output import (
        CompiledGrammar,
        GrammarMatcher,
        StructuredOutputBackend,
        TokenizerInfo,
        allocate_bitmask,
        apply_token_bitmask_torch,
        bitmask_width,
    )
    from infercore.structured_output.admission import (
        check_schema,
    )
    from infercore.tiny_models import (
        build_model_folder,
    )
    from infercore.wire.multimodal import MultiModalFeature, WireTensor

#: The custom ops a platform may replace, each defined by the function of the same name in
#: :data:`op_reference`.
CUSTOM_OPS: tuple[str, ...] = (
    "linear", "rms_norm", "fused_add_rms_norm", "rotary_embedding", "qk_norm_rotary", "silu_and_mul",
    "silu_and_mul_linear",
    "gelu", "gelu_and_mul", "layer_norm", "embedding", "alibi_bias", "gumbel_argmax",
    "apply_penalties",
    "fp8_linear", "fp8_block_linear", "int4_linear", "fused_moe", "accept_drafts", "lora_shrink", "lora_expand",
    "lora_apply", "lora_linear", "expert_dispatcher", "encoder_attention",
    "fp8_block_linear_quantized", "fp8_linear_quantized", "rms_norm_quant", "fused_add_rms_norm_quant", "silu_and_mul_quant",
    "fused_moe_fp8_block",
)

#: Where each lazily imported name lives (private: import the name from this module).
_LAZY: dict[str, str] = {
    "Attention": "infercore.attention.layer",
    "AttentionBackend": "infercore.attention.backend",
    "AttentionImpl": "infercore.attention.backend",
    "AttentionLayerSpec": "infercore.attention.spec",
    "AttentionMetadataBuilder": "infercore.attention.backend",
    "AttentionRequest": "infercore.attention.backend",
    "CausalLM": "infercore.models.contract",
    "ENCODER_ONLY": "infercore.attention.encoder_only",
    "DispatchedTokens": "infercore.ops.expert_dispatch",
    "ExpertDispatcher": "infercore.ops.expert_dispatch",
    "ExpertPlacement": "infercore.layers.fused_moe",
    "ExpertPlacementPolicy": "infercore.layers.fused_moe",
    "contiguous_placement": "infercore.layers.fused_moe",
    "placement_from_owners": "infercore.layers.fused_moe",
    "set_expert_placement_policy": "infercore.layers.fused_moe",
    "encoder_only_attention": "infercore.attention.encoder_only",
    "EncoderAttention": "infercore.attention.encoder_attention",
    "MultiModalFeature": "infercore.wire.multimodal",
    "MultiModalProcessor": "infercore.models.multimodal",
    "MultiModalStepInputs": "infercore.models.multimodal",
    "ProcessedImage": "infercore.models.multimodal",
    "SupportsMultiModal": "infercore.models.multimodal",
    "WireTensor": "infercore.wire.multimodal",
    "content_hash": "infercore.models.multimodal",
    "ColumnParallelLinear": "infercore.layers",
    "CommonAttentionMetadata": "infercore.attention.backend",
    "CompiledGrammar": "infercore.structured_output",
    "DeltaFunctionCall": "infercore.parsers",
    "DeltaMessage": "infercore.parsers",
    "DeltaToolCall": "infercore.parsers",
    "ExtractedToolCalls": "infercore.parsers",
    "FunctionCall": "infercore.parsers",
    "Drafts": "infercore.spec_decode.proposer",
    "GELU": "infercore.layers",
    "GPU_CAPABILITIES": "infercore.platforms.gpu",
    "GeGLU": "infercore.layers",
    "GpuPlatform": "infercore.platforms.gpu",
    "GrammarMatcher": "infercore.structured_output",
    "InfercoreConfig": "infercore.config",
    "KVCacheSpec": "infercore.kv_cache.spec",
    "KernelSettings": "infercore.platforms.capabilities",
    "LayerNorm": "infercore.layers",
    "LearnedPositionEmbedding": "infercore.layers",
    "LinearWeightSpec": "infercore.quantization",
    "Malformed": "infercore.parsers",
    "MarkerReasoningParser": "infercore.parsers",
    "MergedColumnParallelLinear": "infercore.layers",
    "ModelProposer": "infercore.spec_decode.model_proposer",
    "ModelSpec": "infercore.models.contract",
    "NeedMore": "infercore.parsers",
    "ParallelLMHead": "infercore.layers",
    "ParamLayout": "infercore.quantization",
    "PartialCall": "infercore.parsers",
    "Platform": "infercore.platforms.interface",
    "PlatformCapabilities": "infercore.platforms.interface",
    "PluginError": "infercore.plugins.manager",
    "ProbeResult": "infercore.platforms.interface",
    "Proposer": "infercore.spec_decode.proposer",
    "ProposerSpec": "infercore.spec_decode.proposer",
    "QKNormRotary": "infercore.attention.qk_norm_rotary",
    "QKVParallelLinear": "infercore.layers",
    "QuantizationConfig": "infercore.quantization",
    "QuantizationMethod": "infercore.quantization",
    "RMSNorm": "infercore.layers",
    "ReasoningParser": "infercore.parsers",
    "ReferenceAttentionBackend": "infercore.attention.reference_backend",
    "RegionToolParser": "infercore.parsers",
    "RotaryEmbedding": "infercore.layers",
    "RowParallelLinear": "infercore.layers",
    "Scanner": "infercore.parsers",
    "SiluAndMul": "infercore.layers",
    "SpeculativeConfig": "infercore.speculative_config",
    "StackedParam": "infercore.models.weight_loading",
    "StructuredOutputBackend": "infercore.structured_output",
    "StructuredOutputsParams": "infercore.sampling_params",
    "TokenizerInfo": "infercore.structured_output",
    "ToolCall": "infercore.parsers",
    "ToolParser": "infercore.parsers",
    "ToolRequest": "infercore.parsers",
    "UNPROFILED_KV_FRACTION": "infercore.platforms.interface",
    "VocabParallelEmbedding": "infercore.layers",
    "alibi_slopes": "infercore.layers",
    "allocate_bitmask": "infercore.structured_output",
    "available_cpus": "infercore.cpus",
    "building_ahead": "infercore.platforms.kernel_builds",
    "apply_token_bitmask_torch": "infercore.structured_output",
    "bitmask_width": "infercore.structured_output",
    "build_model_folder": "infercore.tiny_models",
    "check_schema": "infercore.structured_output.admission",
    "current_platform": "infercore.platforms.selection",
    "get_op": "infercore.ops.dispatch",
    "get_rope": "infercore.layers",
    "load_checkpoint_weights": "infercore.models.weight_loading",
    "make_tool_call_id": "infercore.parsers",
    "model_class": "infercore.models.loader",
    "parse_partial": "infercore.parsers",
    "set_layout": "infercore.quantization",
}

_LAZY_MODULES: dict[str, str] = {
    "attention_reference": "infercore.attention.reference",
    "fp8_reference": "infercore.ops.fp8_math",
    "int4_reference": "infercore.ops.int4_math",
    "kv_cache_fp8": "infercore.kv_cache.fp8",
    "op_reference": "infercore.ops.reference",
    "partial_json": "infercore.parsers.partial_json",
}


def __getattr__(name: str) -> Any:
    """Import a plugin-API name on first use, so that hook modules importing :func:`hookimpl` stay cheap."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _LAZY_MODULES:
        value = importlib.import_module(_LAZY_MODULES[name])
    else:
        raise AttributeError(f"module 'infercore.plugin_api' has no attribute {name!r}; the plugin API is "
                             f"what __all__ lists")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "API_VERSION",
    "CUSTOM_OPS",
    "GELU",
    "GPU_CAPABILITIES",
    "UNPROFILED_KV_FRACTION",
    "Attention",
    "AttentionBackend",
    "AttentionImpl",
    "AttentionLayerSpec",
    "AttentionMetadataBuilder",
    "AttentionRequest",
    "CausalLM",
    "ColumnParallelLinear",
    "CommonAttentionMetadata",
    "CompiledGrammar",
    "DeltaFunctionCall",
    "DeltaMessage",
    "DeltaToolCall",
    "DispatchedTokens",
    "ENCODER_ONLY",
    "EncoderAttention",
    "ExpertDispatcher",
    "ExpertPlacement",
    "ExpertPlacementPolicy",
    "ExtractedToolCalls",
    "FunctionCall",
    "Drafts",
    "GeGLU",
    "GpuPlatform",
    "GrammarMatcher",
    "InfercoreConfig",
    "KVCacheSpec",
    "KernelSettings",
    "LayerNorm",
    "LearnedPositionEmbedding",
    "LinearWeightSpec",
    "Malformed",
    "MarkerReasoningParser",
    "MergedColumnParallelLinear",
    "ModelSpec",
    "MultiModalFeature",
    "MultiModalProcessor",
    "MultiModalStepInputs",
    "NeedMore",
    "ParallelLMHead",
    "ParamLayout",
    "PartialCall",
    "Platform",
    "PlatformCapabilities",
    "PluginError",
    "ProbeResult",
    "ModelProposer",
    "ProcessedImage",
    "Proposer",
    "ProposerSpec",
    "QKNormRotary",
    "QKVParallelLinear",
    "QuantizationConfig",
    "QuantizationMethod",
    "RMSNorm",
    "ReasoningParser",
    "ReferenceAttentionBackend",
    "RegionToolParser",
    "RegisterFn",
    "RotaryEmbedding",
    "RowParallelLinear",
    "Scanner",
    "SiluAndMul",
    "SpeculativeConfig",
    "StackedParam",
    "StructuredOutputBackend",
    "StructuredOutputsParams",
    "SupportsMultiModal",
    "TokenizerInfo",
    "ToolCall",
    "ToolParser",
    "ToolRequest",
    "VocabParallelEmbedding",
    "WireTensor",
    "alibi_slopes",
    "allocate_bitmask",
    "available_cpus",
    "apply_token_bitmask_torch",
    "attention_reference",
    "bitmask_width",
    "build_model_folder",
    "building_ahead",
    "check_schema",
    "content_hash",
    "contiguous_placement",
    "current_platform",
    "encoder_only_attention",
    "fp8_reference",
    "get_op",
    "get_rope",
    "hookimpl",
    "int4_reference",
    "kv_cache_fp8",
    "load_checkpoint_weights",
    "make_tool_call_id",
    "model_class",
    "op_reference",
    "parse_partial",
    "placement_from_owners",
    "partial_json",
    "set_expert_placement_policy",
    "set_layout",
]
