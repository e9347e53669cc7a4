"""Finds a model's folder (local, or downloaded from the Hugging Face hub) and reads its config."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infercore.config import ModelConfig
from infercore.models.config_import import refused_registry, without_model_registry

if TYPE_CHECKING:  # transformers' config code imports torch: it loads when a config is read
    from transformers import PretrainedConfig

#: Files a model needs from the hub: its config, weights and tokenizer.
HUB_PATTERNS = ["*.json", "*.safetensors", "*.bin", "*.model", "*.txt", "*.tiktoken", "*.py"]


def resolve_model_path(model_config: ModelConfig, download_dir: str | None = None) -> Path:
    """A local folder as is; otherwise a hub repo id, downloaded (or found in the cache)."""
    local = Path(model_config.model).expanduser()
    if local.is_dir():
        return local
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(model_config.model, revision=model_config.revision,
                                      cache_dir=download_dir, allow_patterns=HUB_PATTERNS))
    except Exception as exc:
        raise ValueError(f"model {model_config.model!r} is neither a local folder nor a model that could be "
                         f"downloaded from the Hugging Face hub ({exc}); pass a folder holding config.json "
                         "and the weights, or a valid hub repo id") from exc


def config_architecture(model_config: ModelConfig, download_dir: str | None = None) -> str | None:
    """The first of ``architectures`` in ``hf_overrides`` or the model's config.json, read as JSON: what the front
    end needs to know of a text model, without transformers' config code (which imports torch). None where
    neither names one."""
    try:
        architectures = hf_overrides(model_config).get("architectures")
        if architectures is None:
            path = resolve_model_path(model_config, download_dir)
            architectures = json.loads((path / "config.json").read_text(encoding="utf-8")).get("architectures")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(architectures, list) and architectures and isinstance(architectures[0], str):
        return architectures[0]
    return None


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
    from transformers import AutoConfig

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


def hf_overrides(model_config: ModelConfig) -> dict[str, Any]:
    """``hf_overrides`` as a dict (given as one, or as a JSON object string)."""
    raw = model_config.hf_overrides
    if raw is None or isinstance(raw, dict):
        return dict(raw or {})
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"hf_overrides is not valid JSON ({exc}); pass an object such as "
                         '\'{"architectures": ["Qwen3ForSequenceClassification"]}\'') from None
    if not isinstance(parsed, dict):
        raise ValueError(f"hf_overrides must be a JSON object of config keys and values, got {raw!r}")
    return parsed


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
