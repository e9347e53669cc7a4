"""Seeded sampling is reproducible whatever else runs; n samples differ and share their prompt's blocks."""

from __future__ import annotations

from engine_cases import PROMPTS, generate_tokens, run_to_completion

from infercore import SamplingParams

SEEDED = SamplingParams(temperature=0.9, top_p=0.95, top_k=50, seed=1234, max_tokens=24, ignore_eos=True)


def other_params(i: int) -> SamplingParams:
    """Sixteen different ways to decode: greedy, plain, truncated, seeded, penalised, biased."""
    variants = [
        SamplingParams(temperature=0, max_tokens=20, ignore_eos=True),
        SamplingParams(temperature=1.0, max_tokens=30, ignore_eos=True),
        SamplingParams(temperature=0.7, top_k=5, max_tokens=12, ignore_eos=True),
        SamplingParams(temperature=1.3, top_p=0.5, seed=i, max_tokens=28, ignore_eos=True),
        SamplingParams(temperature=0.5, min_p=0.1, repetition_penalty=1.3, max_tokens=18, ignore_eos=True),
        SamplingParams(temperature=1.0, presence_penalty=1.0, logit_bias={17: 5.0}, max_tokens=9),
        SamplingParams(temperature=0.8, frequency_penalty=0.5, seed=99 + i, max_tokens=40, logprobs=3),
        SamplingParams(temperature=1.0, n=2, max_tokens=15, ignore_eos=True),
    ]
    return variants[i % len(variants)]


def test_same_seed_same_tokens_alone_and_in_a_batch(make_llm) -> None:
    llm = make_llm()
    prompt = PROMPTS[1]
    alone = generate_tokens(llm, [prompt], SEEDED)[0]
    assert generate_tokens(llm, [prompt], SEEDED)[0] == alone
    for where in (0, 7, 16):
        prompts = [PROMPTS[i % len(PROMPTS)] for i in range(16)]
        params = [other_params(i) for i in range(16)]
        prompts.insert(where, prompt)
        params.insert(where, SEEDED)
        outputs = llm.generate(prompts, params, use_tqdm=False)
        assert outputs[where].outputs[0].token_ids == alone, f"seeded request at batch position {where}"
    other_seed = generate_tokens(llm, [prompt], SEEDED.clone(seed=4321))[0]
    assert other_seed != alone


def test_seeded_tokens_survive_preemption(make_llm) -> None:
    """A preempted request recomputes its KV; its random draws must carry on where they stopped."""
    prompts = PROMPTS[:8]
    params = [SEEDED.clone(seed=100 + i, max_tokens=32) for i in range(len(prompts))]
    roomy = make_llm()
    expected = [o.outputs[0].token_ids for o in roomy.generate(prompts, params, use_tqdm=False)]
    tight = make_llm(num_gpu_blocks_override=11, max_model_len=128)
    got = [o.outputs[0].token_ids for o in tight.generate(prompts, params, use_tqdm=False)]
    assert tight.llm_engine.engine_core.scheduler.num_preemptions > 0
    assert got == expected


def test_n_samples_differ_and_share_prompt_blocks(make_llm) -> None:
    llm = make_llm()
    engine = llm.llm_engine
    kv = engine.engine_core.scheduler.kv_cache_manager
    free_before = kv.num_free_blocks
    prompt = PROMPTS[7]  # 73 tokens: 4 full blocks of 16
    num_prompt = len(llm.get_tokenizer().encode(prompt))
    full_blocks = num_prompt // 16
    assert full_blocks >= 4
    processed = engine.add_request("n4", prompt, SamplingParams(n=4, temperature=1.0, seed=5, max_tokens=20,
                                                                   ignore_eos=True))
    engine.step()
    children = [engine.engine_core.scheduler.requests[r.request_id] for r in processed.engine_requests]
    blocks = [kv.get_blocks(c) for c in children]
    for child_blocks in blocks[1:]:
        assert child_blocks[:full_blocks] == blocks[0][:full_blocks], "siblings should share the prompt's blocks"
        assert child_blocks[full_blocks] is not blocks[0][full_blocks], "the partial last block is each one's own"
    assert all(b.ref_cnt == 4 for b in blocks[0][:full_blocks])
    # Shared: 4 full blocks once, then one private partial block per sibling.
    assert free_before - kv.num_free_blocks == full_blocks + 4
    outputs = run_to_completion(engine)["n4"]
    final = outputs[-1]
    assert final.finished and len(final.outputs) == 4
    completions = {tuple(c.token_ids) for c in final.outputs}
    assert len(completions) == 4, "four samples with temperature should differ"
    assert all(len(c) == 20 for c in completions)
    assert kv.num_free_blocks == free_before
