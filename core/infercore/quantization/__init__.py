"""Quantization as a plugin point: formats (:class:`QuantizationConfig`) hand each layer a
:class:`QuantizationMethod` that owns its weights; FP8 ships in core."""

from infercore.quantization.base import LinearWeightSpec, QuantizationConfig, QuantizationMethod
from infercore.quantization.context import building_with, current_quantization, linear_method_for
from infercore.quantization.params import ParamLayout, layout_of, set_layout
from infercore.quantization.selection import resolve_quantization

__all__ = [
    "LinearWeightSpec",
    "ParamLayout",
    "QuantizationConfig",
    "QuantizationMethod",
    "building_with",
    "current_quantization",
    "layout_of",
    "linear_method_for",
    "resolve_quantization",
    "set_layout",
]
