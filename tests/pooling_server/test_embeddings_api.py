"""`/v1/embeddings` through the openai SDK (float and base64), `/pooling`, `/score`, `/rerank` and `/classify`
against their documented shapes, and the 400s for requests a model cannot serve."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import openai
import pytest
import torch
import torch.nn.functional as F

TEXTS = ["hello world", "the weather in paris", "def add(a, b): return a + b"]


def _client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none")


def test_openai_sdk_embeddings_float_and_base64(pooling_servers) -> None:
    client = _client(pooling_servers["embedder"])
    floats = client.embeddings.create(model="tiny", input=TEXTS, encoding_format="float")
    assert [d.index for d in floats.data] == [0, 1, 2]
    assert all(len(d.embedding) == 64 and abs(np.linalg.norm(d.embedding) - 1) < 1e-4 for d in floats.data)
    assert floats.usage.prompt_tokens == floats.usage.total_tokens > 0
    # Without encoding_format the SDK asks for base64 and decodes it; asked for explicitly, it is left as is.
    decoded = client.embeddings.create(model="tiny", input=TEXTS)
    b64 = client.embeddings.create(model="tiny", input=TEXTS, encoding_format="base64")
    for a, b, c in zip(floats.data, decoded.data, b64.data, strict=True):
        assert np.allclose(a.embedding, b.embedding, atol=1e-6)
        assert np.allclose(a.embedding, np.frombuffer(base64.b64decode(c.embedding), dtype="<f4"), atol=1e-6)
    one = client.embeddings.create(model="tiny", input=[101, 7, 8, 102])
    assert len(one.data) == 1


def test_embeddings_bad_requests_say_why(pooling_servers) -> None:
    url = pooling_servers["embedder"].url
    cases = [({"input": []}, "empty list"),
             ({"input": "x " * 600}, "max_model_len"),
             ({"input": "hello", "dimensions": 8}, "Matryoshka")]
    for body, reason in cases:
        r = httpx.post(url + "/v1/embeddings", json={"model": "tiny", **body}, timeout=30)
        assert r.status_code == 400 and reason in r.json()["error"]["message"], (body, r.text)
    truncated = httpx.post(url + "/v1/embeddings", json={"input": "x " * 600, "truncate_prompt_tokens": 16}, timeout=30)
    assert truncated.status_code == 200 and truncated.json()["usage"]["prompt_tokens"] == 16
    r = httpx.post(url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}, timeout=30)
    assert r.status_code == 400 and "serves embeddings" in r.json()["error"]["message"], r.text


def test_pooling_and_score_of_an_embedder(pooling_servers) -> None:
    url = pooling_servers["embedder"].url
    pooled = httpx.post(url + "/pooling", json={"input": TEXTS[:2]}, timeout=30).json()
    assert pooled["object"] == "list" and [d["object"] for d in pooled["data"]] == ["pooling", "pooling"]
    emb = httpx.post(url + "/v1/embeddings", json={"input": TEXTS}, timeout=30).json()
    vectors = [torch.tensor(d["embedding"]) for d in emb["data"]]
    score = httpx.post(url + "/score", json={"text_1": TEXTS[0], "text_2": TEXTS[1:]}, timeout=30).json()
    assert [d["object"] for d in score["data"]] == ["score", "score"]
    for d, other in zip(score["data"], vectors[1:], strict=True):
        assert abs(d["score"] - float(F.cosine_similarity(vectors[0], other, dim=0))) < 1e-4


@pytest.mark.parametrize("path", ["/rerank", "/v1/rerank", "/v2/rerank"])
def test_rerank_shape(pooling_servers, path: str) -> None:
    url = pooling_servers["cross"].url
    r = httpx.post(url + path, json={"query": "weather", "documents": TEXTS, "top_n": 2}, timeout=30)
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["results"]) == 2 and body["usage"]["total_tokens"] > 0
    scores = [x["relevance_score"] for x in body["results"]]
    assert scores == sorted(scores, reverse=True)
    assert all(x["document"]["text"] == TEXTS[x["index"]] for x in body["results"])


def test_cross_encoder_score_and_classify(pooling_servers) -> None:
    url = pooling_servers["cross"].url
    score = httpx.post(url + "/v1/score", json={"text_1": "weather", "text_2": TEXTS}, timeout=30).json()
    assert len(score["data"]) == 3 and all(0 <= d["score"] <= 1 for d in score["data"])
    cls = httpx.post(url + "/classify", json={"input": TEXTS[:2]}, timeout=30).json()
    assert [d["num_classes"] for d in cls["data"]] == [1, 1]
    r = httpx.post(url + "/v1/embeddings", json={"input": "hello"}, timeout=30)
    assert r.status_code == 400 and "not embeddings" in r.json()["error"]["message"]


def test_generating_model_refuses_pooling_routes(pooling_servers) -> None:
    url = pooling_servers["generator"].url
    for path, body in (("/v1/embeddings", {"input": "hi"}), ("/score", {"text_1": "a", "text_2": "b"}),
                       ("/rerank", {"query": "a", "documents": ["b"]})):
        r = httpx.post(url + path, json=body, timeout=30)
        assert r.status_code == 400 and "text generation" in r.json()["error"]["message"], (path, r.text)
