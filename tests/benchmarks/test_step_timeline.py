"""``benchmarks/step_timeline.py`` profiles the requests ``infercore bench throughput`` sends."""

from __future__ import annotations

import importlib.util
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
