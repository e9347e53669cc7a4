"""W-GPU at Qwen3-8B's shape in bf16 and as its FP8 block-scaled release, run in one call."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from infercore.benchmarks import throughput
from infercore.benchmarks.flops import linear_params_per_layer
from infercore.benchmarks.workloads import WORKLOADS, Workload, _qwen3


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    throughput.add_parser(parser.add_subparsers())
    return parser.parse_args(["throughput", *argv])


def test_w_gpu_8b_is_qwen3_8b_shaped_and_its_fp8_twin_differs_only_in_quantization() -> None:
    bf16, fp8 = WORKLOADS["w-gpu-8b"], WORKLOADS["w-gpu-8b-fp8"]
    config = bf16.model_config
    assert (config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"],
            config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"],
            config["vocab_size"]) == (4096, 12288, 36, 32, 8, 128, 151936)
    assert linear_params_per_layer(config) * 36 == pytest.approx(6.95e9, rel=0.01)
    assert bf16.requests(0) == WORKLOADS["w-gpu"].requests(0) == fp8.requests(0)
    quantization = fp8.model_config["quantization_config"]
    assert quantization["quant_method"] == "fp8" and quantization["weight_block_size"] == [128, 128]
    assert {k: v for k, v in fp8.model_config.items() if k != "quantization_config"} == config
    assert fp8.variant_of == "w-gpu-8b" and fp8.engine_shape() != bf16.engine_shape()
    assert [w.name for w in _parse("--workload", "w-gpu-8b,w-gpu-8b-fp8").workload] == ["w-gpu-8b", "w-gpu-8b-fp8"]


def test_w_gpu_moe_fp8_is_w_gpu_moe_as_its_fp8_block_release() -> None:
    bf16, fp8 = WORKLOADS["w-gpu-moe"], WORKLOADS["w-gpu-moe-fp8"]
    assert {k: v for k, v in fp8.model_config.items() if k != "quantization_config"} == bf16.model_config
    assert fp8.model_config["quantization_config"]["weight_block_size"] == [128, 128]
    assert fp8.requests(0) == bf16.requests(0) and fp8.variant_of == "w-gpu-moe"
    assert [w.name for w in _parse("--workload", "w-gpu-moe,w-gpu-moe-fp8").workload] == ["w-gpu-moe",
                                                                                         "w-gpu-moe-fp8"]


def test_a_variant_of_another_shape_runs_in_its_own_engine_after_its_baseline(
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    tiny = Workload(name="t", model_config=_qwen3(256, 32, 64, 2, 2, 1, 16, "float32", 256), dtype="float32",
                    max_model_len=64, num_requests=2, prompt_len=(8, 12), output_len=(3, 4), token_id_max=255,
                    temperature=0.0)
    block = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [16, 16]}
    fp8 = dataclasses.replace(tiny, name="t-fp8", variant_of="t",
                              model_config={**tiny.model_config, "quantization_config": block})
    for workload in (tiny, fp8):
        monkeypatch.setitem(WORKLOADS, workload.name, workload)
    assert throughput.run(_parse("--workload", "t,t-fp8", "--no-progress", "--threads", "1")) == 0
    lines = [json.loads(line) for line in capfd.readouterr().out.splitlines() if line.startswith("{")]
    plain, quantized = lines
    assert (plain["workload"], quantized["workload"]) == ("t", "t-fp8")
    assert quantized["output_tokens"] == plain["output_tokens"] == sum(tiny.requests(0)[1])
    assert quantized["baseline"] == "t"
    assert quantized["fraction_of_baseline"] == round(quantized["output_tok_s"] / plain["output_tok_s"], 3)


@pytest.mark.parametrize(("name", "strategy"), [("w-gpu-8b-fp8-channel", "channel"), ("w-gpu-8b-fp8-tensor", "tensor")])
def test_the_compressed_tensors_fp8_variants_run_beside_their_baseline(
        name: str, strategy: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    bf16, fp8 = WORKLOADS["w-gpu-8b"], WORKLOADS[name]
    assert {k: v for k, v in fp8.model_config.items() if k != "quantization_config"} == bf16.model_config
    group = fp8.model_config["quantization_config"]["config_groups"]["group_0"]
    assert group["weights"]["strategy"] == strategy and group["input_activations"]["dynamic"]
    assert fp8.variant_of == "w-gpu-8b" and fp8.requests(0) == bf16.requests(0)
    # The same layout on a tiny model with dummy weights, through `bench throughput` after its baseline.
    base = dataclasses.replace(bf16.tiny(), name="t8b", num_requests=3, output_len=(3, 4))
    quantized = dataclasses.replace(fp8.tiny(), name="t8b-fp8", variant_of="t8b", num_requests=3, output_len=(3, 4))
    for workload in (base, quantized):
        monkeypatch.setitem(WORKLOADS, workload.name, workload)
    assert throughput.run(_parse("--workload", "t8b,t8b-fp8", "--no-progress", "--threads", "1")) == 0
    lines = [json.loads(line) for line in capfd.readouterr().out.splitlines() if line.startswith("{")]
    assert [line["workload"] for line in lines] == ["t8b", "t8b-fp8"]
    assert lines[1]["output_tokens"] == lines[0]["output_tokens"] and lines[1]["baseline"] == "t8b"
