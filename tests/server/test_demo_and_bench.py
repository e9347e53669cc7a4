"""`infercore serve` with no model serves the demo model; `infercore bench serve` measures it."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from infercore.demo import cache_dir


@pytest.fixture(scope="module")
def demo(start_server, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    return start_server(model=None, env={"INFERCORE_CACHE_DIR": str(cache)})


def test_demo_model_is_served_and_announced(demo) -> None:
    models = httpx.get(demo.url + "/v1/models").json()["data"]
    assert models[0]["id"] == "tiny"  # --served-model-name still wins
    assert "random weights" in demo.output() and "gibberish" in demo.output()
    assert httpx.post(demo.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 3}).status_code == 200


def test_cache_dir_follows_environment(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("INFERCORE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "infercore"
    monkeypatch.setenv("INFERCORE_CACHE_DIR", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x"


@pytest.mark.parametrize("load", [["--request-rate", "8"], ["--request-rate", "inf", "--max-concurrency", "4"]])
def test_bench_serve_reports_latency_figures(demo, load) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "infercore.entrypoints.cli", "bench", "serve", "--base-url", demo.url,
         "--num-prompts", "12", "--input-len", "16", "--output-len", "8", "--no-progress", *load],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    print(json.dumps(summary))
    assert summary["completed"] == 12 and summary["failed"] == 0
    for key in ("ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "tpot_p50_ms", "itl_p99_ms", "request_throughput",
                "output_throughput_tok_s"):
        assert summary[key] > 0, key
    assert summary["total_output_tokens"] == 12 * 8
