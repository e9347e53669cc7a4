"""Scheduler: budget, chunked prefill, mixing, prefix hits, policies, abort, siblings."""

import random

import pytest
from sched_fakes import FakeRunner, make_request, make_scheduler, run_to_completion, scheduled

from infercore.scheduler.request import RequestStatus
from infercore.wire.messages import Logprobs
from infercore.wire.scheduler_output import ModelRunnerOutput


def _step(sched, runner):
    out = sched.schedule()
    return out, sched.update_from_output(out, runner.execute(out))


def test_budget_and_max_num_seqs_are_respected():
    sched = make_scheduler(num_blocks=200, budget=20, max_num_seqs=3, max_model_len=128)
    runner = FakeRunner(4)
    for i in range(6):
        sched.add_request(make_request(f"r{i}", 30 + i, max_tokens=5))

    def check(out, _):
        assert 0 < out.total_num_scheduled_tokens <= 20
        assert len(out.num_scheduled_tokens) <= 3

    results = run_to_completion(sched, runner, on_step=check)
    assert all(len(toks) == 5 for toks in results.values()) and len(results) == 6


def test_chunked_prefill_splits_a_long_prompt():
    sched = make_scheduler(budget=16)
    runner = FakeRunner(4)
    sched.add_request(make_request("a", 40, max_tokens=2))
    chunks = []
    for _ in range(2):
        out, outputs = _step(sched, runner)
        chunks.append(scheduled(out)["a"])
        assert outputs.outputs == []
    out, outputs = _step(sched, runner)
    assert chunks == [16, 16] and scheduled(out) == {"a": 8}
    assert [o.new_token_ids for o in outputs.outputs] == [[runner.state["a"][0][-1]]]
    out, _ = _step(sched, runner)
    assert scheduled(out) == {"a": 1} and out.scheduled_new_reqs == []
    assert out.scheduled_cached_reqs.num_computed_tokens == [40]


def test_without_chunked_prefill_prompts_run_whole():
    sched = make_scheduler(budget=64, chunked=False)
    runner = FakeRunner(4)
    sched.add_request(make_request("a", 40, max_tokens=3))
    sched.add_request(make_request("b", 40, max_tokens=3))
    out, _ = _step(sched, runner)
    assert scheduled(out) == {"a": 40}
    out, _ = _step(sched, runner)
    assert scheduled(out) == {"a": 1, "b": 40}  # b did not fit in the first step's leftover
    with pytest.raises(ValueError, match="chunked prefill"):
        make_scheduler(budget=32, max_model_len=64, chunked=False)


def test_decodes_are_scheduled_with_prefills():
    sched = make_scheduler(budget=16)
    runner = FakeRunner(4)
    sched.add_request(make_request("a", 5, max_tokens=20))
    sched.add_request(make_request("b", 5, max_tokens=20))
    _step(sched, runner)
    sched.add_request(make_request("long", 40))
    out, outputs = _step(sched, runner)
    assert scheduled(out) == {"a": 1, "b": 1, "long": 14}
    assert [o.request_id for o in outputs.outputs] == ["a", "b"]


def test_new_then_cached_request_data():
    sched = make_scheduler(block_size=4, budget=32)
    runner = FakeRunner(4)
    sched.add_request(make_request("a", 7, max_tokens=10))
    out, _ = _step(sched, runner)
    (new,) = out.scheduled_new_reqs
    assert len(new.block_ids) == 2 and new.num_computed_tokens == 0 and new.output_token_ids == []
    out, _ = _step(sched, runner)  # position 7 fits block 2
    assert out.scheduled_cached_reqs.new_block_ids == []
    out, _ = _step(sched, runner)  # position 8 needs a third block
    assert len(out.scheduled_cached_reqs.new_block_ids) == 1


def test_prefix_hit_sets_computed_tokens_and_shares_blocks():
    sched = make_scheduler(block_size=4, budget=64)
    runner = FakeRunner(4)
    prompt = list(range(50, 70))
    sched.add_request(make_request("a", prompt, max_tokens=30))
    _step(sched, runner)
    sched.add_request(make_request("b", prompt + [7, 8], max_tokens=3))
    out, _ = _step(sched, runner)
    (new,) = out.scheduled_new_reqs
    assert new.num_computed_tokens == 20 and scheduled(out)["b"] == 2
    kv = sched.kv_cache_manager
    a_blocks, b_blocks = (kv.get_blocks(sched.requests[r]) for r in "ab")
    assert b_blocks[:5] == a_blocks[:5] and all(b.ref_cnt == 2 for b in b_blocks[:5])
    results = run_to_completion(sched, runner)
    assert sched.requests == {} and kv.num_free_blocks == kv.num_usable_blocks
    assert len(results["a"]) == 28 and len(results["b"]) == 2  # first tokens came before
    stats = sched.get_stats()
    assert stats.prefix_cache_hits == 20 and stats.prefix_cache_queries == 42


def test_num_cached_tokens_reported():
    sched = make_scheduler(block_size=4)
    runner = FakeRunner(4)
    prompt = list(range(40, 52))
    sched.add_request(make_request("a", prompt, max_tokens=1))
    run_to_completion(sched, runner)
    sched.add_request(make_request("b", prompt, max_tokens=2))
    _, outputs = _step(sched, runner)
    assert outputs.outputs[0].num_cached_tokens == 8


