"""Presence, frequency and repetition penalties (vLLM semantics).

Repetition divides positive logits (multiplies negative ones) of every token seen in the prompt or
the output; presence subtracts a constant from tokens seen in the output; frequency subtracts a
constant per occurrence in the output.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn.utils.rnn import pad_sequence

from infercore.sampling_params import SamplingParams


@dataclass
class PenaltyTensors:
    """Penalty inputs for the rows that have a penalty; the other rows are left alone."""

    rows: torch.Tensor
    presence: torch.Tensor
    frequency: torch.Tensor
    repetition: torch.Tensor
    #: [R, V] how often each token occurs in the output; None when no row has presence/frequency.
    output_counts: torch.Tensor | None
    #: [R, V] whether each token occurs in the prompt or output; None when no row has repetition.
    seen: torch.Tensor | None

    @classmethod
    def build(
        cls,
        params: list[SamplingParams],
        prompt_token_ids: list[list[int]],
        output_token_ids: list[list[int]],
        vocab_size: int,
        device: torch.device,
    ) -> PenaltyTensors | None:
        """Gather the penalised rows, or None when no request has a penalty."""
        rows = [i for i, p in enumerate(params) if _has_penalty(p)]
        if not rows:
            return None
        chosen = [params[i] for i in rows]
        outputs = _padded([output_token_ids[i] for i in rows], vocab_size, device)
        counts = seen = None
        if any(p.presence_penalty != 0 or p.frequency_penalty != 0 for p in chosen):
            counts = torch.zeros(len(rows), vocab_size + 1, device=device)
            counts.scatter_add_(1, outputs, torch.ones_like(outputs, dtype=counts.dtype))
            counts = counts[:, :vocab_size]
        if any(p.repetition_penalty != 1 for p in chosen):
            prompts = _padded([prompt_token_ids[i] for i in rows], vocab_size, device)
            seen = torch.zeros(len(rows), vocab_size + 1, dtype=torch.bool, device=device)
            seen.scatter_(1, prompts, True).scatter_(1, outputs, True)
            seen = seen[:, :vocab_size]

        def column(values: list[float]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.float32, device=device).unsqueeze(1)

        return cls(
            rows=torch.tensor(rows, dtype=torch.int64, device=device),
            presence=column([p.presence_penalty for p in chosen]),
            frequency=column([p.frequency_penalty for p in chosen]),
            repetition=column([p.repetition_penalty for p in chosen]),
            output_counts=counts,
            seen=seen,
        )

    def apply(self, logits: torch.Tensor) -> None:
        """Penalise ``logits`` [B, V] in place."""
        sub = logits[self.rows]
        if self.seen is not None:
            penalised = torch.where(sub > 0, sub / self.repetition, sub * self.repetition)
            sub = torch.where(self.seen, penalised, sub)
        if self.output_counts is not None:
            sub -= self.frequency * self.output_counts + self.presence * (self.output_counts > 0)
        logits[self.rows] = sub


def _has_penalty(p: SamplingParams) -> bool:
    return p.presence_penalty != 0 or p.frequency_penalty != 0 or p.repetition_penalty != 1


def _padded(token_ids: list[list[int]], pad_id: int, device: torch.device) -> torch.Tensor:
    """[R, L] token ids padded with ``pad_id`` (an extra, discarded column of the [R, V + 1] tables)."""
    tensors = [torch.tensor(ids, dtype=torch.int64) for ids in token_ids]
    return pad_sequence(tensors, batch_first=True, padding_value=pad_id).to(device)
