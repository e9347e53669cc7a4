"""A chat template sent with a request renders in a worker process: one that is stuck inside a single
long operation is killed at its deadline (the request gets a 400 at once, the worker is gone, the next
template renders in a fresh one), and the template bombs cost the API process neither time nor memory."""

from __future__ import annotations

import asyncio
import os
import time

import httpx
import pytest

from infercore.entrypoints.openai import template_process
from infercore.entrypoints.openai.errors import APIError
from infercore.entrypoints.openai.template_process import KILL_GRACE_S, TemplateProcessPool
from infercore.tokenizer import ChatTemplateError

pytestmark = pytest.mark.serial  # a time bound: runs after the parallel pass, alone

_MESSAGES = [{"role": "user", "content": "hi"}]
#: One filter call on 900,000 characters: ~0.5-1 s of work the sandbox can't interrupt (it would finish, and be
#: refused for its size, if the worker were not killed first: the test's deadline and grace are far shorter).
STUCK = '{{ ("ab " * 300000)|wordwrap(1)|length }}'
TIMEOUT_S = 0.1
TEST_KILL_GRACE_S = 0.05


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split()[2] == "Z"


def test_stuck_template_is_killed_at_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(template_process, "KILL_GRACE_S", TEST_KILL_GRACE_S)

    async def scenario() -> None:
        pool = TemplateProcessPool(num_workers=1)
        try:
            assert await pool.render(None, _MESSAGES, chat_template="{{ messages[0].content }}", timeout_s=30) == "hi"
            [worker] = pool._workers
            start = time.monotonic()
            with pytest.raises(APIError, match="longer than the limit"):
                await pool.render(None, _MESSAGES, chat_template=STUCK, timeout_s=TIMEOUT_S)
            assert time.monotonic() - start < TIMEOUT_S + KILL_GRACE_S + 1.0
            assert _gone(worker.process.pid) and not pool._workers
            with pytest.raises(ChatTemplateError, match="unsafe|undefined|failed"):
                await pool.render(None, _MESSAGES, chat_template="{{ ''.__class__.__mro__ }}", timeout_s=30)
            assert await pool.render(None, _MESSAGES, chat_template="{{ bos_token }}ok", timeout_s=30) == "ok"
        finally:
            pool.close()

    asyncio.run(scenario())


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize("template", ["{{ lipsum(150000) }}", '{% set d = {"a": [[1, 2]] * 20} %}'
                                      "{{ d|tojson(indent=999999) }}", STUCK])
def test_template_bombs_cost_the_server_little(attack_server, template: str) -> None:
    body = {"model": "tiny", "messages": _MESSAGES, "max_tokens": 1, "chat_template": template}
    httpx.post(attack_server.url + "/v1/chat/completions", json={**body, "chat_template": "{{ 'warm' }}"},
               timeout=60)  # starts the template workers
    before = _rss_bytes(attack_server.proc.pid)
    start = time.monotonic()
    responses = [httpx.post(attack_server.url + "/v1/chat/completions", json=body, timeout=60) for _ in range(4)]
    elapsed = time.monotonic() - start
    growth = _rss_bytes(attack_server.proc.pid) - before
    assert [r.status_code for r in responses] == [400] * 4
    assert httpx.get(attack_server.url + "/health", timeout=2).status_code == 200
    assert growth < 20 * 2**20, f"the API process grew {growth / 2**20:.0f} MB"
    assert elapsed < 4 * 2.0 if template != STUCK else elapsed < 4 * 7.0
