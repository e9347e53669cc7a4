"""The packed 16-bit W4A16 kernel of decode batches (and its dequantizing twin) against core's INT4 reference,
through Triton's interpreter: bfloat16 and float16, both operand orders, split K, bias, act-order, groups."""

from __future__ import annotations

import pytest
import torch
from test_int4_gemm import _permuted, _weight, _x
from triton_cases import rel_err

from infercore.ops import int4_math
from infercore_triton.int4_skinny import (
    Int4SkinnyConfig,
    dequantize_skinny,
    skinny_fits,
    step_rows,
    w4a16_skinny,
)

#: bfloat16 outputs round to 8 bits of mantissa; both sides multiply the same exact ``q - zero``.
BOUND = 1e-2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("swap", [False, True], ids=["x-left", "w-left"])
@pytest.mark.parametrize(("m", "n", "k", "group", "split_k"), [(1, 32, 64, 32, 1), (3, 48, 128, 32, 2),
                                                               (17, 40, 96, -1, 3), (2, 32, 128, 64, 0)])
@pytest.mark.parametrize("interleaved", [True, False], ids=["interleaved", "sequential"])
def test_skinny_matches_reference(m: int, n: int, k: int, group: int, split_k: int, swap: bool,
                                  dtype: torch.dtype, interleaved: bool) -> None:
    # 48 and 40 columns leave a partial tile; 17 rows span two 16-row tiles; group -1 is one group of 96
    # rows (32-row steps); split_k 0 splits until the (132-SM) GPU would be full.
    weight = _weight(k, n, group, seed=m + n, dtype=dtype, interleaved=interleaved)
    x, bias = _x(m, k, dtype), torch.randn(n).to(dtype)
    config = Int4SkinnyConfig(block_m=16, block_n=32, block_k=32, num_warps=1, split_k=split_k, swap=swap)
    out = w4a16_skinny(x, weight, bias, config)
    assert out.dtype == dtype and rel_err(out, int4_math.int4_linear(x, weight, bias)) < BOUND


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("swap", [False, True], ids=["x-left", "w-left"])
def test_scaled_weights_match_reference(swap: bool, dtype: torch.dtype) -> None:
    # Scales applied to the 16-bit weights before the dot (one rounding each, as the dense path does).
    weight = _weight(128, 48, 64, seed=10, dtype=dtype)
    x, bias = _x(5, 128, dtype), torch.randn(48).to(dtype)
    config = Int4SkinnyConfig(16, 32, 32, num_warps=1, split_k=2, swap=swap, scale_weights=True)
    assert rel_err(w4a16_skinny(x, weight, bias, config), int4_math.int4_linear(x, weight, bias)) < BOUND


@pytest.mark.parametrize("swap", [False, True], ids=["x-left", "w-left"])
def test_fused_split_reduce_and_counters_reset(swap: bool) -> None:
    # The last split of each tile sums the partials; the counters are back at zero for the next launch.
    from infercore_triton import split_k_counters

    weight = _weight(128, 80, 32, seed=9, dtype=torch.float16)
    x, bias = _x(3, 128, torch.float16), torch.randn(80).to(torch.float16)
    config = Int4SkinnyConfig(16, 32, 32, num_warps=1, split_k=3, swap=swap, fused_reduce=True)
    for _ in range(2):
        assert rel_err(w4a16_skinny(x, weight, bias, config), int4_math.int4_linear(x, weight, bias)) < BOUND
        assert not split_k_counters.tile_counters(x.device, 1).any()


def test_skinny_act_order_in_gathered_columns() -> None:
    weight = _weight(64, 32, 16, seed=3, act_order=True, dtype=torch.bfloat16)
    x = _x(2, 64, torch.bfloat16)
    out = w4a16_skinny(_permuted(x, weight), weight, None, Int4SkinnyConfig(16, 32, 16, num_warps=1, split_k=2))
    assert rel_err(out, int4_math.int4_linear(x, weight)) < BOUND


def test_fits_and_step_rows() -> None:
    regular = _weight(64, 32, 16, seed=4, dtype=torch.bfloat16)
    uneven = _weight(64, 32, 16, seed=4, uneven=True, dtype=torch.bfloat16)
    x = _x(1, 64, torch.bfloat16)
    assert skinny_fits(x, regular) and not skinny_fits(x, uneven) and not skinny_fits(x.float(), regular)
    assert not skinny_fits(x, _weight(64, 32, 8, seed=4, dtype=torch.bfloat16))
    assert step_rows(128, 128) == 128 and step_rows(96, 128) == 32 and step_rows(80, 64) == 16


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_dequantize_matches_reference(dtype: torch.dtype) -> None:
    for interleaved in (True, False):
        weight = _weight(96, 40, 32, seed=6, dtype=dtype, interleaved=interleaved)
        dense = dequantize_skinny(weight, block_n=32, block_k=32)
        assert dense.dtype == dtype and rel_err(dense, int4_math.dequantize(weight)) < BOUND


