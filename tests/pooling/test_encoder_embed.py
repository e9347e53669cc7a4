"""Encoder embedders (BERT, XLM-RoBERTa) with MEAN and CLS pooling against sentence-transformers, on the
reference and CPU attention backends; the pooling defaults come from the sentence-transformers files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from engine_cases import ENGINE_DEFAULTS

from infercore import LLM
from infercore.pooling.tiny_encoders import build_encoder_folder

sentence_transformers = pytest.importorskip("sentence_transformers")

PROMPTS = [
    "hello",
    "The engine cache block request server stream json tool call weather city paris london",
    "def add(a, b): return a + b",
    " ".join(["the model of the token"] * 20),
]
COSINE = 0.9999


@pytest.fixture(scope="module")
def encoder_folder(tmp_path_factory: pytest.TempPathFactory):
    built: dict[tuple, Path] = {}

    def make(architecture: str, pooling: str) -> Path:
        key = (architecture, pooling)
        if key not in built:
            built[key] = build_encoder_folder(tmp_path_factory.mktemp(architecture), architecture, pooling)
        return built[key]

    return make


@pytest.mark.parametrize(("architecture", "pooling"), [("BertModel", "MEAN"), ("BertModel", "CLS"),
                                                       ("XLMRobertaModel", "MEAN")])
@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_embed_matches_sentence_transformers(encoder_folder, architecture: str, pooling: str, backend: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    folder = encoder_folder(architecture, pooling)
    if backend == "reference":
        monkeypatch.setattr("infercore_cpu.platform.CpuPlatform.select_attention_backend",
                            lambda self, request: "reference")
    llm = LLM(**{**ENGINE_DEFAULTS, "model": str(folder), "max_num_batched_tokens": 512})
    try:
        ours = llm.embed(PROMPTS, use_tqdm=False)
    finally:
        llm.llm_engine.engine_core.shutdown()
    st = sentence_transformers.SentenceTransformer(str(folder), device="cpu")
    refs = st.encode(PROMPTS, convert_to_tensor=True)
    for out, ref in zip(ours, refs, strict=True):
        vec = torch.tensor(out.outputs.embedding)
        assert F.cosine_similarity(vec, ref.float(), dim=0) > COSINE
        assert abs(vec.norm() - 1) < 1e-4
    assert [len(o.prompt_token_ids) for o in ours] == [len(st.tokenizer(p)["input_ids"]) for p in PROMPTS]


def test_long_prompt_within_max_model_len_and_score(encoder_folder) -> None:
    folder = encoder_folder("BertModel", "MEAN")
    llm = LLM(**{**ENGINE_DEFAULTS, "model": str(folder), "max_model_len": 64})
    try:
        assert llm.config.scheduler.enable_chunked_prefill is False
        assert llm.config.cache.enable_prefix_caching is False
        ids = [2] + [7] * 62 + [3]  # exactly max_model_len tokens: a pooling prompt may fill it
        assert len(llm.embed({"prompt_token_ids": ids}, use_tqdm=False)[0].outputs.embedding) == 64
        with pytest.raises(ValueError, match="max_model_len is 64"):
            llm.embed({"prompt_token_ids": ids + [7]}, use_tqdm=False)
        vectors = [torch.tensor(o.outputs.embedding) for o in llm.embed(PROMPTS[:3], use_tqdm=False)]
        scores = llm.score(PROMPTS[0], PROMPTS[1:3], use_tqdm=False)
        for score, other in zip(scores, vectors[1:], strict=True):
            assert abs(score.outputs.score - float(F.cosine_similarity(vectors[0], other, dim=0))) < 1e-5
    finally:
        llm.llm_engine.engine_core.shutdown()
