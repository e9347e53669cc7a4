"""The W4A16 GEMM kernel (and its dequantizing prefill path) against core's INT4 reference, through
Triton's interpreter on tiny shapes: group sizes, zero-points, act-order ``g_idx``, split K, bias."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from triton_cases import rel_err

from infercore.ops import int4_math
from infercore.ops.int4_math import Int4Weight, make_int4_weight
from infercore_triton.int4_gemm import Int4GemmConfig, dequantize_int4, int4_linear, w4a16_gemm

SMALL = Int4GemmConfig(16, 32, 32, split_k=1)


def _weight(k: int, n: int, group: int, seed: int, act_order: bool = False, uneven: bool = False,
            dtype: torch.dtype = torch.float32, interleaved: bool = True) -> Int4Weight:
    g = torch.Generator().manual_seed(seed)
    group = k if group == -1 else group
    groups = k // group
    codes = torch.randint(0, 16, (k, n), generator=g, dtype=torch.uint8)
    zeros = torch.randint(0, 17, (groups, n), generator=g, dtype=torch.uint8)
    scales = (torch.rand(groups, n, generator=g) * 0.02 + 0.001).to(dtype)
    g_idx = None
    if uneven:
        g_idx = torch.randint(0, groups, (k,), generator=g).to(torch.int32)
    elif act_order:
        g_idx = torch.empty(k, dtype=torch.int32)
        g_idx[torch.randperm(k, generator=g)] = (torch.arange(k) // group).to(torch.int32)
    return make_int4_weight(codes, scales, zeros, group, g_idx, interleaved)


def _x(m: int, k: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(m, k, generator=torch.Generator().manual_seed(m + k)).to(dtype)


def _permuted(x: torch.Tensor, weight: Int4Weight) -> torch.Tensor:
    return x.index_select(1, weight.perm) if weight.perm is not None else x


@pytest.mark.parametrize("interleaved", [True, False], ids=["interleaved", "sequential"])
@pytest.mark.parametrize("unpack_words", [True, False], ids=["words", "rows"])
@pytest.mark.parametrize(("m", "n", "k", "group"), [(1, 32, 64, 32), (5, 48, 128, 32), (17, 40, 64, 16),
                                                    (3, 64, 96, -1), (2, 32, 64, 8), (2, 32, 80, 16)])
def test_kernel_matches_reference(m: int, n: int, k: int, group: int, unpack_words: bool, interleaved: bool) -> None:
    # 48 and 40 columns leave a partial 32-column tile; 17 rows span two 16-row tiles; group -1 is one
    # group over all 96 rows (32-row steps inside it); groups of 8 are narrower than a step; 80 rows end
    # in half a step.
    weight = _weight(k, n, group, seed=m, interleaved=interleaved)
    x = _x(m, k)
    out = w4a16_gemm(x, weight, config=dataclasses.replace(SMALL, unpack_words=unpack_words))
    assert rel_err(out, int4_math.int4_linear(x, weight)) < 1e-5


@pytest.mark.parametrize("unpack_words", [True, False], ids=["words", "rows"])
@pytest.mark.parametrize("uneven", [False, True], ids=["act-order", "row-parallel-shard"])
def test_act_order_gathers_activations_and_groups(uneven: bool, unpack_words: bool) -> None:
    weight = _weight(64, 32, 16, seed=3, act_order=True, uneven=uneven)
    assert weight.perm is not None and (weight.row_groups is not None) == uneven
    x = _x(4, 64)
    out = w4a16_gemm(_permuted(x, weight), weight, config=dataclasses.replace(SMALL, unpack_words=unpack_words))
    assert rel_err(out, int4_math.int4_linear(x, weight)) < 1e-5


@pytest.mark.parametrize("split_k", [2, 3])
def test_split_k_partials_sum_to_the_product(split_k: int) -> None:
    weight = _weight(128, 32, 32, seed=4)
    x, bias = _x(3, 128), torch.randn(32)
    out = w4a16_gemm(x, weight, bias, config=Int4GemmConfig(16, 32, 32, split_k=split_k))
    assert rel_err(out, int4_math.int4_linear(x, weight, bias)) < 1e-5


def test_bias_without_split() -> None:
    weight = _weight(64, 32, 32, seed=5)
    x, bias = _x(2, 64), torch.randn(32)
    assert rel_err(w4a16_gemm(x, weight, bias, config=SMALL), int4_math.int4_linear(x, weight, bias)) < 1e-5


def test_float16_activations_dequantize_in_half_precision() -> None:
    # float16 and bfloat16 share the 16-bit path (codes under the exponent of 1024 or 128, two rows per
    # instruction); the interpreter keeps bfloat16 as raw bits, so only float16 can run here
    # (tests/gpu/test_int4_gpu.py covers bfloat16).
    weight = _weight(64, 32, 32, seed=6, act_order=True, dtype=torch.float16)
    x = _x(4, 64, torch.float16)
    out = w4a16_gemm(_permuted(x, weight), weight, config=SMALL)
    assert out.dtype == torch.float16
    assert rel_err(out, int4_math.int4_linear(x, weight)) < 2e-3


@pytest.mark.parametrize("m", [1, 5, 20])
def test_default_launch_table_on_decode_shapes(m: int) -> None:
    # One row takes the multiply-add kernel; 5 and 20 the tensor-core kernel's 16- and 32-row settings.
    weight = _weight(256, 64, 128, seed=7)
    x = _x(m, 256)
    assert rel_err(w4a16_gemm(x, weight), int4_math.int4_linear(x, weight)) < 1e-5


@pytest.mark.parametrize("unpack_words", [True, False], ids=["words", "rows"])
@pytest.mark.parametrize("uneven", [False, True])
def test_prefill_dequantizes_the_reference_weight(uneven: bool, unpack_words: bool) -> None:
    for interleaved in (True, False):
        weight = _weight(80, 48, 16, seed=8, act_order=True, uneven=uneven, interleaved=interleaved)
        assert torch.equal(dequantize_int4(weight, torch.float32, unpack_words), int4_math.dequantize(weight))


def test_op_off_the_gpu_is_the_reference() -> None:
    weight = _weight(64, 32, 32, seed=9, act_order=True)
    x, bias = _x(3, 64), torch.randn(32)
    assert torch.equal(int4_linear(x, weight, bias), int4_math.int4_linear(x, weight, bias))
