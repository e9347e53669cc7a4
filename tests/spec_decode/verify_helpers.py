"""Verifying drafts in one call, and the distribution a target's parameters define, for the tests."""

from __future__ import annotations

import numpy as np
import torch

from infercore.sampling_params import SamplingParams
from infercore.spec_decode.position_metadata import positions_metadata
from infercore.spec_decode.rejection_sampler import RejectionSampler, VerifiedTokens

CPU = torch.device("cpu")


def verify(logits: torch.Tensor, params: list[SamplingParams], drafts: list[list[int]],
           draft_probs: torch.Tensor | None = None, outputs: list[list[int]] | None = None,
           sampler: RejectionSampler | None = None, seed: int = 0) -> VerifiedTokens:
    """Verify ``drafts`` (one list per row, any lengths) against ``logits`` [sum(len + 1), V]."""
    rows = len(params)
    width = max((len(d) for d in drafts), default=0)
    padded = torch.full((rows, width), -1, dtype=torch.int64)
    for row, tokens in enumerate(drafts):
        padded[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.int64)
    metadata = positions_metadata(params, [[] for _ in range(rows)], outputs or [[] for _ in range(rows)], drafts,
                                  logits.shape[1], CPU, seed_source=np.random.default_rng(seed))
    sampler = sampler or RejectionSampler()
    return sampler.verify(logits.clone(), metadata, padded, np.array([len(d) for d in drafts]), draft_probs)


def target_distribution(logits: torch.Tensor, temperature: float, top_k: int, top_p: float,
                        min_p: float = 0.0) -> torch.Tensor:
    """softmax(logits / T) without tokens less likely than min_p times the most likely, over the top-k
    tokens left, then the top-p nucleus (the smallest set of most likely tokens holding top_p),
    renormalised: written out independently of the sampler."""
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    order = probs.argsort(descending=True)
    kept = torch.zeros_like(probs, dtype=torch.bool)
    kept[order[:top_k]] = True
    kept &= probs >= min_p * probs.max()
    probs = torch.where(kept, probs, 0.0)
    probs = probs / probs.sum()
    sorted_probs = probs[order]
    inside = (sorted_probs.cumsum(0) - sorted_probs) < top_p
    nucleus = torch.zeros_like(kept)
    nucleus[order[inside]] = True
    probs = torch.where(nucleus & kept, probs, 0.0)
    return probs / probs.sum()


def total_variation(tokens: torch.Tensor, expected: torch.Tensor) -> float:
    """Total-variation distance between the empirical distribution of ``tokens`` and ``expected``."""
    counts = torch.bincount(tokens, minlength=expected.numel()).double()
    return 0.5 * float((counts / counts.sum() - expected).abs().sum())
