"""`infercore bench throughput` end to end on a cut-down W-CPU: JSON lines for infercore and HF."""

from __future__ import annotations

import json
import subprocess
import sys


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "infercore.entrypoints.cli", "bench", "throughput", *args],
                          capture_output=True, text=True, timeout=600)


def test_repeated_run_beside_hf_prints_both_lines_and_the_ratio() -> None:
    proc = _bench("--workload", "w-cpu", "--num-requests", "2", "--repeat", "2", "--compare-hf",
                  "--no-progress", "--threads", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    ours, theirs = (json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{"))
    assert ours["engine"] == "infercore" and ours["requests"] == 2
    assert ours["output_tokens"] == 2 * 128  # greedy, EOS ignored, 128 new tokens each
    assert len(ours["runs_output_tok_s"]) == 2 and ours["output_tok_s"] > 0
    assert ours["triton_builds_during_run"] == {}
    assert theirs["engine"] == "hf-transformers" and theirs["output_tokens"] == 2 * 128
    assert theirs["ratio_infercore_over_hf"] == round(ours["output_tok_s"] / theirs["output_tok_s"], 2)


def test_repeat_must_be_positive() -> None:
    proc = _bench("--repeat", "0")
    assert proc.returncode == 2
    assert "--repeat" in proc.stderr and "at least 1" in proc.stderr
