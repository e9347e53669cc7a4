"""ALiBi: per-head linear biases on attention scores instead of position embeddings.

A model passes :func:`alibi_slopes` to its :class:`~infercore.attention.Attention` layers
(``alibi_slopes=``); the backend adds ``slope_h * (t - p)`` to head ``h``'s score of query
position ``p`` and key position ``t`` (the custom op ``alibi_bias`` is its torch reference).
"""

from __future__ import annotations

import math


def alibi_slopes(num_heads: int) -> tuple[float, ...]:
    """The slopes of the ALiBi paper (and BLOOM/MPT) for ``num_heads`` heads: a geometric sequence
    from ``2^(-8/n)`` for the nearest power of two ``n``, interleaved for the remaining heads."""
    if num_heads <= 0:
        raise ValueError(f"ALiBi needs a positive number of heads, got {num_heads}")
    closest = 2 ** math.floor(math.log2(num_heads))
    base = 2.0 ** (-8.0 / closest)
    slopes = [base ** (i + 1) for i in range(closest)]
    if closest < num_heads:
        extra = 2.0 ** (-4.0 / closest)
        slopes += [extra ** (2 * i + 1) for i in range(num_heads - closest)]
    return tuple(slopes)
