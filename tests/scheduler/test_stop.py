"""Stop conditions checked in update_from_output."""

from sched_fakes import EOS, FakeRunner, make_request, make_scheduler

from infercore.wire.messages import FinishReason
from infercore.wire.scheduler_output import ModelRunnerOutput


def _generate(script, max_model_len=64, tokens_per_step=1, **kwargs):
    """Run one request whose 'model' emits ``script`` in order; return (tokens, last output)."""
    sched = make_scheduler(max_model_len=max_model_len)
    it = iter(script)
    runner = FakeRunner(4, sampler=lambda _ctx: next(it), tokens_per_step=tokens_per_step)
    sched.add_request(make_request("r", kwargs.pop("prompt", 5), **kwargs))
    tokens, last = [], None
    while sched.has_unfinished_requests():
        out = sched.schedule()
        for o in sched.update_from_output(out, runner.execute(out)).outputs:
            tokens.extend(o.new_token_ids)
            last = o
    kv = sched.kv_cache_manager
    assert kv.num_free_blocks == kv.num_usable_blocks
    return tokens, last


def test_max_tokens():
    tokens, last = _generate([10, 11, 12, 13, 14], max_tokens=3)
    assert tokens == [10, 11, 12] and last.finish_reason == FinishReason.LENGTH and last.stop_reason is None


def test_eos_stops():
    tokens, last = _generate([10, EOS, 12], max_tokens=8)
    assert tokens == [10, EOS] and last.finish_reason == FinishReason.STOP and last.stop_reason is None


def test_eos_at_max_tokens_is_a_stop():
    tokens, last = _generate([10, EOS], max_tokens=2)
    assert tokens == [10, EOS] and last.finish_reason == FinishReason.STOP


def test_ignore_eos():
    tokens, last = _generate([EOS, EOS, 7, EOS], max_tokens=4, ignore_eos=True)
    assert tokens == [EOS, EOS, 7, EOS] and last.finish_reason == FinishReason.LENGTH


def test_stop_token_ids_set_stop_reason():
    tokens, last = _generate([10, 42, 12], max_tokens=8, stop_token_ids=[42])
    assert tokens == [10, 42] and last.finish_reason == FinishReason.STOP and last.stop_reason == 42


def test_stop_token_ids_apply_with_ignore_eos():
    tokens, last = _generate([EOS, 42, 12], max_tokens=8, stop_token_ids=[42], ignore_eos=True)
    assert tokens == [EOS, 42] and last.stop_reason == 42


def test_all_stop_token_ids():
    tokens, last = _generate([10, 99, 12], max_tokens=8, all_stop_token_ids=[99])
    assert tokens == [10, 99] and last.stop_reason == 99
    tokens, _ = _generate([10, 99, 12], max_tokens=3, all_stop_token_ids=[99], ignore_eos=True)
    assert tokens == [10, 99, 12]


def test_min_tokens_defers_stops():
    tokens, last = _generate([EOS, 42, 5, EOS], max_tokens=8, min_tokens=3, stop_token_ids=[42])
    assert tokens == [EOS, 42, 5, EOS] and last.finish_reason == FinishReason.STOP


def test_max_model_len():
    tokens, last = _generate(list(range(10, 40)), max_model_len=16, prompt=12, max_tokens=None)
    assert len(tokens) == 4 and last.finish_reason == FinishReason.LENGTH


def test_several_tokens_per_step_stop_in_the_middle():
    tokens, last = _generate([10, 11, EOS, 13, 14, 15], max_tokens=8, tokens_per_step=3)
    assert tokens == [10, 11, EOS] and last.finish_reason == FinishReason.STOP


def test_several_tokens_per_step_logprobs_are_cut_with_the_tokens():
    from infercore.wire.messages import Logprobs
    sched = make_scheduler()
    sched.add_request(make_request("r", 5, max_tokens=2, logprobs=0))
    out = sched.schedule()
    lp = Logprobs([[1], [2], [3]], [[-1.0], [-2.0], [-3.0]], [1, 1, 1])
    (o,) = sched.update_from_output(out, ModelRunnerOutput(["r"], [[7, 8, 9]], {"r": lp}, None)).outputs
    assert o.new_token_ids == [7, 8] and o.new_logprobs.token_ids == [[1], [2]]
    assert o.finish_reason == FinishReason.LENGTH
