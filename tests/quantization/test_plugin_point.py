"""Quantization as a plugin point: how a format is chosen, what a vendor's format plugs into, and
what ``infercore plugins`` shows."""

from __future__ import annotations

import json
import shutil
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from infercore.config import InfercoreConfig
from infercore.entrypoints.plugins_cmd import describe_plugins
from infercore.layers.linear import LinearBase
from infercore.models import load_model
from infercore.ops.fp8_math import FP8_DTYPE
from infercore.plugins import hookimpl, reset_plugin_manager
from infercore.plugins.manager import PluginManager
from infercore.quantization import QuantizationConfig, QuantizationMethod
from infercore.quantization.fp8_methods import Fp8BlockLinearMethod
from infercore.quantization.unquantized import UnquantizedLinearMethod

PROMPT = torch.tensor([3, 14, 15, 92, 65, 35, 89, 79])


def _load(folder: Path, **kwargs: Any) -> torch.nn.Module:
    return load_model(InfercoreConfig.from_kwargs(model=str(folder), **kwargs), torch.device("cpu"), torch.float32)


def _hidden(model: torch.nn.Module) -> torch.Tensor:
    # Linear layers only: the MLP of layer 0 on the embedded prompt, no attention or cache needed.
    with torch.no_grad():
        return model.model.layers[0].mlp(model.model.embed_tokens(PROMPT))


def _with_config(src: Path, dst: Path, quantization_config: dict[str, Any]) -> Path:
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    config["quantization_config"] = quantization_config
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def test_infercore_plugins_lists_the_quantization_methods() -> None:
    builtin = next(r for r in describe_plugins() if r["name"] == "builtin")
    assert builtin["registered"]["quantization_method"] == ["awq", "compressed-tensors", "fp8", "gptq"]
    assert "register_quantization_methods" in builtin["hooks"]


def test_an_unquantized_model_keeps_one_weight_per_layer_in_its_dtype(tiny_qwen3: Path) -> None:
    model = _load(tiny_qwen3)
    layers = [m for m in model.modules() if isinstance(m, LinearBase)]
    assert layers and all(isinstance(m.quant_method, UnquantizedLinearMethod) for m in layers)
    assert {n.rsplit(".", 1)[-1] for n, _ in model.named_parameters()} == {"weight"}
    assert {p.dtype for p in model.parameters()} == {torch.float32}


class _CountingMethod(UnquantizedLinearMethod):
    calls = 0

    def apply(self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        type(self).calls += 1
        return super().apply(layer, x, bias)


class CountingConfig(QuantizationConfig):
    """A vendor's format as a plugin would write it: here, unquantized weights whose GEMMs are counted."""

    name = "acme-counting"

    @classmethod
    def from_checkpoint(cls, quantization_config: dict[str, Any] | None) -> CountingConfig:
        return cls()

    def linear_method(self, prefix: str) -> QuantizationMethod:
        return _CountingMethod()


def test_a_plugin_adds_a_format_that_quantization_selects(tiny_qwen3: Path) -> None:
    plugin = types.ModuleType("acme_quant")
    plugin.INFERCORE_PLUGIN_API = (1, 1)

    @hookimpl
    def register_quantization_methods(register) -> None:
        register("acme-counting", f"{__name__}:CountingConfig")

    plugin.register_quantization_methods = register_quantization_methods
    manager = PluginManager()
    manager.load_entry_points()
    manager.register_module(plugin, "acme-quant")
    reset_plugin_manager(manager)
    try:
        model = _load(tiny_qwen3, quantization="acme-counting")
        _CountingMethod.calls = 0
        counted = _hidden(model)
    finally:
        reset_plugin_manager(None)
    assert _CountingMethod.calls == 2  # gate_up and down
    assert torch.equal(counted, _hidden(_load(tiny_qwen3)))


def test_quantization_fp8_quantizes_an_unquantized_checkpoint_while_loading(tiny_qwen3: Path) -> None:
    model = _load(tiny_qwen3, quantization="fp8")
    gate_up = model.model.layers[0].mlp.gate_up_proj
    assert isinstance(gate_up.quant_method, Fp8BlockLinearMethod)
    assert gate_up.weight.dtype == FP8_DTYPE and gate_up.weight_scale_inv.shape == (2, 1)  # 256 x 64: two 128x128 blocks
    ref = _hidden(_load(tiny_qwen3))
    assert float((_hidden(model) - ref).abs().max() / ref.abs().max()) < 0.1


def test_dummy_fp8_weights_get_unit_scales(tiny_qwen3: Path, tmp_path: Path) -> None:
    block = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [32, 32]}
    model = _load(_with_config(tiny_qwen3, tmp_path / "m", block), load_format="dummy")
    qkv = model.model.layers[0].self_attn.qkv_proj
    assert qkv.weight.dtype == FP8_DTYPE and torch.equal(qkv.weight_scale_inv, torch.ones(4, 2))
    assert torch.isfinite(_hidden(model)).all()


@pytest.mark.parametrize(("kwargs", "config", "message"), [
    ({"quantization": "compressed-tensors"}, None, "needs a checkpoint saved in that format"),
    ({"quantization": "no-such-format"}, None, "supported: awq, compressed-tensors, fp8, gptq"),
    ({"quantization": "compressed-tensors"}, {"quant_method": "fp8"}, "does not match the checkpoint"),
    ({}, {"quant_method": "fp8", "weight_block_size": [128]}, "must be two positive sizes"),
    ({}, {"quant_method": "fp8", "fmt": "e5m2"}, "only e4m3"),
    ({}, {"quant_method": "bitsandbytes"}, "'bitsandbytes' is not supported"),
    ({}, {"quant_method": "gptq", "bits": 3}, "GPTQ checkpoints with bits=3 are not supported"),
    ({}, {"bits": 4}, "names no quant_method"),
])
def test_formats_that_cannot_load_are_refused_saying_why(tiny_qwen3: Path, tmp_path: Path, kwargs: dict[str, Any],
                                                          config: dict[str, Any] | None, message: str) -> None:
    folder = _with_config(tiny_qwen3, tmp_path / "m", config) if config else tiny_qwen3
    with pytest.raises(ValueError, match=message):
        _load(folder, **kwargs)
