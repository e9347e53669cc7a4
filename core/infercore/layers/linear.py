"""Linear layers sharded over the tensor-parallel group.

Each parameter carries a ``weight_loader(param, loaded_weight)`` that takes the full tensor of the
checkpoint and copies in this rank's shard, so model loading code never slices by hand.
"""

from __future__ import annotations

import torch
from torch import nn

from infercore.layers.tensor_parallel import divide, get_tp_state
from infercore.ops import get_op


def _copy_checked(param: torch.Tensor, loaded: torch.Tensor) -> None:
    if param.shape != loaded.shape:
        raise ValueError(f"checkpoint tensor of shape {tuple(loaded.shape)} does not fit parameter of shape "
                         f"{tuple(param.shape)}; the config does not match the weights")
    param.data.copy_(loaded)


class LinearBase(nn.Module):
    """``y = x W^T + b`` with this rank's slice of ``W`` [output_size_per_rank, input_size_per_rank]."""

    def __init__(self, input_size: int, output_size: int, bias: bool) -> None:
        super().__init__()
        tp = get_tp_state()
        self.tp_rank, self.tp_size = tp.rank, tp.size
        self.weight = nn.Parameter(torch.empty(output_size, input_size), requires_grad=False)
        self.weight.weight_loader = self.weight_loader
        if bias:
            self.bias = nn.Parameter(torch.empty(output_size), requires_grad=False)
            self.bias.weight_loader = self.weight_loader
        else:
            self.register_parameter("bias", None)
        #: The platform's GEMM (custom op ``linear``; ``F.linear`` unless a plugin has a faster one).
        self._linear = get_op("linear")

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor) -> None:
        _copy_checked(param, loaded)


class ColumnParallelLinear(LinearBase):
    """Output features split across ranks; each rank returns its slice (no communication)."""

    def __init__(self, input_size: int, output_size: int, bias: bool = False) -> None:
        tp = get_tp_state()
        super().__init__(input_size, divide(output_size, tp.size, "output size"), bias)

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor) -> None:
        size = param.shape[0]
        _copy_checked(param, loaded.narrow(0, self.tp_rank * size, size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._linear(x, self.weight, self.bias)


class RowParallelLinear(LinearBase):
    """Input features split across ranks; partial outputs are summed over the group."""

    def __init__(self, input_size: int, output_size: int, bias: bool = False) -> None:
        tp = get_tp_state()
        super().__init__(divide(input_size, tp.size, "input size"), output_size, bias)

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor) -> None:
        if param.dim() == 2:
            size = param.shape[1]
            loaded = loaded.narrow(1, self.tp_rank * size, size)
        _copy_checked(param, loaded)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The bias is added once, after the sum, not once per rank.
        out = get_tp_state().all_reduce(self._linear(x, self.weight))
        return out if self.bias is None else out + self.bias
