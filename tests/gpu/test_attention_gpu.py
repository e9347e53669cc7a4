"""Triton paged attention on the GPU at real shapes (contexts to 8k) against core's reference."""

from __future__ import annotations

import pytest
import torch
from gpu_marks import requires_gpu
from triton_cases import TOLERANCE, make_case, reference_attention, rel_err

from infercore.attention import CommonAttentionMetadata
from infercore.attention.spec import AttentionLayerSpec
from infercore.kv_cache.spec import KVCacheSpec
from infercore_cuda.platform import CudaPlatform
from infercore_triton.backend import TritonAttentionBackend, choose_decode_config, choose_num_splits
from infercore_triton.decode_attention import decode_attention
from infercore_triton.kv_cache_write import write_kv
from infercore_triton.prefill_attention import prefill_attention

pytestmark = requires_gpu
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# float32 dots run as tf32 on the GPU.
GPU_TOLERANCE = {**TOLERANCE, torch.float32: 2e-3}


def _reference(case, scale: float, window: int | None = None) -> torch.Tensor:  # noqa: ANN001
    return reference_attention(case, scale, window, dtype=torch.float32, device="cuda")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_size", [64, 128])
@pytest.mark.parametrize("group", [1, 2, 4, 8])
@pytest.mark.parametrize("block_size", [16, 32])
def test_decode_long_contexts(dtype: torch.dtype, head_size: int, group: int, block_size: int) -> None:
    seq_lens = [1, 77, 1024, 3001, 8192, 513]
    case = make_case(seq_lens, [1] * len(seq_lens), 4 * group, 4, head_size, block_size, dtype, "cuda",
                     seed=group + head_size)
    write_kv(case.k, case.v, case.kv_cache, case.slot_mapping)
    ref = _reference(case, head_size**-0.5)
    for splits in (1, choose_num_splits(len(seq_lens), 4, 8192, 132)):
        for config in (choose_decode_config(1), choose_decode_config(256)):  # both tile widths
            out = torch.full_like(case.q, float("nan"))
            decode_attention(case.q, case.kv_cache, case.seq_lens, case.block_table, head_size**-0.5, out,
                             num_splits=splits, config=config)
            assert rel_err(out, ref) < GPU_TOLERANCE[dtype], (splits, config)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("group", "short"), [(4, 4), (4, 6), (2, 4), (8, 4)])
