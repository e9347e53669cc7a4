"""Block-scaled FP8 experts (the Qwen3-30B-A3B-FP8 layout): e4m3 expert weights with one float32 scale per
``block_n`` x ``block_k`` block, run by the platform's ``fused_moe_fp8_block`` custom op."""

from __future__ import annotations

import torch
from torch import nn

from infercore.ops import get_op
from infercore.ops.fp8_math import FP8_DTYPE, quantize_blockwise
from infercore.ops.moe_fp8_reference import quantize_w13
from infercore.quantization.moe import W2_LAYOUT, W13_LAYOUT, FusedMoEMethod, FusedMoEWeightSpec
from infercore.quantization.params import ParamLayout, register_param, replace_param

#: Experts quantized at a time when an unquantized checkpoint is quantized on load (bounds the float32 copy).
_EXPERTS_PER_CHUNK = 8


def _blocks(size: int, block: int) -> int:
    return -(-size // block)


class Fp8BlockFusedMoEMethod(FusedMoEMethod):
    """Expert weights as e4m3 with block scales: ``w13_weight`` [E, 2I, H] with ``w13_weight_scale_inv``
    [E, 2 * ceil(I/block_n), ceil(H/block_k)] (the gate projection's block rows, then the up projection's,
    as the checkpoint's ``experts.{e}.gate_proj.weight_scale_inv`` and ``up_proj.weight_scale_inv`` hold
    them), ``w2_weight`` [E, H, I] with ``w2_weight_scale_inv`` [E, ceil(H/block_n), ceil(I/block_k)].
    Activations are quantized per token and group of ``block_k`` columns by the op.

    Under tensor parallelism each rank's share of an expert's intermediate features must be whole blocks
    (the scales are split with them); :meth:`create_weights` refuses other splits. With
    ``quantize_on_load`` the checkpoint holds unquantized experts, loaded in the model's dtype and
    quantized blockwise after loading (any split works: each rank quantizes its own share).
    """

    def __init__(self, block_n: int, block_k: int, quantize_on_load: bool = False) -> None:
        self.block_n, self.block_k = block_n, block_k
        self.quantize_on_load = quantize_on_load
        self._fused_moe = get_op("fused_moe_fp8_block")

    def _check_blocks(self, spec: FusedMoEWeightSpec) -> None:
        inter = spec.intermediate_size
        if spec.tp_size > 1 and (inter % self.block_n or inter % self.block_k):
            raise ValueError(
                f"block-scaled FP8 experts of {inter * spec.tp_size} intermediate features split over "
                f"{spec.tp_size} ranks give {inter} per rank, which is not a whole number of "
                f"{self.block_n}x{self.block_k} scale blocks; use a tensor_parallel_size that keeps each rank's "
                "share a multiple of the block size, or expert parallelism (--enable-expert-parallel)")

    def create_weights(self, layer: nn.Module, spec: FusedMoEWeightSpec) -> None:
        e, h, i = spec.num_experts, spec.hidden_size, spec.intermediate_size
        if self.quantize_on_load:
            register_param(layer, "w13_weight", torch.empty(e, 2 * i, h, dtype=spec.params_dtype), W13_LAYOUT)
            register_param(layer, "w2_weight", torch.empty(e, h, i, dtype=spec.params_dtype), W2_LAYOUT)
            return
        self._check_blocks(spec)
        bn, bk = self.block_n, self.block_k
        scales = ParamLayout(output_dim=1, input_dim=2, rows_per_entry=bn, cols_per_entry=bk, dummy_value=1.0)
        register_param(layer, "w13_weight", torch.empty(e, 2 * i, h, dtype=FP8_DTYPE), W13_LAYOUT)
        register_param(layer, "w13_weight_scale_inv",
                       torch.empty(e, 2 * _blocks(i, bn), _blocks(h, bk), dtype=torch.float32), scales)
        register_param(layer, "w2_weight", torch.empty(e, h, i, dtype=FP8_DTYPE), W2_LAYOUT)
        register_param(layer, "w2_weight_scale_inv",
                       torch.empty(e, _blocks(h, bn), _blocks(i, bk), dtype=torch.float32), scales)

    def process_weights_after_loading(self, layer: nn.Module) -> None:
        if not self.quantize_on_load or layer.w13_weight.dtype == FP8_DTYPE:
            return
        bn, bk = self.block_n, self.block_k
        w13, w2 = layer.w13_weight.data, layer.w2_weight.data
        e, i2, h = w13.shape
        w13_q = torch.empty(w13.shape, dtype=FP8_DTYPE, device=w13.device)
        w2_q = torch.empty(w2.shape, dtype=FP8_DTYPE, device=w2.device)
        w13_s = torch.empty(e, 2 * _blocks(i2 // 2, bn), _blocks(h, bk), dtype=torch.float32, device=w13.device)
        w2_s = torch.empty(e, _blocks(h, bn), _blocks(i2 // 2, bk), dtype=torch.float32, device=w2.device)
        for first in range(0, e, _EXPERTS_PER_CHUNK):
            chunk = slice(first, first + _EXPERTS_PER_CHUNK)
            w13_q[chunk], w13_s[chunk] = quantize_w13(w13[chunk], bn, bk)
            w2_q[chunk], w2_s[chunk] = quantize_blockwise(w2[chunk], bn, bk)
        for name, data in (("w13_weight", w13_q), ("w13_weight_scale_inv", w13_s), ("w2_weight", w2_q),
                           ("w2_weight_scale_inv", w2_s)):
            replace_param(layer, name, data)

    def apply_experts(self, layer: nn.Module, x: torch.Tensor, topk_weights: torch.Tensor,
                      topk_ids: torch.Tensor) -> torch.Tensor:
        return self._fused_moe(x, layer.w13_weight, layer.w13_weight_scale_inv, layer.w2_weight,
                               layer.w2_weight_scale_inv, topk_weights, topk_ids, self.block_n, self.block_k)
