"""The columnar plan of requests the runner already holds: one entry per request, new blocks sparse."""

from __future__ import annotations

from sched_fakes import FakeRunner, make_request, make_scheduler, scheduled

from infercore.wire.scheduler_output import CachedRequests


def _three_with_blocks() -> CachedRequests:
    cached = CachedRequests()
    for rid, computed, blocks in (("a", 4, [7]), ("b", 9, []), ("c", 12, [3, 5])):
        if blocks:
            cached.add_new_blocks(len(cached.req_ids), blocks)
        cached.req_ids.append(rid)
        cached.num_computed_tokens.append(computed)
    return cached


def test_only_requests_with_new_blocks_have_runs() -> None:
    cached = _three_with_blocks()
    assert cached.new_block_req_indices == [0, 2]
    assert cached.new_block_offsets == [0, 1, 3] and cached.new_block_ids == [7, 3, 5]
    assert list(cached.new_blocks()) == [(0, [7]), (2, [3, 5])]


def test_removing_an_entry_takes_its_blocks_and_shifts_later_runs() -> None:
    cached = _three_with_blocks()
    cached.remove(0)
    assert cached.req_ids == ["b", "c"] and cached.num_computed_tokens == [9, 12]
    assert list(cached.new_blocks()) == [(1, [3, 5])] and cached.new_block_offsets == [0, 2]
    cached = _three_with_blocks()
    cached.remove(1)
    assert cached.req_ids == ["a", "c"] and list(cached.new_blocks()) == [(0, [7]), (1, [3, 5])]


def test_a_decode_batch_lists_blocks_only_for_the_request_that_crosses_a_block() -> None:
    sched = make_scheduler(block_size=4, budget=64)
    runner = FakeRunner(4)
    for rid, length in (("a", 5), ("b", 8), ("c", 6)):
        sched.add_request(make_request(rid, length, max_tokens=10))
    out = sched.schedule()
    sched.update_from_output(out, runner.execute(out))
    out = sched.schedule()  # a writes position 5, b position 8 (a new block), c position 6
    cached = out.scheduled_cached_reqs
    assert out.scheduled_new_reqs == [] and scheduled(out) == {"a": 1, "b": 1, "c": 1}
    assert cached.num_computed_tokens == [5, 8, 6]
    ((index, block_ids),) = cached.new_blocks()
    assert cached.req_ids[index] == "b" and block_ids == sched.kv_cache_manager.get_block_ids(sched.requests["b"])[2:]
    sched.update_from_output(out, runner.execute(out))
