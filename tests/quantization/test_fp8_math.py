"""The FP8 quantizers and W8A8 references every FP8 kernel is checked against."""

from __future__ import annotations

import pytest
import torch

from infercore.ops import fp8_math
from infercore.ops.fp8_math import FP8_DTYPE, FP8_MAX

#: e4m3 keeps 3 mantissa bits: a value rounds to within 2^-4 of itself (relative), plus subnormals.
E4M3_ROUNDING = 2**-4


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_per_token_scales_map_each_rows_largest_value_to_the_fp8_maximum() -> None:
    x = torch.randn(6, 40, generator=_gen()) * torch.tensor([1e-3, 1, 10, 100, 1e4, 0.5]).reshape(-1, 1)
    q, scale = fp8_math.quantize_per_token(x)
    assert q.dtype == FP8_DTYPE and scale.shape == (6, 1)
    assert torch.allclose(q.float().abs().amax(dim=1), torch.full((6,), FP8_MAX))
    error = (q.float() * scale - x).abs() / x.abs().amax(dim=1, keepdim=True)
    assert float(error.max()) <= E4M3_ROUNDING


def test_an_all_zero_row_quantizes_to_zeros_not_nan() -> None:
    q, scale = fp8_math.quantize_per_token(torch.zeros(2, 8))
    assert torch.equal(q.float(), torch.zeros(2, 8)) and torch.isfinite(scale).all()


def test_groups_and_blocks_cover_ragged_edges() -> None:
    x = torch.randn(3, 70, generator=_gen(1))
    q, scale = fp8_math.quantize_per_group(x, 32)
    assert q.shape == (3, 70) and scale.shape == (3, 3)
    per_element = scale.repeat_interleave(32, dim=1)[:, :70]
    assert float(((q.float() * per_element - x).abs() / per_element).max()) <= FP8_MAX * E4M3_ROUNDING
    w = torch.randn(50, 70, generator=_gen(2))
    wq, wscale = fp8_math.quantize_blockwise(w, 32, 32)
    assert wq.shape == (50, 70) and wscale.shape == (2, 3)
    deq = fp8_math.dequantize_blockwise(wq, wscale, 32, 32)
    assert float(((deq - w).abs() / w.abs().max()).max()) <= E4M3_ROUNDING
    assert float(wscale[1, 2]) == pytest.approx(float(w[32:, 64:].abs().max()) / FP8_MAX, rel=1e-6)


def test_w8a8_references_are_the_product_of_the_dequantized_operands() -> None:
    x, w, bias = torch.randn(4, 64, generator=_gen(3)), torch.randn(48, 64, generator=_gen(4)), torch.randn(48)
    wq, wscale = fp8_math.quantize_per_token(w)  # per output channel
    xq, xscale = fp8_math.quantize_per_token(x)
    expected = (xq.float() * xscale) @ (wq.float() * wscale).t() + bias
    assert torch.allclose(fp8_math.fp8_linear(x, wq, wscale.reshape(-1), bias), expected, atol=1e-5)
    bq, bscale = fp8_math.quantize_blockwise(w, 16, 32)
    gq, gscale = fp8_math.quantize_per_group(x, 32)
    expected = (gq.float() * gscale.repeat_interleave(32, dim=1)) @ fp8_math.dequantize_blockwise(bq, bscale, 16, 32).t()
    assert torch.allclose(fp8_math.fp8_block_linear(x, bq, bscale, 16, 32), expected, atol=1e-5)
    static = fp8_math.fp8_linear(x, wq, wscale.reshape(-1), None, torch.tensor([0.05]))
    xs = (x / 0.05).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE).float() * 0.05
    assert torch.allclose(static, xs @ (wq.float() * wscale).t(), atol=1e-5)
    assert fp8_math.fp8_linear(x.bfloat16().reshape(2, 2, 64), wq, wscale.reshape(-1)).shape == (2, 2, 48)
