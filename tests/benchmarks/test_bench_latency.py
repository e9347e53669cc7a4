"""`infercore bench latency`: runs on the CPU and times every run from an empty prefix cache."""

from __future__ import annotations

import argparse
import json

import pytest

from infercore import LLM
from infercore.benchmarks import latency


def test_every_timed_run_prefills_its_prompt_in_full(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    resets = []
    original = LLM.reset_prefix_cache

    def counting_reset(self: LLM) -> bool:
        resets.append(1)
        return original(self)

    monkeypatch.setattr(LLM, "reset_prefix_cache", counting_reset)
    args = argparse.Namespace(workload="w-cpu", input_len=16, output_len=4, repeats=2, enforce_eager=False,
                              max_num_seqs=8, tensor_parallel_size=1, speculative_config=None,
                              benchmark_acceptance_rate=[None], prompt_period=None)
    assert latency.run(args) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["benchmark"] == "latency" and report["ttft_ms"] > 0
    # warm-up, then two runs of one token and two of four: each timed run starts from an empty cache
    assert len(resets) == 1 + 2 + 2
