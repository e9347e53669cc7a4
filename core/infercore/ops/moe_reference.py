"""The ``fused_moe`` custom op in plain torch: the definition platform kernels are checked against."""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F


def routed_tokens(topk_weights: torch.Tensor, topk_ids: torch.Tensor,
                  num_experts: int) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """Each expert some token chose, in expert order, with the tokens routed to it (ascending) and their routing
    weights (float32): ``(expert, tokens, weights)``."""
    k = topk_ids.shape[1]
    flat_ids = topk_ids.reshape(-1).long()
    order = torch.argsort(flat_ids, stable=True)
    counts = torch.bincount(flat_ids, minlength=num_experts).tolist()
    token_of = order // k
    weight_of = topk_weights.reshape(-1)[order].float()
    start = 0
    for expert, count in enumerate(counts):
        if count:
            yield expert, token_of[start:start + count], weight_of[start:start + count]
        start += count


def fused_moe(hidden: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
              topk_ids: torch.Tensor) -> torch.Tensor:
    """Mixture of SwiGLU experts: ``sum_j topk_weights[t, j] * down_e(silu(gate_e(x)) * up_e(x))`` with
    ``e = topk_ids[t, j]``.

    ``hidden`` [T, H]; ``w13`` [E, 2I, H] (gate rows, then up rows); ``w2`` [E, H, I];
    ``topk_weights`` [T, k] (float32); ``topk_ids`` [T, k]. Returns [T, H] in ``hidden``'s dtype. Each
    expert runs once over the tokens routed to it; the weighted sum accumulates in float32.
    """
    out = torch.zeros(topk_ids.shape[0], hidden.shape[1], dtype=torch.float32, device=hidden.device)
    for expert, rows, weights in routed_tokens(topk_weights, topk_ids, w13.shape[0]):
        gate, up = F.linear(hidden[rows], w13[expert]).chunk(2, dim=-1)
        down = F.linear(F.silu(gate) * up, w2[expert])
        out.index_add_(0, rows, down.float() * weights[:, None])
    return out.to(hidden.dtype)
