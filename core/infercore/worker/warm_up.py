"""Kernels built before the first request: the sampler's and the LM head's at small row counts, and the
decode launches of steps with prompt tokens too large for a graph."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from infercore.forward_context import set_forward_context
from infercore.sample import Sampler, SamplingMetadata
from infercore.sampling_params import SamplingParams
from infercore.worker.batch_layout import make_layout

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


def mixed_decode_counts(max_num_reqs: int, max_num_tokens: int, prompt_len: int) -> list[int]:
    """The one-token queries :func:`warm_up_mixed_decodes` puts beside a prompt of ``prompt_len`` tokens: 1, 2,
    4, ... and the most a step holds (one request and ``prompt_len`` tokens are the prompt's)."""
    most = min(max_num_reqs - 1, max_num_tokens - prompt_len)
    if most < 1:
        return []
    return sorted({*(1 << i for i in range(most.bit_length()) if 1 << i <= most), most})


@torch.inference_mode()
def warm_up_mixed_decodes(runner: ModelRunner) -> None:
    """Run, uncaptured, steps of ``d`` one-token queries ahead of one short prompt, for each ``d`` of
    :func:`mixed_decode_counts`, over the narrowest block table and the widest.

    A step with prompt tokens too large for a graph runs eagerly, and its one-token queries run as decodes
    (see ``ModelRunner._prepare``). Attention backends choose that launch by the decode count and the block
    table's width (how many splits of the context, which tile): without this, the first long prompt beside
    decodes of long contexts built those kernel variants mid-run, stalling every stream for the build. The
    queries sit at position 0 and every token writes nowhere (slot -1): a wide table changes the launch, not
    the work, so the passes take milliseconds."""
    prompt = max(runner.block_size, runner.max_verify_len + 1)  # never read as a short (verification) query
    narrow = -(-prompt // runner.block_size)
    buf = runner.buffers
    for width in sorted({narrow, max(narrow, runner.max_blocks_per_req)}):
        for decodes in mixed_decode_counts(runner.max_num_reqs, runner.max_num_tokens, prompt):
            lengths = np.ones(decodes + 1, dtype=np.int64)
            lengths[-1] = prompt
            size = decodes + prompt
            layout = make_layout(np.arange(decodes + 1), lengths, np.zeros(decodes + 1, dtype=np.int64))
            table = np.zeros((decodes + 1, width), dtype=np.int32)
            common = runner._fill(layout, np.zeros(size, dtype=np.int64), np.full(size, -1, dtype=np.int64), table)
            with set_forward_context(runner._context(common, size)):
                runner.model(buf.input_ids[:size], buf.positions[:size])
