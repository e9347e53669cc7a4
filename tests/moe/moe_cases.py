"""Tiny mixture-of-experts cases: engine settings and the model configurations the MoE tests share."""

from __future__ import annotations

from typing import Any

#: Small engine settings (one torch thread: the CI machine has two cores).
ENGINE_ARGS: dict[str, Any] = {"dtype": "float32", "max_model_len": 256, "num_gpu_blocks_override": 160,
                               "max_num_seqs": 16, "cpu_threads": 1}

#: (architecture, config overrides) of each tiny MoE case: Qwen3-MoE with and without renormalised
#: top-k weights (the second with a dense first layer, off the ``decoder_sparse_step`` grid), and Mixtral.
MOE_CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen3-moe": ("Qwen3MoeForCausalLM", {}),
    "qwen3-moe-unnormalised-dense-layer": ("Qwen3MoeForCausalLM", {"norm_topk_prob": False,
                                                                   "decoder_sparse_step": 2}),
    "mixtral": ("MixtralForCausalLM", {}),
}
