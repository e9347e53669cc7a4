"""The "triton" backend end to end: builder metadata, KV write and attention in one forward."""

from __future__ import annotations

import pytest
import torch
from triton_cases import TOLERANCE, make_case, reference_attention, rel_err

from infercore.attention import AttentionRequest, CommonAttentionMetadata
from infercore.attention.spec import AttentionLayerSpec
from infercore.kv_cache.spec import KVCacheSpec
from infercore.plugins import get_plugin_manager
from infercore_triton.backend import (
    MAX_SPLITS,
    TritonAttentionBackend,
    choose_decode_config,
    choose_num_splits,
    count_leading_decodes,
)


def _common(case, num_tokens: int) -> CommonAttentionMetadata:  # noqa: ANN001
    return CommonAttentionMetadata(
        num_reqs=case.seq_lens.shape[0], num_actual_tokens=num_tokens, max_query_len=case.max_query_len,
        max_seq_len=int(case.seq_lens.max()), query_start_loc=case.query_start_loc, seq_lens=case.seq_lens,
        block_table=case.block_table, slot_mapping=case.slot_mapping,
        query_start_loc_cpu=case.query_start_loc.cpu(), seq_lens_cpu=case.seq_lens.cpu())


@pytest.mark.parametrize(("seq_lens", "query_lens", "num_decodes"), [
    ([30, 64, 5], [30, 10, 1], 0),  # a trailing one-token query stays with the prefill kernel
    ([33, 100, 1], [1, 1, 1], 3),  # pure decode
    ([40, 7, 90, 64, 20], [1, 1, 1, 10, 20], 3),  # decodes first, then an extend and a fresh prompt
])
def test_forward_writes_cache_and_attends(seq_lens: list[int], query_lens: list[int], num_decodes: int) -> None:
    case = make_case(seq_lens, query_lens, 8, 2, 64, 16, torch.bfloat16, seed=len(seq_lens))
    spec = KVCacheSpec(16, 2, 64, torch.bfloat16)
    builder = TritonAttentionBackend.get_builder_cls()(spec, torch.device("cpu"), 8, 256)
    meta = builder.build(_common(case, case.q.shape[0]))
    assert meta.num_decodes == num_decodes
    impl = TritonAttentionBackend.get_impl_cls()(AttentionLayerSpec(num_heads=8, head_size=64, scale=0.125, num_kv_heads=2))
    out = torch.full_like(case.q, float("nan"))
    ref = reference_attention(case, 0.125)
    impl.forward(case.q, case.k, case.v, case.kv_cache, meta, out)
    assert rel_err(out, ref) < TOLERANCE[torch.bfloat16]


def test_decodes_beside_a_prefill_split_their_contexts_at_run_time() -> None:
    case = make_case([40, 7, 90, 64, 20], [1, 1, 1, 10, 20], 8, 2, 64, 16, torch.bfloat16, seed=5)
    spec = KVCacheSpec(16, 2, 64, torch.bfloat16)
    builder = TritonAttentionBackend.get_builder_cls()(spec, torch.device("cpu"), 8, 256)
    builder.num_sms = 132
    meta = builder.build(_common(case, case.q.shape[0]))
    assert meta.num_decodes == 3 and not meta.uniform and meta.runtime_splits
    assert meta.num_splits == choose_num_splits(3, 2, case.block_table.shape[1] * 16, 132) > 1
    impl = TritonAttentionBackend.get_impl_cls()(AttentionLayerSpec(num_heads=8, head_size=64, scale=0.125, num_kv_heads=2))
    out = torch.full_like(case.q, float("nan"))
    impl.forward(case.q, case.k, case.v, case.kv_cache, meta, out)
    assert rel_err(out, reference_attention(case, 0.125)) < TOLERANCE[torch.bfloat16]


def test_decodes_of_a_whole_mixed_graph_split_their_contexts() -> None:
    """A step padded for a whole-step graph (decodes last, as the runner puts them) splits its decodes' contexts
    as a decode step of the walking programs' rows would, with the count a run-time argument (one variant)."""
    import dataclasses

    case = make_case([64, 20, 300, 41], [10, 20, 1, 1], 8, 2, 64, 16, torch.bfloat16, seed=9)
    spec = KVCacheSpec(16, 2, 64, torch.bfloat16)
    builder = TritonAttentionBackend.get_builder_cls()(spec, torch.device("cpu"), 8, 256)
    builder.num_sms = 132
    meta = builder.build(dataclasses.replace(_common(case, case.q.shape[0]), padded_for_graph=True))
    assert meta.uniform and meta.runtime_splits and meta.num_decodes == 0
    assert meta.num_splits == choose_num_splits(4, 2, case.block_table.shape[1] * 16, 132) > 1
    impl = TritonAttentionBackend.get_impl_cls()(AttentionLayerSpec(num_heads=8, head_size=64, scale=0.125, num_kv_heads=2))
    out = torch.full_like(case.q, float("nan"))
    impl.forward(case.q, case.k, case.v, case.kv_cache, meta, out)
    assert rel_err(out, reference_attention(case, 0.125)) < TOLERANCE[torch.bfloat16]


