"""Sampling metadata for the verified positions of a speculative step, built by the sampler's own code.

A row with ``n`` drafts is verified at ``n + 1`` positions; position ``j`` samples what would be the
row's output token ``len(outputs) + j`` if the drafts before it are accepted. So each position is a
sampling row of its own with the request's parameters and, as its outputs so far, the request's
outputs followed by drafts ``0..j-1``: its penalties count those drafts, its ``min_tokens`` stop mask is
the one of that output index, and a seeded request's position gets ``step_seed(seed, len(outputs) + j)``,
the seed that output index samples with. ``SamplingMetadata.build`` does the rest, as for any step.

This builds a row state per call (host work per token of history): the path for tests and the
reference of what the runner's per-row state must gather for a speculative step.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from infercore.sample.metadata import SamplingMetadata
from infercore.sampling_params import SamplingParams


def positions_metadata(
    params: Sequence[SamplingParams],
    prompt_token_ids: Sequence[Sequence[int]],
    output_token_ids: Sequence[Sequence[int]],
    draft_token_ids: Sequence[Sequence[int]],
    vocab_size: int,
    device: torch.device,
    eos_token_ids: Sequence[int | None] | None = None,
    seed_source: np.random.Generator | None = None,
) -> SamplingMetadata:
    """Metadata with one row per verified position, rows in order and each row's positions in order."""
    eos = list(eos_token_ids) if eos_token_ids is not None else [None] * len(params)
    pos_params: list[SamplingParams] = []
    pos_prompts: list[list[int]] = []
    pos_outputs: list[list[int]] = []
    pos_eos: list[int | None] = []
    for row, drafts in enumerate(draft_token_ids):
        for j in range(len(drafts) + 1):
            pos_params.append(params[row])
            pos_prompts.append(list(prompt_token_ids[row]))
            pos_outputs.append([*output_token_ids[row], *drafts[:j]])
            pos_eos.append(eos[row])
    return SamplingMetadata.build(pos_params, pos_prompts, pos_outputs, vocab_size, device,
                                  eos_token_ids=pos_eos, seed_source=seed_source)
