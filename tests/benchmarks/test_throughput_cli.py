"""`infercore bench throughput` on a cut-down W-CPU: JSON lines for infercore and HF; the CLI's refusals."""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys

import pytest

from infercore.benchmarks import throughput
from infercore.benchmarks.workloads import WORKLOADS


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "infercore.entrypoints.cli", "bench", "throughput", *args],
                          capture_output=True, text=True, timeout=600)


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    throughput.add_parser(parser.add_subparsers())
    return parser.parse_args(["throughput", *argv])


def test_repeated_run_beside_hf_prints_both_lines_and_the_ratio(monkeypatch: pytest.MonkeyPatch,
                                                                capfd: pytest.CaptureFixture[str]) -> None:
    """W-CPU cut down to a tiny model and short requests (the CLI's own parsing is the test below)."""
    full = WORKLOADS["w-cpu"]
    tiny = dataclasses.replace(
        full, name="t-cpu", max_model_len=128, num_requests=2, prompt_len=(8, 12), output_len=(16, 16),
        token_id_max=255, model_config={**full.model_config, "vocab_size": 256, "hidden_size": 32,
                                        "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                                        "num_key_value_heads": 1, "head_dim": 16, "max_position_embeddings": 256})
    monkeypatch.setitem(WORKLOADS, tiny.name, tiny)
    assert throughput.run(_parse("--workload", "t-cpu", "--repeat", "2", "--compare-hf", "--no-progress",
                                 "--threads", "1")) == 0
    ours, theirs = (json.loads(line) for line in capfd.readouterr().out.splitlines() if line.startswith("{"))
    assert ours["engine"] == "infercore" and ours["requests"] == 2
    assert ours["output_tokens"] == 2 * 16  # greedy, EOS ignored, 16 new tokens each
    assert len(ours["runs_output_tok_s"]) == 2 and ours["output_tok_s"] > 0
    assert ours["triton_builds_during_run"] == {}
    assert all(isinstance(v, int) for v in ours["allocator_events_during_run"].values())
    assert theirs["engine"] == "hf-transformers" and theirs["output_tokens"] == 2 * 16
    assert theirs["ratio_infercore_over_hf"] == round(ours["output_tok_s"] / theirs["output_tok_s"], 2)


def test_repeat_must_be_positive() -> None:
    proc = _bench("--repeat", "0")
    assert proc.returncode == 2
    assert "--repeat" in proc.stderr and "at least 1" in proc.stderr
