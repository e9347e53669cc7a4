"""Blocks that left every layer's sliding window go back to the pool while their request runs.

The rule: when every layer a KV cache group serves slides over ``window``, a query at position ``p``
reads keys after ``p - window`` only, so the group's blocks wholly before
``num_computed_tokens - window + 1`` are freed (a group of global layers frees nothing early).
"""

from __future__ import annotations

from sched_fakes import GroupedRunner, kv_layout, make_request

from infercore.config import CacheConfig, SchedulerConfig
from infercore.scheduler.block_pool import NULL_BLOCK_ID
from infercore.scheduler.scheduler import Scheduler
from infercore.scheduler.single_kv_cache_manager import SingleKVCacheManager


def _prefill(kv: SingleKVCacheManager, request) -> list[int]:
    ids = kv.allocate_slots(request, request.num_tokens, [])
    assert ids is not None
    request.num_computed_tokens = request.num_tokens
    return ids


def test_blocks_before_the_window_are_freed_on_the_next_allocation() -> None:
    kv = SingleKVCacheManager(num_blocks=12, block_size=4, sliding_window=6)
    req = make_request("a", 20)
    ids = _prefill(kv, req)
    assert len(ids) == 5 and kv.num_free_blocks == 6
    # The next query is at position 20 and reads keys 15..20: blocks 0-2 (positions 0-11) are done.
    new = kv.allocate_slots(req, 1)
    assert new is not None and len(new) == 1
    assert kv.num_free_blocks == 6 + 3 - 1
    assert kv.get_block_ids(req)[:3] == [NULL_BLOCK_ID] * 3 and kv.get_block_ids(req)[3:5] == ids[3:]
    kv.free(req)
    assert kv.num_free_blocks == kv.num_usable_blocks


def test_a_block_still_in_the_window_is_kept() -> None:
    kv = SingleKVCacheManager(num_blocks=12, block_size=4, sliding_window=9)
    req = make_request("a", 20)
    ids = _prefill(kv, req)
    # The query at 20 reads keys 12..20: blocks 0-2 go, block 3 (positions 12-15) stays.
    kv.allocate_slots(req, 1)
    assert kv.get_block_ids(req)[:4] == [NULL_BLOCK_ID] * 3 + [ids[3]]
    req.num_computed_tokens = 23
    kv.allocate_slots(req, 1)  # reads keys 15..23: position 15 keeps block 3
    assert kv.get_block_ids(req)[3] == ids[3]
    req.num_computed_tokens = 24
    kv.allocate_slots(req, 1)  # reads keys 16..24
    assert kv.get_block_ids(req)[3] == NULL_BLOCK_ID


def test_nothing_is_freed_without_a_window() -> None:
    kv = SingleKVCacheManager(num_blocks=12, block_size=4)
    req = make_request("a", 20)
    ids = _prefill(kv, req)
    kv.allocate_slots(req, 1)
    assert kv.get_block_ids(req)[:5] == ids


def test_freed_blocks_keep_their_prefix_cache_entries() -> None:
    kv = SingleKVCacheManager(num_blocks=12, block_size=4, sliding_window=4)
    prompt = list(range(100, 120))
    a = make_request("a", prompt)
    a_ids = _prefill(kv, a)
    kv.allocate_slots(a, 1)
    assert kv.get_block_ids(a)[0] == NULL_BLOCK_ID
    b = make_request("b", prompt)
    hit, num_hit = kv.get_computed_blocks(b)
    assert num_hit == 16 and [blk.block_id for blk in hit] == a_ids[:4]


def _run(window: int | None) -> tuple[dict[str, list[int]], int]:
    """Four requests whose whole sequences need 12 blocks each, in a pool of 19 usable blocks; with
    window 8 each holds 3 or 4 at a time."""
    bs = 4
    sched = Scheduler(SchedulerConfig(max_num_seqs=8), CacheConfig(block_size=bs), max_model_len=48,
                      kv_layout=kv_layout(20, bs, (window,)), max_num_batched_tokens=32)
    for i in range(4):
        sched.add_request(make_request(f"r{i}", 10 + i, max_tokens=34, ignore_eos=True))
    runner = GroupedRunner(bs, [window])
    results: dict[str, list[int]] = {}
    for _ in range(1000):
        if not sched.has_unfinished_requests():
            break
        out = sched.schedule()
        for o in sched.update_from_output(out, runner.execute(out)).outputs:
            results.setdefault(o.request_id, []).extend(o.new_token_ids)
    assert not sched.has_unfinished_requests()
    assert sched.kv_cache_manager.num_free_blocks == sched.kv_cache_manager.num_usable_blocks
    return results, sched.num_preemptions


def test_sliding_window_requests_run_without_preemption_where_full_attention_preempts() -> None:
    windowed, windowed_preemptions = _run(window=8)
    full, full_preemptions = _run(window=None)
    assert full_preemptions > 0, "the pool should be too small for full attention"
    assert windowed_preemptions == 0
    assert all(len(tokens) == 34 for tokens in windowed.values()) and len(windowed) == 4
    assert windowed == full


def test_a_preempted_request_gives_back_its_blocks_once_and_resumes_from_the_prefix_cache() -> None:
    kv = SingleKVCacheManager(num_blocks=12, block_size=4, sliding_window=4)
    req = make_request("a", 20)
    ids = _prefill(kv, req)
    kv.allocate_slots(req, 1)
    assert kv.get_block_ids(req)[:4] == [NULL_BLOCK_ID] * 4
    kv.free(req)  # preempted: the null entries are not given back, the freed ones not twice
    assert kv.num_free_blocks == kv.num_usable_blocks
    assert all(block.ref_cnt == 0 for block in kv.pool.blocks)
    req.num_computed_tokens = 0
    hit, num_hit = kv.get_computed_blocks(req)
    assert num_hit == 16 and [blk.block_id for blk in hit] == ids[:4]
