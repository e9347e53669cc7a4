"""KVCacheManager: what the scheduler asks of the blocks of its requests, whatever the KV layout."""

from __future__ import annotations

from typing import Any, Protocol

from infercore.scheduler.hybrid_kv_cache_manager import HybridKVCacheManager
from infercore.scheduler.request import Request
from infercore.scheduler.single_kv_cache_manager import SingleKVCacheManager
from infercore.wire.kv_layout import KVCacheLayout


class KVCacheManager(Protocol):
    """The blocks each request holds, the prefix cache, and the pool's counters.

    :class:`SingleKVCacheManager` implements it for a layout of one group, :class:`HybridKVCacheManager`
    for several (one single manager per group, kept in step). Block ids are the layout's encoding
    (interleaved by group, :mod:`infercore.wire.kv_layout`). A prefix hit (``get_computed_blocks``) is
    opaque to the scheduler: it hands it back to ``allocate_slots`` as it got it.
    """

    block_size: int
    #: Per request holding blocks, the most tokens it may reach with nothing for ``allocate_slots`` to do.
    settled_until: dict[str, int]

    @property
    def num_free_blocks(self) -> int: ...

    @property
    def num_usable_blocks(self) -> int: ...

    @property
    def usage(self) -> float: ...

    @property
    def prefix_cache_queries(self) -> int: ...

    @property
    def prefix_cache_hits(self) -> int: ...

    def get_computed_blocks(self, request: Request) -> tuple[Any, int]:
        """The longest cached prefix of ``request`` (an opaque hit) and its length in tokens."""
        ...

    def allocate_slots(self, request: Request, num_new_tokens: int,
                       new_computed_blocks: Any = None) -> list[int] | None:
        """Blocks for ``num_new_tokens`` more tokens (after a hit, when given): the new block ids, or None
        when the pool is short (nothing is allocated then)."""
        ...

    def take_newly_cached(self) -> Any:
        """The blocks put into the prefix cache since the previous call."""
        ...

    def uncache(self, taken: Any) -> None:
        """Take what :meth:`take_newly_cached` returned out of the prefix cache again (a failed step)."""
        ...

    def free(self, request: Request) -> None: ...

    def get_block_ids(self, request: Request) -> list[int]: ...

    def reset_prefix_cache(self) -> None: ...


def make_kv_cache_manager(layout: KVCacheLayout, enable_caching: bool) -> KVCacheManager:
    """The manager a layout needs: one pool for one group, one per group for several."""
    if layout.num_groups == 1:
        return SingleKVCacheManager(layout.num_blocks, layout.block_size, enable_caching,
                                    sliding_window=layout.groups[0].window)
    return HybridKVCacheManager(layout.windows, layout.pool_sizes, layout.block_size, enable_caching)
