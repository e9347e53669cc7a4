"""KV cache groups: the attention layers that share a window share a block table and a block pool.

A model whose layers all attend over the same span (every layer global, or every layer sliding over
one window) has one group, and one block per logical block of a request serves every layer. A model
that mixes windows (Gemma 3: sliding layers beside global ones) gets one group per window. A sliding
group's blocks that left its window go back to its own pool while the request runs, so such a layer
holds about ``window`` tokens of each request instead of the whole context.

The worker turns the groups and the pool it can afford into one :class:`~infercore.wire.kv_layout.KVCacheLayout`
(:func:`kv_cache_layout`), the only description of the cache EngineCore and the runner read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from infercore.wire.kv_layout import KVCacheGroupLayout, KVCacheLayout


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


def kv_cache_layout(groups: Sequence[KVCacheGroup], num_blocks: int, *, block_size: int, max_num_seqs: int,
                    max_num_batched_tokens: int, page_bytes: int = 0, dtype: str = "") -> KVCacheLayout:
    """The layout of ``groups`` when the primary group has ``num_blocks``: each sliding group after the
    first gets :func:`sliding_pool_bound` blocks, never more than the primary's."""
    sizes = group_pool_sizes(num_blocks, [group.window for group in groups], block_size, max_num_seqs,
                             max_num_batched_tokens)
    return KVCacheLayout(block_size=block_size, dtype=dtype, page_bytes=page_bytes, groups=tuple(
        KVCacheGroupLayout(group.window, group.layers, n) for group, n in zip(groups, sizes, strict=True)))