def test_num_splits_fill_the_device_and_stay_bounded() -> None:
    assert choose_num_splits(256, 8, 4096, 132) == 1
    assert choose_num_splits(1, 8, 8192, 132) == MAX_SPLITS
    assert choose_num_splits(1, 8, 300, 132) == 5
    # About PROGRAMS_PER_SM programs per multiprocessor (12: 16 x 8 x 13 = 1,664 for 132 of them); over an fp8
    # cache FP8_PROGRAMS_PER_SM (2).
    assert choose_num_splits(16, 8, 4096, 132) == 13
    assert choose_num_splits(16, 8, 4096, 132, fp8_cache=True) == 3
    assert choose_num_splits(128, 8, 4096, 132) == 2
    # A narrow table (max_model_len 1024) at batch 1 gets as many splits as its 64-token tiles.
    assert choose_num_splits(1, 8, 1024, 132) == 16


def test_leading_decodes_and_their_launch_config() -> None:
    assert count_leading_decodes(torch.tensor([0, 1, 2, 12, 13]), 4) == 2
    assert count_leading_decodes(torch.tensor([0, 1, 2, 3, 0, 0]), 3) == 3  # entries past num_reqs are unused
    assert count_leading_decodes(torch.tensor([0, 5, 6]), 2) == 0
    assert choose_decode_config(256).block_n == 128
    assert choose_decode_config(64).block_n == 128
    assert choose_decode_config(4).block_n == 64


def test_validate_names_what_it_cannot_serve() -> None:
    ok = AttentionRequest(16, 8, 128, torch.bfloat16, torch.bfloat16, 16, "cuda")
    assert TritonAttentionBackend.validate(ok) == []
    bad = AttentionRequest(12, 8, 512, torch.bfloat16, torch.int8, 16, "cuda")
    assert len(TritonAttentionBackend.validate(bad)) == 3


def test_registered_for_every_triton_platform() -> None:
    manager = get_plugin_manager()
    assert manager.registry("attention_backend").load("triton") is TritonAttentionBackend
    ops = manager.registry("custom_op")
    for platform in ("cuda", "rocm", "xpu"):
        for name in ("rms_norm", "fused_add_rms_norm", "rotary_embedding", "qk_norm_rotary", "silu_and_mul"):
            assert ops.get(name, platform).target.startswith("infercore_triton."), (name, platform)
    assert not ops.get("rms_norm", "cpu").target.startswith("infercore_triton.")  # the CPU platform's own
    assert ops.get("int4_linear", "cuda").target == "infercore_triton.int4_gemm:int4_linear"
    assert ops.get("int4_linear", "cpu").target == "infercore.ops.reference:int4_linear"


@pytest.mark.parametrize("mode", ["static", "runtime"])
def test_pure_decode_split_counts_at_run_time_on_request(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """A pure-decode step passes its split count at run time (one compiled variant for every captured batch
    size) unless ``INFERCORE_DECODE_SPLITS=static``, and attends as the compiled count does."""
    monkeypatch.setenv("INFERCORE_DECODE_SPLITS", mode)
    case = make_case([40, 7, 90], [1, 1, 1], 8, 2, 64, 16, torch.bfloat16, seed=3)
    builder = TritonAttentionBackend.get_builder_cls()(KVCacheSpec(16, 2, 64, torch.bfloat16), torch.device("cpu"), 8, 256)
    builder.num_sms = 132
    meta = builder.build(_common(case, case.q.shape[0]))
    assert meta.num_splits > 1 and meta.runtime_splits == (mode == "runtime")
    impl = TritonAttentionBackend.get_impl_cls()(AttentionLayerSpec(num_heads=8, head_size=64, scale=0.125, num_kv_heads=2))
    out = torch.full_like(case.q, float("nan"))
    impl.forward(case.q, case.k, case.v, case.kv_cache, meta, out)
    assert rel_err(out, reference_attention(case, 0.125)) < TOLERANCE[torch.bfloat16]


def test_write_kv_alone_stores_what_forward_stores() -> None:
    case = make_case([40, 7, 90, 64, 20], [1, 1, 1, 10, 20], 8, 2, 64, 16, torch.bfloat16, seed=3)
    builder = TritonAttentionBackend.get_builder_cls()(KVCacheSpec(16, 2, 64, torch.bfloat16), torch.device("cpu"), 8,
                                                       256)
    meta = builder.build(_common(case, case.q.shape[0]))
    impl = TritonAttentionBackend.get_impl_cls()(AttentionLayerSpec(num_heads=8, head_size=64, scale=0.125, num_kv_heads=2))
    assert impl.writes_kv_alone
    attended, written = case.kv_cache.clone(), case.kv_cache.clone()
    impl.forward(case.q, case.k, case.v, attended, meta, torch.empty_like(case.q))
    impl.write_kv(case.k, case.v, written, meta)
    assert not torch.equal(written, case.kv_cache)
    assert torch.equal(written, attended)
