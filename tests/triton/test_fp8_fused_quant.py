"""The norm and SiLU kernels that quantize their output for the FP8 block-scaled linear, against core's
references (the unfused ops, then ``quantize_per_group``), through Triton's interpreter; and the GEMM on
their output."""

from __future__ import annotations

import pytest
import torch
import triton_interpreter
from triton.runtime import interpreter
from triton_cases import rel_err

from infercore.ops import fp8_fused, fp8_math
from infercore_triton.fp8_block_gemm import BlockGemmConfig, fp8_block_gemm
from infercore_triton.fp8_fused_quant import (
    fused_group,
    norm_quant,
    rms_norm_quant,
    silu_and_mul_quant,
    silu_quant,
)

DTYPES = [torch.float32, torch.bfloat16]
#: The interpreter rounds float32 to bfloat16 by truncation, and sums in another order than torch: a value
#: near a rounding edge may land one fp8 step away. Compared dequantized, as the GEMM reads them.
BOUND = {torch.float32: 1e-3, torch.bfloat16: 2e-2}


@pytest.fixture(autouse=True)
def _interpreter_rounds_to_nearest_even(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_fp_to_fp",
                        triton_interpreter.fp8_rounds_to_nearest_even)


def _dequant(q: torch.Tensor, scale: torch.Tensor, group: int) -> torch.Tensor:
    k = q.shape[-1]
    return q.float() * scale.repeat_interleave(group, dim=-1)[..., :k]


def _check(ours: tuple[torch.Tensor, torch.Tensor], ref: tuple[torch.Tensor, torch.Tensor], group: int,
           dtype: torch.dtype) -> None:
    (q, scale), (ref_q, ref_scale) = ours, ref
    assert q.dtype == fp8_math.FP8_DTYPE and scale.dtype == torch.float32
    assert q.shape == ref_q.shape and scale.shape == ref_scale.shape
    assert torch.allclose(scale, ref_scale, rtol=BOUND[dtype], atol=0)
    assert rel_err(_dequant(q, scale, group), _dequant(ref_q, ref_scale, group)) < BOUND[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("hidden", "group"), [(64, 32), (80, 32), (48, 128)])
