"""W-GPU at Qwen3-8B's shape as AWQ and GPTQ releases: dummy 4-bit weights of the right shapes, random
codes, and `bench latency` / `bench throughput` running them (on tiny shapes here)."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest
import torch

from infercore.benchmarks import latency, throughput
from infercore.benchmarks.workloads import WORKLOADS, Workload
from infercore.models.contract import ModelSpec
from infercore.models.loader import (
    build_model,
    init_dummy_weights,
    model_class,
    process_weights_after_loading,
)
from infercore.quantization.int4_configs import AwqConfig, GptqConfig
from infercore.quantization.int4_methods import DUMMY_SCALE

INT4 = ["w-gpu-8b-awq", "w-gpu-8b-gptq"]


def _tiny(name: str) -> Workload:
    """The workload on a 64-wide model, its groups shrunk to 32 input rows so that every layer has whole groups."""
    tiny = WORKLOADS[name].tiny()
    quantization = {**tiny.model_config["quantization_config"], "group_size": 32}
    return dataclasses.replace(tiny, name=f"{name}-tiny", variant_of=None, num_requests=3, output_len=(4, 6),
                               model_config={**tiny.model_config, "quantization_config": quantization})


@pytest.mark.parametrize("name", INT4)
def test_int4_workloads_differ_from_w_gpu_8b_only_in_quantization(name: str) -> None:
    bf16, int4 = WORKLOADS["w-gpu-8b"], WORKLOADS[name]
    assert {k: v for k, v in int4.model_config.items() if k != "quantization_config"} == bf16.model_config
    quantization = int4.model_config["quantization_config"]
    assert quantization["bits"] == 4 and quantization["group_size"] == 128
    assert int4.variant_of == "w-gpu-8b" and int4.requests(0) == bf16.requests(0)


@pytest.mark.parametrize(("name", "config_cls"), [(INT4[0], AwqConfig), (INT4[1], GptqConfig)])
def test_dummy_int4_weights_are_random_codes_with_small_scales(name: str, config_cls: type) -> None:
    from transformers import AutoConfig

    model_config = dict(_tiny(name).model_config)
    quantization = model_config.pop("quantization_config")
    hf_config = AutoConfig.for_model(model_config.pop("model_type"), **model_config)
    spec = ModelSpec(hf_config=hf_config, dtype=torch.float32, device=torch.device("cpu"))
    model = build_model(model_class("Qwen3ForCausalLM"), spec, config_cls.from_checkpoint(quantization))
    init_dummy_weights(model, seed=0)
    qkv = model.model.layers[0].self_attn.qkv_proj
    assert qkv.qweight.dtype == torch.int32 and bool((qkv.qweight != 0).any())
    assert bool((qkv.scales == DUMMY_SCALE).all())
    process_weights_after_loading(model)
    codes = qkv.int4_weight.qweight
    assert codes.shape == (64 // 8, qkv.output_size) and len(torch.unique(codes)) > codes.numel() // 2


@pytest.mark.parametrize("name", INT4)
def test_bench_latency_runs_an_int4_workload(name: str, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    tiny = _tiny(name)
    monkeypatch.setitem(WORKLOADS, tiny.name, tiny)
    args = argparse.Namespace(workload=tiny.name, input_len=16, output_len=4, repeats=1, enforce_eager=False,
                              max_num_seqs=8, tensor_parallel_size=1, speculative_config=None,
                              benchmark_acceptance_rate=[None], prompt_period=None)
    assert latency.run(args) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["workload"] == tiny.name and report["decode_ms_per_token"] > 0


def test_bench_throughput_runs_an_int4_workload(monkeypatch: pytest.MonkeyPatch, capfd) -> None:
    tiny = _tiny(INT4[1])
    monkeypatch.setitem(WORKLOADS, tiny.name, tiny)
    parser = argparse.ArgumentParser()
    throughput.add_parser(parser.add_subparsers())
    args = parser.parse_args(["throughput", "--workload", tiny.name, "--no-progress", "--threads", "1"])
    assert throughput.run(args) == 0
    lines = [json.loads(line) for line in capfd.readouterr().out.splitlines() if line.startswith("{")]
    assert lines[-1]["workload"] == tiny.name and lines[-1]["output_tokens"] == sum(tiny.requests(0)[1])
