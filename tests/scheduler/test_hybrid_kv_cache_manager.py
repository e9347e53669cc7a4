"""KV cache groups (Gemma 3's sliding layers beside global ones): each group keeps a block table and a
pool of its own, a sliding group gives back the blocks that left its window, block ids travel
interleaved, and a prefix hit is as long as every group can serve it.

The engine-level check is a fake runner with one token-level cache per group that writes every
scheduled position through its group's table and, before sampling, reads each group's window back
(the whole context for the global group): with shared prefixes, chunked prefill and preemption it
must sample what full attention in one group samples.
"""

from __future__ import annotations

import pytest
from sched_fakes import GroupedRunner, kv_layout, make_request

from infercore.config import CacheConfig, SchedulerConfig
from infercore.kv_cache.groups import (
    KVCacheGroup,
    group_pool_sizes,
    kv_cache_groups,
    primary_blocks_for_budget,
    sliding_pool_bound,
)
from infercore.scheduler.block_pool import NULL_BLOCK_ID
from infercore.scheduler.hybrid_kv_cache_manager import HybridKVCacheManager
from infercore.scheduler.scheduler import Scheduler
from infercore.wire.kv_layout import interleave

BS = 4


def test_layers_group_by_window_global_first_then_widest() -> None:
    assert kv_cache_groups([8, 8, None, 8, 4, None]) == [
        KVCacheGroup(None, (2, 5)), KVCacheGroup(8, (0, 1, 3)), KVCacheGroup(4, (4,))]
    assert kv_cache_groups([None, None]) == [KVCacheGroup(None, (0, 1))]
    assert kv_cache_groups([6, 6]) == [KVCacheGroup(6, (0, 1))]


def test_without_hybrid_groups_one_group_takes_the_window_that_bounds_every_layer() -> None:
    assert kv_cache_groups([8, None, 8], hybrid=False) == [KVCacheGroup(None, (0, 1, 2))]
    assert kv_cache_groups([8, 4, 8], hybrid=False) == [KVCacheGroup(8, (0, 1, 2))]
    assert kv_cache_groups([4, 4], hybrid=False) == [KVCacheGroup(4, (0, 1))]


def test_a_sliding_pool_holds_every_seat_s_window_and_one_step_never_more_than_the_primary() -> None:
    # 8 seats x (blocks over 7 earlier tokens + 2 partly filled) + 32 new tokens + the null block.
    assert sliding_pool_bound(8, BS, 8, 32) == 8 * (2 + 2) + 8 + 1
    assert group_pool_sizes(500, [None, 8], BS, 8, 32) == [500, 41]
    assert group_pool_sizes(20, [None, 8], BS, 8, 32) == [20, 20]
    assert group_pool_sizes(20, [None], BS, 8, 32) == [20]


def test_the_budget_search_finds_the_most_primary_blocks_that_fit() -> None:
    def cache_bytes(n: int) -> int:  # one global layer, three sliding ones capped at 41 blocks, 10 B a page
        return 10 * n + 3 * 10 * min(n, 41)

    assert primary_blocks_for_budget(10_000, 10**6, cache_bytes) == (10_000 - 1230) // 10
    assert primary_blocks_for_budget(400, 10**6, cache_bytes) == 10
    assert primary_blocks_for_budget(5, 10**6, cache_bytes) == 0
    assert primary_blocks_for_budget(10**9, 77, cache_bytes) == 77


def test_interleave_takes_one_block_of_each_group_in_turn() -> None:
    assert interleave([[1, 2, 3]]) == [1, 2, 3]
    assert interleave([[1, 2], [7, 8], [4, 5]]) == [1, 7, 4, 2, 8, 5]
    with pytest.raises(ValueError, match="different numbers"):
        interleave([[1, 2], [7]])


def _manager(primary: int = 40, sliding: int = 12, caching: bool = True) -> HybridKVCacheManager:
    return HybridKVCacheManager([None, 6], [primary, sliding], BS, caching)


def _prefill(kv: HybridKVCacheManager, request, hit=None) -> list[int]:
    ids = kv.allocate_slots(request, request.num_tokens - request.num_computed_tokens, hit)
    assert ids is not None
    request.num_computed_tokens = request.num_tokens
    return ids


def test_the_sliding_group_frees_what_left_its_window_while_the_global_group_keeps_everything() -> None:
    kv = _manager()
    req = make_request("a", 20)
    ids = _prefill(kv, req, kv.get_computed_blocks(req)[0])
    assert len(ids) == 10  # 5 blocks in each group, interleaved
    primary, sliding = kv.groups
    assert ids[0::2] == primary.get_block_ids(req) and ids[1::2] == sliding.get_block_ids(req)
    new = kv.allocate_slots(req, 1)  # the query at 20 reads keys 15..20 in the sliding layers
    assert new is not None and len(new) == 2
    assert NULL_BLOCK_ID not in primary.get_block_ids(req)
    assert sliding.get_block_ids(req)[:3] == [NULL_BLOCK_ID] * 3
    assert kv.get_block_ids(req)[1::2] == sliding.get_block_ids(req)
    assert sliding.num_free_blocks == sliding.num_usable_blocks - 3  # blocks 3, 4 and the new one
    assert kv.num_free_blocks == primary.num_free_blocks == primary.num_usable_blocks - 6
    kv.free(req)
    assert all(g.num_free_blocks == g.num_usable_blocks for g in kv.groups)
    assert req.request_id not in kv.settled_until