@pytest.mark.parametrize("kernel", ["skinny", "gemv", "gemm", "dense"])
@pytest.mark.parametrize("act_order", [False, True], ids=["plain", "act-order"])
def test_table_choices_all_match_reference(kernel: str, act_order: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each path the launch table can name gives the reference's product, and the act-order row-parallel
    # shard (per-row groups) falls back to the tile kernel whatever the table says. float16: the interpreter
    # does bfloat16 arithmetic on raw bits, which the tile kernel's dequantization does in that dtype.
    from infercore_triton import int4_gemm, int4_table

    configs = {"skinny": {"block_n": 32, "block_k": 32, "num_warps": 1, "split_k": 2},
               "gemv": {"block_n": 32, "words": 4, "num_warps": 1, "split_k": 1},
               "gemm": {"block_m": 16, "block_n": 32, "block_k": 32, "split_k": 1}, "dense": {}}
    table = int4_table.parse_table({"dense_min_m": 64, "choices": [
        {"m": 1, "n": 32, "k": 64, "kernel": kernel, "config": configs[kernel]}]})
    monkeypatch.setattr(int4_gemm, "TABLE", table)
    for uneven in (False, True):
        weight = _weight(64, 32, 16, seed=5, act_order=act_order, uneven=uneven and act_order,
                         dtype=torch.float16)
        x, bias = _x(1, 64, torch.float16), torch.randn(32).to(torch.float16)
        out = int4_gemm.int4_product(_permuted(x, weight), weight, bias)
        assert rel_err(out, int4_math.int4_linear(x, weight, bias)) < BOUND


def test_table_round_trips_and_buckets(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    import json

    from infercore_triton import int4_table

    data = {"dense_min_m": 32, "choices": [{"m": 5, "n": 64, "k": 128, "kernel": "gemv", "config": {"words": 4}}]}
    path = tmp_path / "table.json"
    path.write_text(json.dumps(data))
    monkeypatch.setenv(int4_table.TABLE_ENV, str(path))
    table = int4_table.load_table()
    assert table.dense_min_m == 32 and table.choice(7, 64, 128) == int4_table.Int4Choice("gemv", {"words": 4})
    assert table.choice(9, 64, 128) == table.choice(300, 64, 128) == table.choice(7, 64, 128)
    assert table.choice(4, 64, 128) is None and table.choice(8, 64, 256) is None
    assert table.to_json()["choices"][0]["m"] == 8
    assert [int4_table.bucket(m) for m in (1, 2, 3, 16, 17)] == [1, 2, 4, 16, 32]
    with pytest.raises(ValueError, match="kernel"):
        int4_table.parse_table({"choices": [{"m": 1, "n": 1, "k": 1, "kernel": "marlin"}]})


@pytest.mark.parametrize("act_order", [False, True], ids=["plain", "act-order"])
def test_tensor_parallel_shards_sum_to_the_whole_product(act_order: bool) -> None:
    # Two ranks' shards as the loaders cut them: column-parallel (output features) and row-parallel (input
    # features, whose act-order shard keeps every group's scales and a group per row); the op on each
    # shard, gathered or summed, is the whole layer's product.
    from infercore_triton.int4_gemm import int4_product

    k, n, group = 128, 64, 32
    g = torch.Generator().manual_seed(11)
    codes = torch.randint(0, 16, (k, n), generator=g, dtype=torch.uint8)
    zeros = torch.randint(0, 17, (k // group, n), generator=g, dtype=torch.uint8)
    scales = (torch.rand(k // group, n, generator=g) * 0.02 + 0.001).to(torch.float16)
    g_idx = None
    if act_order:
        g_idx = torch.empty(k, dtype=torch.int32)
        g_idx[torch.randperm(k, generator=g)] = (torch.arange(k) // group).to(torch.int32)
    whole = int4_math.make_int4_weight(codes, scales, zeros, group, g_idx, interleaved=True)
    x = _x(3, k, torch.float16)
    ref = int4_math.int4_linear(x, whole)

    def run(weight: int4_math.Int4Weight, xs: torch.Tensor) -> torch.Tensor:
        return int4_product(_permuted(xs, weight), weight)

    columns = [int4_math.make_int4_weight(codes[:, r * n // 2:(r + 1) * n // 2], scales[:, r * n // 2:(r + 1) * n // 2],
                                          zeros[:, r * n // 2:(r + 1) * n // 2], group, g_idx, interleaved=True)
               for r in range(2)]
    assert rel_err(torch.cat([run(w, x) for w in columns], dim=1), ref) < BOUND
    rows = []
    for r in range(2):
        lo, hi = r * k // 2, (r + 1) * k // 2
        if act_order:  # every group's scales on every rank, each row's group from g_idx
            shard = int4_math.make_int4_weight(codes[lo:hi], scales, zeros, group, g_idx[lo:hi], interleaved=True)
        else:
            shard = int4_math.make_int4_weight(codes[lo:hi], scales[lo // group:hi // group],
                                               zeros[lo // group:hi // group], group, interleaved=True)
        rows.append(run(shard, x[:, lo:hi]).float())
    assert rel_err(rows[0] + rows[1], ref) < BOUND
