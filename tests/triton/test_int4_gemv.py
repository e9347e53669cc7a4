"""The multiply-add W4A16 kernel of single rows against core's INT4 reference, through Triton's interpreter."""

from __future__ import annotations

import pytest
import torch
from test_int4_gemm import _weight, _x
from triton_cases import rel_err

from infercore.ops import int4_math
from infercore_triton.int4_gemm import w4a16_gemm
from infercore_triton.int4_gemv import Int4GemvConfig, gemv_fits, w4a16_gemv

SMALL = Int4GemvConfig(block_n=32, words=4, num_warps=1, split_k=1)


@pytest.mark.parametrize(("m", "n", "k", "group"), [(1, 32, 64, 32), (1, 48, 128, 16), (2, 40, 96, -1),
                                                    (3, 32, 64, 8), (4, 64, 128, 128)])
@pytest.mark.parametrize("interleaved", [True, False], ids=["interleaved", "sequential"])
def test_gemv_matches_reference(m: int, n: int, k: int, group: int, interleaved: bool) -> None:
    # 48 and 40 columns leave a partial tile; group -1 is one group over 96 rows (32-row steps); groups
    # of 8 take one word row per step; 3 rows pad to 4.
    weight = _weight(k, n, group, seed=k + n, interleaved=interleaved)
    x = _x(m, k)
    assert rel_err(w4a16_gemv(x, weight, None, split_for=1, config=SMALL), int4_math.int4_linear(x, weight)) < 1e-5


@pytest.mark.parametrize("split_k", [2, 3])
def test_gemv_split_k_with_bias(split_k: int) -> None:
    weight = _weight(192, 32, 32, seed=1)
    x, bias = _x(1, 192), torch.randn(32)
    config = Int4GemvConfig(block_n=32, words=4, num_warps=1, split_k=split_k)
    assert rel_err(w4a16_gemv(x, weight, bias, 1, config), int4_math.int4_linear(x, weight, bias)) < 1e-5


def test_gemv_bias_and_split_to_fill() -> None:
    weight = _weight(256, 32, 64, seed=2)
    x, bias = _x(1, 256), torch.randn(32)
    out = w4a16_gemv(x, weight, bias, split_for=4, config=Int4GemvConfig(block_n=32, words=2, num_warps=1))
    assert rel_err(out, int4_math.int4_linear(x, weight, bias)) < 1e-5


def test_gemv_with_act_order_in_gathered_columns() -> None:
    weight = _weight(64, 32, 16, seed=3, act_order=True)
    x = _x(1, 64)
    out = w4a16_gemv(x.index_select(1, weight.perm), weight, None, 1, SMALL)
    assert rel_err(out, int4_math.int4_linear(x, weight)) < 1e-5


def test_single_rows_take_the_gemv_unless_groups_are_per_row() -> None:
    regular, uneven = _weight(64, 32, 16, seed=4), _weight(64, 32, 16, seed=4, uneven=True)
    x = _x(1, 64)
    assert gemv_fits(x, regular) and not gemv_fits(x, uneven) and not gemv_fits(_x(2, 64), regular)
    assert rel_err(w4a16_gemm(x, regular), int4_math.int4_linear(x, regular)) < 1e-5


def test_bfloat16_row() -> None:
    weight = _weight(64, 32, 32, seed=5, dtype=torch.bfloat16)
    x = _x(1, 64, torch.bfloat16)
    out = w4a16_gemv(x, weight, None, 1, SMALL)
    assert out.dtype == torch.bfloat16 and rel_err(out, int4_math.int4_linear(x, weight)) < 1e-2
