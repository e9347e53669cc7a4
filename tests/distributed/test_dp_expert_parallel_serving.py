"""``infercore serve --data-parallel-size 2 --enable-expert-parallel`` (the launcher's path): concurrent
completions over both engines get the greedy text of one engine without expert parallelism, and a
SIGTERM stops the server and both engines (no engine left waiting on the other)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from distributed_cases import ENGINE_ARGS, start_server

from infercore import LLM, SamplingParams

PROMPTS = [f"request {i}: the expert of the token" for i in range(8)]
PARAMS = {"max_tokens": 6, "temperature": 0, "ignore_eos": True}


async def _complete_all(url: str) -> list[str]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        async def one(prompt: str) -> str:
            response = await client.post("/v1/completions", json={"model": "tiny", "prompt": prompt, **PARAMS})
            assert response.status_code == 200, response.text
            return response.json()["choices"][0]["text"]

        return list(await asyncio.gather(*(one(p) for p in PROMPTS)))


@pytest.mark.heavy
def test_dp2_ep_server_matches_one_engine(tiny_model_factory, tmp_path) -> None:
    folder = tiny_model_factory("Qwen3MoeForCausalLM")
    reference = LLM(model=str(folder), **ENGINE_ARGS)
    expected = [o.outputs[0].text for o in reference.generate(PROMPTS, SamplingParams(**PARAMS), use_tqdm=False)]
    reference.llm_engine.engine_core.shutdown()
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in ENGINE_ARGS.items()]
    proc, url = start_server(folder, tmp_path / "server.log", *flags, "--served-model-name", "tiny",
                             "--data-parallel-size", "2", "--enable-expert-parallel")
    try:
        assert asyncio.run(_complete_all(url)) == expected
    finally:
        proc.terminate()
        code = proc.wait(60)
    assert code == 0, (tmp_path / "server.log").read_text()[-3000:]
