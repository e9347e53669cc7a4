"""``bench throughput`` with an fp8 KV cache: the ``--kv-cache-dtype`` engine flag and the w-gpu-fp8kv variant
of W-GPU, run after its bf16-KV baseline in the same call."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

import infercore
from infercore.benchmarks import throughput
from infercore.benchmarks.workloads import WORKLOADS, Workload, _qwen3


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    throughput.add_parser(parser.add_subparsers())
    return parser.parse_args(["throughput", *argv])


def test_w_gpu_fp8kv_is_w_gpu_with_an_fp8_cache_and_a_higher_ceiling() -> None:
    plain, fp8 = WORKLOADS["w-gpu"], WORKLOADS["w-gpu-fp8kv"]
    assert fp8.requests(0) == plain.requests(0) and fp8.model_config == plain.model_config
    assert fp8.engine_kwargs == {"kv_cache_dtype": "fp8"} and fp8.variant_of == "w-gpu"
    # 15 TB of bf16 KV reads and ~1.4 TB of weights: halving the KV bytes lifts the ceiling ~1.84x.
    assert fp8.bandwidth_ceiling_tok_s / plain.bandwidth_ceiling_tok_s == pytest.approx((15 + 1.4) / (7.5 + 1.4),
                                                                                        rel=0.01)
    assert [w.name for w in _parse("--workload", "w-gpu,w-gpu-fp8kv").workload] == ["w-gpu", "w-gpu-fp8kv"]


def test_the_flag_sets_the_cache_dtype_of_workloads_without_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[dict[str, Any]] = []
    monkeypatch.setattr(infercore, "LLM", lambda **kwargs: built.append(kwargs))
    args = _parse("--kv-cache-dtype", "fp8")
    throughput.make_llm(WORKLOADS["w-gpu"], Path("unused"), args)
    throughput.make_llm(WORKLOADS["w-gpu-fp8kv"], Path("unused"),
                        _parse("--kv-cache-dtype", "bfloat16"))
    throughput.make_llm(WORKLOADS["w-gpu"], Path("unused"), _parse())
    assert [b.get("kv_cache_dtype") for b in built] == ["fp8", "fp8", None]


def test_an_fp8_kv_variant_runs_after_its_baseline_in_one_call(
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    tiny = Workload(name="t", model_config=_qwen3(256, 32, 64, 2, 2, 1, 16, "float32", 256), dtype="float32",
                    max_model_len=64, num_requests=2, prompt_len=(8, 12), output_len=(3, 4), token_id_max=255,
                    temperature=0.0)
    fp8 = dataclasses.replace(tiny, name="t-fp8kv", variant_of="t", engine_kwargs={"kv_cache_dtype": "fp8"})
    for workload in (tiny, fp8):
        monkeypatch.setitem(WORKLOADS, workload.name, workload)
    assert throughput.run(_parse("--workload", "t,t-fp8kv", "--no-progress", "--threads", "1")) == 0
    lines = [json.loads(line) for line in capfd.readouterr().out.splitlines() if line.startswith("{")]
    plain, quantized = lines
    assert (plain["workload"], quantized["workload"]) == ("t", "t-fp8kv")
    assert quantized["output_tokens"] == plain["output_tokens"] == sum(tiny.requests(0)[1])
    assert quantized["fraction_of_baseline"] == round(quantized["output_tok_s"] / plain["output_tok_s"], 3)
