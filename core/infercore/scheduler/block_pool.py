"""BlockPool: the fixed set of KV cache blocks, their ref counts, the free queue and the prefix cache."""

from __future__ import annotations

from collections import OrderedDict

from infercore.scheduler.block_hash import BlockHash

#: Block 0 is never handed out: the model runner may point padding slots and unused block-table
#: entries at it.
NULL_BLOCK_ID = 0


class KVBlock:
    """One block of the paged KV cache. ``block_hash`` is set while the block is in the prefix cache."""

    __slots__ = ("block_id", "ref_cnt", "block_hash")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: BlockHash | None = None

    def __repr__(self) -> str:
        return f"KVBlock({self.block_id}, ref={self.ref_cnt}, cached={self.block_hash is not None})"


class BlockPool:
    """Hands out blocks and takes them back.

    A block with no users sits in the free queue (an ``OrderedDict`` keyed by block id, so taking
    from the front and removing from the middle are both O(1)). Freed blocks that hold a cached
    prefix go to the back and keep their hash until they are taken again, so the least recently
    freed cached block is evicted first; freed blocks with nothing cached go to the front.
    """

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 2:
            raise ValueError(f"the KV cache needs at least 2 blocks (block {NULL_BLOCK_ID} is reserved), "
                             f"got {num_blocks}; give the cache more memory")
        self.num_blocks = num_blocks
        self.blocks = [KVBlock(i) for i in range(num_blocks)]
        self._free: OrderedDict[int, KVBlock] = OrderedDict(
            (b.block_id, b) for b in self.blocks if b.block_id != NULL_BLOCK_ID)
        self._cached: dict[BlockHash, KVBlock] = {}

    @property
    def num_usable_blocks(self) -> int:
        return self.num_blocks - 1

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def usage(self) -> float:
        """Fraction of usable blocks held by requests (free cached blocks count as free)."""
        return 1.0 - len(self._free) / self.num_usable_blocks

    def get_cached_block(self, block_hash: BlockHash) -> KVBlock | None:
        return self._cached.get(block_hash)

    def allocate(self, num_blocks: int) -> list[KVBlock]:
        """Take ``num_blocks`` blocks from the front of the free queue, evicting their cached prefix."""
        if num_blocks > len(self._free):
            raise ValueError(f"asked for {num_blocks} blocks but only {len(self._free)} are free")
        out = []
        pop = self._free.popitem
        for _ in range(num_blocks):
            block = pop(last=False)[1]
            if block.block_hash is not None:
                del self._cached[block.block_hash]
                block.block_hash = None
            block.ref_cnt = 1
            out.append(block)
        return out

    def touch(self, blocks: list[KVBlock]) -> None:
        """Add a user to each block, taking it off the free queue if it had none."""
        for block in blocks:
            if block.ref_cnt == 0:
                del self._free[block.block_id]
            block.ref_cnt += 1

    def free(self, blocks: list[KVBlock]) -> None:
        """Drop a user from each block. Pass a request's blocks in order: the tail is queued for
        eviction before the head, which more requests are likely to share."""
        free = self._free
        for block in reversed(blocks):
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                free[block.block_id] = block
                if block.block_hash is None:
                    free.move_to_end(block.block_id, last=False)

    def cache_block(self, block: KVBlock, block_hash: BlockHash) -> bool:
        """Put a block whose KV is (or is being) computed into the prefix cache; False if it stays
        out (it is cached already, or another block holds the same prefix)."""
        if block.block_hash is not None or block_hash in self._cached:
            return False
        block.block_hash = block_hash
        self._cached[block_hash] = block
        return True

    def uncache_block(self, block: KVBlock) -> None:
        """Take a block out of the prefix cache (its KV was never written)."""
        if block.block_hash is not None:
            del self._cached[block.block_hash]
            block.block_hash = None

    def reset_prefix_cache(self) -> None:
        """Forget every cached prefix; blocks in use keep their contents."""
        for block in self._cached.values():
            block.block_hash = None
        self._cached.clear()
