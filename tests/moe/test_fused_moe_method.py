"""A quantization format gives fused-MoE layers their weights' method, as it does linear layers."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from infercore.layers.fused_moe import FusedMoE, FusedMoEWeightSpec, UnquantizedFusedMoEMethod
from infercore.models.loader import process_weights_after_loading
from infercore.quantization import QuantizationConfig, QuantizationMethod, building_with
from infercore.quantization.unquantized import UnquantizedLinearMethod


class RecordingMoEMethod(UnquantizedFusedMoEMethod):
    """The unquantized method, noting what it was asked to do."""

    def __init__(self) -> None:
        super().__init__()
        self.specs: list[FusedMoEWeightSpec] = []
        self.processed = 0

    def create_weights(self, layer: nn.Module, spec: FusedMoEWeightSpec) -> None:
        self.specs.append(spec)
        super().create_weights(layer, spec)

    def process_weights_after_loading(self, layer: nn.Module) -> None:
        self.processed += 1


class FakeFormat(QuantizationConfig):
    name = "fake"

    def __init__(self, moe: QuantizationMethod, ignored: tuple[str, ...] = ()) -> None:
        self.moe, self.ignored = moe, ignored

    @classmethod
    def from_checkpoint(cls, quantization_config: dict[str, Any] | None) -> FakeFormat:
        raise NotImplementedError

    def linear_method(self, prefix: str) -> QuantizationMethod:
        return UnquantizedLinearMethod()

    def moe_method(self, prefix: str) -> QuantizationMethod:
        return self.moe

    def is_ignored(self, prefix: str) -> bool:
        return prefix in self.ignored


def test_the_format_in_force_gives_the_layer_its_method_and_the_loader_prepares_it() -> None:
    method = RecordingMoEMethod()
    with building_with(FakeFormat(method)):
        layer = FusedMoE(4, 2, 8, 6, renormalize=True, prefix="model.layers.0.mlp.experts")
    assert layer.quant_method is method
    assert method.specs == [FusedMoEWeightSpec(4, 8, 6, torch.get_default_dtype(), 1)]
    process_weights_after_loading(layer)
    assert method.processed == 1


def test_a_layer_the_checkpoint_ignores_stays_unquantized() -> None:
    with building_with(FakeFormat(RecordingMoEMethod(), ignored=("mlp.experts",))):
        layer = FusedMoE(4, 2, 8, 6, renormalize=True, prefix="mlp.experts")
    assert type(layer.quant_method) is UnquantizedFusedMoEMethod


def test_a_linear_method_for_a_moe_layer_is_refused() -> None:
    with building_with(FakeFormat(UnquantizedLinearMethod())), pytest.raises(TypeError, match="not a FusedMoEMethod"):
        FusedMoE(4, 2, 8, 6, renormalize=True, prefix="mlp.experts")


def test_a_moe_method_applies_experts_not_plain_inputs() -> None:
    layer = FusedMoE(4, 2, 8, 6, renormalize=True)
    with pytest.raises(TypeError, match="apply_experts"):
        layer.quant_method.apply(layer, torch.zeros(1, 8))
