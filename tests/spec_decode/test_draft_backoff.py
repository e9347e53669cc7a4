"""The draft back-off: a request whose drafts keep failing pauses drafting (doubling pauses), one whose drafts
pay never does, and the output is the same either way; while every request pauses, async scheduling
overlaps the steps again."""

from __future__ import annotations

import pytest
from engine_cases import ENGINE_DEFAULTS

from infercore import LLM, SamplingParams
from infercore.benchmarks.full_drafts import register_full_drafts
from infercore.benchmarks.speculative import force_acceptance_rate
from infercore.scheduler.draft_backoff import FIRST_PAUSE, MAX_PAUSE, PROBE_WINDOW, WINDOW, DraftBackoff
from infercore.speculative_config import SpeculativeConfig


def test_a_failing_window_pauses_and_each_failing_probe_after_doubles_the_pause() -> None:
    backoff = DraftBackoff()
    pauses, windows = [], []
    for _ in range(8):
        windows.append(backoff.window)
        for _ in range(backoff.window):
            assert not backoff.paused
            backoff.record(0, 0.25)
        pauses.append(backoff.pause_left)
        while backoff.paused:
            backoff.tick()
    assert windows == [WINDOW] + [PROBE_WINDOW] * 7
    assert pauses == [FIRST_PAUSE * 2 ** i for i in range(6)] + [MAX_PAUSE, MAX_PAUSE]


def test_a_passing_window_starts_the_doubling_over_and_never_pauses() -> None:
    backoff = DraftBackoff()
    for _ in range(WINDOW):
        backoff.record(0, 0.25)
    while backoff.paused:
        backoff.tick()
    for _ in range(PROBE_WINDOW):  # 1 accepted in 4 steps: exactly the threshold's 0.25 per step passes
        backoff.record(1 if backoff.steps == 0 else 0, 0.25)
    assert not backoff.paused and backoff.next_pause == FIRST_PAUSE and backoff.window == WINDOW
    for _ in range(WINDOW - 1):
        backoff.record(0, 0.25)
    assert not backoff.paused  # a window is judged only when full
    backoff.record(0, 0.25)
    assert backoff.pause_left == FIRST_PAUSE


def test_the_threshold_is_checked_where_it_enters() -> None:
    assert SpeculativeConfig(method="ngram", num_speculative_tokens=3).disable_by_acceptance == 0.25
    assert SpeculativeConfig(method="ngram", num_speculative_tokens=3, disable_by_acceptance=None).disable_by_acceptance is None
    with pytest.raises(ValueError, match="at least 0"):
        SpeculativeConfig(method="ngram", num_speculative_tokens=3, disable_by_acceptance=-0.5)
    with pytest.raises(ValueError, match="every request would pause"):
        SpeculativeConfig(method="ngram", num_speculative_tokens=2, disable_by_acceptance=2.5)


def _run(folder, rate: float, disable_by_acceptance: float | None, async_scheduling: bool = False):
    register_full_drafts()
    spec = {"method": "bench_ngram_full", "num_speculative_tokens": 3,
            "disable_by_acceptance": disable_by_acceptance}
    llm = LLM(**{**ENGINE_DEFAULTS, "model": str(folder), "speculative_config": spec,
                 "async_scheduling": async_scheduling})
    force_acceptance_rate(llm, rate)
    params = SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)
    outputs = llm.generate(["the engine cache block request", "a b c d e f"], params, use_tqdm=False)
    return llm, [o.outputs[0].token_ids for o in outputs]


def test_drafts_that_never_land_pause_and_the_tokens_stay_the_same(tiny_model_factory) -> None:
    """Forced acceptance 0: each of the 2 requests verifies drafts in its first window, then only in short
    probes between doubling pauses (16, 32, 64 steps): 8 + 3 * 4 = 20 of its 200 steps, not 200; greedy tokens
    unchanged."""
    folder = tiny_model_factory("Qwen3ForCausalLM")
    always, tokens = _run(folder, 0.0, None)
    paused, paused_tokens = _run(folder, 0.0, 0.25)
    assert paused_tokens == tokens
    drafts_always = always.llm_engine.engine_core.scheduler.get_stats().spec_num_drafts
    drafts_paused = paused.llm_engine.engine_core.scheduler.get_stats().spec_num_drafts
    assert drafts_always >= 2 * 190
    assert drafts_paused == 2 * (WINDOW + 3 * PROBE_WINDOW), (drafts_always, drafts_paused)


def test_drafts_that_pay_never_pause(tiny_model_factory) -> None:
    """Forced acceptance 0.7 (about 1.5 accepted drafts per step at k = 3): as many verifying steps as with the
    back-off off."""
    folder = tiny_model_factory("Qwen3ForCausalLM")
    paused, _ = _run(folder, 0.7, 0.25)
    stats = paused.llm_engine.engine_core.scheduler.get_stats()
    assert stats.spec_num_accepted_tokens / stats.spec_num_drafts > 1.0
    # Every step but the first (no drafts yet) verified drafts: 200 tokens came in far fewer steps.
    assert stats.spec_num_drafts + 2 * 2 >= 2 * 200 / (1 + stats.spec_num_accepted_tokens / stats.spec_num_drafts)


def test_steps_overlap_again_while_every_request_pauses(tiny_model_factory) -> None:
    """Async scheduling: steps that may draft run one at a time; once both requests pause, the engine overlaps
    steps again (``Scheduler.drafts_allowed`` is False), and the tokens stay those of the synchronous run."""
    folder = tiny_model_factory("Qwen3ForCausalLM")
    _, tokens = _run(folder, 0.0, None)
    llm, overlapped_tokens = _run(folder, 0.0, 0.25, async_scheduling=True)
    core = llm.llm_engine.engine_core
    assert core.async_mode
    assert overlapped_tokens == tokens
    calls = {"overlapped": 0, "synchronous": 0}
    original_overlapped, original_sync = core._step_overlapped, core._step_synchronous

    def overlapped():
        calls["overlapped"] += 1
        return original_overlapped()

    def synchronous():
        calls["synchronous"] += 1
        return original_sync()

    core._step_overlapped, core._step_synchronous = overlapped, synchronous
    llm.generate(["the engine cache block request"], SamplingParams(temperature=0, max_tokens=120, ignore_eos=True),
                 use_tqdm=False)
    assert calls["overlapped"] > calls["synchronous"], calls
