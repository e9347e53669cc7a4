"""Top-k expert selection from router logits, with the renormalisations the HF configs use."""

from __future__ import annotations

import torch


def select_experts(router_logits: torch.Tensor, top_k: int, renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's ``top_k`` experts and their weights: softmax over all experts (in float32), keep
    the ``top_k`` largest; with ``renormalize`` (Mixtral always, Qwen3-MoE's ``norm_topk_prob``) the kept
    weights are scaled to sum to one.

    ``router_logits`` [T, E] → (weights float32 [T, top_k], expert ids int32 [T, top_k]).
    """
    num_experts = router_logits.shape[-1]
    if not 0 < top_k <= num_experts:
        raise ValueError(f"cannot route each token to {top_k} of {num_experts} experts; num_experts_per_tok must "
                         f"be between 1 and the number of experts")
    probs = torch.softmax(router_logits.float(), dim=-1)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids.to(torch.int32)
