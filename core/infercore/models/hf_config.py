"""Finds a model's folder (local, or downloaded from the Hugging Face hub) and reads its config."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoConfig, PretrainedConfig

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


def get_hf_config(model_config: ModelConfig, download_dir: str | None = None) -> PretrainedConfig:
    """The transformers config of the model; remote code runs only with ``trust_remote_code``."""
    path = resolve_model_path(model_config, download_dir)
    if not (path / "config.json").is_file():
        raise ValueError(f"model folder {path} has no config.json; point --model at a Hugging Face model folder")
    return AutoConfig.from_pretrained(str(path), trust_remote_code=model_config.trust_remote_code)
