"""Log-probabilities of chosen tokens and the top-k alternatives, as tensors and as wire structs."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infercore.wire.messages import Logprobs


@dataclass
class LogprobsTensors:
    """Per row: the chosen token then the top-k tokens (ids and logprobs), and the chosen token's rank.

    ``token_ids`` and ``logprobs`` are [N, 1 + k]; ``ranks`` is [N], 1 for the most likely token
    (one plus the number of tokens strictly more likely than the chosen one).
    """

    token_ids: torch.Tensor
    logprobs: torch.Tensor
    ranks: torch.Tensor

    def cpu(self) -> LogprobsTensors:
        """The same tensors on the CPU (one device transfer instead of one per row)."""
        return LogprobsTensors(self.token_ids.cpu(), self.logprobs.cpu(), self.ranks.cpu())

    def to_logprobs(self, row: int, k: int) -> Logprobs:
        """One row as a single-position ``Logprobs`` with its top ``k`` (-1: all that were kept)."""
        return self.rows_to_logprobs(slice(row, row + 1), k)

    def to_all_logprobs(self, k: int) -> Logprobs:
        """Every row as one position of a ``Logprobs`` (used for prompt logprobs)."""
        return self.rows_to_logprobs(slice(None), k)

    def rows_to_logprobs(self, rows: slice, k: int) -> Logprobs:
        """The rows ``rows`` as the positions of one ``Logprobs`` with their top ``k`` (-1: all kept)."""
        width = self.token_ids.shape[1] if k < 0 else 1 + k
        return Logprobs(
            token_ids=self.token_ids[rows, :width].tolist(),
            logprobs=self.logprobs[rows, :width].tolist(),
            ranks=self.ranks[rows].tolist(),
        )


def gather_logprobs(logprobs: torch.Tensor, token_ids: torch.Tensor, num_logprobs: int) -> LogprobsTensors:
    """Pick the chosen tokens' logprobs and ranks and the top ``num_logprobs`` from [N, V] logprobs."""
    chosen = logprobs.gather(1, token_ids.unsqueeze(1))
    ranks = (logprobs > chosen).sum(dim=-1) + 1
    if num_logprobs == 0:
        return LogprobsTensors(token_ids.unsqueeze(1), chosen, ranks)
    top_values, top_ids = logprobs.topk(num_logprobs, dim=-1)
    return LogprobsTensors(
        token_ids=torch.cat([token_ids.unsqueeze(1), top_ids], dim=1),
        logprobs=torch.cat([chosen, top_values], dim=1),
        ranks=ranks,
    )


def compute_prompt_logprobs(logits: torch.Tensor, target_token_ids: torch.Tensor, num_logprobs: int) -> Logprobs:
    """Logprobs of each prompt token given the positions before it.

    ``logits`` [P, V] are the model outputs at positions whose next token is ``target_token_ids`` [P];
    ``num_logprobs`` is the request's ``prompt_logprobs`` (-1: the whole vocabulary).
    """
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    k = logprobs.shape[1] if num_logprobs < 0 else min(num_logprobs, logprobs.shape[1])
    return gather_logprobs(logprobs, target_token_ids.to(logprobs.device, torch.int64), k).cpu().to_all_logprobs(k)