def test_rms_norm_quant(dtype: torch.dtype, hidden: int, group: int) -> None:
    # 80 columns end in a partial group; a group wider than the row is one scale per token.
    g = torch.Generator().manual_seed(hidden)
    x = (torch.randn(2, 3, hidden, generator=g) * torch.logspace(-2, 2, 3).reshape(1, 3, 1)).to(dtype)
    weight = torch.randn(hidden, generator=g).to(dtype)
    q, scale, residual = norm_quant(x, None, weight, 1e-6, group)
    assert residual is None and q.shape == x.shape
    _check((q, scale), fp8_fused.rms_norm_quant(x, weight, 1e-6, group), group, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_add_rms_norm_quant(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(1)
    x, residual = torch.randn(5, 96, generator=g).to(dtype), torch.randn(5, 96, generator=g).to(dtype)
    weight = torch.randn(96, generator=g).to(dtype)
    before = residual.clone()
    q, scale, new_residual = norm_quant(x, residual, weight, 1e-5, 32)
    ref_q, ref_scale, ref_residual = fp8_fused.fused_add_rms_norm_quant(x, before, weight, 1e-5, 32)
    assert rel_err(new_residual, ref_residual) < (1e-2 if dtype == torch.bfloat16 else 1e-12)
    assert torch.equal(residual, before)
    _check((q, scale), (ref_q, ref_scale), 32, dtype)


def test_an_all_zero_group_gets_the_smallest_scale() -> None:
    x = torch.randn(2, 64)
    weight = torch.ones(64)
    weight[:32] = 0.0
    q, scale, _ = norm_quant(x, None, weight, 1e-6, 32)
    assert torch.all(scale[:, 0] == fp8_math.MIN_SCALE) and not torch.isnan(q.float()).any()
    assert torch.all(q[:, :32].float() == 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("inter", "group"), [(96, 32), (80, 16), (2100, 128)])
def test_silu_and_mul_quant(dtype: torch.dtype, inter: int, group: int) -> None:
    # 2100 columns take three programs of 1024 per row, the last one holding a partial group.
    x = torch.randn(3, 2 * inter, generator=torch.Generator().manual_seed(inter)).to(dtype) * 3
    _check(silu_quant(x, group), fp8_fused.silu_and_mul_quant(x, group), group, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_per_token_silu_takes_a_whole_row_in_one_program(dtype: torch.dtype) -> None:
    # Per token over a row wider than SILU_BLOCK: one program a row, the very numbers of the unfused kernels
    # (SiLU, then the quantizer) that these rows took before.
    from infercore_triton.activation import silu_and_mul
    from infercore_triton.fp8_fused_quant import _unfused

    x = torch.randn(3, 2 * 2100, generator=torch.Generator().manual_seed(2100)).to(dtype) * 3
    (q, scale), (ref_q, ref_scale) = silu_quant(x, 2100), _unfused(silu_and_mul(x), 2100)
    assert scale.shape == (3, 1) and torch.equal(scale, ref_scale) and torch.equal(q.float(), ref_q.float())


def test_groups_the_kernels_cannot_tile_take_the_unfused_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    # A group of 96 columns is no power of two: the norm, then Triton's quantizer, as a GPU would run them.
    from infercore_triton import fp8_fused_quant

    monkeypatch.setattr(fp8_fused_quant, "has_fp8_dot", lambda device: True)
    g = torch.Generator().manual_seed(3)
    x, res, w = torch.randn(3, 192, generator=g), torch.randn(3, 192, generator=g), torch.randn(192, generator=g)
    _check(fp8_fused_quant.rms_norm_quant(x, w, 1e-6, 96), fp8_fused.rms_norm_quant(x, w, 1e-6, 96), 96,
           torch.float32)
    ours = fp8_fused_quant.fused_add_rms_norm_quant(x, res, w, 1e-6, 96)
    ref = fp8_fused.fused_add_rms_norm_quant(x, res, w, 1e-6, 96)
    assert torch.allclose(ours[2], ref[2])
    _check(ours[:2], ref[:2], 96, torch.float32)
    _check(fp8_fused_quant.silu_and_mul_quant(x, 96), fp8_fused.silu_and_mul_quant(x, 96), 96, torch.float32)


def test_groups_the_kernels_cannot_tile_run_the_reference() -> None:
    assert fused_group(128, 4096, 65536) == 128 and fused_group(4096, 4096, 65536) == 4096
    assert fused_group(96, 4096, 65536) is None and fused_group(12288, 12288, 1024) is None
    assert fused_group(12288, 12288, 65536) == 16384  # per token over the 8B shape's SiLU: one program a row
    assert fused_group(5000, 48, 1024) == 64  # one group per row, held in a power-of-two block
    with pytest.raises(ValueError, match="power of two"):
        silu_quant(torch.randn(2, 384), 96)
    # On the CPU (no FP8 tensor cores) the ops are the references.
    x, w = torch.randn(3, 64), torch.randn(64)
    for ours, ref in ((rms_norm_quant(x, w, 1e-6, 32), fp8_fused.rms_norm_quant(x, w, 1e-6, 32)),
                      (silu_and_mul_quant(x, 16), fp8_fused.silu_and_mul_quant(x, 16))):
        assert all(torch.equal(a.float(), b.float()) for a, b in zip(ours, ref))


@pytest.mark.parametrize("config", [None, BlockGemmConfig(block_m=128, tile_n=32, num_warps=8, num_stages=4)])
def test_gemm_on_the_fused_output_is_the_unfused_linear(config: BlockGemmConfig | None) -> None:
    # A norm quantizing for a 32x32 block-scaled weight, then the GEMM on its values and scales: the
    # reference's norm followed by fp8_block_linear (which quantizes the normed activation itself).
    g = torch.Generator().manual_seed(7)
    x, norm_w = torch.randn(5, 64, generator=g), torch.randn(64, generator=g)
    wq, ws = fp8_math.quantize_blockwise(torch.randn(96, 64, generator=g) * 0.1, 32, 32)
    bias = torch.randn(96, generator=g)
    q, scale, _ = norm_quant(x, None, norm_w, 1e-6, 32)
    out = fp8_block_gemm(q, scale, wq, ws, 32, 32, bias, torch.float32, config)
    from infercore.ops.reference import rms_norm

    ref = fp8_math.fp8_block_linear(rms_norm(x, norm_w, 1e-6), wq, ws, 32, 32, bias)
    assert rel_err(out, ref) < 1e-3
