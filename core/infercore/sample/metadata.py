"""SamplingMetadata: one step's sampling parameters as batched tensors, built by the model runner."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infercore.sample.logit_bias import SparseLogitBias
from infercore.sample.penalties import PenaltyTensors
from infercore.sample.transfer import to_device
from infercore.sample.truncation import TopKTopP
from infercore.sampling_params import SamplingParams


@dataclass
class SamplingMetadata:
    """What the sampler needs for one step, with tensors on the logits' device.

    Parts that no request uses are None, so an all-greedy batch without penalties or biases costs
    one argmax.
    """

    vocab_size: int
    all_greedy: bool
    all_random: bool
    #: [B] True where the request is greedy; None unless the batch mixes greedy and sampled rows.
    greedy: torch.Tensor | None
    #: [B, 1] temperatures (1 on greedy rows); None when no sampled row changes the temperature.
    temperature: torch.Tensor | None
    #: [B, 1] min-p (0 on greedy rows); None when no sampled row uses it.
    min_p: torch.Tensor | None
    top_k_top_p: TopKTopP | None
    #: Batch row -> that request's own generator (sampled rows with a seed only).
    generators: dict[int, torch.Generator]
    penalties: PenaltyTensors | None
    logit_bias: SparseLogitBias | None
    #: [B, ceil(V / 32)] int32 allowed-token bits, or None without structured output.
    grammar_bitmask: torch.Tensor | None
    #: Top logprobs to return per row (the largest any request asked for), or None for no logprobs.
    max_num_logprobs: int | None

    @classmethod
    def build(
        cls,
        params: list[SamplingParams],
        generators: list[torch.Generator | None],
        prompt_token_ids: list[list[int]],
        output_token_ids: list[list[int]],
        vocab_size: int,
        device: torch.device,
        grammar_bitmask: torch.Tensor | None = None,
        eos_token_ids: list[int | None] | None = None,
    ) -> SamplingMetadata:
        """Batch the parameters of the requests in row order.

        ``output_token_ids[i]`` are the tokens request ``i`` has produced so far (for penalties and
        ``min_tokens``); ``eos_token_ids[i]`` is its EOS token, masked until ``min_tokens`` outputs.
        """
        greedy = [p.greedy for p in params]
        sampled = [p for p, g in zip(params, greedy) if not g]
        temperature = min_p = None
        if any(p.temperature != 1 for p in sampled):
            temperature = _column([1.0 if g else p.temperature for p, g in zip(params, greedy)], device)
        if any(p.min_p > 0 for p in sampled):
            min_p = _column([0.0 if g else p.min_p for p, g in zip(params, greedy)], device)
        requested = [p.logprobs for p in params if p.logprobs is not None]
        return cls(
            vocab_size=vocab_size,
            all_greedy=not sampled,
            all_random=len(sampled) == len(params),
            greedy=to_device(greedy, torch.bool, device) if 0 < len(sampled) < len(params) else None,
            temperature=temperature,
            min_p=min_p,
            top_k_top_p=TopKTopP.build(params, greedy, vocab_size, device) if sampled else None,
            generators={i: g for i, g in enumerate(generators) if g is not None and not greedy[i]},
            penalties=PenaltyTensors.build(params, prompt_token_ids, output_token_ids, vocab_size, device),
            logit_bias=SparseLogitBias.build(
                params, output_token_ids, eos_token_ids or [None] * len(params), device),
            grammar_bitmask=grammar_bitmask,
            max_num_logprobs=max(vocab_size if n < 0 else min(n, vocab_size) for n in requested)
            if requested else None,
        )


def _column(values: list[float], device: torch.device) -> torch.Tensor:
    return to_device(values, torch.float32, device).unsqueeze(1)
