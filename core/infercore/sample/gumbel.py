"""Random draws for sampling: per-request generators and the Gumbel-max trick.

Sampling draws ``q ~ Exp(1)`` per token and takes ``argmax(probs / q)``, which picks token ``i`` with
probability ``probs[i]``. In log space this is ``argmax(logits - log q)``: the softmax normaliser is one
constant per row, so no softmax is needed. A row with its own generator draws a full vocabulary of
numbers from it every step, so its tokens never depend on which other requests share the batch.
"""

from __future__ import annotations

import torch

# Exponential draws can be exactly 0 in float32; log(0) would turn a masked -inf logit into NaN.
_TINY = torch.finfo(torch.float32).tiny


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

