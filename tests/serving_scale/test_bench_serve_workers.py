"""`infercore bench serve` spreads its load over client processes, reports its own CPU use, sweeps
request rates into a table, and runs the same requests offline in the same call."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from infercore.benchmarks.serve import PROBE_SEED_OFFSET, _shares, _split, make_prompts

NUM_PROMPTS = 10
OUTPUT_LEN = 6


def _bench(url: str, *flags: str) -> tuple[list[dict], str]:
    result = subprocess.run(
        [sys.executable, "-m", "infercore.entrypoints.cli", "bench", "serve", "--base-url", url,
         "--num-prompts", str(NUM_PROMPTS), "--input-len", "12", "--output-len", str(OUTPUT_LEN), "--no-progress",
         *flags], capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")], result.stderr


@pytest.fixture(scope="module")
def server(start):
    return start()


def test_concurrency_is_shared_between_workers() -> None:
    assert [_split(5, w, 2) for w in range(2)] == [3, 2]
    assert [_split(64, w, 3) for w in range(3)] == [22, 21, 21]
    assert _split(None, 0, 4) is None


def test_requests_are_shared_in_proportion_to_each_workers_slots() -> None:
    """1,024 requests at concurrency 256 over 6 processes: 4 requests per slot in every process (an even
    split gave the 42-slot processes 170 requests, a fifth round of 2 after everyone else finished)."""
    items = list(range(1024))
    shares = _shares(items, 256, 6)
    assert [c for _, c in shares] == [43, 43, 43, 43, 42, 42]
    assert [len(s) for s, _ in shares] == [172, 172, 172, 172, 168, 168]
    assert sorted(i for s, _ in shares for i in s) == items
    # Not a multiple: every request is sent once, and no process's requests per slot differ by one or more.
    shares = _shares(list(range(100)), 7, 3)
    assert sum(len(s) for s, _ in shares) == 100 and sorted(i for s, _ in shares for i in s) == list(range(100))
    per_slot = [len(s) / c for s, c in shares]
    assert max(per_slot) - min(per_slot) < 1
    # Without a concurrency (a request rate), requests are dealt out in turn.
    assert _shares(list(range(5)), None, 2) == [([0, 2, 4], None), ([1, 3], None)]


def test_two_workers_complete_every_request_and_report_cpu(server) -> None:
    [summary], _ = _bench(server.url, "--num-workers", "2", "--max-concurrency", "4")
    assert summary["completed"] == NUM_PROMPTS and summary["failed"] == 0
    assert summary["total_output_tokens"] == NUM_PROMPTS * OUTPUT_LEN
    assert summary["num_workers"] == 2
    assert summary["client_cpu_s"] > 0 and summary["client_cpu_busiest_worker"] > 0
    # The processes wait for each other before loading: their loads start together, whenever each spawned.
    assert 0 <= summary["client_start_spread_s"] < 0.1
    assert summary["client_end_spread_s"] >= 0
    assert summary["ttft_p50_ms"] > 0 and summary["tpot_p50_ms"] > 0


def test_rate_sweep_prints_a_line_per_rate_and_a_table(server) -> None:
    summaries, stderr = _bench(server.url, "--request-rate", "20", "80", "--num-workers", "2")
    assert [s["request_rate"] for s in summaries] == [20.0, 80.0]
    assert all(s["completed"] == NUM_PROMPTS for s in summaries)
    table = [line for line in stderr.splitlines() if line.startswith("|")]
    assert table[0].startswith("| req/s") and len(table) == 2 + 2
    assert table[2].startswith("| 20.0 |") and table[3].startswith("| 80.0 |")


def test_offline_run_uses_the_same_requests(server, tiny_folder) -> None:
    engine_args = json.dumps({"dtype": "float32", "max_model_len": 256, "num_gpu_blocks_override": 64,
                              "cpu_threads": 1})
    [summary], _ = _bench(server.url, "--max-concurrency", "4", "--offline-model", str(tiny_folder),
                          "--offline-engine-args", engine_args, "--offline-prefill-probes", "3", "--label", "c4")
    assert summary["offline_total_output_tokens"] == summary["total_output_tokens"] == NUM_PROMPTS * OUTPUT_LEN
    assert summary["online_over_offline"] == pytest.approx(
        summary["output_throughput_tok_s"] / summary["offline_output_throughput_tok_s"])
    # The batch-1 prefill reference of TTFT, timed on the offline engine after the run.
    assert summary["offline_prefill_probes"] == 3
    assert 0 < summary["offline_prefill_min_ms"] <= summary["offline_prefill_p50_ms"]
    assert summary["label"] == "c4"


def test_offline_run_over_two_data_parallel_engines(tiny_folder) -> None:
    """``LLM`` drives one engine: with data_parallel_size 2 the offline side is both engines (AsyncLLM)."""
    from infercore.benchmarks.serve_offline import run_offline

    engine_args = json.dumps({"dtype": "float32", "max_model_len": 256, "num_gpu_blocks_override": 64,
                              "cpu_threads": 1, "data_parallel_size": 2})
    prompts = make_prompts(6, 12, True, 256, 0, None)
    probes = make_prompts(2, 12, True, 256, PROBE_SEED_OFFSET, None)
    result = run_offline(str(tiny_folder), engine_args, prompts, OUTPUT_LEN, probes)
    assert result["offline_total_output_tokens"] == 6 * OUTPUT_LEN
    assert result["offline_output_throughput_tok_s"] > 0 and result["offline_prefill_probes"] == 2


def test_prefill_probes_share_no_prefix_with_the_run() -> None:
    run = make_prompts(50, 16, True, 10000, seed=0)
    probes = make_prompts(5, 16, True, 10000, seed=PROBE_SEED_OFFSET)
    assert not {tuple(p) for p in run} & {tuple(p) for p in probes}


def test_bad_worker_count_is_refused_with_a_reason(server) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "infercore.entrypoints.cli", "bench", "serve", "--base-url", server.url,
         "--num-workers", "4", "--max-concurrency", "2"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "at least --num-workers" in result.stderr


def test_prefill_probes_without_an_offline_model_are_refused(server) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "infercore.entrypoints.cli", "bench", "serve", "--base-url", server.url,
         "--offline-prefill-probes", "4"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "needs --offline-model" in result.stderr


def test_each_rate_of_a_sweep_sends_prompts_of_its_own(monkeypatch) -> None:
    """A later rate never meets the last rate's prompts in the server's prefix cache (a flattered TTFT)."""
    import argparse

    from infercore.benchmarks import serve

    calls = []

    def fake_run(args, rate, seed):
        calls.append((rate, seed))
        return {"request_rate": rate, "completed": 1, "output_throughput_tok_s": 1.0, "ttft_p50_ms": 1.0,
                "ttft_p99_ms": 1.0, "tpot_p50_ms": 1.0, "tpot_p99_ms": 1.0}

    monkeypatch.setattr(serve, "run_benchmark", fake_run)
    subparsers = argparse.ArgumentParser().add_subparsers()
    args = serve.add_bench_serve_parser(subparsers).parse_args(["--request-rate", "4", "16", "64", "--seed", "3"])
    assert serve.run_bench_serve(args) == 0
    assert [rate for rate, _ in calls] == [4.0, 16.0, 64.0]
    seeds = [seed for _, seed in calls]
    assert seeds[0] == 3 and len(set(seeds)) == 3
    prompts = [serve.make_prompts(4, 32, True, 10000, seed=seed) for seed in seeds]
    assert not {tuple(p[:16]) for p in prompts[0]} & {tuple(p[:16]) for p in prompts[1] + prompts[2]}
