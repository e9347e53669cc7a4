"""Expert parallelism across data-parallel engines (CPU, gloo): two engines (one rank each) spread the
experts over both, each holding disjoint experts, step together (an engine without requests runs
dummy forward passes while the other works) and give the greedy tokens of one engine without expert
parallelism."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from dp_expert_probe import PROBE_DIR_ENV, read_probe
from moe_cases import ENGINE_ARGS, MOE_CASES

from infercore import LLM, SamplingParams
from infercore.config import InfercoreConfig
from infercore.frontend.async_llm import AsyncLLM
from infercore.frontend.core_client import EngineDeadError
from infercore.frontend.dp_client import DataParallelClient

PROMPTS = ["hello world", "The engine cache block request server stream json tool call", "a",
           "expert parallel data parallel", "the quick brown fox"]
GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
#: Bounds a hang (engines out of step): every wave here takes a few seconds.
WAVE_TIMEOUT_S = 90
#: How soon the engine left behind must stop after the other one is killed mid-request.
PEER_GONE_EXIT_S = 30


def reference_tokens(folder: str) -> list[list[int]]:
    llm = LLM(model=folder, **ENGINE_ARGS)
    try:
        return [list(out.outputs[0].token_ids) for out in llm.generate(PROMPTS, GREEDY, use_tqdm=False)]
    finally:
        llm.llm_engine.engine_core.shutdown()


async def _tokens(llm: AsyncLLM, index: int, tag: str) -> list[int]:
    tokens: list[int] = []
    async for out in llm.generate(PROMPTS[index], GREEDY, f"{tag}-{index}"):
        tokens += out.outputs[0].token_ids  # streamed: each output holds the new tokens
    return tokens


async def _serve(config: InfercoreConfig) -> tuple[list[int], list[list[int]], list[int]]:
    """One request alone (engine 1 idle, so it runs dummy steps), then every prompt at once."""
    llm = await AsyncLLM.start(config, engine_factory="dp_expert_probe:ProbedEngineCore")
    try:
        client = llm.client
        assert isinstance(client, DataParallelClient)
        alone = await asyncio.wait_for(_tokens(llm, 1, "alone"), WAVE_TIMEOUT_S)
        routed_alone = list(client.routed)
        together = await asyncio.wait_for(
            asyncio.gather(*(_tokens(llm, i, "together") for i in range(len(PROMPTS)))), WAVE_TIMEOUT_S)
        assert client.routed[1] > 0  # the second wave is spread over both engines
        await _kill_idle_engine_mid_request(llm, client)
    finally:
        await llm.shutdown()
    assert all(not c.process.is_alive() for c in client.clients)
    return alone, list(together), routed_alone


async def _drain(stream: AsyncIterator[object]) -> None:
    async for _ in stream:
        pass


async def _kill_idle_engine_mid_request(llm: AsyncLLM, client: DataParallelClient) -> None:
    """Engine 1 (idle, running dummy steps for engine 0's request) is killed: the request fails and
    engine 0, whose next step or agreement meets nobody, stops by itself instead of hanging."""
    long = SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)
    stream = llm.generate(PROMPTS[0], long, "long")
    await asyncio.wait_for(stream.__anext__(), WAVE_TIMEOUT_S)
    assert client._owner["long"] == 0
    os.kill(client.clients[1].process.pid, signal.SIGKILL)
    with pytest.raises(EngineDeadError):
        await asyncio.wait_for(_drain(stream), WAVE_TIMEOUT_S)
        # On a loaded machine engine 0 can finish the request before the kill lands (the test only saw the
        # first token): then the next request is the one that must fail.
        await asyncio.wait_for(_drain(llm.generate(PROMPTS[0], long, "after-kill")), WAVE_TIMEOUT_S)
    survivor = client.clients[0].process
    deadline = time.monotonic() + PEER_GONE_EXIT_S
    while survivor.is_alive() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert not survivor.is_alive(), "the engine left behind did not stop"


@pytest.mark.parametrize("case", ["qwen3-moe", "mixtral"])
def test_dp2_ep_matches_one_engine(tiny_model_factory, tmp_path: Path, monkeypatch, case: str) -> None:
    architecture, overrides = MOE_CASES[case]
    folder = str(tiny_model_factory(architecture, **overrides))
    expected = reference_tokens(folder)
    monkeypatch.setenv(PROBE_DIR_ENV, str(tmp_path))
    config = InfercoreConfig.from_kwargs(model=folder, data_parallel_size=2, enable_expert_parallel=True,
                                         **ENGINE_ARGS)
    alone, together, routed_alone = asyncio.run(_serve(config))
    assert routed_alone == [1, 0]
    assert alone == expected[1]
    assert together == expected
    reports = [read_probe(tmp_path, rank) for rank in range(2)]
    assert [r["ep_ranks"] for r in reports] == [[0], [1]]
    assert reports[1]["dummy_steps"] >= GREEDY.max_tokens - 1  # engine 1 stepped with engine 0's request
    layers = reports[0]["experts"]
    assert layers and layers.keys() == reports[1]["experts"].keys()
    for name, first in layers.items():
        second = reports[1]["experts"][name]
        assert first and second and not set(first) & set(second), name
        assert sorted(first + second) == list(range(len(first) + len(second))), name


@pytest.mark.heavy
def test_dp2_tp2_ep4_matches_one_engine(tiny_model_factory, tmp_path: Path, monkeypatch) -> None:
    """Two engines of two ``mp`` ranks each: experts over four ranks, attention tensor-parallel inside
    each engine."""
    architecture, overrides = MOE_CASES["qwen3-moe"]
    folder = str(tiny_model_factory(architecture, **overrides))
    expected = reference_tokens(folder)
    config = InfercoreConfig.from_kwargs(model=folder, data_parallel_size=2, tensor_parallel_size=2,
                                         enable_expert_parallel=True, distributed_executor_backend="mp",
                                         **ENGINE_ARGS)

    async def serve() -> tuple[list[int], list[list[int]]]:
        llm = await AsyncLLM.start(config)
        try:
            alone = await asyncio.wait_for(_tokens(llm, 1, "alone"), WAVE_TIMEOUT_S)
            together = await asyncio.wait_for(
                asyncio.gather(*(_tokens(llm, i, "together") for i in range(len(PROMPTS)))), WAVE_TIMEOUT_S)
        finally:
            await llm.shutdown()
        return alone, list(together)

    alone, together = asyncio.run(serve())
    assert alone == expected[1]
    assert together == expected


@pytest.mark.heavy
def test_dp2_ep_on_ray_matches_one_engine(tiny_model_factory) -> None:
    """The same with each engine's worker a Ray actor (one host)."""
    pytest.importorskip("ray")
    architecture, overrides = MOE_CASES["mixtral"]
    folder = str(tiny_model_factory(architecture, **overrides))
    expected = reference_tokens(folder)
    config = InfercoreConfig.from_kwargs(model=folder, data_parallel_size=2, enable_expert_parallel=True,
                                         distributed_executor_backend="ray", **ENGINE_ARGS)

    async def serve() -> list[list[int]]:
        llm = await AsyncLLM.start(config)
        try:
            return list(await asyncio.wait_for(
                asyncio.gather(*(_tokens(llm, i, "ray") for i in range(len(PROMPTS)))), WAVE_TIMEOUT_S))
        finally:
            await llm.shutdown()

    assert asyncio.run(serve()) == expected
