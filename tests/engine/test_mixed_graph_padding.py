"""Steps with prompt tokens padded to a prefill/mixed graph's size give the tokens of unpadded steps.

No device graphs on this machine: :mod:`mixed_graph_stand_in` pads such steps and runs them eagerly,
through the attention layer's split hook. Here on the CPU backend; tests/fused_qknorm runs the same
with the Triton kernels (interpreted), which read every padded row; tests/gpu/test_mixed_graphs_gpu.py
replays real graphs.
"""

from __future__ import annotations

import mixed_graph_stand_in
import pytest
from engine_cases import ENGINE_DEFAULTS, PROMPTS, generate_tokens

from infercore import LLM, SamplingParams
from infercore.config import ConfigError, InfercoreConfig
from infercore.worker.mixed_graphs import mixed_capture_sizes


def test_padded_prefill_and_mixed_steps_match_unpadded(qwen3_folder) -> None:
    kwargs = {**ENGINE_DEFAULTS, "max_num_batched_tokens": 40}
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    want = generate_tokens(LLM(model=str(qwen3_folder), **kwargs), PROMPTS, params)

    llm = LLM(model=str(qwen3_folder), **kwargs)
    stand_in = mixed_graph_stand_in.install(llm)
    got = generate_tokens(llm, PROMPTS, params)

    assert got == want
    # Chunked prompts beside decodes: padded steps ran, and each ran attention through the hook.
    assert any(size > 16 for size in stand_in.replayed)
    num_layers = llm.llm_engine.engine_core.executor.runner.num_layers
    assert stand_in.split_calls == num_layers * len(stand_in.replayed)


def test_graph_token_counts_stop_at_the_largest_captured_size() -> None:
    """A limit above the largest captured size would promise graphs that never exist: it is refused, with
    the limit in the message."""
    assert mixed_capture_sizes(2048, 16384)[-1] == 2048
    assert InfercoreConfig.from_kwargs(max_mixed_graph_tokens=2048).model.max_mixed_graph_tokens == 2048
    with pytest.raises(ConfigError, match="2048"):
        InfercoreConfig.from_kwargs(max_mixed_graph_tokens=4096)
