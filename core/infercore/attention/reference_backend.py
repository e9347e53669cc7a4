"""The "reference" attention backend: the torch reference as a backend, for any platform.

Slow (one SDPA per request, host-side loops) but complete: sliding windows, ALiBi, GQA, any
dtype torch runs, fp8 caches, visibility bounds. Conformance tests compare other backends with it, and a new platform may
start on it before its own kernels exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from infercore.attention.backend import (
    AttentionBackend,
    AttentionImpl,
    AttentionMetadataBuilder,
    CommonAttentionMetadata,
)
from infercore.attention.encoder_only import ENCODER_ONLY, encoder_only_attention
from infercore.attention.reference import paged_attention, write_kv
from infercore.attention.spec import AttentionLayerSpec


@dataclass
class ReferenceMetadata:
    """The step's layout as the reference reads it."""

    num_reqs: int
    num_actual_tokens: int
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    slot_mapping: torch.Tensor
    visible_until: torch.Tensor | None = None


class ReferenceMetadataBuilder(AttentionMetadataBuilder):
    """Passes the common metadata through (host copies of the lengths)."""

    def build(self, common: CommonAttentionMetadata) -> ReferenceMetadata:
        n = common.num_reqs
        return ReferenceMetadata(n, common.num_actual_tokens, common.query_start_loc_cpu[: n + 1],
                                 common.seq_lens_cpu[:n], common.block_table, common.slot_mapping,
                                 common.visible_until_cpu)


class ReferenceAttentionImpl(AttentionImpl):
    """Writes every K/V of the step, then attends request by request with the torch reference."""

    writes_kv_alone = True

    def __init__(self, spec: AttentionLayerSpec) -> None:
        super().__init__(spec)
        self._slopes = torch.tensor(spec.alibi_slopes) if spec.alibi_slopes is not None else None

    def write_kv(self, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor, metadata: Any) -> None:
        meta: ReferenceMetadata = metadata
        n = meta.num_actual_tokens
        write_kv(k[:n], v[:n], kv_cache, meta.slot_mapping, self.spec.k_scale, self.spec.v_scale)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
                metadata: Any, out: torch.Tensor) -> torch.Tensor:
        meta: ReferenceMetadata = metadata
        spec = self.spec
        if spec.attn_type == ENCODER_ONLY:
            return encoder_only_attention(q, k, v, meta.query_start_loc, meta.num_reqs, self.scale, out)
        self.write_kv(k, v, kv_cache, meta)
        slopes = self._slopes.to(q.device) if self._slopes is not None else None
        return paged_attention(q, kv_cache, meta.query_start_loc, meta.seq_lens, meta.block_table, self.scale,
                               out, self.sliding_window, slopes, meta.num_reqs, spec.k_scale, spec.v_scale,
                               meta.visible_until)


class ReferenceAttentionBackend(AttentionBackend):
    """The torch reference of paged attention, registered by core as ``reference``."""

    name = "reference"
    supports_encoder_only = True
    supports_visible_bounds = True

    @staticmethod
    def get_builder_cls() -> type[AttentionMetadataBuilder]:
        return ReferenceMetadataBuilder

    @staticmethod
    def get_impl_cls() -> type[AttentionImpl]:
        return ReferenceAttentionImpl
