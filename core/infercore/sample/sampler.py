"""The batched sampler: logits of one step in, one token per request (and its logprobs) out."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from infercore.ops import get_op, reference
from infercore.platforms import current_platform
from infercore.sample.logprobs import LogprobsTensors, gather_logprobs
from infercore.sample.metadata import SamplingMetadata
from infercore.sample.penalties import ApplyPenalties
from infercore.sample.truncation import apply_min_p
from infercore.structured_output import apply_token_bitmask

#: ``gumbel_argmax(logits, temperature, seeds, threshold=None)`` (see ``infercore.ops.reference``).
GumbelArgmax = Callable[..., torch.Tensor]


@dataclass
class SamplerOutput:
    """One sampled token per row, and logprobs of the raw model distribution when any row asked."""

    sampled_token_ids: torch.Tensor
    logprobs: LogprobsTensors | None


@functools.lru_cache(maxsize=32)
def _takes_threshold(op: Callable[..., torch.Tensor]) -> bool:
    """Whether a ``gumbel_argmax`` takes the ``threshold`` keyword (plugin API 1.4)."""
    try:
        parameters = inspect.signature(op).parameters
    except (TypeError, ValueError):
        return True  # a builtin or custom-op wrapper without a signature: assume the current API
    return "threshold" in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


class Sampler(nn.Module):
    """Turns [B, V] logits into tokens.

    Order (as in vLLM): grammar bitmask, logit bias and min_tokens, penalties, min-p, top-k and
    top-p (these as -inf masks; on float32 logits where values change); greedy rows take the argmax
    of the result; sampled rows divide by their temperature and take a Gumbel-max draw. Penalties
    are one ``apply_penalties`` custom op. The top-k/top-p cut, temperature, draw and argmax (greedy
    rows included) are one ``gumbel_argmax`` custom op that reads the logits once, in the model's
    dtype when nothing else needs float32. Every batch draws through that op, so a row's
    token depends on its own logits, options and seed, never on which options its neighbours use.
    Logprobs describe the model's raw distribution, before any of these, in float32. ``logits``
    may be changed in place.
    """

    def __init__(self, seed: int | None = None) -> None:
        super().__init__()
        #: Fresh seeds for rows whose request has none (passed to ``SamplingMetadata.build``). Made
        #: from the engine's ``seed`` config, so an engine's unseeded draws repeat from run to run.
        self.seed_source: np.random.Generator = np.random.default_rng(seed)
        self._ops: dict[tuple[str, str], Callable[..., torch.Tensor]] = {}

    def forward(self, logits: torch.Tensor, metadata: SamplingMetadata) -> SamplerOutput:
        """Sample one token per row of ``logits`` [B, V] (any float dtype, rows contiguous)."""
        if metadata.needs_float32:
            logits = logits.float()
        raw_logprobs = None
        if metadata.max_num_logprobs is not None:
            raw_logprobs = torch.log_softmax(logits, dim=-1)
        self._adjust(logits, metadata, self._op("apply_penalties", logits.device))
        sampled = self._sample(logits, metadata)
        if metadata.penalties is not None:
            metadata.penalties.record(sampled)
        logprobs = None
        if raw_logprobs is not None and metadata.max_num_logprobs is not None:
            logprobs = gather_logprobs(raw_logprobs, sampled, metadata.max_num_logprobs)
        return SamplerOutput(sampled, logprobs)

    @staticmethod
    def _adjust(logits: torch.Tensor, metadata: SamplingMetadata, apply_penalties: ApplyPenalties) -> None:
        if metadata.grammar_bitmask is not None:
            apply_token_bitmask(logits, metadata.grammar_bitmask)
        if metadata.logit_bias is not None:
            metadata.logit_bias.apply(logits)
        if metadata.penalties is not None:
            metadata.penalties.apply(logits, apply_penalties)
        if metadata.min_p_margin is not None:
            apply_min_p(logits, metadata.min_p_margin)

    def _sample(self, logits: torch.Tensor, metadata: SamplingMetadata) -> torch.Tensor:
        if metadata.all_greedy:
            return logits.argmax(dim=-1)
        assert metadata.temperature is not None and metadata.seeds is not None
        draw = self._gumbel_op(logits.device)
        if metadata.top_k_top_p is None:
            return draw(logits, metadata.temperature, metadata.seeds)
        threshold = metadata.top_k_top_p.threshold(logits)
        if not _takes_threshold(draw):
            # A plugin's gumbel_argmax written before plugin API 1.4: mask the cut tokens instead.
            logits.masked_fill_(logits < threshold, float("-inf"))
            return draw(logits, metadata.temperature, metadata.seeds)
        return draw(logits, metadata.temperature, metadata.seeds, threshold=threshold)

    def _gumbel_op(self, device: torch.device) -> GumbelArgmax:
        """The ``gumbel_argmax`` for tensors on ``device`` (see :meth:`_op`)."""
        return self._op("gumbel_argmax", device)

    def _op(self, name: str, device: torch.device) -> Callable[..., torch.Tensor]:
        """The platform's custom op ``name`` for tensors on the platform's device; the torch
        reference for tensors elsewhere (CPU tensors on a GPU machine, as in tests)."""
        op = self._ops.get((name, device.type))
        if op is None:
            on_platform = device.type == current_platform().device_type
            op = get_op(name) if on_platform else getattr(reference, name)
            self._ops[(name, device.type)] = op
        return op
