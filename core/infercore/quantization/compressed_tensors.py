"""The FP8 and W4A16 schemes of ``compressed-tensors`` checkpoints (``quant_method: compressed-tensors``).

The config is read with the ``compressed-tensors`` package. Supported: 8-bit float weights per
tensor, per channel or per block, with activations quantized dynamically per token (or per group,
for block weights) or statically per tensor; and 4-bit integer weights with unquantized activations
(:mod:`infercore.quantization.compressed_tensors_int4`).
"""

from __future__ import annotations

import re
from typing import Any

from infercore.quantization.base import QuantizationConfig, QuantizationMethod
from infercore.quantization.fp8_methods import Fp8BlockLinearMethod, Fp8ChannelLinearMethod

_FLOAT8 = "an FP8 scheme (8-bit float weights and activations)"


def _matches(prefix: str, pattern: str) -> bool:
    if pattern.startswith("re:"):
        return re.match(pattern[3:], prefix) is not None
    return prefix == pattern or prefix.endswith("." + pattern)


class CompressedTensorsConfig(QuantizationConfig):
    """A compressed-tensors checkpoint whose one quantization scheme targets every ``Linear`` layer."""

    name = "compressed-tensors"

    def __init__(self, method: QuantizationMethod, ignore: tuple[str, ...]) -> None:
        self._method = method
        self.ignore = ignore

    @classmethod
    def from_checkpoint(cls, quantization_config: dict[str, Any] | None) -> CompressedTensorsConfig:
        if quantization_config is None:
            raise ValueError("--quantization compressed-tensors needs a checkpoint saved in that format (its "
                             "config.json has a quantization_config); use --quantization fp8 to quantize an "
                             "unquantized checkpoint while loading")
        from compressed_tensors.quantization import QuantizationConfig as CTConfig

        try:
            parsed = CTConfig.model_validate(quantization_config)
        except Exception as exc:
            raise ValueError(f"the checkpoint's compressed-tensors quantization_config is invalid: {exc}") from None
        groups = list(parsed.config_groups.values())
        if len(groups) != 1 or "Linear" not in groups[0].targets:
            raise ValueError(f"compressed-tensors checkpoints with {len(groups)} scheme group(s) targeting "
                             f"{[g.targets for g in groups]} are not supported; only one group targeting 'Linear' is")
        return cls(_method_of(groups[0]), tuple(parsed.ignore or ()))

    def linear_method(self, prefix: str) -> QuantizationMethod:
        return self._method

    def is_ignored(self, prefix: str) -> bool:
        return any(_matches(prefix, p) for p in self.ignore)


def _strategy(args: Any) -> str:
    """A scheme's strategy name (the package keeps it as a string enum)."""
    return str(getattr(args.strategy, "value", args.strategy))


def _method_of(scheme: Any) -> QuantizationMethod:
    weights, inputs = scheme.weights, scheme.input_activations
    if weights is not None and weights.type == "int" and inputs is None:
        from infercore.quantization.compressed_tensors_int4 import w4a16_method

        return w4a16_method(weights)
    if weights is None or weights.type != "float" or weights.num_bits != 8:
        raise ValueError(f"compressed-tensors scheme with weights {weights} is not supported; infercore reads {_FLOAT8}")
    if inputs is None or inputs.type != "float" or inputs.num_bits != 8:
        raise ValueError(f"compressed-tensors FP8 weight-only schemes are not supported (input_activations "
                         f"{inputs}); infercore reads {_FLOAT8}")
    strategy, act = _strategy(weights), _strategy(inputs)
    if strategy == "block":
        block_n, block_k = weights.block_structure or (128, 128)
        if not (inputs.dynamic and act == "group" and inputs.group_size == block_k):
            raise ValueError(f"block-scaled compressed-tensors weights need activations quantized dynamically per "
                             f"group of {block_k} columns, not {act} (dynamic={inputs.dynamic})")
        return Fp8BlockLinearMethod(block_n, block_k, scale_name="weight_scale")
    if strategy not in ("tensor", "channel"):
        raise ValueError(f"compressed-tensors FP8 weight strategy {strategy!r} is not supported; use tensor, "
                         "channel or block")
    if inputs.dynamic and act != "token":
        raise ValueError(f"dynamic FP8 activations per {act!r} are not supported; use per-token")
    if not inputs.dynamic and act != "tensor":
        raise ValueError(f"static FP8 activations per {act!r} are not supported; use per-tensor")
    return Fp8ChannelLinearMethod(per_channel=strategy == "channel", static_input=not inputs.dynamic)
