"""The norm and SiLU kernels that quantize for the FP8 block-scaled linear, on the GPU at Qwen3-8B's widths,
against core's references (skipped without a GPU with FP8 tensor cores)."""

from __future__ import annotations

import pytest
import torch
from gpu_marks import requires_gpu
from triton_cases import rel_err

from infercore.ops import fp8_fused, fp8_math


def _has_fp8_tensor_cores() -> bool:
    return torch.cuda.is_available() and torch.version.hip is None and torch.cuda.get_device_capability() >= (8, 9)


pytestmark = [*requires_gpu, pytest.mark.skipif(not _has_fp8_tensor_cores(),
                                                reason="needs an NVIDIA GPU of compute capability 8.9+ (FP8 tensor cores)")]


def _close(ours: tuple[torch.Tensor, ...], ref: tuple[torch.Tensor, ...], group: int) -> None:
    # The kernels sum the squares in another order than torch: a value at a rounding edge may move one
    # bf16 ulp, and so one fp8 step. Everything else is the reference's, bit for bit.
    (q, scale), (ref_q, ref_scale) = ours[:2], ref[:2]
    assert q.dtype == fp8_math.FP8_DTYPE and q.shape == ref_q.shape and scale.shape == ref_scale.shape
    assert torch.allclose(scale, ref_scale, rtol=1e-2, atol=0)
    same = (q.float() == ref_q.float()).float().mean().item()
    assert same > 0.99, f"only {same:.4f} of the fp8 values are the reference's"
    k = q.shape[-1]
    assert rel_err(q.float() * scale.repeat_interleave(group, -1)[..., :k],
                   ref_q.float() * ref_scale.repeat_interleave(group, -1)[..., :k]) < 1e-2


@pytest.mark.parametrize("m", [1, 7, 300])
def test_norm_quant_at_8b_width(m: int) -> None:
    from infercore_triton.fp8_fused_quant import fused_add_rms_norm_quant, rms_norm_quant

    x, res = (torch.randn(m, 4096, device="cuda").bfloat16() for _ in range(2))
    w = torch.rand(4096, device="cuda").bfloat16() + 0.5
    _close(rms_norm_quant(x, w, 1e-6, 128), fp8_fused.rms_norm_quant(x, w, 1e-6, 128), 128)
    ours = fused_add_rms_norm_quant(x, res, w, 1e-6, 128)
    ref = fp8_fused.fused_add_rms_norm_quant(x, res, w, 1e-6, 128)
    assert torch.equal(ours[2], ref[2])
    _close(ours, ref, 128)


@pytest.mark.parametrize("m", [1, 300])
def test_silu_quant_at_8b_width(m: int) -> None:
    from infercore_triton.fp8_fused_quant import silu_and_mul_quant

    x = torch.randn(m, 2 * 12288, device="cuda").bfloat16() * 3
    _close(silu_and_mul_quant(x, 128), fp8_fused.silu_and_mul_quant(x, 128), 128)


def test_per_token_groups_for_the_channel_path() -> None:
    # A norm quantizing whole 4096-wide rows in its one program, and SiLU over 12288 columns per token likewise.
    # Then the row-wise scaled GEMM on the result.
    from infercore_triton.fp8_fused_quant import rms_norm_quant, silu_and_mul_quant
    from infercore_triton.fp8_scaled_mm import fp8_linear_quantized

    x = torch.randn(9, 4096, device="cuda").bfloat16()
    w = torch.rand(4096, device="cuda").bfloat16() + 0.5
    q, scale = rms_norm_quant(x, w, 1e-6, 4096)
    _close((q, scale), fp8_fused.rms_norm_quant(x, w, 1e-6, 4096), 4096)
    g = torch.randn(9, 2 * 12288, device="cuda").bfloat16()
    _close(silu_and_mul_quant(g, 12288), fp8_fused.silu_and_mul_quant(g, 12288), 12288)
    wq, ws = fp8_math.quantize_per_token(torch.randn(6144, 4096, device="cuda") * 0.02)
    out = fp8_linear_quantized(q, scale, wq, ws.reshape(-1), None, torch.bfloat16)
    ref = fp8_fused.fp8_linear_quantized(q, scale, wq, ws.reshape(-1), None, torch.bfloat16)
    assert out.dtype == torch.bfloat16 and rel_err(out, ref) < 1e-2


def test_the_cuda_platform_runs_the_fused_kernels() -> None:
    from infercore.ops import get_op
    from infercore_triton import fp8_block_gemm, fp8_fused_quant, fp8_scaled_mm

    assert get_op("rms_norm_quant") is fp8_fused_quant.rms_norm_quant
    assert get_op("silu_and_mul_quant") is fp8_fused_quant.silu_and_mul_quant
    assert get_op("fp8_block_linear_quantized") is fp8_block_gemm.fp8_block_linear_quantized
    assert get_op("fp8_linear_quantized") is fp8_scaled_mm.fp8_linear_quantized


@pytest.mark.parametrize(("m", "n", "k", "split"), [(1, 4096, 12288, 8), (16, 6144, 4096, 4), (64, 4096, 12288, 4)])
def test_split_k_summed_by_the_last_split_is_the_same_every_run(m: int, n: int, k: int, split: int) -> None:
    # The last split of each tile sums the partials in split order: any race shows as a run that differs.
    from infercore_triton.fp8_block_gemm import BlockGemmConfig, fp8_block_gemm
    from infercore_triton.fp8_quant import quantize_groups

    wq, ws = fp8_math.quantize_blockwise(torch.randn(n, k, device="cuda") * 0.02, 128, 128)
    xq, xs = quantize_groups(torch.randn(m, k, device="cuda").bfloat16(), 128)
    config = BlockGemmConfig(block_m=16 if m <= 16 else 64, tile_n=32, split_k=split)
    first = fp8_block_gemm(xq, xs, wq, ws, 128, 128, None, torch.bfloat16, config)
    runs = torch.stack([fp8_block_gemm(xq, xs, wq, ws, 128, 128, None, torch.bfloat16, config) for _ in range(200)])
    assert bool((runs == first).all()), "a split-K run differs from the first"
    ref = fp8_math.fp8_block_linear((xq.float() * xs.repeat_interleave(128, 1)).bfloat16(), wq, ws, 128, 128)
    assert rel_err(first, ref) < 2e-2


@pytest.mark.parametrize(("m", "n", "k"), [(1, 6144, 4096), (16, 4096, 12288), (64, 24576, 4096)])
def test_per_channel_weights_through_the_triton_kernel(m: int, n: int, k: int) -> None:
    from infercore_triton.fp8_block_gemm import fp8_block_gemm
    from infercore_triton.fp8_quant import quantize_groups

    wq, ws = fp8_math.quantize_per_token(torch.randn(n, k, device="cuda") * 0.02)
    x = torch.randn(m, k, device="cuda").bfloat16()
    xq, xs = quantize_groups(x, k)
    out = fp8_block_gemm(xq, xs, wq, ws.reshape(-1), 128, 128, None, torch.bfloat16, per_channel=True)
    assert rel_err(out, fp8_math.fp8_linear(x, wq, ws.reshape(-1))) < 1e-2
