"""FP8 (W8A8 e4m3) linear methods: block-scaled weights, and per-channel (or per-tensor) scales."""

from __future__ import annotations

import torch
from torch import nn

from infercore.ops import get_op
from infercore.ops.fp8_math import FP8_DTYPE, quantize_blockwise
from infercore.quantization.activation import ActivationQuant, QuantizedActivation
from infercore.quantization.base import LinearWeightSpec, QuantizationMethod
from infercore.quantization.params import WEIGHT, ParamLayout, register_param, replace_param


class Fp8BlockLinearMethod(QuantizationMethod):
    """FP8 weights with one float32 scale per ``block_n`` x ``block_k`` block (``weight_scale_inv`` in HF
    ``fp8`` checkpoints, ``weight_scale`` in compressed-tensors ones); activations quantized per token
    and group of ``block_k`` columns, by the norm or activation in front when it can
    (:meth:`input_quantization`), else here. With ``quantize_on_load`` the checkpoint holds unquantized
    weights and they are quantized after loading."""

    def __init__(self, block_n: int, block_k: int, scale_name: str = "weight_scale_inv",
                 quantize_on_load: bool = False) -> None:
        self.block_n, self.block_k = block_n, block_k
        self.scale_name = scale_name
        self.quantize_on_load = quantize_on_load
        self._gemm = get_op("fp8_block_linear")
        self._gemm_quantized = get_op("fp8_block_linear_quantized")
        self._input_quant = ActivationQuant(block_k)

    def _check_blocks(self, spec: LinearWeightSpec) -> None:
        fused = len(spec.output_sizes) > 1 or spec.tp_size > 1
        bad = [s for s in spec.output_sizes if s % self.block_n] if fused else []
        if bad or (spec.tp_size > 1 and spec.input_size % self.block_k):
            raise ValueError(
                f"a block-scaled FP8 layer of {spec.output_sizes} rows and {spec.input_size} input features per "
                f"rank does not split into whole {self.block_n}x{self.block_k} blocks; use a tensor_parallel_size "
                "that keeps every projection a multiple of the block size")

    def create_weights(self, layer: nn.Module, spec: LinearWeightSpec) -> None:
        n, k = spec.output_size, spec.input_size
        if self.quantize_on_load:
            register_param(layer, "weight", torch.empty(n, k, dtype=spec.params_dtype), WEIGHT)
            return
        self._check_blocks(spec)
        register_param(layer, "weight", torch.empty(n, k, dtype=FP8_DTYPE), WEIGHT)
        blocks = torch.empty(-(-n // self.block_n), -(-k // self.block_k), dtype=torch.float32)
        register_param(layer, self.scale_name, blocks,
               ParamLayout(rows_per_entry=self.block_n, cols_per_entry=self.block_k, dummy_value=1.0))

    def process_weights_after_loading(self, layer: nn.Module) -> None:
        if self.quantize_on_load:
            weight, scale = quantize_blockwise(layer.weight.data, self.block_n, self.block_k)
            replace_param(layer, "weight", weight)
            replace_param(layer, self.scale_name, scale)

    def input_quantization(self, layer: nn.Module) -> ActivationQuant | None:
        return self._input_quant

    def apply(self, layer: nn.Module, x: torch.Tensor | QuantizedActivation,
              bias: torch.Tensor | None = None) -> torch.Tensor:
        scale = getattr(layer, self.scale_name)
        if isinstance(x, QuantizedActivation):
            return self._gemm_quantized(x.values, x.scales, layer.weight, scale, self.block_n, self.block_k, bias,
                                        x.dtype)
        return self._gemm(x, layer.weight, scale, self.block_n, self.block_k, bias)


class Fp8ChannelLinearMethod(QuantizationMethod):
    """FP8 weights with a float32 scale per output channel, or per tensor (then one per fused projection,
    spread over its rows after loading); activations quantized per token, or with the checkpoint's
    static per-tensor ``input_scale`` (the largest of the fused projections'). Dynamic per-token
    quantization is left to the norm or activation in front when it can (:meth:`input_quantization`)."""

    def __init__(self, per_channel: bool, static_input: bool) -> None:
        self.per_channel = per_channel
        self.static_input = static_input
        self._gemm = get_op("fp8_linear")
        self._gemm_quantized = get_op("fp8_linear_quantized")

    def create_weights(self, layer: nn.Module, spec: LinearWeightSpec) -> None:
        n, shards = spec.output_size, len(spec.output_sizes)
        layer.fp8_output_sizes = spec.output_sizes
        register_param(layer, "weight", torch.empty(n, spec.input_size, dtype=FP8_DTYPE), WEIGHT)
        if self.per_channel:
            register_param(layer, "weight_scale", torch.empty(n, 1, dtype=torch.float32),
                   ParamLayout(input_dim=None, dummy_value=1.0))
        else:
            register_param(layer, "weight_scale", torch.empty(shards, dtype=torch.float32),
                   ParamLayout(output_dim=None, input_dim=None, per_shard=True, dummy_value=1.0))
        if self.static_input:
            register_param(layer, "input_scale", torch.empty(shards, dtype=torch.float32),
                   ParamLayout(output_dim=None, input_dim=None, per_shard=True, dummy_value=1.0))

    def process_weights_after_loading(self, layer: nn.Module) -> None:
        scale = layer.weight_scale.data
        if self.per_channel:
            scale = scale.reshape(-1)
        else:
            sizes = torch.tensor(layer.fp8_output_sizes, device=scale.device)
            scale = scale.repeat_interleave(sizes)
        replace_param(layer, "weight_scale", scale.float().contiguous())
        if self.static_input:
            replace_param(layer, "input_scale", layer.input_scale.data.amax().reshape(1))

    def input_quantization(self, layer: nn.Module) -> ActivationQuant | None:
        # Per token: one group as wide as the layer's input on this rank.
        return None if self.static_input else ActivationQuant(layer.input_size)

    def apply(self, layer: nn.Module, x: torch.Tensor | QuantizedActivation,
              bias: torch.Tensor | None = None) -> torch.Tensor:
        if isinstance(x, QuantizedActivation):
            return self._gemm_quantized(x.values, x.scales, layer.weight, layer.weight_scale, bias, x.dtype)
        return self._gemm(x, layer.weight, layer.weight_scale, bias, getattr(layer, "input_scale", None))
