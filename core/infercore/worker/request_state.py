"""The model runner's persistent per-request state."""

from __future__ import annotations

from dataclasses import dataclass

from infercore.sampling_params import SamplingParams


@dataclass
class RequestState:
    """What the runner keeps for a request between steps: its row in the persistent arrays,
    and its tokens (a seeded request's random draw follows from its seed and output index alone)."""

    req_id: str
    row: int
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    sampling_params: SamplingParams
    num_blocks: int

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)
