"""SamplingMetadata: one step's sampling parameters as batched tensors, built by the model runner."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from infercore.sample.gumbel import fresh_seeds, step_seed
from infercore.sample.logit_bias import SparseLogitBias
from infercore.sample.penalties import PenaltyTensors
from infercore.sample.transfer import to_device
from infercore.sample.truncation import TopKTopP
from infercore.sampling_params import SamplingParams


@dataclass
class SamplingMetadata:
    """What the sampler needs for one step, with tensors on the logits' device.

    Parts that no request uses are None, so an all-greedy batch without penalties or biases costs
    one argmax, and a batch without top-k/top-p one ``gumbel_argmax``. Every sampled row draws with
    ``gumbel_argmax`` from its row seed, whichever other options share the batch.
    """

    all_greedy: bool
    #: [B] float32 temperatures, 0 on greedy rows (``gumbel_argmax``'s greedy mark); None when all greedy.
    temperature: torch.Tensor | None
    #: [B] int64 row seeds of this step's random draw (see ``infercore.sample.gumbel``); None when all greedy.
    seeds: torch.Tensor | None
    #: [B, 1] min-p as a margin below the row's largest logit, before the temperature:
    #: ``temperature * log(min_p)`` (-inf on greedy rows and rows without min-p); None when unused.
    min_p_margin: torch.Tensor | None
    top_k_top_p: TopKTopP | None
    penalties: PenaltyTensors | None
    logit_bias: SparseLogitBias | None
    #: [B, ceil(V / 32)] int32 allowed-token bits, or None without structured output.
    grammar_bitmask: torch.Tensor | None
    #: Top logprobs to return per row (the largest any request asked for), or None for no logprobs.
    max_num_logprobs: int | None

    @property
    def needs_float32(self) -> bool:
        """Whether the sampler must work on float32 logits (anything but temperature and the draw)."""
        return (self.max_num_logprobs is not None or self.grammar_bitmask is not None
                or self.logit_bias is not None or self.penalties is not None
                or self.min_p_margin is not None or self.top_k_top_p is not None)

    @classmethod
    def build(
        cls,
        params: list[SamplingParams],
        prompt_token_ids: list[list[int]],
        output_token_ids: list[list[int]],
        vocab_size: int,
        device: torch.device,
        grammar_bitmask: torch.Tensor | None = None,
        eos_token_ids: list[int | None] | None = None,
        seed_source: np.random.Generator | None = None,
    ) -> SamplingMetadata:
        """Batch the parameters of the requests in row order.

        ``output_token_ids[i]`` are the tokens request ``i`` has produced so far (for penalties,
        ``min_tokens`` and its row seed); ``eos_token_ids[i]`` is its EOS token, masked until
        ``min_tokens`` outputs. Rows without a seed get fresh seeds from ``seed_source`` (torch's
        default generator when None).
        """
        greedy = [p.greedy for p in params]
        sampled = [p for p, g in zip(params, greedy) if not g]
        temperature = seeds = min_p_margin = top_k_top_p = None
        if sampled:
            temperature = to_device([0.0 if g else p.temperature for p, g in zip(params, greedy)],
                                    torch.float32, device)
            row_seeds = fresh_seeds(len(params), seed_source)
            seeded = [i for i, (p, g) in enumerate(zip(params, greedy)) if p.seed is not None and not g]
            for i in seeded:
                row_seeds[i] = step_seed(params[i].seed or 0, len(output_token_ids[i]))
            seeds = torch.from_numpy(row_seeds).to(device, non_blocking=True)
            if any(p.min_p > 0 for p in sampled):
                min_p_margin = to_device(
                    [p.temperature * math.log(p.min_p) if p.min_p > 0 and not g else -math.inf
                     for p, g in zip(params, greedy)], torch.float32, device).unsqueeze(1)
            top_k_top_p = TopKTopP.build(params, greedy, vocab_size, device)
        requested = [p.logprobs for p in params if p.logprobs is not None]
        return cls(
            all_greedy=not sampled,
            temperature=temperature,
            seeds=seeds,
            min_p_margin=min_p_margin,
            top_k_top_p=top_k_top_p,
            penalties=PenaltyTensors.build(params, prompt_token_ids, output_token_ids, vocab_size, device),
            logit_bias=SparseLogitBias.build(
                params, output_token_ids, eos_token_ids or [None] * len(params), device),
            grammar_bitmask=grammar_bitmask,
            max_num_logprobs=max(vocab_size if n < 0 else min(n, vocab_size) for n in requested)
            if requested else None,
        )

