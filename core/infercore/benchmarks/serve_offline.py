"""The offline side of `infercore bench serve --offline-model`: the same requests through ``LLM.generate``.

The server's output tok/s is judged against what the engine does with no server in the way; running
both on the very same prompts and lengths in one call makes the ratio meaningful.
"""

from __future__ import annotations

import json
import time
from typing import Any


def run_offline(model: str, engine_args_json: str | None, prompts: list[Any], output_len: int) -> dict[str, Any]:
    """Generate ``output_len`` tokens (EOS ignored, greedy) for each prompt offline; output tok/s and time."""
    from infercore import LLM, SamplingParams

    engine_args = json.loads(engine_args_json) if engine_args_json else {}
    if not isinstance(engine_args, dict):
        raise ValueError("--offline-engine-args must be a JSON object, e.g. '{\"load_format\": \"dummy\"}'")
    llm = LLM(model=model, **engine_args)
    params = SamplingParams(temperature=0.0, max_tokens=output_len, ignore_eos=True)
    inputs = [{"prompt_token_ids": p} if isinstance(p, list) else p for p in prompts]
    llm.generate(inputs[:1], SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True), use_tqdm=False)
    start = time.perf_counter()
    outputs = llm.generate(inputs, params, use_tqdm=False)
    duration = time.perf_counter() - start
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    return {"offline_duration_s": duration, "offline_total_output_tokens": tokens,
            "offline_output_throughput_tok_s": tokens / duration if duration else 0.0}
