"""The cuBLASLt path of block-scaled FP8 linears: the scales in the layouts cuBLASLt's block scaling reads (torch's
contract: 1x128 activation scales [M, K/128] with stride (1, M), M a multiple of 4; 128x128 weight scales, for a
weight operand [K, N], [K/128, N/128] with stride (1, K/128)), checked through an emulation of that contract against core's
reference; the switch; the probe; and the op's routing (the Triton kernels through the interpreter)."""

from __future__ import annotations

import logging

import pytest
import torch
import triton_interpreter
from triton.runtime import interpreter
from triton_cases import rel_err

from infercore.ops import fp8_math
from infercore_triton import fp8_block_cublas
from infercore_triton import fp8_block_gemm as fbg

BLOCK = fp8_block_cublas.BLOCK


def _emulated_scaled_mm(mat_a, mat_b, scale_a, recipe_a, scale_b, recipe_b, output_dtype=torch.bfloat16):  # noqa: ANN001, ANN202
    """torch's block-scaled ``scaled_mm`` as its contract reads the scales, refusing other layouts as cuBLASLt does."""
    m, k = mat_a.shape
    n = mat_b.shape[1]
    recipes = torch.nn.functional.ScalingType
    assert recipe_a == recipes.BlockWise1x128 and recipe_b == recipes.BlockWise128x128
    if scale_a.shape != (m, k // BLOCK) or scale_a.stride() != (1, m):
        raise RuntimeError(f"Invalid scaling configuration: scale_a {tuple(scale_a.shape)} {scale_a.stride()}")
    if m % fp8_block_cublas.ROW_ALIGN:  # as cuBLASLt's algorithm heuristic answers on an H100
        raise RuntimeError("CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasLtMatmulAlgoGetHeuristic`")
    if scale_b.shape != (k // BLOCK, n // BLOCK) or scale_b.stride() != (1, k // BLOCK):
        raise RuntimeError(f"Invalid scaling configuration: scale_b {tuple(scale_b.shape)} {scale_b.stride()}")
    a = mat_a.float() * scale_a.repeat_interleave(BLOCK, dim=1)
    b = mat_b.float() * scale_b.repeat_interleave(BLOCK, dim=0).repeat_interleave(BLOCK, dim=1)
    return (a @ b).to(output_dtype)


def _case(m: int, n: int, k: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(m * 31 + n)
    x = torch.randn(m, k, generator=g).bfloat16()
    wq, ws = fp8_math.quantize_blockwise(torch.randn(n, k, generator=g) * 0.05, BLOCK, BLOCK)
    return x, wq, ws, torch.randn(n, generator=g).bfloat16()


@pytest.fixture
def emulated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.nn.functional, "scaled_mm", _emulated_scaled_mm)


@pytest.mark.parametrize(("m", "n", "k"), [(1, 256, 512), (70, 384, 1024)])
def test_the_scales_reach_cublas_in_its_layouts_and_the_product_is_the_reference(emulated, m: int, n: int,
                                                                                   k: int) -> None:
    x, wq, ws, bias = _case(m, n, k)
    xq, xs = fp8_math.quantize_per_group(x, BLOCK)
    out = fp8_block_cublas.gemm(xq, xs, wq, ws, bias)
    ref = fp8_math.fp8_block_linear(x.float(), wq, ws, BLOCK, BLOCK, bias.float())
    assert out.dtype == torch.bfloat16 and out.shape == (m, n)
    assert rel_err(out.float(), ref) < 1e-2


def test_the_emulation_refuses_row_major_activation_scales(emulated) -> None:
    """The emulation holds the layout contract: the scales exactly as the quantizer writes them are refused."""
    x, wq, ws, _ = _case(8, 256, 512)
    xq, xs = fp8_math.quantize_per_group(x, BLOCK)
    recipes = torch.nn.functional.ScalingType
    with pytest.raises(RuntimeError, match="scale_a"):
        torch.nn.functional.scaled_mm(xq, wq.t(), xs, recipes.BlockWise1x128, ws.t(), recipes.BlockWise128x128)


def test_the_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(fp8_block_cublas.MIN_M_ENV, raising=False)
    assert fp8_block_cublas.min_m() == fp8_block_cublas.DEFAULT_MIN_M == 256
    monkeypatch.setenv(fp8_block_cublas.MIN_M_ENV, "64")
    assert fp8_block_cublas.min_m() == 64
    monkeypatch.setenv(fp8_block_cublas.MIN_M_ENV, "0")
    assert fp8_block_cublas.min_m() is None
    monkeypatch.setenv(fp8_block_cublas.MIN_M_ENV, "many")
    with pytest.raises(ValueError, match="whole number"):
        fp8_block_cublas.min_m()


def test_weights_cublas_cannot_take_as_stored_stay_on_the_triton_kernel() -> None:
    _, wq, _, _ = _case(1, 256, 512)
    assert not fp8_block_cublas.fits(wq, BLOCK, BLOCK, torch.bfloat16)  # a CPU tensor
    monkey = torch.empty((256, 640), dtype=wq.dtype)  # K/128 = 5: cuBLASLt would pad the scales
    assert not fp8_block_cublas.fits(monkey, BLOCK, BLOCK, torch.bfloat16)
    assert not fp8_block_cublas.fits(wq, 64, 64, torch.bfloat16)
    assert not fp8_block_cublas.fits(wq, BLOCK, BLOCK, torch.float16)


def test_the_probe_passes_a_correct_gemm_and_fails_a_wrong_or_refused_one(emulated, monkeypatch: pytest.MonkeyPatch,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    cpu = torch.device("cpu")
    assert fp8_block_cublas._probe(cpu)

    def untransposed(mat_a, mat_b, scale_a, recipe_a, scale_b, recipe_b, output_dtype=torch.bfloat16):  # noqa: ANN001, ANN202
        # Every block takes another block's scale (in the layout the contract wants), as a misread layout would.
        wrong = scale_b.flip(1).t().contiguous().t()
        return _emulated_scaled_mm(mat_a, mat_b, scale_a, recipe_a, wrong, recipe_b, output_dtype)

    monkeypatch.setattr(torch.nn.functional, "scaled_mm", untransposed)
    with caplog.at_level(logging.INFO, logger=fp8_block_cublas.__name__):
        assert not fp8_block_cublas._probe(cpu)
    assert "disagrees with the reference" in caplog.text

    def refused(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise RuntimeError("Invalid scaling configuration\nmore detail")

    monkeypatch.setattr(torch.nn.functional, "scaled_mm", refused)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=fp8_block_cublas.__name__):
        assert not fp8_block_cublas._probe(cpu)
    assert "not available here (RuntimeError: Invalid scaling configuration, at 64 rows)" in caplog.text


def test_row_counts_cublas_refuses_are_padded_and_the_padding_is_dropped(emulated) -> None:
    """cuBLASLt finds no algorithm for row counts off :data:`ROW_ALIGN` (the emulation refuses them too): such
    products run on zero-padded rows, and only the caller's rows come back."""
    x, wq, ws, _ = _case(3, 256, 512)
    xq, xs = fp8_math.quantize_per_group(x, BLOCK)
    recipes = torch.nn.functional.ScalingType
    scale_a = torch.empty_strided(xs.shape, (1, 3)).copy_(xs)
    with pytest.raises(RuntimeError, match="NOT_SUPPORTED"):
        torch.nn.functional.scaled_mm(xq, wq.t(), scale_a, recipes.BlockWise1x128, ws.t().contiguous().t(),
                                      recipes.BlockWise128x128)
    out = fp8_block_cublas.gemm(xq, xs, wq, ws)
    assert out.shape == (3, 256) and out.is_contiguous()
    assert rel_err(out.float(), fp8_math.fp8_block_linear(x.float(), wq, ws, BLOCK, BLOCK)) < 1e-2


def test_the_probe_fails_where_a_padded_row_count_is_still_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's odd row count goes through the padding: a library that wanted more alignment than
    :data:`ROW_ALIGN` fails it, and the Triton kernel keeps every size."""
    def rows_of_eight_only(mat_a, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if mat_a.shape[0] % 8:
            raise RuntimeError("CUDA error: CUBLAS_STATUS_NOT_SUPPORTED")
        return _emulated_scaled_mm(mat_a, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_mm", rows_of_eight_only)
    assert not fp8_block_cublas._probe(torch.device("cpu"))


def test_the_op_routes_from_the_threshold_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """``fp8_block_linear`` and its quantized twin send a GEMM to cuBLASLt where ``serves`` says so (the activation
    quantized by the Triton quantizer first), and to the Triton kernel otherwise; same products either way."""
    calls: list[int] = []
    monkeypatch.setattr(torch.nn.functional, "scaled_mm", _emulated_scaled_mm)
    fp8_block_cublas_gemm = fp8_block_cublas.gemm

    def cublas(xq, xs, weight, weight_scale_inv, bias=None):  # noqa: ANN001, ANN202
        calls.append(xq.shape[0])
        return fp8_block_cublas_gemm(xq, xs, weight, weight_scale_inv, bias)

    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_fp_to_fp", triton_interpreter.fp8_rounds_to_nearest_even)
    monkeypatch.setattr(fbg, "has_fp8_dot", lambda device: True)
    monkeypatch.setattr(fp8_block_cublas, "gemm", cublas)
    monkeypatch.setattr(fp8_block_cublas, "fits", lambda *args: True)
    monkeypatch.setattr(fp8_block_cublas, "available", lambda device: True)
    monkeypatch.setenv(fp8_block_cublas.MIN_M_ENV, "4")
    for m in (3, 4):
        x, wq, ws, bias = _case(m, 256, 256)
        ref = fp8_math.fp8_block_linear(x.float(), wq, ws, BLOCK, BLOCK, bias.float())
        assert rel_err(fbg.fp8_block_linear(x, wq, ws, BLOCK, BLOCK, bias).float(), ref) < 1e-2
        xq, xs = fp8_math.quantize_per_group(x, BLOCK)
        out = fbg.fp8_block_linear_quantized(xq, xs, wq, ws, BLOCK, BLOCK, bias, torch.bfloat16)
        assert rel_err(out.float(), ref) < 1e-2
    assert calls == [4, 4]
