"""An API server freezes its start-up heap before it serves, so a full collection never walks the app,
the engine client and every import while tokens stream (each such walk would pause all its streams)."""

from __future__ import annotations

import asyncio
import gc

import pytest

from infercore.config import InfercoreConfig
from infercore.entrypoints import serve as serve_module


def test_the_server_freezes_its_start_up_heap_before_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []

    async def record_and_return(self, sockets=None) -> None:  # noqa: ANN001 - uvicorn's signature
        seen.append(gc.get_freeze_count())

    monkeypatch.setattr(serve_module._Server, "serve", record_and_return)
    gc.unfreeze()
    try:
        code = asyncio.run(serve_module.serve(InfercoreConfig(), "fake_engine:EchoEngine"))
    finally:
        gc.unfreeze()
    assert code == 1  # the stand-in never started serving
    assert seen and seen[0] > 10_000, seen
