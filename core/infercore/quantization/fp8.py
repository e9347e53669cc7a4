"""The ``fp8`` format of Hugging Face checkpoints (``quant_method: fp8``), and ``--quantization fp8``."""

from __future__ import annotations

from typing import Any

from infercore.quantization.base import QuantizationConfig, QuantizationMethod
from infercore.quantization.fp8_methods import Fp8BlockLinearMethod, Fp8ChannelLinearMethod
from infercore.quantization.fp8_moe import Fp8BlockFusedMoEMethod

#: The block of weights quantizing an unquantized checkpoint on load shares one scale over.
ONLINE_BLOCK = (128, 128)


class Fp8Config(QuantizationConfig):
    """HF ``fp8`` checkpoints: e4m3 weights with ``weight_block_size`` block scales (``weight_scale_inv``)
    or one ``weight_scale`` per tensor; activations dynamic (per token / per group) or, per tensor,
    static (``input_scale``); block-scaled experts of fused-MoE layers too (:meth:`moe_method`). Given for a
    checkpoint without a ``quantization_config`` (``--quantization fp8``), weights are quantized blockwise
    (128x128) as they load."""

    name = "fp8"

    def __init__(self, block: tuple[int, int] | None, static_input: bool, quantize_on_load: bool,
                 ignored: tuple[str, ...] = ()) -> None:
        self.block = block
        self.static_input = static_input
        self.quantize_on_load = quantize_on_load
        self.ignored = ignored

    @classmethod
    def from_checkpoint(cls, quantization_config: dict[str, Any] | None) -> Fp8Config:
        if quantization_config is None:
            return cls(ONLINE_BLOCK, static_input=False, quantize_on_load=True)
        fmt = quantization_config.get("fmt", "e4m3")
        if fmt != "e4m3":
            raise ValueError(f"fp8 checkpoint format {fmt!r} is not supported; only e4m3 weights are")
        scheme = quantization_config.get("activation_scheme", "dynamic")
        if scheme not in ("dynamic", "static"):
            raise ValueError(f"fp8 activation_scheme {scheme!r} is not supported; use 'dynamic' or 'static'")
        block = quantization_config.get("weight_block_size")
        if block is not None:
            if len(block) != 2 or min(block) < 1:
                raise ValueError(f"fp8 weight_block_size {block!r} must be two positive sizes, e.g. [128, 128]")
            if scheme == "static":
                raise ValueError("fp8 checkpoints with weight_block_size quantize activations dynamically; "
                                 "activation_scheme 'static' is not supported with block scales")
        ignored = tuple(quantization_config.get("modules_to_not_convert") or ())
        return cls(tuple(block) if block else None, scheme == "static", quantize_on_load=False, ignored=ignored)

    def linear_method(self, prefix: str) -> QuantizationMethod:
        if self.block is not None:
            return Fp8BlockLinearMethod(*self.block, quantize_on_load=self.quantize_on_load)
        return Fp8ChannelLinearMethod(per_channel=False, static_input=self.static_input)

    def moe_method(self, prefix: str) -> QuantizationMethod:
        """Block-scaled experts (checkpoints with ``weight_block_size``, and ``--quantization fp8``, which
        quantizes them blockwise as they load); per-tensor scales have no MoE method."""
        if self.block is None:
            raise ValueError("fp8 checkpoints with per-tensor scales (no weight_block_size) have no method for "
                             "mixture-of-experts layers; use a block-scaled fp8 checkpoint (weight_block_size, as the "
                             "Qwen3 -FP8 releases have), or --quantization fp8 on the unquantized checkpoint")
        return Fp8BlockFusedMoEMethod(*self.block, quantize_on_load=self.quantize_on_load)

    def is_ignored(self, prefix: str) -> bool:
        return any(prefix == name or prefix.endswith("." + name) or prefix.startswith(name + ".")
                   for name in self.ignored)
