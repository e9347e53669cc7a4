"""Configuration of image inputs: how many per prompt, where they may come from, how big, and the caches."""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class MultiModalConfig(BaseSettings):
    """Images in prompts (vision-language models): limits, media sources, the processed-input cache and the
    scheduler's encoder budget."""

    model_config = SettingsConfigDict(env_prefix="INFERCORE_", extra="forbid", validate_assignment=True)

    limit_mm_per_prompt: dict[str, int] | str | None = Field(
        None, description='JSON object of the most items per prompt by modality, e.g. {"image": 2} '
        "(default: 4 images; 0 turns images off)")
    mm_processor_cache_mb: int = Field(
        256, ge=0, description="MiB of processed images (pixel tensors) the front end keeps, keyed by content "
        "hash, so a repeated image is not decoded and processed again (0: no cache)")
    max_num_encoder_input_tokens: int | None = Field(
        None, ge=1, description="image tokens the vision tower may encode per step (default: the step's "
        "token budget); an image over it still runs, alone")
    allowed_local_media_path: str | None = Field(
        None, description="folder whose files requests may name as file:// image URLs (default: none may)")
    enable_remote_media: bool = Field(
        False, description="fetch http(s) image URLs named in requests (off: only data: URIs and allowed files)")
    media_fetch_timeout: float = Field(10.0, gt=0, description="seconds to fetch one remote image")
    max_media_bytes: int = Field(20 * 1024 * 1024, ge=1, description="largest encoded image accepted, in bytes")
    max_image_pixels: int = Field(
        50_000_000, ge=1, description="largest image accepted, in pixels (width x height), checked before decoding")

    @field_validator("limit_mm_per_prompt", mode="before")
    @classmethod
    def _parse_limits(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise ValueError('limit_mm_per_prompt must be a JSON object such as {"image": 2}') from None
        if value is not None and (not isinstance(value, dict)
                                  or not all(isinstance(v, int) and v >= 0 for v in value.values())):
            raise ValueError('limit_mm_per_prompt must map modalities to counts >= 0, e.g. {"image": 2}')
        return value

    def limit(self, modality: str) -> int:
        """The most items of ``modality`` one prompt may carry."""
        limits = self.limit_mm_per_prompt
        if isinstance(limits, dict) and modality in limits:
            return int(limits[modality])
        return 4 if modality == "image" else 0
