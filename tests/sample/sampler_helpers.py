"""Building sampling metadata and sampling in one call, for the sampler tests."""

from __future__ import annotations

from collections.abc import Callable

import torch

from infercore.sample import Sampler, SamplingMetadata
from infercore.sampling_params import SamplingParams

CPU = torch.device("cpu")

BuildMetadata = Callable[..., SamplingMetadata]


def build_metadata(
    params: list[SamplingParams],
    vocab_size: int,
    prompts: list[list[int]] | None = None,
    outputs: list[list[int]] | None = None,
    eos_token_ids: list[int | None] | None = None,
    grammar_bitmask: torch.Tensor | None = None,
) -> SamplingMetadata:
    """SamplingMetadata with empty histories unless given."""
    n = len(params)
    return SamplingMetadata.build(
        params,
        prompts if prompts is not None else [[] for _ in range(n)],
        outputs if outputs is not None else [[] for _ in range(n)],
        vocab_size,
        CPU,
        grammar_bitmask=grammar_bitmask,
        eos_token_ids=eos_token_ids,
    )


def sample(logits: torch.Tensor, params: list[SamplingParams], **kwargs: object) -> torch.Tensor:
    """Sampled token ids for ``logits`` (left untouched) under ``params``."""
    metadata = build_metadata(params, logits.shape[1], **kwargs)  # type: ignore[arg-type]
    return Sampler()(logits.clone(), metadata).sampled_token_ids
