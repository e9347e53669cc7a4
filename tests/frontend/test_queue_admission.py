"""Admission counts running slots before waiting ones: ``max_num_seqs`` running plus
``--max-num-queued-requests`` waiting, a request of n counting n times, and a refusal is a 503 with
Retry-After."""

from __future__ import annotations

import pytest

from infercore.config import InfercoreConfig
from infercore.entrypoints.openai.serving_base import to_api_error
from infercore.frontend.async_llm import AsyncLLM, QueueFullError
from infercore.wire.messages import SchedulerStats


def _front_end(max_num_seqs: int = 2, queued: int = 2, data_parallel_size: int = 1) -> AsyncLLM:
    """An AsyncLLM with only what admission reads: its config, the engine's last stats, its counts."""
    llm = AsyncLLM.__new__(AsyncLLM)
    llm.config = InfercoreConfig.from_kwargs(max_num_seqs=max_num_seqs, max_num_queued_requests=queued,
                                             data_parallel_size=data_parallel_size)
    llm.stats = SchedulerStats()
    llm._sent_since_stats = 0
    llm._num_sequences = 0
    return llm


def _send(llm: AsyncLLM, n: int) -> bool:
    """Admit (and count as generate does) a request of n sequences; False when it is refused."""
    try:
        llm.check_capacity(n)
    except QueueFullError:
        return False
    llm._num_sequences += n
    llm._sent_since_stats += n
    return True


def test_idle_server_takes_n_up_to_running_plus_waiting() -> None:
    assert _send(_front_end(), 3)
    assert _send(_front_end(), 4)
    assert not _send(_front_end(), 5)


def test_burst_fills_running_then_waiting_slots() -> None:
    llm = _front_end()
    assert [_send(llm, 1) for _ in range(5)] == [True, True, True, True, False]


def test_engine_report_counts_running_and_waiting() -> None:
    llm = _front_end()
    llm.stats = SchedulerStats(num_running=2, num_waiting=1)  # sequences another API server sent
    assert _send(llm, 1)
    assert not _send(llm, 1)


def test_data_parallel_engines_each_have_running_slots() -> None:
    llm = _front_end(max_num_seqs=2, queued=1, data_parallel_size=2)
    assert _send(llm, 5)
    assert not _send(llm, 1)


def test_refusal_is_503_with_retry_after() -> None:
    llm = _front_end()
    llm.stats = SchedulerStats(num_running=2, num_waiting=2)
    with pytest.raises(QueueFullError) as caught:
        llm.check_capacity(1)
    error = to_api_error(caught.value)
    assert error.status == 503 and error.headers and error.headers["Retry-After"]
    assert "2 running plus 2 waiting" in str(caught.value)
