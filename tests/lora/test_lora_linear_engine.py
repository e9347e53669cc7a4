"""A platform that registers the ``lora_linear`` and ``silu_and_mul_linear`` custom ops (stand-ins here: the
references, counted) gets every LoRA-wrapped linear over an unquantized base as that one op, a down projection's
with the SwiGLU's gate/up output, in steps with an adapter; the engine then gives the reference engine's greedy
tokens and logprobs on a mixed batch of base rows and adapters."""

from __future__ import annotations

from typing import Any

import torch
from hf_oracle import PROMPTS
from lora_cases import ENGINE_ARGS, assert_same_outputs, write_adapters

from infercore import LLM, SamplingParams
from infercore.lora import layers
from infercore.ops import lora_reference, reference
from infercore.quantization import unquantized

ROWS = [(0, None), (1, "a"), (2, "b")]
PARAMS = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True, logprobs=3)


def _run(base: Any, adapters: dict) -> list:
    llm = LLM(model=str(base), max_loras=3, **{**ENGINE_ARGS, "max_num_seqs": 4})
    try:
        tokenizer = llm.get_tokenizer()
        rows = [(tokenizer.encode(PROMPTS[p]), None if name is None else adapters[name]) for p, name in ROWS]
        return llm.generate([{"prompt_token_ids": ids} for ids, _ in rows], PARAMS, use_tqdm=False,
                            lora_request=[lora for _, lora in rows])
    finally:
        llm.llm_engine.engine_core.shutdown()


def test_mixed_batch_through_a_platform_lora_linear_matches_the_reference(tiny_model_factory, tmp_path,
                                                                          monkeypatch):
    base = tiny_model_factory("Qwen3ForCausalLM")
    adapters = write_adapters(base, tmp_path)
    expected = _run(base, adapters)

    calls: list[bool] = []

    def lora_linear(*args: Any) -> torch.Tensor:
        calls.append(bool(args[10]))  # gated: a down projection given the gate/up output
        return lora_reference.lora_linear(*args)

    def silu_and_mul_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return reference.silu_and_mul_linear(x, weight, bias)

    ops = {"lora_linear": lora_linear, "silu_and_mul_linear": silu_and_mul_linear}
    for module in (layers, unquantized):
        get_op = module.get_op
        monkeypatch.setattr(module, "get_op", lambda name, get_op=get_op: ops.get(name) or get_op(name))
    got = _run(base, adapters)
    assert calls, "the engine ran its worker in another process: the ops were not swapped in"
    assert_same_outputs(expected, got)
    assert any(calls), "no down projection took the gate/up output"
