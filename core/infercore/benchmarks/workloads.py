"""The named benchmark workloads (see BENCHMARKS.md): model shapes and request sets."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Workload:
    """A model shape plus a seeded set of requests."""

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


WORKLOADS: dict[str, Workload] = {
    "w-cpu": Workload(
        name="w-cpu", model_config=_qwen3(32000, 512, 1536, 8, 8, 4, 64, "float32", 4096), dtype="float32",
        max_model_len=1024, num_requests=64, prompt_len=(32, 256), output_len=(128, 128), token_id_max=30000,
        temperature=0.0, outputs_after_prompts=False),
    "w-gpu": Workload(
        name="w-gpu", model_config=_qwen3(151936, 1024, 3072, 28, 16, 8, 128, "bfloat16", 40960),
        dtype="bfloat16", max_model_len=4096, num_requests=256, prompt_len=(100, 1024),
        output_len=(100, 1024), token_id_max=10000, temperature=0.6),
}
