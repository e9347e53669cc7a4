"""Prefill and mixed prefill+decode steps replayed from graphs (whole, and in pieces around attention for a
backend that cannot launch from padded counts) give the eager engine's tokens."""

from __future__ import annotations

import random

import pytest
from gpu_marks import requires_gpu

pytestmark = requires_gpu


def _requests(seed: int) -> tuple[list[dict[str, list[int]]], list[int]]:
    rng = random.Random(seed)
    prompts = [{"prompt_token_ids": [rng.randrange(1, 200) for _ in range(rng.randint(2, 300))]} for _ in range(24)]
    return prompts, [rng.randint(1, 40) for _ in prompts]


def _run(folder: str, enforce_eager: bool) -> tuple[list[list[int]], object]:
    from infercore import LLM, SamplingParams

    llm = LLM(model=folder, dtype="float32", max_model_len=512, max_num_seqs=16, max_num_batched_tokens=600,
              gpu_memory_utilization=0.25, enforce_eager=enforce_eager)
    runner = llm.llm_engine.engine_core.executor.runner
    replayed: list[int] = []
    if runner.mixed_graphs is not None:
        replay = runner.mixed_graphs.replay

        def counting(size: int):  # noqa: ANN202
            replayed.append(size)
            return replay(size)

        runner.mixed_graphs.replay = counting
    prompts, lengths = _requests(0)
    outs = []
    # Staggered arrivals: prompts chunked beside running decodes, then decodes of every batch size.
    for lo, hi in ((0, 3), (3, 24)):
        params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in lengths[lo:hi]]
        outs += llm.generate(prompts[lo:hi], params, use_tqdm=False)
    tokens = [o.outputs[0].token_ids for o in outs]
    kind = type(runner.mixed_graphs).__name__ if runner.mixed_graphs is not None else None
    aliases = getattr(runner.mixed_graphs, "_aliases", None)
    del llm
    return tokens, (replayed, kind, aliases)


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "piecewise"])
def test_prefill_and_mixed_graphs_give_the_eager_tokens(tiny_model_factory, monkeypatch: pytest.MonkeyPatch,
                                                        whole: bool) -> None:
    from infercore_triton.backend import TritonAttentionBackend

    monkeypatch.setattr(TritonAttentionBackend, "captures_mixed_steps", whole)
    folder = str(tiny_model_factory("Qwen3ForCausalLM"))
    eager, (eager_replays, _, _) = _run(folder, enforce_eager=True)
    graphed, (replays, kind, aliases) = _run(folder, enforce_eager=False)
    assert eager_replays == []
    assert len(replays) >= 5, replays
    if whole:
        assert kind == "WholeGraphs"
    else:
        assert kind == "MixedGraphs"
        assert aliases is True  # the attention tensors were released to the shared pool
    assert graphed == eager
