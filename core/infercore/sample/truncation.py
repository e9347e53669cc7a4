"""Cutting the distribution's tail before sampling: min-p, top-k and top-p.

Top-k and top-p look only at the ``C`` most likely tokens found by ``torch.topk`` (``C`` is the
largest top-k in the batch, or at least 1024 when a row has top-p). A top-p row whose ``C`` tokens
already hold ``top_p`` of the probability has its whole nucleus among them; only the rows where
that fails pay for a full sort. When every row fits, sampling runs on the [B, C] candidates alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infercore.sample.transfer import to_device
from infercore.sampling_params import SamplingParams

_TOP_P_CANDIDATES = 1024


def apply_min_p(logits: torch.Tensor, margin: torch.Tensor) -> None:
    """Forbid, in place, tokens whose logit is more than ``-margin`` [B, 1] below the row's largest.

    With ``margin = temperature * log(min_p)`` this is min-p on the tempered distribution (tokens
    less likely than ``min_p`` times the most likely one), applied before the temperature: the
    common path divides by the temperature inside ``gumbel_argmax``.
    """
    threshold = logits.amax(dim=-1, keepdim=True) + margin
    logits.masked_fill_(logits < threshold, float("-inf"))


@dataclass
class Candidates:
    """The tokens that can still be sampled: their logits ([B, C], -inf where cut) and their ids."""

    logits: torch.Tensor
    token_ids: torch.Tensor


@dataclass
class TopKTopP:
    """Per-row top-k (0: off) and top-p (1: off) for a batch where some row uses either."""

    top_k: torch.Tensor
    top_p: torch.Tensor
    max_top_k: int
    any_top_p: bool

    @classmethod
    def build(
        cls, params: list[SamplingParams], greedy: list[bool], vocab_size: int, device: torch.device
    ) -> TopKTopP | None:
        """None when no sampled row restricts its tokens; greedy rows get top-k 1 (their draw is unused)."""
        top_k = [1 if g else (p.top_k if 0 < p.top_k < vocab_size else 0) for p, g in zip(params, greedy)]
        top_p = [1.0 if g else p.top_p for p, g in zip(params, greedy)]
        any_top_p = any(p < 1 for p in top_p)
        if not any_top_p and not any(k > 0 and not g for k, g in zip(top_k, greedy)):
            return None
        return cls(
            top_k=to_device(top_k, torch.int64, device),
            top_p=to_device(top_p, torch.float32, device),
            max_top_k=max(top_k),
            any_top_p=any_top_p,
        )

    def apply(self, logits: torch.Tensor) -> Candidates | None:
        """Cut each row's tail: returns the candidates when all rows fit in them, else masks ``logits``
        [B, V] in place and returns None."""
        vocab_size = logits.shape[1]
        width = min(vocab_size, max(self.max_top_k, _TOP_P_CANDIDATES if self.any_top_p else 1))
        values, token_ids = logits.topk(width, dim=-1)
        by_k = self.top_k > 0
        keep = _positions(width, logits.device) < torch.where(by_k, self.top_k, width).unsqueeze(1)
        fits = by_k
        if self.any_top_p:
            in_k = values.masked_fill(~keep, float("-inf"))
            lse = torch.where(by_k, in_k.logsumexp(dim=-1), logits.logsumexp(dim=-1))
            probs = (in_k - lse.unsqueeze(1)).exp()
            keep &= _inside_nucleus(probs, self.top_p)
            fits = by_k | (probs.sum(dim=-1) >= self.top_p)
        threshold = values.gather(1, keep.sum(dim=-1, keepdim=True).clamp_min(1) - 1)
        if bool(fits.all()):
            return Candidates(values.masked_fill_(values < threshold, float("-inf")), token_ids)
        threshold.masked_fill_(~fits.unsqueeze(1), float("-inf"))
        overflow = (~fits & (self.top_p < 1)).nonzero().squeeze(1)
        if overflow.numel():
            threshold[overflow] = _sorted_threshold(logits[overflow], self.top_k[overflow], self.top_p[overflow])
        logits.masked_fill_(logits < threshold, float("-inf"))
        return None


def _positions(width: int, device: torch.device) -> torch.Tensor:
    return torch.arange(width, device=device).unsqueeze(0)


def _inside_nucleus(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Tokens (sorted most likely first) whose more likely tokens hold less than ``top_p`` in total."""
    return (probs.cumsum(dim=-1) - probs) < top_p.unsqueeze(1)


def _sorted_threshold(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """The smallest kept logit of each row, by a full sort (rows whose nucleus is wide)."""
    vocab_size = logits.shape[1]
    values = logits.sort(dim=-1, descending=True).values
    keep = _positions(vocab_size, logits.device) < torch.where(top_k > 0, top_k, vocab_size).unsqueeze(1)
    probs = values.masked_fill(~keep, float("-inf")).softmax(dim=-1)
    keep &= _inside_nucleus(probs, top_p)
    return values.gather(1, keep.sum(dim=-1, keepdim=True).clamp_min(1) - 1)
