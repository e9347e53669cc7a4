"""The CPU platform's GEMM (custom op ``linear``): float32 through oneDNN, everything else F.linear."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from infercore.layers.linear import ColumnParallelLinear, RowParallelLinear
from infercore.ops import get_op
from infercore.platforms import current_platform
from infercore_cpu import linear as cpu_linear


def _float64_reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    return F.linear(x.double(), w.double(), None if b is None else b.double())


@pytest.mark.parametrize("shape", [(1, 48), (37, 48), (3, 5, 48)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_float32_matches_float64_to_float32_precision(shape, with_bias) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g)
    w = torch.randn(80, 48, generator=g)
    b = torch.randn(80, generator=g) if with_bias else None
    out = cpu_linear.linear(x, w, b)
    ref = _float64_reference(x, w, b)
    assert out.dtype == torch.float32 and out.shape == ref.shape
    assert ((out.double() - ref).abs().max() / ref.abs().max()).item() < 1e-5


def test_strided_input_and_empty_batch() -> None:
    g = torch.Generator().manual_seed(1)
    w = torch.randn(16, 8, generator=g)
    x = torch.randn(8, 6, generator=g).t()  # [6, 8], not contiguous
    assert torch.allclose(cpu_linear.linear(x, w), F.linear(x, w), rtol=1e-5, atol=1e-5)
    empty = torch.empty(0, 8)
    assert cpu_linear.linear(empty, w).shape == (0, 16)


def test_other_dtypes_take_f_linear_exactly() -> None:
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 32, generator=g).bfloat16()
    w = torch.randn(8, 32, generator=g).bfloat16()
    assert torch.equal(cpu_linear.linear(x, w), F.linear(x, w))


@pytest.mark.skipif(current_platform().name != "cpu",
                    reason="a GPU platform is the current one here, so layers take its GEMM, not the CPU plugin's")
def test_layers_use_the_platform_gemm() -> None:
    op = get_op("linear")
    assert op is cpu_linear.linear  # the CPU plugin's registration wins over the reference on this platform
    col, row = ColumnParallelLinear(8, 16, bias=True), RowParallelLinear(16, 8)
    assert col.quant_method._linear is op and row.quant_method._linear is op
    for layer in (col, row):
        for p in layer.parameters():
            p.data.normal_(generator=torch.Generator().manual_seed(3))
    x = torch.randn(5, 8)
    y = row(col(x))
    ref = F.linear(F.linear(x, col.weight, col.bias), row.weight)
    assert torch.allclose(y, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not cpu_linear._ONEDNN, reason="oneDNN's float32 linear is not available on this CPU")
def test_packed_weights_give_the_plain_product_and_follow_updates(monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator().manual_seed(4)
    w, b = torch.randn(96, 64, generator=g), torch.randn(96, generator=g)
    for rows in (1, 5, 64, 300):
        x = torch.randn(rows, 64, generator=g)
        ref = _float64_reference(x, w, b)
        assert ((cpu_linear.linear(x, w, b).double() - ref).abs().max() / ref.abs().max()).item() < 1e-5
    assert cpu_linear.packed_weight(w) is not w and cpu_linear.packed_weight(w).is_mkldnn
    x = torch.randn(3, 64, generator=g)
    w.mul_(2)  # an in-place update bumps the version: packed again
    torch.testing.assert_close(cpu_linear.linear(x, w), F.linear(x, w), rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(cpu_linear, "PACKED_BUDGET_BYTES", 0)
    other = torch.randn(16, 64, generator=g)
    assert cpu_linear.packed_weight(other) is other  # over the budget: the plain weight
