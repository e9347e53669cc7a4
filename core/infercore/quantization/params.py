"""How a method's parameter is laid out, so the layers' weight loaders can shard and fuse it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class ParamLayout:
    """Which dimensions of a parameter follow the layer's output rows and input columns.

    ``output_dim`` (None: not split by rows) is indexed by output rows, ``rows_per_entry`` of them
    per entry (block scales: the block height); ``input_dim`` likewise by input columns.
    ``per_shard`` parameters hold one entry per fused projection (a per-tensor scale of each of
    q, k and v) and are filled by shard index, never split over ranks.
    """

    output_dim: int | None = 0
    input_dim: int | None = 1
    rows_per_entry: int = 1
    cols_per_entry: int = 1
    per_shard: bool = False
    #: The value a dummy (random-weight) load gives it instead of random numbers (scales: 1).
    dummy_value: float | None = None


WEIGHT = ParamLayout()
BIAS = ParamLayout(input_dim=None)


def set_layout(param: nn.Parameter, layout: ParamLayout, weight_loader: object) -> nn.Parameter:
    """Attach ``layout`` and the layer's ``weight_loader`` to ``param``; returns it."""
    param.param_layout = layout  # type: ignore[attr-defined]
    param.weight_loader = weight_loader  # type: ignore[attr-defined]
    return param


def layout_of(param: nn.Parameter) -> ParamLayout:
    """The layout of ``param`` (a plain weight's when none was set)."""
    return getattr(param, "param_layout", WEIGHT if param.dim() == 2 else BIAS)


def register_param(layer: nn.Module, name: str, data: torch.Tensor, layout: ParamLayout,
                   loader: Callable[..., None] | None = None) -> None:
    """Register checkpoint tensor ``name`` of ``layer`` as ``data`` with its layout and the layer's weight loader
    (or ``loader``)."""
    param = nn.Parameter(data, requires_grad=False)
    layer.register_parameter(name, set_layout(param, layout, loader or layer.weight_loader))


def replace_param(layer: nn.Module, name: str, data: torch.Tensor) -> None:
    """Make ``data`` the parameter ``name`` once loading is done (loaders and layouts are no longer needed)."""
    if hasattr(layer, name):
        delattr(layer, name)
    layer.register_parameter(name, nn.Parameter(data, requires_grad=False))
