"""Cross-encoders and sequence classifiers (BERT, XLM-R, Qwen3) against HF: ``LLM.score`` of text pairs and
``LLM.classify`` within 1e-4 of HF's logits with the activation applied (sigmoid for one label, softmax else)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from engine_cases import ENGINE_DEFAULTS
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from infercore import LLM
from infercore.pooling.tiny_encoders import build_encoder_folder
from infercore.tiny_models import build_model_folder

QUERY = "the weather in paris"
DOCS = ["paris weather is sunny today", "def add(a, b): return a + b", "hello"]
TOLERANCE = 1e-4


def hf_pair_logits(folder: Path, lefts: list[str], rights: list[str]) -> torch.Tensor:
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForSequenceClassification.from_pretrained(str(folder), dtype=torch.float32)
    rows = []
    with torch.no_grad():
        for a, b in zip(lefts, rights, strict=True):
            inputs = tokenizer(a, b, return_tensors="pt")
            if model.config.type_vocab_size == 1:  # XLM-R has one segment; its pairs carry no segment ids
                inputs.pop("token_type_ids", None)
            rows.append(model(**inputs).logits[0])
    return torch.stack(rows)


@pytest.mark.parametrize("architecture", ["BertForSequenceClassification", "XLMRobertaForSequenceClassification"])
def test_cross_encoder_scores_match_hf(tmp_path: Path, architecture: str) -> None:
    folder = build_encoder_folder(tmp_path / "cross", architecture, None, num_labels=1)
    llm = LLM(**{**ENGINE_DEFAULTS, "model": str(folder)})
    try:
        scores = [o.outputs.score for o in llm.score(QUERY, DOCS, use_tqdm=False)]
    finally:
        llm.llm_engine.engine_core.shutdown()
    expected = torch.sigmoid(hf_pair_logits(folder, [QUERY] * len(DOCS), DOCS)[:, 0])
    assert torch.allclose(torch.tensor(scores), expected, atol=TOLERANCE), (scores, expected)


def test_bert_classifier_probs_match_hf(tmp_path: Path) -> None:
    folder = build_encoder_folder(tmp_path / "cls", "BertForSequenceClassification", None, num_labels=3)
    llm = LLM(**{**ENGINE_DEFAULTS, "model": str(folder)})
    try:
        probs = torch.tensor([o.outputs.probs for o in llm.classify(DOCS, use_tqdm=False)])
    finally:
        llm.llm_engine.engine_core.shutdown()
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForSequenceClassification.from_pretrained(str(folder), dtype=torch.float32)
    with torch.no_grad():
        expected = torch.stack([model(**tokenizer(d, return_tensors="pt")).logits[0].softmax(-1) for d in DOCS])
    assert torch.allclose(probs, expected, atol=TOLERANCE)


def test_qwen3_sequence_classifier_matches_hf(tmp_path: Path) -> None:
    folder = build_model_folder(tmp_path / "qwen3cls", "Qwen3ForCausalLM")
    hf_cfg = AutoModelForSequenceClassification.from_pretrained(str(folder), num_labels=2, dtype=torch.float32)
    hf_cfg.config.architectures = ["Qwen3ForSequenceClassification"]
    torch.manual_seed(0)
    with torch.no_grad():
        hf_cfg.score.weight.normal_(0.0, 0.1)
    hf_cfg.save_pretrained(str(folder))
    llm = LLM(**{**ENGINE_DEFAULTS, "model": str(folder), "max_num_batched_tokens": 16})
    try:
        probs = torch.tensor([o.outputs.probs for o in llm.classify(DOCS, use_tqdm=False)])
    finally:
        llm.llm_engine.engine_core.shutdown()
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    with torch.no_grad():
        expected = torch.stack([hf_cfg(**tokenizer(d, return_tensors="pt")).logits[0].softmax(-1) for d in DOCS])
    assert torch.allclose(probs, expected, atol=TOLERANCE)
