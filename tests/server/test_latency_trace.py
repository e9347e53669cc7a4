"""The opt-in latency trace: off it writes nothing; on, a served request leaves one line per process with
every hop stamped in order, and serve_trace joins them into per-stage figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from infercore.benchmarks.serve_trace import (
    FIRST_TOKEN_STAMPS,
    PHASES,
    TOKEN_STAGES,
    TracedRequest,
    occupancy,
    report,
    token_arrivals,
)
from infercore.engine.latency_trace import base_request_id, open_writer

NUM_REQUESTS = 3
OUTPUT_LEN = 4


@pytest.fixture(scope="module")
def traced(start_server, tmp_path_factory) -> Path:
    """A traced server (2 API server processes: prefixed ids) loaded by a traced bench serve run."""
    folder = tmp_path_factory.mktemp("trace")
    env = {"INFERCORE_TRACE_LATENCY": "1", "INFERCORE_TRACE_LATENCY_DIR": str(folder)}
    server = start_server("--api-server-count", "2", "--skip-tokenizer-init", env=env)
    result = subprocess.run(
        [sys.executable, "-m", "infercore.entrypoints.cli", "bench", "serve", "--base-url", server.url,
         "--num-prompts", str(NUM_REQUESTS), "--max-concurrency", "1", "--input-len", "24",
         "--output-len", str(OUTPUT_LEN), "--vocab-size", "100", "--no-progress", "--label", "c1"],
        capture_output=True, text=True, timeout=120, env={**__import__("os").environ, **env})
    assert result.returncode == 0, result.stderr
    server.stop()  # the engine and API servers close their files
    return folder


def _records(folder: Path, role: str) -> list[dict]:
    return [json.loads(line) for path in folder.glob(f"{role}-*.jsonl") for line in path.read_text().splitlines()]


def test_trace_is_off_unless_asked(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("INFERCORE_TRACE_LATENCY", raising=False)
    monkeypatch.setenv("INFERCORE_TRACE_LATENCY_DIR", str(tmp_path))
    assert open_writer("api") is None
    assert list(tmp_path.iterdir()) == []


def test_every_process_writes_one_line_per_request(traced: Path) -> None:
    clients, apis, engines = (_records(traced, role) for role in ("client", "api", "engine"))
    assert len(clients) == len(apis) == len(engines) == NUM_REQUESTS
    assert {base_request_id(r["id"]) for r in apis} == {r["id"] for r in clients}
    assert {base_request_id(r["id"]) for r in engines} == {r["id"] for r in clients}
    assert all(r["id"][0].isdigit() and ":" in r["id"] for r in engines)  # the API server's prefix
    for engine in engines:
        assert sum(engine["tokens"]) == OUTPUT_LEN
        assert len(engine["step_done"]) == len(engine["written"]) == len(engine["tokens"])


def test_first_token_hops_are_stamped_in_order(traced: Path) -> None:
    by_role = {role: {base_request_id(r["id"]): r for r in _records(traced, role)} for role in ("api", "engine")}
    for client in _records(traced, "client"):
        request = TracedRequest(client, by_role["api"][client["id"]], by_role["engine"][client["id"]])
        stamps = []
        for role, name in FIRST_TOKEN_STAMPS:
            value = getattr(request, role)[name]
            stamps.append(value[0] if isinstance(value, list) else value)
        # Each stamp precedes what it causes; only "handed" races the engine's handling of the message.
        handed = FIRST_TOKEN_STAMPS.index(("api", "handed"))
        assert stamps[handed - 1] <= stamps[handed]  # validated, then handed
        causal = stamps[:handed] + stamps[handed + 1:]
        assert causal == sorted(causal), list(zip(FIRST_TOKEN_STAMPS, stamps))
        arrivals = token_arrivals(request)
        assert arrivals is not None and all(len(arrivals[stage]) == OUTPUT_LEN for stage in TOKEN_STAGES)
        for token in range(OUTPUT_LEN):
            times = [arrivals[stage][token] for stage in TOKEN_STAGES]
            assert times == sorted(times)


def test_report_gives_each_stage_of_the_label(traced: Path) -> None:
    lines = report(traced, "c1")
    first = {line["stage"]: line for line in lines if line["path"] == "first_token"}
    hops = [f"{a[0]}.{a[1]}>{b[0]}.{b[1]}" for a, b in zip(FIRST_TOKEN_STAMPS, FIRST_TOKEN_STAMPS[1:])]
    assert list(first) == hops + ["ttft_client", "ttft_api", "ttft_engine"]
    assert all(line["n"] == NUM_REQUESTS for line in first.values())
    # The hops add up to the client's TTFT, request by request, so their means do too.
    total = sum(first[hop]["mean_ms"] for hop in hops)
    assert total == pytest.approx(first["ttft_client"]["mean_ms"], abs=0.01)
    gaps = {line["stage"]: line for line in lines if line["path"] == "gaps"}
    assert set(gaps) == set(TOKEN_STAGES) and all(line["n"] > 0 for line in gaps.values())
    assert report(traced, "no-such-label") == []
    (slots,) = [line for line in lines if line["path"] == "occupancy"]
    assert slots["n"] == NUM_REQUESTS and slots["peak_in_flight"] == 1  # concurrency 1
    run = slots["run"]
    assert sum(run[name] for name, _, _ in PHASES) == pytest.approx(run["in_flight"], abs=0.03)


def _request(send: int, recv: int, first_step: int, steps: list[int], events: list[int]) -> TracedRequest:
    return TracedRequest({"send": send, "events": events}, None,
                         {"recv": recv, "first_step": first_step, "step_done": steps})


def test_occupancy_splits_the_slots_by_phase() -> None:
    ms = 1_000_000
    # Two slots. A: in flight 0-10 ms (1 in, 1 queued, 2 prefill, 5 decoding, 1 out); B: 0-4 ms, then the
    # slot stays empty until C is sent at 6 ms and runs to 10 ms.
    requests = [
        _request(0, 1 * ms, 2 * ms, [4 * ms, 9 * ms], [5 * ms, 10 * ms]),
        _request(0, 0, 0, [1 * ms, 3 * ms], [2 * ms, 4 * ms]),
        _request(6 * ms, 7 * ms, 7 * ms, [8 * ms, 9 * ms], [10 * ms]),
    ]
    result = occupancy(requests)
    assert result["n"] == 3 and result["peak_in_flight"] == 2
    run = result["run"]
    assert run["seconds"] == 0.01
    assert run["in_flight"] == pytest.approx((10 + 4 + 4) / 10)
    assert run["empty"] == pytest.approx(2 - 1.8)
    assert run["decoding"] == pytest.approx((5 + 2 + 1) / 10)
    assert run["inbound"] == pytest.approx((1 + 0 + 1) / 10)
    assert run["outbound"] == pytest.approx((1 + 1 + 1) / 10)
    assert sum(run[name] for name, _, _ in PHASES) == pytest.approx(run["in_flight"])
    assert occupancy([]) == {"n": 0}