def test_siblings_share_prompt_blocks_in_the_same_step():
    sched = make_scheduler(block_size=4, budget=64)
    runner = FakeRunner(4)
    prompt = list(range(300, 317))
    for i in range(3):
        sched.add_request(make_request(f"p-{i}", prompt, max_tokens=4, parent_id="p", seed=i))
    out, _ = _step(sched, runner)
    assert [n.num_computed_tokens for n in out.scheduled_new_reqs] == [0, 16, 16]
    kv = sched.kv_cache_manager
    blocks = [kv.get_blocks(sched.requests[f"p-{i}"]) for i in range(3)]
    assert blocks[0][:4] == blocks[1][:4] == blocks[2][:4]
    assert all(b.ref_cnt == 3 for b in blocks[0][:4])
    assert kv.num_usable_blocks - kv.num_free_blocks == 4 + 3
    run_to_completion(sched, runner)


def test_priority_policy_order():
    sched = make_scheduler(policy="priority", max_num_seqs=1)
    runner = FakeRunner(4)
    for rid, prio, t in (("late-urgent", 0, 3.0), ("normal", 5, 1.0), ("early-urgent", 0, 2.0), ("low", 9, 0.0)):
        sched.add_request(make_request(rid, 5, max_tokens=1, priority=prio, arrival_time=t))
    order = []
    run_to_completion(sched, runner, on_step=lambda out, _: order.extend(n.req_id for n in out.scheduled_new_reqs))
    assert order == ["early-urgent", "late-urgent", "normal", "low"]


def test_fcfs_order():
    sched = make_scheduler(max_num_seqs=1)
    runner = FakeRunner(4)
    for i in range(4):
        sched.add_request(make_request(f"r{i}", 5, max_tokens=1, priority=-i))
    order = []
    run_to_completion(sched, runner, on_step=lambda out, _: order.extend(n.req_id for n in out.scheduled_new_reqs))
    assert order == ["r0", "r1", "r2", "r3"]


def test_abort_frees_blocks_in_any_state():
    sched = make_scheduler(budget=16, max_num_seqs=2)
    runner = FakeRunner(4)
    kv = sched.kv_cache_manager
    for i in range(4):
        sched.add_request(make_request(f"r{i}", 20, max_tokens=50))
    _step(sched, runner)
    _step(sched, runner)
    assert sched.num_running == 2 and sched.num_waiting == 2
    sched.abort_requests(["r0", "r3", "unknown"])
    assert sched.num_running == 1 and sched.num_waiting == 1
    out, _ = _step(sched, runner)
    assert {"r0", "r3"} <= out.finished_req_ids
    sched.abort_requests(["r1", "r2"])
    assert not sched.has_unfinished_requests()
    assert kv.num_free_blocks == kv.num_usable_blocks
    assert sched.schedule().finished_req_ids == {"r1", "r2"}


def test_add_abort_cycles_leave_free_blocks_unchanged():
    sched = make_scheduler(num_blocks=40, block_size=4, budget=24, max_num_seqs=6, max_model_len=64)
    runner = FakeRunner(4)
    kv = sched.kv_cache_manager
    start = kv.num_free_blocks
    rng = random.Random(0)
    live: list[str] = []
    for i in range(1000):
        rid = f"r{i}"
        shared = [7] * rng.choice([0, 4, 8, 12])  # some prompts share a prefix
        sched.add_request(make_request(rid, shared + [rng.randrange(3, 900) for _ in range(rng.randint(1, 30))],
                                       max_tokens=rng.randint(1, 20)))
        live.append(rid)
        for _ in range(rng.randint(0, 3)):
            _step(sched, runner)
        if rng.random() < 0.7 and live:
            victim = live.pop(rng.randrange(len(live)))
            sched.abort_requests([victim])
    sched.abort_requests(live)
    _step(sched, runner)
    assert not sched.has_unfinished_requests() and sched.requests == {}
    assert kv.num_free_blocks == start
    assert all(b.ref_cnt == 0 for b in kv.pool.blocks)
    assert kv.prefix_cache_hits > 0


def test_prompt_logprobs_are_concatenated_over_chunks():
    sched = make_scheduler(budget=8)
    sched.add_request(make_request("a", 20, max_tokens=2, prompt_logprobs=0))
    rows = []
    for step in range(3):
        out = sched.schedule()
        n = scheduled(out)["a"]
        lp = Logprobs(token_ids=[[step]] * n, logprobs=[[-1.0]] * n, ranks=[1] * n)
        rows.extend([[step]] * n)
        done = step == 2
        result = sched.update_from_output(out, ModelRunnerOutput(
            ["a"], [[5] if done else []], {"a": Logprobs([[5]], [[-0.5]], [1])} if done else None, {"a": lp}))
    (o,) = result.outputs
    assert o.prompt_logprobs.token_ids == rows and len(rows) == 20
    assert o.new_logprobs.token_ids == [[5]]
    out = sched.schedule()
    (o,) = sched.update_from_output(out, ModelRunnerOutput(["a"], [[6]], None, None)).outputs
    assert o.prompt_logprobs is None and o.finish_reason is not None


def test_add_request_rejects_bad_prompts():
    sched = make_scheduler(max_model_len=16)
    with pytest.raises(ValueError, match="max_model_len"):
        sched.add_request(make_request("a", 17))
    with pytest.raises(ValueError, match="empty"):
        sched.add_request(make_request("b", []))
    sched.add_request(make_request("c", 3))
    with pytest.raises(ValueError, match="already in use"):
        sched.add_request(make_request("c", 3))
    assert sched.requests["c"].status == RequestStatus.WAITING


def test_pool_smaller_than_one_sequence_is_refused():
    with pytest.raises(ValueError, match="max_model_len"):
        make_scheduler(num_blocks=8, block_size=4, max_model_len=64)
