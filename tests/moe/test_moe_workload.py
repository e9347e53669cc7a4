"""W-GPU-MoE: Qwen3-30B-A3B's shape, and a shrunken copy run through ``bench throughput --compare-hf``."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from infercore.benchmarks import throughput
from infercore.benchmarks.workloads import WORKLOADS


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    throughput.add_parser(parser.add_subparsers())
    return parser.parse_args(["throughput", *argv])


def total_params(config: dict) -> float:
    hidden, layers, head_dim = config["hidden_size"], config["num_hidden_layers"], config["head_dim"]
    attention = hidden * head_dim * (2 * config["num_attention_heads"] + 2 * config["num_key_value_heads"])
    experts = config["num_experts"] * 3 * hidden * config["moe_intermediate_size"]
    return layers * (attention + experts + config["num_experts"] * hidden) + 2 * config["vocab_size"] * hidden


def test_w_gpu_moe_is_qwen3_30b_a3b_shaped() -> None:
    workload = WORKLOADS["w-gpu-moe"]
    config = workload.model_config
    assert config["architectures"] == ["Qwen3MoeForCausalLM"] and workload.dtype == "bfloat16"
    assert (config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"],
            config["num_key_value_heads"], config["head_dim"], config["num_experts"], config["num_experts_per_tok"],
            config["moe_intermediate_size"], config["vocab_size"]) == (48, 2048, 32, 4, 128, 128, 8, 768, 151936)
    assert total_params(config) == pytest.approx(30.5e9, rel=0.01)
    prompts, max_tokens = workload.requests(0)
    assert len(prompts) == 256 and {len(p) for p in prompts} == {512} and set(max_tokens) == {256}


@pytest.mark.parametrize("hf_args", [(), ("--hf-mode", "static", "--hf-batch-size", "2")])
def test_shrunken_w_gpu_moe_runs_in_infercore_and_hf(monkeypatch: pytest.MonkeyPatch,
                                                     capfd: pytest.CaptureFixture[str], hf_args: tuple[str, ...]) -> None:
    full = WORKLOADS["w-gpu-moe"]
    tiny = dataclasses.replace(
        full, name="t-moe", dtype="float32", max_model_len=64, num_requests=3, prompt_len=(8, 12),
        output_len=(3, 4), token_id_max=255,
        model_config={**full.model_config, "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 2,
                      "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "num_experts": 4,
                      "num_experts_per_tok": 2, "moe_intermediate_size": 16, "intermediate_size": 64,
                      "max_position_embeddings": 256, "torch_dtype": "float32"})
    monkeypatch.setitem(WORKLOADS, tiny.name, tiny)
    assert throughput.run(_parse("--workload", "t-moe", "--compare-hf", "--no-progress", "--threads", "1",
                                 *hf_args)) == 0
    ours, hf = [json.loads(line) for line in capfd.readouterr().out.splitlines() if line.startswith("{")]
    assert ours["workload"] == hf["workload"] == "t-moe"
    assert ours["output_tokens"] == sum(tiny.requests(0)[1]) and hf["engine"] == "hf-transformers"
    assert hf["output_tokens"] > 0 and hf["ratio_infercore_over_hf"] > 0
    if hf_args:  # sorted by prompt length, batches of two, each run to its longest request
        prompts, max_tokens = tiny.requests(0)
        order = sorted(range(3), key=lambda i: len(prompts[i]))
        batches = [order[:2], order[2:]]
        assert hf["mode"].startswith("generate, static batches of 2")
        assert hf["output_tokens"] == sum(len(b) * max(max_tokens[i] for i in b) for b in batches)
