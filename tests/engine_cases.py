"""Prompts, small engine settings and helpers shared by the engine tests (and the fp8 KV engine tests)."""

from __future__ import annotations

from typing import Any

from infercore import LLM, SamplingParams
from infercore.frontend.llm_engine import LLMEngine
from infercore.frontend.output_processor import RequestOutputKind
from infercore.outputs import RequestOutput

#: Small engine settings: every test engine fits a few hundred tokens per request. One torch thread: the
#: models are tiny, and on a busy two-core machine more threads only wait on each other.
ENGINE_DEFAULTS: dict[str, Any] = {
    "dtype": "float32",
    "max_model_len": 256,
    "num_gpu_blocks_override": 160,
    "max_num_seqs": 32,
    "cpu_threads": 1,
}

#: Prompts of 1 to ~80 tokens: ASCII, code, CJK, emoji and accented text.
PROMPTS = [
    "hello",
    "The engine cache block request server stream json tool call weather city paris london",
    "你好，世界！这是一个测试。",
    "emoji: 😀 🚀 ✨ 👍🏽 🇫🇷",
    "def add(a, b):\n    return a + b",
    "a",
    "naïve café résumé façade 日本語のテキストです。한국어 텍스트.",
    " ".join(["the model of the token"] * 12),
    "Tokyo temperature in celsius? search the query and call the function with arguments",
]

GREEDY_32 = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)


def token_ids(outputs: list[RequestOutput]) -> list[list[int]]:
    """The first completion's tokens of every output, in order."""
    return [out.outputs[0].token_ids for out in outputs]


def generate_tokens(llm: LLM, prompts: list[str], params: SamplingParams = GREEDY_32) -> list[list[int]]:
    return token_ids(llm.generate(prompts, params, use_tqdm=False))


def run_to_completion(engine: LLMEngine, max_steps: int = 10_000) -> dict[str, list[RequestOutput]]:
    """Step until nothing is left; every output of every request, in arrival order."""
    seen: dict[str, list[RequestOutput]] = {}
    for _ in range(max_steps):
        if not engine.has_unfinished_requests():
            return seen
        for out in engine.step():
            seen.setdefault(out.request_id, []).append(out)
    raise AssertionError(f"the engine did not finish within {max_steps} steps")


def stream_deltas(engine: LLMEngine, request_id: str, prompt: str, params: SamplingParams) -> list[RequestOutput]:
    """Add one request with DELTA outputs and step it to the end."""
    engine.add_request(request_id, prompt, params, output_kind=RequestOutputKind.DELTA)
    return run_to_completion(engine)[request_id]
