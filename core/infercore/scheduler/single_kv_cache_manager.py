"""SingleKVCacheManager: which blocks each request holds in one pool, and prefix-cache lookups."""

from __future__ import annotations

from infercore.scheduler.block_hash import extend_block_hashes
from infercore.scheduler.block_pool import NULL_BLOCK_ID, BlockPool, KVBlock
from infercore.scheduler.request import Request


class SingleKVCacheManager:
    """The :class:`~infercore.scheduler.kv_cache_manager.KVCacheManager` of one KV cache group: gives requests the blocks their tokens need and shares full blocks of equal prefixes.

    A request's blocks go into the prefix cache as soon as they are allocated for tokens that the
    coming step computes, so a request scheduled later in the same step can already share them.
    This relies on the runner writing a layer's KV for every token of the step before that layer's
    attention reads the cache. Blocks whose KV was never written leave the cache again: those past
    a request's computed tokens when it frees them (it was preempted before its step ran), and those
    of a step that failed (the scheduler takes them with :meth:`take_newly_cached` each step).

    With ``sliding_window`` set (every layer the blocks serve slides over that window: see
    :mod:`infercore.wire.kv_layout`), a query at position ``p`` reads keys after ``p - sliding_window`` only,
    so a block whose last token is at or before ``num_computed_tokens - sliding_window`` is never read
    again. Such blocks go back to the pool (keeping their prefix-cache entry) the next time the
    request allocates; the request's table keeps the null block in their place. Backends must then
    read no key outside a query's window (the attention kernels start at the window's first key).
    """

    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = True,
                 sliding_window: int | None = None) -> None:
        if sliding_window is not None and sliding_window <= 0:
            raise ValueError(f"sliding_window must be positive or None, got {sliding_window}")
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.sliding_window = sliding_window
        self.pool = BlockPool(num_blocks)
        self._req_blocks: dict[str, list[KVBlock]] = {}
        #: Per request, how many of its leading blocks went through the prefix cache.
        self._num_cached_blocks: dict[str, int] = {}
        #: Per request, how many of its leading blocks left the window and went back to the pool.
        self._num_skipped_blocks: dict[str, int] = {}
        #: Per request holding blocks, the most tokens (computed plus new) it may reach with nothing for
        #: :meth:`allocate_slots` to do: its blocks hold them, no block fills (for the prefix cache) and
        #: none leaves the window. The scheduler checks it to skip the call on most decode steps.
        self.settled_until: dict[str, int] = {}
        #: Blocks put into the prefix cache since the last :meth:`take_newly_cached`.
        self._newly_cached: list[KVBlock] = []
        #: Cumulative prefix-cache counters, in tokens.
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    @property
    def num_usable_blocks(self) -> int:
        return self.pool.num_usable_blocks

    @property
    def usage(self) -> float:
        return self.pool.usage

    def get_computed_blocks(self, request: Request) -> tuple[list[KVBlock], int]:
        """The longest cached prefix of a request not yet holding blocks, and its length in tokens.

        At least one token is always left to compute, so the step samples the next token. Requests
        that want prompt logprobs skip the cache (every prompt position must be computed).
        """
        if not self.enable_caching or request.sampling_params.prompt_logprobs is not None:
            return [], 0
        bs = self.block_size
        max_hit_blocks = (request.num_tokens - 1) // bs
        hashes = request.block_hashes
        extend_block_hashes(hashes, request.all_token_ids, max_hit_blocks, bs, request.cache_salt, request.lora_id,
                            request.mm_features)
        hit: list[KVBlock] = []
        get = self.pool.get_cached_block
        for i in range(max_hit_blocks):
            block = get(hashes[i])
            if block is None:
                break
            hit.append(block)
        return hit, len(hit) * bs

    def cached_blocks(self, request: Request, num_blocks: int) -> list[KVBlock | None]:
        """The prefix cache's block for each of the request's first ``num_blocks`` blocks (None: not cached);
        the request's hashes must reach that far."""
        get = self.pool.get_cached_block
        return [get(h) for h in request.block_hashes[:num_blocks]]

    def first_needed_block(self, num_computed_tokens: int) -> int:
        """The first block a query at position ``num_computed_tokens`` or later can read (0 without a window)."""
        if self.sliding_window is None:
            return 0
        return max(0, num_computed_tokens - self.sliding_window + 1) // self.block_size

    def allocate_slots(
        self, request: Request, num_new_tokens: int, new_computed_blocks: list[KVBlock] | None = None,
        num_skipped: int = 0,
    ) -> list[int] | None:
        """Make room for ``num_new_tokens`` more tokens after the computed ones.

        ``new_computed_blocks`` (from :meth:`get_computed_blocks`, for a request being scheduled
        from the waiting queue) are prefix-cache hits placed before the new tokens; passing a
        list, even empty, counts a prefix-cache query. ``num_skipped`` null blocks go before the hits:
        with a window, the leading blocks of a hit that no query of the request will read. Returns the
        ids of the blocks appended to the request's block table (nulls and hits first), or None,
        changing nothing, when too few blocks are free.
        """
        bs = self.block_size
        rid = request.request_id
        blocks = self._held_blocks(request)
        if blocks is not None and new_computed_blocks is None:
            # Decode fast path: the tokens fit the blocks held.
            num_tokens = request.num_computed_tokens + num_new_tokens
            if num_tokens <= len(blocks) * bs:
                if self.enable_caching and num_tokens % bs < num_new_tokens:  # a block may have filled
                    self._cache_full_blocks(request, blocks, min(num_tokens, request.num_tokens))
                self._settle(rid, blocks)
                return []
        hit = new_computed_blocks or []
        num_tokens, num_needed = self._plan(request, blocks, num_new_tokens, hit, num_skipped)
        if num_needed is None:
            return None
        new_ids: list[int] = []
        if num_needed > 0 or hit or num_skipped:
            pool = self.pool
            pool.touch(hit)
            null = pool.blocks[NULL_BLOCK_ID]
            appended = [null] * num_skipped + hit + (pool.allocate(num_needed) if num_needed > 0 else [])
            if blocks is None:
                blocks = self._req_blocks[rid] = []
            if num_skipped:
                # The skipped blocks count as left the window and as handled by the prefix cache.
                self._num_skipped_blocks[rid] = num_skipped
                self._num_cached_blocks[rid] = num_skipped
            blocks.extend(appended)
            new_ids = [b.block_id for b in appended]
        if new_computed_blocks is not None:
            self.prefix_cache_queries += request.num_tokens
            self.prefix_cache_hits += (num_skipped + len(hit)) * bs
        if blocks is not None:
            if self.enable_caching:
                self._cache_full_blocks(request, blocks, min(num_tokens, request.num_tokens))
            self._settle(rid, blocks)
        return new_ids

    def can_allocate(self, request: Request, num_new_tokens: int, new_computed_blocks: list[KVBlock] | None = None,
                     num_skipped: int = 0) -> bool:
        """Whether :meth:`allocate_slots` with these arguments would succeed (blocks that left the window
        go back to the pool first, as there)."""
        blocks = self._held_blocks(request)
        return self._plan(request, blocks, num_new_tokens, new_computed_blocks or [], num_skipped)[1] is not None

    def _held_blocks(self, request: Request) -> list[KVBlock] | None:
        """The request's blocks (None: it holds none), those that left the window given back first."""
        blocks = self._req_blocks.get(request.request_id)
        if blocks is not None and self.sliding_window is not None:
            self._free_out_of_window(request, blocks, self.sliding_window)
        return blocks

    def _plan(self, request: Request, blocks: list[KVBlock] | None, num_new_tokens: int, hit: list[KVBlock],
              num_skipped: int) -> tuple[int, int | None]:
        """The tokens the request's table will cover, and the new blocks to take from the pool for them
        (None: too few are free)."""
        num_tokens = request.num_computed_tokens + (num_skipped + len(hit)) * self.block_size + num_new_tokens
        num_held = len(blocks) if blocks is not None else 0
        num_needed = -(-num_tokens // self.block_size) - num_held - num_skipped - len(hit)
        if num_needed > 0 and num_needed > self.pool.num_free_blocks - sum(1 for b in hit if b.ref_cnt == 0):
            return num_tokens, None
        return num_tokens, num_needed

    def _settle(self, rid: str, blocks: list[KVBlock]) -> None:
        """Record how far the request may grow before :meth:`allocate_slots` has work again."""
        bs = self.block_size
        limit = len(blocks) * bs
        if self.enable_caching:
            # The next block fills at (cached + 1) * bs tokens.
            limit = min(limit, (self._num_cached_blocks.get(rid, 0) + 1) * bs - 1)
        if self.sliding_window is not None:
            # The next block leaves the window once num_computed_tokens (< tokens after the step)
            # reaches (skipped + 1) * bs + window - 1.
            limit = min(limit, (self._num_skipped_blocks.get(rid, 0) + 1) * bs + self.sliding_window - 1)
        self.settled_until[rid] = limit

    def _cache_full_blocks(self, request: Request, blocks: list[KVBlock], num_tokens: int) -> None:
        num_full = num_tokens // self.block_size
        rid = request.request_id
        start = self._num_cached_blocks.get(rid, 0)
        if num_full <= start:
            return
        hashes = request.block_hashes
        extend_block_hashes(hashes, request.all_token_ids, num_full, self.block_size, request.cache_salt,
                            request.lora_id, request.mm_features)
        cache_block = self.pool.cache_block
        newly_cached = self._newly_cached
        for i in range(start, num_full):
            if cache_block(blocks[i], hashes[i]):
                newly_cached.append(blocks[i])
        self._num_cached_blocks[rid] = num_full

    def _free_out_of_window(self, request: Request, blocks: list[KVBlock], window: int) -> None:
        """Give back the leading blocks no query of this request can read any more: the next query is
        at position ``num_computed_tokens`` or later and reads no key before ``position - window + 1``."""
        rid = request.request_id
        first_needed = max(0, request.num_computed_tokens - window + 1) // self.block_size
        start = self._num_skipped_blocks.get(rid, 0)
        if first_needed <= start:
            return
        null = self.pool.blocks[NULL_BLOCK_ID]
        gone = blocks[start:first_needed]
        blocks[start:first_needed] = [null] * len(gone)
        self.pool.free(gone)
        self._num_skipped_blocks[rid] = first_needed

    def take_newly_cached(self) -> list[KVBlock]:
        """The blocks put into the prefix cache since the previous call: those a step is about to write."""
        taken, self._newly_cached = self._newly_cached, []
        return taken

    def uncache(self, taken: list[KVBlock]) -> None:
        """Take blocks from :meth:`take_newly_cached` out of the prefix cache again (their step failed)."""
        for block in taken:
            self.pool.uncache_block(block)

    def free(self, request: Request) -> None:
        """Give back a request's blocks. Call it before ``num_computed_tokens`` is reset: blocks past
        the computed tokens are taken out of the prefix cache, as their KV was never written."""
        blocks = self._req_blocks.pop(request.request_id, None)
        self._num_cached_blocks.pop(request.request_id, None)
        self.settled_until.pop(request.request_id, None)
        skipped = self._num_skipped_blocks.pop(request.request_id, 0)
        if blocks is None:
            return
        pool = self.pool
        for block in blocks[request.num_computed_tokens // self.block_size:]:
            if block.ref_cnt == 1:
                pool.uncache_block(block)
        pool.free(blocks[skipped:])

    def get_block_ids(self, request: Request) -> list[int]:
        return [b.block_id for b in self._req_blocks.get(request.request_id, ())]

    def get_blocks(self, request: Request) -> list[KVBlock]:
        return self._req_blocks.get(request.request_id, [])

    def reset_prefix_cache(self) -> None:
        self.pool.reset_prefix_cache()
