"""The quantization interface of fused mixture-of-experts layers: the weights a layer holds on a rank, and
the method that owns them. Formats subclass :class:`FusedMoEMethod` (the unquantized method, and the
layer itself, live in ``infercore.layers.fused_moe``)."""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass

import torch
from torch import nn

from infercore.quantization.base import QuantizationMethod
from infercore.quantization.params import ParamLayout

#: ``w13_*`` parameters [E, 2I, H]: rows are the (gate, then up) intermediate features, columns the hidden ones.
W13_LAYOUT = ParamLayout(output_dim=1, input_dim=2)
#: ``w2_*`` parameters [E, H, I]: rows are hidden features, columns the intermediate ones.
W2_LAYOUT = ParamLayout(output_dim=1, input_dim=2)


@dataclass(frozen=True)
class FusedMoEWeightSpec:
    """The expert weights a fused-MoE layer holds on this rank.

    The rank holds ``num_experts`` experts (all of them under tensor parallelism; under expert
    parallelism only its own, stacked in the order of the layer's ``local_expert_ids``), each with
    ``intermediate_size`` (this rank's share of the expert's intermediate features; all of them under
    expert parallelism) rows of gate and of up projection and as many columns of down projection;
    ``params_dtype`` is the model's dtype; ``tp_size`` the number of ranks each expert is split over.
    """

    num_experts: int
    hidden_size: int
    intermediate_size: int
    params_dtype: torch.dtype
    tp_size: int = 1


class FusedMoEMethod(QuantizationMethod):
    """A :class:`QuantizationMethod` for fused-MoE layers.

    :meth:`create_weights` registers the layer's parameters named ``w13_<name>`` (stacked gate and up
    projections, laid out per expert as [E, 2I, ...]) and ``w2_<name>`` (down projections, [E, H, ...]),
    each with the layer's ``weight_loader`` and a layout whose dimensions index the stacked parameter;
    checkpoint tensor ``experts.{e}.gate_proj.<name>`` fills expert ``e`` of ``w13_<name>``.
    """

    @abstractmethod
    def create_weights(self, layer: nn.Module, spec: FusedMoEWeightSpec) -> None:
        """Register ``w13_*`` and ``w2_*`` parameters for ``spec``."""

    @abstractmethod
    def apply_experts(self, layer: nn.Module, x: torch.Tensor, topk_weights: torch.Tensor,
                      topk_ids: torch.Tensor) -> torch.Tensor:
        """This rank's partial output [T, H] of the experts ``topk_ids`` [T, k] chose for ``x`` [T, H],
        weighted by ``topk_weights`` [T, k] (float32); the layer sums it over the tensor-parallel group.
        Under expert parallelism ``topk_ids`` index the experts held here (``k`` is one, the weights one)."""

    def apply(self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """Not meaningful without routing: fused-MoE layers call :meth:`apply_experts`."""
        raise TypeError(f"{type(self).__name__} applies experts through apply_experts(layer, x, topk_weights, "
                        "topk_ids), not apply()")
