"""One request can't fan out into more sequences (prompts x n) than ``--max-sequences-per-request``."""

from __future__ import annotations

import httpx
from server_attack.conftest import MAX_SEQUENCES


def test_completion_fan_out_over_the_limit_is_a_400(attack_server) -> None:
    body = {"model": "tiny", "prompt": ["a"] * 256, "n": 128, "max_tokens": 1}
    response = httpx.post(attack_server.url + "/v1/completions", json=body, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert "32768 sequences" in error["message"] and f"limit of {MAX_SEQUENCES}" in error["message"]
    assert "--max-sequences-per-request" in error["message"]


def test_chat_n_over_the_limit_is_a_400(attack_server) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "n": MAX_SEQUENCES + 1,
            "max_tokens": 1}
    response = httpx.post(attack_server.url + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 400 and response.json()["error"]["param"] == "n"


def test_fan_out_at_the_limit_is_served(attack_server) -> None:
    body = {"model": "tiny", "prompt": ["a", "b"], "n": MAX_SEQUENCES // 2, "max_tokens": 1, "ignore_eos": True}
    response = httpx.post(attack_server.url + "/v1/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert len(response.json()["choices"]) == MAX_SEQUENCES
