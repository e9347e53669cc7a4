"""Random draws for sampling: per-row seeds, per-request generators and the Gumbel-max trick.

Sampling draws ``q ~ Exp(1)`` per token and takes ``argmax(probs / q)``, which picks token ``i`` with
probability ``probs[i]``. In log space this is ``argmax(logits - log q)``: the softmax normaliser is one
constant per row, so no softmax is needed.

Every sampled row has a 63-bit *row seed* each step. A request with a seed gets
:func:`step_seed` of its seed and output index, so its draws never depend on which other requests
share the batch, nor on preemption; other rows get fresh seeds from a numpy generator. The common
path hands the seeds to the ``gumbel_argmax`` custom op, which draws one exponential per vocabulary
entry from them. The top-k/top-p path seeds the request's torch generator with the same row seed and
draws a full vocabulary of numbers from it (:func:`log_exponential`).
"""

from __future__ import annotations

import numpy as np
import torch

# Exponential draws can be exactly 0 in float32; log(0) would turn a masked -inf logit into NaN.
_TINY = torch.finfo(torch.float32).tiny


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


def make_generator(seed: int | None, device: torch.device | str) -> torch.Generator | None:
    """A generator seeded for one request, or None when the request has no seed."""
    if seed is None:
        return None
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator


def log_exponential(
    shape: tuple[int, int],
    generators: dict[int, torch.Generator],
    vocab_size: int,
    device: torch.device,
    candidate_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """``log(q)`` with ``q ~ Exp(1)``: sampling takes ``argmax(logits - log(q))``.

    Rows without a generator share one batched draw from the global RNG. Rows in ``generators`` draw
    ``vocab_size`` numbers from their own generator, indexed by token id; when the logits are a
    candidate subset (``candidate_ids`` [B, C]) those rows keep the numbers of their candidates, so
    the outcome is the same as sampling over the whole vocabulary.
    """
    q = torch.empty(shape, dtype=torch.float32, device=device).exponential_()
    for row, generator in generators.items():
        if candidate_ids is None:
            q[row].exponential_(generator=generator)
        else:
            full = torch.empty(vocab_size, dtype=torch.float32, device=device).exponential_(generator=generator)
            q[row] = full[candidate_ids[row]]
    return q.clamp_(min=_TINY).log_()

