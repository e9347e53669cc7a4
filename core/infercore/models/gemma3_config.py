"""Which Gemma 3 layers slide and which rotary settings each uses, from any transformers version's config.

Layer kinds come from ``layer_types`` or, in older configs, ``sliding_window_pattern`` (every
``pattern``-th layer is global). Rotary settings: transformers 5 keeps one ``rope_parameters``
dict per layer kind; older configs give the global layers ``rope_theta`` / ``rope_scaling`` and
the sliding ones ``rope_local_base_freq`` without scaling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from transformers import PretrainedConfig

from infercore.models.rope_params import RopeSettings, rope_settings

SLIDING = "sliding_attention"
FULL = "full_attention"
#: Gemma 3's default: five sliding layers, then one global layer.
_DEFAULT_PATTERN = 6


@dataclass(frozen=True)
class Gemma3LayerSettings:
    """One decoder layer's attention window (None = global) and rotary settings."""

    sliding_window: int | None
    rope: RopeSettings


def gemma3_layer_types(config: PretrainedConfig) -> list[str]:
    """``"sliding_attention"`` or ``"full_attention"`` for each layer."""
    types = getattr(config, "layer_types", None)
    if types:
        if len(types) != config.num_hidden_layers:
            raise ValueError(f"layer_types names {len(types)} layers but num_hidden_layers is "
                             f"{config.num_hidden_layers}; give one entry per layer")
        unknown = sorted(set(types) - {SLIDING, FULL})
        if unknown:
            raise ValueError(f"layer_types has unknown kinds {unknown}; use {SLIDING!r} or {FULL!r}")
        return list(types)
    pattern = (getattr(config, "sliding_window_pattern", None) or getattr(config, "_sliding_window_pattern", None)
               or _DEFAULT_PATTERN)
    return [FULL if (i + 1) % pattern == 0 else SLIDING for i in range(config.num_hidden_layers)]


def _settings_of(params: dict[str, Any]) -> RopeSettings:
    scaling = {k: v for k, v in params.items() if k not in ("rope_theta", "partial_rotary_factor")}
    if scaling.get("rope_type", scaling.get("type")) == "default":
        scaling = {}
    return RopeSettings(float(params.get("rope_theta") or 10000.0), scaling or None,
                        float(params.get("partial_rotary_factor") or 1.0))


def gemma3_rope_by_kind(config: PretrainedConfig) -> dict[str, RopeSettings]:
    """Rotary settings of sliding and of global layers."""
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict) and (SLIDING in params or FULL in params):
        return {kind: _settings_of(dict(params.get(kind) or {})) for kind in (SLIDING, FULL)}
    local_base = float(getattr(config, "rope_local_base_freq", None) or 10000.0)
    return {SLIDING: RopeSettings(local_base, None, 1.0), FULL: rope_settings(config)}


def gemma3_layer_settings(config: PretrainedConfig) -> list[Gemma3LayerSettings]:
    """The window and rotary settings of every decoder layer, in order."""
    window = getattr(config, "sliding_window", None)
    rope = gemma3_rope_by_kind(config)
    return [Gemma3LayerSettings(window if kind == SLIDING else None, rope[kind])
            for kind in gemma3_layer_types(config)]
