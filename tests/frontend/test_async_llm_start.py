"""AsyncLLM.start when the engine fails to start: its error is raised and nothing else is left behind."""

from __future__ import annotations

import asyncio
import gc
import threading
from typing import Any

import pytest

from infercore.config import InfercoreConfig
from infercore.frontend import async_llm
from infercore.frontend.async_llm import AsyncLLM
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
