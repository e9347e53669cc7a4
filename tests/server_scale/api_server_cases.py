"""Helpers of the --api-server-count tests: concurrent streamed requests, /metrics samples, process trees."""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx


@dataclass(frozen=True)
class Streamed:
    """What one streamed request produced: its text, its tokens (from logprobs, where asked) and usage."""

    text: str
    tokens: tuple[str, ...]
    completion_tokens: int
    finish_reason: str | None


def request_body(i: int, max_tokens: int = 10) -> tuple[str, dict]:
    """Request ``i`` of a mixed set: completions and chats, greedy and seeded sampling, some with logprobs."""
    sampling: dict = {"temperature": 0.0} if i % 4 < 2 else {"temperature": 0.9, "top_p": 0.95, "seed": 1000 + i}
    body = {"model": "tiny", "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}, **sampling}
    with_logprobs = i % 8 < 2
    if i % 2 == 0:
        body["prompt"] = f"request {i} asks the engine for a stream of tokens"
        if with_logprobs:
            body["logprobs"] = 1
        return "/v1/completions", body
    body["messages"] = [{"role": "user", "content": f"request {i}: say something about the cache"}]
    if with_logprobs:
        body["logprobs"] = True
    return "/v1/chat/completions", body


def _parse(lines: list[str]) -> Streamed:
    text, tokens, usage, finish = [], [], 0, None
    for line in lines:
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[len("data: "):])
        if event.get("usage"):
            usage = event["usage"]["completion_tokens"]
        for choice in event["choices"]:
            if "delta" in choice:
                text.append(choice["delta"].get("content") or "")
                logprobs = (choice.get("logprobs") or {}).get("content") or []
                tokens += [entry["token"] for entry in logprobs]
            else:
                text.append(choice["text"])
                tokens += (choice.get("logprobs") or {}).get("tokens") or []
            finish = choice.get("finish_reason") or finish
    return Streamed("".join(text), tuple(tokens), usage, finish)


async def _stream_all(url: str, count: int) -> list[Streamed]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        async def one(i: int) -> Streamed:
            path, body = request_body(i)
            async with client.stream("POST", path, json=body) as response:
                assert response.status_code == 200, await response.aread()
                return _parse([line async for line in response.aiter_lines()])

        return list(await asyncio.gather(*(one(i) for i in range(count))))


def stream_all(url: str, count: int) -> list[Streamed]:
    """Send requests ``0..count-1`` at once, each streamed on a connection of its own."""
    return asyncio.run(_stream_all(url, count))


def metric_samples(text: str, name: str) -> dict[str, float]:
    """The samples of metric ``name`` in a /metrics text, by their label text."""
    pattern = re.compile(rf"^{re.escape(name)}{{([^}}]*)}} (\S+)$", re.MULTILINE)
    return {labels: float(value) for labels, value in pattern.findall(text)}


def started_pids(log: str) -> dict[str, int]:
    """The launcher's children, from its log lines ("engine 0 started (pid 12)"): name → pid."""
    return {name: int(pid) for name, pid in re.findall(r"((?:engine|API server) \d+) started \(pid (\d+)\)", log)}


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return status.rsplit(")", 1)[1].split()[0] != "Z"


def assert_nothing_left(launcher_pid: int, pids: dict[str, int]) -> None:
    """Within 10 s of the launcher's exit, none of its children runs and its socket folder is gone."""
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [name for name, pid in pids.items() if alive(pid)]
    assert not list(Path(tempfile.gettempdir()).glob(f"infercore-ipc-{launcher_pid}-*"))
