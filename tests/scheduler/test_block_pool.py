"""BlockPool and block hashes: free queue order, ref counts, eviction."""

import hashlib

import pytest

from infercore.scheduler.block_hash import extend_block_hashes, hash_block, root_hash
from infercore.scheduler.block_pool import NULL_BLOCK_ID, BlockPool


def test_null_block_is_never_handed_out():
    pool = BlockPool(5)
    assert pool.num_free_blocks == 4
    ids = [b.block_id for b in pool.allocate(4)]
    assert NULL_BLOCK_ID not in ids and sorted(ids) == [1, 2, 3, 4]
    with pytest.raises(ValueError):
        pool.allocate(1)


def test_lru_eviction_order_of_cached_blocks():
    pool = BlockPool(5)
    a, b, c, d = pool.allocate(4)
    for block, name in ((a, b"a"), (b, b"b"), (c, b"c")):
        pool.cache_block(block, hashlib.sha256(name).digest())
    pool.free([b])
    pool.free([a])
    pool.free([c])
    pool.free([d])  # uncached: goes to the front, taken first
    assert [blk.block_id for blk in pool.allocate(1)] == [d.block_id]
    # Then the least recently freed cached block, and its hash leaves the cache.
    assert pool.allocate(1)[0] is b
    assert pool.get_cached_block(hashlib.sha256(b"b").digest()) is None
    assert pool.get_cached_block(hashlib.sha256(b"a").digest()) is a
    assert pool.allocate(1)[0] is a
    assert pool.allocate(1)[0] is c


def test_free_queues_tail_of_a_sequence_before_its_head():
    pool = BlockPool(4)
    blocks = pool.allocate(3)
    for i, block in enumerate(blocks):
        pool.cache_block(block, bytes([i]) * 32)
    pool.free(blocks)
    assert pool.allocate(1)[0] is blocks[2]


def test_touch_takes_a_free_block_off_the_queue_and_counts_refs():
    pool = BlockPool(4)
    (block,) = pool.allocate(1)
    pool.cache_block(block, b"x" * 32)
    pool.free([block])
    assert pool.num_free_blocks == 3 and block.ref_cnt == 0
    pool.touch([block])
    pool.touch([block])
    assert block.ref_cnt == 2 and pool.num_free_blocks == 2
    pool.free([block])
    assert pool.num_free_blocks == 2
    pool.free([block])
    assert pool.num_free_blocks == 3 and pool.get_cached_block(b"x" * 32) is block


def test_duplicate_hash_keeps_first_block():
    pool = BlockPool(4)
    a, b = pool.allocate(2)
    pool.cache_block(a, b"h" * 32)
    pool.cache_block(b, b"h" * 32)
    assert pool.get_cached_block(b"h" * 32) is a and b.block_hash is None


def test_hash_chain_depends_on_parent_tokens_and_salt():
    h = []
    extend_block_hashes(h, list(range(10)), 2, 4, None)
    assert len(h) == 2
    assert h[0] == hash_block(root_hash(None), [0, 1, 2, 3])
    assert h[1] == hash_block(h[0], [4, 5, 6, 7])
    assert h[1] != hash_block(root_hash(None), [4, 5, 6, 7])
    salted = []
    extend_block_hashes(salted, list(range(10)), 2, 4, "s")
    assert salted[0] != h[0] and all(len(x) == 32 for x in salted)
    again = list(h[:1])
    extend_block_hashes(again, list(range(10)), 2, 4, None)
    assert again == h
