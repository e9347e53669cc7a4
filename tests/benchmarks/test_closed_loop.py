"""``benchmarks/closed_loop.py`` keeps C requests in the offline engine and times its steps by kind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "closed_loop.py"


def test_a_tiny_closed_loop_reports_each_setting_and_its_step_kinds() -> None:
    """Every setting runs once per refill delay (replacements arriving some steps after a finish), and
    each run completes every request."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny", "--concurrency", "6", "--num-requests", "12", "--input-len", "300",
         "--output-len", "5", "--max-model-len", "512", "--engine-args", '{"max_num_batched_tokens": 1024}',
         "--settings", '[{}, {"max_prefill_tokens_per_decode": 1}]', "--refill-delay-steps", "0", "3"],
        capture_output=True, text=True, timeout=600, check=True)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(line["setting"], line["refill_delay_steps"]) for line in lines] == [
        ({}, 0), ({}, 3), ({"max_prefill_tokens_per_decode": 1}, 0), ({"max_prefill_tokens_per_decode": 1}, 3)]
    for line in lines:
        assert line["concurrency"] == 6 and line["requests"] == 12 and line["output_tok_s"] > 0
        steps = line["steps"]
        assert "decode|D0" in steps and any(kind.startswith("prompt") for kind in steps), steps
        # 12 requests of 300 prompt tokens in a budget of 1,024: at least 4 steps with prompt tokens, and at
        # least 4 decode steps each (5 tokens, the first from the prompt's step).
        assert sum(n for kind, (n, _, _) in steps.items() if kind.startswith("prompt")) >= 4
        assert sum(n for kind, (n, _, _) in steps.items() if kind.startswith("decode")) >= 4
        assert all(mean_ms > 0 and held_ms >= 0 for _, mean_ms, held_ms in steps.values())
