"""Cutting the distribution's tail before sampling: min-p, top-k and top-p, as thresholds on the logits.

Each cut is a threshold on a row's logits: every token at least as likely as the least likely kept
token stays, so ties at the edge never depend on the order ``torch.topk`` returns them in, and the
tokens left are sampled by the same seeded ``gumbel_argmax`` draw as rows without a cut. Min-p masks
the logits; the top-k/top-p threshold goes to ``gumbel_argmax``, which treats logits below it as
-inf while it draws, so the cut costs no pass of its own over the logits.

Top-k and top-p look only at the ``C`` most likely tokens, found by :func:`top_values` (``C`` is the
largest top-k in the batch, or at least 1024 when a row has top-p without top-k). A row with top-k
(and top-p inside its top-k) has its cut among them. A top-p-only row whose ``C`` tokens already hold ``top_p``
of the probability has its nucleus among them too; for the rows where that fails the cut comes from
a full sort of the top-p-only rows (which rows those are is known on the host), chosen on the
device, so no batch waits for the device to find out.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from infercore.sample.transfer import to_device

_TOP_P_CANDIDATES = 1024


def apply_min_p(logits: torch.Tensor, margin: torch.Tensor) -> None:
    """Forbid, in place, tokens whose logit is more than ``-margin`` [B, 1] below the row's largest.

    With ``margin = temperature * log(min_p)`` this is min-p on the tempered distribution (tokens
    less likely than ``min_p`` times the most likely one), applied before the temperature: the
    common path divides by the temperature inside ``gumbel_argmax``.
    """
    threshold = logits.amax(dim=-1, keepdim=True) + margin
    logits.masked_fill_(logits < threshold, float("-inf"))


#: A row's top-k limit where top-k is off: wider than any candidate list.
_NO_LIMIT = float(1 << 30)


@dataclass
class TopKTopP:
    """Per-row top-k (0: off) and top-p (1: off) for a batch where some row uses either."""

    top_p: torch.Tensor
    max_top_k: int
    any_top_p: bool
    #: [R] int64 batch rows with top-p but no top-k (their nucleus is measured against the whole
    #: row), or None when there are none.
    top_p_only_rows: torch.Tensor | None
    #: [3, B] float32 on the device, built on the host so that no step spends kernels on them: each
    #: row's top-k limit (:data:`_NO_LIMIT` where top-k is off), its temperature divisor (1 on greedy
    #: rows), and a bound on its threshold (+inf on rows with a cut, -inf on rows without).
    row_terms: torch.Tensor

    @property
    def any_top_p_only(self) -> bool:
        """Whether some row has top-p without top-k."""
        return self.top_p_only_rows is not None

    @classmethod
    def from_rows(cls, top_k: np.ndarray, top_p: np.ndarray, temperature: np.ndarray, greedy: np.ndarray,
                  top_p_device: torch.Tensor) -> TopKTopP | None:
        """None when no sampled row restricts its tokens. ``top_k``/``top_p``/``temperature`` are the
        batch's values on the host (greedy rows: top-k 1, their argmax and every token tied with it, of
        which ``gumbel_argmax`` takes the first, as ``torch.argmax``; top-p 1; temperature 0) and
        ``top_p_device`` the top-p values on the logits' device: the host copies decide the shapes, so
        nothing waits for the device."""
        any_top_p = bool((top_p < 1).any())
        if not any_top_p and not bool(((top_k > 0) & ~greedy).any()):
            return None
        top_p_only = np.flatnonzero((top_p < 1) & (top_k == 0))
        device = top_p_device.device
        terms = np.empty((3, len(top_k)), dtype=np.float32)
        terms[0] = np.where(top_k > 0, top_k, _NO_LIMIT)
        terms[1] = np.where(temperature > 0, temperature, 1.0)
        terms[2] = np.where((top_k > 0) | (top_p < 1), np.inf, -np.inf)
        return cls(
            top_p=top_p_device,
            max_top_k=int(top_k.max()),
            any_top_p=any_top_p,
            top_p_only_rows=to_device(top_p_only.tolist(), torch.int64, device) if len(top_p_only) else None,
            row_terms=torch.from_numpy(terms).to(device, non_blocking=True),
        )

    def threshold(self, logits: torch.Tensor) -> torch.Tensor:
        """[B, 1] each row's smallest logit inside its top-k and then its top-p nucleus (-inf on rows
        without a cut): the tokens below it are the ones to forbid. ``logits`` is not changed.

        ``logits`` [B, V] are not yet divided by the rows' temperatures; the nucleus is measured on
        ``softmax(logits / temperature)`` over the row's top-k tokens (greedy rows: temperature 1).
        """
        vocab_size = logits.shape[1]
        width = min(vocab_size, max(self.max_top_k, _TOP_P_CANDIDATES if self.any_top_p_only else 1))
        values = top_values(logits, width)
        k_limit, scale, bound = (t.unsqueeze(1) for t in self.row_terms)
        keep = _positions(width, logits.device) < k_limit
        wide = None
        if self.any_top_p:
            tempered = torch.where(keep, values / scale, float("-inf"))
            if self.any_top_p_only:
                by_k = k_limit < _NO_LIMIT
                lse = torch.where(by_k, tempered.logsumexp(dim=-1, keepdim=True),
                                  (logits / scale).logsumexp(dim=-1, keepdim=True))
                probs = (tempered - lse).exp_()
                # Top-p-only rows whose candidates hold less than top_p: the nucleus reaches past them.
                wide = ~by_k.squeeze(1) & (self.top_p < 1) & (probs.sum(dim=-1) < self.top_p)
            else:
                probs = tempered.softmax(dim=-1)
            keep &= _inside_nucleus(probs, self.top_p)
        threshold = torch.minimum(values.gather(1, keep.sum(dim=-1, keepdim=True).clamp_min_(1) - 1), bound)
        if wide is not None and self.top_p_only_rows is not None:
            rows = self.top_p_only_rows
            sorted_cut = _sorted_threshold(logits.index_select(0, rows), scale.index_select(0, rows),
                                           self.top_p.index_select(0, rows))
            candidate_cut = threshold.index_select(0, rows)
            threshold.index_copy_(0, rows, torch.where(wide.index_select(0, rows).unsqueeze(1),
                                                        sorted_cut, candidate_cut))
        return threshold


#: Block lengths :func:`top_values` may cut a row into, longest first.
_BLOCKS = (128, 64, 32)


def top_values(logits: torch.Tensor, width: int) -> torch.Tensor:
    """[B, width] the ``width`` largest values of each row of ``logits`` [B, V], largest first: the values
    of ``torch.topk``, exactly.

    A row is cut into blocks and only the ``width`` blocks with the largest maxima are searched (see
    :func:`_top_blocks`), with the longest block of :data:`_BLOCKS` that leaves at most half the row to
    search; ``torch.topk`` over the whole row when none does. On an H200, top-50 over 256 x 151,936
    logits: 216 us in blocks of 128 against 616 us for ``torch.topk``; top-1024: 561 us in blocks of 64
    against 640 us.
    """
    vocab = logits.shape[1]
    for block in _BLOCKS:
        if 2 * width * block <= vocab:
            return _top_blocks(logits, width, block)
    return logits.topk(width, dim=-1).values


def _top_blocks(logits: torch.Tensor, width: int, block: int) -> torch.Tensor:
    """The top ``width`` values of each row, searched only in the ``width`` blocks of ``block`` values with
    the largest maxima.

    Exact: every block left out has a maximum no larger than the smallest of the ``width`` kept maxima,
    and the kept blocks hold those ``width`` maxima, so no value left out could displace one kept (a
    tie displaces an equal value). The tail past the last whole block is searched as it is.
    """
    batch, vocab = logits.shape
    num_blocks = vocab // block
    blocks = logits[:, : num_blocks * block].unflatten(1, (num_blocks, block))
    chosen = blocks.amax(dim=-1).topk(width, dim=-1, sorted=False).indices
    candidates = blocks.gather(1, chosen.unsqueeze(-1).expand(-1, -1, block)).reshape(batch, width * block)
    if num_blocks * block < vocab:
        candidates = torch.cat([candidates, logits[:, num_blocks * block:]], dim=1)
    return candidates.topk(width, dim=-1).values


@functools.cache
def _positions(width: int, device: torch.device) -> torch.Tensor:
    """[1, width] 0, 1, ..., width - 1 as float32 (kept: a step builds none)."""
    return torch.arange(width, device=device, dtype=torch.float32).unsqueeze(0)


def _inside_nucleus(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Tokens (sorted most likely first) whose more likely tokens hold less than ``top_p`` in total."""
    return (probs.cumsum(dim=-1) - probs) < top_p.unsqueeze(1)


def _sorted_threshold(logits: torch.Tensor, scale: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """The smallest kept logit of each top-p-only row, by a full sort (rows whose nucleus is wide)."""
    values = logits.sort(dim=-1, descending=True).values
    keep = _inside_nucleus((values / scale).softmax(dim=-1), top_p)
    return values.gather(1, keep.sum(dim=-1, keepdim=True).clamp_min(1) - 1)