def test_allocation_is_all_or_nothing_across_groups() -> None:
    kv = _manager(primary=40, sliding=4)  # 3 usable sliding blocks
    a = make_request("a", 12)
    _prefill(kv, a)
    b = make_request("b", 8)
    free_before = [g.num_free_blocks for g in kv.groups]
    assert kv.allocate_slots(b, 8, kv.get_computed_blocks(b)[0]) is None
    assert [g.num_free_blocks for g in kv.groups] == free_before
    assert kv.get_block_ids(b) == []


def test_a_prefix_hit_needs_only_the_window_in_a_sliding_group() -> None:
    kv = _manager(primary=40, sliding=12)
    prompt = list(range(100, 124))  # six full blocks
    a = make_request("a", prompt)
    a_ids = _prefill(kv, a)
    kv.free(a)
    # Drop the sliding group's first blocks: only blocks 4 and 5 (positions 16..23) stay cached.
    sliding = kv.groups[1]
    for block in sliding.pool.blocks:
        if block.block_id in a_ids[1::2][:4]:
            sliding.pool.uncache_block(block)
    b = make_request("b", [*prompt, 7])
    hit, num_hit = kv.get_computed_blocks(b)
    assert num_hit == 24
    # The first query (position 24) reads keys 19..24: the sliding group needs blocks 4 and 5 only.
    assert hit.skipped == [0, 4]
    assert [blk.block_id for blk in hit.blocks[0]] == a_ids[0::2]
    assert [blk.block_id for blk in hit.blocks[1]] == a_ids[1::2][4:]
    ids = kv.allocate_slots(b, 1, hit)
    assert ids is not None
    assert ids[1::2][:4] == [NULL_BLOCK_ID] * 4 and ids[1::2][4:6] == a_ids[1::2][4:]
    assert kv.prefix_cache_hits == 24


def test_a_prefix_hit_shortens_to_what_every_group_still_holds() -> None:
    kv = _manager(primary=40, sliding=12)
    prompt = list(range(100, 124))
    a = make_request("a", prompt)
    a_ids = _prefill(kv, a)
    kv.free(a)
    sliding = kv.groups[1]
    # Keep the sliding group's blocks 0..3 only: the longest hit whose window they cover is 4 blocks.
    for block in sliding.pool.blocks:
        if block.block_id in a_ids[1::2][4:]:
            sliding.pool.uncache_block(block)
    b = make_request("b", [*prompt, 7])
    hit, num_hit = kv.get_computed_blocks(b)
    assert num_hit == 16 and hit.skipped == [0, 2]
    assert [blk.block_id for blk in hit.blocks[1]] == a_ids[1::2][2:4]


def _serve(windows: tuple[int | None, ...], num_blocks: int) -> tuple[dict[str, list[int]], Scheduler, int]:
    """Requests sharing prefixes (hits), longer than a step's budget (chunks), in a small pool (preemption)."""
    sched = Scheduler(SchedulerConfig(max_num_seqs=6), CacheConfig(block_size=BS), max_model_len=96,
                      kv_layout=kv_layout(num_blocks, BS, tuple(windows), max_num_seqs=6, budget=24),
                      max_num_batched_tokens=24)
    stem = list(range(200, 230))
    for i in range(8):
        prompt = stem[: 12 + 3 * i] + [300 + i] * (i % 3)
        sched.add_request(make_request(f"r{i}", prompt, max_tokens=30 + 2 * i, ignore_eos=True))
    runner = GroupedRunner(BS, list(windows))
    results: dict[str, list[int]] = {}
    most_sliding = 0
    for _ in range(2000):
        if not sched.has_unfinished_requests():
            break
        out = sched.schedule()
        kv = sched.kv_cache_manager
        if isinstance(kv, HybridKVCacheManager):
            most_sliding = max(most_sliding, kv.groups[1].pool.num_usable_blocks - kv.groups[1].num_free_blocks)
        for o in sched.update_from_output(out, runner.execute(out)).outputs:
            results.setdefault(o.request_id, []).extend(o.new_token_ids)
    assert not sched.has_unfinished_requests()
    return results, sched, most_sliding


def test_hybrid_groups_sample_what_full_attention_samples_through_hits_chunks_and_preemption() -> None:
    full, full_sched, _ = _serve((None,), num_blocks=40)
    hybrid, sched, most_sliding = _serve((None, 6), num_blocks=40)
    assert hybrid == full and len(hybrid) == 8
    assert full_sched.num_preemptions > 0 and sched.num_preemptions > 0
    kv = sched.kv_cache_manager
    assert isinstance(kv, HybridKVCacheManager)
    assert kv.prefix_cache_hits > 0
    assert all(g.num_free_blocks == g.num_usable_blocks for g in kv.groups)
    # Six seats over a 6-token window hold a few blocks each; the global group held up to 39.
    assert most_sliding <= 6 * (-(-5 // BS) + 2) + 24 // BS


def test_a_failed_step_takes_every_group_s_new_blocks_out_of_the_prefix_cache() -> None:
    sched = Scheduler(SchedulerConfig(max_num_seqs=4), CacheConfig(block_size=BS), max_model_len=64,
                      kv_layout=kv_layout(40, BS, (None, 6), max_num_seqs=4, budget=32),
                      max_num_batched_tokens=32)
    sched.add_request(make_request("a", list(range(100, 120)), max_tokens=4))
    sched.schedule()
    assert sched.fail_unfolded_steps() == ["a"]
    b = make_request("b", list(range(100, 120)))
    assert sched.kv_cache_manager.get_computed_blocks(b)[1] == 0
