"""The offline side of `infercore bench serve --offline-model`: the same requests through ``LLM.generate``.

The server's output tok/s is judged against what the engine does with no server in the way; running
both on the very same prompts and lengths in one call makes the ratio meaningful. With
``data_parallel_size`` above one the offline side is ``AsyncLLM`` with every request submitted at once
(``LLM`` drives a single engine in its own process).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any


def _prefill_times_ms(llm: Any, prompts: list[Any]) -> list[float]:
    """Wall time of each prompt's prefill alone: one request at a time, one output token."""
    from infercore import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    times = []
    for prompt in prompts:
        start = time.perf_counter()
        llm.generate([_as_input(prompt)], params, use_tqdm=False)
        times.append((time.perf_counter() - start) * 1000)
    return times


def _as_input(prompt: Any) -> Any:
    return {"prompt_token_ids": prompt} if isinstance(prompt, list) else prompt


def run_offline(model: str, engine_args_json: str | None, prompts: list[Any], output_len: int,
                prefill_prompts: list[Any] | None = None) -> dict[str, Any]:
    """Generate ``output_len`` tokens (EOS ignored, greedy) for each prompt offline; output tok/s and time.

    ``prefill_prompts`` (prompts of the same length that share no prefix with ``prompts``, so no cached
    block shortens them) are then prefilled one at a time: the batch-1 prefill time that a server's TTFT at
    concurrency 1 is judged against.
    """
    from infercore import LLM, SamplingParams

    engine_args = json.loads(engine_args_json) if engine_args_json else {}
    if not isinstance(engine_args, dict):
        raise ValueError("--offline-engine-args must be a JSON object, e.g. '{\"load_format\": \"dummy\"}'")
    if engine_args.get("data_parallel_size", 1) > 1:
        return asyncio.run(_run_offline_engines(model, engine_args, prompts, output_len, prefill_prompts))
    llm = LLM(model=model, **engine_args)
    params = SamplingParams(temperature=0.0, max_tokens=output_len, ignore_eos=True)
    inputs = [_as_input(p) for p in prompts]
    llm.generate(inputs[:1], SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True), use_tqdm=False)
    start = time.perf_counter()
    outputs = llm.generate(inputs, params, use_tqdm=False)
    duration = time.perf_counter() - start
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    result: dict[str, Any] = {"offline_duration_s": duration, "offline_total_output_tokens": tokens,
                              "offline_output_throughput_tok_s": tokens / duration if duration else 0.0}
    if prefill_prompts:
        result |= _probe_fields(_prefill_times_ms(llm, prefill_prompts))
    return result


def _probe_fields(times_ms: list[float]) -> dict[str, Any]:
    times = sorted(times_ms)
    return {"offline_prefill_probes": len(times), "offline_prefill_min_ms": times[0],
            "offline_prefill_p50_ms": times[len(times) // 2]}


async def _run_offline_engines(model: str, engine_args: dict[str, Any], prompts: list[Any], output_len: int,
                               prefill_prompts: list[Any] | None) -> dict[str, Any]:
    """``run_offline`` through ``AsyncLLM`` (several data-parallel engines): every request at once."""
    from infercore import SamplingParams
    from infercore.config import InfercoreConfig
    from infercore.frontend.async_llm import AsyncLLM

    llm = await AsyncLLM.start(InfercoreConfig.from_kwargs(model=model, **engine_args))

    async def tokens(prompt: Any, max_tokens: int, request_id: str) -> int:
        count = 0
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
        async for out in llm.generate(_as_input(prompt), params, request_id):
            count += len(out.outputs[0].token_ids)  # streamed: each output holds the new tokens
        return count

    try:
        await tokens(prompts[0], 4, "offline-warmup")
        start = time.perf_counter()
        counts = await asyncio.gather(*(tokens(p, output_len, f"offline-{i}") for i, p in enumerate(prompts)))
        duration = time.perf_counter() - start
        result: dict[str, Any] = {"offline_duration_s": duration, "offline_total_output_tokens": sum(counts),
                                  "offline_output_throughput_tok_s": sum(counts) / duration if duration else 0.0}
        if prefill_prompts:
            times = []
            for i, prompt in enumerate(prefill_prompts):
                start = time.perf_counter()
                await tokens(prompt, 1, f"offline-probe-{i}")
                times.append((time.perf_counter() - start) * 1000)
            result |= _probe_fields(times)
    finally:
        await llm.shutdown()
    return result
