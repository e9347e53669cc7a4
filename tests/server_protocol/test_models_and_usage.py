"""GET /v1/models/{id} (the client's ``models.retrieve``), usage on every streamed chunk with
``continuous_usage_stats``, and ``prompt_tokens_details.cached_tokens`` from the prefix cache."""

from __future__ import annotations

import openai
import pytest

#: Long enough to fill several KV blocks, so a repeat of it hits the prefix cache.
LONG_PROMPT = list(range(100, 180))
STREAM_USAGE = {"include_usage": True, "continuous_usage_stats": True}


def test_models_retrieve(client, protocol_model) -> None:
    model = client.models.retrieve("tiny")
    assert model.id == "tiny" and model.object == "model"
    assert client.models.retrieve(str(protocol_model)).id == "tiny"
    with pytest.raises(openai.NotFoundError) as raised:
        client.models.retrieve("no-such-model")
    error = raised.value.body
    assert error["type"] == "NotFoundError" and error["param"] == "model" and "no-such-model" in error["message"]


def test_completion_stream_has_usage_on_every_chunk(client) -> None:
    # 32 tokens: a loaded machine may coalesce a few tokens into one chunk, never all of them.
    chunks = list(client.completions.create(model="tiny", prompt=[5, 6, 7], max_tokens=32, stream=True,
                                            stream_options=STREAM_USAGE, extra_body={"ignore_eos": True}))
    text_chunks = [c for c in chunks if c.choices]
    assert len(text_chunks) >= 2 and all(c.usage is not None for c in chunks)
    counts = [c.usage.completion_tokens for c in text_chunks]
    assert counts == sorted(counts) and counts[-1] == 32 and all(c.usage.prompt_tokens == 3 for c in chunks)
    assert chunks[-1].usage.total_tokens == 35 and not chunks[-1].choices


def test_chat_stream_has_usage_on_every_chunk(client) -> None:
    chunks = list(client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                                 max_tokens=4, stream=True, stream_options=STREAM_USAGE,
                                                 extra_body={"ignore_eos": True}))
    assert all(c.usage is not None for c in chunks)
    assert chunks[-1].usage.completion_tokens == 4 and not chunks[-1].choices
    without = list(client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                                  max_tokens=4, stream=True, stream_options={"include_usage": True}))
    assert [c.usage is not None for c in without] == [False] * (len(without) - 1) + [True]


def test_cached_tokens_count_prefix_cache_hits(client) -> None:
    kwargs = dict(model="tiny", prompt=LONG_PROMPT, max_tokens=2, extra_body={"cache_salt": "usage-test"})
    first = client.completions.create(**kwargs)
    second = client.completions.create(**kwargs)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert 0 < cached < len(LONG_PROMPT)
    stream = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs))
    assert stream[-1].usage.prompt_tokens_details.cached_tokens == cached
    messages = [{"role": "user", "content": " ".join(["word"] * 60)}]
    client.chat.completions.create(model="tiny", messages=messages, max_tokens=2)
    chat = client.chat.completions.create(model="tiny", messages=messages, max_tokens=2)
    assert chat.usage.prompt_tokens_details.cached_tokens > 0
