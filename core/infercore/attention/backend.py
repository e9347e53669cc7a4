"""The attention backend interface: what a plugin implements to run attention over the paged KV cache.

A backend is three things: the shape of one layer's KV cache, a metadata builder that turns the
runner's :class:`CommonAttentionMetadata` into whatever its kernels want, and an implementation
whose ``forward`` writes the step's K/V into the cache and computes attention.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from infercore.attention.qk_norm_rotary import QKNormRotary
from infercore.attention.spec import AttentionLayerSpec
from infercore.kv_cache.spec import KVCacheSpec


@dataclass(frozen=True)
class AttentionRequest:
    """What a model needs from attention; a backend's ``validate`` says whether it can serve it."""

    num_heads: int
    num_kv_heads: int
    head_size: int
    dtype: torch.dtype
    kv_cache_dtype: torch.dtype
    block_size: int
    device_type: str
    sliding_window: int | None = None
    #: Whether some layer adds an ALiBi bias; a backend without ALiBi says so in validate.
    alibi: bool = False
    #: Whether some layer is encoder-only (bidirectional, no KV cache); see ``supports_encoder_only``.
    encoder_only: bool = False
    #: Whether steps carry per-token visibility bounds (image tokens seeing their whole span); see
    #: ``supports_visible_bounds``.
    visible_bounds: bool = False


@dataclass
class CommonAttentionMetadata:
    """One step's batch layout, built by the model runner, backend-agnostic.

    Tokens of all scheduled requests are flattened into one batch with no padding between
    requests (``num_actual_tokens`` real tokens; a graph-padded batch may be longer). Request
    ``i`` owns query tokens ``query_start_loc[i]:query_start_loc[i+1]``; its context after this
    step is ``seq_lens[i]`` tokens, of which ``seq_lens[i] - query_len`` were already in the cache.
    Device tensors are views of persistent buffers that the runner fills in place, so a captured
    graph can replay them; the ``*_cpu`` copies are for host-side decisions.

    Contracts a backend may rely on:

    * **Slot mapping.** Token ``j`` of the batch is stored at flat slot
      ``slot_mapping[j] = block_table[i, p // block_size] * block_size + p % block_size``, where ``i`` is
      its request and ``p`` its position in that request; ``-1`` marks a padding token whose K/V must
      not be written. Block 0 is the null block and never holds a live token. ``slot_mapping`` may
      be longer than ``num_actual_tokens`` (graph padding); entries past it are ``-1`` or ignored.
    * **Lengths.** ``query_start_loc_cpu`` and ``seq_lens_cpu`` may be *longer* than the batch
      (they are views of buffers sized for the largest batch): read only the first
      ``num_reqs + 1`` / ``num_reqs`` entries. The device tensors have exactly that length except in
      a graph-padded pure-decode batch, whose padding requests have ``seq_lens == 0``.
    * **Block table.** Row ``i`` lists request ``i``'s blocks in order; entries past its last block
      are unspecified. Rows may be shared between requests' prefixes (prefix caching): two requests
      of one step may read the same block.
    * **Whole-step graphs** (``padded_for_graph``; only for a backend that sets
      :attr:`AttentionBackend.captures_mixed_steps`). A step with prompt tokens replays a graph
      captured for ``len(slot_mapping)`` tokens and ``num_reqs`` requests: the requests past the real
      ones have no query tokens (``query_start_loc`` stays at ``num_actual_tokens``) and
      ``seq_lens == 0``. Every launch must then depend only on those two counts and the tensors'
      contents, never on ``max_query_len``, ``max_seq_len`` or the ``*_cpu`` copies, which describe the
      step the graph was captured on.
    * **Visibility bounds** (only for a model with bidirectional image spans, and only read by a backend
      that sets :attr:`AttentionBackend.supports_visible_bounds`): ``visible_until[j]`` is the last context
      position query token ``j`` may attend to, at least its own position (:mod:`infercore.attention.visible_bounds`).
      None: every query is causal. The device tensor is a persistent buffer (graphs replay it).
    """

    num_reqs: int
    num_actual_tokens: int
    max_query_len: int
    max_seq_len: int
    query_start_loc: torch.Tensor  # int32 [num_reqs + 1]
    seq_lens: torch.Tensor  # int32 [num_reqs]
    block_table: torch.Tensor  # int32 [num_reqs, max_blocks_per_req]
    slot_mapping: torch.Tensor  # int64 [num_tokens]; -1 for padding tokens
    query_start_loc_cpu: torch.Tensor
    seq_lens_cpu: torch.Tensor
    padded_for_graph: bool = False
    visible_until: torch.Tensor | None = None  # int32 [num_tokens]
    visible_until_cpu: torch.Tensor | None = None
    #: The most tokens a speculating request verifies in a step (1 + k with speculative decoding, else 1),
    #: the same for every step of an engine: a backend may shape captured launches by it.
    max_verify_len: int = 1

    @property
    def is_pure_decode(self) -> bool:
        return self.max_query_len == 1


