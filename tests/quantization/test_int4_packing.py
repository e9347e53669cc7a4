"""The 4-bit packers of the tests and infercore's unpacking agree with the formats' definitions and with
each other; the kernel layout and the torch reference GEMM agree with a dense product."""

from __future__ import annotations

import pytest
import torch
from int4_checkpoints import (
    act_order,
    pack_awq,
    pack_awq_word_by_word,
    pack_gptq_columns,
    pack_gptq_rows,
    pack_gptq_rows_word_by_word,
    to_int32,
)

from infercore.ops.int4_math import dequantize, int4_linear, make_int4_weight
from infercore.ops.int4_packing import (
    pack_interleaved,
    pack_sequential,
    unpack_awq,
    unpack_interleaved,
    unpack_sequential,
)

#: Codes 1..8 in columns (or rows) 0..7.
ONE_TO_EIGHT = torch.arange(1, 9, dtype=torch.uint8)


def test_awq_packs_columns_in_its_interleaved_order() -> None:
    # Nibbles 0..7 (low to high) hold columns 0, 2, 4, 6, 1, 3, 5, 7: codes 1, 3, 5, 7, 2, 4, 6, 8.
    assert pack_awq(ONE_TO_EIGHT.view(1, 8)).item() == to_int32(0x86427531)


def test_gptq_packs_eight_rows_per_word_in_order() -> None:
    assert pack_gptq_rows(ONE_TO_EIGHT.view(8, 1)).item() == to_int32(0x87654321)
    assert pack_gptq_columns(ONE_TO_EIGHT.view(1, 8)).item() == to_int32(0x87654321)
    assert pack_gptq_rows(torch.full((8, 1), 15, dtype=torch.uint8)).item() == -1


def _codes(rows: int, cols: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 16, (rows, cols), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8)


def _words(rows: int, cols: int, seed: int) -> torch.Tensor:
    return torch.randint(-2**31, 2**31, (rows, cols), generator=torch.Generator().manual_seed(seed)).to(torch.int32)


def test_unpacking_inverts_the_formats_packers() -> None:
    codes = _codes(16, 24, seed=0)
    assert torch.equal(unpack_awq(pack_awq(codes)), codes)
    assert torch.equal(unpack_sequential(pack_gptq_rows(codes), dim=0), codes)
    assert torch.equal(unpack_sequential(pack_gptq_columns(codes), dim=1), codes)


def test_repacking_unpacked_words_gives_them_back() -> None:
    words = _words(4, 3, seed=1)
    assert torch.equal(pack_awq(unpack_awq(words)), words)
    assert torch.equal(pack_gptq_rows(unpack_sequential(words, dim=0)), words)
    assert torch.equal(pack_sequential(unpack_sequential(words, dim=0), dim=0), words)
    assert torch.equal(pack_sequential(unpack_sequential(words, dim=1), dim=1), words)


@pytest.mark.parametrize("act", [False, True], ids=["in-order", "act-order"])
def test_reference_gemm_is_the_dense_product_of_the_dequantized_weight(act: bool) -> None:
    k, n, group = 64, 24, 16
    codes, zeros = _codes(k, n, seed=2), _codes(k // group, n, seed=3)
    scales = torch.rand(k // group, n, generator=torch.Generator().manual_seed(4)) + 0.1
    g_idx = act_order(k, group, seed=5) if act else None
    rows = g_idx.long() if act else torch.arange(k) // group
    dense = (codes.float() - zeros.float()[rows]) * scales[rows]
    weight = make_int4_weight(codes, scales, zeros, group, g_idx)
    assert (weight.perm is not None) == act and weight.row_groups is None
    x = torch.randn(5, k, generator=torch.Generator().manual_seed(6))
    assert torch.allclose(int4_linear(x, weight), x @ dense, atol=1e-4)
    if act:
        assert torch.equal(dequantize(weight), dense[weight.perm])


def test_uneven_groups_keep_a_group_per_row() -> None:
    # A row-parallel shard of an act-order layer: its rows belong to any of the layer's groups.
    k, n, group = 32, 8, 16
    codes, zeros, scales = _codes(k, n, seed=7), _codes(4, n, seed=8), torch.rand(4, n) + 0.1
    g_idx = torch.randint(0, 4, (k,), generator=torch.Generator().manual_seed(9)).to(torch.int32)
    weight = make_int4_weight(codes, scales, zeros, group, g_idx)
    assert weight.row_groups is not None
    dense = (codes.float() - zeros.float()[g_idx.long()]) * scales[g_idx.long()]
    x = torch.randn(3, k, generator=torch.Generator().manual_seed(10))
    assert torch.allclose(int4_linear(x, weight), x @ dense, atol=1e-4)


def test_g_idx_outside_the_groups_is_refused() -> None:
    codes, zeros, scales = _codes(16, 8, seed=11), _codes(2, 8, seed=12), torch.ones(2, 8)
    with pytest.raises(ValueError, match="g_idx names groups 0..5 but the layer has 2 groups"):
        make_int4_weight(codes, scales, zeros, 8, torch.tensor([5] + [0] * 15, dtype=torch.int32))


def test_interleaved_words_hold_rows_in_awq_order() -> None:
    # Nibbles 0..7 hold rows 0, 2, 4, 6, 1, 3, 5, 7 (codes 1, 3, 5, 7, 2, 4, 6, 8): word >> 4r masked with
    # 0x000F000F gives rows 2r and 2r + 1; the reference reads them back in row order.
    assert pack_interleaved(ONE_TO_EIGHT.view(8, 1)).item() == to_int32(0x86427531)
    codes = _codes(16, 24, seed=6)
    assert torch.equal(unpack_interleaved(pack_interleaved(codes)), codes)
    zeros, scales = _codes(1, 24, seed=7), torch.rand(1, 24) + 0.1
    assert torch.equal(dequantize(make_int4_weight(codes, scales, zeros, 16, interleaved=True)),
                       dequantize(make_int4_weight(codes, scales, zeros, 16)))


def test_the_whole_tensor_packers_write_the_word_by_word_packers_words() -> None:
    # The word-by-word packers state the formats; the writers use the vectorized ones (model-sized checkpoints).
    codes = torch.randint(0, 16, (24, 40), generator=torch.Generator().manual_seed(3), dtype=torch.int64).to(torch.uint8)
    codes[0, :8] = 15  # a word of all ones: the top bit set, a negative int32
    assert torch.equal(pack_awq(codes), pack_awq_word_by_word(codes))
    assert torch.equal(pack_gptq_rows(codes), pack_gptq_rows_word_by_word(codes))
    for packer in (pack_awq_word_by_word, pack_gptq_rows_word_by_word):
        assert packer(torch.full((8, 8), 15, dtype=torch.uint8)).flatten()[0].item() == -1
