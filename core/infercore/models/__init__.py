"""Built-in model architectures and the loader that builds them from a HF model folder.

The names below load on first use, so that importing a light submodule (``infercore.models.multimodal``, which the
front end needs) does not import the loader and every layer with it."""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {"resolve_dtype": "infercore.models.dtype", "get_hf_config": "infercore.models.hf_config",
          "resolve_model_path": "infercore.models.hf_config", "load_model": "infercore.models.loader",
          "model_class": "infercore.models.loader"}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'infercore.models' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
