"""The named workloads: W-GPU's sampling and prefill variants, the FLOPs count, and several in one call."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from infercore.benchmarks import throughput
from infercore.benchmarks.flops import (
    H200_BF16_DENSE_FLOPS,
    H200_GEMM_FLOPS,
    H200_HBM_BYTES_PER_S,
    H200_LONG_PREFILL_ATTENTION_FLOPS,
    generation_flops,
    kv_bytes_per_token,
    linear_params_per_layer,
    long_context_estimate_s,
)
from infercore.benchmarks.workloads import WORKLOADS, Workload, _qwen3


def test_w_gpu_sampling_repeats_w_gpu_with_chat_options_and_a_seed_per_request() -> None:
    plain, sampling = WORKLOADS["w-gpu"], WORKLOADS["w-gpu-sampling"]
    assert sampling.requests(0) == plain.requests(0)
    _, max_tokens = sampling.requests(0)
    params = sampling.sampling_params(max_tokens, seed=3)
    assert [p.max_tokens for p in params] == max_tokens and len(params) == 256
    assert {(p.temperature, p.top_p, p.top_k, p.repetition_penalty, p.presence_penalty) for p in params} == {
        (0.6, 0.9, 50, 1.1, 0.5)}
    assert [p.seed for p in params] == list(range(3, 3 + 256))
    assert all(p.ignore_eos and not p.detokenize for p in params)
    assert sampling.variant_of == "w-gpu" and sampling.engine_shape() == plain.engine_shape()
    assert {p.seed for p in plain.sampling_params(max_tokens)} == {None}
    assert {(p.top_p, p.top_k, p.repetition_penalty) for p in plain.sampling_params(max_tokens)} == {(1.0, 0, 1.0)}


def test_w_gpu_prefill_is_256_prompts_of_2048_random_ids_with_16_outputs() -> None:
    prefill = WORKLOADS["w-gpu-prefill"]
    prompts, max_tokens = prefill.requests(0)
    assert [len(p) for p in prompts] == [2048] * 256 and max_tokens == [16] * 256
    assert min(min(p) for p in prompts) >= 0 and max(max(p) for p in prompts) <= prefill.token_id_max
    assert len({tuple(p[:8]) for p in prompts}) == 256  # no shared prefixes for the cache to skip
    assert prefill.max_model_len >= 2048 + 16
    assert prefill.compute_bound and prefill.bandwidth_ceiling_tok_s is None
    assert prefill.engine_shape() == WORKLOADS["w-gpu"].engine_shape()


def test_qwen3_0_6b_shape_has_0_44b_weights_in_its_layers() -> None:
    config = WORKLOADS["w-gpu"].model_config
    assert linear_params_per_layer(config) * config["num_hidden_layers"] == pytest.approx(0.44e9, rel=0.01)


def test_generation_flops_sum_every_position_read_and_every_logit_row() -> None:
    config = _qwen3(vocab=50, hidden=8, inter=16, layers=3, heads=2, kv_heads=1, head_dim=4,
                    dtype="float32", max_pos=64)
    linear = 8 * 8 * 2 + 8 * 4 * 2 + 3 * 8 * 16  # q and o, k and v, gate/up/down
    expected = 0
    for prompt_len, output_len in ((5, 3), (7, 1)):
        for position in range(prompt_len + output_len - 1):
            expected += 3 * (2 * linear + 2 * 2 * (position + 1) * 4 * 2)
        expected += output_len * 2 * 8 * 50
    assert generation_flops(config, [5, 7], [3, 1]) == expected


def test_w_gpu_prefill_compute_limit_is_about_0_6_s_on_an_h200() -> None:
    prefill = WORKLOADS["w-gpu-prefill"]
    prompts, max_tokens = prefill.requests(0)
    seconds = generation_flops(prefill.model_config, [len(p) for p in prompts], max_tokens) / H200_BF16_DENSE_FLOPS
    assert 0.55 < seconds < 0.65


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    throughput.add_parser(parser.add_subparsers())
    return parser.parse_args(["throughput", *argv])


def test_workloads_of_one_shape_run_in_one_engine_with_their_own_figures(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    tiny = Workload(name="t", model_config=_qwen3(256, 32, 64, 2, 2, 1, 16, "float32", 256), dtype="float32",
                    max_model_len=128, num_requests=3, prompt_len=(8, 20), output_len=(4, 6), token_id_max=255,
                    temperature=0.7)
    variants = [tiny,
                dataclasses.replace(tiny, name="t-sampling", seeded=True, variant_of="t",
                                    sampling_options={"top_p": 0.9, "top_k": 5, "repetition_penalty": 1.1}),
                dataclasses.replace(tiny, name="t-prefill", output_len=(2, 2), compute_bound=True)]
    for workload in variants:
        monkeypatch.setitem(WORKLOADS, workload.name, workload)
    engines = []
    make_llm = throughput.make_llm

    def counted_make_llm(*args: object) -> object:
        engines.append(make_llm(*args))  # type: ignore[arg-type]
        return engines[-1]

    monkeypatch.setattr(throughput, "make_llm", counted_make_llm)
    assert throughput.run(_parse("--workload", "t,t-sampling,t-prefill", "--no-progress", "--threads", "2")) == 0
    plain, sampling, prefill = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert len(engines) == 1
    assert [r["workload"] for r in (plain, sampling, prefill)] == ["t", "t-sampling", "t-prefill"]
    prompts, max_tokens = tiny.requests(0)
    assert plain["output_tokens"] == sampling["output_tokens"] == sum(max_tokens)
    assert plain["prompt_tokens"] == prefill["prompt_tokens"] == sum(len(p) for p in prompts)
    assert sampling["baseline"] == "t"
    assert sampling["fraction_of_baseline"] == round(sampling["output_tok_s"] / plain["output_tok_s"], 3)
    # wall_s is rounded to the millisecond, which is coarse for these tiny runs: compare times, not rates.
    assert prefill["prompt_tokens"] / prefill["prompt_tok_s"] == pytest.approx(prefill["wall_s"], rel=0.01, abs=6e-4)
    flops = generation_flops(tiny.model_config, [len(p) for p in prompts], [2] * 3)
    assert prefill["fraction_of_compute_limit"] == pytest.approx(
        flops / H200_BF16_DENSE_FLOPS / prefill["wall_s"], rel=0.01, abs=1e-3)
    assert "fraction_of_compute_limit" not in plain and "baseline" not in prefill


@pytest.mark.parametrize(("names", "message"), [
    ("w-gpu,w-typo", "unknown workload w-typo; choose from w-cpu, w-gpu, w-gpu-8b, w-gpu-8b-awq, w-gpu-8b-fp8, "
                    "w-gpu-8b-fp8-channel, w-gpu-8b-fp8-tensor, w-gpu-8b-gptq, w-gpu-fp8kv, "
                    "w-gpu-long, w-gpu-moe, w-gpu-moe-fp8, w-gpu-prefill, w-gpu-sampling"),
    ("w-cpu,w-gpu-sampling", "differ in model shape or engine settings; run them in separate calls"),
])
def test_workload_lists_that_cannot_run_together_are_refused(
        names: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _parse("--workload", names)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_the_plain_w_gpu_keeps_its_bandwidth_ceiling() -> None:
    assert WORKLOADS["w-gpu"].bandwidth_ceiling_tok_s == WORKLOADS["w-gpu-sampling"].bandwidth_ceiling_tok_s == 35_000
    assert _parse("--workload", "w-gpu-sampling").workload == [WORKLOADS["w-gpu-sampling"]]
    assert _parse().workload == [WORKLOADS["w-cpu"]]


def test_the_tiny_form_keeps_the_requests_and_shrinks_the_model() -> None:
    workload = WORKLOADS["w-gpu"]
    tiny = workload.tiny()
    assert tiny.requests(3) == workload.requests(3) and tiny.dtype == "float32"
    assert tiny.model_config["num_hidden_layers"] == 2 and tiny.model_config["hidden_size"] == 64
    assert tiny.model_config["architectures"] == workload.model_config["architectures"]


def test_w_gpu_long_is_32_prompts_of_16_to_30k_tokens_estimated_near_8_s() -> None:
    long = WORKLOADS["w-gpu-long"]
    prompts, max_tokens = long.requests(0)
    assert len(prompts) == 32 and all(16_000 <= len(p) <= 30_000 for p in prompts) and max_tokens == [128] * 32
    assert long.max_model_len >= 30_000 + 128 and long.long_context
    estimate = long_context_estimate_s(long.model_config, [len(p) for p in prompts], max_tokens)
    assert 7.0 < estimate < 9.5


def test_long_context_estimate_adds_gemms_attention_and_kv_reads_at_their_rates() -> None:
    config = _qwen3(vocab=50, hidden=8, inter=16, layers=3, heads=2, kv_heads=1, head_dim=4,
                    dtype="float32", max_pos=64)
    attention = 2 * 6 * 7 * 4 * 2 * 3  # 6 positions read (5 prompt + 1 output before the last)
    kv_read = kv_bytes_per_token(config) * 6  # the second output's decode reads 6 tokens
    expected = ((generation_flops(config, [5], [2]) - attention) / H200_GEMM_FLOPS
                + attention / H200_LONG_PREFILL_ATTENTION_FLOPS + kv_read / H200_HBM_BYTES_PER_S)
    assert long_context_estimate_s(config, [5], [2]) == pytest.approx(expected)
    assert kv_bytes_per_token(config) == 2 * 1 * 4 * 2 * 3
