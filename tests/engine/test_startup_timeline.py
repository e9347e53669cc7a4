"""Start-up says where its time goes: each phase (config, workers with the model and its weights,
profiling, KV cache with warm-up and graph capture) is logged at INFO as it ends, then one summary line
with the seconds before start-up began (imports) and the total."""

from __future__ import annotations

import logging

import pytest

from infercore.startup_timeline import StartupTimeline


def test_phases_nest_and_sum_up(caplog: pytest.LogCaptureFixture) -> None:
    timeline = StartupTimeline()
    with caplog.at_level(logging.INFO, logger="infercore.startup"):
        with timeline.phase("workers"), timeline.phase("weights"):
            pass
        with timeline.phase("kv_cache"):
            pass
        summary = timeline.summary("a test")
    assert [name for name, _ in timeline.phases] == ["workers/weights", "workers", "kv_cache"]
    assert "start-up: workers/weights took" in caplog.text
    assert summary.startswith("start-up timeline of a test: before start-up (imports) ")
    assert "| workers " in summary and "| kv_cache " in summary and "weights" not in summary
    assert timeline.before_s is not None and timeline.before_s > 0


def test_llm_start_up_logs_its_timeline(tiny_model_factory, caplog: pytest.LogCaptureFixture) -> None:
    from infercore import LLM

    with caplog.at_level(logging.INFO, logger="infercore.startup"):
        LLM(model=str(tiny_model_factory()), max_model_len=128, num_gpu_blocks_override=32, cpu_threads=1)
    for phase in ("config", "workers/model and weights", "workers", "profiling", "kv_cache/warm-up", "kv_cache"):
        assert f"start-up: {phase} took" in caplog.text
    assert "start-up timeline of the engine: before start-up (imports)" in caplog.text
