"""The quantization config of the model being built, read by its layers as they are created.

Models build their layers without naming a format; the loader sets the checkpoint's config around
construction (as it sets the dtype and device), and each linear layer asks here for its method.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from infercore.quantization.base import QuantizationConfig, QuantizationMethod

_current: QuantizationConfig | None = None


@contextmanager
def building_with(config: QuantizationConfig | None) -> Iterator[None]:
    """Layers created inside this block take their methods from ``config`` (None: unquantized)."""
    global _current
    previous, _current = _current, config
    try:
        yield
    finally:
        _current = previous


def current_quantization() -> QuantizationConfig | None:
    """The config of the model being built (None outside a build or for an unquantized model)."""
    return _current


def linear_method_for(prefix: str = "") -> QuantizationMethod:
    """The method a linear layer named ``prefix`` gets in the model being built."""
    from infercore.quantization.unquantized import UnquantizedLinearMethod

    if _current is None or (prefix and _current.is_ignored(prefix)):
        return UnquantizedLinearMethod()
    return _current.linear_method(prefix)
