"""Resolving the served model's limits and stop ids from its HF config, without loading weights."""

from __future__ import annotations

from infercore.config import InfercoreConfig
from infercore.wire.model_info import ModelInfo


def _eos_ids(value: object) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]  # type: ignore[union-attr]


def _generation_config(config: InfercoreConfig) -> object | None:
    """The model's generation_config.json (its stop ids), if it has one."""
    from transformers import GenerationConfig

    from infercore.models.loader import resolve_model_path

    try:
        return GenerationConfig.from_pretrained(str(resolve_model_path(config.model)))
    except OSError:
        return None


def resolve_model_info(config: InfercoreConfig) -> ModelInfo:
    """Work out max_model_len, vocab size and stop ids from the HF config without loading weights.

    Sets ``config.model.max_model_len`` when the user left it unset.
    """
    from infercore.models.loader import get_hf_config

    hf = get_hf_config(config.model)
    text = getattr(hf, "get_text_config", lambda: hf)()
    derived = int(getattr(text, "max_position_embeddings", 0) or 0) or 2048
    requested = config.model.max_model_len
    if requested is None:
        config.model.max_model_len = derived
    elif requested > derived:
        raise ValueError(
            f"max_model_len={requested} is larger than the model's max_position_embeddings={derived}; "
            f"lower --max-model-len to at most {derived}"
        )
    gen = _generation_config(config)
    stop_ids = _eos_ids(getattr(gen, "eos_token_id", None)) if gen is not None else []
    eos = _eos_ids(getattr(text, "eos_token_id", None))
    eos_token_id = stop_ids[0] if stop_ids else (eos[0] if eos else None)
    return ModelInfo(
        max_model_len=int(config.model.max_model_len or derived),
        vocab_size=int(text.vocab_size),
        eos_token_id=eos_token_id,
        generation_stop_ids=sorted(set(stop_ids + eos)),
    )


def attends_images_whole(config: InfercoreConfig) -> bool:
    """Whether the served model's image tokens see their whole image (``bidirectional_image_spans``, Gemma 3):
    the scheduler then never splits an image across steps (:mod:`infercore.scheduler.image_spans`)."""
    from infercore.attention.visible_bounds import needs_visible_bounds
    from infercore.models.loader import get_hf_config
    from infercore.plugins import get_plugin_manager

    architectures = getattr(get_hf_config(config.model), "architectures", None) or []
    registry = get_plugin_manager().registry("model")
    if not architectures or architectures[0] not in registry:
        return False
    return needs_visible_bounds(registry.load(architectures[0]))
