"""Which quantization format a model runs with: the checkpoint's ``quantization_config`` and ``--quantization``."""

from __future__ import annotations

from typing import Any

from infercore.quantization.base import QuantizationConfig


def checkpoint_quantization(hf_config: Any) -> dict[str, Any] | None:
    """The checkpoint's ``quantization_config`` as a dict (None when it has none)."""
    raw = getattr(hf_config, "quantization_config", None)
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raw = raw.to_dict() if hasattr(raw, "to_dict") else dict(vars(raw))
    if not raw.get("quant_method"):
        raise ValueError("the checkpoint's quantization_config names no quant_method; add it (e.g. \"fp8\") to "
                         "config.json")
    return raw


def quantization_names() -> list[str]:
    """The formats the installed plugins registered."""
    from infercore.plugins import get_plugin_manager

    return get_plugin_manager().registry("quantization_method").names()


def resolve_quantization(requested: str | None, hf_config: Any) -> QuantizationConfig | None:
    """The format to build the model with (None: unquantized).

    ``requested`` (``--quantization``) must agree with a quantized checkpoint's ``quant_method``; given
    for an unquantized checkpoint, the format quantizes the weights as they load (if it can).
    """
    from infercore.plugins import get_plugin_manager

    checkpoint = checkpoint_quantization(hf_config)
    found = str(checkpoint["quant_method"]) if checkpoint else None
    if requested and found and requested != found:
        raise ValueError(f"--quantization {requested} does not match the checkpoint, which is quantized with "
                         f"{found!r}; leave --quantization unset or set it to {found}")
    name = requested or found
    if name is None:
        return None
    registry = get_plugin_manager().registry("quantization_method")
    if name not in registry:
        raise ValueError(f"quantization method {name!r} is not supported; supported: "
                         f"{', '.join(registry.names()) or 'none'}. A plugin adds one through its "
                         "register_quantization_methods hook")
    config_cls = registry.load(name)
    return config_cls.from_checkpoint(checkpoint)
