"""Activation quantization fused into the norm and the SiLU in front of FP8 block-scaled linears: the fused
references are the unfused ops run in turn, and a model gives the same numbers either way."""

from __future__ import annotations

import pytest
import torch

from infercore import LLM, SamplingParams
from infercore.layers import RMSNorm, SiluAndMul
from infercore.ops import fp8_fused, fp8_math, get_op
from infercore.quantization.activation import ActivationQuant, QuantizedActivation, input_quant_of
from infercore.quantization.fp8_methods import Fp8BlockLinearMethod, Fp8ChannelLinearMethod
from infercore.quantization.unquantized import UnquantizedLinearMethod

ENGINE = {"dtype": "float32", "max_model_len": 256, "num_gpu_blocks_override": 64, "max_num_seqs": 8,
          "cpu_threads": 1}
PROMPTS = ["hello", "The engine cache block request server stream json tool call"]


def _same(a: tuple[torch.Tensor, ...], b: tuple[torch.Tensor, ...]) -> bool:
    return len(a) == len(b) and all(x.dtype == y.dtype and torch.equal(x.float(), y.float()) for x, y in zip(a, b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_references_are_the_unfused_ops_in_turn(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    x, res = torch.randn(2, 3, 80, generator=g).to(dtype), torch.randn(2, 3, 80, generator=g).to(dtype)
    w = torch.randn(80, generator=g).to(dtype)

    def per_group(y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q, s = fp8_math.quantize_per_group(y.reshape(-1, y.shape[-1]), 32)
        return q.view(y.shape), s.view(*y.shape[:-1], -1)

    assert _same(fp8_fused.rms_norm_quant(x, w, 1e-6, 32), per_group(get_op("rms_norm")(x, w, 1e-6)))
    normed, new_res = get_op("fused_add_rms_norm")(x, res, w, 1e-6)
    assert _same(fp8_fused.fused_add_rms_norm_quant(x, res, w, 1e-6, 32), (*per_group(normed), new_res))
    assert _same(fp8_fused.silu_and_mul_quant(x, 32), per_group(get_op("silu_and_mul")(x)))
    # The GEMM on the quantized activation is fp8_block_linear on the activation it stands for.
    y = torch.randn(5, 64, generator=g).to(dtype)
    wq, ws = fp8_math.quantize_blockwise(torch.randn(96, 64, generator=g), 32, 32)
    bias = torch.randn(96, generator=g).to(dtype)
    q, s = fp8_math.quantize_per_group(y, 32)
    ours = fp8_fused.fp8_block_linear_quantized(q, s, wq, ws, 32, 32, bias, dtype)
    assert torch.equal(ours, fp8_math.fp8_block_linear(y, wq, ws, 32, 32, bias))
    wc, wcs = fp8_math.quantize_per_token(torch.randn(96, 64, generator=g))
    q, s = fp8_math.quantize_per_token(y)
    ours = fp8_fused.fp8_linear_quantized(q, s, wc, wcs.reshape(-1), bias, dtype)
    assert torch.equal(ours, fp8_math.fp8_linear(y, wc, wcs.reshape(-1), bias))


def test_layers_quantize_when_asked() -> None:
    norm, act = RMSNorm(64), SiluAndMul()
    x, res = torch.randn(4, 64), torch.randn(4, 64)
    out, new_res = norm(x, res, quant=ActivationQuant(32))
    assert isinstance(out, QuantizedActivation) and out.shape == x.shape and out.scales.shape == (4, 2)
    assert out.dtype == torch.float32 and torch.equal(new_res, x + res)
    assert isinstance(norm(x, quant=ActivationQuant(64)), QuantizedActivation)
    assert isinstance(norm(x), torch.Tensor)
    gated = act(torch.randn(4, 128), quant=ActivationQuant(32))
    assert isinstance(gated, QuantizedActivation) and gated.rows()[1].shape == (4, 2)


def test_which_methods_take_quantized_input() -> None:
    block = Fp8BlockLinearMethod(128, 128)
    assert block.input_quantization(torch.nn.Module()) == ActivationQuant(128)
    layer = torch.nn.Module()
    layer.input_size = 4096
    # Per token: one group over the layer's whole input; a static input scale is applied by the GEMM.
    assert Fp8ChannelLinearMethod(True, static_input=False).input_quantization(layer) == ActivationQuant(4096)
    assert Fp8ChannelLinearMethod(False, static_input=True).input_quantization(layer) is None
    assert UnquantizedLinearMethod().input_quantization(torch.nn.Module()) is None
    assert input_quant_of(torch.nn.Linear(2, 2)) is None  # no input_quant: takes the tensor


@pytest.mark.parametrize(("scheme", "method"), [("block", Fp8BlockLinearMethod), ("channel", Fp8ChannelLinearMethod)])
def test_an_fp8_model_gives_the_same_numbers_fused_or_not(fp8_pair, monkeypatch: pytest.MonkeyPatch, scheme: str,
                                                          method: type) -> None:
    quantized, _ = fp8_pair(scheme)
    inputs: list[bool] = []
    apply = method.apply

    def recording(self, layer, x, bias=None):  # noqa: ANN001, ANN202
        inputs.append(isinstance(x, QuantizedActivation))
        return apply(self, layer, x, bias)

    def generate() -> list:
        llm = LLM(model=str(quantized), **ENGINE)
        params = SamplingParams(temperature=0, ignore_eos=True, max_tokens=8, logprobs=3)
        return llm.generate(PROMPTS, params, use_tqdm=False)

    monkeypatch.setattr(method, "apply", recording)
    fused = generate()
    # qkv, gate/up and down take the norm's and the SiLU's quantized output; o_proj quantizes its own.
    assert inputs and 0.5 < sum(inputs) / len(inputs) < 1.0
    monkeypatch.setattr(method, "input_quantization", lambda self, layer: None)
    inputs.clear()
    unfused = generate()
    assert inputs and not any(inputs)
    for a, b in zip(fused, unfused):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
        for pa, pb in zip(a.outputs[0].logprobs, b.outputs[0].logprobs):
            assert {t: lp.logprob for t, lp in pa.items()} == {t: lp.logprob for t, lp in pb.items()}
