"""The FP8 MoE checkpoint over two ranks (``mp`` executor, gloo on CPU) gives the greedy tokens of one rank:
tensor-parallel, each rank holding half of every expert's intermediate features (one whole 32-row block of
gate, of up, and 32 columns of down) with their block scales; and expert-parallel, each rank holding half
of the experts whole, which also serves experts whose halves would split a block (48 features)."""

from __future__ import annotations

from infercore import LLM, SamplingParams

PROMPTS = ["hello world", "The engine cache block request server stream json tool call", "a"]
GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
ENGINE = {"dtype": "float32", "max_model_len": 256, "num_gpu_blocks_override": 64, "max_num_seqs": 8,
          "cpu_threads": 1}


def _greedy_tokens(folder, **engine_args: object) -> list[list[int]]:
    llm = LLM(model=str(folder), **{**ENGINE, **engine_args})
    try:
        return [out.outputs[0].token_ids for out in llm.generate(PROMPTS, GREEDY, use_tqdm=False)]
    finally:
        llm.llm_engine.engine_core.shutdown()


def test_fp8_moe_tp2_matches_tp1(fp8_moe_pair) -> None:
    quantized, _ = fp8_moe_pair("inter64")
    expected = _greedy_tokens(quantized)
    assert _greedy_tokens(quantized, tensor_parallel_size=2, distributed_executor_backend="mp") == expected
    assert all(len(tokens) == 12 for tokens in expected)


def test_fp8_moe_expert_parallel_holds_whole_experts(fp8_moe_pair) -> None:
    quantized, _ = fp8_moe_pair("inter48")
    expected = _greedy_tokens(quantized)
    got = _greedy_tokens(quantized, tensor_parallel_size=2, distributed_executor_backend="mp",
                         enable_expert_parallel=True)
    assert got == expected
