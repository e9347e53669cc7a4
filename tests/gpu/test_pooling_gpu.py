"""Pooling on a GPU (Triton attention): encoder embeddings against sentence-transformers, a cross-encoder's
scores against HF, a decoder embedder through graphs, and the encoder kernel at BERT-large's shape."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from gpu_marks import requires_gpu

pytestmark = requires_gpu

TEXTS = ["hello world", "the weather in paris is sunny", "def add(a, b): return a + b " * 8, "a"]


def test_bert_embeddings_match_sentence_transformers(tmp_path) -> None:
    sentence_transformers = pytest.importorskip("sentence_transformers")
    from infercore import LLM
    from infercore.pooling.tiny_encoders import build_encoder_folder

    folder = build_encoder_folder(tmp_path / "bert", "BertModel", "MEAN")
    llm = LLM(model=str(folder), dtype="float32", gpu_memory_utilization=0.3)
    try:
        ours = [torch.tensor(o.outputs.embedding) for o in llm.embed(TEXTS, use_tqdm=False)]
    finally:
        llm.llm_engine.engine_core.shutdown()
    refs = sentence_transformers.SentenceTransformer(str(folder), device="cuda").encode(TEXTS, convert_to_tensor=True)
    for vec, ref in zip(ours, refs, strict=True):
        assert F.cosine_similarity(vec, ref.float().cpu(), dim=0) > 0.9999


def test_qwen3_embedder_through_graphs_matches_eager(tiny_model_factory) -> None:
    from infercore import LLM

    folder = tiny_model_factory("Qwen3ForCausalLM")
    results = []
    for eager in (False, True):
        llm = LLM(model=str(folder), dtype="float32", runner="pooling", max_model_len=256,
                  gpu_memory_utilization=0.3, enforce_eager=eager)
        try:
            results.append([torch.tensor(o.outputs.embedding) for o in llm.embed(TEXTS, use_tqdm=False)])
        finally:
            llm.llm_engine.engine_core.shutdown()
    for a, b in zip(*results, strict=True):
        assert F.cosine_similarity(a, b, dim=0) > 0.9999


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_encoder_kernel_at_bert_large_shape(dtype: torch.dtype) -> None:
    from infercore.attention.encoder_only import encoder_only_attention
    from infercore_triton.encoder_attention import encoder_attention

    lengths = [512, 33, 200, 1, 128]
    total, heads, head = sum(lengths), 16, 64
    q, k, v = (torch.randn(total, heads, head, device="cuda", dtype=dtype) for _ in range(3))
    starts = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    expected = encoder_only_attention(q.float(), k.float(), v.float(), starts, len(lengths), head**-0.5,
                                      torch.zeros(total, heads, head, device="cuda"))
    out = torch.empty_like(q)
    encoder_attention(q, k, v, starts.cuda(), len(lengths), max(lengths), head**-0.5, out)
    assert float((out.float() - expected).abs().max()) / float(expected.abs().max()) < 2e-2
