"""A soak of `infercore serve` on the demo model: mixed streaming and whole completions and chats,
client disconnects and bad requests for INFERCORE_SOAK_SECONDS (default 90, about 2,400 requests: the bounded form CI
runs; set it higher for a longer run). Afterwards the engine is idle and empty, and neither process grew
over the second half of the run, by more than RSS_GROWTH_LIMIT_MB (the first half is warm-up:
allocator pools and caches fill there)."""

from __future__ import annotations

import contextlib
import os
import random
import re
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import psutil
import pytest

SOAK_SECONDS = float(os.environ.get("INFERCORE_SOAK_SECONDS", "90"))
CLIENTS = 6
SAMPLE_EVERY_S = 1.0
#: Longest a client waits for a reply; a slow machine stretches replies, a hung engine shows at the end.
CLIENT_TIMEOUT_S = 180.0
#: Most growth of either process's RSS allowed between the middle and the end of the run.
RSS_GROWTH_LIMIT_MB = 40.0
FLAGS = ["--max-model-len", "512", "--num-gpu-blocks-override", "160", "--max-num-seqs", "8"]
WORDS = ["alpha", "beta", "gamma", "delta", "tea", "river", "stone", "cloud", "Zürich", "東京", "🙂", "the"]


@dataclass
class Tally:
    """What the clients saw, shared between their threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    outcomes: Counter = field(default_factory=Counter)
    surprises: list[str] = field(default_factory=list)

    def record(self, kind: str, problem: str | None) -> None:
        with self.lock:
            self.outcomes[kind] += 1
            if problem is not None and len(self.surprises) < 20:
                self.surprises.append(f"{kind}: {problem}")


@dataclass
class Sample:
    """One reading of both processes' memory and the engine's queues."""

    t: float
    api_rss_mb: float
    engine_rss_mb: float
    kv_usage: float
    running: float
    waiting: float


def _prompt(rng: random.Random) -> str:
    # A shared opening makes prefix-cache hits (and evictions) part of the mix.
    opening = "You are a helpful assistant. " if rng.random() < 0.5 else ""
    return opening + " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 60)))


def _body(rng: random.Random, chat: bool) -> dict:
    body: dict = {"model": "tiny", "max_tokens": rng.randint(1, 40), "temperature": rng.choice([0, 0.8, 1.2])}
    if chat:
        body["messages"] = [{"role": "user", "content": _prompt(rng)}]
    else:
        body["prompt"] = _prompt(rng)
    extra = rng.random()
    if extra < 0.15:
        body["n"] = 2
    elif extra < 0.3:
        body["logprobs"] = True if chat else 2
    elif extra < 0.4:
        body.update(top_p=0.9, top_k=20, seed=rng.randint(0, 1000))
    elif extra < 0.5:
        body.update(stop=["a", "e"], presence_penalty=0.5)
    return body


def _path(chat: bool) -> str:
    return "/v1/chat/completions" if chat else "/v1/completions"


def _whole(client: httpx.Client, rng: random.Random) -> tuple[str, str | None]:
    chat = rng.random() < 0.5
    response = client.post(_path(chat), json=_body(rng, chat))
    ok = response.status_code == 200 and response.json()["usage"]["completion_tokens"] >= 1
    return "whole", None if ok else f"{response.status_code} {response.text[:200]}"


def _streamed(client: httpx.Client, rng: random.Random) -> tuple[str, str | None]:
    chat = rng.random() < 0.5
    with client.stream("POST", _path(chat), json={**_body(rng, chat), "stream": True}) as response:
        lines = [line for line in response.iter_lines() if line]
    ok = response.status_code == 200 and lines[-1] == "data: [DONE]" and '"error"' not in "".join(lines)
    return "streamed", None if ok else f"{response.status_code} {lines[-3:]}"


def _disconnect(client: httpx.Client, rng: random.Random) -> tuple[str, str | None]:
    chat = rng.random() < 0.5
    body = {**_body(rng, chat), "stream": True, "max_tokens": 200, "ignore_eos": True}
    with client.stream("POST", _path(chat), json=body) as response:
        if response.status_code != 200:
            return "disconnect", f"{response.status_code}"
        chunks, wanted = 0, rng.randint(0, 3)
        for line in response.iter_lines():
            chunks += line.startswith("data: {")
            if chunks >= wanted:
                break  # leaving the block closes the connection mid-stream
    return "disconnect", None


def _give_up(client: httpx.Client, rng: random.Random) -> tuple[str, str | None]:
    """A non-streaming client that stops waiting."""
    body = {**_body(rng, False), "max_tokens": 200, "ignore_eos": True}
    with contextlib.suppress(httpx.TimeoutException):
        client.post("/v1/completions", json=body, timeout=rng.uniform(0.05, 0.5))
    return "give_up", None


BAD_BODIES: list[dict] = [
    {"prompt": "hi", "max_tokens": 0},
    {"prompt": "hi", "temperature": -1},
    {"prompt": "hi", "top_p": 2},
    {"prompt": "hi", "min_tokens": 9, "max_tokens": 3},
    {"prompt": "hi", "model": "no-such-model"},
    {"prompt": [99999999]},
    {"prompt": "word " * 600},
    {"messages": []},
    {"prompt": "hi", "logprobs": 10**6},
    {"prompt": "hi", "n": 10**9},
    {"prompt": "hi", "logit_bias": {str(i): 1 for i in range(4096)}},
]


def _bad(client: httpx.Client, rng: random.Random) -> tuple[str, str | None]:
    if rng.random() < 0.2:
        response = client.post("/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    else:
        body = rng.choice(BAD_BODIES)
        response = client.post(_path("messages" in body), json={"model": "tiny", **body})
    ok = 400 <= response.status_code < 500
    return "bad", None if ok else f"{response.status_code} {response.text[:200]}"


MIX: list[tuple[float, Callable[[httpx.Client, random.Random], tuple[str, str | None]]]] = [
    (0.3, _whole), (0.3, _streamed), (0.15, _disconnect), (0.05, _give_up), (0.2, _bad)]


def _client_loop(url: str, seed: int, stop: threading.Event, tally: Tally) -> None:
    rng = random.Random(seed)
    weights, actions = [w for w, _ in MIX], [a for _, a in MIX]
    with httpx.Client(base_url=url, timeout=CLIENT_TIMEOUT_S) as client:
        while not stop.is_set():
            action = rng.choices(actions, weights)[0]
            try:
                kind, problem = action(client, rng)
            except httpx.HTTPError as exc:
                kind, problem = action.__name__, repr(exc)
            tally.record(kind, problem)


def _gauge(metrics: str, name: str) -> float:
    match = re.search(rf"^infercore:{name}\{{[^}}]*\}} (\S+)$", metrics, re.MULTILINE)
    assert match, f"/metrics has no {name}"
    return float(match.group(1))


def _rss_mb(process: psutil.Process) -> float:
    """RSS of a process and its descendants (an engine's workers, when it has any)."""
    total = process.memory_info().rss
    for child in process.children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            total += child.memory_info().rss
    return total / 2**20


def _sample(url: str, api: psutil.Process, engine: psutil.Process, start: float) -> Sample:
    metrics = httpx.get(url + "/metrics", timeout=10).text
    return Sample(time.monotonic() - start, api.memory_info().rss / 2**20, _rss_mb(engine),
                  _gauge(metrics, "kv_cache_usage_perc"), _gauge(metrics, "num_requests_running"),
                  _gauge(metrics, "num_requests_waiting"))


def _wait_idle(url: str, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        kv = httpx.get(url + "/debug/kv_cache").json()
        idle = kv["num_running"] == kv["num_waiting"] == 0 and kv["num_free_blocks"] == kv["num_total_blocks"]
        if idle or time.monotonic() > deadline:
            return kv
        time.sleep(0.2)


def _growth(samples: list[Sample], attr: str) -> float:
    """RSS at the end (median of the last tenth of the samples) less RSS at the middle of the run."""
    values = [getattr(s, attr) for s in samples]
    tenth = max(len(values) // 10, 1)
    middle = len(values) // 2
    return statistics.median(values[-tenth:]) - statistics.median(values[middle - tenth // 2:middle + tenth // 2 + 1])


@pytest.mark.heavy
@pytest.mark.timeout(SOAK_SECONDS + CLIENT_TIMEOUT_S + 300)
def test_mixed_load_keeps_memory_and_kv_flat_and_ends_idle(start) -> None:
    server = start(None, *FLAGS)
    api, engine = psutil.Process(server.proc.pid), psutil.Process(server.engine_pid())
    begin = time.monotonic()
    assert _wait_idle(server.url)["num_free_blocks"] > 0
    start_sample = _sample(server.url, api, engine, begin)
    stop, tally = threading.Event(), Tally()
    clients = [threading.Thread(target=_client_loop, args=(server.url, seed, stop, tally), daemon=True)
               for seed in range(CLIENTS)]
    for client in clients:
        client.start()
    samples: list[Sample] = []
    while time.monotonic() - begin < SOAK_SECONDS:
        samples.append(_sample(server.url, api, engine, begin))
        time.sleep(SAMPLE_EVERY_S)
    stop.set()
    for client in clients:
        client.join(CLIENT_TIMEOUT_S + 30)
    kv = _wait_idle(server.url)
    end_sample = _sample(server.url, api, engine, begin)
    growth = {attr: _growth(samples, attr) for attr in ("api_rss_mb", "engine_rss_mb")}
    report = (f"{sum(tally.outcomes.values())} requests {dict(tally.outcomes)}; RSS start/mid/end "
              f"api {samples[0].api_rss_mb:.0f}/{samples[len(samples) // 2].api_rss_mb:.0f}/"
              f"{samples[-1].api_rss_mb:.0f} MB, engine {samples[0].engine_rss_mb:.0f}/"
              f"{samples[len(samples) // 2].engine_rss_mb:.0f}/{samples[-1].engine_rss_mb:.0f} MB; "
              f"peak KV usage {max(s.kv_usage for s in samples):.2f}; surprises {tally.surprises}")
    print(report)
    assert not tally.surprises, report
    assert all(tally.outcomes[kind] > 0 for kind in ("whole", "streamed", "disconnect", "give_up", "bad")), report
    assert max(s.kv_usage for s in samples) > 0, report
    assert kv["num_running"] == kv["num_waiting"] == 0 and kv["num_free_blocks"] == kv["num_total_blocks"], kv
    assert end_sample.running == end_sample.waiting == 0, report
    assert end_sample.kv_usage == start_sample.kv_usage == 0.0, report
    assert all(g < RSS_GROWTH_LIMIT_MB for g in growth.values()), f"RSS growth {growth}; {report}"
    assert server.proc.poll() is None and engine.is_running()
    assert httpx.get(server.url + "/health").status_code == 200
