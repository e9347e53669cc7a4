"""The prefill kernel's head packing, launch configurations and key-tile plan, through the interpreter."""

from __future__ import annotations

import random

import pytest
import torch
import triton
import triton.language as tl
from triton_cases import TOLERANCE, make_case, reference_attention, rel_err

from infercore_triton.decode_attention import NO_WINDOW
from infercore_triton.kv_cache_write import write_kv
from infercore_triton.prefill_attention import PrefillConfig, key_ranges, prefill_attention

CONFIGS = [
    PrefillConfig(block_m=32, block_n=16, pack_heads=False),
    PrefillConfig(block_m=64, block_n=16, m_blocks_inner=False),
    PrefillConfig(block_m=128, block_n=64),
]


def _name(config: PrefillConfig) -> str:
    return f"m{config.block_m}n{config.block_n}pack{int(config.pack_heads)}inner{int(config.m_blocks_inner)}"


def _check(group: int, kv_heads: int, head_size: int, config: PrefillConfig, window: int | None,
           seq_lens: list[int], query_lens: list[int], dtype: torch.dtype, seed: int) -> None:
    case = make_case(seq_lens, query_lens, group * kv_heads, kv_heads, head_size, 16, dtype, seed=seed)
    write_kv(case.k, case.v, case.kv_cache, case.slot_mapping)
    out = torch.full_like(case.q, float("nan"))
    prefill_attention(case.q, case.kv_cache, case.query_start_loc, case.seq_lens, case.block_table,
                      head_size**-0.5, out, case.max_query_len, sliding_window=window, config=config)
    assert rel_err(out, reference_attention(case, head_size**-0.5, sliding_window=window)) < TOLERANCE[dtype]


#: (config, group, head size, dtype): groups packed whole (2, 8), in part (6 as 3 x 2) or not at all
#: (3, or with packing off), a padded head (80).
PACKING_CASES = [
    (CONFIGS[0], 2, 128, torch.bfloat16),
    (CONFIGS[0], 3, 80, torch.float32),
    (CONFIGS[1], 2, 128, torch.bfloat16),
    (CONFIGS[1], 6, 64, torch.float32),
    (CONFIGS[1], 8, 64, torch.float32),
    (CONFIGS[2], 2, 128, torch.bfloat16),
    (CONFIGS[2], 3, 80, torch.float32),
    (CONFIGS[2], 8, 64, torch.float32),
]


@pytest.mark.parametrize(("config", "group", "head_size", "dtype"), PACKING_CASES,
                         ids=[f"{_name(c)}-g{g}-d{d}" for c, g, d, _ in PACKING_CASES])
def test_packed_groups_match_the_reference(config: PrefillConfig, group: int, head_size: int,
                                           dtype: torch.dtype) -> None:
    """A fresh prompt, a chunk after a cached prefix, a long extend and a decode in one batch."""
    _check(group, 2 if group <= 3 else 1, head_size, config, None, [23, 50, 80, 9], [23, 12, 70, 1],
           dtype, seed=group * head_size + config.block_m)


@pytest.mark.parametrize("config", CONFIGS, ids=_name)
@pytest.mark.parametrize("window", [5, 70])
def test_sliding_window_with_packed_heads(config: PrefillConfig, window: int) -> None:
    """Windows narrower than a tile and wide enough for unmasked tiles between the window's edge
    and the diagonal."""
    _check(4, 1, 64, config, window, [120, 33], [100, 33], torch.float32, seed=window + config.block_m)


@triton.jit
def _key_ranges_kernel(first_pos_ptr, hi_ptr, window_ptr, out_ptr, BLOCK_N: tl.constexpr, WINDOWED: tl.constexpr):
    i = tl.program_id(0)
    start, full_lo, full_hi = key_ranges(tl.load(first_pos_ptr + i), tl.load(hi_ptr + i), tl.load(window_ptr + i),
                                         BLOCK_N, WINDOWED)
    tl.store(out_ptr + 3 * i, start)
    tl.store(out_ptr + 3 * i + 1, full_lo)
    tl.store(out_ptr + 3 * i + 2, full_hi)


def _tiles(a: int, b: int, step: int) -> list[range]:
    return [range(n0, n0 + step) for n0 in range(a, b, step)]


@pytest.mark.parametrize("windowed", [False, True])
@pytest.mark.parametrize("block_n", [16, 64])
def test_key_tiles_skip_what_no_row_sees_and_mask_only_the_edges(windowed: bool, block_n: int) -> None:
    """Every key a row sees is in some tile; no tile is wholly unseen; an unmasked tile is seen whole
    by every row; a masked tile could not have gone unmasked."""
    rng = random.Random(block_n + windowed)
    cases = []
    for _ in range(200):
        seq_len = rng.randint(1, 400)
        first_pos = rng.randint(0, seq_len - 1)
        hi = min(first_pos + rng.choice([1, 8, 16, 64, 128]), seq_len)
        cases.append((first_pos, hi, rng.randint(1, 300) if windowed else NO_WINDOW))
    first_pos, hi, window = (torch.tensor(column, dtype=torch.int32) for column in zip(*cases, strict=True))
    out = torch.zeros((len(cases), 3), dtype=torch.int32)
    _key_ranges_kernel[(len(cases),)](first_pos, hi, window, out, BLOCK_N=block_n, WINDOWED=windowed)
    for (pos0, end, w), (start, full_lo, full_hi) in zip(cases, out.tolist(), strict=True):
        seen = [set(range(max(p - w + 1, 0), p + 1)) for p in range(pos0, end)]
        seen_by_any, seen_by_all = set().union(*seen), set.intersection(*seen)
        masked = _tiles(start, full_lo, block_n) + _tiles(full_hi, end, block_n)
        unmasked = _tiles(full_lo, full_hi, block_n)
        assert start <= full_lo <= full_hi <= end
        assert seen_by_any <= set().union(*map(set, masked + unmasked))
        assert all(set(tile) & seen_by_any for tile in masked + unmasked)
        assert all(set(tile) <= seen_by_all for tile in unmasked)
        assert not any(set(tile) <= seen_by_all for tile in masked)


@pytest.mark.parametrize("field", ["block_m", "block_n"])
@pytest.mark.parametrize("value", [8, 48])
def test_tiles_that_are_not_powers_of_two_from_16_are_refused(field: str, value: int) -> None:
    with pytest.raises(ValueError, match=f"PrefillConfig.{field} is {value}; use a power of two"):
        PrefillConfig(**{field: value})
