"""KV cache groups: the attention layers that share a window share a block table and a block pool.

A model whose layers all attend over the same span (every layer global, or every layer sliding over
one window) has one group, and one block per logical block of a request serves every layer. A model
that mixes windows (Gemma 3: sliding layers beside global ones) gets one group per window. A sliding
group's blocks that left its window go back to its own pool while the request runs, so such a layer
holds about ``window`` tokens of each request instead of the whole context.

Block ids are per group (each pool has its own null block 0). Everything that carries a request's
block ids between the scheduler and the runner carries them *interleaved*: entry ``j * G + g`` is
group ``g``'s block for the request's ``j``-th block, ``G`` the number of groups. With one group that
is the plain list of block ids.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class KVCacheGroup:
    """Attention layers (by layer index) that read the same window of each request (None: all of it)."""

    window: int | None
    layers: tuple[int, ...]


def kv_cache_groups(layer_windows: Sequence[int | None], hybrid: bool = True) -> list[KVCacheGroup]:
    """The groups of layers with equal windows: the widest window first (global layers before any
    sliding ones), which is the group whose pool the scheduler's limits are stated in.

    ``hybrid=False`` puts every layer in one group whose window is the widest (None with a global
    layer): what bounds every layer's reads, so no block leaves a window before it left all of them."""
    by_window: dict[int | None, list[int]] = {}
    for layer, window in enumerate(layer_windows):
        by_window.setdefault(window, []).append(layer)
    order = sorted(by_window, key=lambda w: -math.inf if w is None else -w)
    if not hybrid and len(order) > 1:
        return [KVCacheGroup(order[0], tuple(range(len(layer_windows))))]
    return [KVCacheGroup(w, tuple(by_window[w])) for w in order]


def sliding_pool_bound(window: int, block_size: int, max_num_seqs: int, max_num_batched_tokens: int) -> int:
    """Blocks a sliding group needs when every running request holds its window and one step's new
    tokens: per request the blocks that can overlap ``window - 1`` earlier tokens (plus the partly
    filled ends), and the step's new tokens once, and the null block.

    The bound sizes the pool, it does not guard it: a request that keeps a long chunk's blocks
    while it is not scheduled may push a group past it, and then the scheduler preempts as it does
    when the primary pool runs out."""
    return max_num_seqs * (-(-(window - 1) // block_size) + 2) + -(-max_num_batched_tokens // block_size) + 1


def group_pool_sizes(num_blocks: int, windows: Sequence[int | None], block_size: int, max_num_seqs: int,
                     max_num_batched_tokens: int) -> list[int]:
    """Blocks in each group's pool when the primary group (the first, see :func:`kv_cache_groups`) has
    ``num_blocks``: a sliding group after the first gets its bound, never more than the primary's."""
    sizes = [num_blocks]
    for window in windows[1:]:
        assert window is not None, "only the first group may be global"
        sizes.append(min(num_blocks, sliding_pool_bound(window, block_size, max_num_seqs, max_num_batched_tokens)))
    return sizes


def primary_blocks_for_budget(budget: int, cap: int, bytes_for: Callable[[int], int]) -> int:
    """The most primary-group blocks (at most ``cap``) whose cache, ``bytes_for(n)`` bytes in all groups
    (non-decreasing in ``n``), fits ``budget``; 0 when not even one does."""
    lo, hi = 0, cap
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if bytes_for(mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def interleave(per_group: Sequence[Sequence[int]]) -> list[int]:
    """Per-group block id lists of equal length as one list, ``[g0[0], g1[0], ..., g0[1], g1[1], ...]``."""
    if len(per_group) == 1:
        return list(per_group[0])
    length = len(per_group[0])
    if any(len(ids) != length for ids in per_group):
        raise ValueError(f"the groups appended different numbers of blocks: {[len(ids) for ids in per_group]}")
    return [block_id for row in zip(*per_group, strict=True) for block_id in row]
