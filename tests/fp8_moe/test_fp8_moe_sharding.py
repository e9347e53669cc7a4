"""Block-scaled FP8 experts in a fused-MoE layer: parameters, the per-expert loader splitting weights and
scales over tensor-parallel ranks on block boundaries, the splits it refuses, and quantizing on load."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from infercore.layers import set_tp_state
from infercore.layers.fused_moe import ExpertWeightLoader, FusedMoE
from infercore.models.loader import process_weights_after_loading
from infercore.ops import fp8_math
from infercore.ops.moe_fp8_reference import fused_moe_fp8_block, quantize_w13
from infercore.quantization import building_with
from infercore.quantization.fp8 import Fp8Config
from infercore.quantization.fp8_moe import Fp8BlockFusedMoEMethod

BLOCK = Fp8Config((16, 16), static_input=False, quantize_on_load=False)
EXPERTS, HIDDEN, INTER = 3, 32, 64


@pytest.fixture(params=[0, 1], ids=["rank0", "rank1"])
def rank(request: pytest.FixtureRequest) -> Iterator[int]:
    set_tp_state(request.param, 2)
    yield request.param
    set_tp_state(0, 1)


def _fp8(*shape: int, seed: int) -> torch.Tensor:
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 10).to(fp8_math.FP8_DTYPE)


def _scales(*shape: int, seed: int) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) + 0.5


class _Holder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.experts = FusedMoE(EXPERTS, 2, HIDDEN, INTER, renormalize=True, prefix="experts")


def _checkpoint() -> dict[str, torch.Tensor]:
    """Per-expert tensors as the HF fp8 checkpoint names them: 16x16 blocks."""
    tensors = {}
    for e in range(EXPERTS):
        for i, (proj, rows, cols) in enumerate([("gate_proj", INTER, HIDDEN), ("up_proj", INTER, HIDDEN),
                                                 ("down_proj", HIDDEN, INTER)]):
            tensors[f"experts.{e}.{proj}.weight"] = _fp8(rows, cols, seed=10 * e + i)
            tensors[f"experts.{e}.{proj}.weight_scale_inv"] = _scales(rows // 16, cols // 16, seed=100 + 10 * e + i)
    return tensors


def test_block_experts_get_fp8_weights_and_scales_per_half() -> None:
    with building_with(BLOCK):
        layer = FusedMoE(EXPERTS, 2, HIDDEN, 40, renormalize=True, prefix="experts")
    assert isinstance(layer.quant_method, Fp8BlockFusedMoEMethod)
    assert layer.w13_weight.dtype == fp8_math.FP8_DTYPE and layer.w13_weight.shape == (EXPERTS, 80, HIDDEN)
    # 40 rows each of gate and up: three block rows each (the third partial), not ceil(80 / 16) = 5.
    assert layer.w13_weight_scale_inv.shape == (EXPERTS, 6, 2)
    assert layer.w2_weight_scale_inv.shape == (EXPERTS, 2, 3)


def test_weights_and_scales_split_on_block_boundaries(rank: int) -> None:
    with building_with(BLOCK):
        holder = _Holder()
    loader = ExpertWeightLoader(holder)
    tensors = _checkpoint()
    for name, tensor in tensors.items():
        assert loader.load(name, tensor)
    assert loader.missing() == []
    layer, half = holder.experts, INTER // 2
    rows, blocks = slice(rank * half, (rank + 1) * half), slice(rank * half // 16, (rank + 1) * half // 16)
    for e in range(EXPERTS):
        gate, up, down = (tensors[f"experts.{e}.{p}.weight"] for p in ("gate_proj", "up_proj", "down_proj"))
        gate_s, up_s, down_s = (tensors[f"experts.{e}.{p}.weight_scale_inv"] for p in ("gate_proj", "up_proj",
                                                                                      "down_proj"))
        assert torch.equal(layer.w13_weight[e].float(), torch.cat([gate[rows], up[rows]]).float())
        assert torch.equal(layer.w13_weight_scale_inv[e], torch.cat([gate_s[blocks], up_s[blocks]]))
        assert torch.equal(layer.w2_weight[e].float(), down[:, rows].float())
        assert torch.equal(layer.w2_weight_scale_inv[e], down_s[:, blocks])


def test_a_split_inside_a_block_is_refused() -> None:
    set_tp_state(0, 2)
    try:
        with building_with(BLOCK), pytest.raises(ValueError, match="not a whole number of 16x16 scale blocks"):
            FusedMoE(EXPERTS, 2, HIDDEN, 48, renormalize=True, prefix="experts")  # 24 per rank
    finally:
        set_tp_state(0, 1)


def test_per_tensor_fp8_has_no_moe_method() -> None:
    per_tensor = Fp8Config(None, static_input=True, quantize_on_load=False)
    with building_with(per_tensor), pytest.raises(ValueError, match="weight_block_size"):
        FusedMoE(EXPERTS, 2, HIDDEN, INTER, renormalize=True, prefix="experts")


def test_quantize_on_load_quantizes_each_rank_share_blockwise(rank: int) -> None:
    online = Fp8Config.from_checkpoint(None)  # --quantization fp8: 128x128 blocks
    with building_with(online):
        holder = _Holder()
    layer = holder.experts
    assert layer.w13_weight.dtype == torch.get_default_dtype() and not hasattr(layer, "w13_weight_scale_inv")
    gen = torch.Generator().manual_seed(rank)
    full_w13, full_w2 = torch.randn(EXPERTS, 2 * INTER, HIDDEN, generator=gen), torch.randn(EXPERTS, HIDDEN, INTER,
                                                                                         generator=gen)
    layer.weight_loader(layer.w13_weight, torch.cat([full_w13[:, :INTER], full_w13[:, INTER:]], dim=1), "w13")
    layer.weight_loader(layer.w2_weight, full_w2, "w2")
    share_w13, share_w2 = layer.w13_weight.data.clone(), layer.w2_weight.data.clone()
    process_weights_after_loading(holder)
    w13_q, w13_s = quantize_w13(share_w13, 128, 128)
    w2_q, w2_s = fp8_math.quantize_blockwise(share_w2, 128, 128)
    assert layer.w13_weight.dtype == fp8_math.FP8_DTYPE and torch.equal(layer.w13_weight.float(), w13_q.float())
    assert torch.equal(layer.w13_weight_scale_inv, w13_s) and torch.equal(layer.w2_weight_scale_inv, w2_s)
    assert torch.equal(layer.w2_weight.float(), w2_q.float())
    x = torch.randn(5, HIDDEN, generator=gen)
    weights, ids = torch.rand(5, 2, generator=gen), torch.tensor([[0, 1], [2, 0], [1, 2], [0, 2], [1, 0]])
    out = layer.quant_method.apply_experts(layer, x, weights, ids)
    assert torch.equal(out, fused_moe_fp8_block(x, w13_q, w13_s, w2_q, w2_s, weights, ids, 128, 128))
