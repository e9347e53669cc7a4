"""Data parallelism: two EngineCore processes behind one AsyncLLM give the greedy text of one engine,
share the load, keep aborts on their engine and report merged stats."""

from __future__ import annotations

import asyncio

import pytest
from distributed_cases import ENGINE_ARGS

from infercore import LLM, SamplingParams
from infercore.config import InfercoreConfig
from infercore.frontend.async_llm import AsyncLLM
from infercore.frontend.dp_client import DataParallelClient, merge_stats
from infercore.wire.messages import SchedulerStats

PARAMS = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
PROMPTS = [f"request {i}: the model of the token" for i in range(32)]


def test_merged_stats_sum_engines() -> None:
    a = SchedulerStats(num_running=2, num_waiting=1, kv_cache_usage=0.5, num_free_blocks=5, num_total_blocks=10,
                       prefix_cache_queries=7, prefix_cache_hits=3, num_preemptions=1)
    b = SchedulerStats(num_running=1, kv_cache_usage=0.0, num_free_blocks=30, num_total_blocks=30)
    merged = merge_stats([a, b])
    assert (merged.num_running, merged.num_waiting, merged.num_total_blocks, merged.num_free_blocks) == (3, 1, 40, 35)
    assert (merged.prefix_cache_queries, merged.prefix_cache_hits, merged.num_preemptions) == (7, 3, 1)
    assert merged.kv_cache_usage == pytest.approx(5 / 40)


async def _serve_all(llm: AsyncLLM) -> list[str]:
    async def one(i: int) -> str:
        text = ""
        async for out in llm.generate(PROMPTS[i], PARAMS, f"req-{i}"):
            text += out.outputs[0].text
        return text

    return list(await asyncio.gather(*(one(i) for i in range(len(PROMPTS)))))


async def _abort_one(llm: AsyncLLM, client: DataParallelClient) -> None:
    sent: list[tuple[int, list[str]]] = []
    for index, engine_client in enumerate(client.clients):
        def spy(ids: list[str], index: int = index, send=engine_client.abort_requests):
            sent.append((index, list(ids)))
            return send(ids)

        engine_client.abort_requests = spy  # type: ignore[method-assign]
    stream = llm.generate("hello", SamplingParams(temperature=0, max_tokens=100, ignore_eos=True), "to-abort")
    await stream.__anext__()
    engine = client._owner["to-abort"]
    await stream.aclose()  # the caller stops early: AsyncLLM aborts the request on its engine
    for _ in range(100):
        if sent:
            break
        await asyncio.sleep(0.05)
    assert sent == [(engine, ["to-abort"])]
    assert client.load == [0, 0]


def test_dp2_matches_dp1_and_spreads_requests(qwen3_folder) -> None:
    reference = LLM(model=str(qwen3_folder), **ENGINE_ARGS)
    expected = [out.outputs[0].text for out in reference.generate(PROMPTS, PARAMS, use_tqdm=False)]
    blocks_per_engine = reference.llm_engine.engine_core.scheduler.get_stats().num_total_blocks
    reference.llm_engine.engine_core.shutdown()
    config = InfercoreConfig.from_kwargs(model=str(qwen3_folder), data_parallel_size=2, **ENGINE_ARGS)

    async def run() -> None:
        llm = await AsyncLLM.start(config)
        try:
            client = llm.client
            assert isinstance(client, DataParallelClient)
            assert await _serve_all(llm) == expected
            assert client.routed == [16, 16]
            assert client.load == [0, 0]
            await asyncio.sleep(0.5)  # the engines report their freed blocks after the last step
            assert llm.stats.num_total_blocks == 2 * blocks_per_engine
            await _abort_one(llm, client)
        finally:
            await llm.shutdown()
        assert all(not c.process.is_alive() for c in client.clients)

    asyncio.run(run())