@pytest.mark.parametrize("window", [None, 1000])
def test_verification_sharing_the_kv_reads_matches_the_reference(dtype: torch.dtype, group: int, short: int,
                                                                 window: int | None,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """``INFERCORE_VERIFY_SHARED_KV=1``: short queries (a row's token and its drafts) at long contexts, one split
    and the split count a decode step of as many rows would take, against the reference."""
    monkeypatch.setenv("INFERCORE_VERIFY_SHARED_KV", "1")
    query_lens = [short, 1, 3, short, 2, short]
    seq_lens = [4000, 77, 1500, 8192, 513, short]
    case = make_case(seq_lens, query_lens, 4 * group, 4, 128, 16, dtype, "cuda", seed=group + short)
    write_kv(case.k, case.v, case.kv_cache, case.slot_mapping)
    ref = _reference(case, 128**-0.5, window)
    for splits in (1, choose_num_splits(sum(query_lens), 4, 8192, 132)):
        out = torch.full_like(case.q, float("nan"))
        decode_attention(case.q, case.kv_cache, case.seq_lens, case.block_table, 128**-0.5, out, num_splits=splits,
                         sliding_window=window, query_start_loc=case.query_start_loc, short_queries=short)
        assert rel_err(out, ref) < GPU_TOLERANCE[dtype], splits


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_size", [64, 128])
@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("window", [None, 1000])
def test_prefill_long_contexts(dtype: torch.dtype, head_size: int, group: int, window: int | None) -> None:
    seq_lens, query_lens = [3000, 8192, 700, 5], [3000, 1024, 129, 1]
    case = make_case(seq_lens, query_lens, 2 * group, 2, head_size, 16, dtype, "cuda", seed=group)
    write_kv(case.k, case.v, case.kv_cache, case.slot_mapping)
    out = torch.full_like(case.q, float("nan"))
    prefill_attention(case.q, case.kv_cache, case.query_start_loc, case.seq_lens, case.block_table,
                      head_size**-0.5, out, case.max_query_len, sliding_window=window)
    assert rel_err(out, _reference(case, head_size**-0.5, window)) < GPU_TOLERANCE[dtype]


def test_decode_step_replays_from_a_cuda_graph() -> None:
    platform = CudaPlatform()
    case = make_case([500, 2002, 9, 3990], [1] * 4, 16, 8, 128, 16, torch.bfloat16, "cuda", seed=11)
    spec = KVCacheSpec(16, 8, 128, torch.bfloat16)
    builder = TritonAttentionBackend.get_builder_cls()(spec, torch.device("cuda"), 4, 4)
    impl = TritonAttentionBackend.get_impl_cls()(AttentionLayerSpec(num_heads=16, head_size=128, scale=128**-0.5,
                                                            num_kv_heads=8))
    common = CommonAttentionMetadata(
        num_reqs=4, num_actual_tokens=4, max_query_len=1, max_seq_len=3990,
        query_start_loc=case.query_start_loc, seq_lens=case.seq_lens, block_table=case.block_table,
        slot_mapping=case.slot_mapping, query_start_loc_cpu=case.query_start_loc.cpu(),
        seq_lens_cpu=case.seq_lens.cpu())
    meta = builder.build(common)
    q, k, v, out = case.q.clone(), case.k.clone(), case.v.clone(), torch.empty_like(case.q)
    cache = case.kv_cache
    impl.forward(q, k, v, cache, meta, out)  # compile outside the capture
    graph = platform.new_graph()
    with platform.capture_graph(graph):
        impl.forward(q, k, v, cache, meta, out)
    # The next step: one more token each (still inside its last block), new inputs copied into the
    # captured buffers in place.
    case.seq_lens.add_(1)
    case.slot_mapping.add_(1)
    nxt = make_case([501, 2003, 10, 3991], [1] * 4, 16, 8, 128, 16, torch.bfloat16, "cuda", seed=12)
    q.copy_(nxt.q)
    k.copy_(nxt.k)
    v.copy_(nxt.v)
    case.q, case.k, case.v = nxt.q, nxt.k, nxt.v
    ref = _reference(case, 128**-0.5)
    out.fill_(float("nan"))
    graph.replay()
    assert rel_err(out, ref) < GPU_TOLERANCE[torch.bfloat16]


def test_whole_mixed_step_with_long_context_decodes_replays_from_a_cuda_graph() -> None:
    """A step padded for a whole-step graph: a prompt chunk, then decodes of long contexts found on the device
    and split (merged by the last split, INFERCORE_DECODE_SPLIT_REDUCE=fused), captured once and replayed,
    against the reference; the default merge launch gives the same rows."""
    import dataclasses
    import os

    from infercore_triton.decode_attention import REDUCE_ENV

    platform = CudaPlatform()
    case = make_case([700, 6000, 8000, 33], [300, 1, 1, 1], 16, 8, 128, 16, torch.bfloat16, "cuda", seed=21)
    spec = KVCacheSpec(16, 8, 128, torch.bfloat16)
    builder = TritonAttentionBackend.get_builder_cls()(spec, torch.device("cuda"), 4, 512)
    impl = TritonAttentionBackend.get_impl_cls()(AttentionLayerSpec(num_heads=16, head_size=128, scale=128**-0.5,
                                                            num_kv_heads=8))
    common = CommonAttentionMetadata(
        num_reqs=4, num_actual_tokens=case.q.shape[0], max_query_len=300, max_seq_len=8000,
        query_start_loc=case.query_start_loc, seq_lens=case.seq_lens, block_table=case.block_table,
        slot_mapping=case.slot_mapping, query_start_loc_cpu=case.query_start_loc.cpu(),
        seq_lens_cpu=case.seq_lens.cpu())
    meta = builder.build(dataclasses.replace(common, padded_for_graph=True))
    assert meta.uniform and meta.num_splits > 1
    ref = _reference(case, 128**-0.5)
    q, k, v, out = case.q.clone(), case.k.clone(), case.v.clone(), torch.empty_like(case.q)
    os.environ[REDUCE_ENV] = "fused"
    try:
        impl.forward(q, k, v, case.kv_cache, meta, out)  # compile outside the capture
        graph = platform.new_graph()
        with platform.capture_graph(graph):
            impl.forward(q, k, v, case.kv_cache, meta, out)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
    finally:
        del os.environ[REDUCE_ENV]
    assert rel_err(out, ref) < GPU_TOLERANCE[torch.bfloat16]
    launched = torch.full_like(out, float("nan"))
    impl.forward(q, k, v, case.kv_cache, meta, launched)
    assert rel_err(launched, ref) < GPU_TOLERANCE[torch.bfloat16]
