"""The CPU paged attention backend and the torch reference against dense attention written by hand."""

from __future__ import annotations

import random

import pytest
import torch

from infercore.attention import CommonAttentionMetadata
from infercore.attention.reference import paged_attention, write_kv
from infercore.attention.spec import AttentionLayerSpec
from infercore.kv_cache.spec import KVCacheSpec
from infercore_cpu.attention import TorchPagedAttentionBackend

BLOCK, HEADS, KV_HEADS, HEAD = 16, 4, 2, 8
SCALE = HEAD**-0.5


def dense_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None) -> torch.Tensor:
    """q [Q, H, D] at the last Q positions of a context k/v [L, KVH, D]; explicit softmax."""
    query_len, seq_len = q.shape[0], k.shape[0]
    group = HEADS // KV_HEADS
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) * SCALE
    q_pos = torch.arange(seq_len - query_len, seq_len).unsqueeze(1)
    k_pos = torch.arange(seq_len).unsqueeze(0)
    allowed = k_pos <= q_pos
    if window is not None:
        allowed &= q_pos - k_pos < window
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


def make_step(requests: list[tuple[int, int]], num_blocks: int = 256, seed: int = 0):
    """Random contexts for (seq_len, query_len) requests; the cached part already in the cache.

    Returns q, k, v of this step, the cache, the metadata, and each request's full context K/V.
    """
    gen = torch.Generator().manual_seed(seed)
    free = list(range(num_blocks))
    random.Random(seed).shuffle(free)
    cache = torch.randn(2, num_blocks, BLOCK, KV_HEADS, HEAD, generator=gen) * 100
    width = max(-(-s // BLOCK) for s, _ in requests) + 1
    table = torch.zeros(len(requests), width, dtype=torch.int32)
    qs, ks, vs, slots, contexts, starts = [], [], [], [], [], [0]
    for i, (seq_len, query_len) in enumerate(requests):
        blocks = [free.pop() for _ in range(-(-seq_len // BLOCK))]
        table[i, : len(blocks)] = torch.tensor(blocks)
        req_slots = torch.tensor([blocks[p // BLOCK] * BLOCK + p % BLOCK for p in range(seq_len)])
        k = torch.randn(seq_len, KV_HEADS, HEAD, generator=gen)
        v = torch.randn(seq_len, KV_HEADS, HEAD, generator=gen)
        cached = seq_len - query_len
        write_kv(k[:cached], v[:cached], cache, req_slots[:cached])
        qs.append(torch.randn(query_len, HEADS, HEAD, generator=gen))
        ks.append(k[cached:])
        vs.append(v[cached:])
        slots.append(req_slots[cached:])
        contexts.append((k, v))
        starts.append(starts[-1] + query_len)
    qsl = torch.tensor(starts, dtype=torch.int32)
    lens = torch.tensor([s for s, _ in requests], dtype=torch.int32)
    common = CommonAttentionMetadata(
        num_reqs=len(requests), num_actual_tokens=starts[-1], max_query_len=max(q for _, q in requests),
        max_seq_len=int(lens.max()), query_start_loc=qsl, seq_lens=lens, block_table=table,
        slot_mapping=torch.cat(slots).long(), query_start_loc_cpu=qsl, seq_lens_cpu=lens)
    return torch.cat(qs), torch.cat(ks), torch.cat(vs), cache, common, contexts


def expected_output(q: torch.Tensor, common: CommonAttentionMetadata, contexts, window: int | None) -> torch.Tensor:
    starts = common.query_start_loc.tolist()
    return torch.cat([dense_attention(q[starts[i]:starts[i + 1]], k, v, window)
                      for i, (k, v) in enumerate(contexts)])


STEPS = {
    "fresh prefills": [(5, 5), (17, 17), (33, 33), (1, 1)],
    "prefills after cached prefixes": [(20, 4), (40, 24), (16, 15), (33, 2)],
    "pure decode": [(1, 1), (16, 1), (17, 1), (70, 1), (33, 1)],
    "mixed, decodes not first": [(30, 30), (17, 1), (40, 8), (5, 1), (64, 1)],
    # Enough decodes to be split into several length groups.
    "many decodes and a prefill": [(1 + (i * 37) % 90, 1) for i in range(20)] + [(45, 12)]
    + [(1 + (i * 53) % 70, 1) for i in range(13)],
}


@pytest.mark.parametrize("window", [None, 7])
@pytest.mark.parametrize("name", list(STEPS))
def test_backend_matches_dense_attention(name: str, window: int | None) -> None:
    q, k, v, cache, common, contexts = make_step(STEPS[name])
    spec = KVCacheSpec(BLOCK, KV_HEADS, HEAD, torch.float32)
    meta = TorchPagedAttentionBackend.get_builder_cls()(spec, torch.device("cpu"), 16, 256).build(common)
    impl = TorchPagedAttentionBackend.get_impl_cls()(AttentionLayerSpec(num_heads=HEADS, head_size=HEAD, scale=SCALE,
                                                                num_kv_heads=KV_HEADS, sliding_window=window))
    out = impl.forward(q, k, v, cache, meta, torch.empty_like(q))
    torch.testing.assert_close(out, expected_output(q, common, contexts, window), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("window", [None, 7])
def test_reference_matches_dense_attention(window: int | None) -> None:
    q, k, v, cache, common, contexts = make_step(STEPS["mixed, decodes not first"])
    write_kv(k, v, cache, common.slot_mapping)
    out = paged_attention(q, cache, common.query_start_loc, common.seq_lens, common.block_table, SCALE,
                          torch.empty_like(q), sliding_window=window)
    torch.testing.assert_close(out, expected_output(q, common, contexts, window), atol=1e-5, rtol=1e-5)


def test_write_kv_skips_padding_slots() -> None:
    cache = torch.zeros(2, 4, BLOCK, KV_HEADS, HEAD)
    k, v = torch.randn(3, KV_HEADS, HEAD), torch.randn(3, KV_HEADS, HEAD)
    write_kv(k, v, cache, torch.tensor([2 * BLOCK + 5, -1, 7]))
    torch.testing.assert_close(cache[0, 2, 5], k[0])
    torch.testing.assert_close(cache[1, 0, 7], v[2])
    assert int((cache != 0).flatten(2).any(-1).sum()) == 4
