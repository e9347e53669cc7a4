"""The OpenAI API against a real `infercore serve`: official client, raw HTTP, streaming, offline parity."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

PROMPTS = ["hello world", "the model engine", "你好，世界 emoji: 😀"]


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def offline(model_dir):
    from infercore import LLM, SamplingParams

    llm = LLM(str(model_dir), max_model_len=256, num_gpu_blocks_override=128)
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    return {o.prompt: o.outputs[0].text for o in llm.generate(PROMPTS, params, use_tqdm=False)}


def test_completions_match_offline_llm(client, offline) -> None:
    for prompt in PROMPTS:
        result = client.completions.create(model="tiny", prompt=prompt, max_tokens=12, temperature=0,
                                           extra_body={"ignore_eos": True})
        assert result.choices[0].text == offline[prompt]
        assert result.usage.completion_tokens == 12
        assert result.usage.total_tokens == result.usage.prompt_tokens + 12 and result.usage.prompt_tokens > 0


def test_streaming_equals_non_streaming(client) -> None:
    kwargs = dict(model="tiny", prompt=PROMPTS[2], max_tokens=16, temperature=0, extra_body={"ignore_eos": True})
    full = client.completions.create(**kwargs).choices[0].text
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == full
    assert chunks[-1].usage.completion_tokens == 16
    assert chunks[-1].usage.total_tokens == chunks[-1].usage.prompt_tokens + 16


def test_chat_sync_and_async_streaming_agree(server, client) -> None:
    messages = [{"role": "user", "content": "what is the weather in paris?"}]
    kwargs = dict(model="tiny", messages=messages, max_tokens=10, temperature=0)
    full = client.chat.completions.create(**kwargs)
    assert full.choices[0].message.role == "assistant"
    text = full.choices[0].message.content

    async def run() -> str:
        aclient = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        stream = await aclient.chat.completions.create(stream=True, **kwargs)
        parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
        result = await aclient.chat.completions.create(**kwargs)
        assert result.choices[0].message.content == text
        return "".join(parts)

    assert asyncio.run(run()) == text


def test_chat_matches_offline_chat(client, model_dir) -> None:
    from infercore import LLM, SamplingParams

    messages = [{"role": "user", "content": "hello"}]
    llm = LLM(str(model_dir), max_model_len=256, num_gpu_blocks_override=64)
    expected = llm.chat(messages, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), use_tqdm=False)
    result = client.chat.completions.create(model="tiny", messages=messages, max_tokens=8, temperature=0,
                                            extra_body={"ignore_eos": True})
    assert result.choices[0].message.content == expected[0].outputs[0].text


def test_n_logprobs_echo_and_token_ids(server, client) -> None:
    result = client.completions.create(model="tiny", prompt=[5, 6, 7, 8], max_tokens=4, n=3, temperature=1.0,
                                       seed=3, logprobs=2, echo=True, extra_body={"ignore_eos": True})
    assert [c.index for c in result.choices] == [0, 1, 2]
    prompt_text = httpx.post(server.url + "/detokenize", json={"tokens": [5, 6, 7, 8]}).json()["prompt"]
    for choice in result.choices:
        assert choice.text.startswith(prompt_text)
        # The 4 echoed prompt tokens (the first has no logprob), then the 4 generated ones.
        assert len(choice.logprobs.tokens) == 8 and choice.logprobs.token_logprobs[0] is None
        assert choice.logprobs.text_offset[4] == len(prompt_text)
        # Keys are token texts, so tokens that decode alike (partial UTF-8) share one entry.
        assert all(top for top in choice.logprobs.top_logprobs[1:])
        assert all(lp <= 0 for lp in choice.logprobs.token_logprobs[1:])
    chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=3,
                                          logprobs=True, top_logprobs=3, temperature=0)
    content = chat.choices[0].logprobs.content
    assert len(content) == 3 and all(len(t.top_logprobs) == 3 for t in content)


def test_stop_string_and_seed(client) -> None:
    base = dict(model="tiny", prompt="the model", max_tokens=12, temperature=0, extra_body={"ignore_eos": True})
    text = client.completions.create(**base).choices[0].text
    stop = text[4:6]
    cut = client.completions.create(stop=[stop], **base).choices[0]
    assert cut.text == text[: text.index(stop)] and cut.finish_reason == "stop"
    seeded = dict(model="tiny", prompt="the", max_tokens=8, temperature=1.0, seed=11)
    assert client.completions.create(**seeded).choices[0].text == client.completions.create(**seeded).choices[0].text


def test_tokenize_detokenize_models_version(server) -> None:
    tokens = httpx.post(server.url + "/tokenize", json={"prompt": "hello world"}).json()
    assert tokens["count"] == len(tokens["tokens"]) and tokens["max_model_len"] == 256
    text = httpx.post(server.url + "/detokenize", json={"tokens": tokens["tokens"]}).json()["prompt"]
    assert text == "hello world"
    chat = httpx.post(server.url + "/tokenize", json={"messages": [{"role": "user", "content": "hi"}]}).json()
    assert chat["count"] > 3
    models = httpx.get(server.url + "/v1/models").json()
    assert models["data"][0]["id"] == "tiny"
    assert httpx.get(server.url + "/version").json()["version"]


def test_metrics_exposes_engine_and_latency_figures(server, client) -> None:
    client.completions.create(model="tiny", prompt="hello", max_tokens=3)
    body = httpx.get(server.url + "/metrics").text
    for name in ("infercore:num_requests_running", "infercore:num_requests_waiting", "infercore:kv_cache_usage_perc",
                 "infercore:prefix_cache_queries_total", "infercore:prefix_cache_hits_total",
                 "infercore:time_to_first_token_seconds_bucket", "infercore:time_per_output_token_seconds_bucket",
                 "infercore:e2e_request_latency_seconds_bucket", "infercore:prompt_tokens_total",
                 "infercore:generation_tokens_total"):
        assert name in body, name


def test_streamed_multibyte_text_has_no_replacement_chars(server, model_dir) -> None:
    """'é' is two byte-level tokens; half of one must never reach the client as U+FFFD."""
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(str(model_dir)).encode("é")
    assert len(ids) == 2
    checked = 0
    for seed in range(12):
        body = {"model": "tiny", "prompt": "café", "max_tokens": 2, "temperature": 1.0, "seed": seed,
                "ignore_eos": True, "logit_bias": {str(i): 100 for i in ids}}
        final = httpx.post(server.url + "/v1/completions", json=body).json()["choices"][0]["text"]
        with httpx.stream("POST", server.url + "/v1/completions", json={**body, "stream": True}) as response:
            chunks = [json.loads(line[6:])["choices"][0]["text"] for line in response.iter_lines()
                      if line.startswith("data: {")]
        assert "".join(chunks) == final
        if final == "é":
            checked += 1
            assert all("\ufffd" not in c for c in chunks), chunks
    assert checked, "no seed produced the two tokens in order"


def test_constrained_decoding_through_the_api(server, client) -> None:
    choice = client.completions.create(model="tiny", prompt="pick", max_tokens=10,
                                       extra_body={"structured_outputs": {"choice": ["paris", "london"]}})
    assert choice.choices[0].text in ("paris", "london")
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    chat = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "x"}], max_tokens=40,
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}})
    if chat.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(chat.choices[0].message.content)["a"], int)
    bad = httpx.post(server.url + "/v1/completions",
                     json={"prompt": "x", "max_tokens": 4, "guided_json": {"type": "nonsense"}})
    assert bad.status_code == 400 and "schema" in bad.json()["error"]["message"]
    assert httpx.get(server.url + "/health").status_code == 200
