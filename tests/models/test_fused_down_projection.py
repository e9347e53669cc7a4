"""A SwiGLU MLP's down projection that fuses the activation in front of it (``silu_and_mul_linear``) gives
the output of the two ops it replaces; a down projection wrapped by LoRA on a platform without a
``lora_linear`` kernel (the layer then reads the activation itself), or quantized, keeps the two ops."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LlamaConfig

from infercore.lora.layers import LoRALinear
from infercore.lora.step_state import LoRAStepState
from infercore.models.llama import DecoderOptions, LlamaMLP
from infercore.ops import reference


def _mlp() -> LlamaMLP:
    torch.manual_seed(0)
    mlp = LlamaMLP(LlamaConfig(hidden_size=32, intermediate_size=48), DecoderOptions())
    for param in mlp.parameters():
        param.data.normal_(0.0, 0.2)
    return mlp


def _fuse(mlp: LlamaMLP, calls: list[int]) -> None:
    """Give the down projection a platform op that fuses (the reference, counted)."""
    method = mlp.down_proj.quant_method

    def fused(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        calls.append(x.shape[-1])
        return reference.silu_and_mul_linear(x, weight, bias)

    method.fuses_silu_and_mul = True
    method._silu_and_mul_linear = fused


def test_the_reference_platform_keeps_two_ops_and_a_fusing_one_gets_the_gate_up_output() -> None:
    mlp = _mlp()
    assert not mlp.down_proj.fuses_silu_and_mul  # the CPU platform has no fused kernel: nothing changes
    x = torch.randn(3, 32)
    two_ops = mlp(x)
    calls: list[int] = []
    _fuse(mlp, calls)
    assert torch.equal(mlp(x), two_ops)
    assert calls == [2 * 48]


def test_a_down_projection_wrapped_by_lora_keeps_the_activation_apart() -> None:
    mlp = _mlp()
    x = torch.randn(3, 32)
    two_ops = mlp(x)
    calls: list[int] = []
    _fuse(mlp, calls)
    state = LoRAStepState(8, 2, torch.device("cpu"), pin=False)
    state.set_step(np.full(3, -1, dtype=np.int32), 3)
    mlp.down_proj = LoRALinear(mlp.down_proj, True, 2, 8, torch.float32, state)
    assert torch.allclose(mlp(x), two_ops, atol=1e-6)
    assert calls == []


def test_a_method_that_does_not_fuse_refuses_the_call() -> None:
    from infercore.quantization.base import QuantizationMethod

    class Plain(QuantizationMethod):
        def create_weights(self, layer: torch.nn.Module, spec: object) -> None:
            pass

        def apply(self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
            return x

    assert not Plain.fuses_silu_and_mul
    with pytest.raises(NotImplementedError, match="does not fuse"):
        Plain().apply_silu_and_mul(torch.nn.Linear(2, 2), torch.zeros(1, 4))
