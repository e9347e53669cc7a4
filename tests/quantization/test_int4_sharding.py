"""Packed 4-bit weights, zeros, scales and act-order ``g_idx`` split over tensor-parallel ranks the way
their rows and columns do; splits that cut a group or an int32 are refused."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from int4_checkpoints import (
    Int4Scheme,
    act_order,
    compressed_tensors_w4a16,
    pack_awq,
    pack_gptq_columns,
    pack_gptq_rows,
    quantize,
)

from infercore.layers import MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear, set_tp_state
from infercore.ops.int4_math import int4_linear
from infercore.quantization import building_with
from infercore.quantization.base import QuantizationConfig
from infercore.quantization.compressed_tensors import CompressedTensorsConfig
from infercore.quantization.int4_configs import AwqConfig, GptqConfig


@pytest.fixture(params=[0, 1], ids=["rank0", "rank1"])
def rank(request: pytest.FixtureRequest) -> Iterator[int]:
    set_tp_state(request.param, 2)
    yield request.param
    set_tp_state(0, 1)


def _config(scheme: Int4Scheme) -> QuantizationConfig:
    cls = {"awq": AwqConfig, "gptq": GptqConfig, "compressed-tensors": CompressedTensorsConfig}[scheme.method]
    return cls.from_checkpoint(scheme.quantization_config())


def _checkpoint(out: int, k: int, scheme: Int4Scheme, seed: int, g_idx: torch.Tensor | None = None
                ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The checkpoint tensors of one [out, k] projection, and its dense weight [k, out]."""
    w = torch.randn(k, out, generator=torch.Generator().manual_seed(seed))
    group = scheme.group_size
    if g_idx is None:
        g_idx = (torch.arange(k) // group).to(torch.int32)
    codes, zeros, scales = quantize(w, g_idx, k // group, scheme)
    dense = (codes.float() - zeros.float()[g_idx.long()]) * scales.float()[g_idx.long()]
    if scheme.method == "awq":
        return {"qweight": pack_awq(codes), "qzeros": pack_awq(zeros), "scales": scales}, dense
    if scheme.method == "compressed-tensors":
        return compressed_tensors_w4a16(codes, zeros, scales, scheme.sym), dense
    return {"qweight": pack_gptq_rows(codes), "qzeros": pack_gptq_columns(zeros - 1), "scales": scales,
            "g_idx": g_idx}, dense


def _load(layer: torch.nn.Module, tensors: dict[str, torch.Tensor], shard: str | int | None = None) -> None:
    for name, tensor in tensors.items():
        param = getattr(layer, name)
        if shard is None:
            param.weight_loader(param, tensor)
        else:
            param.weight_loader(param, tensor, shard)


def _x(k: int) -> torch.Tensor:
    return torch.randn(3, k, generator=torch.Generator().manual_seed(99))


@pytest.mark.parametrize("scheme", [Int4Scheme("awq", 16), Int4Scheme("gptq", 16, desc_act=True),
                                    Int4Scheme("compressed-tensors", 16)], ids=lambda s: s.name)
def test_q_k_and_v_take_their_rows_of_every_tensor(rank: int, scheme: Int4Scheme) -> None:
    with building_with(_config(scheme)):
        qkv = QKVParallelLinear(64, 16, 4, 2)  # q 64 rows, k and v 32: per rank 32, 16, 16
    g_idx = act_order(64, 16, seed=3) if scheme.desc_act else None
    dense = {}
    for i, (shard, rows) in enumerate([("q", 64), ("k", 32), ("v", 32)]):
        tensors, dense[shard] = _checkpoint(rows, 64, scheme, seed=i, g_idx=g_idx)
        _load(qkv, tensors, shard)
    qkv.quant_method.process_weights_after_loading(qkv)
    rows = {"q": 32, "k": 16, "v": 16}
    expected = torch.cat([dense[s][:, rank * rows[s]:(rank + 1) * rows[s]] for s in "qkv"], dim=1)
    x = _x(64)
    assert torch.allclose(int4_linear(x, qkv.int4_weight), x @ expected, atol=1e-4)


def test_gate_and_up_with_different_act_orders_are_refused() -> None:
    scheme = Int4Scheme("gptq", 16, desc_act=True)
    with building_with(_config(scheme)):
        gate_up = MergedColumnParallelLinear(64, [32, 32])
    _load(gate_up, _checkpoint(32, 64, scheme, seed=0, g_idx=act_order(64, 16, seed=1))[0], 0)
    with pytest.raises(ValueError, match="fused projections of a 4-bit layer have different g_idx"):
        _load(gate_up, _checkpoint(32, 64, scheme, seed=1, g_idx=act_order(64, 16, seed=2))[0], 1)


@pytest.mark.parametrize("scheme", [Int4Scheme("awq", 16), Int4Scheme("gptq", 16, sym=True),
                                    Int4Scheme("gptq", 16, desc_act=True), Int4Scheme("gptq", -1),
                                    Int4Scheme("compressed-tensors", 16), Int4Scheme("compressed-tensors", -1, sym=True)],
                         ids=lambda s: s.name)
def test_row_parallel_ranks_sum_to_the_whole_product(rank: int, scheme: Int4Scheme) -> None:
    k, n = 64, 24
    with building_with(_config(scheme)):
        row = RowParallelLinear(k, n)
    group = k if scheme.group_size == -1 else scheme.group_size
    full_scheme = Int4Scheme(scheme.method, group, scheme.sym, scheme.desc_act)
    g_idx = act_order(k, group, seed=4) if scheme.desc_act else None
    tensors, dense = _checkpoint(n, k, full_scheme, seed=5, g_idx=g_idx)
    _load(row, tensors)
    row.quant_method.process_weights_after_loading(row)
    x = _x(k)
    half = slice(rank * k // 2, (rank + 1) * k // 2)
    ours = int4_linear(x[:, half].contiguous(), row.int4_weight)
    assert torch.allclose(ours, x[:, half] @ dense[half], atol=1e-4)
    # An act-order shard's rows come from groups all over the layer: every rank keeps all the scales.
    assert (row.int4_weight.row_groups is not None) == scheme.desc_act


def test_a_rank_share_that_cuts_a_group_is_refused() -> None:
    set_tp_state(0, 2)
    try:
        with building_with(_config(Int4Scheme("gptq", 64))), \
                pytest.raises(ValueError, match="32 input features per rank does not split into whole groups of 64"):
            RowParallelLinear(64, 32)
        with building_with(_config(Int4Scheme("awq", 16))), \
                pytest.raises(ValueError, match=r"projections of \[32, 4, 4\] output features per rank does not pack"):
            QKVParallelLinear(64, 4, 16, 2)  # k and v: one head of 4 rows per rank
    finally:
        set_tp_state(0, 1)
