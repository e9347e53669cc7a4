"""INT4 weight-only (W4A16) linear methods: AWQ and GPTQ checkpoint tensors (compressed-tensors' in
:mod:`infercore.quantization.compressed_tensors_int4`), one kernel layout.

Each method registers the checkpoint's own tensors (so the layers' weight loaders shard and fuse
them by their layouts), and after loading unpacks them and repacks them into
:class:`~infercore.ops.int4_math.Int4Weight`, which custom op ``int4_linear`` multiplies.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from infercore.ops import get_op
from infercore.ops.int4_math import make_int4_weight
from infercore.ops.int4_packing import PACK, unpack_awq, unpack_sequential
from infercore.quantization.base import LinearWeightSpec, QuantizationMethod
from infercore.quantization.params import ParamLayout, register_param, replace_param

#: What a dummy (random-weight) load gives every scale: codes 0..15 minus zeros 0..16 then span about ±0.1.
DUMMY_SCALE = 0.006


class Int4LinearMethod(QuantizationMethod):
    """4-bit weights with a scale and zero-point per ``group_size`` input rows (-1: one group over all
    of them) and output column; activations stay in the model's dtype."""

    #: The format's name in errors.
    format_name = "INT4"

    def __init__(self, group_size: int) -> None:
        self.group_size = group_size
        self._gemm = get_op("int4_linear")

    def _group(self, input_size: int) -> int:
        return input_size if self.group_size == -1 else self.group_size

    def _check_split(self, layer: nn.Module, spec: LinearWeightSpec) -> None:
        """Every fused projection packs into whole int32s of 8 columns, and this rank's input features into
        whole groups (and whole int32s of 8 rows)."""
        bad = [s for s in spec.output_sizes if s % PACK]
        if bad:
            raise ValueError(f"a {self.format_name} layer with projections of {list(spec.output_sizes)} output features "
                             f"per rank does not pack into whole int32s of {PACK} columns; use a tensor_parallel_size "
                             f"that keeps every projection a multiple of {PACK}")
        if spec.input_size % PACK:
            raise ValueError(f"a {self.format_name} layer of {spec.input_size} input features per rank does not pack "
                             f"into whole int32s of {PACK}")
        if self.group_size != -1 and spec.input_size % self.group_size:
            where = " per rank" if spec.tp_size > 1 and spec.input_split else ""
            raise ValueError(f"a {self.format_name} layer of {spec.input_size} input features{where} does not split "
                             f"into whole groups of {self.group_size}; use a tensor_parallel_size that keeps each "
                             f"rank's share of the input a multiple of group_size {self.group_size}")

    def create_weights(self, layer: nn.Module, spec: LinearWeightSpec) -> None:
        self._check_split(layer, spec)
        self.create_checkpoint_params(layer, spec)

    @abstractmethod
    def create_checkpoint_params(self, layer: nn.Module, spec: LinearWeightSpec) -> None:
        """Register the checkpoint's tensors of this format."""

    @abstractmethod
    def checkpoint_codes(self, layer: nn.Module) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The loaded codes [K, N], zeros [G, N] and act-order ``g_idx`` [K] (None without it)."""

    def checkpoint_scales(self, layer: nn.Module) -> torch.Tensor:
        """The loaded scales as [G, N]."""
        return layer.scales.data

    def process_weights_after_loading(self, layer: nn.Module) -> None:
        codes, zeros, g_idx = self.checkpoint_codes(layer)
        scales = self.checkpoint_scales(layer)
        weight = make_int4_weight(codes, scales, zeros, self._group(codes.shape[0]), g_idx, interleaved=True)
        for name, _ in list(layer.named_parameters(recurse=False)):
            if name != "bias":
                delattr(layer, name)
        for name in ("qweight", "scales", "zeros", "perm", "row_groups"):
            value = getattr(weight, name)
            if value is not None:
                replace_param(layer, name, value)
        layer.int4_weight = weight

    def apply(self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return self._gemm(x, layer.int4_weight, bias)


def _scale_layout(group: int, whole: bool) -> ParamLayout:
    """Scales and zeros [G, N(/8)]: split by rows with the weight, and by input columns unless ``whole``."""
    return ParamLayout(output_dim=1, input_dim=None if whole else 0, cols_per_entry=group, dummy_value=DUMMY_SCALE)


class AwqLinearMethod(Int4LinearMethod):
    """AutoAWQ's GEMM layout: ``qweight`` int32 [K, N/8] and ``qzeros`` int32 [K/g, N/8], both in AWQ's
    interleaved column order, ``scales`` [K/g, N]; ``W = (q - zero) * scale``."""

    format_name = "AWQ"

    def create_checkpoint_params(self, layer: nn.Module, spec: LinearWeightSpec) -> None:
        k, n = spec.input_size, spec.output_size
        groups = k // self._group(k)
        whole = self.group_size == -1
        register_param(layer, "qweight", torch.empty(k, n // PACK, dtype=torch.int32),
               ParamLayout(output_dim=1, input_dim=0, rows_per_entry=PACK))
        register_param(layer, "qzeros", torch.empty(groups, n // PACK, dtype=torch.int32),
               ParamLayout(output_dim=1, input_dim=None if whole else 0, rows_per_entry=PACK))
        register_param(layer, "scales", torch.empty(groups, n, dtype=spec.params_dtype), _scale_layout(self._group(k), whole))

    def checkpoint_codes(self, layer: nn.Module) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        return unpack_awq(layer.qweight.data), unpack_awq(layer.qzeros.data), None


class GptqLinearMethod(Int4LinearMethod):
    """GPTQ's layout: ``qweight`` int32 [K/8, N] packed along the input, ``qzeros`` int32 [G, N/8] holding
    ``zero - zero_offset`` (1 in the original format, 0 in ``gptq_v2``), ``scales`` [G, N] and ``g_idx``
    [K], each input row's group (act-order when ``desc_act``; otherwise ``k // group_size`` and unused).

    Act-order layers split over their input (row-parallel) keep every group's scales on every rank,
    since a rank's rows belong to groups all over the layer."""

    format_name = "GPTQ"

    def __init__(self, group_size: int, desc_act: bool, zero_offset: int = 1) -> None:
        super().__init__(group_size)
        self.desc_act = desc_act
        self.zero_offset = zero_offset

    def create_checkpoint_params(self, layer: nn.Module, spec: LinearWeightSpec) -> None:
        k, n = spec.input_size, spec.output_size
        whole = self.group_size == -1 or (self.desc_act and spec.tp_size > 1 and spec.input_split)
        full_k = k * spec.tp_size if whole and self.group_size != -1 else k
        groups = full_k // self._group(full_k)
        register_param(layer, "qweight", torch.empty(k // PACK, n, dtype=torch.int32),
               ParamLayout(output_dim=1, input_dim=0, cols_per_entry=PACK))
        register_param(layer, "qzeros", torch.empty(groups, n // PACK, dtype=torch.int32),
               ParamLayout(output_dim=1, input_dim=None if whole else 0, rows_per_entry=PACK))
        register_param(layer, "scales", torch.empty(groups, n, dtype=spec.params_dtype), _scale_layout(self._group(k), whole))
        register_param(layer, "g_idx", torch.empty(k, dtype=torch.int32), ParamLayout(output_dim=None, input_dim=0, dummy_value=0),
               loader=same_for_every_projection(layer))

    def checkpoint_codes(self, layer: nn.Module) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        codes = unpack_sequential(layer.qweight.data, dim=0)
        zeros = unpack_sequential(layer.qzeros.data, dim=1).to(torch.int16) + self.zero_offset
        return codes, zeros, layer.g_idx.data if self.desc_act else None


def same_for_every_projection(layer: nn.Module) -> Callable[..., None]:
    """The loader of ``g_idx``: fused projections (q, k, v; gate, up) share one input and so one act-order
    permutation; a checkpoint whose projections disagree cannot run fused and is refused."""

    def load(param: nn.Parameter, loaded: torch.Tensor, *shard: Any) -> None:
        before = param.data.clone() if getattr(param, "int4_loaded", False) else None
        layer.weight_loader(param, loaded.to(torch.int32), *shard)
        if before is not None and not torch.equal(before, param.data):
            raise ValueError(f"the fused projections of a 4-bit layer have different g_idx (act-order) in the "
                             f"checkpoint (shard {shard[0] if shard else '?'}); infercore needs projections that share "
                             "an input to share their act-order, as GPTQ's quantizers produce")
        param.int4_loaded = True  # type: ignore[attr-defined]

    return load
