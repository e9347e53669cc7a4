"""Triton paged attention and KV write against core's torch reference, through the interpreter."""

from __future__ import annotations

import pytest
import torch
from triton_cases import TOLERANCE, make_case, reference_attention, rel_err

from infercore.attention.reference import write_kv as reference_write_kv
from infercore_triton.decode_attention import DecodeConfig, decode_attention
from infercore_triton.kv_cache_write import write_kv
from infercore_triton.prefill_attention import prefill_attention

DTYPES = [torch.float32, torch.bfloat16]


def _kv_heads(group: int) -> int:
    # Keep the interpreter's program count small: fewer KV heads for the wide groups.
    return 2 if group <= 2 else 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_size", [16, 32])
def test_write_kv_skips_padding_slots(dtype: torch.dtype, block_size: int) -> None:
    case = make_case([20, 45], [20, 7], 4, 2, 64, block_size, dtype, seed=block_size)
    slots = case.slot_mapping.clone()
    slots[3] = -1
    expected = case.kv_cache.clone()
    reference_write_kv(case.k, case.v, expected, slots)
    write_kv(case.k, case.v, case.kv_cache, slots)
    assert torch.equal(case.kv_cache, expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_size", [64, 128])
@pytest.mark.parametrize("group", [1, 2, 4, 8])
@pytest.mark.parametrize("block_size", [16, 32])
def test_decode_matches_reference(dtype: torch.dtype, head_size: int, group: int, block_size: int) -> None:
    kv_heads = _kv_heads(group)
    seq_lens = [1, 17, 130, 300]
    case = make_case(seq_lens, [1] * 4, group * kv_heads, kv_heads, head_size, block_size, dtype,
                     seed=group * head_size + block_size)
    write_kv(case.k, case.v, case.kv_cache, case.slot_mapping)
    out = torch.full_like(case.q, float("nan"))
    splits = 1 + (group + block_size) % 4
    decode_attention(case.q, case.kv_cache, case.seq_lens, case.block_table, head_size**-0.5, out,
                     num_splits=splits)
    assert rel_err(out, reference_attention(case, head_size**-0.5)) < TOLERANCE[dtype]


@pytest.mark.parametrize(("splits", "block_n", "runtime_splits"), [(1, 64, False), (4, 64, False), (4, 32, False),
                                                                   (3, 64, True)])
def test_decode_sliding_window_and_empty_rows(splits: int, block_n: int, runtime_splits: bool) -> None:
    config = DecodeConfig(block_n=block_n)
    case = make_case([40, 200, 1], [1, 1, 1], 8, 2, 64, 16, torch.float32, seed=splits)
    write_kv(case.k, case.v, case.kv_cache, case.slot_mapping)
    out = torch.full_like(case.q, float("nan"))
    decode_attention(case.q, case.kv_cache, case.seq_lens, case.block_table, 0.125, out,
                     num_splits=splits, sliding_window=50, config=config, runtime_splits=runtime_splits)
    assert rel_err(out, reference_attention(case, 0.125, sliding_window=50)) < TOLERANCE[torch.float32]
    # A padding row of a graph-padded batch (seq_len 0) comes out as zeros, not NaN.
    padded = torch.full((4, 8, 64), float("nan"))
    decode_attention(torch.randn(4, 8, 64), case.kv_cache, torch.tensor([40, 0, 0, 1], dtype=torch.int32),
                     case.block_table[[0, 1, 1, 2]], 0.125, padded, num_splits=splits, config=config,
                     runtime_splits=runtime_splits)
    assert torch.equal(padded[1:3], torch.zeros(2, 8, 64))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_size", [64, 128])
@pytest.mark.parametrize(("group", "block_size"), [(1, 16), (2, 32), (4, 16), (8, 32)])
def test_prefill_with_cached_prefixes(dtype: torch.dtype, head_size: int, group: int, block_size: int) -> None:
    kv_heads = 1
    # A fresh prompt, a chunk after a cached prefix, a long extend, and a decode in the same batch.
    seq_lens, query_lens = [23, 50, 150, 9], [23, 12, 40, 1]
    case = make_case(seq_lens, query_lens, group * kv_heads, kv_heads, head_size, block_size, dtype,
                     seed=7 * group + head_size + block_size)
    write_kv(case.k, case.v, case.kv_cache, case.slot_mapping)
    out = torch.full_like(case.q, float("nan"))
    prefill_attention(case.q, case.kv_cache, case.query_start_loc, case.seq_lens, case.block_table,
                      head_size**-0.5, out, case.max_query_len)
    assert rel_err(out, reference_attention(case, head_size**-0.5)) < TOLERANCE[dtype]


def test_prefill_sliding_window() -> None:
    case = make_case([90, 33], [40, 33], 4, 2, 64, 16, torch.float32, seed=3)
    write_kv(case.k, case.v, case.kv_cache, case.slot_mapping)
    out = torch.full_like(case.q, float("nan"))
    prefill_attention(case.q, case.kv_cache, case.query_start_loc, case.seq_lens, case.block_table, 0.125, out,
                      case.max_query_len, sliding_window=24)
    assert rel_err(out, reference_attention(case, 0.125, sliding_window=24)) < TOLERANCE[torch.float32]


@pytest.mark.parametrize(("splits", "runtime_splits", "window"), [(4, False, None), (3, True, None), (5, False, 50)])
def test_decode_splits_merged_in_kernel_match_the_merge_launch(
        monkeypatch: pytest.MonkeyPatch, splits: int, runtime_splits: bool, window: int | None) -> None:
    """The split that finishes last merges a row's partials (arrival counters) as the separate merge kernel
    does, rows of length 0 included, and leaves every counter at zero for the next launch."""
    from infercore_triton import split_k_counters
    from infercore_triton.decode_attention import REDUCE_ENV

    case = make_case([40, 200, 0, 1, 77], [1, 1, 0, 1, 1], 8, 2, 64, 16, torch.float32, seed=splits)
    write_kv(case.k, case.v, case.kv_cache, case.slot_mapping)
    q = torch.randn(5, 8, 64)
    seq_lens = torch.tensor([40, 200, 0, 1, 77], dtype=torch.int32)
    table = case.block_table[[0, 1, 1, 2, 3]]

    def run() -> torch.Tensor:
        out = torch.full_like(q, float("nan"))
        decode_attention(q, case.kv_cache, seq_lens, table, 0.125, out, num_splits=splits, sliding_window=window,
                         config=DecodeConfig(block_n=32), runtime_splits=runtime_splits)
        return out

    launched = run()  # the default: a merge launch of its own
    monkeypatch.setenv(REDUCE_ENV, "fused")
    merged = run()
    counters = split_k_counters.tile_counters(q.device, 0)
    assert counters is not None and not counters.any()
    assert torch.allclose(merged, launched, atol=1e-6, rtol=1e-5)
    assert torch.equal(merged[2], torch.zeros(8, 64))
