"""Preemption by recompute: resumed requests produce exactly the tokens of an unpreempted run."""

import random

from sched_fakes import FakeRunner, make_request, make_scheduler, run_to_completion


def _workload(seed: int, n: int = 12):
    rng = random.Random(seed)
    shared = [rng.randrange(3, 900) for _ in range(8)]
    reqs = []
    for i in range(n):
        prompt = (shared if i % 3 == 0 else []) + [rng.randrange(3, 900) for _ in range(rng.randint(1, 20))]
        reqs.append(dict(rid=f"r{i}", prompt=prompt, max_tokens=rng.randint(5, 30),
                         priority=rng.randint(0, 3), arrival_time=float(i)))
    return reqs


def _run(specs, **sched_kwargs):
    sched = make_scheduler(**sched_kwargs)
    runner = FakeRunner(sched.block_size)
    for s in specs:
        sched.add_request(make_request(s["rid"], s["prompt"], max_tokens=s["max_tokens"],
                                       priority=s["priority"], arrival_time=s["arrival_time"]))
    resumed = []

    def watch(out, _):
        resumed.extend(n for n in out.scheduled_new_reqs if n.output_token_ids)

    results = run_to_completion(sched, runner, on_step=watch)
    kv = sched.kv_cache_manager
    assert kv.num_free_blocks == kv.num_usable_blocks
    return results, sched.num_preemptions, resumed


def test_tiny_pool_preempts_and_resumes_with_outputs():
    sched = make_scheduler(num_blocks=13, block_size=4, max_model_len=48, budget=64)
    runner = FakeRunner(4)
    sched.add_request(make_request("old", 10, max_tokens=30, arrival_time=0.0))
    sched.add_request(make_request("new", 10, max_tokens=30, arrival_time=1.0))
    seen_preempted = False
    resumed = None
    while sched.has_unfinished_requests():
        out = sched.schedule()
        if "new" in out.finished_req_ids and "new" in sched.requests:
            seen_preempted = True
            assert "new" not in out.req_ids
        for n in out.scheduled_new_reqs:
            if n.req_id == "new" and n.output_token_ids:
                resumed = n
        sched.update_from_output(out, runner.execute(out))
    assert seen_preempted and sched.num_preemptions >= 1
    assert resumed is not None and len(resumed.output_token_ids) > 0


def test_preempted_runs_match_unpreempted_fcfs():
    for seed in range(5):
        specs = _workload(seed)
        reference, n_ref, _ = _run(specs, num_blocks=400, block_size=4, max_model_len=64, budget=64)
        assert n_ref == 0
        tight, n_tight, resumed = _run(specs, num_blocks=17, block_size=4, max_model_len=64, budget=64)
        assert n_tight > 0 and resumed
        assert tight == reference


def test_preempted_runs_match_unpreempted_priority():
    for seed in range(5):
        specs = _workload(100 + seed)
        reference, _, _ = _run(specs, num_blocks=400, block_size=4, max_model_len=64, budget=64,
                               policy="priority")
        tight, n_tight, _ = _run(specs, num_blocks=17, block_size=4, max_model_len=64, budget=16,
                                 policy="priority")
        assert n_tight > 0
        assert tight == reference


def test_preemption_picks_the_lowest_priority_request():
    sched = make_scheduler(num_blocks=13, block_size=4, max_model_len=48, budget=64, policy="priority")
    runner = FakeRunner(4)
    sched.add_request(make_request("important", 10, max_tokens=30, priority=0, arrival_time=1.0))
    sched.add_request(make_request("background", 10, max_tokens=30, priority=5, arrival_time=0.0))
    preempted = set()
    while sched.has_unfinished_requests():
        out = sched.schedule()
        preempted |= {r for r in out.finished_req_ids if r in sched.requests}
        sched.update_from_output(out, runner.execute(out))
    assert preempted == {"background"}


def _preempt_after_scheduling_the_victim():
    """A priority scheduler whose low-priority request runs first in the batch, so it is already
    scheduled in the step in which the high-priority request behind it runs out of blocks."""
    sched = make_scheduler(num_blocks=9, block_size=4, max_model_len=32, budget=64, policy="priority")
    runner = FakeRunner(4)
    sched.add_request(make_request("background", 14, max_tokens=12, priority=5, arrival_time=0.0))
    for _ in range(2):
        out = sched.schedule()
        sched.update_from_output(out, runner.execute(out))
    sched.add_request(make_request("important", 10, max_tokens=12, priority=0, arrival_time=1.0))
    return sched, runner


def test_preempted_request_keeps_its_computed_prefix_cached():
    sched, runner = _preempt_after_scheduling_the_victim()
    victim = sched.requests["background"]
    kv = sched.kv_cache_manager
    resumed_at = None
    cached_at_preemption = None
    while sched.has_unfinished_requests():
        computed_before = victim.num_computed_tokens
        out = sched.schedule()
        if "background" in out.finished_req_ids and "background" in sched.requests:
            # Every block it computed before this step is still in the prefix cache.
            cached_at_preemption = computed_before // 4
            _, num_hit = kv.get_computed_blocks(victim)
            assert num_hit == min(cached_at_preemption * 4, (victim.num_tokens - 1) // 4 * 4)
        for new in out.scheduled_new_reqs:
            if new.req_id == "background" and new.output_token_ids:
                resumed_at = new.num_computed_tokens
        sched.update_from_output(out, runner.execute(out))
    assert cached_at_preemption, "the background request should be preempted after computing blocks"
    assert resumed_at is not None and resumed_at > 0, "the resumed request should start from its cached prefix"
    assert kv.num_free_blocks == kv.num_usable_blocks
