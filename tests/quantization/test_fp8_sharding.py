"""FP8 weights and their scales split over tensor-parallel ranks the way their rows and columns do."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from infercore.layers import MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear, set_tp_state
from infercore.ops.fp8_math import FP8_DTYPE
from infercore.quantization import building_with
from infercore.quantization.fp8 import Fp8Config

BLOCK = Fp8Config((16, 16), static_input=False, quantize_on_load=False)
PER_TENSOR = Fp8Config(None, static_input=True, quantize_on_load=False)


@pytest.fixture(params=[0, 1], ids=["rank0", "rank1"])
def rank(request: pytest.FixtureRequest) -> Iterator[int]:
    set_tp_state(request.param, 2)
    yield request.param
    set_tp_state(0, 1)


def _fp8(*shape: int, seed: int) -> torch.Tensor:
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 10).to(FP8_DTYPE)


def _scales(*shape: int, seed: int) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) + 0.5


def _load(layer: torch.nn.Module, name: str, tensor: torch.Tensor, shard: str | int | None = None) -> None:
    param = getattr(layer, name)
    if shard is None:
        param.weight_loader(param, tensor)
    else:
        param.weight_loader(param, tensor, shard)


def test_block_scales_follow_the_rows_of_q_k_and_v(rank: int) -> None:
    with building_with(BLOCK):
        qkv = QKVParallelLinear(64, 16, 4, 2)  # q 64 rows, k and v 32: per rank 32, 16, 16
    full = {s: (_fp8(rows, 64, seed=i), _scales(rows // 16, 4, seed=10 + i))
            for i, (s, rows) in enumerate([("q", 64), ("k", 32), ("v", 32)])}
    for shard, (weight, scale) in full.items():
        _load(qkv, "weight", weight, shard)
        _load(qkv, "weight_scale_inv", scale, shard)
    rows = {"q": 32, "k": 16, "v": 16}
    expected_w = torch.cat([full[s][0].float()[rank * rows[s]:(rank + 1) * rows[s]] for s in "qkv"])
    expected_s = torch.cat([full[s][1][rank * rows[s] // 16:(rank + 1) * rows[s] // 16] for s in "qkv"])
    assert qkv.weight.dtype == FP8_DTYPE and torch.equal(qkv.weight.float(), expected_w)
    assert torch.equal(qkv.weight_scale_inv, expected_s)


def test_block_scales_follow_the_columns_of_a_row_parallel_layer(rank: int) -> None:
    with building_with(BLOCK):
        row = RowParallelLinear(64, 32)
    weight, scale = _fp8(32, 64, seed=1), _scales(2, 4, seed=2)
    _load(row, "weight", weight)
    _load(row, "weight_scale_inv", scale)
    assert torch.equal(row.weight.float(), weight.float()[:, rank * 32:(rank + 1) * 32])
    assert torch.equal(row.weight_scale_inv, scale[:, rank * 2:(rank + 1) * 2])


def test_per_tensor_scales_fill_their_projection_on_every_rank(rank: int) -> None:
    with building_with(PER_TENSOR):
        gate_up = MergedColumnParallelLinear(64, [32, 32])
    for shard, value in ((0, 2.0), (1, 3.0)):
        _load(gate_up, "weight", _fp8(32, 64, seed=shard), shard)
        _load(gate_up, "weight_scale", torch.tensor(value), shard)
        _load(gate_up, "input_scale", torch.tensor([value / 10]), shard)
    gate_up.quant_method.process_weights_after_loading(gate_up)
    assert torch.equal(gate_up.weight_scale, torch.tensor([2.0] * 16 + [3.0] * 16))
    assert torch.equal(gate_up.input_scale, torch.tensor([0.3]))


def test_blocks_that_straddle_ranks_are_refused() -> None:
    set_tp_state(0, 2)
    try:
        with building_with(BLOCK), pytest.raises(ValueError, match="does not split into whole 16x16 blocks"):
            QKVParallelLinear(64, 8, 4, 2)  # k and v: 8 rows per rank
    finally:
        set_tp_state(0, 1)
