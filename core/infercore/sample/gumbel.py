"""Row seeds for sampling: one 63-bit seed per sampled row and step, keying that row's random draw.

Sampling draws ``q ~ Exp(1)`` per token and takes ``argmax(probs / q)``, which picks token ``i`` with
probability ``probs[i]``. In log space this is ``argmax(logits - log q)``: the softmax normaliser is one
constant per row, so no softmax is needed. The ``gumbel_argmax`` custom op does this for every sampled
row, with the exponentials of a row keyed by its seed and the token id alone.

A request with a seed gets :func:`step_seed` of its seed and output index, so its draws never depend
on which other requests share the batch, nor on preemption; other rows get fresh seeds from a numpy
generator (:func:`fresh_seeds`).
"""

from __future__ import annotations

import numpy as np
import torch

#: An odd 64-bit constant (the golden ratio's fraction) that spreads seeds apart before the output
#: index is added, so nearby seeds never reuse each other's per-token seeds.
_SEED_SPREAD = 0x9E3779B97F4A7C15
#: Row seeds are non-negative int64 (63 bits): what ``gumbel_argmax`` kernels and ``manual_seed`` take.
SEED_MASK = (1 << 63) - 1


def step_seed(seed: int, num_output_tokens: int) -> int:
    """The row seed of a seeded request about to sample its output token ``num_output_tokens``.

    It depends only on the request's seed and that index, not on earlier draws: a preempted request
    resumes with no state and still samples the tokens it would have sampled without preemption.
    """
    return (seed * _SEED_SPREAD + num_output_tokens) & SEED_MASK


def fresh_seeds(count: int, source: np.random.Generator | None) -> np.ndarray:
    """``count`` random row seeds (int64 in [0, 2**63)) from ``source``, or from torch's default
    CPU generator when ``source`` is None (so ``torch.manual_seed`` makes them reproducible)."""
    if source is None:
        return torch.randint(SEED_MASK, (count,), dtype=torch.int64).numpy()
    return source.integers(0, SEED_MASK, size=count, dtype=np.int64, endpoint=True)
