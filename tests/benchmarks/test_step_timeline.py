"""``benchmarks/step_timeline.py`` profiles the requests ``infercore bench throughput`` sends."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from infercore.benchmarks.workloads import WORKLOADS

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "step_timeline.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("step_timeline", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sampling_workload_keeps_its_options_and_seeds() -> None:
    """``--workload w-gpu-sampling`` samples with top-k, top-p, penalties and a seed per request, so the
    timeline shows the sampling path and not plain temperature sampling."""
    workload = WORKLOADS["w-gpu-sampling"]
    prompts, params = load_script().workload_requests(workload, seed=2)
    expected_prompts, max_tokens = workload.requests(2)
    assert prompts == expected_prompts and [p.max_tokens for p in params] == max_tokens
    assert {(p.top_k, p.top_p, p.repetition_penalty, p.presence_penalty) for p in params} == {(50, 0.9, 1.1, 0.5)}
    assert [p.seed for p in params] == list(range(2, 2 + len(prompts)))
    assert all(p.ignore_eos and not p.detokenize for p in params)


def test_a_tiny_sampling_run_times_the_runners_metadata_gather() -> None:
    """The script runs the sampling workload end to end on a CPU, and its ``sampling_metadata`` phase
    times the per-row gather the runner calls each step (not a builder the runner no longer uses)."""
    done = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--workload", "w-gpu-sampling",
                           "--num-requests", "1"], capture_output=True, text=True, timeout=300, check=True)
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["workload"] == "w-gpu-sampling" and summary["output_tokens"] > 0
    assert summary["phase_totals_s"]["sampling_metadata"] > 0


def test_decode_reads_are_counted_from_the_plan_and_the_cache_shape() -> None:
    """Each one-token request reads its computed tokens plus its own; prompt chunks are not decodes. A W-GPU
    context token holds 28 layers x 8 KV heads x 128 x K and V in bf16, half that in an fp8 cache."""
    from infercore.wire.scheduler_output import CachedRequests, SchedulerOutput

    script = load_script()
    cached = CachedRequests(req_ids=["a", "b", "c"], num_computed_tokens=[10, 99, 500])
    out = SchedulerOutput(scheduled_new_reqs=[], scheduled_cached_reqs=cached, num_scheduled_tokens=[1, 64, 1],
                          total_num_scheduled_tokens=66, finished_req_ids=set())
    assert script.decode_context_tokens(out) == 11 + 501
    assert script.kv_bytes_per_token(WORKLOADS["w-gpu"]) == 28 * 8 * 128 * 2 * 2
    assert script.kv_bytes_per_token(WORKLOADS["w-gpu-fp8kv"]) == 28 * 8 * 128 * 2


def test_a_tiny_run_reports_the_decode_context_per_bucket() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--num-requests", "3"],
                          capture_output=True, text=True, timeout=300, check=True)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"bucket"')]
    decodes = [r for r in rows if r["bucket"].startswith("decode")]
    assert decodes and all(r["decode_context_tokens"] > 0 for r in decodes)


def test_device_gaps_total_the_idle_time_after_each_step_by_bucket() -> None:
    """Each step's device time goes to its batch bucket with the idle time that followed it; the last step
    has none after it, and an overlap (the next step queued before this one ended) counts as no idle time."""
    script = load_script()
    steps = [(40.0, 4096, 8), (5.0, 256, 256), (4.0, 200, 200), (1.0, 3, 3)]
    summary = script.summarize_gaps(steps, [0.5, -0.01, 0.25])
    assert summary["steps"] == 4 and summary["step_ms"] == 50.0
    assert summary["idle_between_steps_ms"] == 0.75
    assert summary["idle_fraction"] == round(0.75 / 50.75, 4)
    assert summary["by_bucket"] == {
        "prefill/mixed": {"steps": 1, "step_ms": 40.0, "idle_after_ms": 0.5},
        "decode>=224": {"steps": 1, "step_ms": 5.0, "idle_after_ms": 0.0},
        "decode>=160": {"steps": 1, "step_ms": 4.0, "idle_after_ms": 0.25},
        "decode>=1": {"steps": 1, "step_ms": 1.0, "idle_after_ms": 0.0},
    }
