"""Kernels built before the first request: the sampler's and the LM head's at small row counts."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from infercore.sample import Sampler, SamplingMetadata
from infercore.sampling_params import SamplingParams

if TYPE_CHECKING:
    from infercore.worker.model_runner import ModelRunner


def warm_up(runner: ModelRunner) -> None:
    """The runner's sampler kernels and (on the last pipeline stage) its LM head's at small row counts."""
    warm_up_sampler(runner.sampler, runner.vocab_size, runner.dtype, runner.device)
    if runner.last_stage:
        warm_up_logits(runner.model, runner.hf_config.get_text_config().hidden_size, runner.max_num_reqs,
                       runner.dtype, runner.device)


@torch.inference_mode()
def warm_up_logits(model: nn.Module, hidden_size: int, max_rows: int, dtype: torch.dtype,
                   device: torch.device) -> None:
    """Compute logits of 1, 2, 4, 8 and 16 rows once, so kernels that specialise on a small row count
    (the skinny GEMM of a small LM head) are built before the first request samples that many."""
    rows = 1
    while rows <= min(max_rows, 16):
        model.compute_logits(torch.zeros((rows, hidden_size), dtype=dtype, device=device))
        rows *= 2


@torch.inference_mode()
def warm_up_sampler(sampler: Sampler, vocab_size: int, dtype: torch.dtype, device: torch.device) -> None:
    """Sample a greedy and a random row of dummy logits, in the model's dtype and (with a penalty)
    in float32, so the sampler's kernels are built before the first request. Its seeds come from a
    generator of its own: the engine's stream of seeds for unseeded requests is left as it was."""
    for random_row in (SamplingParams(temperature=1.0, top_k=2),
                       SamplingParams(temperature=1.0, top_k=2, repetition_penalty=1.1)):
        params = [SamplingParams(temperature=0.0), random_row]
        logits = torch.zeros((len(params), vocab_size), dtype=dtype, device=device)
        metadata = SamplingMetadata.build(params, [[0]] * len(params), [[] for _ in params], vocab_size, device,
                                          eos_token_ids=[None] * len(params), seed_source=np.random.default_rng(0))
        sampler(logits, metadata)
