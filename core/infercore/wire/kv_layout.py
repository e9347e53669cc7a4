"""The KV cache layout: made once by the worker that allocates the cache, read by the scheduler and the
runner, never recomputed by either.

A model whose layers all attend over the same span has one group; one that mixes windows (Gemma 3:
sliding layers beside global ones) has one group per window, the widest first (the *primary* group,
whose pool the scheduler's limits are stated in). Each group has a pool of its own, with its own null
block 0.

Block ids of a request cross the scheduler–runner boundary as one flat list *interleaved* by group:
entry ``j * G + g`` is group ``g``'s ``j``-th block, ``G = num_groups`` (with one group, the plain
list). The flat list keeps ``SchedulerOutput`` and the runner's block table one array each on the
per-step path; :meth:`KVCacheLayout.split_block_ids` and :func:`interleave` are the encoding.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec


class KVCacheGroupLayout(msgspec.Struct, frozen=True, array_like=True):
    """Attention layers (by layer index) that read the same window of each request (None: all of it),
    and the blocks of their pool."""

    window: int | None
    layers: tuple[int, ...]
    num_blocks: int


class KVCacheLayout(msgspec.Struct, frozen=True, array_like=True):
    """Every fact of the allocated KV cache that the scheduler or the runner needs.

    ``page_bytes`` is one block of one layer (K and V) on one rank; ``dtype`` the cache's torch dtype
    by name (``"bfloat16"``, ``"float8_e4m3fn"``)."""

    block_size: int
    dtype: str
    page_bytes: int
    groups: tuple[KVCacheGroupLayout, ...]

    @property
    def num_groups(self) -> int:
        return len(self.groups)

    @property
    def num_blocks(self) -> int:
        """Blocks of the primary group's pool."""
        return self.groups[0].num_blocks

    @property
    def windows(self) -> list[int | None]:
        """The window of each group, the primary first."""
        return [group.window for group in self.groups]

    @property
    def pool_sizes(self) -> list[int]:
        """Blocks of each group's pool, the primary first."""
        return [group.num_blocks for group in self.groups]

    @property
    def layer_groups(self) -> list[int]:
        """The group of each attention layer, by layer index."""
        found = [0] * sum(len(group.layers) for group in self.groups)
        for g, group in enumerate(self.groups):
            for layer in group.layers:
                found[layer] = g
        return found

    @property
    def total_bytes(self) -> int:
        """Bytes of the whole cache on one rank."""
        return sum(self.page_bytes * len(group.layers) * group.num_blocks for group in self.groups)

    def split_block_ids(self, block_ids: Sequence[int]) -> list[list[int]]:
        """An interleaved block id list as one list per group."""
        n = self.num_groups
        return [list(block_ids[g::n]) for g in range(n)]

    def describe(self) -> str:
        """One line for the log: blocks per group and their windows."""
        if self.num_groups == 1:
            return f"{self.num_blocks} blocks of {self.block_size} tokens ({self.total_bytes / 2**20:.1f} MiB)"
        windows = " / ".join("global" if w is None else str(w) for w in self.windows)
        return (f"{' / '.join(map(str, self.pool_sizes))} blocks of {self.block_size} tokens for the layer groups "
                f"of windows {windows} ({self.total_bytes / 2**20:.1f} MiB)")


def interleave(per_group: Sequence[Sequence[int]]) -> list[int]:
    """Per-group block id lists of equal length as one list, ``[g0[0], g1[0], ..., g0[1], g1[1], ...]``."""
    if len(per_group) == 1:
        return list(per_group[0])
    length = len(per_group[0])
    if any(len(ids) != length for ids in per_group):
        raise ValueError(f"the groups appended different numbers of blocks: {[len(ids) for ids in per_group]}")
    return [block_id for row in zip(*per_group, strict=True) for block_id in row]
