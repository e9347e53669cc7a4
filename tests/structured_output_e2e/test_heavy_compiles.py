"""Schemas that are slow to compile do not starve other requests: a trivial constraint sent after four of
them is served at once, and so is a plain request."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.serial  # a time bound: runs after the parallel pass, alone

QUICK_S = 5.0


def heavy_schema(i: int) -> dict[str, Any]:
    """A string bounded to thousands of characters: seconds of xgrammar compile time when expanded."""
    return {"type": "object", "properties": {f"text{i}": {"type": "string", "maxLength": 2000 + i}},
            "required": [f"text{i}"]}


async def timed_post(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> tuple[httpx.Response, float]:
    start = time.monotonic()
    response = await client.post(url + "/v1/completions", json={"model": "tiny", "prompt": "hi", **body})
    return response, time.monotonic() - start


def test_trivial_constraint_is_not_starved_by_heavy_schemas(server: Any) -> None:
    async def scenario() -> list[tuple[httpx.Response, float]]:
        async with httpx.AsyncClient(timeout=120) as client:
            heavy = [asyncio.create_task(timed_post(client, server.url, {"guided_json": heavy_schema(i),
                                                                           "max_tokens": 8}))
                     for i in range(4)]
            await asyncio.sleep(0.2)
            light = await asyncio.gather(
                timed_post(client, server.url, {"guided_choice": ["yes", "no"], "max_tokens": 8}),
                timed_post(client, server.url, {"max_tokens": 8}))
            await asyncio.gather(*heavy)
            return list(light) + [task.result() for task in heavy]

    (choice, choice_s), (plain, plain_s), *heavy = asyncio.run(scenario())
    assert choice.status_code == 200, choice.text
    assert choice.json()["choices"][0]["text"] in ("yes", "no")
    assert choice_s < QUICK_S, f"the trivial constraint took {choice_s:.1f} s behind heavy schemas"
    assert plain.status_code == 200 and plain_s < QUICK_S, (plain.text, plain_s)
    assert all(response.status_code == 200 for response, _ in heavy), [r.text for r, _ in heavy]
    assert httpx.get(server.url + "/health").status_code == 200
