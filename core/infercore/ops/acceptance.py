"""``accept_drafts``: how many of each row's draft tokens the target model accepts (a custom op).

Row ``b`` accepts its drafts from the first on, while each passes its test, and stops at the first
that fails or at ``num_drafts[b]``. A greedy row's draft passes when it is the target's argmax at its
position; a sampled row's draft ``d`` passes when ``u * q(d) < p(d)``, with ``u`` uniform in [0, 1):
with probability ``min(1, p(d) / q(d))``, the test of speculative sampling that keeps the output
distribution the target's (a rejected position then draws from ``max(0, p - q)``, normalised; see
``infercore.spec_decode.rejection_sampler``). An n-gram draft is a point mass, ``q(d) = 1``.

The op sees only per-draft scalars, so platform kernels and this reference agree bit for bit: the one
float operation, ``u * q``, is a single float32 multiply compared with ``p``.
"""

from __future__ import annotations

import torch


def accept_drafts(draft_token_ids: torch.Tensor, num_drafts: torch.Tensor, greedy: torch.Tensor,
                  target_argmax: torch.Tensor, target_probs: torch.Tensor, draft_probs: torch.Tensor,
                  uniforms: torch.Tensor) -> torch.Tensor:
    """[B] int64: the number of leading drafts each row accepts, in ``0..num_drafts[b]``.

    ``draft_token_ids`` [B, K] int64 (entries past ``num_drafts[b]`` [B] int64 are ignored); ``greedy``
    [B] bool; per draft position [B, K]: ``target_argmax`` int64, the target's argmax there (read on
    greedy rows), ``target_probs`` float32, the target's probability of the draft token, ``draft_probs``
    float32, the draft's, and ``uniforms`` float32 in [0, 1) (these three read on sampled rows).
    """
    width = draft_token_ids.shape[1]
    sampled_ok = uniforms * draft_probs < target_probs
    ok = torch.where(greedy.unsqueeze(1), draft_token_ids == target_argmax, sampled_ok)
    ok &= torch.arange(width, device=ok.device) < num_drafts.unsqueeze(1)
    return ok.long().cumprod(dim=1).sum(dim=1)
