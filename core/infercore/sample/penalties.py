"""Presence, frequency and repetition penalties (vLLM semantics), from per-row tables on the device.

Repetition divides positive logits (multiplies negative ones) of every token seen in the prompt or
the output; presence subtracts a constant from tokens seen in the output; frequency subtracts a
constant per occurrence in the output. What each row has seen lives in two [rows, V] tables kept on
the device for the request's lifetime (:class:`PenaltyTables`): its prompt tokens, written once when
the request joins, and its output token counts, bumped on the device by every sampled token. No
step re-sends or re-pads token histories, and nothing here waits for the device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from infercore.sample.transfer import to_device


class PenaltyTables:
    """Per-row seen-token tables on the device: ``prompt`` [R, V] bool and ``output_counts`` [R, V]
    float32. Allocated when the first penalised request joins, so engines whose requests use no
    penalty spend no memory on them."""

    def __init__(self, num_rows: int, vocab_size: int, device: torch.device) -> None:
        self.prompt = torch.zeros((num_rows, vocab_size), dtype=torch.bool, device=device)
        self.output_counts = torch.zeros((num_rows, vocab_size), dtype=torch.float32, device=device)

    def fill_row(self, row: int, prompt_token_ids: Sequence[int], output_token_ids: Sequence[int]) -> None:
        """Reset ``row`` to a request's prompt and the outputs it already has (a resumed request)."""
        device = self.prompt.device
        self.prompt[row].zero_()
        self.output_counts[row].zero_()
        if prompt_token_ids:
            self.prompt[row].index_fill_(0, to_device(prompt_token_ids, torch.int64, device), True)
        if output_token_ids:
            ids = to_device(output_token_ids, torch.int64, device)
            self.output_counts[row].index_add_(0, ids, torch.ones(len(output_token_ids), device=device))


@dataclass
class PenaltyTensors:
    """One step's penalties: the batch's rows in the tables and each row's three penalties [B, 1].

    Rows without penalties carry repetition 1 and presence and frequency 0, so they are unchanged.
    """

    tables: PenaltyTables
    #: [B] int64 rows of the batch in ``tables``.
    rows: torch.Tensor
    repetition: torch.Tensor
    presence: torch.Tensor
    frequency: torch.Tensor

    def apply(self, logits: torch.Tensor) -> None:
        """Penalise ``logits`` [B, V] (float32) in place."""
        counts = self.tables.output_counts.index_select(0, self.rows)
        in_output = counts > 0
        seen = self.tables.prompt.index_select(0, self.rows) | in_output
        repeated = torch.where(logits > 0, logits / self.repetition, logits * self.repetition)
        logits.copy_(torch.where(seen, repeated, logits))
        logits.sub_(self.frequency * counts + self.presence * in_output)

    def record(self, sampled_token_ids: torch.Tensor) -> None:
        """Count this step's sampled tokens [B] in their rows' output counts, on the device."""
        ones = torch.ones(sampled_token_ids.shape, dtype=torch.float32, device=sampled_token_ids.device)
        self.tables.output_counts.index_put_((self.rows, sampled_token_ids), ones, accumulate=True)
