"""HybridKVCacheManager: the blocks of a model whose attention layers differ in window (Gemma 3)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from infercore.scheduler.block_pool import KVBlock
from infercore.scheduler.request import Request
from infercore.scheduler.single_kv_cache_manager import SingleKVCacheManager
from infercore.wire.kv_layout import interleave


class HybridHit(NamedTuple):
    """A prefix-cache hit in every group: group ``g`` starts with ``skipped[g]`` null blocks (before its
    window) and then holds ``blocks[g]``."""

    blocks: list[list[KVBlock]]
    skipped: list[int]


class HybridKVCacheManager:
    """One :class:`SingleKVCacheManager` per KV cache group (see :mod:`infercore.wire.kv_layout`), each over
    its own pool, kept in step: a request holds the same number of logical blocks in every group, a
    sliding group's entries before its window being the null block once they left it.

    It implements the :class:`~infercore.scheduler.kv_cache_manager.KVCacheManager` protocol. Block ids come interleaved by group.
    Allocation is all or nothing across groups. A prefix hit is as long as every group can serve
    it: the primary (global) group needs every block of the prefix cached, a sliding group only the
    blocks the first computed query reads. Usage, free blocks and the prefix-cache counters are the
    primary group's, the pool whose size the scheduler's limits (one whole sequence, preemption) are
    about.
    """

    sliding_window = None

    def __init__(self, windows: Sequence[int | None], pool_sizes: Sequence[int], block_size: int,
                 enable_caching: bool = True) -> None:
        if len(windows) != len(pool_sizes) or len(windows) < 2:
            raise ValueError(f"a hybrid KV cache needs a window and a pool size per group (at least two), got "
                             f"{list(windows)} and {list(pool_sizes)}")
        self.block_size = block_size
        self.groups = [SingleKVCacheManager(n, block_size, enable_caching, sliding_window=w)
                       for w, n in zip(windows, pool_sizes, strict=True)]
        self.primary = self.groups[0]
        #: As :attr:`SingleKVCacheManager.settled_until`: the least over the groups.
        self.settled_until: dict[str, int] = {}

    @property
    def num_free_blocks(self) -> int:
        return self.primary.num_free_blocks

    @property
    def num_usable_blocks(self) -> int:
        return self.primary.num_usable_blocks

    @property
    def usage(self) -> float:
        return self.primary.usage

    @property
    def prefix_cache_queries(self) -> int:
        return self.primary.prefix_cache_queries

    @property
    def prefix_cache_hits(self) -> int:
        return self.primary.prefix_cache_hits

    def get_computed_blocks(self, request: Request) -> tuple[HybridHit, int]:
        """The longest cached prefix every group can serve, and its length in tokens."""
        primary_hit, _ = self.primary.get_computed_blocks(request)
        empty = HybridHit([[] for _ in self.groups], [0] * len(self.groups))
        longest = len(primary_hit)
        if longest == 0:
            return empty, 0
        bs = self.block_size
        # Per sliding group: its cached blocks, and the last uncached block before each length.
        cached = [group.cached_blocks(request, longest) for group in self.groups[1:]]
        last_missing = []
        for blocks in cached:
            last = [-1] * (longest + 1)
            for i, block in enumerate(blocks):
                last[i + 1] = i if block is None else last[i]
            last_missing.append(last)
        for length in range(longest, 0, -1):
            firsts = [group.first_needed_block(length * bs) for group in self.groups[1:]]
            if all(last[length] < first for last, first in zip(last_missing, firsts, strict=True)):
                hits: list[list[KVBlock]] = [primary_hit[:length]]
                hits += [[b for b in blocks[first:length] if b is not None]
                         for blocks, first in zip(cached, firsts, strict=True)]
                return HybridHit(hits, [0, *firsts]), length * bs
        return empty, 0

    def allocate_slots(self, request: Request, num_new_tokens: int,
                       new_computed_blocks: HybridHit | None = None) -> list[int] | None:
        """:meth:`SingleKVCacheManager.allocate_slots` in every group, or in none (None) when one is short."""
        groups = self.groups
        if new_computed_blocks is None:
            hits: list[list[KVBlock] | None] = [None] * len(groups)
            skipped = [0] * len(groups)
        else:
            hits, skipped = list(new_computed_blocks.blocks), new_computed_blocks.skipped
        for group, hit, skip in zip(groups, hits, skipped, strict=True):
            if not group.can_allocate(request, num_new_tokens, hit, skip):
                return None
        per_group = []
        for group, hit, skip in zip(groups, hits, skipped, strict=True):
            ids = group.allocate_slots(request, num_new_tokens, hit, skip)
            assert ids is not None, "a group refused blocks it said it had"
            per_group.append(ids)
        rid = request.request_id
        self.settled_until[rid] = min(group.settled_until[rid] for group in groups)
        return interleave(per_group)

    def take_newly_cached(self) -> list[list[KVBlock]]:
        """Each group's blocks put into its prefix cache since the previous call."""
        return [group.take_newly_cached() for group in self.groups]

    def uncache(self, taken: list[list[KVBlock]]) -> None:
        """Take what :meth:`take_newly_cached` returned out of the prefix caches again."""
        for group, blocks in zip(self.groups, taken, strict=True):
            group.uncache(blocks)

    def free(self, request: Request) -> None:
        self.settled_until.pop(request.request_id, None)
        for group in self.groups:
            group.free(request)

    def get_block_ids(self, request: Request) -> list[int]:
        """The request's block ids in every group, interleaved."""
        return interleave([group.get_block_ids(request) for group in self.groups])

    def reset_prefix_cache(self) -> None:
        for group in self.groups:
            group.reset_prefix_cache()
