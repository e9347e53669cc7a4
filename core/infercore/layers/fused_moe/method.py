"""How a fused-MoE layer's expert weights are held and applied: the unquantized method (the interface,
:class:`FusedMoEMethod`, is quantization's: ``infercore.quantization.moe``)."""

from __future__ import annotations

import torch
from torch import nn

from infercore.ops import get_op
from infercore.quantization import set_layout
from infercore.quantization.moe import W2_LAYOUT, W13_LAYOUT, FusedMoEMethod, FusedMoEWeightSpec

__all__ = ["W2_LAYOUT", "W13_LAYOUT", "FusedMoEMethod", "FusedMoEWeightSpec", "UnquantizedFusedMoEMethod"]


class UnquantizedFusedMoEMethod(FusedMoEMethod):
    """Expert weights in the model's dtype, run by the platform's ``fused_moe`` custom op."""

    def __init__(self) -> None:
        self._fused_moe = get_op("fused_moe")

    def create_weights(self, layer: nn.Module, spec: FusedMoEWeightSpec) -> None:
        e, h, i = spec.num_experts, spec.hidden_size, spec.intermediate_size
        w13 = nn.Parameter(torch.empty(e, 2 * i, h, dtype=spec.params_dtype), requires_grad=False)
        w2 = nn.Parameter(torch.empty(e, h, i, dtype=spec.params_dtype), requires_grad=False)
        layer.register_parameter("w13_weight", set_layout(w13, W13_LAYOUT, layer.weight_loader))
        layer.register_parameter("w2_weight", set_layout(w2, W2_LAYOUT, layer.weight_loader))

    def apply_experts(self, layer: nn.Module, x: torch.Tensor, topk_weights: torch.Tensor,
                      topk_ids: torch.Tensor) -> torch.Tensor:
        return self._fused_moe(x, layer.w13_weight, layer.w2_weight, topk_weights, topk_ids)
