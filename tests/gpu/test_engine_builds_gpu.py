"""After start-up, serving builds no Triton kernel variants: every shape a step can take was built.

A build inside a step stalls it for the compile (seconds) and, in a benchmark, counts as wall time.
"""

from __future__ import annotations

import random

from gpu_marks import requires_gpu

from infercore.jit_builds import JitBuildCounter

pytestmark = requires_gpu


def test_mixed_ragged_steps_build_no_new_variants(tiny_model_factory) -> None:
    from infercore import LLM, SamplingParams

    folder = tiny_model_factory("Qwen3ForCausalLM")
    llm = LLM(model=str(folder), dtype="bfloat16", max_model_len=512, max_num_seqs=40,
              max_num_batched_tokens=700, gpu_memory_utilization=0.3)
    rng = random.Random(0)
    prompts = [{"prompt_token_ids": [rng.randrange(100) for _ in range(rng.randint(1, 300))]} for _ in range(37)]
    params = [SamplingParams(temperature=rng.choice([0.0, 0.7]), max_tokens=rng.randint(1, 60), ignore_eos=True)
              for _ in prompts]
    with JitBuildCounter() as builds:
        # Staggered arrivals give pure prefills, mixed steps with any number of decodes in front,
        # and decode batches of every size down to 1.
        outs = llm.generate(prompts[:5], params[:5], use_tqdm=False)
        outs += llm.generate(prompts[5:], params[5:], use_tqdm=False)
    assert [len(o.outputs[0].token_ids) for o in outs] == [p.max_tokens for p in params]
    assert dict(builds.builds) == {}
