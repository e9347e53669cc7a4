"""`infercore serve --speculative-config`: the official OpenAI client streams the same greedy tokens as a
server without speculation, and `/metrics` reports drafts with vLLM's speculative-decoding counters."""

from __future__ import annotations

import json

import httpx
import openai

PROMPTS = ["hello", " ".join(["the model of the token"] * 6), "def add(a, b):\n    return a + b"]
NGRAM = {"method": "ngram", "num_speculative_tokens": 3}


def _streamed_tokens(url: str, prompt: str) -> tuple[list[str], str]:
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    stream = client.completions.create(model="tiny", prompt=prompt, max_tokens=40, temperature=0, logprobs=1,
                                       stream=True, extra_body={"ignore_eos": True})
    tokens: list[str] = []
    text = ""
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].text
            tokens.extend(chunk.choices[0].logprobs.tokens if chunk.choices[0].logprobs else [])
    return tokens, text


def test_streaming_with_and_without_speculation_agree(server, start_server) -> None:
    speculative = start_server("--speculative-config", json.dumps(NGRAM), "--max-request-body-bytes", "65536")
    for prompt in PROMPTS:
        plain_tokens, plain_text = _streamed_tokens(server.url, prompt)
        spec_tokens, spec_text = _streamed_tokens(speculative.url, prompt)
        assert len(plain_tokens) == 40
        assert spec_tokens == plain_tokens and spec_text == plain_text, prompt
    metrics = httpx.get(speculative.url + "/metrics").text
    values = {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
              if line.startswith("infercore:spec_decode") and "position=" not in line}
    assert values["infercore:spec_decode_num_draft_tokens_total"] > 0, metrics
    assert 0 < values["infercore:spec_decode_num_accepted_tokens_total"] <= values[
        "infercore:spec_decode_num_draft_tokens_total"]
    assert 'infercore:spec_decode_num_accepted_tokens_per_pos_total{model_name="tiny",position="0"}' in metrics
