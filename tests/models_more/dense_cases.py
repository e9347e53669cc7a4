"""Small engine settings and the tiny Gemma 3 and Phi-3 cases of the oracle tests."""

from __future__ import annotations

from typing import Any

#: Small engine settings (one torch thread: the CI machine has two cores).
ENGINE_ARGS: dict[str, Any] = {"dtype": "float32", "max_model_len": 256, "num_gpu_blocks_override": 160,
                               "max_num_seqs": 16, "cpu_threads": 1}

#: LongRoPE over half of each head (8 of 16 features: 4 frequencies), context extended 8x past an
#: original length that the test sequences stay within.
PHI3_LONGROPE = {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                 "short_factor": [1.0, 1.3, 2.1, 3.4], "long_factor": [1.5, 2.5, 4.0, 7.0],
                 "original_max_position_embeddings": 256}

#: (architecture, config overrides) of each case. Gemma 3's tiny config slides over 8 tokens in two of
#: its three layers (the third is global); the Phi-3 case slides over 12 tokens in every layer, so the
#: engine frees its blocks that left the window. The test prompts and outputs are longer than both.
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "gemma3": ("Gemma3ForCausalLM", {}),
    "phi3": ("Phi3ForCausalLM", {}),
    "phi3-longrope-partial-rotary-sliding": ("Phi3ForCausalLM", {
        "rope_parameters": PHI3_LONGROPE, "max_position_embeddings": 2048,
        "original_max_position_embeddings": 256, "sliding_window": 12}),
}

#: The window past which the engine frees a request's blocks in each case (None: a layer is global).
FREEING_WINDOW: dict[str, int | None] = {"gemma3": None, "phi3": None, "phi3-longrope-partial-rotary-sliding": 12}
