"""The chunked decode kernel (a fixed grid walking fixed-size chunks) against core's torch reference."""

from __future__ import annotations

import pytest
import torch
from triton_cases import TOLERANCE, make_case, reference_attention, rel_err

from infercore_triton.decode_attention import DecodeConfig
from infercore_triton.decode_attention_chunked import chunk_counters, decode_attention_chunked
from infercore_triton.kv_cache_write import write_kv


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("group", "programs"), [(1, 1), (2, 3), (4, 2)])
def test_chunks_of_ragged_lengths_match_the_reference(dtype: torch.dtype, group: int, programs: int) -> None:
    # Lengths of one token, of exactly one chunk, just over one, and of several chunks.
    seq_lens = [1, 64, 65, 200, 130]
    case = make_case(seq_lens, [1] * 5, group * 2, 2, 64, 16, dtype, seed=group)
    write_kv(case.k, case.v, case.kv_cache, case.slot_mapping)
    out = torch.full_like(case.q, float("nan"))
    counters = chunk_counters(len(seq_lens), 2, "cpu")
    decode_attention_chunked(case.q, case.kv_cache, case.seq_lens, case.block_table, 0.125, out, chunk=64,
                             programs=programs, config=DecodeConfig(block_n=32), counters=counters)
    assert rel_err(out, reference_attention(case, 0.125)) < TOLERANCE[dtype]
    # The last program of each sequence put its counter back: the buffer serves the next launch as it is.
    assert torch.equal(counters, torch.zeros_like(counters))


def test_sliding_window_and_padding_rows() -> None:
    case = make_case([40, 200, 1], [1, 1, 1], 8, 2, 64, 16, torch.float32, seed=3)
    write_kv(case.k, case.v, case.kv_cache, case.slot_mapping)
    out = torch.full_like(case.q, float("nan"))
    decode_attention_chunked(case.q, case.kv_cache, case.seq_lens, case.block_table, 0.125, out, chunk=32,
                             programs=2, sliding_window=50, config=DecodeConfig(block_n=32))
    assert rel_err(out, reference_attention(case, 0.125, sliding_window=50)) < TOLERANCE[torch.float32]
    # A padding row of a graph-padded batch (seq_len 0) comes out as zeros, not NaN.
    padded = torch.full((4, 8, 64), float("nan"))
    decode_attention_chunked(torch.randn(4, 8, 64), case.kv_cache, torch.tensor([40, 0, 0, 1], dtype=torch.int32),
                             case.block_table[[0, 1, 1, 2]], 0.125, padded, chunk=32, programs=2,
                             config=DecodeConfig(block_n=32))
    assert torch.equal(padded[1:3], torch.zeros(2, 8, 64))


def test_a_chunk_must_hold_whole_tiles() -> None:
    case = make_case([10], [1], 2, 1, 64, 16, torch.float32)
    with pytest.raises(ValueError, match="multiple of the tile"):
        decode_attention_chunked(case.q, case.kv_cache, case.seq_lens, case.block_table, 0.125,
                                 torch.empty_like(case.q), chunk=48, programs=1, config=DecodeConfig(block_n=32))
