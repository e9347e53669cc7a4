"""Sparse additive logit changes: the user's ``logit_bias`` and -inf on stop tokens before ``min_tokens``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from infercore.sample.transfer import to_device
from infercore.sampling_params import SamplingParams


@dataclass
class SparseLogitBias:
    """Values added to ``logits[rows[i], token_ids[i]]``; -inf forbids the token."""

    rows: torch.Tensor
    token_ids: torch.Tensor
    values: torch.Tensor

    @classmethod
    def build(
        cls,
        params: Sequence[tuple[int, SamplingParams, int | None]],
        num_output_tokens: np.ndarray,
        device: torch.device,
    ) -> SparseLogitBias | None:
        """Collect the biases and min_tokens stop masks of ``params``: (batch row, its request's
        parameters, its EOS token) for the rows that may have either; ``num_output_tokens`` [B] are the
        tokens each batch row has produced so far. None when there are none."""
        rows: list[int] = []
        token_ids: list[int] = []
        values: list[float] = []
        for row, p, eos_token_id in params:
            for token, bias in (p.logit_bias or {}).items():
                rows.append(row)
                token_ids.append(int(token))
                values.append(float(bias))
            if num_output_tokens[row] < p.min_tokens:
                stops = _stop_token_ids(p, eos_token_id)
                rows.extend([row] * len(stops))
                token_ids.extend(stops)
                values.extend([float("-inf")] * len(stops))
        if not rows:
            return None
        return cls(
            rows=to_device(rows, torch.int64, device),
            token_ids=to_device(token_ids, torch.int64, device),
            values=to_device(values, torch.float32, device),
        )

    def apply(self, logits: torch.Tensor) -> None:
        """Add the biases to ``logits`` [B, V] in place."""
        logits.index_put_((self.rows, self.token_ids), self.values, accumulate=True)


def _stop_token_ids(p: SamplingParams, eos_token_id: int | None) -> list[int]:
    stops = set(p.stop_token_ids or []) | set(p.all_stop_token_ids or [])
    if eos_token_id is not None and not p.ignore_eos:
        stops.add(eos_token_id)
    return sorted(stops)
