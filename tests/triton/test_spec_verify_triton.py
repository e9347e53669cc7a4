"""Speculative decoding through the Triton backend (kernels through the interpreter): verification queries
(the row's last token and its drafts) attend through the decode attention op's short-query path (by default
the shared-KV verification kernel, every token of a row on one read of its context), on steps padded as whole
graphs and on eager steps alike, and so do the draft model's catch-up queries (those tokens and the target's
token after them); greedy tokens stay those of the plain run."""

from __future__ import annotations

import pytest
from decode_graph_stand_in import install as install_decode_graphs
from mixed_graph_stand_in import install as install_mixed_graphs

import infercore_triton.backend as triton_backend
from infercore import LLM, SamplingParams
from infercore_cpu.platform import CpuPlatform

PROMPTS = [[5, 6, 7, 8, 5, 6, 7, 8, 5, 6], [11, 12, 13, 11, 12, 13, 11, 12], list(range(20, 47))]


def _run(folder, monkeypatch: pytest.MonkeyPatch, spec: dict | None, graphs: bool) -> tuple[list, list[int]]:  # noqa: ANN001
    monkeypatch.setattr(CpuPlatform, "select_attention_backend", lambda self, request: "triton")
    shorts: list[int] = []
    real = triton_backend.decode_attention

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if kwargs.get("short_queries", 0) > 1:
            shorts.append(kwargs["short_queries"])
        return real(*args, **kwargs)

    monkeypatch.setattr(triton_backend, "decode_attention", spy)
    llm = LLM(model=str(folder), dtype="float32", max_model_len=96, block_size=4, num_gpu_blocks_override=80,
              cpu_threads=1, max_num_batched_tokens=32, **({"speculative_config": spec} if spec else {}))
    if graphs:
        install_mixed_graphs(llm)
        install_decode_graphs(llm)
    params = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
    outs = [o.outputs[0].token_ids for o in llm.generate([{"prompt_token_ids": p} for p in PROMPTS], params,
                                                          use_tqdm=False)]
    return outs, shorts


@pytest.mark.parametrize("graphs", [True, False], ids=["padded", "eager"])
def test_verification_through_the_decode_kernel(tiny_model_factory, monkeypatch: pytest.MonkeyPatch,
                                                graphs: bool) -> None:
    folder = tiny_model_factory("Qwen3ForCausalLM")
    want, _ = _run(folder, monkeypatch, None, graphs)
    got, shorts = _run(folder, monkeypatch, {"method": "draft_model", "model": str(folder),
                                             "num_speculative_tokens": 3}, graphs)
    assert got == want
    # The target verifies 1 + k = 4 tokens a row; the draft catches up on up to k + 2 = 5 (one launch each).
    assert set(shorts) == {4, 5}, f"short-query launches {sorted(set(shorts))}: a side ran its queries elsewhere"
