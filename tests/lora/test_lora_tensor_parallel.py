"""Adapters split over two ranks (``mp`` executor, gloo on CPU) as the base layers are: column-parallel
layers keep their B rows, row-parallel ones their A columns; the tokens are HF + PEFT's."""

from __future__ import annotations

from hf_oracle import MAX_NEW_TOKENS, NUM_LOGPROBS, PROMPTS, check_against_hf
from lora_cases import ENGINE_ARGS, hf_references, write_adapters

from infercore import LLM, SamplingParams


def test_tp2_mixed_batch_matches_hf_peft(tiny_model_factory, tmp_path):
    base = tiny_model_factory("LlamaForCausalLM")
    adapters = write_adapters(base, tmp_path)
    llm = LLM(model=str(base), tensor_parallel_size=2, distributed_executor_backend="mp", max_loras=3,
              **ENGINE_ARGS)
    try:
        tokenizer = llm.get_tokenizer()
        rows = [(tokenizer.encode(PROMPTS[i]), lora) for i, lora in
                enumerate([None, adapters["a"], adapters["b"], adapters["c"], adapters["a"]])]
        params = SamplingParams(temperature=0, max_tokens=MAX_NEW_TOKENS, ignore_eos=True, logprobs=NUM_LOGPROBS)
        outputs = llm.generate([{"prompt_token_ids": ids} for ids, _ in rows], params, use_tqdm=False,
                               lora_request=[lora for _, lora in rows])
    finally:
        llm.llm_engine.engine_core.shutdown()
    check_against_hf(outputs, hf_references(base, rows), with_prompt_logprobs=False)
