"""The engine with the Triton ``lora_apply`` kernels (interpreted without a GPU) in place of the torch
reference gives the reference engine's greedy tokens and logprobs (which the oracle tests hold to HF +
PEFT) on a mixed batch: base rows and three adapters through chunked prefill; prompt steps run the grouped
(SGMV) kernels, decode steps the per-row (BGMV) ones, and a step without an adapter runs neither."""

from __future__ import annotations

from typing import Any

import triton_interpreter
from hf_oracle import PROMPTS
from lora_cases import ENGINE_ARGS, assert_same_outputs, write_adapters

from infercore import LLM, SamplingParams
from infercore.lora import layers

triton_interpreter.widen_bfloat16_dots()

ROWS = [(0, None), (1, "a"), (2, "b"), (4, "c")]
#: A step budget above the per-row kernels' limit, so prompt chunks run the grouped ones.
BUDGET = 32
PARAMS = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True, logprobs=3)


def _run(base: Any, adapters: dict, token_counts: list[int] | None = None) -> list:
    llm = LLM(model=str(base), max_num_batched_tokens=BUDGET, max_loras=3, **{**ENGINE_ARGS, "max_num_seqs": 8})
    try:
        tokenizer = llm.get_tokenizer()
        rows = [(tokenizer.encode(PROMPTS[p]), None if name is None else adapters[name]) for p, name in ROWS]
        outs = llm.generate([{"prompt_token_ids": ids} for ids, _ in rows], PARAMS, use_tqdm=False,
                            lora_request=[lora for _, lora in rows])
        if token_counts is not None:
            calls = len(token_counts)
            llm.generate([{"prompt_token_ids": rows[0][0]}], SamplingParams(max_tokens=3), use_tqdm=False)
            assert len(token_counts) == calls, "a step without an adapter ran LoRA kernels"
    finally:
        llm.llm_engine.engine_core.shutdown()
    return outs


def test_mixed_batch_through_the_triton_kernels_matches_the_reference(tiny_model_factory, tmp_path, monkeypatch):
    from infercore_triton import lora as triton_lora

    base = tiny_model_factory("Qwen3ForCausalLM")
    adapters = write_adapters(base, tmp_path)
    expected = _run(base, adapters)
    token_counts: list[int] = []

    def counted(out: Any, x: Any, *args: Any) -> Any:
        token_counts.append(x.shape[0])
        return triton_lora.lora_apply(out, x, *args)

    get_op = layers.get_op
    monkeypatch.setattr(layers, "get_op", lambda name: counted if name == "lora_apply" else get_op(name))
    got = _run(base, adapters, token_counts)
    assert token_counts, "the engine ran its worker in another process: the kernels were not swapped in"
    assert_same_outputs(expected, got)
    assert max(token_counts) > triton_lora.BGMV_MAX_TOKENS, "no prompt step ran the grouped kernels"
    assert min(token_counts) <= triton_lora.BGMV_MAX_TOKENS, "no decode step ran the per-row kernels"
