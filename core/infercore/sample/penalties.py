"""Presence, frequency and repetition penalties (vLLM semantics), from per-row tables on the device.

Repetition divides positive logits (multiplies negative ones) of every token seen in the prompt or
the output; presence subtracts a constant from tokens seen in the output; frequency subtracts a
constant per occurrence in the output. What each row has seen lives in two [rows, V] tables kept on
the device for the request's lifetime (:class:`PenaltyTables`): its prompt tokens, written once when
the request joins, and its output token counts, bumped on the device by every sampled token. No
step re-sends or re-pads token histories, and nothing here waits for the device.

All three penalties are one ``apply_penalties`` custom op: a platform kernel reads each logit, its
row's table entries and writes the logit back in one pass over the batch's logits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from infercore.ops import reference
from infercore.platforms import kernel_builds
from infercore.sample.transfer import to_device

#: The ``apply_penalties`` custom op's signature (see ``infercore.ops.reference.apply_penalties``).
ApplyPenalties = Callable[..., torch.Tensor]


class PenaltyTables:
    """Per-row seen-token tables on the device: ``prompt`` [R, V] bool and ``output_counts`` [R, V]
    int32. Allocated when the first penalised request joins, so engines whose requests use no
    penalty spend no memory on them."""

    def __init__(self, num_rows: int, vocab_size: int, device: torch.device) -> None:
        self.prompt = torch.zeros((num_rows, vocab_size), dtype=torch.bool, device=device)
        self.output_counts = torch.zeros((num_rows, vocab_size), dtype=torch.int32, device=device)

    def fill_row(self, row: int, prompt_token_ids: Sequence[int], output_token_ids: Sequence[int]) -> None:
        """Reset ``row`` to a request's prompt and the outputs it already has (a resumed request)."""
        device = self.prompt.device
        self.prompt[row].zero_()
        self.output_counts[row].zero_()
        if prompt_token_ids:
            self.prompt[row].index_fill_(0, to_device(prompt_token_ids, torch.int64, device), True)
        if output_token_ids:
            ids = to_device(output_token_ids, torch.int64, device)
            ones = torch.ones(len(output_token_ids), dtype=torch.int32, device=device)
            self.output_counts[row].index_add_(0, ids, ones)


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

    def apply(self, logits: torch.Tensor, op: ApplyPenalties = reference.apply_penalties) -> None:
        """Penalise ``logits`` [B, V] (float32) in place with ``op`` (the platform's kernel, or the
        torch reference)."""
        op(logits, self.rows, self.tables.prompt, self.tables.output_counts, self.repetition, self.presence,
           self.frequency)

    def record(self, sampled_token_ids: torch.Tensor) -> None:
        """Count this step's sampled tokens [B] in their rows' output counts, on the device (not while kernels build
        ahead: the ids are then unwritten memory, and an out-of-range one is a device-side assert)."""
        if kernel_builds.building_ahead():
            return
        ones = torch.ones(sampled_token_ids.shape, dtype=torch.int32, device=sampled_token_ids.device)
        self.tables.output_counts.index_put_((self.rows, sampled_token_ids), ones, accumulate=True)
