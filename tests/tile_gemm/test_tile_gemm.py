"""The tile GEMM (through Triton's interpreter) against ``F.linear``: odd shapes that leave partial tiles in
every dimension, row-strided ``x``, both half dtypes, its refusals, and which products it takes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from infercore_triton import tile_gemm as tg

BOUND = 1e-2


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref.float()).abs().max() / ref.float().abs().max())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("m", "n", "k", "config"), [
    (17, 40, 72, tg.TileConfig(16, 32, 32)),
    (33, 96, 200, tg.TileConfig(32, 32, 64, num_stages=2)),
    (70, 64, 48, tg.TileConfig(64, 16, 16)),
])
def test_matches_f_linear_with_partial_tiles(dtype: torch.dtype, m: int, n: int, k: int,
                                             config: tg.TileConfig) -> None:
    gen = torch.Generator().manual_seed(m)
    wide = torch.randn(m, k + 9, generator=gen).to(dtype)
    x = wide[:, 5:5 + k]  # a column slice of a wider activation: rows strided
    w = torch.randn(n, k, generator=gen).to(dtype)
    out = tg.tile_gemm(x, w, config)
    assert out.shape == (m, n) and out.dtype == dtype
    assert _rel_err(out, F.linear(x.float(), w.float())) < BOUND


def test_refuses_what_it_cannot_multiply() -> None:
    x, w = torch.randn(20, 32).half(), torch.randn(16, 32).half()
    config = tg.TileConfig(16, 16, 16)
    with pytest.raises(ValueError, match="multiplies"):
        tg.tile_gemm(x, w[:, :16], config)
    with pytest.raises(ValueError, match="dtype"):
        tg.tile_gemm(x.float(), w.float(), config)
    with pytest.raises(ValueError, match="contiguous"):
        tg.tile_gemm(x, w.t().contiguous().t(), config)
    with pytest.raises(ValueError, match="power of two"):
        tg.TileConfig(48, 16, 16)
    with pytest.raises(ValueError, match="at least 16"):
        tg.TileConfig(8, 16, 16)
    with pytest.raises(ValueError, match="17 to 256"):
        tg.m_bucket(16)


def test_takes_only_tuned_shapes_of_cuda_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    config = tg.TileConfig(64, 32, 64)
    monkeypatch.setattr(tg, "TUNED", {(64, 16, 32): config})
    x, w = torch.randn(40, 32).bfloat16(), torch.randn(16, 32).bfloat16()
    assert tg.tuned_config(x, w) is None  # a CPU tensor
    cuda = torch.device("cuda")
    monkeypatch.setattr(torch.Tensor, "device", property(lambda self: cuda))
    assert tg.tuned_config(x, w) is config
    assert tg.tuned_config(x[:16], w) is None  # too few rows: the skinny GEMM's or cuBLAS's
    assert tg.tuned_config(torch.randn(200, 32).bfloat16(), w) is None  # bucket 256: not tuned
    assert tg.tuned_config(x, w, torch.randn(16).bfloat16()) is None  # bias
    assert tg.tuned_config(x.float(), w.float()) is None


def test_the_linear_op_routes_each_product_to_its_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    from infercore_triton import linear as linear_op
    from infercore_triton import skinny_gemm as sg

    calls: list[str] = []
    monkeypatch.setattr(sg, "_KERNEL_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(sg, "skinny_gemm", lambda x, w, b=None: calls.append("skinny") or F.linear(x, w, b))
    monkeypatch.setattr(tg, "tile_gemm", lambda x, w, config: calls.append("tile") or F.linear(x, w))
    monkeypatch.setattr(tg, "tuned_config", lambda x, w, b=None: tg.TileConfig(32, 32, 32) if x.shape[0] == 40 else None)
    w = torch.randn(16, 32).bfloat16()
    for m in (2, 40, 100):
        x = torch.randn(m, 32).bfloat16()
        assert torch.equal(linear_op.linear(x, w), F.linear(x, w))
    assert calls == ["skinny", "tile"]  # 100 rows of an untuned shape: F.linear
