"""The model runner's persistent per-request state."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infercore.sampling_params import SamplingParams

#: An odd 64-bit constant (the golden ratio's fraction) that spreads seeds apart before the output
#: index is added, so nearby seeds never reuse each other's per-token seeds.
_SEED_SPREAD = 0x9E3779B97F4A7C15
_MASK_64 = (1 << 64) - 1


@dataclass
class RequestState:
    """What the runner keeps for a request between steps: its row in the persistent arrays,
    its tokens and its random generator."""

    req_id: str
    row: int
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    sampling_params: SamplingParams
    generator: torch.Generator | None
    num_blocks: int

    def step_generator(self) -> torch.Generator | None:
        """The request's generator, seeded for its next output token (None without a seed).

        Each draw's seed depends only on the request's seed and how many tokens it has output, not
        on earlier draws: a preempted request resumes with a fresh state and must still sample the
        tokens it would have sampled without the preemption.
        """
        if self.generator is not None:
            seed = self.sampling_params.seed or 0
            self.generator.manual_seed((seed * _SEED_SPREAD + len(self.output_token_ids)) & _MASK_64)
        return self.generator

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)
