"""The plugin API of infercore: the one module a plugin imports.

Everything a platform, attention backend, custom op or model plugin needs is here; the rest of
``infercore`` is private and may change in any release. In-tree plugins are held to this module by a
test that reads their imports.

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
  the step before any attention of the layer reads the cache (same-step prefix sharing).
* :class:`CausalLM` / :class:`ModelSpec`: a model is built with ``from_spec(spec)`` in the dtype the
  loader sets, declares its KV cache through its :class:`Attention` layers, and ``load_weights``
  receives raw checkpoint names and returns the parameter names it filled.
* Custom ops: a platform registers a kernel under an op's name with ``platform=NAME``; it must compute
  what the torch reference in :data:`op_reference` computes, with the same signature
  (:data:`CUSTOM_OPS` lists them). A name with no registration for the platform and no reference is
  an error, never another platform's kernel.

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
    from infercore.models.contract import (
        CausalLM,
        ModelSpec,
    )
    from infercore.models.loader import (
        model_class,
    )
    from infercore.models.weight_loading import (
        StackedParam,
        load_checkpoint_weights,
    )
    from infercore.ops import reference as op_reference
    from infercore.ops.dispatch import (
        get_op,
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
    from infercore.quantization import fp8_math as fp8_reference
    from infercore.tiny_models import (
        build_model_folder,
    )

#: The custom ops a platform may replace, each defined by the function of the same name in
#: :data:`op_reference`.
CUSTOM_OPS: tuple[str, ...] = (
    "linear", "rms_norm", "fused_add_rms_norm", "rotary_embedding", "qk_norm_rotary", "silu_and_mul",
    "gelu", "gelu_and_mul", "layer_norm", "embedding", "alibi_bias", "gumbel_argmax",
    "apply_penalties",
    "fp8_linear", "fp8_block_linear", "fused_moe",
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
    "encoder_only_attention": "infercore.attention.encoder_only",
    "ColumnParallelLinear": "infercore.layers",
    "CommonAttentionMetadata": "infercore.attention.backend",
    "GELU": "infercore.layers",
    "GPU_CAPABILITIES": "infercore.platforms.gpu",
    "GeGLU": "infercore.layers",
    "GpuPlatform": "infercore.platforms.gpu",
    "InfercoreConfig": "infercore.config",
    "KVCacheSpec": "infercore.kv_cache.spec",
    "KernelSettings": "infercore.platforms.capabilities",
    "LinearWeightSpec": "infercore.quantization",
    "LayerNorm": "infercore.layers",
    "LearnedPositionEmbedding": "infercore.layers",
    "MergedColumnParallelLinear": "infercore.layers",
    "ModelSpec": "infercore.models.contract",
    "ParallelLMHead": "infercore.layers",
    "Platform": "infercore.platforms.interface",
    "PlatformCapabilities": "infercore.platforms.interface",
    "ParamLayout": "infercore.quantization",
    "PluginError": "infercore.plugins.manager",
    "ProbeResult": "infercore.platforms.interface",
    "QKNormRotary": "infercore.attention.qk_norm_rotary",
    "QKVParallelLinear": "infercore.layers",
    "QuantizationConfig": "infercore.quantization",
    "QuantizationMethod": "infercore.quantization",
    "RMSNorm": "infercore.layers",
    "ReferenceAttentionBackend": "infercore.attention.reference_backend",
    "RotaryEmbedding": "infercore.layers",
    "RowParallelLinear": "infercore.layers",
    "SiluAndMul": "infercore.layers",
    "StackedParam": "infercore.models.weight_loading",
    "UNPROFILED_KV_FRACTION": "infercore.platforms.interface",
    "VocabParallelEmbedding": "infercore.layers",
    "alibi_slopes": "infercore.layers",
    "build_model_folder": "infercore.tiny_models",
    "current_platform": "infercore.platforms.selection",
    "get_op": "infercore.ops.dispatch",
    "get_rope": "infercore.layers",
    "load_checkpoint_weights": "infercore.models.weight_loading",
    "model_class": "infercore.models.loader",
    "set_layout": "infercore.quantization",
}

_LAZY_MODULES: dict[str, str] = {
    "attention_reference": "infercore.attention.reference",
    "fp8_reference": "infercore.quantization.fp8_math",
    "kv_cache_fp8": "infercore.kv_cache.fp8",
    "op_reference": "infercore.ops.reference",
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
    "ENCODER_ONLY",
    "GeGLU",
    "GpuPlatform",
    "InfercoreConfig",
    "KVCacheSpec",
    "KernelSettings",
    "LayerNorm",
    "LearnedPositionEmbedding",
    "LinearWeightSpec",
    "MergedColumnParallelLinear",
    "ModelSpec",
    "ParallelLMHead",
    "ParamLayout",
    "Platform",
    "PlatformCapabilities",
    "PluginError",
    "ProbeResult",
    "QKNormRotary",
    "QKVParallelLinear",
    "QuantizationConfig",
    "QuantizationMethod",
    "RMSNorm",
    "ReferenceAttentionBackend",
    "RegisterFn",
    "RotaryEmbedding",
    "RowParallelLinear",
    "SiluAndMul",
    "StackedParam",
    "VocabParallelEmbedding",
    "alibi_slopes",
    "attention_reference",
    "build_model_folder",
    "current_platform",
    "encoder_only_attention",
    "fp8_reference",
    "get_op",
    "get_rope",
    "hookimpl",
    "kv_cache_fp8",
    "load_checkpoint_weights",
    "model_class",
    "op_reference",
    "set_layout",
]
