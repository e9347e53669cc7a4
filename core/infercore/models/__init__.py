"""Built-in model architectures and the loader that builds them from a HF model folder.

The names below load on first use, so that importing a light submodule (``infercore.models.multimodal``, which the
front end needs) does not import the loader and every layer with it."""

from __future__ import annotations

from infercore.lazy_names import lazy_getattr

_NAMES = {"resolve_dtype": "infercore.models.dtype", "get_hf_config": "infercore.models.hf_config",
          "resolve_model_path": "infercore.models.model_folder", "load_model": "infercore.models.loader",
          "model_class": "infercore.models.loader"}

__all__ = sorted(_NAMES)

__getattr__ = lazy_getattr(__name__, _NAMES)
