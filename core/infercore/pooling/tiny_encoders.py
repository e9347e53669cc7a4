"""Tiny encoder model folders (BERT, XLM-RoBERTa; embedders and cross-encoders) with random weights, a
WordPiece tokenizer and, for embedders, the sentence-transformers files that say how to pool.

The counterpart of :mod:`infercore.tiny_models` for pooling models: tests and benchmarks build their
own models, as no weights can be downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from infercore.tiny_models import training_corpus

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
_POOLING_MODES = {"MEAN": "pooling_mode_mean_tokens", "CLS": "pooling_mode_cls_token",
                  "LAST": "pooling_mode_lasttoken"}


def build_wordpiece_tokenizer(path: str | Path, vocab_size: int = 512, seed: int = 0) -> Path:
    """A BERT-style tokenizer folder: WordPiece, lower-casing, ``[CLS] a [SEP]`` and ``[CLS] a [SEP] b [SEP]``
    with token types 0 and 1."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIAL, show_progress=False)
    tok.train_from_iterator(training_corpus(seed), trainer=trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=512,
                                   model_input_names=["input_ids", "token_type_ids", "attention_mask"])
    fast.save_pretrained(str(path))
    return path


def _write_sentence_transformers(path: Path, hidden_size: int, pooling: str, normalize: bool) -> None:
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
        (path / "2_Normalize").mkdir(exist_ok=True)
    (path / "modules.json").write_text(json.dumps(modules, indent=2))
    (path / "1_Pooling").mkdir(exist_ok=True)
    pooling_config = {"word_embedding_dimension": hidden_size, **{mode: False for mode in _POOLING_MODES.values()}}
    pooling_config[_POOLING_MODES[pooling]] = True
    (path / "1_Pooling" / "config.json").write_text(json.dumps(pooling_config, indent=2))
    (path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 512, "do_lower_case": False}))


def encoder_config(architecture: str, vocab_size: int, **overrides: Any) -> Any:
    """A tiny BERT or XLM-R config (2 layers, 4 heads of 16) for ``architecture``."""
    from transformers import AutoConfig

    model_type = "xlm-roberta" if "Roberta" in architecture else "bert"
    params: dict[str, Any] = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                  num_attention_heads=4, max_position_embeddings=512 + (2 if model_type != "bert" else 0),
                                  type_vocab_size=2 if model_type == "bert" else 1, architectures=[architecture])
    params.update(overrides)
    return AutoConfig.for_model(model_type, **params)


def build_encoder_folder(path: str | Path, architecture: str = "BertModel", pooling: str | None = "MEAN",
                         normalize: bool = True, seed: int = 0, **config_overrides: Any) -> Path:
    """Write a random-weight encoder folder: ``BertModel`` / ``XLMRobertaModel`` embedders with
    sentence-transformers files (``pooling`` None: none), or ``*ForSequenceClassification`` cross-encoders."""
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

    path = Path(path)
    build_wordpiece_tokenizer(path, seed=seed)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    config = encoder_config(architecture, len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                            sep_token_id=tokenizer.sep_token_id, **config_overrides)
    torch.manual_seed(seed)
    classifier = architecture.endswith("ForSequenceClassification")
    model = (AutoModelForSequenceClassification if classifier else AutoModel).from_config(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.1)
            elif "LayerNorm" not in name:
                p.normal_(0.0, 0.05)
    model.save_pretrained(str(path), safe_serialization=True)
    if pooling is not None and not classifier:
        _write_sentence_transformers(path, config.hidden_size, pooling, normalize)
    return path
