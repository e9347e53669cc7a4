"""Shared pieces of the pipeline-parallel tests: tiny engines and their greedy tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from server_faults import start_server

from infercore import LLM, SamplingParams

#: Small engines: one torch thread per worker (the CI machine has two cores). A token budget of 24
#: splits the longer prompts over steps (chunked prefill beside the pipe).
ENGINE_ARGS: dict[str, Any] = {"dtype": "float32", "max_model_len": 128, "num_gpu_blocks_override": 48,
                               "max_num_seqs": 8, "cpu_threads": 1, "max_num_batched_tokens": 24}
#: The last prompt repeats the second's start (a prefix-cache hit once the second's blocks are cached).
PROMPTS = ["hello world", "The engine cache block request server stream json tool call weather city", "a",
           "def add(a, b):\n    return a + b", "The engine cache block request server stream json tool call paris"]
GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


def greedy_tokens(model: Path, **engine_args: Any) -> list[list[int]]:
    """Greedy tokens of :data:`PROMPTS` from a fresh engine, which is shut down afterwards."""
    llm = LLM(model=str(model), **{**ENGINE_ARGS, **engine_args})
    try:
        return [out.outputs[0].token_ids for out in llm.generate(PROMPTS, GREEDY, use_tqdm=False)]
    finally:
        llm.llm_engine.engine_core.shutdown()


__all__ = ["ENGINE_ARGS", "GREEDY", "PROMPTS", "greedy_tokens", "start_server"]
