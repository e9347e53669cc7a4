"""``infercore serve --data-parallel-size 2``: 32 concurrent completions get the greedy text of one
engine, and /metrics describes both engines."""

from __future__ import annotations

import asyncio
import re

import httpx
from distributed_cases import ENGINE_ARGS, start_server

from infercore import LLM, SamplingParams

PROMPTS = [f"request {i}: the model of the token" for i in range(32)]


def _metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)}{{[^}}]*}} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} missing from /metrics"
    return float(match.group(1))


async def _complete_all(url: str) -> list[str]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        async def one(prompt: str) -> str:
            body = {"model": "tiny", "prompt": prompt, "max_tokens": 6, "temperature": 0, "ignore_eos": True}
            response = await client.post("/v1/completions", json=body)
            assert response.status_code == 200, response.text
            return response.json()["choices"][0]["text"]

        return list(await asyncio.gather(*(one(p) for p in PROMPTS)))


def test_dp2_server_matches_one_engine_and_merges_metrics(qwen3_folder, tmp_path) -> None:
    reference = LLM(model=str(qwen3_folder), **ENGINE_ARGS)
    expected = [o.outputs[0].text for o in reference.generate(
        PROMPTS, SamplingParams(temperature=0, max_tokens=6, ignore_eos=True), use_tqdm=False)]
    blocks_per_engine = reference.llm_engine.engine_core.scheduler.get_stats().num_total_blocks
    reference.llm_engine.engine_core.shutdown()
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in ENGINE_ARGS.items()]
    proc, url = start_server(qwen3_folder, tmp_path / "server.log", *flags, "--served-model-name", "tiny",
                             "--data-parallel-size", "2")
    try:
        assert asyncio.run(_complete_all(url)) == expected
        metrics = httpx.get(url + "/metrics").text
        assert _metric(metrics, "infercore:kv_cache_total_blocks") == 2 * blocks_per_engine
        assert _metric(metrics, "infercore:request_success_total") == len(PROMPTS)
    finally:
        proc.terminate()
        proc.wait(30)
