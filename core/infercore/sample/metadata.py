"""SamplingMetadata: one step's sampling parameters as batched tensors, built by the model runner."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from infercore.sample.logit_bias import SparseLogitBias
from infercore.sample.penalties import PenaltyTensors
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
        """Whether the sampler must work on float32 logits: logprobs and the steps that change logit
        values. Min-p, top-k and top-p only compare logits with thresholds taken from them, so they
        mask the logits in the model's dtype."""
        return (self.max_num_logprobs is not None or self.grammar_bitmask is not None
                or self.logit_bias is not None or self.penalties is not None)

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
        """Batch the parameters of the requests in row order, through a row state of their own.

        ``output_token_ids[i]`` are the tokens request ``i`` has produced so far (for penalties,
        ``min_tokens`` and its row seed); ``eos_token_ids[i]`` is its EOS token, masked until
        ``min_tokens`` outputs. Rows without a seed get fresh seeds from ``seed_source`` (torch's
        default generator when None). The model runner keeps one ``SamplingRowState`` for all steps.
        """
        # Imported here: the row state builds this class's instances.
        from infercore.sample.row_state import SamplingRowState

        state = SamplingRowState(len(params), vocab_size, device)
        eos = eos_token_ids or [None] * len(params)
        for row, p in enumerate(params):
            state.add(row, p, prompt_token_ids[row], output_token_ids[row], eos[row])
        num_outputs = np.array([len(tokens) for tokens in output_token_ids], dtype=np.int64)
        return state.gather(np.arange(len(params)), num_outputs, grammar_bitmask, seed_source)
