"""The "triton" attention backend: paged KV cache write, split-K decode and ragged prefill kernels."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import triton

from infercore.attention import (
    AttentionBackend,
    AttentionImpl,
    AttentionMetadataBuilder,
    AttentionRequest,
    CommonAttentionMetadata,
)
from infercore.kv_cache.spec import KVCacheSpec
from infercore_triton.decode_attention import decode_attention
from infercore_triton.kv_cache_write import write_kv
from infercore_triton.prefill_attention import prefill_attention

#: Fewest context tokens worth a split of their own: below this the merge costs more than it saves.
MIN_TOKENS_PER_SPLIT = 256
MAX_SPLITS = 32


def choose_num_splits(num_reqs: int, num_kv_heads: int, max_context: int, num_sms: int) -> int:
    """Splits per (sequence, KV head) so that a decode launch has about two programs per multiprocessor.

    Depends only on the batch size and the block table's width, never on this step's lengths, so
    a step replayed from a captured graph keeps the split count it was captured with.
    """
    programs = max(1, num_reqs * num_kv_heads)
    wanted = triton.cdiv(2 * num_sms, programs)
    by_context = max(1, triton.cdiv(max_context, MIN_TOKENS_PER_SPLIT))
    return max(1, min(wanted, by_context, MAX_SPLITS))


def _multiprocessor_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    if device.type == "xpu":
        props = torch.xpu.get_device_properties(device)
        return int(getattr(props, "gpu_subslice_count", 0) or getattr(props, "max_compute_units", 64))
    return 4


@dataclass
class TritonAttentionMetadata:
    """One step's layout for the Triton kernels; the tensors are the runner's persistent views."""

    num_reqs: int
    num_actual_tokens: int
    max_query_len: int
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    slot_mapping: torch.Tensor
    #: Context splits of the decode kernel (pure-decode steps); 1 otherwise.
    num_splits: int

    @property
    def is_pure_decode(self) -> bool:
        return self.max_query_len == 1


class TritonAttentionMetadataBuilder(AttentionMetadataBuilder):
    """Chooses the decode split count; keeps the runner's buffers so graph replays see new values."""

    def __init__(self, spec: KVCacheSpec, device: torch.device, max_num_reqs: int, max_num_tokens: int) -> None:
        super().__init__(spec, device, max_num_reqs, max_num_tokens)
        self.num_sms = _multiprocessor_count(device)

    def build(self, common: CommonAttentionMetadata) -> TritonAttentionMetadata:
        num_splits = 1
        if common.is_pure_decode:
            max_context = common.block_table.shape[1] * self.spec.block_size
            num_splits = choose_num_splits(common.num_reqs, self.spec.num_kv_heads, max_context, self.num_sms)
        return TritonAttentionMetadata(
            num_reqs=common.num_reqs, num_actual_tokens=common.num_actual_tokens,
            max_query_len=common.max_query_len, query_start_loc=common.query_start_loc,
            seq_lens=common.seq_lens, block_table=common.block_table, slot_mapping=common.slot_mapping,
            num_splits=num_splits,
        )


class TritonAttentionImpl(AttentionImpl):
    """Writes the step's K/V into the cache, then runs the decode or the prefill kernel."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
                metadata: Any, out: torch.Tensor) -> torch.Tensor:
        meta: TritonAttentionMetadata = metadata
        write_kv(k, v, kv_cache, meta.slot_mapping)
        n = meta.num_reqs
        if meta.is_pure_decode:
            decode_attention(q[:n], kv_cache, meta.seq_lens[:n], meta.block_table[:n], self.scale, out[:n],
                             num_splits=meta.num_splits, sliding_window=self.sliding_window)
        else:
            prefill_attention(q, kv_cache, meta.query_start_loc[:n + 1], meta.seq_lens[:n], meta.block_table[:n],
                              self.scale, out, meta.max_query_len, sliding_window=self.sliding_window)
        return out


class TritonAttentionBackend(AttentionBackend):
    """Paged attention in Triton for any GPU Triton targets (CUDA, ROCm, XPU)."""

    name = "triton"

    @classmethod
    def validate(cls, request: AttentionRequest) -> list[str]:
        reasons = []
        if request.num_heads % request.num_kv_heads:
            reasons.append(f"{request.num_heads} query heads are not a multiple of {request.num_kv_heads} KV heads")
        if request.head_size > 256:
            reasons.append(f"head size {request.head_size} is over 256, the largest these kernels tile")
        supported = (torch.float32, torch.float16, torch.bfloat16)
        for what, dtype in (("dtype", request.dtype), ("KV cache dtype", request.kv_cache_dtype)):
            if dtype not in supported:
                reasons.append(f"{what} {dtype} is not one of float32, float16, bfloat16")
        return reasons

    @staticmethod
    def get_builder_cls() -> type[AttentionMetadataBuilder]:
        return TritonAttentionMetadataBuilder

    @staticmethod
    def get_impl_cls() -> type[AttentionImpl]:
        return TritonAttentionImpl