class AttentionMetadataBuilder(ABC):
    """Builds a backend's per-step metadata. One instance per runner; it may own persistent buffers."""

    def __init__(self, spec: KVCacheSpec, device: torch.device, max_num_reqs: int, max_num_tokens: int) -> None:
        self.spec = spec
        self.device = device
        self.max_num_reqs = max_num_reqs
        self.max_num_tokens = max_num_tokens

    @abstractmethod
    def build(self, common: CommonAttentionMetadata) -> Any:
        """Metadata for this step, shared by every attention layer."""


class AttentionImpl(ABC):
    """Runs attention for one layer; built with that layer's :class:`AttentionLayerSpec`.

    The spec's fields are also attributes (``self.num_heads``, ``self.scale``,
    ``self.sliding_window``, ``self.k_scale``…) for convenience.

    An implementation that sets :attr:`fuses_qk_norm_rotary` also implements
    :meth:`forward_qk_norm_rotary`, which the layer then calls for Qwen3-style attention instead of
    norming and rotating q and k itself before :meth:`forward`. One that sets :attr:`writes_kv_alone`
    implements :meth:`write_kv`, the cache write without the attention (1.16).
    """

    #: Whether :meth:`forward_qk_norm_rotary` is implemented (optional; default: the layer norms and
    #: rotates q and k with the platform's ``qk_norm_rotary`` op and calls :meth:`forward`).
    fuses_qk_norm_rotary: ClassVar[bool] = False
    #: Whether :meth:`write_kv` is implemented (optional, 1.16; default: a layer asked only for its cache
    #: entries runs :meth:`forward` and drops the output).
    writes_kv_alone: ClassVar[bool] = False

    def __init__(self, spec: AttentionLayerSpec, *positional: object) -> None:
        # ``*positional`` only catches impls constructed the pre-1.0 way, to say what changed.
        if positional or not isinstance(spec, AttentionLayerSpec):
            raise TypeError(f"{type(self).__name__} is built with one AttentionLayerSpec (plugin API 1.0), "
                            f"got {type(spec).__name__}; pass infercore.plugin_api.AttentionLayerSpec(...)")
        self.spec = spec
        self.num_heads = spec.num_heads
        self.head_size = spec.head_size
        self.scale = spec.scale
        self.num_kv_heads = spec.num_kv_heads
        self.sliding_window = spec.sliding_window
        self.alibi_slopes = spec.alibi_slopes
        self.k_scale = spec.k_scale
        self.v_scale = spec.v_scale

    @abstractmethod
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
                metadata: Any, out: torch.Tensor) -> torch.Tensor:
        """Write this step's ``k``/``v`` into ``kv_cache`` at the slot mapping, then attend.

        Shapes: ``q`` and ``out`` are [num_tokens, num_heads, head_size]; ``k`` and ``v`` are
        [num_tokens, num_kv_heads, head_size]. Fills ``out`` and returns it. ``q``, ``k`` and ``v``
        may be token-strided views (column slices of the fused QKV output): only the head and
        feature dimensions are dense; a backend that needs contiguous input copies it itself.

        **Same-step prefix sharing.** Several requests of one step may share cache blocks (a prefix
        hit on a block another request of this same step is filling). Every K/V of the step must
        therefore be written into ``kv_cache`` before any attention of this layer reads the cache:
        write all tokens first, then attend; never interleave per request. Attention of a query at
        position ``p`` covers context positions ``0..p`` (within ``sliding_window`` when set, with the
        ALiBi bias when ``alibi_slopes`` is set), scaled by ``scale``.

        **FP8 cache.** When ``kv_cache`` is float8_e4m3fn, write ``K / k_scale`` and ``V / v_scale``
        saturated to +-448 and read entries back multiplied by the scale, as
        :mod:`infercore.kv_cache.fp8` does; every query (prefill ones included) attends over the
        stored, quantized K/V, so a token's result does not depend on whether it was cached.
        """

    def forward_qk_norm_rotary(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
                               metadata: Any, out: torch.Tensor, qk_norm_rotary: QKNormRotary) -> torch.Tensor:
        """:meth:`forward` for ``q`` and ``k`` not yet normed and rotated: apply ``qk_norm_rotary`` first.

        Called only when :attr:`fuses_qk_norm_rotary` is set, so that the backend can do it in the same
        pass as its KV cache write. The result, the K/V stored in the cache and the same-step and fp8
        contracts are those of :meth:`forward` after the custom op ``qk_norm_rotary``; ``q`` and ``k`` may
        be overwritten (their values afterwards are unspecified).
        """
        raise NotImplementedError(f"{type(self).__name__} sets fuses_qk_norm_rotary but does not implement "
                                  "forward_qk_norm_rotary; implement it or leave the flag False")

    def write_kv(self, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor, metadata: Any) -> None:
        """Write this step's ``k``/``v`` into ``kv_cache`` at the slot mapping, exactly as :meth:`forward` does
        (fp8 scaling included), and attend to nothing.

        Called only when :attr:`writes_kv_alone` is set: by a layer whose output nobody reads, only its cache
        entries (a draft head's catch-up over tokens it will not draft from). Shapes as in :meth:`forward`.
        """
        raise NotImplementedError(f"{type(self).__name__} sets writes_kv_alone but does not implement write_kv; "
                                  "implement it or leave the flag False")


