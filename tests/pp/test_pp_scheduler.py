"""The scheduler under pipeline stages: a request whose sample is in the pipe waits for it, and its next
step carries the tokens sampled since its last one."""

from __future__ import annotations

from infercore.config import CacheConfig, SchedulerConfig
from infercore.kv_cache.groups import KVCacheGroup, kv_cache_layout
from infercore.sampling_params import SamplingParams
from infercore.scheduler.request import Request
from infercore.scheduler.scheduler import Scheduler
from infercore.wire.scheduler_output import ModelRunnerOutput


def make_scheduler(budget: int) -> Scheduler:
    layout = kv_cache_layout([KVCacheGroup(None, (0,))], 64, block_size=4, max_num_seqs=8, max_num_batched_tokens=budget)
    return Scheduler(SchedulerConfig(max_num_seqs=8, max_prefill_tokens_per_decode=None), CacheConfig(block_size=4),
                     max_model_len=64, kv_layout=layout, max_num_batched_tokens=budget, pipeline_stages=2)


def request(rid: str, prompt: list[int]) -> Request:
    return Request(rid, prompt, SamplingParams(max_tokens=4, ignore_eos=True))


def test_sampling_requests_wait_for_their_step_and_get_its_tokens() -> None:
    sched = make_scheduler(budget=8)
    sched.add_request(request("a", list(range(10, 18))))
    sched.add_request(request("b", list(range(30, 38))))
    first = sched.schedule()
    assert first.req_ids == ["a"]
    second = sched.schedule()  # a's sample is in the pipe: b goes
    assert second.req_ids == ["b"]
    assert sched.schedule().total_num_scheduled_tokens == 0  # both samples are in the pipe
    sched.update_from_output(first, ModelRunnerOutput(req_ids=["a"], sampled_token_ids=[[42]]))
    third = sched.schedule()
    assert third.req_ids == ["a"]
    assert third.scheduled_cached_reqs.new_token_ids == [[42]]
    sched.update_from_output(second, ModelRunnerOutput(req_ids=["b"], sampled_token_ids=[[7]]))
    sched.update_from_output(third, ModelRunnerOutput(req_ids=["a"], sampled_token_ids=[[43]]))
    fourth = sched.schedule()
    assert fourth.req_ids == ["a", "b"]
    assert fourth.scheduled_cached_reqs.new_token_ids == [[43], [7]]


def test_prompt_chunks_follow_each_other_into_the_pipe() -> None:
    sched = make_scheduler(budget=4)
    sched.add_request(request("a", list(range(10, 22))))
    chunks = [sched.schedule() for _ in range(4)]
    # Three chunks of 4 prompt tokens go in without waiting (none samples but the last); then a waits.
    assert [c.num_scheduled_tokens for c in chunks[:3]] == [[4], [4], [4]]
    assert chunks[3].total_num_scheduled_tokens == 0


def test_a_step_that_is_not_run_keeps_its_finished_ids() -> None:
    sched = make_scheduler(budget=8)
    sched.add_request(request("a", list(range(10, 18))))
    first = sched.schedule()
    sched.abort_requests(["a"])
    empty = sched.schedule()
    assert empty.finished_req_ids == {"a"} and not empty.total_num_scheduled_tokens
    sched.keep_finished(empty)
    assert sched.schedule().finished_req_ids == {"a"}
    assert first.req_ids == ["a"]
