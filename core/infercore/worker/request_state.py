"""The model runner's persistent per-request state."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infercore.sampling_params import SamplingParams


@dataclass
class RequestState:
    """What the runner keeps for a request between steps: its row in the persistent arrays,
    its tokens and its random generator (seeded requests only; the sampler seeds it for each step,
    from the request's seed and output index, when the step needs it)."""

    req_id: str
    row: int
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    sampling_params: SamplingParams
    generator: torch.Generator | None
    num_blocks: int

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)
