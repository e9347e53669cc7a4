"""acme's attention backend: explicit softmax attention over the default paged cache layout."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from infercore.plugin_api import (
    AttentionBackend,
    AttentionImpl,
    AttentionMetadataBuilder,
    AttentionRequest,
    CommonAttentionMetadata,
)


@dataclass
class AcmeMetadata:
    """Host copies of the step's layout (only the first ``num_reqs`` entries of the host tensors)."""

    num_actual_tokens: int
    query_starts: list[int]
    seq_lens: list[int]
    block_table: torch.Tensor
    slot_mapping: torch.Tensor


class AcmeMetadataBuilder(AttentionMetadataBuilder):
    """Reads the lengths once per step."""

    def build(self, common: CommonAttentionMetadata) -> AcmeMetadata:
        n = common.num_reqs
        return AcmeMetadata(common.num_actual_tokens, common.query_start_loc_cpu[: n + 1].tolist(),
                            common.seq_lens_cpu[:n].tolist(), common.block_table, common.slot_mapping)


class AcmeAttentionImpl(AttentionImpl):
    """Writes all of the step's K/V first, then attends request by request."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
                metadata: Any, out: torch.Tensor) -> torch.Tensor:
        meta: AcmeMetadata = metadata
        self._write(k[: meta.num_actual_tokens], v[: meta.num_actual_tokens], kv_cache, meta.slot_mapping)
        for i, seq_len in enumerate(meta.seq_lens):
            start, end = meta.query_starts[i], meta.query_starts[i + 1]
            if end > start:
                out[start:end] = self._attend(q[start:end], kv_cache, meta.block_table[i], seq_len)
        return out

    @staticmethod
    def _write(k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
        slots = slot_mapping[: k.shape[0]]
        keep = slots >= 0
        heads, size = kv_cache.shape[-2:]
        kv_cache[0].view(-1, heads, size)[slots[keep]] = k[keep].to(kv_cache.dtype)
        kv_cache[1].view(-1, heads, size)[slots[keep]] = v[keep].to(kv_cache.dtype)

    def _attend(self, q: torch.Tensor, kv_cache: torch.Tensor, row: torch.Tensor, seq_len: int) -> torch.Tensor:
        block_size = kv_cache.shape[2]
        blocks = row[: -(-seq_len // block_size)].long()
        group = self.num_heads // self.num_kv_heads
        keys = kv_cache[0, blocks].flatten(0, 1)[:seq_len].float().repeat_interleave(group, dim=1)
        values = kv_cache[1, blocks].flatten(0, 1)[:seq_len].float().repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q.float(), keys) * self.scale
        q_pos = torch.arange(seq_len - q.shape[0], seq_len).view(1, -1, 1)
        k_pos = torch.arange(seq_len).view(1, 1, -1)
        allowed = k_pos <= q_pos
        if self.sliding_window is not None:
            allowed = allowed & (q_pos - k_pos < self.sliding_window)
        if self.alibi_slopes is not None:
            scores = scores + torch.tensor(self.alibi_slopes).view(-1, 1, 1) * (k_pos - q_pos)
        weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
        return torch.einsum("hqk,khd->qhd", weights, values).to(q.dtype)


class AcmeAttentionBackend(AttentionBackend):
    """Paged attention for the acme platform (default cache layout)."""

    name = "acme_attention"

    @classmethod
    def validate(cls, request: AttentionRequest) -> list[str]:
        reasons = []
        if request.device_type != "cpu":
            reasons.append(f"acme attention runs on the host, not {request.device_type}")
        if request.kv_cache_dtype not in (torch.float32, torch.bfloat16, torch.float16):
            reasons.append(f"KV cache dtype {request.kv_cache_dtype} is not implemented (no scaled fp8 cache)")
        return reasons

    @staticmethod
    def get_builder_cls() -> type[AttentionMetadataBuilder]:
        return AcmeMetadataBuilder

    @staticmethod
    def get_impl_cls() -> type[AttentionImpl]:
        return AcmeAttentionImpl
