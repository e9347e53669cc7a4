"""Decoder models as embedders (Qwen3-Embedding style, LAST pooling): ``LLM.embed`` against HF's hidden states
with the pooling done by hand, through chunked prefill and prefix-cache hits."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from engine_cases import ENGINE_DEFAULTS
from transformers import AutoModel

from infercore import LLM
from infercore.pooling_params import PoolingParams, PoolingParamsError

PROMPTS = [
    "hello",
    "The engine cache block request server stream json tool call weather city paris london",
    "def add(a, b):\n    return a + b",
    " ".join(["the model of the token"] * 10),
]
COSINE = 0.9999


def hf_last_normalized(folder: Path, prompt_ids: list[list[int]]) -> list[torch.Tensor]:
    """HF's final hidden state of each prompt's last token, L2-normalized (Qwen3-Embedding's pooling)."""
    hf = AutoModel.from_pretrained(str(folder), dtype=torch.float32)
    out = []
    with torch.no_grad():
        for ids in prompt_ids:
            hidden = hf(torch.tensor([ids])).last_hidden_state[0]
            out.append(F.normalize(hidden[-1], dim=-1))
    return out


def assert_close(ours: list[list[float]], refs: list[torch.Tensor]) -> None:
    for vec, ref in zip(ours, refs, strict=True):
        cos = F.cosine_similarity(torch.tensor(vec), ref, dim=0)
        assert cos > COSINE, f"cosine {cos} to HF"
        assert abs(torch.tensor(vec).norm() - 1) < 1e-4


@pytest.mark.parametrize("architecture", ["Qwen3ForCausalLM", "Qwen2ForCausalLM"])
def test_embed_last_pooling_matches_hf_chunked_and_cached(tiny_model_factory, architecture: str) -> None:
    folder = tiny_model_factory(architecture)
    llm = LLM(**{**ENGINE_DEFAULTS, "model": str(folder), "runner": "pooling", "max_num_batched_tokens": 16})
    try:
        chunked = llm.embed(PROMPTS, use_tqdm=False)
        cached = llm.embed(PROMPTS, use_tqdm=False)
    finally:
        llm.llm_engine.engine_core.shutdown()
    assert max(len(o.prompt_token_ids) for o in chunked) > 32, "a prompt should span several chunks"
    assert sum(o.num_cached_tokens for o in cached) >= 32, "the second run should hit the prefix cache"
    refs = hf_last_normalized(folder, [o.prompt_token_ids for o in chunked])
    assert_close([o.outputs.embedding for o in chunked], refs)
    assert_close([o.outputs.embedding for o in cached], refs)
    for a, b in zip(chunked, cached, strict=True):
        assert torch.allclose(torch.tensor(a.outputs.embedding), torch.tensor(b.outputs.embedding), atol=1e-5)


def test_score_is_cosine_of_embeddings_and_kinds_are_refused(tiny_model_factory) -> None:
    folder = tiny_model_factory("Qwen3ForCausalLM")
    llm = LLM(**{**ENGINE_DEFAULTS, "model": str(folder), "runner": "pooling"})
    try:
        vectors = [torch.tensor(o.outputs.embedding) for o in llm.embed(PROMPTS[:3], use_tqdm=False)]
        scores = llm.score(PROMPTS[0], PROMPTS[1:3], use_tqdm=False)
        for score, other in zip(scores, vectors[1:], strict=True):
            assert abs(score.outputs.score - float(F.cosine_similarity(vectors[0], other, dim=0))) < 1e-5
        raw = llm.embed(PROMPTS[:1], PoolingParams(normalize=False), use_tqdm=False)[0].outputs.embedding
        assert abs(torch.tensor(raw).norm() - 1) > 1e-3
        with pytest.raises(PoolingParamsError, match="Matryoshka"):
            llm.embed(PROMPTS[:1], PoolingParams(dimensions=8), use_tqdm=False)
        with pytest.raises(PoolingParamsError, match="not classification"):
            llm.classify(PROMPTS[:1], use_tqdm=False)
        with pytest.raises(ValueError, match="not text generation"):
            llm.generate(PROMPTS[:1], use_tqdm=False)
    finally:
        llm.llm_engine.engine_core.shutdown()


def test_generating_model_refuses_embed(tiny_model_factory) -> None:
    llm = LLM(**{**ENGINE_DEFAULTS, "model": str(tiny_model_factory("Qwen3ForCausalLM"))})
    try:
        with pytest.raises(PoolingParamsError, match="serves text generation"):
            llm.embed(PROMPTS[:1], use_tqdm=False)
    finally:
        llm.llm_engine.engine_core.shutdown()


@pytest.mark.parametrize("pooling_type", ["MEAN", "CLS", "ALL"])
def test_chunked_pooling_of_every_token_matches_hf(tiny_model_factory, pooling_type: str) -> None:
    """Methods that read every position keep each chunk's hidden states until the prompt is whole."""
    folder = tiny_model_factory("Qwen3ForCausalLM")
    llm = LLM(**{**ENGINE_DEFAULTS, "model": str(folder), "runner": "pooling", "max_num_batched_tokens": 16,
                 "pooler_config": {"pooling_type": pooling_type, "normalize": False}})
    try:
        assert llm.config.cache.enable_prefix_caching is False
        outs = llm.encode(PROMPTS, pooling_task="embed" if pooling_type != "ALL" else "encode", use_tqdm=False)
    finally:
        llm.llm_engine.engine_core.shutdown()
    hf = AutoModel.from_pretrained(str(folder), dtype=torch.float32)
    for out in outs:
        with torch.no_grad():
            hidden = hf(torch.tensor([out.prompt_token_ids])).last_hidden_state[0]
        ref = {"MEAN": hidden.mean(0), "CLS": hidden[0], "ALL": hidden}[pooling_type]
        assert out.outputs.data.shape == ref.shape
        assert torch.allclose(out.outputs.data, ref, atol=1e-4)
