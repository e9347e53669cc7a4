"""``infercore serve --api-server-count N``: every streamed request gets what one API process gives it,
the requests are served by several API processes, /metrics counts all of them, data parallelism goes
through the same path; SIGTERM drains every API process and exits 0, a killed API process stops the
server with an error, and neither leaves a process or socket folder behind."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import httpx
import pytest
from api_server_cases import assert_nothing_left, metric_samples, started_pids, stream_all

COUNT = 16
ROUNDS = 3
#: Tokens of the request in flight when SIGTERM comes (at least a step each, after the first).
LONG = 240


@pytest.fixture(scope="module")
def reference(start) -> list:
    """The 16 streamed requests through one API process."""
    return stream_all(start().url, COUNT)


@pytest.fixture(scope="module")
def four(start):
    return start("--api-server-count", "4")


@pytest.fixture(scope="module")
def dp(start):
    return start("--api-server-count", "2", "--data-parallel-size", "2")


def test_four_api_servers_stream_what_one_does_and_metrics_count_all(four, reference) -> None:
    for _ in range(ROUNDS):
        assert stream_all(four.url, COUNT) == reference
    assert all(r.completion_tokens == 10 and r.finish_reason == "length" for r in reference)
    assert sum(len(r.tokens) == 10 for r in reference) == 4  # the requests that asked for logprobs
    metrics = httpx.get(four.url + "/metrics", timeout=10).text
    per_server = metric_samples(metrics, "infercore:api_server_requests_total")
    assert sum(per_server.values()) == COUNT * ROUNDS
    assert len([n for n in per_server.values() if n > 0]) >= 2, f"one API process served every request: {per_server}"
    finished = metric_samples(metrics, "infercore:request_success_total")
    assert finished == {'finished_reason="length",model_name="tiny"': COUNT * ROUNDS}
    [tokens] = metric_samples(metrics, "infercore:generation_tokens_total").values()
    assert tokens == 10 * COUNT * ROUNDS
    # Engine totals are counted once, not once per API server: every prompt token was looked up once.
    # They reach API server 0 with the engine's stats, which may trail the last stream by the idle report.
    deadline = time.monotonic() + 10
    while True:
        [prompt_tokens] = metric_samples(metrics, "infercore:prompt_tokens_total").values()
        [looked_up] = metric_samples(metrics, "infercore:prefix_cache_queries_total").values()
        if looked_up == prompt_tokens or time.monotonic() > deadline:
            break
        time.sleep(0.1)
        metrics = httpx.get(four.url + "/metrics", timeout=10).text
    assert looked_up == prompt_tokens


def test_a_killed_api_server_stops_the_server_with_an_error(four) -> None:
    pids = started_pids(four.output())
    assert len(pids) == 5, pids
    os.kill(pids["API server 2"], signal.SIGKILL)
    assert four.proc.wait(30) != 0
    assert "infercore-api-server-2 exited unexpectedly" in four.output()
    assert_nothing_left(four.proc.pid, pids)


def test_data_parallel_behind_two_api_servers_answers_like_one_engine(dp, reference) -> None:
    assert stream_all(dp.url, COUNT) == reference
    metrics = httpx.get(dp.url + "/metrics", timeout=10).text
    [blocks] = metric_samples(metrics, "infercore:kv_cache_total_blocks").values()
    assert blocks == 2 * 127  # both engines' blocks (127 of the 128 usable: one is the null block)


def _stream_long(url: str, first_chunk: threading.Event, result: dict) -> None:
    body = {"model": "tiny", "prompt": "a long answer", "max_tokens": LONG, "ignore_eos": True, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as response:
        for line in response.iter_lines():
            first_chunk.set()
            if line.startswith("data: {"):
                event = json.loads(line[len("data: "):])
                result["usage"] = event.get("usage") or result.get("usage")


def test_sigterm_drains_every_api_server_then_exits_0_leaving_nothing(dp) -> None:
    pids = started_pids(dp.output())
    assert set(pids) == {"engine 0", "engine 1", "API server 0", "API server 1"}, pids
    first_chunk, result = threading.Event(), {}
    reader = threading.Thread(target=_stream_long, args=(dp.url, first_chunk, result))
    reader.start()
    assert first_chunk.wait(30)
    dp.proc.send_signal(signal.SIGTERM)
    reader.join(60)
    assert result["usage"]["completion_tokens"] == LONG, "the in-flight request was not finished"
    assert dp.proc.wait(30) == 0, dp.output()
    assert "finishing 1 in flight" in dp.output(), "the request was not in flight when SIGTERM came"
    assert_nothing_left(dp.proc.pid, pids)
