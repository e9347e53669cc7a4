"""A causal-LM checkpoint served as a Qwen3-Reranker-style scorer through ``hf_overrides``: the score is the
sigmoid of the "yes" logit minus the "no" logit at the last token, within 1e-4 of HF's causal LM, whether the
LM head is tied to the embedding or not; bad overrides are refused with a message that says what to pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from engine_cases import ENGINE_DEFAULTS
from transformers import AutoModelForCausalLM, AutoTokenizer

from infercore import LLM
from infercore.config import ModelConfig
from infercore.models.hf_config import get_hf_config
from infercore.tiny_models import build_model_folder

DOCS = ["paris weather is sunny today", "def add(a, b): return a + b", "hello"]


def _label_tokens(folder: Path) -> list[str]:
    vocab = AutoTokenizer.from_pretrained(str(folder)).get_vocab()
    return sorted(t for t in vocab if t.isalpha())[:2]  # stand-ins for "no" and "yes"


@pytest.mark.parametrize("tied", [True, False])
def test_reranker_scores_are_sigmoid_of_yes_minus_no_logits(tmp_path: Path, tied: bool) -> None:
    folder = build_model_folder(tmp_path / "rerank", "Qwen3ForCausalLM", tie_word_embeddings=tied)
    no, yes = _label_tokens(folder)
    overrides = {"architectures": ["Qwen3ForSequenceClassification"], "classifier_from_token": [no, yes],
                 "is_original_qwen3_reranker": True}
    llm = LLM(**{**ENGINE_DEFAULTS, "model": str(folder), "hf_overrides": json.dumps(overrides)})
    try:
        probs = torch.tensor([o.outputs.probs for o in llm.classify(DOCS, use_tqdm=False)])
    finally:
        llm.llm_engine.engine_core.shutdown()
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    ids = tokenizer.convert_tokens_to_ids([no, yes])
    with torch.no_grad():
        logits = torch.stack([model(**tokenizer(d, return_tensors="pt")).logits[0, -1] for d in DOCS])
    expected = torch.sigmoid(logits[:, ids[1]] - logits[:, ids[0]])
    assert probs.shape == (len(DOCS), 1)
    assert torch.allclose(probs[:, 0], expected, atol=1e-4), (probs, expected)


def test_token_classifier_overrides_set_labels_and_refuse_unknown_tokens(tmp_path: Path) -> None:
    folder = build_model_folder(tmp_path / "m", "Qwen3ForCausalLM")
    tokens = _label_tokens(folder)
    config = get_hf_config(ModelConfig(model=str(folder), hf_overrides={"classifier_from_token": tokens}))
    assert config.num_labels == 2 and len(config.classifier_from_token_ids) == 2
    with pytest.raises(ValueError, match="vocabulary lacks"):
        get_hf_config(ModelConfig(model=str(folder), hf_overrides={"classifier_from_token": ["no-such-token-xyz"]}))
    with pytest.raises(ValueError, match="two tokens"):
        get_hf_config(ModelConfig(model=str(folder), hf_overrides={
            "classifier_from_token": tokens[:1], "is_original_qwen3_reranker": True}))
    with pytest.raises(ValueError, match="not valid JSON"):
        get_hf_config(ModelConfig(model=str(folder), hf_overrides="{architectures"))
