"""The ``fused_moe`` reference op against a dense per-token computation, and the op's registration."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from infercore.ops import get_op
from infercore.ops.moe_reference import fused_moe


def dense_moe(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, weights: torch.Tensor,
              ids: torch.Tensor) -> torch.Tensor:
    """Token by token, slot by slot: the definition with no batching at all."""
    out = torch.zeros_like(x, dtype=torch.float64)
    inter = w2.shape[2]
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            gate, up = w13[e, :inter].double() @ x[t].double(), w13[e, inter:].double() @ x[t].double()
            out[t] += float(weights[t, j]) * (w2[e].double() @ (F.silu(gate) * up))
    return out


def random_case(tokens: int, hidden: int, inter: int, experts: int, top_k: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=gen)
    w13 = torch.randn(experts, 2 * inter, hidden, generator=gen) / hidden**0.5
    w2 = torch.randn(experts, hidden, inter, generator=gen) / inter**0.5
    ids = torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(tokens)]).to(torch.int32)
    weights = torch.rand(tokens, top_k, generator=gen)
    return x, w13, w2, weights, ids


def test_reference_matches_dense_definition() -> None:
    x, w13, w2, weights, ids = random_case(tokens=13, hidden=24, inter=16, experts=6, top_k=2)
    torch.testing.assert_close(fused_moe(x, w13, w2, weights, ids).double(), dense_moe(x, w13, w2, weights, ids),
                               rtol=1e-5, atol=1e-5)


def test_reference_skips_unused_experts_and_keeps_dtype() -> None:
    x, w13, w2, weights, ids = random_case(tokens=4, hidden=8, inter=8, experts=5, top_k=1)
    ids.fill_(3)
    out = fused_moe(x.bfloat16(), w13.bfloat16(), w2.bfloat16(), weights, ids)
    assert out.dtype == torch.bfloat16 and out.shape == (4, 8)
    expected = dense_moe(x.bfloat16().float(), w13.bfloat16().float(), w2.bfloat16().float(), weights, ids)
    torch.testing.assert_close(out.double(), expected, rtol=2e-2, atol=2e-2)


def test_fused_moe_is_a_registered_custom_op() -> None:
    assert get_op("fused_moe") is fused_moe
