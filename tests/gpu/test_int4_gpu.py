"""The W4A16 op on the GPU at Qwen3-8B's shapes against core's INT4 reference: the multiply-add kernel
(one row), the tensor-core kernel (decode batches), the dequantize-then-dense path (prefill), in bfloat16
and float16, with and without act-order."""

from __future__ import annotations

import pytest
import torch
from gpu_marks import requires_gpu
from triton_cases import rel_err

from infercore.ops import int4_math
from infercore.ops.int4_math import Int4Weight, make_int4_weight

pytestmark = requires_gpu
#: Both sides multiply the same dequantized values; what differs is the rounding of each weight to 16 bits
#: before the tensor-core dot, the order of the float32 sums and the rounding of the output.
BOUND = 1e-2
#: (rows, output features, input features): Qwen3-8B's qkv, gate_up, down and o projections.
SHAPES = [(1, 6144, 4096), (3, 24576, 4096), (16, 4096, 12288), (64, 4096, 4096), (256, 6144, 4096),
          (2048, 4096, 12288)]


def _weight(n: int, k: int, dtype: torch.dtype, act_order: bool) -> Int4Weight:
    g = torch.Generator(device="cuda").manual_seed(n + k)
    codes = torch.randint(0, 16, (k, n), generator=g, device="cuda", dtype=torch.uint8)
    zeros = torch.randint(0, 17, (k // 128, n), generator=g, device="cuda", dtype=torch.uint8)
    scales = (torch.rand(k // 128, n, generator=g, device="cuda") * 0.01 + 0.002).to(dtype)
    g_idx = None
    if act_order:
        g_idx = torch.empty(k, dtype=torch.int32, device="cuda")
        g_idx[torch.randperm(k, generator=g, device="cuda")] = (torch.arange(k, device="cuda") // 128).int()
    return make_int4_weight(codes, scales, zeros, 128, g_idx, interleaved=True)


@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("act_order", [False, True])
def test_int4_linear_matches_the_reference(m: int, n: int, k: int, dtype: torch.dtype, act_order: bool) -> None:
    from infercore_triton.int4_gemm import int4_linear

    weight = _weight(n, k, dtype, act_order)
    x = torch.randn(m, k, device="cuda").to(dtype)
    bias = torch.randn(n, device="cuda").to(dtype)
    out = int4_linear(x, weight, bias)
    assert out.dtype == dtype
    assert rel_err(out, int4_math.int4_linear(x, weight, bias)) < BOUND


def test_row_parallel_act_order_shard_keeps_a_group_per_row() -> None:
    from infercore_triton.int4_gemm import int4_linear

    k, n = 2048, 4096
    g = torch.Generator(device="cuda").manual_seed(0)
    codes = torch.randint(0, 16, (k, n), generator=g, device="cuda", dtype=torch.uint8)
    zeros = torch.randint(0, 16, (32, n), generator=g, device="cuda", dtype=torch.uint8)
    scales = (torch.rand(32, n, generator=g, device="cuda") * 0.01).bfloat16()
    g_idx = torch.randint(0, 32, (k,), generator=g, device="cuda").int()
    weight = make_int4_weight(codes, scales, zeros, 128, g_idx)
    assert weight.row_groups is not None
    for m in (1, 16, 2048):
        x = torch.randn(m, k, device="cuda").bfloat16()
        assert rel_err(int4_linear(x, weight), int4_math.int4_linear(x, weight)) < BOUND


@pytest.mark.parametrize("swap", [False, True], ids=["x-left", "w-left"])
@pytest.mark.parametrize("m", [1, 16])
def test_skinny_split_k_reduced_by_the_last_program(m: int, swap: bool) -> None:
    # The tile counters of the fused split-K reduction are shared by every launch: many launches in a row,
    # each checked, and the counters back at zero.
    from infercore_triton import int4_skinny, split_k_counters

    weight = _weight(6144, 4096, torch.bfloat16, act_order=False)
    x = torch.randn(m, 4096, device="cuda").bfloat16()
    ref = int4_math.int4_linear(x, weight)
    for split in (2, 8, 32):
        config = int4_skinny.Int4SkinnyConfig(16, 128, 128, split_k=split, swap=swap, fused_reduce=True)
        for _ in range(20):
            assert rel_err(int4_skinny.w4a16_skinny(x, weight, None, config), ref) < BOUND
    torch.cuda.synchronize()
    assert not split_k_counters.tile_counters(x.device, 1).any()
