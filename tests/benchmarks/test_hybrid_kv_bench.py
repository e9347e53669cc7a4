"""``benchmarks/hybrid_kv.py`` serves the same requests with one block table and with KV cache groups in
the same memory: the groups fit more requests at once, preempt less and give the same tokens."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "hybrid_kv.py"


def test_groups_hold_more_requests_in_the_same_memory_with_the_same_tokens() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--layers", "6", "--window", "16", "--prompt-len", "96", "--max-tokens", "8",
         "--num-requests", "8", "--kv-bytes", str(1 << 20), "--step-tokens", "128", "--threads", "1"],
        capture_output=True, text=True, timeout=600, check=True)
    one_table, groups, verdict = (json.loads(line) for line in done.stdout.splitlines())
    assert one_table["windows"] == [None] and groups["windows"] == [None, 16]
    # 1 MiB holds 42 blocks of all six layers; with groups, the global layer's pool reaches its cap (8 seats
    # of 8 blocks, and the null block) and all 8 requests run at once, none preempted.
    assert one_table["pool_blocks"] == [42] and groups["pool_blocks"][0] == 8 * 8 + 1
    assert groups["most_running"] == 8 > one_table["most_running"]
    assert groups["preemptions"] == 0 < one_table["preemptions"]
    assert groups["output_tokens"] == one_table["output_tokens"] == 64
    assert verdict["same_tokens"] and verdict["hybrid_over_one_table"] > 0
