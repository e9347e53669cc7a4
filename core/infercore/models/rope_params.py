"""Reads rotary settings from a HF config, whichever transformers version wrote it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from transformers import PretrainedConfig


@dataclass(frozen=True)
class RopeSettings:
    """Base (theta), the scaling dict in HF's format (or None) and the rotated fraction of each head."""

    base: float
    scaling: dict[str, Any] | None
    partial_rotary_factor: float


def rope_settings(hf_config: PretrainedConfig) -> RopeSettings:
    """transformers 5 keeps everything in ``rope_parameters``; older releases use ``rope_theta`` and
    ``rope_scaling``. Both are read; ``rope_parameters`` wins when present."""
    params = getattr(hf_config, "rope_parameters", None)
    if not isinstance(params, dict) or not params:
        params = dict(getattr(hf_config, "rope_scaling", None) or {})
    base = params.get("rope_theta") or getattr(hf_config, "rope_theta", None) or 10000.0
    partial = params.get("partial_rotary_factor") or getattr(hf_config, "partial_rotary_factor", None) or 1.0
    scaling = {k: v for k, v in params.items() if k not in ("rope_theta", "partial_rotary_factor")}
    return RopeSettings(float(base), scaling or None, float(partial))
