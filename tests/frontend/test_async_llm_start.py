"""AsyncLLM.start when the engine fails to start: its error is raised and nothing else is left behind."""

from __future__ import annotations

import asyncio
import gc
import threading
from typing import Any

import pytest

from infercore.config import InfercoreConfig
from infercore.frontend import async_llm
from infercore.frontend.async_llm import AsyncLLM, StatsListener
from infercore.frontend.core_client import EngineStartupError


class _FailingClient:
    """An engine client whose engine never starts."""

    closed = False

    async def start(self, timeout: float | None = None) -> Any:
        raise EngineStartupError("the engine did not start")

    def close(self) -> None:
        self.closed = True


def test_a_failed_start_leaves_no_unretrieved_tokenizer_error(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    tokenizer_failed = threading.Event()

    def failing_tokenizer(model_config: Any, **kwargs: Any) -> Any:
        tokenizer_failed.set()
        raise OSError("no tokenizer here")

    monkeypatch.setattr(async_llm, "serving_tokenizer", failing_tokenizer)
    config = InfercoreConfig.from_kwargs(model=str(tmp_path))
    client = _FailingClient()
    unhandled: list[dict[str, Any]] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: unhandled.append(context))
        with pytest.raises(EngineStartupError, match="did not start"):
            await AsyncLLM.start(config, client=client)
        while not tokenizer_failed.is_set():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        gc.collect()

    asyncio.run(main())
    gc.collect()
    assert client.closed
    assert unhandled == []


@pytest.mark.parametrize("tokenizer_class", [None, "TokenizersBackend"])
def test_the_tokenizer_class_given_reaches_the_tokenizer_load(monkeypatch: pytest.MonkeyPatch, tmp_path,
                                                              tokenizer_class: str | None) -> None:
    # What the --api-server-count launcher named for every API server (None: not named, the API server asks).
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(async_llm, "serving_tokenizer", lambda model_config, **kwargs: seen.append(kwargs))
    config = InfercoreConfig.from_kwargs(model=str(tmp_path))

    async def main() -> None:
        with pytest.raises(EngineStartupError):
            await AsyncLLM.start(config, client=_FailingClient(), tokenizer_class=tokenizer_class)
        for _ in range(500):  # the load runs in a thread beside the engine's start
            if seen:
                break
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert seen == [{"class_name": tokenizer_class}]


class _StartedClient(_FailingClient):
    """An engine client whose engine starts."""

    initial_stats = None

    async def start(self, timeout: float | None = None) -> Any:
        from infercore.wire.model_info import ModelInfo

        return ModelInfo(max_model_len=64, vocab_size=128, eos_token_id=None, generation_stop_ids=[], num_kv_blocks=8)


def test_a_start_that_fails_after_the_engine_came_up_closes_the_client(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path) -> None:
    # The engine is up when the front end's own set-up fails (here the metrics listener): the client, and with it the
    # engine process, must not be left behind (an unclosed client is also a zmq context the collector cannot free).
    class _BrokenListener(StatsListener):
        def on_engine_stats(self, stats: Any) -> None:
            raise RuntimeError("the metrics registry refused")

    monkeypatch.setattr(async_llm, "serving_tokenizer", lambda model_config, **kwargs: None)
    config = InfercoreConfig.from_kwargs(model=str(tmp_path))
    client = _StartedClient()

    async def main() -> None:
        with pytest.raises(RuntimeError, match="metrics registry refused"):
            await AsyncLLM.start(config, client=client, listener=_BrokenListener())

    asyncio.run(main())
    assert client.closed
