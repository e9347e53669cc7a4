"""Paged attention on the CPU with torch ops.

Decode requests (one query token each) are served together: their context K/V is gathered through
the block table into one padded batch and attended with a single SDPA call under a length mask.
Prefill requests run one SDPA each; a request with nothing cached uses its fresh K/V directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from infercore.attention import (
    AttentionBackend,
    AttentionImpl,
    AttentionMetadataBuilder,
    CommonAttentionMetadata,
)
from infercore.attention.reference import attend, causal_mask, gather_context, write_kv


@dataclass
class DecodeBatch:
    """The step's requests with one query token, padded to the longest context among them."""

    rows: slice | torch.Tensor  # their query rows in the flattened batch
    block_table: torch.Tensor  # int64 [n, blocks covering the longest context]
    seq_lens: torch.Tensor  # int64 [n]
    valid: torch.Tensor  # bool [n, 1, 1, padded_len]: context position < seq_len


@dataclass
class PrefillRequest:
    """One request with several query tokens: rows ``start:end``, ``seq_len`` tokens of context."""

    index: int
    start: int
    end: int
    seq_len: int


@dataclass
class TorchPagedMetadata:
    """Host-side layout of one step, shared by every layer."""

    num_actual_tokens: int
    slot_mapping: torch.Tensor
    block_table: torch.Tensor
    decode: DecodeBatch | None
    prefills: list[PrefillRequest]


class TorchPagedMetadataBuilder(AttentionMetadataBuilder):
    """Splits the step's requests into one decode batch and a list of prefills."""

    def build(self, common: CommonAttentionMetadata) -> TorchPagedMetadata:
        starts = common.query_start_loc_cpu[: common.num_reqs + 1].tolist()
        seq_lens = common.seq_lens_cpu[: common.num_reqs].tolist()
        decode_idx, prefills = [], []
        for i, seq_len in enumerate(seq_lens):
            if starts[i + 1] - starts[i] == 1:
                decode_idx.append(i)
            elif starts[i + 1] > starts[i]:
                prefills.append(PrefillRequest(i, starts[i], starts[i + 1], seq_len))
        decode = self._decode_batch(common, decode_idx, starts, seq_lens) if decode_idx else None
        return TorchPagedMetadata(common.num_actual_tokens, common.slot_mapping[: common.num_actual_tokens],
                                  common.block_table, decode, prefills)

    def _decode_batch(self, common: CommonAttentionMetadata, idx: list[int], starts: list[int],
                      seq_lens: list[int]) -> DecodeBatch:
        n = len(idx)
        lens = torch.tensor([seq_lens[i] for i in idx], dtype=torch.int64)
        num_blocks = -(-int(lens.max()) // self.spec.block_size)
        if idx == list(range(n)) and starts[n] == n:
            rows: slice | torch.Tensor = slice(0, n)
            table = common.block_table[:n, :num_blocks]
        else:
            rows = torch.tensor([starts[i] for i in idx], dtype=torch.int64)
            table = common.block_table[idx, :num_blocks]
        positions = torch.arange(num_blocks * self.spec.block_size)
        valid = (positions.unsqueeze(0) < lens.unsqueeze(1)).view(n, 1, 1, -1)
        return DecodeBatch(rows, table.to(torch.int64), lens, valid)


class TorchPagedAttentionImpl(AttentionImpl):
    """Writes K/V into the paged cache, then attends (batched decode, per-request prefill)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
                metadata: Any, out: torch.Tensor) -> torch.Tensor:
        meta: TorchPagedMetadata = metadata
        n = meta.num_actual_tokens
        write_kv(k[:n], v[:n], kv_cache, meta.slot_mapping)
        if meta.decode is not None:
            out[meta.decode.rows] = self._decode(q[meta.decode.rows], kv_cache, meta.decode)
        for req in meta.prefills:
            out[req.start:req.end] = self._prefill(q, k, v, kv_cache, meta.block_table, req)
        return out

    def _decode(self, q: torch.Tensor, kv_cache: torch.Tensor, batch: DecodeBatch) -> torch.Tensor:
        n = q.shape[0]
        keys = kv_cache[0][batch.block_table].view(n, -1, self.num_kv_heads, self.head_size).transpose(1, 2)
        values = kv_cache[1][batch.block_table].view(n, -1, self.num_kv_heads, self.head_size).transpose(1, 2)
        mask = batch.valid
        if self.sliding_window is not None:
            positions = torch.arange(keys.shape[2]).view(1, 1, 1, -1)
            mask = mask & (positions > (batch.seq_lens - 1 - self.sliding_window).view(-1, 1, 1, 1))
        out = F.scaled_dot_product_attention(q.unsqueeze(2), keys.to(q.dtype), values.to(q.dtype), attn_mask=mask,
                                             scale=self.scale, enable_gqa=self.num_heads != self.num_kv_heads)
        return out.squeeze(2)

    def _prefill(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
                 block_table: torch.Tensor, req: PrefillRequest) -> torch.Tensor:
        query_len = req.end - req.start
        qs = q[req.start:req.end]
        if req.seq_len == query_len and self.sliding_window is None:
            # Nothing cached before this step: attend over the fresh K/V with a plain causal mask.
            out = F.scaled_dot_product_attention(
                qs.transpose(0, 1), k[req.start:req.end].transpose(0, 1), v[req.start:req.end].transpose(0, 1),
                is_causal=True, scale=self.scale, enable_gqa=self.num_heads != self.num_kv_heads)
            return out.transpose(0, 1)
        keys, values = gather_context(kv_cache, block_table[req.index], req.seq_len)
        mask = causal_mask(query_len, req.seq_len, self.sliding_window, q.device)
        return attend(qs, keys, values, mask, self.scale)


class TorchPagedAttentionBackend(AttentionBackend):
    """The CPU platform's attention: torch SDPA over the default paged cache layout."""

    name = "torch_paged"

    @staticmethod
    def get_builder_cls() -> type[AttentionMetadataBuilder]:
        return TorchPagedMetadataBuilder

    @staticmethod
    def get_impl_cls() -> type[AttentionImpl]:
        return TorchPagedAttentionImpl
