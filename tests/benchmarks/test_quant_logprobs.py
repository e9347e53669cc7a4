"""``benchmarks/quant_logprobs.py`` scores a format against the weights it was made from: on W-CPU's shape,
FP8 with 128x128 blocks stays within a few hundredths of a nat of the unquantized model and mostly picks
its greedy tokens; a format it does not know is refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "quant_logprobs.py"


def test_fp8_block_against_its_source_on_the_w_cpu_shape() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--workload", "w-cpu", "--formats", "fp8-block",
                          "--num-prompts", "2", "--prompt-len", "32", "--output-len", "8", "--cpu-threads", "1"],
                         capture_output=True, text=True, timeout=600, check=True).stdout
    [line] = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    assert line["format"] == "fp8-block" and line["tokens_scored"] == 2 * (32 + 8 - 1)
    assert 0 < line["abs_logprob_diff_mean"] < 0.2 and line["greedy_agreement"] >= 0.75, line


def test_an_unknown_format_is_refused() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--formats", "fp4"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "unknown formats ['fp4']" in done.stderr
