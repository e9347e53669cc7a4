"""benchmarks/schedule_model.py: w-gpu-long's schedule through the real scheduler, priced by the roofline."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "benchmarks" / "schedule_model.py"


def _module():
    spec = importlib.util.spec_from_file_location("schedule_model", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["schedule_model"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_long_prompts_prefill_in_tens_of_steps_and_the_schedule_models_near_the_estimate() -> None:
    """Every request runs to its end; the steps that carry prompt tokens stay in the low hundreds (a backlog of
    long prompts drains in shares of itself, not in 512-token steps beside the decodes: 1,353 such steps
    without that share), and the roofline of the schedule is within 10% of the workload's estimate."""
    from infercore.benchmarks.workloads import WORKLOADS

    workload = WORKLOADS["w-gpu-long"]
    record = _module().model_schedule(workload)
    groups = record["groups"]
    prompts, outputs = workload.requests()
    assert sum(g["prompt_tokens"] for g in groups.values()) == sum(len(p) for p in prompts)
    assert groups["pure_decode"]["steps"] < max(outputs)
    assert groups["prompt_under_4096"]["steps"] + groups["prompt_4096_up"]["steps"] < 200
    assert 1.0 <= record["modelled_over_estimate"] < 1.1


@pytest.mark.parametrize("bound", ["16", "none"])
def test_cli_prints_one_json_line(bound: str) -> None:
    done = subprocess.run([sys.executable, str(TOOL), "--workload", "w-gpu-long", "--max-prefill-tokens-per-decode",
                           bound], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(done.stdout.strip().splitlines()[-1])
    assert record["benchmark"] == "schedule_model" and record["steps"] > 0
    assert record["max_prefill_tokens_per_decode"] == (None if bound == "none" else 16)