class AttentionBackend(ABC):
    """A named attention implementation, registered through ``register_attention_backends``."""

    name: ClassVar[str] = ""
    #: Whether steps with prompt tokens may be captured whole (optional; default False): the builder
    #: honours :attr:`CommonAttentionMetadata.padded_for_graph`, launching from the padded token and
    #: request counts alone. Otherwise such steps are captured in pieces between attention calls,
    #: which run eagerly.
    captures_mixed_steps: ClassVar[bool] = False
    #: Whether the impl runs layers whose spec says ``attn_type="encoder_only"`` (optional; default False,
    #: and the engine refuses such a model with this backend): see :mod:`infercore.attention.encoder_only`.
    supports_encoder_only: ClassVar[bool] = False
    #: Whether prefill attention honours :attr:`CommonAttentionMetadata.visible_until` (optional; default
    #: False, and the engine refuses models with bidirectional image spans, such as Gemma 3 with images):
    #: see :mod:`infercore.attention.visible_bounds`.
    supports_visible_bounds: ClassVar[bool] = False

    @classmethod
    def validate(cls, request: AttentionRequest) -> list[str]:
        """Reasons this backend cannot serve ``request`` (empty when it can)."""
        return []

    @staticmethod
    def get_kv_cache_shape(num_blocks: int, block_size: int, num_kv_heads: int,
                           head_size: int) -> tuple[int, ...]:
        """Shape of one layer's cache. Default: [2 (K, V), num_blocks, block_size, kv_heads, head_size]."""
        return (2, num_blocks, block_size, num_kv_heads, head_size)

    @staticmethod
    @abstractmethod
    def get_builder_cls() -> type[AttentionMetadataBuilder]: ...

    @staticmethod
    @abstractmethod
    def get_impl_cls() -> type[AttentionImpl]: ...
