"""``Attention.write_kv``: the cache entries of a forward pass without its attention (a draft head's catch-up
over tokens it will not draft from), on every in-tree CPU backend, and the fallback for backends without it."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from infercore.attention import Attention, AttentionImpl, CommonAttentionMetadata
from infercore.attention.reference_backend import ReferenceAttentionBackend
from infercore.attention.spec import AttentionLayerSpec
from infercore.forward_context import ForwardContext, set_forward_context
from infercore.kv_cache.spec import KVCacheSpec
from infercore_cpu.attention import TorchPagedAttentionBackend

HEADS, KV_HEADS, HEAD, BLOCK = 4, 2, 16, 4


class RecordingImpl(AttentionImpl):
    """Records which entry point ran."""

    def __init__(self, spec: AttentionLayerSpec) -> None:
        super().__init__(spec)
        self.calls: list[str] = []

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
                metadata: Any, out: torch.Tensor) -> torch.Tensor:
        self.calls.append("forward")
        return out.zero_()


class WritingImpl(RecordingImpl):
    writes_kv_alone = True

    def write_kv(self, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor, metadata: Any) -> None:
        assert k.shape == v.shape == (3, KV_HEADS, HEAD)
        self.calls.append("write_kv")


@pytest.mark.parametrize(("impl_cls", "expected"), [(RecordingImpl, ["forward"]), (WritingImpl, ["write_kv"])])
def test_the_layer_writes_alone_only_where_the_backend_can(impl_cls: type[RecordingImpl], expected: list[str]) -> None:
    layer = Attention(HEADS, HEAD, num_kv_heads=KV_HEADS, scale=HEAD**-0.5)
    layer.impl = impl = impl_cls(layer.spec)
    q, k, v = torch.randn(3, (HEADS + 2 * KV_HEADS) * HEAD).split([HEADS * HEAD, KV_HEADS * HEAD, KV_HEADS * HEAD], -1)
    with set_forward_context(ForwardContext("meta", 3)):
        assert layer.write_kv(q, k, v) is None
    assert impl.calls == expected


def _step(seq_lens: list[int], query_lens: list[int]) -> CommonAttentionMetadata:
    """A mixed step (decodes, an extend, a fresh prompt) over blocks in a shuffled order."""
    perm = torch.randperm(64, generator=torch.Generator().manual_seed(0))
    table = torch.zeros(len(seq_lens), 8, dtype=torch.int32)
    slots, used = [], 0
    for i, (length, q_len) in enumerate(zip(seq_lens, query_lens, strict=True)):
        pages = perm[used:used + -(-length // BLOCK)]
        used += len(pages)
        table[i, :len(pages)] = pages.to(torch.int32)
        pos = torch.arange(length - q_len, length)
        slots.append(pages[pos // BLOCK] * BLOCK + pos % BLOCK)
    qsl = torch.tensor([0, *query_lens], dtype=torch.int32).cumsum(0).to(torch.int32)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    return CommonAttentionMetadata(num_reqs=len(seq_lens), num_actual_tokens=sum(query_lens),
                                   max_query_len=max(query_lens), max_seq_len=max(seq_lens), query_start_loc=qsl,
                                   seq_lens=lens, block_table=table, slot_mapping=torch.cat(slots),
                                   query_start_loc_cpu=qsl, seq_lens_cpu=lens)


@pytest.mark.parametrize("backend", [ReferenceAttentionBackend, TorchPagedAttentionBackend])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_write_kv_stores_what_forward_stores(backend: Any, dtype: torch.dtype) -> None:
    common = _step([9, 5, 13, 6], [1, 1, 7, 6])
    spec = AttentionLayerSpec(num_heads=HEADS, head_size=HEAD, num_kv_heads=KV_HEADS, scale=HEAD**-0.5)
    meta = backend.get_builder_cls()(KVCacheSpec(BLOCK, KV_HEADS, HEAD, dtype), torch.device("cpu"), 8,
                                     64).build(common)
    impl = backend.get_impl_cls()(spec)
    assert impl.writes_kv_alone
    gen = torch.Generator().manual_seed(1)
    n = common.num_actual_tokens
    q, k, v = (torch.randn(n, heads, HEAD, generator=gen).to(dtype) for heads in (HEADS, KV_HEADS, KV_HEADS))
    cache = torch.randn(2, 64, BLOCK, KV_HEADS, HEAD, generator=gen).to(dtype)
    attended, written = cache.clone(), cache.clone()
    impl.forward(q, k, v, attended, meta, torch.empty_like(q))
    impl.write_kv(k, v, written, meta)
    assert not torch.equal(written, cache)
    assert torch.equal(written, attended)


@pytest.mark.parametrize("qk_norm", [False, True])
def test_a_decoder_attention_writes_the_entries_its_attend_writes(qk_norm: bool) -> None:
    """``LlamaAttention.write_kv`` projects, norms (Qwen3's per-head q/k norms) and rotates as ``attend`` does."""
    from transformers import Qwen3Config

    from infercore.models.llama import DecoderOptions, LlamaAttention

    config = Qwen3Config(hidden_size=64, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD,
                         max_position_embeddings=64)
    attention = LlamaAttention(config, DecoderOptions(qk_norm=qk_norm), 0, torch.float32)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for param in attention.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.2 + (1.0 if param.dim() == 1 else 0.0))
    attention.attn.impl = ReferenceAttentionBackend.get_impl_cls()(attention.attn.spec)
    common = _step([9, 5, 13, 6], [1, 1, 7, 6])
    meta = ReferenceAttentionBackend.get_builder_cls()(KVCacheSpec(BLOCK, KV_HEADS, HEAD, torch.float32),
                                                       torch.device("cpu"), 8, 64).build(common)
    n = common.num_actual_tokens
    positions = torch.cat([torch.arange(s - q, s) for s, q in ((9, 1), (5, 1), (13, 7), (6, 6))])
    hidden = torch.randn(n, 64, generator=gen)
    caches = []
    for method in (attention.attend, attention.write_kv):
        attention.attn.kv_cache = torch.zeros(2, 64, BLOCK, KV_HEADS, HEAD)
        with torch.no_grad(), set_forward_context(ForwardContext(meta, n)):
            method(positions, hidden)
        caches.append(attention.attn.kv_cache)
    assert caches[0].abs().sum() > 0
    torch.testing.assert_close(caches[1], caches[0], rtol=0, atol=0)
