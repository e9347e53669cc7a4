"""Finds a model's folder (local, or downloaded from the Hugging Face hub) and reads its config."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from transformers import AutoConfig, PretrainedConfig

from infercore.config import ModelConfig
from infercore.models.config_import import refused_registry, without_model_registry
from infercore.models.model_folder import (  # noqa: F401 - resolve_model_path, as it was here
    hf_overrides,
    resolve_model_path,
)


def get_hf_config(model_config: ModelConfig, download_dir: str | None = None) -> PretrainedConfig:
    """The transformers config of the model; remote code runs only with ``trust_remote_code``."""
    path = resolve_model_path(model_config, download_dir)
    if not (path / "config.json").is_file():
        raise ValueError(f"model folder {path} has no config.json; point --model at a Hugging Face model folder")
    config = _read_config(path, model_config.trust_remote_code)
    overrides = hf_overrides(model_config)
    if overrides:
        config.update(overrides)
        tokens = overrides.get("classifier_from_token")
        if tokens is not None:
            apply_classifier_tokens(config, tokens, model_config.tokenizer or str(path))
    return config


def _read_config(path: Path, trust_remote_code: bool) -> PretrainedConfig:
    """``AutoConfig.from_pretrained``, without importing transformers' model registry where the config's
    code is transformers' own (see :mod:`infercore.models.config_import`: seconds of start-up on some
    transformers releases); a release whose config code needs the registry reads it again with it."""
    if not (trust_remote_code and _has_remote_code(path)):
        try:
            with without_model_registry():
                return AutoConfig.from_pretrained(str(path), trust_remote_code=trust_remote_code)
        except Exception as exc:
            if not refused_registry(exc):
                raise
    return AutoConfig.from_pretrained(str(path), trust_remote_code=trust_remote_code)


def _has_remote_code(path: Path) -> bool:
    """Whether the folder's config.json names classes of its own code (``auto_map``)."""
    try:
        raw = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(raw, dict) and "auto_map" in raw


def apply_classifier_tokens(config: PretrainedConfig, tokens: list[str], tokenizer: str) -> None:
    """A classifier whose labels are vocabulary tokens (``classifier_from_token``): their ids go on the config as
    ``classifier_from_token_ids``, and ``num_labels`` is their count, or 1 for a Qwen3-Reranker
    (``is_original_qwen3_reranker``: the score is sigmoid of the "yes" logit minus the "no" logit)."""
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
        raise ValueError(f"classifier_from_token must be a non-empty list of vocabulary tokens, got {tokens!r}")
    if getattr(config, "is_original_qwen3_reranker", False) and len(tokens) != 2:
        raise ValueError("is_original_qwen3_reranker needs classifier_from_token to name two tokens, the "
                         f'negative then the positive (["no", "yes"]), got {tokens!r}')
    config.classifier_from_token_ids = list(_token_ids(tokenizer, tuple(tokens)))
    config.num_labels = 1 if getattr(config, "is_original_qwen3_reranker", False) else len(tokens)


@functools.lru_cache(maxsize=8)
def _token_ids(tokenizer: str, tokens: tuple[str, ...]) -> tuple[int, ...]:
    from transformers import AutoTokenizer

    vocab = AutoTokenizer.from_pretrained(tokenizer).get_vocab()
    unknown = [t for t in tokens if t not in vocab]
    if unknown:
        raise ValueError(f"classifier_from_token names {unknown}, which the tokenizer's vocabulary lacks; name "
                         "tokens exactly as the vocabulary spells them")
    return tuple(vocab[t] for t in tokens)
