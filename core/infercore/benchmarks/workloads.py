"""The named benchmark workloads (see BENCHMARKS.md): model shapes and request sets."""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infercore.sampling_params import SamplingParams


@dataclass
class Workload:
    """A model shape plus a seeded set of requests and how they sample."""

    name: str
    model_config: dict[str, Any]
    dtype: str
    max_model_len: int
    num_requests: int
    prompt_len: tuple[int, int]
    output_len: tuple[int, int]
    token_id_max: int
    temperature: float
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    #: W-GPU draws every prompt first, then every max_tokens (nano-vllm's bench order).
    outputs_after_prompts: bool = True
    #: SamplingParams fields every request gets besides its temperature and max_tokens (e.g. top_p).
    sampling_options: dict[str, Any] = field(default_factory=dict)
    #: Whether request ``i`` samples with a seed of its own (the run's seed plus ``i``).
    seeded: bool = False
    #: The workload whose requests this one repeats with other sampling options; its speed is
    #: reported as a fraction of that one's when both run in one call.
    variant_of: str | None = None
    #: Output tok/s at the memory-bandwidth limit of one H200, for decode-bound workloads.
    bandwidth_ceiling_tok_s: float | None = None
    #: Whether the limit is dense bf16 compute (prefill-bound workloads); see ``benchmarks.flops``.
    compute_bound: bool = False
    #: Whether the run is measured against ``flops.long_context_estimate_s`` (long prompts: prefill
    #: attention, GEMMs and the decodes' KV reads at rates an H200 reaches, added up).
    long_context: bool = False

    def requests(self, seed: int = 0) -> tuple[list[list[int]], list[int]]:
        rng = random.Random(seed)
        if self.outputs_after_prompts:
            prompts = [[rng.randint(0, self.token_id_max) for _ in range(rng.randint(*self.prompt_len))]
                       for _ in range(self.num_requests)]
            outputs = [rng.randint(*self.output_len) for _ in range(self.num_requests)]
        else:
            prompts, outputs = [], []
            for _ in range(self.num_requests):
                prompts.append([rng.randint(0, self.token_id_max) for _ in range(rng.randint(*self.prompt_len))])
                outputs.append(rng.randint(*self.output_len))
        return prompts, outputs

    def sampling_params(self, max_tokens: list[int], seed: int = 0) -> list[SamplingParams]:
        """One request's sampling parameters per entry of ``max_tokens``; EOS ignored, no detokenizing."""
        return [SamplingParams(temperature=self.temperature, max_tokens=m, ignore_eos=True, detokenize=False,
                               seed=seed + i if self.seeded else None, **self.sampling_options)
                for i, m in enumerate(max_tokens)]

    def engine_shape(self) -> tuple[str, str, int, str]:
        """What the engine is built from (model, dtype, length, engine options): workloads that share
        it run in one engine."""
        return (json.dumps(self.model_config, sort_keys=True), self.dtype, self.max_model_len,
                json.dumps(self.engine_kwargs, sort_keys=True))

    def tiny(self) -> Workload:
        """The same requests on a 2-layer, 64-wide model of this shape in float32: a developer tool's run on a
        CPU, where the host's share of a step is what is studied."""
        config = dict(self.model_config, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=10240)
        return dataclasses.replace(self, model_config=config, dtype="float32")

    def write_model_folder(self, path: Path) -> Path:
        """A config-only HF folder of this shape (weights come from ``load_format="dummy"``)."""
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps(self.model_config, indent=2))
        return path


def _qwen3(vocab: int, hidden: int, inter: int, layers: int, heads: int, kv_heads: int, head_dim: int,
           dtype: str, max_pos: int) -> dict[str, Any]:
    return {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": vocab,
        "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
        "tie_word_embeddings": True, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "max_position_embeddings": max_pos, "hidden_act": "silu", "torch_dtype": dtype,
        "bos_token_id": None, "eos_token_id": 0, "attention_bias": False,
    }


_W_GPU = Workload(
    name="w-gpu", model_config=_qwen3(151936, 1024, 3072, 28, 16, 8, 128, "bfloat16", 40960),
    dtype="bfloat16", max_model_len=4096, num_requests=256, prompt_len=(100, 1024),
    output_len=(100, 1024), token_id_max=10000, temperature=0.6, bandwidth_ceiling_tok_s=35_000)

#: Qwen3-8B's shape (untied head), W-GPU's requests; the FP8 variant is the shape of its ``-FP8`` release:
#: e4m3 weights with 128x128 block scales, activations quantized per token and 128-column group.
_W_GPU_8B = dataclasses.replace(
    _W_GPU, name="w-gpu-8b", bandwidth_ceiling_tok_s=None,
    model_config={**_qwen3(151936, 4096, 12288, 36, 32, 8, 128, "bfloat16", 40960), "tie_word_embeddings": False})
#: Qwen3-30B-A3B's shape (every layer sparse: 128 experts, 8 per token), 256 requests of 512 prompt and
#: 256 output tokens.
_W_GPU_MOE = dataclasses.replace(
    _W_GPU, name="w-gpu-moe", bandwidth_ceiling_tok_s=None, max_model_len=1024, prompt_len=(512, 512),
    output_len=(256, 256),
    model_config={**_qwen3(151936, 2048, 6144, 48, 32, 4, 128, "bfloat16", 40960), "tie_word_embeddings": False,
                  "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_experts": 128,
                  "num_experts_per_tok": 8, "moe_intermediate_size": 768, "norm_topk_prob": True,
                  "decoder_sparse_step": 1, "mlp_only_layers": []})
