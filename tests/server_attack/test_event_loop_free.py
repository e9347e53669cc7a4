"""Blocking work of one request (rendering a chat template, tokenizing a prompt) never stalls the event
loop: /health answers while slow templates render, and they end in a 400 naming the limit."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import pytest

from infercore.tokenizer import TEMPLATE_TIMEOUT_S

pytestmark = pytest.mark.serial  # a time bound: runs after the parallel pass, alone

#: Two nested 100,000-step loops: runs until the template deadline stops it.
SLOW_TEMPLATE = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
#: Longest /health may take while the slow templates render (it took up to 19 s when they ran on the loop).
HEALTH_BOUND_S = 2.0


def _slow_chat(url: str, results: list[httpx.Response]) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
            "chat_template": SLOW_TEMPLATE}
    results.append(httpx.post(url + "/v1/chat/completions", json=body, timeout=60))


def _timed(send) -> tuple[httpx.Response, float]:
    start = time.monotonic()
    response = send()
    return response, time.monotonic() - start


def test_health_answers_while_slow_templates_render(attack_server) -> None:
    url = attack_server.url
    results: list[httpx.Response] = []
    threads = [threading.Thread(target=_slow_chat, args=(url, results)) for _ in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    health_times = []
    while any(t.is_alive() for t in threads) and len(health_times) < 20:
        response, seconds = _timed(lambda: httpx.get(url + "/health", timeout=30))
        assert response.status_code == 200
        health_times.append(seconds)
        time.sleep(0.1)
    assert health_times and max(health_times) < HEALTH_BOUND_S, health_times
    # Tokenizing has its own workers: the slow templates don't hold up plain requests either.
    threads = [threading.Thread(target=_slow_chat, args=(url, results)) for _ in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    tokenized, seconds = _timed(lambda: httpx.post(url + "/tokenize", json={"prompt": "hello"}, timeout=30))
    assert tokenized.status_code == 200 and seconds < HEALTH_BOUND_S
    completion = httpx.post(url + "/v1/completions", json={"prompt": "hello", "max_tokens": 2}, timeout=30)
    assert completion.status_code == 200 and any(t.is_alive() for t in threads)
    for thread in threads:
        thread.join(60)
    assert [r.status_code for r in results] == [400] * 8
    for response in results:
        error = response.json()["error"]
        assert f"longer than {TEMPLATE_TIMEOUT_S:g} s" in error["message"] and error["param"] == "messages"


def _vm_hwm_kb(pid: int) -> int:
    """Peak resident memory of a process, in kB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc status")


def test_huge_template_value_costs_the_api_process_little(attack_server) -> None:
    before = _vm_hwm_kb(attack_server.proc.pid)
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
            "chat_template": '{% set a = ["x" * 999] * 150000 %}{{ a|join }}'}
    response = httpx.post(attack_server.url + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 400 and "limit of" in response.json()["error"]["message"]
    grown_mb = (_vm_hwm_kb(attack_server.proc.pid) - before) / 1024
    assert grown_mb < 40, f"the API process's peak memory grew {grown_mb:.0f} MB"


def test_huge_prompt_refused_by_length_before_tokenizing(attack_server) -> None:
    prompt = "hello world " * 100_000  # 1.2 MB; max_model_len is 256
    response = httpx.post(attack_server.url + "/v1/completions", timeout=60,
                          content=json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": 1}),
                          headers={"content-type": "application/json"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert "characters, over the limit of 8192" in error["message"] and error["param"] == "prompt"
    tokenize = httpx.post(attack_server.url + "/tokenize", json={"model": "tiny", "prompt": prompt}, timeout=60)
    assert tokenize.status_code == 400 and "characters" in tokenize.json()["error"]["message"]
