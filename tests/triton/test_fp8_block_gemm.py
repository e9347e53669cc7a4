"""The block-scaled FP8 GEMM kernel against core's W8A8 reference, through Triton's interpreter."""

from __future__ import annotations

import pytest
import torch
from triton_cases import rel_err

from infercore.ops import fp8_math
from infercore_triton.fp8_block_gemm import (
    BlockGemmConfig,
    default_config,
    fp8_block_gemm,
    fp8_block_linear,
)
from infercore_triton.fp8_quant import quantize_groups


def _case(m: int, n: int, k: int, block: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    x, w = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g) * 0.1
    wq, ws = fp8_math.quantize_blockwise(w, block, block)
    return x, wq, ws, torch.randn(n, generator=g)


@pytest.mark.parametrize(("m", "n", "k"), [(1, 64, 64), (5, 96, 64), (40, 100, 80)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_kernel_matches_reference(m: int, n: int, k: int, with_bias: bool) -> None:
    # 100 rows and 80 columns leave partial 32x32 blocks at the edges; 40 rows span three 16-row tiles.
    x, wq, ws, bias = _case(m, n, k, 32)
    xq, xs = fp8_math.quantize_per_group(x, 32)
    out = fp8_block_gemm(xq, xs, wq, ws, 32, 32, bias if with_bias else None, torch.float32)
    ref = fp8_math.fp8_block_linear(x, wq, ws, 32, 32, bias if with_bias else None)
    assert out.shape == ref.shape == (m, n)
    assert rel_err(out, ref) < 1e-5


def test_bfloat16_output() -> None:
    x, wq, ws, _ = _case(7, 64, 128, 64)
    xq, xs = fp8_math.quantize_per_group(x.bfloat16(), 64)
    out = fp8_block_gemm(xq, xs, wq, ws, 64, 64, None, torch.bfloat16)
    assert out.dtype == torch.bfloat16
    assert rel_err(out, fp8_math.fp8_block_linear(x.bfloat16(), wq, ws, 64, 64)) < 1e-2


def test_op_without_fp8_tensor_cores_is_the_reference() -> None:
    x, wq, ws, bias = _case(3, 64, 64, 32)
    assert torch.equal(fp8_block_linear(x, wq, ws, 32, 32, bias), fp8_math.fp8_block_linear(x, wq, ws, 32, 32, bias))


@pytest.mark.parametrize(("m", "k", "group"), [(1, 64, 32), (6, 80, 32), (3, 48, 48)])
def test_activation_quantizer_matches_the_reference(m: int, k: int, group: int) -> None:
    # 80 columns leave a partial last group; a group as wide as the row is the per-token case.
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(k)) * torch.logspace(-2, 2, m).reshape(-1, 1)
    x[0, :group] = 0.0  # an all-zero group gets the smallest scale, not a NaN
    q, scale = quantize_groups(x, group)
    ref_q, ref_scale = fp8_math.quantize_per_group(x, group)
    assert q.dtype == ref_q.dtype and torch.allclose(scale, ref_scale, rtol=1e-6)
    ours, ref = q.float(), ref_q.float()
    # The interpreter's float32-to-fp8 cast loses the carry when a value rounds up to the next power of
    # two (125.8 becomes 64, not 128); the GPU's does not. Every other value must be the reference's.
    lost_carry = (ours * 2 == ref) & (torch.log2(ref.abs()) % 1 == 0)
    assert bool(((ours == ref) | lost_carry).all())
    assert int(lost_carry.sum()) < ref.numel() // 10


@pytest.mark.parametrize("config", [BlockGemmConfig(block_m=16, tile_n=16, split_k=2),
                                    BlockGemmConfig(block_m=16, tile_n=32, split_k=4, num_warps=2)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_split_k_and_narrow_tiles_match_the_reference(config: BlockGemmConfig, with_bias: bool) -> None:
    # Five scale groups over 4 splits leave the last split one group; 96 rows end in a partial tile.
    x, wq, ws, bias = _case(3, 96, 160, 32)
    xq, xs = fp8_math.quantize_per_group(x, 32)
    out = fp8_block_gemm(xq, xs, wq, ws, 32, 32, bias if with_bias else None, torch.float32, config)
    assert rel_err(out, fp8_math.fp8_block_linear(x, wq, ws, 32, 32, bias if with_bias else None)) < 1e-5


def test_default_config_fills_the_machine_at_decode_sizes() -> None:
    # Qwen3-8B's qkv projection at one row: 48 tiles of 128 columns would leave most of 132 SMs idle.
    cfg = default_config(1, 6144, 4096, 128, 128, 132)
    programs = (6144 // cfg.tile_n) * cfg.split_k
    assert programs >= 2 * 132 and cfg.tile_n >= 32
    assert default_config(256, 6144, 4096, 128, 128, 132).split_k == 1
    with pytest.raises(ValueError, match="divide"):
        x, wq, ws, _ = _case(2, 64, 64, 32)
        xq, xs = fp8_math.quantize_per_group(x, 32)
        fp8_block_gemm(xq, xs, wq, ws, 32, 32, None, torch.float32, BlockGemmConfig(block_m=16, tile_n=64))


def test_the_last_split_of_a_tile_sums_the_partials_and_resets_its_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    from infercore_triton import split_k_counters

    x, wq, ws, bias = _case(3, 96, 160, 32)
    xq, xs = fp8_math.quantize_per_group(x, 32)
    config = BlockGemmConfig(block_m=16, tile_n=16, split_k=4)
    ref = fp8_math.fp8_block_linear(x, wq, ws, 32, 32, bias)
    in_kernel = fp8_block_gemm(xq, xs, wq, ws, 32, 32, bias, torch.float32, config)
    counters = split_k_counters.tile_counters(x.device, 6)
    assert counters is not None and not counters.any()
    # Without counters (too many tiles, or asked to), a second launch sums the partials: the same numbers.
    monkeypatch.setenv(split_k_counters.REDUCE_ENV, "launch")
    assert split_k_counters.tile_counters(x.device, 6) is None
    monkeypatch.delenv(split_k_counters.REDUCE_ENV)
    monkeypatch.setattr(split_k_counters, "MAX_TILES", 0)
    assert split_k_counters.tile_counters(x.device, 6) is None
    launched = fp8_block_gemm(xq, xs, wq, ws, 32, 32, bias, torch.float32, config)
    assert rel_err(in_kernel, ref) < 1e-5 and torch.allclose(in_kernel, launched, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("static_input", [False, True])
def test_per_channel_weights_through_the_block_kernel(monkeypatch: pytest.MonkeyPatch, static_input: bool) -> None:
    # Small batches of per-channel (and per-tensor) FP8 weights may take the Triton kernel instead of
    # torch._scaled_mm: one scale per weight row, one per token (or one for all, static).
    from infercore_triton import fp8_scaled_mm

    g = torch.Generator().manual_seed(5)
    x, bias = torch.randn(5, 160, generator=g), torch.randn(48, generator=g)
    wq, ws = fp8_math.quantize_per_token(torch.randn(48, 160, generator=g) * 0.1)
    input_scale = (x.abs().max() / fp8_math.FP8_MAX).reshape(1) if static_input else None
    if static_input:
        xs = input_scale.reshape(1, 1).expand(5, 1)
        xq = (x / xs).clamp(-fp8_math.FP8_MAX, fp8_math.FP8_MAX).to(fp8_math.FP8_DTYPE)
    else:
        xq, xs = fp8_math.quantize_per_token(x)
    ref = fp8_math.fp8_linear(x, wq, ws.reshape(-1), bias, input_scale)
    config = BlockGemmConfig(block_m=16, tile_n=32, split_k=2)
    out = fp8_block_gemm(xq, xs, wq, ws.reshape(-1), 128, 32, bias, torch.float32, config, per_channel=True)
    assert rel_err(out, ref) < 1e-5
    monkeypatch.setattr(fp8_scaled_mm, "has_fp8_dot", lambda device: True)
    monkeypatch.setattr(fp8_scaled_mm, "channel_triton_max_m", lambda: 8)
    assert rel_err(fp8_scaled_mm._gemm(xq, xs, wq, ws.reshape(-1), bias, torch.float32), ref) < 1e-5
