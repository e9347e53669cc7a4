"""The engine with the Triton ``lora_linear`` op (interpreted without a GPU; its one-launch path turned on and
let onto CPU tensors in float32) gives the reference engine's greedy tokens and logprobs on a mixed batch of base rows
and three adapters: decode steps of at most four tokens run each wrapped linear as one skinny GEMM with the
adapter term inside (a down projection's SwiGLU activation too), larger steps the base op and ``lora_apply``."""

from __future__ import annotations

from typing import Any

import torch
import triton_interpreter
from hf_oracle import PROMPTS
from lora_cases import ENGINE_ARGS, assert_same_outputs, write_adapters

from infercore import LLM, SamplingParams
from infercore.lora import layers
from infercore.quantization import unquantized

triton_interpreter.widen_bfloat16_dots()

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


def test_mixed_batch_through_lora_linear_matches_the_reference(tiny_model_factory, tmp_path, monkeypatch):
    from infercore_triton import lora as triton_lora
    from infercore_triton import lora_linear as ll
    from infercore_triton import skinny_gemm as sg

    base = tiny_model_factory("Qwen3ForCausalLM")
    adapters = write_adapters(base, tmp_path)
    expected = _run(base, adapters)

    launches: list[tuple[int, bool]] = []
    real = sg.skinny_gemm

    def spy(x: torch.Tensor, weight: torch.Tensor, bias: Any = None, config: Any = None, gated: bool = False,
            lora: Any = None) -> torch.Tensor:
        launches.append((x.shape[0], gated))
        return real(x, weight, bias, config, gated, lora)

    monkeypatch.setattr(ll, "skinny_gemm", spy)
    monkeypatch.setattr(ll, "_DEVICES", ("cpu",))
    monkeypatch.setattr(ll, "_DTYPES", (torch.float32,))
    monkeypatch.setenv(ll.IN_GEMM_ENV, "1")
    ops = {"lora_linear": ll.lora_linear, "lora_apply": triton_lora.lora_apply,
           "silu_and_mul_linear": sg.silu_and_mul_linear}
    for module in (layers, unquantized):
        get_op = module.get_op
        monkeypatch.setattr(module, "get_op", lambda name, get_op=get_op: ops.get(name) or get_op(name))
    got = _run(base, adapters)
    assert launches, "the engine ran its worker in another process: the kernels were not swapped in"
    assert_same_outputs(expected, got)
    assert {m for m, _ in launches} <= set(range(1, ll.IN_GEMM_MAX_M + 1))
    assert any(gated for _, gated in launches), "no down projection took the gate/up output"
