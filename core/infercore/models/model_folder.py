"""A model's folder (local, or downloaded from the Hugging Face hub) and what its files say without transformers'
config code, which imports torch: the API server reads a model through this module alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from infercore.config import ModelConfig

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
