"""Linear layers sharded over the tensor-parallel group.

A layer's weights belong to its :class:`~infercore.quantization.QuantizationMethod` (unquantized
by default: one weight in the model's dtype and the platform's ``linear`` op). Each parameter
carries a ``weight_loader(param, loaded_weight)`` that takes the full tensor of the checkpoint and
copies in this rank's shard, following the parameter's layout (which dimensions follow output rows
and input columns, at what granularity), so model loading code never slices by hand.
"""

from __future__ import annotations

import torch
from torch import nn

from infercore.layers.tensor_parallel import divide, get_tp_state
from infercore.quantization import LinearWeightSpec, QuantizationMethod, layout_of, linear_method_for
from infercore.quantization.activation import ActivationQuant, QuantizedActivation
from infercore.quantization.params import BIAS, set_layout


def _copy_checked(param: torch.Tensor, loaded: torch.Tensor) -> None:
    if param.shape != loaded.shape:
        raise ValueError(f"checkpoint tensor of shape {tuple(loaded.shape)} does not fit parameter of shape "
                         f"{tuple(param.shape)}; the config does not match the weights")
    param.data.copy_(loaded)


def _copy_shard_entry(param: torch.Tensor, index: int, loaded: torch.Tensor) -> None:
    """Fill entry ``index`` of a per-projection parameter (a per-tensor scale) from a one-element tensor."""
    if loaded.numel() != 1:
        raise ValueError(f"checkpoint tensor of shape {tuple(loaded.shape)} should hold one per-tensor value; "
                         "the checkpoint's quantization scheme does not match its config")
    param.data[index].copy_(loaded.reshape(()))


def _narrow(param: torch.Tensor, loaded: torch.Tensor, dim: int | None, rank: int) -> torch.Tensor:
    """This rank's share of ``loaded`` along ``dim`` (as many entries as ``param`` has there)."""
    if dim is None or dim >= param.dim():
        return loaded
    size = param.shape[dim]
    return loaded.narrow(dim, rank * size, size)


class LinearBase(nn.Module):
    """``y = x W^T + b`` with this rank's slice of ``W`` [output_size_per_rank, input_size_per_rank].

    ``output_sizes`` are the per-rank rows of each projection fused into the layer (one entry when
    none are); ``quant_method`` defaults to the one the model's quantization format gives a layer
    named ``prefix`` (unquantized when the model has none).
    """

    #: Whether the ranks split the input features (row-parallel) rather than the output rows.
    input_split = False

    def __init__(self, input_size: int, output_size: int, bias: bool, *, output_sizes: list[int] | None = None,
                 quant_method: QuantizationMethod | None = None, prefix: str = "") -> None:
        super().__init__()
        tp = get_tp_state()
        self.tp_rank, self.tp_size = tp.rank, tp.size
        self.input_size, self.output_size = input_size, output_size
        self.output_sizes = list(output_sizes or [output_size])
        self.bias_enabled = bias
        self.use_method(quant_method or linear_method_for(prefix))

    def use_method(self, method: QuantizationMethod) -> None:
        """(Re)create the weights for ``method``; the loader calls it on layers a checkpoint leaves
        unquantized, before anything is loaded."""
        for name, _ in list(self.named_parameters(recurse=False)):
            delattr(self, name)
        self.quant_method = method
        method.create_weights(self, LinearWeightSpec(self.input_size, tuple(self.output_sizes),
                                                     torch.get_default_dtype(), self.tp_size,
                                                     self.input_split))
        if self.bias_enabled:
            bias = nn.Parameter(torch.empty(self.output_size), requires_grad=False)
            self.register_parameter("bias", set_layout(bias, BIAS, self.weight_loader))
        else:
            self.register_parameter("bias", None)

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor) -> None:
        """Copy this rank's share of the checkpoint tensor ``loaded`` into ``param``, split along the input
        features (:attr:`input_split`) or the output rows; a per-tensor value fills the parameter's one entry."""
        layout = layout_of(param)
        if layout.per_shard:
            _copy_shard_entry(param, 0, loaded)
            return
        dim = layout.input_dim if self.input_split else layout.output_dim
        _copy_checked(param, _narrow(param, loaded, dim, self.tp_rank))

    def input_quant(self) -> ActivationQuant | None:
        """How the kernel in front may quantize this layer's input (its method's
        :meth:`~infercore.quantization.QuantizationMethod.input_quantization`); ``forward`` then takes the
        :class:`~infercore.quantization.activation.QuantizedActivation`."""
        return self.quant_method.input_quantization(self)


class ColumnParallelLinear(LinearBase):
    """Output features split across ranks; each rank returns its slice (no communication).

    ``output_sizes`` (full sizes, each split over the ranks) describe projections fused in one weight.
    """

    def __init__(self, input_size: int, output_size: int, bias: bool = False, *,
                 output_sizes: list[int] | None = None, quant_method: QuantizationMethod | None = None,
                 prefix: str = "") -> None:
        tp = get_tp_state()
        per_rank = [divide(s, tp.size, "output size") for s in output_sizes] if output_sizes else None
        super().__init__(input_size, divide(output_size, tp.size, "output size"), bias, output_sizes=per_rank,
                         quant_method=quant_method, prefix=prefix)

    def forward(self, x: torch.Tensor | QuantizedActivation) -> torch.Tensor:
        return self.quant_method.apply(self, x, self.bias)


class RowParallelLinear(LinearBase):
    """Input features split across ranks; partial outputs are summed over the group."""

    input_split = True

    def __init__(self, input_size: int, output_size: int, bias: bool = False, *,
                 quant_method: QuantizationMethod | None = None, prefix: str = "") -> None:
        tp = get_tp_state()
        super().__init__(divide(input_size, tp.size, "input size"), output_size, bias,
                         quant_method=quant_method, prefix=prefix)

    def forward(self, x: torch.Tensor | QuantizedActivation) -> torch.Tensor:
        return self._sum_ranks(self.quant_method.apply(self, x))

    def _sum_ranks(self, partial: torch.Tensor) -> torch.Tensor:
        # The bias is added once, after the sum, not once per rank.
        out = get_tp_state().all_reduce(partial)
        return out if self.bias is None else out + self.bias

    @property
    def fuses_silu_and_mul(self) -> bool:
        """Whether :meth:`forward_silu_and_mul` runs the activation in front with the layer, in one op."""
        return self.quant_method.fuses_silu_and_mul

    def forward_silu_and_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """The layer applied to ``silu(gate) * up`` of this rank's ``gate_up`` = ``cat(gate, up)`` (a SwiGLU
        MLP's down projection), the activation computed by the same op as the product."""
        return self._sum_ranks(self.quant_method.apply_silu_and_mul(self, gate_up))
