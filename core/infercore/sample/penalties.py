"""Presence, frequency and repetition penalties (vLLM semantics).

Repetition divides positive logits (multiplies negative ones) of every token seen in the prompt or
the output; presence subtracts a constant from tokens seen in the output; frequency subtracts a
constant per occurrence in the output. Only seen tokens change, so the penalties are applied to the
(row, token) pairs of the prompts and outputs rather than to whole [B, V] rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn.utils.rnn import pad_sequence

from infercore.sample.transfer import to_device
from infercore.sampling_params import SamplingParams


@dataclass
class PenaltyTensors:
    """One entry per (row, token) occurrence in a penalised request's prompt or output.

    A token that occurs several times has several identical entries; writing them back is idempotent.
    """

    rows: torch.Tensor
    token_ids: torch.Tensor
    repetition: torch.Tensor
    #: presence (if the token is in the output) + frequency * its count in the output.
    subtract: torch.Tensor

    @classmethod
    def build(
        cls,
        params: list[SamplingParams],
        prompt_token_ids: list[list[int]],
        output_token_ids: list[list[int]],
        vocab_size: int,
        device: torch.device,
    ) -> PenaltyTensors | None:
        """Gather the penalised rows' seen tokens, or None when no request has a penalty."""
        rows = [i for i, p in enumerate(params) if _has_penalty(p)]
        if not rows:
            return None
        chosen = [params[i] for i in rows]
        outputs = _padded([output_token_ids[i] for i in rows], vocab_size, device)
        seen = torch.cat([_padded([prompt_token_ids[i] for i in rows], vocab_size, device), outputs], dim=1)
        valid = seen < vocab_size

        def column(values: list[float]) -> torch.Tensor:
            return to_device(values, torch.float32, device).unsqueeze(1).expand_as(seen)

        subtract = torch.zeros(seen.shape, device=device)
        if any(p.presence_penalty != 0 or p.frequency_penalty != 0 for p in chosen):
            counts = torch.zeros(len(rows), vocab_size + 1, device=device)
            counts.scatter_add_(1, outputs, torch.ones_like(outputs, dtype=counts.dtype))
            seen_counts = counts.gather(1, seen)
            presence = column([p.presence_penalty for p in chosen])
            frequency = column([p.frequency_penalty for p in chosen])
            subtract = frequency * seen_counts + presence * (seen_counts > 0)
        batch_rows = to_device(rows, torch.int64, device).unsqueeze(1).expand_as(seen)
        return cls(
            rows=batch_rows[valid],
            token_ids=seen[valid],
            repetition=column([p.repetition_penalty for p in chosen])[valid],
            subtract=subtract[valid],
        )

    def apply(self, logits: torch.Tensor) -> None:
        """Penalise ``logits`` [B, V] in place."""
        index = (self.rows, self.token_ids)
        values = logits[index]
        values = torch.where(values > 0, values / self.repetition, values * self.repetition) - self.subtract
        logits.index_put_(index, values)


def _has_penalty(p: SamplingParams) -> bool:
    return p.presence_penalty != 0 or p.frequency_penalty != 0 or p.repetition_penalty != 1


def _padded(token_ids: list[list[int]], pad_id: int, device: torch.device) -> torch.Tensor:
    """[R, L] token ids padded with ``pad_id`` (the extra, discarded column of the [R, V + 1] counts)."""
    tensors = [torch.tensor(ids, dtype=torch.int64) for ids in token_ids]
    return pad_sequence(tensors, batch_first=True, padding_value=pad_id).to(device, non_blocking=True)