_FP8_BLOCK = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}


def _fp8_compressed_tensors(strategy: str) -> dict[str, Any]:
    """A compressed-tensors FP8 release's ``quantization_config``: e4m3 weights with one scale per output
    channel (``strategy="channel"``) or per tensor, activations quantized per token at run time."""
    weights = {"num_bits": 8, "type": "float", "strategy": strategy, "dynamic": False, "symmetric": True}
    inputs = {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True, "symmetric": True}
    return {"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": inputs}},
            "ignore": ["lm_head"]}


#: The 4-bit releases' usual settings (AutoAWQ's GEMM layout; GPTQ symmetric without act-order), group 128.
_AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
_GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": False,
         "checkpoint_format": "gptq"}

WORKLOADS: dict[str, Workload] = {
    "w-cpu": Workload(
        name="w-cpu", model_config=_qwen3(32000, 512, 1536, 8, 8, 4, 64, "float32", 4096), dtype="float32",
        max_model_len=1024, num_requests=64, prompt_len=(32, 256), output_len=(128, 128), token_id_max=30000,
        temperature=0.0, outputs_after_prompts=False),
    "w-gpu": _W_GPU,
    # W-GPU's requests with the options a chat client sends: the truncation and penalty paths.
    "w-gpu-sampling": dataclasses.replace(
        _W_GPU, name="w-gpu-sampling", seeded=True, variant_of="w-gpu",
        sampling_options={"top_p": 0.9, "top_k": 50, "repetition_penalty": 1.1, "presence_penalty": 0.5}),
    # Long prompts, few outputs: bounded by the GEMMs' compute rather than by memory bandwidth.
    "w-gpu-prefill": dataclasses.replace(
        _W_GPU, name="w-gpu-prefill", prompt_len=(2048, 2048), output_len=(16, 16),
        bandwidth_ceiling_tok_s=None, compute_bound=True),
    # W-GPU over an fp8 (e4m3) KV cache: the KV reads halve (15 TB -> 7.5 TB, plus ~1.4 TB of weights and
    # logits), so the bandwidth ceiling rises from ~35,000 to ~64,700 output tok/s.
    "w-gpu-fp8kv": dataclasses.replace(
        _W_GPU, name="w-gpu-fp8kv", variant_of="w-gpu", engine_kwargs={"kv_cache_dtype": "fp8"},
        bandwidth_ceiling_tok_s=64_700),
    # 32 prompts of 16-30k tokens with 128 outputs each: chunked prefills of long prompts beside the decodes
    # of those already prefilled, which read long contexts.
    "w-gpu-long": dataclasses.replace(
        _W_GPU, name="w-gpu-long", max_model_len=32768, num_requests=32, prompt_len=(16_000, 30_000),
        output_len=(128, 128), bandwidth_ceiling_tok_s=None, long_context=True),
    "w-gpu-8b": _W_GPU_8B,
    "w-gpu-moe": _W_GPU_MOE,
    "w-gpu-8b-fp8": dataclasses.replace(
        _W_GPU_8B, name="w-gpu-8b-fp8", variant_of="w-gpu-8b",
        model_config={**_W_GPU_8B.model_config, "quantization_config": _FP8_BLOCK}),
    # The same shape in the other FP8 layouts (compressed-tensors, as llm-compressor writes them): per-channel
    # and per-tensor weight scales, activations per token.
    "w-gpu-8b-fp8-channel": dataclasses.replace(
        _W_GPU_8B, name="w-gpu-8b-fp8-channel", variant_of="w-gpu-8b",
        model_config={**_W_GPU_8B.model_config, "quantization_config": _fp8_compressed_tensors("channel")}),
    "w-gpu-8b-fp8-tensor": dataclasses.replace(
        _W_GPU_8B, name="w-gpu-8b-fp8-tensor", variant_of="w-gpu-8b",
        model_config={**_W_GPU_8B.model_config, "quantization_config": _fp8_compressed_tensors("tensor")}),
    # w-gpu-moe as its FP8 block-scaled release (Qwen3-30B-A3B-FP8): attention and experts e4m3 with
    # 128x128 block scales, the router and head in bf16.
    "w-gpu-moe-fp8": dataclasses.replace(
        _W_GPU_MOE, name="w-gpu-moe-fp8", variant_of="w-gpu-moe",
        model_config={**_W_GPU_MOE.model_config, "quantization_config": _FP8_BLOCK}),
    "w-gpu-8b-awq": dataclasses.replace(
        _W_GPU_8B, name="w-gpu-8b-awq", variant_of="w-gpu-8b",
        model_config={**_W_GPU_8B.model_config, "quantization_config": _AWQ}),
    "w-gpu-8b-gptq": dataclasses.replace(
        _W_GPU_8B, name="w-gpu-8b-gptq", variant_of="w-gpu-8b",
        model_config={**_W_GPU_8B.model_config, "quantization_config": _GPTQ}),
}
