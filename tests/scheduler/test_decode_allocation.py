"""Decode steps call the KV manager's allocation only when a request reaches a block boundary, and
skipping the call changes nothing: the same plans, block tables and prefix-cache entries."""

from __future__ import annotations

import random

import pytest
from sched_fakes import FakeRunner, kv_layout, make_request, make_scheduler, run_to_completion

from infercore.config import CacheConfig, SchedulerConfig
from infercore.scheduler.scheduler import Scheduler


def _count_allocations(sched: Scheduler) -> list[int]:
    """Record ``num_computed_tokens`` of the request each ``allocate_slots`` call is made for."""
    kv = sched.kv_cache_manager
    real = kv.allocate_slots
    calls: list[int] = []

    def counted(request, num_new_tokens, new_computed_blocks=None):
        calls.append(request.num_computed_tokens)
        return real(request, num_new_tokens, new_computed_blocks)

    kv.allocate_slots = counted
    return calls


@pytest.mark.parametrize("prefix_caching", [False, True])
def test_decode_allocates_only_where_a_block_is_needed_or_fills(prefix_caching: bool) -> None:
    bs = 8
    sched = make_scheduler(block_size=bs, prefix_caching=prefix_caching)
    runner = FakeRunner(bs)
    sched.add_request(make_request("a", 6, max_tokens=24, ignore_eos=True))
    calls = _count_allocations(sched)
    run_to_completion(sched, runner)
    decode_calls = calls[1:]  # the first call is the prompt's
    # Decode step at computed c writes position c: a new block when c % bs == 0; with prefix
    # caching, the block fills (and is cached) when (c + 1) % bs == 0.
    expected = [c for c in range(6, 6 + 23)
                if c % bs == 0 or (prefix_caching and (c + 1) % bs == 0)]
    assert decode_calls == expected


class _Unsettled(dict):
    """A ``settled_until`` that never records anything: every step takes the allocation call."""

    def __setitem__(self, key: str, value: int) -> None:
        pass


def _workload(seed: int) -> list[dict]:
    rng = random.Random(seed)
    shared = [rng.randrange(3, 900) for _ in range(9)]
    return [dict(rid=f"r{i}", prompt=(shared if i % 2 else []) + [rng.randrange(3, 900)
                                                                  for _ in range(rng.randint(1, 18))],
                 max_tokens=rng.randint(3, 30), priority=rng.randint(0, 2), arrival_time=float(i))
            for i in range(14)]


def _trace(specs: list[dict], skip_settled: bool, window: int | None, prefix_caching: bool) -> list:
    """Every step's plan and newly cached blocks, and the final tokens."""
    bs = 4
    sched = Scheduler(SchedulerConfig(max_num_seqs=8, scheduling_policy="priority"),
                      CacheConfig(block_size=bs, enable_prefix_caching=prefix_caching),
                      max_model_len=64, kv_layout=kv_layout(24, bs, (window,)), max_num_batched_tokens=24)
    kv = sched.kv_cache_manager
    if not skip_settled:
        kv.settled_until = _Unsettled()
    for s in specs:
        sched.add_request(make_request(s["rid"], s["prompt"], max_tokens=s["max_tokens"],
                                       priority=s["priority"], arrival_time=s["arrival_time"]))
    runner = FakeRunner(bs, window=window)
    steps: list = []
    schedule = sched.schedule

    def schedule_and_record():
        out = schedule()
        cached = out.scheduled_cached_reqs
        newly_cached = [b.block_id for b in sched._unfolded[-1][1]] if sched._unfolded else []
        steps.append((out.req_ids, out.num_scheduled_tokens, cached.num_computed_tokens, list(cached.new_blocks()),
                      [(n.req_id, n.block_ids, n.num_computed_tokens) for n in out.scheduled_new_reqs],
                      sorted(out.finished_req_ids), newly_cached))
        return out

    sched.schedule = schedule_and_record
    results = run_to_completion(sched, runner)
    assert kv.num_free_blocks == kv.num_usable_blocks
    return [steps, results, sched.num_preemptions, kv.prefix_cache_hits]


@pytest.mark.parametrize(("window", "prefix_caching"), [(None, True), (None, False), (6, True)])
def test_skipping_settled_requests_changes_no_plan(window: int | None, prefix_caching: bool) -> None:
    preemptions = 0
    for seed in range(4):
        specs = _workload(seed)
        fast = _trace(specs, True, window, prefix_caching)
        slow = _trace(specs, False, window, prefix_caching)
        assert fast == slow
        preemptions += fast[2]
    assert preemptions > 0, "the pool should be small enough to preempt"
